"""Task records switched off (_tasks_set(False)) inside a task's step: that step's end is
never seen (Context.run is no longer watched), so the thread must not go on naming the
task as stepping. After the switch no task record is written, also not by the stack
writer after a Lost record (a Synthetic TaskStep of the old step)."""
import json
import subprocess
import sys

import pytest

from helpers import PY

pytest.importorskip("pytrace")
from pytrace.reader import EventKind  # noqa: E402

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

# The step of `work` switches task records off; later, outside any task, a full ring
# drops records and the next record comes after Lost and the stack.
SWITCHED_OFF_INSIDE = r"""
import asyncio, json, pytrace, pytrace._pytrace
from pytrace.reader import Reader, decode, EventKind
pytrace.start(policy="drop", chunk_bytes=65536, chunks_per_ring=2)
reader = Reader(pytrace.segment_name())
msgs = []

def f(i):
    return i + 1

async def work():
    await asyncio.sleep(0)
    pytrace._pytrace._tasks_set(False)  # inside this step: no task records from here on
    await asyncio.sleep(0)

asyncio.run(work())
msgs.extend(reader.poll())
n = 0
for i in range(100000):                 # outside any task: the ring (8,192 records) fills
    n = f(n)
msgs.extend(reader.poll())              # room again
n = f(n)                                # after Lost: the stack
pytrace.stop()
msgs.extend(reader.poll())
prof = pytrace.Profile()
prof.feed_many(msgs)
t = [t for t in prof.tasks() if t.coroutine == "work"][0]
kinds, lost = [], 0
for typ, data in msgs:
    m = decode(typ, data)
    if type(m).__name__ == "EventChunk":
        for e in m.events:
            if e.kind == EventKind.Lost:
                lost += 1
            if e.kind in (EventKind.TaskStep, EventKind.TaskSuspend) and e.id == t.id:
                kinds.append([int(e.kind), int(e.flags), lost])
print(json.dumps({"steps": t.steps, "lost": lost, "task_records": kinds}))
"""


def test_no_task_step_after_task_records_were_switched_off_in_a_step(tmp_path):
    """_tasks_set(False) inside the second step of `work`: its records are the first
    step's TaskStep and TaskSuspend and the second's TaskStep, all before any Lost; the
    stack written after the Lost record (outside any task) names no step of `work`, and
    the reader counts 2 steps."""
    job = tmp_path / "off.py"
    job.write_text(SWITCHED_OFF_INSIDE)
    r = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["lost"] >= 1, d                               # the ring did drop
    recs = d["task_records"]
    assert [k for k, _, _ in recs] == [EventKind.TaskStep, EventKind.TaskSuspend, EventKind.TaskStep], d
    assert all(lost == 0 for _, _, lost in recs), d         # nothing of `work` after the Lost
    assert d["steps"] == 2, d
