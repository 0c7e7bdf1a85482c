"""The reading side of issue 23 through Python: pytrace.Profile.tasks() (viewer/core/tasks.h's
rules through pt_agg_tasks) on a recording of named tasks, and the await graph `pytrace dump
PID` prints for a traced asyncio job, against real processes."""
import os
import pstats
import subprocess
import sys

import pytest

from helpers import PY

pytest.importorskip("pytrace")

NEEDS_TASKS = pytest.mark.skipif(sys.version_info < (3, 11),
                                 reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

# 20 named tasks, each awaiting a helper coroutine 50 times that sleeps 2 ms once.
SLEEPERS = r'''
import asyncio

async def nap():
    await asyncio.sleep(0.002)

async def worker():
    for _ in range(50):
        await nap()

async def main():
    await asyncio.gather(*(asyncio.create_task(worker(), name="worker-%d" % i) for i in range(20)))

asyncio.run(main())
'''


def summary_nodes(prof):
    return prof.tasks_summary()["tree_nodes"]


def run(*args, **kw):
    return subprocess.run([PY, *args], capture_output=True, text=True, timeout=180, **kw)


@NEEDS_TASKS
def test_profile_tasks_of_20_named_sleepers(tmp_path):
    """Profile.from_recording(REC).tasks(): the 20 tasks by name in order of first sight, each
    done after 51 steps (50 sleeps), with running time and at least 50 x 2 ms = 0.1 s of waiting,
    all of it charged to 'sleep'; its own table counts one LOGICAL call of worker (resumed 50
    times) and 50 of nap; and the whole program's function table keeps cProfile's counts."""
    import pytrace
    job = tmp_path / "sleepers.py"
    job.write_text(SLEEPERS)
    rec = str(tmp_path / "sleepers.pytrace")
    r = run("-m", "pytrace", "record", "-o", rec, "--", PY, str(job))
    assert r.returncode == 0, r.stderr
    assert "0 events dropped" in r.stderr, r.stderr
    prof = pytrace.Profile.from_recording(rec)
    tasks = prof.tasks()
    workers = [t for t in tasks if t.coroutine == "worker"]
    assert [t.name for t in workers] == ["worker-%d" % i for i in range(20)], [t.name for t in tasks]
    main = [t for t in tasks if t.coroutine == "main"]
    assert len(main) == 1 and main[0].state == "done", tasks
    for t in workers:
        assert t.state == "done" and t.steps == 51, t[:8]
        assert t.run_ns > 0, t[:8]
        assert t.wait_ns >= 100_000_000, t[:8]
        assert t.wait_by["sleep"] == t.wait_ns, t.wait_by
        assert t.awaits == (), t.awaits
        calls = {f.name: f.calls for f in t.functions if f.file == str(job)}
        assert calls == {"worker": 1, "nap": 50}, calls
        fn = {f.name: f for f in t.functions}
        assert fn["sleep"].calls == 50, fn["sleep"]
        assert 0 < fn["worker"].self_ns <= fn["worker"].total_ns <= t.run_ns, (fn["worker"], t.run_ns)
    # each task's own tree (Profile.task_tree): the task under the root, its coroutine above
    # it, one node per path of logical calls (nap awaited 50 times: one node, 50 calls); by
    # function, the tree's calls and own time are the task's table's, exactly
    for t in workers:
        nodes = prof.task_tree(t)
        assert nodes[0].parent == -1 and nodes[1].parent == 0 and nodes[1].name == t.name, nodes[:2]
        assert [n for n in nodes if n.parent == 0] == [nodes[1]]  # this task alone
        worker = [n for n in nodes if n.parent == 1 and n.name == "worker"]
        assert len(worker) == 1 and worker[0].calls == 1, nodes
        nap = [n for n in nodes if n.parent == worker[0].index and n.name == "nap"]
        assert len(nap) == 1 and nap[0].calls == 50, nodes
        sleep = [n for n in nodes if n.parent == nap[0].index and n.name == "sleep"]
        assert len(sleep) == 1 and sleep[0].calls == 50, nodes
        by = {}
        for n in nodes[2:]:
            calls, own = by.get(n.id, (0, 0))
            by[n.id] = (calls + n.calls, own + n.self_ns)
        table = {f.id: (f.calls, f.self_ns) for f in t.functions}
        assert set(by) == set(table), (set(by) ^ set(table))
        for fid, (calls, own) in table.items():
            assert by[fid][0] == calls, (fid, by[fid], calls)
            assert abs(by[fid][1] - own) <= len(nodes), (fid, by[fid], own)  # ns rounding per node
        assert 0 < nodes[1].total_ns <= t.run_ns, (nodes[1], t.run_ns)
    every = prof.task_tree()
    assert sorted(n.name for n in every if n.parent == 0) == sorted(t.name for t in tasks)
    # (each node's ticks are made ns on their own: a rounding each)
    assert abs(every[0].total_ns - sum(n.total_ns for n in every if n.parent == 0)) <= len(tasks)
    assert prof.task_tree(10 ** 9) == [prof.task_tree(10 ** 9)[0]]  # no such task: the root alone
    assert summary_nodes(prof) == len(every) - 1 - len(tasks)  # the core's count of the trees' nodes

    # the main task awaited the gather of the 20: waiting charged to 'task'
    assert main[0].wait_by["task"] == main[0].wait_ns > 0, main[0].wait_by
    summary = prof.tasks_summary()
    assert summary["seen"] == summary["kept"] == len(tasks) and summary["folded"] == 0, summary
    assert summary["malformed"] == 0, summary

    # the whole program's table is unchanged by the task records: cProfile's counts
    out = str(tmp_path / "sleepers.pstats")
    r = run("-m", "cProfile", "-o", out, str(job))
    assert r.returncode == 0, r.stderr
    # (by first line: cProfile names a function by its co_name, pytrace by its qualname)
    cprofile = {line: (nc, cc) for (file, line, _name), (cc, nc, _tt, _ct, _callers)
                in pstats.Stats(out).stats.items() if file == str(job)}
    ours = {f.line: (f.calls, f.prim_calls) for f in prof.functions() if f.file == str(job)}
    assert ours == cprofile, (ours, cprofile)


GATHER_JOB = r'''
import asyncio, sys, threading

async def child(ev):
    await ev.wait()

async def parent(ev):
    a = asyncio.create_task(child(ev), name="a")
    b = asyncio.create_task(child(ev), name="b")
    c = asyncio.create_task(child(ev), name="c")
    await asyncio.gather(a, b, c)

def release(loop, ev):
    sys.stdin.readline()            # the test's "go": the Event is set from the loop
    loop.call_soon_threadsafe(ev.set)

async def main():
    ev = asyncio.Event()
    t = asyncio.create_task(parent(ev), name="parent")
    await asyncio.sleep(0.05)
    threading.Thread(target=release, args=(asyncio.get_running_loop(), ev), name="release").start()
    print("ready", flush=True)
    await t
    print("finished", flush=True)

if sys.argv[1:] == ["off"]:       # task records off for the process, before any task
    import pytrace._pytrace
    pytrace._pytrace._tasks_set(False)
asyncio.run(main())
'''


def dump_gather_job(tmp_path, *args, recorder_first=False):
    """`pytrace dump` of GATHER_JOB run under `pytrace run`, while its tasks wait: the output.
    recorder_first: a recorder reads the job's stream for 0.5 s before the dump."""
    job = tmp_path / "gather.py"
    job.write_text(GATHER_JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", str(job), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        if recorder_first:
            r = run("-m", "pytrace", "record", "-o", str(tmp_path / "first.pytrace"), "--duration", "0.5",
                    str(proc.pid))
            assert r.returncode == 0, r.stderr
        r = run("-m", "pytrace", "dump", str(proc.pid))
    finally:
        out, err = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0 and out == "finished\n", err
    assert r.returncode == 0, r.stderr
    if not recorder_first:
        assert "stacks from its pytrace segment" in r.stdout, r.stdout
    return r.stdout


def graph_of(dump):
    """The await graph's lines of a dump: those after its 'Await graph:' line."""
    lines = dump.splitlines()
    start = [i for i, l in enumerate(lines) if l.startswith("Await graph: ")]
    assert len(start) == 1, dump
    return lines[start[0]:]


@NEEDS_TASKS
def test_dump_shows_the_await_graph_of_a_gather(tmp_path):
    """A traced job whose task 'parent' is inside `await asyncio.gather(a, b, c)` and whose
    children wait on an asyncio.Event, while the main task awaits 'parent': dump prints, after
    the thread stacks, the tasks not done as a tree of who awaits whom, exact at that moment."""
    dump = dump_gather_job(tmp_path)
    assert dump.index('Thread ') < dump.index("Await graph: "), dump
    assert graph_of(dump) == [
        "Await graph: 5 asyncio tasks not done, who awaits whom (0 done, cancelled or failed not shown)",
        "Task-1 [main] pending",
        "`-- parent [parent] pending",
        "    |-- a [child] pending",
        "    |   `-- sync: Event.wait",
        "    |-- b [child] pending",
        "    |   `-- sync: Event.wait",
        "    `-- c [child] pending",
        "        `-- sync: Event.wait",
    ], dump


def test_dump_says_when_the_job_has_no_task_records(tmp_path):
    """A job with the task records turned off (or one on 3.10, or 3.11 without C calls):
    dump says there are none instead of an empty graph, and shows the stacks as before."""
    dump = dump_gather_job(tmp_path, "off")
    assert "Await graph" not in dump, dump
    assert dump.splitlines()[-1].startswith("No asyncio task records in the stream"), dump
    assert '"MainThread"' in dump, dump


@NEEDS_TASKS
def test_dump_after_a_reader_took_the_tasks_records_says_so(tmp_path):
    """A recorder read the job's stream first (its task records with it), and the tasks have not
    run since: dump does not say the job has no tasks, it says the stream was joined late."""
    dump = dump_gather_job(tmp_path, recorder_first=True)
    assert "No asyncio task records in the stream" not in dump, dump
    assert "the stream was joined late: a task that has not run since is not known" in dump, dump


def test_await_graph_of_shared_waits_and_a_cycle():
    """dump's await graph from Profile.tasks()-shaped input: a task awaited by two shows under
    each with its own awaits expanded once; a cycle of awaits ends with a line saying so, and its
    tasks (awaited by each other, so no root) are still shown; a chain longer than Python's
    recursion limit prints whole; done tasks are counted, not shown."""
    from pytrace.dump import await_graph
    from pytrace.profile import Task, TaskAwait

    def task(i, name, awaits=(), state="pending"):
        return Task(i, name, "coro", i, state, 1, 1, 1, {}, tuple(awaits), ())

    def on(t):
        return TaskAwait("task", t.name, t.id)

    shared = task(3, "shared", [TaskAwait("sleep", "asyncio.sleep", None)])
    left, right = task(1, "left", [on(shared)]), task(2, "right", [on(shared)])
    x = task(4, "x")
    y = task(5, "y", [on(x)])
    x = x._replace(awaits=(on(y),))
    gone = task(6, "gone", state="done")
    summary = {"seen": 6, "malformed": 0}
    assert await_graph([left, right, shared, x, y, gone], summary) == [
        "Await graph: 5 asyncio tasks not done, who awaits whom (1 done, cancelled or failed not shown)",
        "left [coro] pending",
        "`-- shared [coro] pending",
        "    `-- sleep: asyncio.sleep",
        "right [coro] pending",
        "`-- shared [coro] pending (awaited elsewhere too: its awaits are shown there)",
        "x [coro] pending",
        "`-- y [coro] pending",
        "    `-- x [coro] pending (awaits its own awaiter: a cycle)",
    ]
    chain = [task(i, "t%d" % i, [TaskAwait("task", "t%d" % (i + 1), i + 1)] if i < 1500 else [])
             for i in range(1, 1501)]
    lines = await_graph(chain, {"seen": 1500, "malformed": 0})
    assert len(lines) == 1 + 1500 and lines[-1] == " " * 4 * 1498 + "`-- t1500 [coro] pending", lines[-1][-40:]
    assert await_graph([], {"seen": 0, "malformed": 0})[0].startswith("No asyncio task records in the stream")
