"""C functions that their own objects name badly are shown by the name cProfile gives
them, in pytrace-top --json and in every export (collapsed, Chrome, speedscope,
Perfetto, the HTML report), and pstats keeps cProfile's label for them.

Such a function is bound to an object whose type does not define it: pybind11 binds
every function to its function record, whose type is
pybind11_builtins.pybind11_detail_function_record_v1_..., so its __qualname__ is that
type's name and the function's; cProfile (Modules/_lsprof.c normalizeUserObj) finds no
such method on that type and names it by the module it says it is from:
`<built-in method torch._C._jit_get_operation>`, shown by pytrace as
`torch._C._jit_get_operation`. The standard library has one too: a thread-local's
weakref callback (`_thread._local`), whose __module__ is None and whose self is a weakref
(3.11-3.13: cProfile's `<built-in method _localdummy_destroyed>`) or a tuple (3.14+:
`<built-in method clear_locals>`). A pybind11 function without a name
(torch.ops overloads: cProfile's `torch._ops.aten.`) reads `torch._ops.aten.<unnamed>`."""

import json
import os
import subprocess
import sys

import pytest

from pftrace_reader import read_trace, slice_counts
from topkit import TOP

STDLIB = r"""
import _thread, gc, sys, weakref
local = _thread._local()
local.x = 1
# the thread-local's weakref callback, a C function with no module, bound to an object whose
# type does not define it: 3.11-3.13 _localdummy_destroyed bound to a weakref, 3.14+
# clear_locals bound to a tuple (Modules/_threadmodule.c)
def find(o, depth=0, seen=set()):
    if id(o) in seen or depth > 3:
        return None
    seen.add(id(o))
    if isinstance(o, weakref.ref) and type(o.__callback__).__name__ == "builtin_function_or_method":
        return o.__callback__
    for r in gc.get_referents(o):
        found = find(r, depth + 1)
        if found is not None:
            return found
callback = find(local)
assert callback is not None and callback.__module__ is None, callback
class Gone: pass
gone = Gone()
callback(weakref.ref(gone))                       # not one of the local's threads: harmless
print(callback.__name__, type(callback.__self__).__name__, file=sys.stderr)
"""

TORCH = r"""
import torch
x = torch.ones(3)
torch._C._jit_get_operation("aten::sub")
torch.ops.aten.mul.Tensor(x, x)
"""


def _record(tmp_path, source, *include, stderr=None):
    prog = tmp_path / "prog.py"
    prog.write_text(source)
    rec = tmp_path / "rec.pytrace"
    only = [a for m in include for a in ("--include", m)]
    r = subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", str(rec), "--no-subprocesses", *only,
                        "--", sys.executable, str(prog)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    if stderr is not None:
        stderr.append(r.stderr)
    return rec


def _export(rec, fmt, out):
    r = subprocess.run([sys.executable, "-m", "pytrace", "export", str(rec), "--format", fmt, "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def _names_everywhere(rec, tmp_path):
    """{view: set of function names} for pytrace-top --json and every export."""
    r = subprocess.run([TOP, "--file", str(rec), "--once", "--json", "--limit", "1000000"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    views = {"top": {f["name"] for f in json.loads(r.stdout)["functions"]}}
    collapsed = _export(rec, "collapsed", tmp_path / "c.folded")
    views["collapsed"] = {frame for line in open(collapsed) for frame in line.rsplit(" ", 1)[0].split(";")}
    chrome = json.load(open(_export(rec, "chrome", tmp_path / "c.json")))
    views["chrome"] = {e["name"] for e in (chrome["traceEvents"] if isinstance(chrome, dict) else chrome)
                       if e.get("ph") in ("B", "X")}
    speedscope = json.load(open(_export(rec, "speedscope", tmp_path / "s.json")))
    views["speedscope"] = {f["name"] for f in speedscope["shared"]["frames"]}
    _tracks, _procs, slices, _instants, _n, _b = read_trace(str(_export(rec, "perfetto", tmp_path / "t.pftrace")))
    views["perfetto"] = {k if isinstance(k, str) else k[0] for k in slice_counts(slices)}
    page = _export(rec, "html", tmp_path / "r.html").read_text()
    views["html"] = page
    return views


def _labels(rec, tmp_path):
    import pstats
    return {name for (file, _line, name) in pstats.Stats(str(_export(rec, "pstats", tmp_path / "p.pstats"))).stats
            if file == "~"}


def _check(rec, tmp_path, expected, odd):
    """Each expected name (cProfile's label without its "<built-in method >") in every
    view; no view shows a name with `odd` in it."""
    views = _names_everywhere(rec, tmp_path)
    labels = _labels(rec, tmp_path)
    for name, label in expected.items():
        assert label in labels, (label, sorted(labels)[:50])
        for view, names in views.items():
            if view == "html":
                # the report's data is JSON inside the page: its string form of the name
                assert json.dumps(name) in names or json.dumps(name).replace("<", "\\u003c").replace(
                    ">", "\\u003e") in names, (view, name)
            else:
                assert name in names, (view, name, sorted(n for n in names if name.split(".")[-1] in n))
    for view, names in views.items():
        text = names if view == "html" else "\n".join(names)
        assert odd not in text, (view, odd)


def test_stdlib_c_function_bound_to_a_foreign_object_is_named_as_cprofile_names_it(tmp_path):
    err = []
    rec = _record(tmp_path, STDLIB, stderr=err)
    # what the program found: the callback's name and the type of the object it is bound to
    name, bound_to = [line for line in err[0].splitlines() if not line.startswith("pytrace")][-1].split()
    _check(rec, tmp_path, {name: "<built-in method %s>" % name}, "%s.%s" % (bound_to, name))


def test_pybind11_functions_are_named_as_cprofile_names_them(tmp_path):
    pytest.importorskip("torch")
    # the program and the torch module that calls an op's function (torch.ops: OpOverload.__call__),
    # not all of torch's import
    rec = _record(tmp_path, TORCH, str(tmp_path), "torch._ops")
    _check(rec, tmp_path, {"torch._C._jit_get_operation": "<built-in method torch._C._jit_get_operation>",
                           "torch._ops.aten.<unnamed>": "<built-in method torch._ops.aten.>"},
           "pybind11_detail_function_record")
