"""Every reader that keeps a call tree works within its budget (issue 18, item 3), and a
symbol id of 0xFFFFFFFF is read like any other (item 8).

A job whose call paths never repeat (1,000 generated functions called along random paths
of depth 1-12) grows a calling-context tree without end. With --tree-budget 8 (MiB),
pytrace-top --once and the HTML export stay within the budget plus a fixed margin for the
program itself (peak RSS from wait4: a bound, not a speed figure), say how many calls
were folded into [other], and keep the function table exact: every call the job made is
in it, and a Profile with a budget too small for the tree gives the same table as one
whose budget holds it all.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import PY
import synthetic as syn
from pytrace.reader import EventKind
from pytrace.recording import RecordingWriter

pytestmark = pytest.mark.reading_side   # the reading programs' bounds (conftest.py)

BIN = os.path.dirname(PY)
TOP = os.path.join(BIN, "pytrace-top")
MIB = 1 << 20
BUDGET_MIB = 8
MARGIN_MIB = 72   # the program without its tree: pytrace-top ~10 MiB
# The HTML export without its tree, measured (a recording of 4 s, 27 M events, 39 MB):
# 18 MiB of Python with pytrace imported, 44 MiB with the recording aggregated
# (Profile.from_recording, --tree-budget 1), 74 MiB with the report written (budget 1);
# 80.4 MiB at budget 8 and 84.6 at 16, the same before issue 22 (5cb9d7b: 80.4 at 8).
# The old margin (72) left 0.4 MiB: CI failed at 81.2 MiB. 80 keeps the check a bound
# on what does not grow with the run.
HTML_MARGIN_MIB = 80

JOB = r'''
import random, sys, time
N = 1000
src = "".join("def f%d(p):\n    if p:\n        F[p.pop()](p)\n" % i for i in range(N))
exec(compile(src, "generated.py", "exec"))
F = [globals()["f%d" % i] for i in range(N)]
r = random.Random(7)
calls = 0
end = time.monotonic() + float(sys.argv[1])
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 62
while calls < limit and time.monotonic() < end:
    for _ in range(500):
        p = [r.randrange(N) for _ in range(r.randint(1, 12))]
        calls += len(p)
        F[p.pop()](p)
with open(sys.argv[2], "w") as f:
    f.write(str(calls))
'''


def _job_file(tmp_path):
    path = tmp_path / "paths.py"
    path.write_text(JOB)
    return str(path)


# Linux keeps a process's peak RSS across exec: a child forked from pytest (hundreds of MiB
# after a long run) reports pytest's peak as its own from wait4. The measured program is
# therefore forked from this small wrapper, whose wait4 gives the program's own peak.
_MEASURE = r"""
import os, signal, sys
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # as subprocess gives a program
    os.execv(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(ru.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
"""


def _measured(args, peak_file, **kw):
    """Popen of args under the peak-RSS wrapper."""
    return subprocess.Popen([sys.executable, "-c", _MEASURE, str(peak_file)] + list(args),
                            **kw)


def _wait_peak(proc, peak_file, timeout):
    """Wait for proc (from _measured) to exit: (exit code, the program's peak RSS in bytes)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
            for child in f.read().split():
                os.kill(int(child), 9)
        proc.kill()
        proc.wait()
        pytest.fail("%s did not end within %ss" % (proc.args, timeout))
    with open(peak_file) as f:
        return proc.returncode, int(f.read()) * 1024


def _generated_calls(functions):
    """Calls of the generated functions (not of generated.py's <module>, run once by exec)."""
    return sum(f["calls"] for f in functions if f["file"] == "generated.py" and f["name"] != "<module>")


def test_top_once_json_never_repeating_paths_within_budget(tmp_path):
    """pytrace-top --once --json --tree-budget 8 on a live job of never-repeating paths:
    peak RSS under 8 MiB + the margin, the folded calls counted in the JSON, and the table
    holds every call the job made (policy wait: nothing dropped)."""
    from pytrace import _job
    count_file = str(tmp_path / "calls")
    job, segment, wait_w = _job.start_job(PY, [], {"c_calls": False, "policy": "wait"},
                                          [_job_file(tmp_path), "5", count_file],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert segment, job.stderr.read()
    peak_file = tmp_path / "top.peak"
    # --no-hub: pytrace-top is the segment's reader, so the job's policy wait holds it back
    # for pytrace-top and nothing is lost. Through a hub (what --once --duration starts
    # otherwise), only a lossless recorder may hold the job back: a view that falls behind
    # (~2 M events/s here, on a loaded machine) is cut, its missed events counted apart in
    # events_missed_in_hub, and the calls in them are rightly not in its table.
    top = _measured([TOP, segment, "--once", "--json", "--duration", "120", "--tree-budget",
                     str(BUDGET_MIB), "--no-hub"], peak_file, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    # the job starts once pytrace-top holds its segment (it reads it from the first event)
    from pytrace import _pytrace
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not [s for s in _pytrace.list_segments()
                                               if s["name"] == segment and s["consumer_pid"]]:
        time.sleep(0.02)
    os.close(wait_w)
    out = []
    import threading
    t = threading.Thread(target=lambda: out.append(top.stdout.read()))
    t.start()
    rc, peak = _wait_peak(top, peak_file, 150)
    t.join()
    job.wait(30)
    assert rc == 0, (top.stderr.read(), job.stderr.read())
    assert peak < (BUDGET_MIB + MARGIN_MIB) * MIB, "pytrace-top peaked at %.1f MiB" % (peak / MIB)
    doc = json.loads(out[0])
    assert doc["state"] == "ENDED"   # it read the job to its end
    assert doc["events_dropped"] == 0
    assert doc.get("events_missed_in_hub", 0) == 0
    assert doc["tree_budget_bytes"] == BUDGET_MIB * MIB
    assert doc["tree_nodes"] <= BUDGET_MIB * MIB // 512 + 16
    assert doc["folded_calls"] > 10_000, doc["folded_calls"]
    with open(count_file) as f:
        made = int(f.read())
    assert _generated_calls(doc["functions"]) == made


# The recording's job stops after this many calls of the generated functions (the same
# recording on every machine: its paths come from a seeded Random). It ran for 4 s before,
# so a fast machine made more paths: 3 M calls on 3.15 gave an 803 MB whole-tree collapsed
# export here and more than the exporter's 1 GiB limit in CI. With 500,000 calls the whole
# tree is still far past the budgets below (the HTML export without a budget peaked at
# 500 MiB with 1 M calls), and the collapsed export is ~135 MB.
RECORDED_CALLS = 500_000


@pytest.fixture(scope="module")
def paths_recording(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paths")
    rec = str(tmp / "paths.pytrace")
    count_file = str(tmp / "calls")
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", rec, "--", PY, _job_file(tmp), "60", count_file,
                        str(RECORDED_CALLS)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(count_file) as f:
        return rec, int(f.read())


def test_html_export_never_repeating_paths_within_budget(paths_recording, tmp_path):
    """The HTML report of the recording with --tree-budget 8: written, peak RSS under the
    budget + the margin, the folded calls said on stderr and in the report's status."""
    rec, _made = paths_recording
    out = str(tmp_path / "paths.html")
    peak_file = tmp_path / "export.peak"
    exp = _measured([PY, "-m", "pytrace", "export", rec, "--format", "html", "-o", out, "--tree-budget",
                     str(BUDGET_MIB)], peak_file, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = []
    import threading
    t = threading.Thread(target=lambda: err.append(exp.stderr.read()))
    t.start()
    rc, peak = _wait_peak(exp, peak_file, 300)
    t.join()
    assert rc == 0, err
    assert peak < (BUDGET_MIB + HTML_MARGIN_MIB) * MIB, "the export peaked at %.1f MiB" % (peak / MIB)
    folded = [ln for ln in err[0].splitlines() if "folded into [other]" in ln]
    assert len(folded) == 1, err[0]
    with open(out, encoding="utf-8") as f:
        page = f.read()
    assert '"folded_calls": ' in page or '"folded_calls":' in page
    assert '"folded_calls": 0' not in page and '"folded_calls":0' not in page


def test_profile_budget_folds_and_table_stays_exact(paths_recording):
    """Profile(tree_budget_mib=1): [other] nodes in the tree, named, their calls the folded
    count; every call and ns still in the tree; the function table equal to that of a
    Profile whose budget holds the whole tree, and it holds every call the job made."""
    from pytrace.profile import Profile
    rec, made = paths_recording
    small = Profile.from_recording(rec, tree_budget_mib=1)
    # a budget no recording here reaches (4096 MiB, 8 M nodes, was reached on 3.15, whose
    # job makes more paths in its seconds): the whole tree
    big = Profile.from_recording(rec, tree_budget_mib=1 << 20)
    cs, cb = small.counters(), big.counters()
    assert cb["folded_calls"] == 0
    assert cs["folded_calls"] > 10_000
    assert cs["nodes"] <= (1 * MIB) // 512 + 16 < cb["nodes"]
    tree = small.tree()
    others = [n for n in tree if n.id == -2]
    assert others and all(n.name == "[other]" for n in others)
    assert sum(n.calls for n in others) == cs["folded_calls"]
    # every activation is one call in the tree and in the table (big's tree is not
    # built whole: millions of Python tuples)
    assert sum(n.calls for n in tree) == sum(f.calls for f in big.functions())
    assert tree[0].total_ns == big.tree(min_fraction=0.5)[0].total_ns
    rows = lambda p: sorted((f.id, f.calls, f.prim_calls, f.self_ns, f.total_ns) for f in p.functions())
    assert rows(small) == rows(big)
    assert _generated_calls([f._asdict() for f in small.functions()]) == made


def test_pstats_and_collapsed_budget_folds_and_rows_stay_exact(paths_recording, tmp_path):
    """pytrace export --format pstats/collapsed --tree-budget 1: the export's tree is
    pytrace-top's (viewer/core/cct.h), so past the budget new paths fold into [other] (said
    once on stderr), pstats' function rows are those of an export whose budget holds the
    whole tree, and the collapsed stacks keep every call, [other] frames included."""
    import pstats
    rec, made = paths_recording
    out = {}
    for fmt in ("pstats", "collapsed"):
        for mib in (1, 1 << 24):
            path = str(tmp_path / ("%s.%d" % (fmt, mib)))
            extra = ["--weight", "calls", "--max-depth", "0"] if fmt == "collapsed" else []
            r = subprocess.run([PY, "-m", "pytrace", "export", rec, "--format", fmt, "-o", path,
                                "--tree-budget", str(mib)] + extra, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            folded = [ln for ln in r.stderr.splitlines() if "folded into [other]" in ln]
            assert len(folded) == (1 if mib == 1 else 0), r.stderr
            out[fmt, mib] = path
    rows = {}
    for mib in (1, 1 << 24):
        st = pstats.Stats(out["pstats", mib]).stats
        rows[mib] = {k: v[:4] for k, v in st.items()}
    assert rows[1] == rows[1 << 24]
    assert sum(v[1] for k, v in rows[1].items() if k[0] == "generated.py" and k[2] != "<module>") == made
    lines = {}
    for mib in (1, 1 << 24):
        with open(out["collapsed", mib]) as f:
            lines[mib] = [ln.rsplit(" ", 1) for ln in f.read().splitlines()]
    assert any("[other]" in stack for stack, _ in lines[1])
    assert not any("[other]" in stack for stack, _ in lines[1 << 24])
    assert len(lines[1]) < len(lines[1 << 24])
    assert sum(int(n) for _, n in lines[1]) == sum(int(n) for _, n in lines[1 << 24])


# ---- item 8: a symbol id of 0xFFFFFFFF -----------------------------------------------------

CALL, RETURN, FRAME = int(EventKind.Call), int(EventKind.Return), int(EventKind.Frame)
ALL_ONES = 0xFFFFFFFF


@pytest.fixture
def all_ones_recording(tmp_path):
    """main (id 1) is running when the thread is first seen: a Frame record reports it, then
    one of id 0xFFFFFFFF above it (a frame whose symbol never came); then f (id 2) is
    called and returns, and the rest returns."""
    rec = str(tmp_path / "ones.pytrace")
    with RecordingWriter(rec, lossless=True) as w:
        w.append(syn.process_info(pid=4343))
        w.append(syn.symbol(1, "main"))
        w.append(syn.symbol(2, "f"))
        w.append(syn.thread_start(1))
        w.append(syn.event_chunk(1, [(1000, 1, 0, FRAME, 0), (1000, ALL_ONES, 1, FRAME, 0),
                                     (2000, 2, 0, CALL, 0), (5000, 2, 0, RETURN, 0),
                                     (6000, ALL_ONES, 0, RETURN, 0), (7000, 1, 0, RETURN, 0)]))
        w.append(syn.thread_end(1, 7000, events_written=6))
        w.append(syn.producer_status(state=3, events_written=6))
    return rec


def test_frame_id_all_ones_html_export(all_ones_recording, tmp_path):
    """The HTML export writes the report (it died with MemoryError and wrote nothing)."""
    out = str(tmp_path / "ones.html")
    r = subprocess.run([PY, "-m", "pytrace", "export", all_ones_recording, "--format", "html", "-o", out],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    assert os.path.getsize(out) > 0


def test_frame_id_all_ones_top_and_profile(all_ones_recording):
    """pytrace-top reads it without "out of memory", and the Profile keeps every call: the
    frame of id 0xFFFFFFFF is a node of the tree (not taken for the root), f under it."""
    r = subprocess.run([TOP, "--file", all_ones_recording, "--once", "--json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "error" not in doc, doc["error"]
    calls = {f["name"]: f["calls"] for f in doc["functions"]}
    assert calls == {"main": 1, "<unknown #4294967295>": 1, "f": 1}
    from pytrace.profile import Profile
    prof = Profile.from_recording(all_ones_recording)
    tree = prof.tree()
    assert [(n.depth, n.id, n.name) for n in tree] == [
        (0, -1, "<root>"), (1, 1, "main"), (2, ALL_ONES, "<unknown #4294967295>"), (3, 2, "f")]
    assert tree[3].self_ns == 3000 and tree[0].total_ns == 6000
