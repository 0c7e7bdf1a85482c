"""The producer side of issue 23: the TaskStep / TaskSuspend / TaskAwait records and Task
symbols that a recording of an asyncio program holds, read raw through RecordingReader.
The wire's numbers come from the flatc-generated module (pytrace.fb)."""
import os
import subprocess
import sys

import pytest

from helpers import PY

pytest.importorskip("pytrace")
from pytrace.fb.AwaitKind import AwaitKind  # noqa: E402
from pytrace.fb.TaskState import TaskState  # noqa: E402
from pytrace.reader import EventKind, SymbolKind  # noqa: E402
from pytrace.recording import RecordingReader  # noqa: E402

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks_program.py")
TASK_KINDS = (EventKind.TaskStep, EventKind.TaskSuspend, EventKind.TaskAwait)


class Recording:
    def __init__(self, path):
        self.symbols = {}
        self.threads = {}   # tid -> [task records in order]
        with RecordingReader(path) as rr:
            for m in rr.messages():
                name = type(m).__name__
                if name == "Symbol":
                    self.symbols[m.id] = m
                elif name == "EventChunk":
                    self.threads.setdefault((m.process, m.thread), []).extend(e for e in m.events if e.kind in TASK_KINDS)
        self.records = [e for recs in self.threads.values() for e in recs]

    def task(self, name):
        found = [s for s in self.symbols.values() if s.kind == SymbolKind.Task and s.name == name]
        assert len(found) == 1, (name, found)
        return found[0]

    def of(self, sym):
        """(kind, aux) of the records of task `sym` and the TaskAwait records after its suspends."""
        out = []
        for recs in self.threads.values():
            mine = False
            for e in recs:
                if e.kind == EventKind.TaskStep:
                    mine = e.id == sym.id
                    if mine:
                        out.append((EventKind.TaskStep, None, e.flags))
                elif e.kind == EventKind.TaskSuspend:
                    mine = e.id == sym.id
                    if mine:
                        out.append((EventKind.TaskSuspend, e.aux, None))
                elif mine:
                    out.append((EventKind.TaskAwait, e.aux, self.symbols[e.id]))
        return out

    def awaits(self, sym):
        """The TaskAwait groups after each Pending suspend of `sym`: [[(AwaitKind, symbol)]]."""
        groups = []
        for kind, aux, what in self.of(sym):
            if kind == EventKind.TaskSuspend and aux == TaskState.Pending:
                groups.append([])
            elif kind == EventKind.TaskAwait:
                groups[-1].append((aux, what))
        return groups

    def final_state(self, sym):
        return [aux for kind, aux, _ in self.of(sym) if kind == EventKind.TaskSuspend][-1]


def record(tmp_path, scenario):
    out = str(tmp_path / ("%s.pytrace" % scenario))
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", out, "--", PY, PROGRAM, scenario],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "0 events dropped" in r.stderr, r.stderr
    return Recording(out)


@pytest.mark.parametrize("scenario", ["sleepers", "pytask"])
def test_sleepers_steps_suspends_and_sleep_awaits(tmp_path, scenario):
    """20 named tasks x 50 sleeps of 2 ms: 51 steps each, 50 Pending suspends each followed by
    exactly one Sleep await named asyncio.sleep, then Done (C Task and the pure-Python Task)."""
    rec = record(tmp_path, scenario)
    for i in range(20):
        sym = rec.task("sleeper-%d" % i)
        assert sym.file == "sleeper"                      # the coroutine's __qualname__
        seq = rec.of(sym)
        steps = [s for s in seq if s[0] == EventKind.TaskStep]
        suspends = [s[1] for s in seq if s[0] == EventKind.TaskSuspend]
        assert len(steps) == 51
        assert suspends == [TaskState.Pending] * 50 + [TaskState.Done]
        groups = rec.awaits(sym)
        assert len(groups) == 50
        for g in groups:
            assert [(k, w.kind, w.name) for k, w in g] == [(AwaitKind.Sleep, SymbolKind.Label, "asyncio.sleep")]
        # a step and its suspend alternate
        assert [s[0] for s in seq if s[0] != EventKind.TaskAwait] == [EventKind.TaskStep, EventKind.TaskSuspend] * 51
    serials = sorted(s.line for s in rec.symbols.values() if s.kind == SymbolKind.Task)
    assert serials == list(range(1, len(serials) + 1))    # one symbol per task object
    # pytrace's own naming code (pt_tasks.c) runs inside the hook: never recorded
    assert not [s for s in rec.symbols.values() if "pytrace" in (s.file or "") and "_tasks" in s.file]


def test_step_records_sit_inside_context_run(tmp_path):
    """A step's records are inside the C call of Context.run that runs it, on every adapter
    (3.11: the profile adapter finds the step's callable in Handle._run's frame): each
    TaskStep right after a CCall of Context.run, each TaskSuspend (and its TaskAwait records)
    right before that call's CReturn, and every such call from Handle._run holds one step."""
    out = str(tmp_path / "order.pytrace")
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", out, "--", PY, PROGRAM, "gather"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "0 events dropped" in r.stderr, r.stderr
    symbols, threads = {}, {}
    with RecordingReader(out) as rr:
        for m in rr.messages():
            if type(m).__name__ == "Symbol":
                symbols[m.id] = m
            elif type(m).__name__ == "EventChunk":
                threads.setdefault((m.process, m.thread), []).extend(m.events)
    run = [i for i, s in symbols.items() if s.name == "_contextvars.Context.run"]
    assert len(run) == 1, [s.name for s in symbols.values() if "run" in s.name]
    steps = suspends = 0
    for events in threads.values():
        for i, e in enumerate(events):
            if e.kind == EventKind.TaskStep:
                steps += 1
                assert events[i - 1].kind == EventKind.CCall and events[i - 1].id == run[0], events[i - 1]
            elif e.kind == EventKind.TaskSuspend:
                suspends += 1
                j = i + 1
                while events[j].kind == EventKind.TaskAwait:
                    j += 1
                assert events[j].kind == EventKind.CReturn and events[j].id == run[0], events[j]
    # the gatherer, its three children and asyncio.run's main task: 2 steps each at least
    assert steps == suspends and steps >= 10, (steps, suspends)


def test_context_run_that_is_no_step_leaves_the_step_alone(tmp_path):
    """Context.run called from a task's own code, and a plain callback run by Handle._run, are
    no task steps: the task's records are its two steps, a Pending suspend with its one Sleep
    await, then Done; the only task symbols are the tasks'."""
    rec = record(tmp_path, "nested")
    seq = rec.of(rec.task("nester"))
    assert [(k, a) for k, a, _ in seq if k != EventKind.TaskAwait] == [
        (EventKind.TaskStep, None), (EventKind.TaskSuspend, TaskState.Pending),
        (EventKind.TaskStep, None), (EventKind.TaskSuspend, TaskState.Done)]
    assert [(k, w.name) for k, w in rec.awaits(rec.task("nester"))[0]] == [(AwaitKind.Sleep, "asyncio.sleep")]
    coroutines = sorted(s.file for s in rec.symbols.values() if s.kind == SymbolKind.Task)
    assert coroutines == ["BaseEventLoop.shutdown_asyncgens", "BaseEventLoop.shutdown_default_executor",
                          "main", "nester"]        # asyncio.run's own tasks, the program's two


def test_gather_awaits_name_each_task(tmp_path):
    rec = record(tmp_path, "gather")
    children = {rec.task("child-%d" % i).id for i in range(3)}
    groups = rec.awaits(rec.task("gatherer"))
    assert len(groups) == 1
    assert sorted(k for k, _ in groups[0]) == [AwaitKind.Task] * 3
    assert {w.id for _, w in groups[0]} == children
    assert rec.final_state(rec.task("gatherer")) == TaskState.Done


def test_failed_and_cancelled_states(tmp_path):
    rec = record(tmp_path, "ends")
    assert rec.final_state(rec.task("failing")) == TaskState.Failed
    assert rec.final_state(rec.task("cancelled")) == TaskState.Cancelled


def test_taskgroup_awaits_its_members(tmp_path):
    rec = record(tmp_path, "taskgroup")
    members = {rec.task("member-%d" % i).id for i in range(3)}
    groups = rec.awaits(rec.task("grouper"))
    assert groups, "grouper never suspended"
    assert all(k == AwaitKind.Task for k, _ in groups[0])
    assert {w.id for _, w in groups[0]} == members


def test_to_thread_is_a_thread_await(tmp_path):
    rec = record(tmp_path, "thread")
    groups = rec.awaits(rec.task("threaded"))
    assert [(k, w.name) for k, w in groups[0]] == [(AwaitKind.Thread, "to_thread")]


def test_queue_get_is_a_sync_await(tmp_path):
    rec = record(tmp_path, "queue")
    groups = rec.awaits(rec.task("getter"))
    assert [(k, w.name) for k, w in groups[0]] == [(AwaitKind.Sync, "Queue.get")]


def test_set_name_the_name_at_the_first_step_wins(tmp_path):
    rec = record(tmp_path, "rename")
    names = {s.name for s in rec.symbols.values() if s.kind == SymbolKind.Task}
    assert {"early-new", "late-old"} <= names
    assert not {"early-old", "late-new"} & names


FULL_LOG = r'''
import asyncio, json, warnings, pytrace, pytrace._pytrace
warnings.simplefilter("ignore")     # stop() warns (one line) of the symbols dropped
async def short(i):
    await asyncio.sleep(0)          # three steps each: start, after the sleep, the end
    await asyncio.sleep(0)
async def main():
    for r in range(20):
        await asyncio.gather(*(asyncio.create_task(short(i), name="t%d-%d" % (r, i)) for i in range(100)))
pytrace.start(symlog_bytes=64 << 10)
asyncio.run(main())
stats = pytrace._pytrace._tasks_stats()
c = pytrace.stop()
print(json.dumps({"unnamed": stats["unnamed"], "tasks": stats["tasks"], "dropped": c.symbols_dropped}))
'''


def test_full_symbol_log_counts_each_unnamed_task_once(tmp_path):
    """A symbol log too small for 2,000 tasks: the tasks past it write no task records and
    are counted once each (not at each of their three steps), as are the symbols dropped;
    the serial counts the tasks seen."""
    import json
    job = tmp_path / "full.py"
    job.write_text(FULL_LOG)
    r = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    tasks = 2000 + 1 + 2    # the shorts, asyncio.run's main task and its two shutdown tasks
    assert d["tasks"] == tasks, d
    assert 0 < d["unnamed"] < tasks, d            # the log filled on the way
    assert d["dropped"] >= d["unnamed"], d       # (functions' symbols may be dropped too)
    assert d["dropped"] < tasks, d               # not one per step
