"""The traced program's own memory for task records (runtime/_pytrace/pt_tasks.c): the table
of tasks seen holds the live tasks, not every task of the session, so a service that runs
tasks for hours keeps it bounded."""
import json
import subprocess
import sys

import pytest

from helpers import PY

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

MANY = r'''
import asyncio, json, warnings, pytrace, pytrace._pytrace
warnings.simplefilter("ignore")     # stop() warns (one line) of what the full ring dropped
async def short(i):
    await asyncio.sleep(0)
async def main():
    for r in range(200):            # 20,000 tasks, at most 100 alive at once
        await asyncio.gather(*(asyncio.create_task(short(i)) for i in range(100)))
pytrace.start(symlog_bytes=32 << 20)
asyncio.run(main())
s = pytrace._pytrace._tasks_stats()
pytrace.stop()
print(json.dumps(s))
'''


def test_the_table_of_tasks_seen_holds_the_live_ones(tmp_path):
    """20,000 tasks, 100 alive at once: every one gets its Task symbol (serial 20,003 with
    asyncio.run's main task and its two shutdown tasks), and the table that maps a task to
    its symbol stays at a few hundred slots: dead tasks leave it when it fills."""
    job = tmp_path / "many.py"
    job.write_text(MANY)
    r = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["tasks"] == 20003 and s["unnamed"] == 0, s
    assert 0 < s["slots"] <= 1024, s
