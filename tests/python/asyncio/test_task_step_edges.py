"""Task steps that are not a plain run of the task's coroutine (issue 23): asyncio's own
calls after the coroutine left, a step whose records a full ring cut (Lost, then the
stack again), a step whose start was not seen. Each must stay one step of its task, with
its logical calls whole where the records allow, and no record the reader refuses."""
import json
import subprocess
import sys

import pytest

from helpers import PY

pytest.importorskip("pytrace")
from pytrace.reader import EventKind, SymbolKind  # noqa: E402
from pytrace.fb.EventFlags import EventFlags  # noqa: E402
from pytrace.recording import RecordingReader  # noqa: E402

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

# sleep(0) is a bare yield: the C Task reschedules itself with loop.call_soon (a Python
# method) inside the step, after the coroutine frame has left.
SLEEP0 = r"""
import asyncio

async def inner():
    await asyncio.sleep(0)

async def worker():
    for _ in range(10):
        await inner()

async def main():
    await asyncio.gather(*(asyncio.create_task(worker(), name="w-%d" % i) for i in range(3)))

asyncio.run(main())
"""


def test_bookkeeping_after_the_coroutine_left_keeps_the_logical_call(tmp_path):
    """asyncio's own calls after the task's coroutine yielded (call_soon of a bare yield)
    are not the task's and do not cut its suspended chain: worker is one logical call
    across its 11 steps, inner one per await, and call_soon is not in the task's table."""
    import pytrace
    job = tmp_path / "sleep0.py"
    job.write_text(SLEEP0)
    rec = str(tmp_path / "sleep0.pytrace")
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", rec, "--", PY, str(job)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and "0 events dropped" in r.stderr, r.stderr
    prof = pytrace.Profile.from_recording(rec)
    assert prof.tasks_summary()["malformed"] == 0
    workers = [t for t in prof.tasks() if t.coroutine == "worker"]
    assert len(workers) == 3
    for t in workers:
        assert t.state == "done" and t.steps == 11, t[:8]
        calls = {f.name: f.calls for f in t.functions}
        assert calls["worker"] == 1 and calls["inner"] == 10 and calls["sleep"] == 10, calls
        assert "BaseEventLoop.call_soon" not in calls, calls


# A step that fills a small ring with no reader, then opens one, which frees the ring:
# the next record comes after Lost, CpuTime and the stack, which must reopen the step.
LOST = r'''
import asyncio, json, pytrace
from pytrace.reader import Reader
pytrace.start(policy="drop", chunk_bytes=65536, chunks_per_ring=2)
reader = Reader(pytrace.segment_name())
msgs = []

def f(i):
    return i + 1

async def burst():
    n = 0
    for i in range(100000):         # the ring (8,192 records) fills: the rest is dropped
        n = f(n)
    msgs.extend(reader.poll())      # room again
    for i in range(100):
        n = f(n)
    await asyncio.sleep(0)
    return n

async def main():
    await asyncio.create_task(burst(), name="burst")
    msgs.extend(reader.poll())

asyncio.run(main())
msgs.extend(reader.poll())
pytrace.stop()
msgs.extend(reader.poll())
prof = pytrace.Profile()
prof.feed_many(msgs)
t = [t for t in prof.tasks() if t.name == "burst"][0]
flags = []
from pytrace.reader import decode, EventKind
lost_then = []
for typ, data in msgs:
    m = decode(typ, data)
    if type(m).__name__ == "EventChunk":
        ev = list(m.events)
        for a, b in zip(ev, ev[1:] + [None]):
            if a.kind == EventKind.Lost:
                rest = ev[ev.index(a) + 1:ev.index(a) + 4]
                lost_then.append([(e.kind, e.flags) for e in rest])
print(json.dumps({"state": t.state, "steps": t.steps, "malformed": prof.tasks_summary()["malformed"],
                  "calls": {fn.name: fn.calls for fn in t.functions if fn.name in ("burst", "f")},
                  "lost_then": lost_then}))
'''


def test_a_step_cut_by_lost_records_is_reopened_by_the_stack(tmp_path):
    """After a Lost record inside a task step, the producer writes a Synthetic TaskStep of
    that task before the Frame run: the reader knows whose step goes on, the step's
    TaskSuspend is not malformed, and the task ends done after its two steps."""
    job = tmp_path / "lost.py"
    job.write_text(LOST)
    r = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["lost_then"], d                              # the ring did drop
    after = d["lost_then"][0]
    kinds = [k for k, _ in after]
    assert EventKind.TaskStep in kinds, after
    step = after[kinds.index(EventKind.TaskStep)]
    assert step[1] & EventFlags.Synthetic, after
    assert kinds[kinds.index(EventKind.TaskStep) + 1] == EventKind.Frame, after
    assert d["malformed"] == 0, d
    assert d["state"] == "done" and d["steps"] == 2, d


SWITCHED_ON_INSIDE = r"""
import asyncio, json, pytrace, pytrace._pytrace
from pytrace.reader import Reader, decode, EventKind
pytrace._pytrace._tasks_set(False)
pytrace.start()
reader = Reader(pytrace.segment_name())

async def work():
    pytrace._pytrace._tasks_set(True)   # inside this task's first step: its start is not seen
    await asyncio.sleep(0.001)
    await asyncio.sleep(0.001)

asyncio.run(work())
pytrace.stop()
msgs = reader.poll()
prof = pytrace.Profile()
prof.feed_many(msgs)
t = [t for t in prof.tasks() if t.coroutine == "work"][0]
steps = []
for typ, data in msgs:
    m = decode(typ, data)
    if type(m).__name__ == "EventChunk":
        steps += [int(e.flags) for e in m.events if e.kind == EventKind.TaskStep and e.id == t.id]
print(json.dumps({"state": t.state, "steps": t.steps, "malformed": prof.tasks_summary()["malformed"],
                  "step_flags": steps}))
"""


def test_a_step_whose_start_was_not_seen_ends_with_a_synthetic_step(tmp_path):
    """Task records switched on inside a task step: its TaskStep was never written, so at
    the step's end a Synthetic TaskStep goes before its TaskSuspend; the reader counts the
    step (its start unknown) instead of refusing the suspend as malformed: 3 steps, the
    first synthetic."""
    job = tmp_path / "inside.py"
    job.write_text(SWITCHED_ON_INSIDE)
    r = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["malformed"] == 0, d
    assert d["state"] == "done" and d["steps"] == 3, d
    assert [bool(f & EventFlags.Synthetic) for f in d["step_flags"]] == [True, False, False], d
