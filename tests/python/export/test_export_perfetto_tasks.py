"""`pytrace export --format perfetto` of an asyncio job (issue 23): a track per task named
after it (a child of the process track), one slice per LOGICAL call of a coroutine
spanning all its resumptions, a slice per wait named after what the task awaits, and a
flow from a task that awaits tasks (gather) to each awaited task's end. Read back with
pftrace_reader (the trace processor's TrackEvent rules). Task records come from the
sys.monitoring adapter: Python 3.12+."""
import collections
import subprocess
import sys

import pytest

from helpers import PY
from pytrace.export import main as export_main
from pftrace_reader import check_nesting, read_trace, track_parents

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12),
                                reason="task records come from the sys.monitoring adapter (3.12+)")

JOB = '''
import asyncio

async def worker():
    for _ in range(50):
        await asyncio.sleep(0.002)

async def child(n):
    await asyncio.sleep(0.001 * (n + 1))
    return n

async def parent():
    return await asyncio.gather(*(asyncio.create_task(child(i), name="child-%d" % i) for i in range(3)))

async def main():
    workers = [asyncio.create_task(worker(), name="worker-%d" % i) for i in range(20)]
    await asyncio.create_task(parent(), name="parent")
    await asyncio.gather(*workers)

asyncio.run(main())
'''


@pytest.fixture(scope="module")
def job_trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tasks")
    prog, rec, out = tmp / "job.py", tmp / "job.pytrace", tmp / "job.pftrace"
    prog.write_text(JOB)
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(prog)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "0 events dropped" in r.stderr, r.stderr
    assert export_main([str(rec), "--format", "perfetto", "-o", str(out)]) == 0
    flows = {}
    tracks, processes, slices, instants, _n, _b = read_trace(out, flows=flows)
    task_tracks = {u: name for u, (pid, tid, name) in tracks.items() if pid is None and name != "Steps"}
    return out, tracks, processes, slices, instants, flows, task_tracks


def by_name(task_tracks):
    names = collections.Counter(task_tracks.values())
    assert all(n == 1 for n in names.values()), names
    return {name: u for u, name in task_tracks.items()}


def test_a_track_per_task_named_after_it_under_the_process(job_trace):
    out, tracks, processes, slices, _i, _f, task_tracks = job_trace
    named = by_name(task_tracks)
    assert sorted(n for n in named if n.startswith("worker-")) == sorted("worker-%d" % i for i in range(20))
    assert {"parent", "child-0", "child-1", "child-2"} <= set(named)
    parents, process_tracks = track_parents(out)
    assert all(parents[u] in process_tracks for u in task_tracks)
    for u in task_tracks:
        check_nesting(slices[u])


def test_one_slice_per_logical_call_across_resumptions(job_trace):
    """worker() is resumed 50 times, each asyncio.sleep once: on the task's track worker is
    ONE slice of at least 50 x 2 ms, and each of the 50 sleeps one slice of at least 2 ms
    (the thread's track keeps one slice per resumption)."""
    _o, _t, _p, slices, _i, _f, task_tracks = job_trace
    named = by_name(task_tracks)
    for i in range(20):
        track = slices[named["worker-%d" % i]]
        calls = collections.Counter(s[0] for s in track if not s[7])
        assert calls["worker"] == 1, calls
        (worker,) = [s for s in track if s[0] == "worker"]
        assert worker[5] == 0                                     # the task's root
        assert worker[4] - worker[3] >= 50 * 2_000_000
        sleeps = [s for s in track if s[0] == "sleep"]
        assert len(sleeps) == 50
        assert all(s[4] - s[3] >= 2_000_000 and s[5] == 1 for s in sleeps)
        waits = [s for s in track if s[0] == "await asyncio.sleep"]
        assert len(waits) == 50                                   # one per suspend, inside its sleep
        for s in sleeps:                                          # each sleep waited once, inside it
            assert [track[c][0] for c in s[6]].count("await asyncio.sleep") == 1


def test_gather_flows_go_to_the_gathered_tasks(job_trace):
    """parent awaits gather(child-0..2): its wait slice starts a flow to each child's end."""
    _o, _t, _p, slices, instants, flows, task_tracks = job_trace
    named = by_name(task_tracks)
    children = {named["child-%d" % i] for i in range(3)}
    mine = [f for f in flows.values() if any(t == named["parent"] for t, _n, _ts in f["out"])]
    assert len(mine) == 3
    for f in mine:
        assert len(f["out"]) == 1 and len(f["in"]) == 1
        (t, name, ts), = f["out"]
        assert name.startswith("await child-")
        (tin, nin, tsin), = f["in"]
        assert nin == "done" and tsin >= ts
    assert {f["in"][0][0] for f in mine} == children
    for c in children:
        assert [n for n, _ts, _a in instants[c]] == ["done"]
        assert collections.Counter(s[0] for s in slices[c])["child"] == 1
