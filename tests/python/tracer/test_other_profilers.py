"""The traced program's own profilers run as they would untraced (issue 9, items 8 and 9).

- 3.12+: pytrace takes sys.monitoring tool id 3 or 4, so cProfile (PROFILER_ID), coverage
  (COVERAGE_ID or sys.settrace) and pytrace all run at once, and all of them see every call.
  With both free ids taken, nothing is traced and start()/stop() say so.
- 3.10/3.11 with PyEval_SetProfile: a thread has one profile slot. The program's own
  profile function (sys.setprofile, cProfile, threading.setprofile) keeps it and runs as
  untraced; the thread is then not traced, and that is counted (tracing_displaced) and
  shown by stop(), `pytrace record`, `pytrace export` and pytrace-top. With the
  frame-evaluation hook (3.11, --no-c-calls) both run and nothing is displaced.

Every run is compared with the same program run untraced: same output (which includes
cProfile's call counts and the program's profile function's counts), same exit status.
"""

import json
import os
import pstats
import subprocess
import sys
import textwrap

import pytest

pytrace = pytest.importorskip("pytrace")
try:
    from pytrace import _pytrace  # noqa: F401
except ImportError:
    pytest.skip("the _pytrace extension is not built", allow_module_level=True)

from helpers import expected_hook  # noqa: E402
from topkit import TOP  # noqa: E402

PY = sys.executable
MONITORING = sys.version_info >= (3, 12)


def _displaces(c_calls):
    """Does a program's own profile function take the thread from pytrace?"""
    return expected_hook(c_calls) == "PyEval_SetProfile"


def _run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def _record(tmp_path, command, c_calls=True, name="rec.pytrace", env=None):
    rec = tmp_path / name
    args = [PY, "-m", "pytrace", "record", "-o", str(rec)]
    if not c_calls:
        args.append("--no-c-calls")
    proc = _run(args + ["--"] + command, env=env)
    return proc, rec


def _recorded_stats(tmp_path, rec):
    """The recording's pstats export (as pstats.Stats(...).stats) and export's stderr."""
    out = tmp_path / (rec.name + ".pstats")
    proc = _run([PY, "-m", "pytrace", "export", str(rec), "-f", "pstats", "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    return pstats.Stats(str(out)).stats, proc.stderr


def _recorded_calls(tmp_path, rec, func):
    """Calls of `func` in a recording, through the pstats export."""
    stats, err = _recorded_stats(tmp_path, rec)
    return sum(v[1] for k, v in stats.items() if k[2] == func), err


def _top_json(rec):
    assert TOP is not None, "pytrace-top is not built (PYTRACE_BUILD_DIR) nor installed"
    proc = _run([TOP, "--file", str(rec), "--once", "--json"])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


PROFILED = textwrap.dedent("""
    import cProfile, json, pstats, sys, tempfile, os, time

    def known(i):
        return i * 2

    def work(n):
        return sum(known(i) for i in range(n))

    def count(stats):
        return sum(v[1] for k, v in stats.stats.items() if k[2] == "known")

    out = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.prof")
        cProfile.run("work(3000)", path)              # cProfile.run
        out["run"] = count(pstats.Stats(path))
    prof = cProfile.Profile()                          # Profile.enable / disable
    prof.enable()
    out["result"] = work(4000)
    prof.disable()
    out["enable"] = count(pstats.Stats(prof))
    out["after"] = work(500)                           # after the program's profiler
    time.sleep(0.6)
    print(json.dumps(out, sort_keys=True))
    sys.exit(3)
""")


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_cprofile_in_traced_program_counts_as_untraced(tmp_path, c_calls):
    prog = tmp_path / "profiled.py"
    prog.write_text(PROFILED)
    plain = _run([PY, str(prog)])
    assert plain.returncode == 3, plain.stderr
    assert json.loads(plain.stdout) == {"run": 3000, "enable": 4000, "result": 15996000,
                                        "after": 249500}, plain.stdout

    traced, rec = _record(tmp_path, [PY, str(prog)], c_calls=c_calls)
    assert "Another profiling tool is already active" not in traced.stderr, traced.stderr
    assert traced.returncode == plain.returncode, traced.stderr
    assert traced.stdout == plain.stdout, traced.stderr        # cProfile's counts included

    stats, export_err = _recorded_stats(tmp_path, rec)
    recorded = sum(v[1] for k, v in stats.items() if k[2] == "known")
    (module_cumtime,) = [v[3] for k, v in stats.items() if k[0] == str(prog) and k[2] == "<module>"]
    top = _top_json(rec)
    if _displaces(c_calls):
        # cProfile.run took the main thread's profile slot: from there on, pytrace
        # traces nothing of it, and every tool says so with the same count.
        assert recorded == 0
        # its open frames were closed then, not left running to the end (the sleep)
        assert module_cumtime < 0.6, module_cumtime
        assert top["tracing_displaced"] == 1, top
        assert "1 thread displaced by the program's own profiler" in traced.stderr, traced.stderr
        assert "1 thread displaced by the program's own profiler" in export_err, export_err
    else:
        assert recorded == 3000 + 4000 + 500
        assert module_cumtime >= 0.6, module_cumtime
        assert top["tracing_displaced"] == 0, top
        assert "displaced" not in traced.stderr + export_err


def _coverage_lines(data_file, prog):
    import coverage  # noqa: F401  (.ci/install.sh installs it)
    out = str(data_file) + ".json"
    proc = _run([PY, "-m", "coverage", "json", "--data-file", str(data_file), "-o", out,
                 "--include", str(prog)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out) as f:
        files = json.load(f)["files"]
    (entry,) = files.values()
    return entry["executed_lines"], entry["missing_lines"]


CORES = ["ctrace", "sysmon"] if MONITORING else ["ctrace"]


@pytest.mark.parametrize("core", CORES)
def test_coverage_cprofile_and_pytrace_together(tmp_path, core):
    """coverage runs the program, which uses cProfile, all traced by pytrace: coverage's
    lines and cProfile's counts are those of the untraced run."""
    pytest.importorskip("coverage", reason="pip install coverage (.ci/install.sh does)")
    prog = tmp_path / "profiled.py"
    prog.write_text(PROFILED)
    env = dict(os.environ, COVERAGE_CORE=core)
    plain = _run([PY, "-m", "coverage", "run", "--data-file", str(tmp_path / "plain.cov"),
                  str(prog)], env=env)
    assert plain.returncode == 3, plain.stderr
    traced, rec = _record(tmp_path, [PY, "-m", "coverage", "run", "--data-file",
                                     str(tmp_path / "traced.cov"), str(prog)], env=env)
    assert "Another profiling tool is already active" not in traced.stderr, traced.stderr
    assert traced.returncode == 3, traced.stderr
    assert traced.stdout == plain.stdout, traced.stderr
    want = _coverage_lines(tmp_path / "plain.cov", prog)
    assert want[0] and not want[1], want
    assert _coverage_lines(tmp_path / "traced.cov", prog) == want
    if MONITORING:
        recorded, _ = _recorded_calls(tmp_path, rec, "known")
        assert recorded == 3000 + 4000 + 500


SETPROFILE = textwrap.dedent("""
    import json, sys, threading
    import pytrace

    def f(i):
        return i

    seen = {"calls": 0, "thread": 0}

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is f.__code__:
            seen["calls"] += 1

    def thread_prof(frame, event, arg):
        if event == "call" and frame.f_code is f.__code__:
            seen["thread"] += 1

    mode = sys.argv[1]
    if mode == "during":               # the program sets its profiler while traced
        for i in range(1000):
            f(i)
        sys.setprofile(prof)
        for i in range(7000):
            f(i)
        sys.setprofile(None)
    elif mode == "before":             # its profiler already runs when tracing starts
        sys.setprofile(prof)
    elif mode == "threading":          # threading.setprofile before tracing starts
        threading.setprofile(thread_prof)

    if mode in ("before", "threading", "threading_after"):
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pytrace.start(c_calls=sys.argv[2] == "1")
        for i in range(700):
            f(i)
        if mode == "threading_after":        # replaces pytrace's hook while traced
            threading.setprofile(thread_prof)
        if mode != "before":
            t = threading.Thread(target=lambda: [f(i) for i in range(300)])
            t.start()
            t.join()
        if mode == "threading_after":        # and then no hook at all
            threading.setprofile(None)
            t = threading.Thread(target=lambda: [f(i) for i in range(30)])
            t.start()
            t.join()
        if mode == "before":
            sys.setprofile(None)
        start_warnings = [str(w.message) for w in caught]
    else:
        start_warnings = []
    c = pytrace.stop() if pytrace.is_tracing() else None
    print(json.dumps({"seen": seen}))
    print(json.dumps({"displaced": c and c.tracing_displaced, "hook_errors": c and c.hook_errors,
                      "first_error": c and c.first_error, "start_warnings": start_warnings}),
          file=sys.stderr)
""")


def _counters(stderr):
    for line in reversed(stderr.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no counters in: " + stderr)


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_program_setprofile_runs_and_displacement_is_counted(tmp_path, c_calls):
    """The program's sys.setprofile while traced: its function sees every call (as
    untraced); where it takes pytrace's slot, the thread is counted displaced by every
    tool, else pytrace records every call."""
    prog = tmp_path / "setprofile.py"
    prog.write_text(SETPROFILE)
    plain = _run([PY, str(prog), "during"])
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == {"seen": {"calls": 7000, "thread": 0}}

    traced, rec = _record(tmp_path, [PY, str(prog), "during"], c_calls=c_calls)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout, traced.stderr
    counters = _counters(traced.stderr)
    recorded, export_err = _recorded_calls(tmp_path, rec, "f")
    top = _top_json(rec)
    want = 1 if _displaces(c_calls) else 0
    assert counters["displaced"] == want, counters
    assert top["tracing_displaced"] == want, top
    assert counters["hook_errors"] == 0, counters
    if want:
        assert "sys.setprofile" in counters["first_error"], counters
        assert recorded == 1000                 # what came before the program's profiler
        for text in (traced.stderr, export_err):
            assert "1 thread displaced by the program's own profiler" in text, text
    else:
        assert recorded == 8000
        assert "displaced" not in export_err


@pytest.mark.parametrize("mode,want_seen", [("before", {"calls": 700, "thread": 0}),
                                            ("threading", {"calls": 0, "thread": 300}),
                                            ("threading_after", {"calls": 0, "thread": 300})])
def test_program_profiler_set_before_start_is_left_alone(tmp_path, mode, want_seen):
    """A profile function the program set before pytrace.start() (on a running thread,
    or for new threads with threading.setprofile) keeps running; the thread it holds
    is counted as displaced where pytrace would have needed the slot. threading.setprofile
    while traced: the thread started with the program's hook is displaced, and the hook's
    replacement is a hook error (a thread started with no hook at all is not seen)."""
    prog = tmp_path / "setprofile.py"
    prog.write_text(SETPROFILE)
    for c_calls in (True, False):
        proc = _run([PY, str(prog), mode, "1" if c_calls else "0"])
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {"seen": want_seen}, (c_calls, proc.stdout)
        counters = _counters(proc.stderr)
        want = 1 if _displaces(c_calls) else 0
        assert counters["displaced"] == want, (c_calls, counters)
        if want and mode == "before":
            # said at start(), not only at stop()
            assert any("already runs the program's own profile function" in w
                       for w in counters["start_warnings"]), counters
        if want and mode == "threading":
            assert "threading.setprofile" in counters["first_error"], counters
        assert counters["hook_errors"] == (want if mode == "threading_after" else 0), counters


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")
def test_no_free_tool_id_traces_nothing_and_says_so(tmp_path):
    prog = tmp_path / "ids.py"
    prog.write_text(textwrap.dedent("""
        import json, sys, warnings
        sys.monitoring.use_tool_id(3, "other3")
        sys.monitoring.use_tool_id(4, "other4")
        import pytrace
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pytrace.start()
            def f():
                return 1
            print(sum(f() for _ in range(100)))
            c = pytrace.stop()
        print(json.dumps({"hook": c.hook, "hook_errors": c.hook_errors,
                          "first_error": c.first_error,
                          "warnings": [str(w.message) for w in caught],
                          "tools": [sys.monitoring.get_tool(i) for i in range(6)]}))
    """))
    proc = _run([PY, str(prog)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "100"
    out = json.loads(lines[1])
    assert out["hook"] == "" and out["hook_errors"] == 1, out
    assert "tool ids 3 and 4 are both taken (by 'other3' and 'other4')" in out["first_error"]
    assert len(out["warnings"]) == 2 and "nothing is traced" in out["warnings"][0], out
    assert out["tools"] == [None, None, None, "other3", "other4", None], out
