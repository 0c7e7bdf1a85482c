"""`pytrace export --format perfetto` of an asyncio job (issue 23): a track per task named
after it (a child of the process track), one slice per LOGICAL call of a coroutine
spanning all its resumptions, a slice per wait named after what the task awaits, and a
flow from a task that awaits tasks (gather) to each awaited task's end. Read back with
pftrace_reader (the trace processor's TrackEvent rules). Recorded task records come from
the sys.monitoring adapter (Python 3.12+); the scripted stream runs on any Python."""
import collections
import subprocess
import sys

import pytest

from helpers import PY
from pytrace.export import main as export_main
from pftrace_reader import check_nesting, read_trace, track_parents

# recorded task records come from the sys.monitoring adapter; the scripted test writes its own
recorded = pytest.mark.skipif(sys.version_info < (3, 11),
                              reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

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

RECORDINGS = {}  # the job's recording, for the tests that read it another way


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
    RECORDINGS["job"] = rec
    return out, tracks, processes, slices, instants, flows, task_tracks


def by_name(task_tracks):
    names = collections.Counter(task_tracks.values())
    assert all(n == 1 for n in names.values()), names
    return {name: u for u, name in task_tracks.items()}


@recorded
def test_a_track_per_task_named_after_it_under_the_process(job_trace):
    out, tracks, processes, slices, _i, _f, task_tracks = job_trace
    named = by_name(task_tracks)
    assert sorted(n for n in named if n.startswith("worker-")) == sorted("worker-%d" % i for i in range(20))
    assert {"parent", "child-0", "child-1", "child-2"} <= set(named)
    parents, process_tracks = track_parents(out)
    assert all(parents[u] in process_tracks for u in task_tracks)
    for u in task_tracks:
        check_nesting(slices[u])


@recorded
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


@recorded
def test_task_slices_equal_the_task_tables_logical_calls(job_trace):
    """The counts agree across views: on every task's track, the slices per function (not its
    waits) are the logical calls of that task's table in Profile.tasks() (pytrace-top's)."""
    import pytrace
    _o, _t, _p, slices, _i, _f, task_tracks = job_trace
    named = by_name(task_tracks)
    tasks = pytrace.Profile.from_recording(str(RECORDINGS["job"])).tasks()
    assert {t.name for t in tasks} == set(named)
    for t in tasks:
        table = collections.Counter()
        for f in t.functions:
            table[f.name] += f.calls
        drawn = collections.Counter(s[0] for s in slices[named[t.name]]
                                    if not s[7] and not s[0].startswith("await ") and s[0] != "waiting")
        assert drawn == table, t.name


@recorded
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


def test_scripted_task_records_and_damaged_ones(tmp_path):
    """A scripted stream (any Python: the records are written, not recorded): task t1 runs
    two steps, its coroutines a -> b suspended in between (b's sleep awaited): on t1's track
    a and b are one slice each spanning both steps, with one wait "await asyncio.sleep" in
    b. Damaged records around it draw nothing and break nothing: a TaskStep whose id is a
    function (not a Task symbol), a TaskSuspend with no step, a TaskAwait of kind Task naming
    a function, an unknown state, a step cut by a Lost record, a task never ended (its
    slices end with the trace: read_trace fails on a slice left open)."""
    import synthetic as syn
    from pytrace import recording as rec
    from pytrace.fb.AwaitKind import AwaitKind
    from pytrace.fb.TaskState import TaskState
    from pytrace.reader import EventKind as K, SymbolKind
    CALL, RET, YIELD, RESUME, LOST = (int(k) for k in (K.Call, K.Return, K.Yield, K.Resume, K.Lost))
    STEP, SUSP, AWAIT = (int(k) for k in (K.TaskStep, K.TaskSuspend, K.TaskAwait))
    PENDING, DONE = int(TaskState.Pending), int(TaskState.Done)
    syms = {1: ("run", SymbolKind.PyFunction), 2: ("Context.run", SymbolKind.PyFunction),
            3: ("a", SymbolKind.PyFunction), 4: ("b", SymbolKind.PyFunction),
            5: ("asyncio.sleep", SymbolKind.Label), 10: ("t1", SymbolKind.Task),
            11: ("t2", SymbolKind.Task), 12: ("t3", SymbolKind.Task)}
    t = iter(range(1000, 10**6, 1000))
    n = lambda: next(t)  # noqa: E731
    ev = [(n(), 1, CALL)]
    # damaged before anything: a suspend with no step, a step of a function id
    ev += [(n(), 11, 0, SUSP, 0), (n(), 3, 0, STEP, 0), (n(), 3, 0, SUSP, 0)]
    # t1, step 1: Context.run -> a -> b, b and a yield; it waits on a sleep
    ev += [(n(), 2, CALL), (n(), 10, 0, STEP, 0), (n(), 3, CALL), (n(), 4, CALL), (n(), 4, YIELD),
           (n(), 3, YIELD), (n(), 10, PENDING, SUSP, 0), (n(), 5, int(AwaitKind.Sleep), AWAIT, 0),
           (n(), 3, int(AwaitKind.Task), AWAIT, 0), (n(), 2, RET)]
    # t2: a step with an unknown state, then one cut by a Lost record (no Frame after it)
    ev += [(n(), 2, CALL), (n(), 11, 0, STEP, 0), (n(), 3, CALL), (n(), 3, YIELD),
           (n(), 11, 77, SUSP, 0), (n(), 2, RET)]
    ev += [(n(), 2, CALL), (n(), 11, 0, STEP, 0), (n(), 3, RESUME), (n(), 5, 0, LOST, 0)]
    ev += [(n(), 1, CALL)]
    # t1, step 2: resumed where it left, a and b return; done
    ev += [(n(), 2, CALL), (n(), 10, 0, STEP, 0), (n(), 3, RESUME), (n(), 4, RESUME), (n(), 4, RET),
           (n(), 3, RET), (n(), 10, DONE, SUSP, 0), (n(), 2, RET)]
    # t3 suspends awaiting t1 (already done) and is never stepped again
    ev += [(n(), 2, CALL), (n(), 12, 0, STEP, 0), (n(), 3, CALL), (n(), 3, YIELD),
           (n(), 12, PENDING, SUSP, 0), (n(), 10, int(AwaitKind.Task), AWAIT, 0), (n(), 2, RET)]
    ev = [e if len(e) == 5 else (e[0], e[1], 0, e[2], 0) for e in ev]
    msgs = [syn.process_info(pid=4343, ticks_per_second=1_000_000_000, base_monotonic_ns=10**12)]
    msgs += [syn.symbol(i, name, "app.py" if k == SymbolKind.PyFunction else "", 1, kind=k)
             for i, (name, k) in syms.items()]
    msgs += [syn.thread_start(1, "MainThread", 100), syn.event_chunk(1, ev), syn.producer_status(state=3)]
    path, out = tmp_path / "t.pytrace", tmp_path / "t.pftrace"
    w = rec.RecordingWriter(path, lossless=False)
    for m in msgs:
        w.append(m)
    w.close()
    assert export_main([str(path), "--format", "perfetto", "-o", str(out)]) == 0
    flows = {}
    tracks, _p, slices, instants, _n, _b = read_trace(out, flows=flows)
    named = by_name({u: name for u, (pid, _tid, name) in tracks.items() if pid is None})
    assert set(named) == {"t1", "t2", "t3"}                       # no track for the function id
    t1 = slices[named["t1"]]
    check_nesting(t1)
    assert sorted((s[0], s[5]) for s in t1) == [("a", 0), ("await asyncio.sleep", 2), ("b", 1)]
    (a,) = [s for s in t1 if s[0] == "a"]
    assert a[4] - a[3] > 10_000                                   # spans both steps (ns)
    assert [i[0] for i in instants[named["t1"]]] == ["done"]
    # t3's await of t1 starts a flow that ends nowhere (t1 ended before): none is complete
    assert all(not f["in"] for f in flows.values())
    t3 = slices[named["t3"]]
    assert sorted(s[0] for s in t3) == ["a", "await t1"]       # ended with the trace
