"""pstats exports key functions exactly as cProfile does (issue 10, item 5).

Each program runs twice: under cProfile (`python -m cProfile -o`) and under
`pytrace record` + `pytrace export --format pstats`. The two runs start differently
(cProfile profiles the imports its own launcher does not make; pytrace's launcher has
made some already), so call counts are compared where the program runs the same way
under both: the calls made by the program's own functions (not their module code).

- Every Python function pytrace traced that cProfile also saw (same file and first
  line) has cProfile's key (file, first line, co_name), not a qualname.
- Every call edge from the program's own functions, to Python and C functions alike,
  is in both files under the same caller and callee keys with the same call counts:
  C functions carry cProfile's label ("<built-in method builtins.len>",
  "<method 'append' of 'list' objects>", "<built-in method fromkeys>", ...).
- The program's own functions (those only it calls) have the same keys, call counts
  and callers in both, also when a C function calls them (map, max, sum).
- `pytrace export --qualnames` keys by pytrace's qualified names instead.

A label holding an object's address ("<function Hexed.hex at 0x...>") is the same repr
in both runs with each process's own address, so addresses are compared as "0x".
"""

import collections
import json
import os
import pstats
import re
import subprocess
import sys

import pytest

pytest.importorskip("pytrace")

from helpers import corpus  # noqa: E402

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
MIXED = os.path.join(HERE, "..", "..", "..", "bench", "overhead_child.py")
JSON_DIR = os.path.dirname(json.__file__)
_ADDR = re.compile(r" at 0x[0-9a-f]+>$")


def _run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def _norm(key):
    return (key[0], key[1], _ADDR.sub(" at 0x>", key[2]))


def _load(path):
    """pstats.Stats of a file, with addresses in keys (and caller keys) normalised."""
    out = {}
    for k, (cc, nc, tt, ct, callers) in pstats.Stats(str(path)).stats.items():
        out[_norm(k)] = (cc, nc, {_norm(c): v for c, v in callers.items()})
    return out


def _profile_both(tmp_path, args, name, qualnames=False):
    """(cProfile's stats, pytrace's stats, both programs' stdout) of `python ARGS`."""
    cp_file = tmp_path / (name + ".cprofile")
    cp = _run([PY, "-m", "cProfile", "-o", str(cp_file)] + args, cwd=str(tmp_path))
    assert cp.returncode == 0, cp.stderr[-3000:]
    rec = tmp_path / (name + ".pytrace")
    pt = _run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY] + args, cwd=str(tmp_path))
    assert pt.returncode == 0, pt.stderr[-3000:]
    assert ", 0 events dropped," in pt.stderr
    out = tmp_path / (name + ".pstats")
    exp = _run([PY, "-m", "pytrace", "export", str(rec), "-f", "pstats", "-o", str(out)]
               + (["--qualnames"] if qualnames else []))
    assert exp.returncode == 0, exp.stderr
    return _load(cp_file), _load(out), cp.stdout, pt.stdout


def _own_edges(stats, own):
    """{(caller, callee): (nc, cc)} for every call made by an own function."""
    edges = {}
    for callee, (_, _, callers) in stats.items():
        for caller, v in callers.items():
            if own(caller):
                edges[(caller, callee)] = v[:2]
    return edges


def _compare(cp, pt, own, whole):
    """Assert pytrace's keys are cProfile's: everywhere for Python functions both saw,
    for the calls made by `own` functions, and for `whole` functions with every call
    to them. Returns figures for the callers' checks."""
    # Python functions seen by both (same file and first line): the same names.
    cp_names, pt_names = collections.defaultdict(set), collections.defaultdict(set)
    for f, line, name in cp:
        if f != "~":
            cp_names[(f, line)].add(name)
    for f, line, name in pt:
        if f != "~":
            pt_names[(f, line)].add(name)
    both = cp_names.keys() & pt_names.keys()
    wrong = {fl: (sorted(pt_names[fl]), sorted(cp_names[fl])) for fl in both
             if not pt_names[fl] <= cp_names[fl]}
    assert not wrong, "Python functions keyed differently (pytrace, cProfile): %s" % sorted(wrong.items())[:10]

    # Calls from the program's own functions: same keys, same counts, both ways.
    cp_edges, pt_edges = _own_edges(cp, own), _own_edges(pt, own)
    missing = sorted(set(cp_edges) - set(pt_edges), key=str)
    extra = sorted(set(pt_edges) - set(cp_edges), key=str)
    assert not missing and not extra, (
        "calls from own code only cProfile has: %s\nonly pytrace has: %s" % (missing[:20], extra[:20]))
    counts = {e: (cp_edges[e], pt_edges[e]) for e in cp_edges if cp_edges[e] != pt_edges[e]}
    assert not counts, "call counts differ (cProfile, pytrace): %s" % sorted(counts.items(), key=str)[:20]
    c_callees = {callee for _, callee in cp_edges if callee[0] == "~"}
    py_callees = {callee for _, callee in cp_edges if callee[0] != "~"}

    # Functions only the program calls: present in both with the same counts and callers.
    cp_whole = {k: v for k, v in cp.items() if whole(k)}
    pt_whole = {k: v for k, v in pt.items() if whole(k)}
    assert sorted(cp_whole) == sorted(pt_whole)
    differ = {k: (cp_whole[k], pt_whole[k]) for k in cp_whole
              if cp_whole[k][:2] != pt_whole[k][:2]
              or {c: v[:2] for c, v in cp_whole[k][2].items()} != {c: v[:2] for c, v in pt_whole[k][2].items()}}
    assert not differ, "counts or callers differ (cProfile, pytrace): %s" % differ
    return len(both), c_callees, py_callees, set(cp_whole)


def test_keys_of_every_form_equal_cprofile(tmp_path):
    prog = corpus("cprofile_keys")
    cp, pt, cp_out, pt_out = _profile_both(tmp_path, [prog], "keys")
    assert cp_out == pt_out                       # the same program, the same result
    own = lambda k: k[0] == prog and k[2] != "<module>"   # noqa: E731
    _, c_callees, py_callees, whole = _compare(cp, pt, own, own)
    labels = {k[2] for k in c_callees}
    # 3.15 gives a builtin type's static methods a module (str.maketrans.__module__ is
    # 'builtins'), and cProfile names them with it
    maketrans = ("<built-in method maketrans>" if sys.version_info < (3, 15)
                 else "<built-in method builtins.maketrans>")
    # each form of cProfile's label (see the program's docstring) is among them
    for want in ("<built-in method builtins.len>", "<built-in method math.sqrt>",
                 "<method 'append' of 'list' objects>", "<method 'extend' of 'list' objects>",
                 "<method 'reverse' of 'list' objects>",
                 "<method 'append' of 'collections.deque' objects>",
                 "<method 'write' of '_io.StringIO' objects>", "<built-in method fromkeys>",
                 "<built-in method from_bytes>", maketrans,
                 "<function Hexed.hex at 0x>", "<built-in method __new__ of type object at 0x>"):
        assert want in labels, (want, sorted(labels))
    names = {k[2] for k in whole}
    assert {"add", "double", "make", "inner", "<lambda>", "squares", "hex", "main"} <= names, names
    # the generator: one call per resume, as cProfile counts it
    (squares,) = [k for k in cp if k[0] == prog and k[2] == "squares"]
    assert cp[squares][:2] == pt[squares][:2] == (7, 7)
    # list.append called on a subclass instance is list's append, not MyList's
    assert not [k for k in pt if k[0] == "~" and "MyList" in k[2]]


def test_keys_equal_cprofile_on_the_mixed_workload(tmp_path):
    cp, pt, _, _ = _profile_both(tmp_path, [MIXED, "untraced", "mixed", "1"], "mixed")
    bench_file = os.path.realpath(MIXED)

    def whole(k):
        return os.path.realpath(k[0]) == bench_file and k[2] != "<module>"

    def own(k):
        return whole(k) or (k[0].startswith(JSON_DIR + os.sep) and k[2] != "<module>")
    both, c_callees, py_callees, whole_keys = _compare(cp, pt, own, whole)
    assert both > 50 and len(c_callees) >= 10 and len(py_callees) >= 8, (both, c_callees, py_callees)
    assert {"mixed", "key", "as_dict", "<lambda>", "main"} <= {k[2] for k in whole_keys}
    labels = {k[2] for k in c_callees}
    assert {"<method 'finditer' of 're.Pattern' objects>", "<method 'sort' of 'list' objects>",
            "<built-in method builtins.sorted>", "<method 'group' of 're.Match' objects>"} <= labels, labels


def test_keys_equal_cprofile_on_json_tool(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"id": i, "tags": ["a", i % 7], "nested": {"x": [i, None, True, 1.5]}}
                                for i in range(300)]))
    cp, pt, cp_out, pt_out = _profile_both(tmp_path, ["-m", "json.tool", str(data)], "jsontool")
    assert cp_out == pt_out and cp_out.startswith("[")

    def own(k):
        return k[0].startswith(JSON_DIR + os.sep) and k[2] != "<module>"

    def whole(k):
        return k[0] == os.path.join(JSON_DIR, "tool.py") and k[2] != "<module>"
    both, c_callees, py_callees, whole_keys = _compare(cp, pt, own, whole)
    assert {k[2] for k in whole_keys} == {"main"}
    assert both > 50 and len(c_callees) >= 5 and py_callees, (both, c_callees, py_callees)
    # cProfile's names, not qualnames: JSONEncoder.iterencode is "iterencode"
    assert any(k[0].endswith(os.path.join("json", "encoder.py")) and k[2] == "iterencode" for k in pt)
    assert not [k for k in pt if k[2].endswith(".iterencode")]


def test_qualnames_option_keys_by_qualified_name(tmp_path):
    prog = corpus("cprofile_keys")
    _, pt, _, _ = _profile_both(tmp_path, [prog], "qual", qualnames=True)
    names = {k[2] for k in pt if k[0] == prog}
    if sys.version_info >= (3, 11):
        assert {"Counter.add", "Counter.make", "outer.<locals>.inner", "main.<locals>.<lambda>"} <= names, names
    else:                               # 3.10 has no co_qualname: the qualname is co_name
        assert {"add", "make", "inner", "<lambda>"} <= names, names
    c_names = {k[2] for k in pt if k[0] == "~"}
    assert {"<built-in method list.append>", "<built-in method list.reverse>",
            "<built-in method builtins.len>", "<built-in method bytearray.hex>"} <= c_names, sorted(c_names)
    # a C method is named after the type that defines it, whatever type it was first
    # called on (MyList().append, super().hex() in Hexed)
    assert not [n for n in c_names if "MyList" in n or "Hexed" in n], sorted(c_names)


def test_traced_script_has_the_code_filename_python_gives_it(tmp_path):
    """pstats keys hold code filenames: a script run as `python sub/../prog.py` keeps
    that path (absolute, not normalised) under pytrace as python gives it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "prog.py").write_text("import sys\nprint(sys._getframe().f_code.co_filename, __file__)\n")
    args = [os.path.join("sub", "..", "prog.py")]
    untraced = _run([PY] + args, cwd=str(tmp_path))
    traced = _run([PY, "-m", "pytrace", "run"] + args, cwd=str(tmp_path))
    assert untraced.returncode == traced.returncode == 0, traced.stderr
    assert traced.stdout == untraced.stdout
    assert "sub/../prog.py" in untraced.stdout


# ---- recordings made before Symbol.profile_name existed ------------------------------

def test_recording_without_profile_names_exports_cprofile_keys_it_can_derive(tmp_path):
    """A Symbol without profile_name (the 5-field form every older recording holds):
    co_name is the qualname's last part; a C function's label comes from its stored
    owner and module: exact for module functions and methods of their own type."""
    from pytrace import recording as rec
    from pytrace.export import main as export_main
    import synthetic as syn
    syms = [  # id, name, file, line, kind, profile_name
        (1, "main", "app.py", 1, 0, None),
        (2, "Klass.method.<locals>.inner", "app.py", 5, 0, None),
        (3, "builtins.len", "builtins", 0, 1, None),
        (4, "list.append", "builtins", 0, 1, None),
        (5, "_io.TextIOWrapper.write", "_io", 0, 1, None),
        (6, "time.sleep", "time", 0, 1, None),
        (7, "Klass.method", "app.py", 3, 0, "method"),            # new recordings: stored
        (8, "dict.fromkeys", "builtins", 0, 1, "<built-in method fromkeys>"),
    ]
    events, t = [], 0
    events.append((t, 1, 1))
    for sid in (2, 3, 4, 5, 6, 7, 8):
        kind_call, kind_ret = (1, 2) if syms[sid - 1][4] == 0 else (3, 4)
        events += [(t + 1, sid, kind_call), (t + 2, sid, kind_ret)]
        t += 2
    events.append((t + 1, 1, 2))
    path = tmp_path / "old.pytrace"
    w = rec.RecordingWriter(path, lossless=True)
    w.append(syn.process_info())
    for sid, name, file, line, kind, pname in syms:
        msg = syn.symbol(sid, name, file, line, kind=kind, profile_name=pname)
        assert rec.verify_message(msg) == 4
        w.append(msg)
    w.append(syn.thread_start(1))
    w.append(syn.event_chunk(1, events))
    w.append(syn.producer_status(state=3))
    w.close()
    out = tmp_path / "old.pstats"
    assert export_main([str(path), "-f", "pstats", "-o", str(out)]) == 0
    keys = set(pstats.Stats(str(out)).stats)
    assert keys == {("app.py", 1, "main"), ("app.py", 5, "inner"), ("app.py", 3, "method"),
                    ("~", 0, "<built-in method builtins.len>"),
                    ("~", 0, "<method 'append' of 'list' objects>"),
                    ("~", 0, "<method 'write' of '_io.TextIOWrapper' objects>"),
                    ("~", 0, "<built-in method time.sleep>"),
                    ("~", 0, "<built-in method fromkeys>")}
    assert export_main([str(path), "-f", "pstats", "--qualnames", "-o", str(out)]) == 0
    qual = set(pstats.Stats(str(out)).stats)
    assert ("app.py", 5, "Klass.method.<locals>.inner") in qual
    assert ("~", 0, "<built-in method dict.fromkeys>") in qual


def test_recording_verifier_checks_the_profile_name_string():
    """profile_name is a string the recording verifier bounds-checks like the others: a
    wild offset in it is damage, not a read outside the message."""
    from pytrace import recording as rec
    import synthetic as syn
    from pytrace.fb.Message import Message
    from pytrace.fb.Symbol import Symbol
    msg = bytearray(syn.symbol(3, "Klass.method", "app.py", 3, profile_name="method"))
    assert rec.verify_message(bytes(msg)) == 4
    body = Message.GetRootAs(bytes(msg), 4).Body()
    sym = Symbol()
    sym.Init(body.Bytes, body.Pos)
    at = sym._tab.Pos + sym._tab.Offset(14)          # field 5: vtable slot 4 + 2 * 5
    assert sym._tab.Offset(14) and sym.ProfileName() == b"method"
    msg[at:at + 4] = (0x7FFFFFF0).to_bytes(4, "little")
    with pytest.raises(ValueError, match="Symbol field 5"):
        rec.verify_message(bytes(msg))


def test_naming_a_c_function_runs_no_code_of_the_program(tmp_path):
    """cProfile names a C method by repr() of what type(self) holds under its name; when
    that is an object of the program's own with a __repr__, cProfile runs it inside its
    hook. pytrace does not: the program runs as untraced, and the function gets
    cProfile's fallback label."""
    prog = tmp_path / "weird.py"
    prog.write_text(
        "calls = []\n"
        "class Weird:\n"
        "    def __repr__(self):\n"
        "        calls.append(1)\n"
        "        return 'weird'\n"
        "class B(bytearray):\n"
        "    isalnum = Weird()\n"
        "def main():\n"
        "    return bytearray.isalnum(B(b'a'))\n"
        "print(main(), len(calls))\n")
    untraced = _run([PY, str(prog)])
    assert untraced.returncode == 0 and untraced.stdout == "True 0\n"
    rec = tmp_path / "weird.pytrace"
    traced = _run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(prog)])
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == untraced.stdout
    out = tmp_path / "weird.pstats"
    assert _run([PY, "-m", "pytrace", "export", str(rec), "-f", "pstats", "-o", str(out)]).returncode == 0
    (main,) = [k for k in _load(out) if k[0] == str(prog) and k[2] == "main"]
    called = {callee for callee, (_, _, callers) in _load(out).items() if main in callers}
    assert called == {("~", 0, "<built-in method isalnum>")}, called
