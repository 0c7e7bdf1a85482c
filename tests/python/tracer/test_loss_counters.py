"""Every loss counter is shown by every tool, with the same number (issue 9, item 12).

One run of a program that calls 100,000 distinct functions (more than the default symbol
log holds) under `pytrace record`: the symbols dropped that the program's own stop()
reports are the ones `record` prints in its summary, `export` in its note, and pytrace-top
(--file --once --json, and its text status) shows; `pytrace ls` shows them for a live job.
"""

import json
import re
import subprocess
import sys
import textwrap
import time

import pytest

pytrace = pytest.importorskip("pytrace")
try:
    from pytrace import _pytrace  # noqa: F401
except ImportError:
    pytest.skip("the _pytrace extension is not built", allow_module_level=True)

from topkit import TOP, Tmux  # noqa: E402

PY = sys.executable

MANY_FUNCTIONS = textwrap.dedent("""
    import json, os, sys, time
    import pytrace

    def template():
        return 1

    code = template.__code__
    def named(i):                             # a distinct code object per function
        names = {"co_name": "f%d" % i}
        if hasattr(code, "co_qualname"):      # 3.11+
            names["co_qualname"] = names["co_name"]
        return code.replace(**names)
    functions = [type(template)(named(i), {}) for i in range(100000)]
    for f in functions:
        f()
    hold = os.environ.get("HOLD")
    if hold:                                  # let `pytrace ls` look at the live job
        # Everything this branch calls is named once (warm) before the count is read.
        for final in (False, True):
            n = pytrace.counters().symbols_dropped
            with open(hold + ".tmp", "w") as f:
                f.write(str(n))
            os.path.exists(hold)
            time.sleep(0)
            os.rename(hold + ".tmp", hold + (".ready" if final else ".warm"))
        while not os.path.exists(hold):
            time.sleep(0.01)
    c = pytrace.stop()
    print(json.dumps({"symbols_dropped": c.symbols_dropped, "symbols": c.symbols,
                      "first_error": c.first_error}))
""")


def _run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=180, **kw)


def _number(pattern, text):
    m = re.search(pattern, text)
    assert m, "%r not in:\n%s" % (pattern, text)
    return int(m.group(1))


def test_symbols_dropped_agree_across_stop_record_export_top(tmp_path):
    assert TOP is not None, "pytrace-top is not built (PYTRACE_BUILD_DIR) nor installed"
    prog = tmp_path / "many.py"
    prog.write_text(MANY_FUNCTIONS)
    rec = tmp_path / "many.pytrace"
    proc = _run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(prog)])
    assert proc.returncode == 0, proc.stderr
    stopped = json.loads(proc.stdout.splitlines()[-1])
    dropped = stopped["symbols_dropped"]
    assert dropped > 0, stopped                            # the default log overflowed
    assert stopped["symbols"] + dropped >= 100000, stopped
    assert "symbol log full" in stopped["first_error"], stopped
    # stop()'s warning, from the program
    assert _number(r"RuntimeWarning: pytrace: (\d+) symbols dropped", proc.stderr) == dropped

    # record's summary
    assert _number(r"pytrace record: the job also lost: (\d+) symbols dropped", proc.stderr) == dropped

    # export's note
    out = tmp_path / "many.folded"
    exp = _run([PY, "-m", "pytrace", "export", str(rec), "-f", "collapsed", "-o", str(out)])
    assert exp.returncode == 0, exp.stderr
    assert _number(r"pytrace export: the traced job also lost: (\d+) symbols dropped",
                   exp.stderr) == dropped

    # pytrace-top: JSON and the text status
    top = _run([TOP, "--file", str(rec), "--once", "--json"])
    assert top.returncode == 0, top.stderr
    doc = json.loads(top.stdout)
    assert doc["symbols_dropped"] == dropped, doc
    assert doc["unannounced_events"] == 0, doc   # id 0 (the log was full) is a loss, not damage
    for key in ("hook_errors", "threads_untraced", "tracing_displaced"):
        assert doc[key] == 0, (key, doc)
    text = _run([TOP, "--file", str(rec), "--once"])
    assert text.returncode == 0, text.stderr
    assert _number(r"lost: symbols dropped (\d+)", text.stdout) == dropped
    # the interactive status line and its warning line
    t = Tmux("--file %s" % rec, width=200, height=12)
    try:
        screen = t.wait_for(lambda s: "ENDED" in s, what="the recording's last picture")
    finally:
        t.close()
    status, warning = screen.splitlines()[:2]
    assert _number(r"dropped 0  symbols dropped (\d+)  threads", status) == dropped, screen
    assert _number(r"WARNING: the job lost more than events \(symbols dropped (\d+)\)",
                   warning) == dropped, screen


def test_pytrace_ls_shows_symbols_dropped_of_a_live_job(tmp_path):
    prog = tmp_path / "many.py"
    prog.write_text(MANY_FUNCTIONS)
    hold = tmp_path / "hold"
    job = subprocess.Popen([PY, "-m", "pytrace", "run", str(prog)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env=dict(__import__("os").environ, HOLD=str(hold)))
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "hold.ready").exists():
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, "the job did not get ready"
            time.sleep(0.02)
        reported = int((tmp_path / "hold.ready").read_text())
        ls = _run([PY, "-m", "pytrace", "ls", "--json"])
        assert ls.returncode == 0, ls.stderr
        mine = [s for s in json.loads(ls.stdout) if s["pid"] == job.pid]
        assert len(mine) == 1, ls.stdout
        listed = mine[0]["symbols_dropped"]
        text = _run([PY, "-m", "pytrace", "ls"]).stdout
        hold.touch()
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, err
    assert listed == reported > 0                # the job's own counters() at that time
    assert "also lost: %d symbols dropped" % reported in text, text
    assert json.loads(out.splitlines()[-1])["symbols_dropped"] >= reported
