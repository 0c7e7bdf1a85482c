"""Listing segments has no cap: 200 segments of ended jobs are all listed by
`_pytrace.list_segments()` (pt_segment_list_alloc through the extension) and by
pytrace-top's job list (`pytrace-top --all` off a terminal prints it; viewer/top/picker.c),
which kept at most 128 rows while it listed into a fixed array."""

import os
import subprocess
import sys

import pytest

from topkit import TOP

COUNT = 200

# Each child starts tracing into a small segment of its own and is killed (SIGKILL: no exit
# path runs; os._exit now finishes and removes the segment as an exit does), so its segment
# stays, valid, with its producer gone (an ended job, as `--all` lists them).
MAKE = r'''
import os, signal, sys
from pytrace import _pytrace
count = int(sys.argv[1])
pids = []
for _ in range(count):
    pid = os.fork()
    if pid == 0:
        _pytrace.start(ring_count=1, chunk_bytes=4096, chunks_per_ring=2, symlog_bytes=65536,
                       fork_children=False)
        os.kill(os.getpid(), signal.SIGKILL)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print(" ".join(map(str, pids)))
'''


# Segments that were there before the jobs ran: one left by an earlier killed process
# whose pid a job of ours now has (pids wrap at 32768 over a long run) is not ours.
_before = set()


@pytest.fixture(scope="module")
def ended_jobs():
    from pytrace import _pytrace
    _before.update(s["name"] for s in _pytrace.list_segments())
    r = subprocess.run([sys.executable, "-c", MAKE, str(COUNT)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    pids = set(map(int, r.stdout.split()))
    assert len(pids) == COUNT
    try:
        yield pids
    finally:
        for name in os.listdir("/dev/shm"):
            parts = name.split("-")
            if name.startswith("pytrace-") and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) in pids:
                os.unlink(os.path.join("/dev/shm", name))


def test_list_segments_lists_every_segment(ended_jobs):
    from pytrace import _pytrace
    listed = [s for s in _pytrace.list_segments() if s["pid"] in ended_jobs and s["name"] not in _before]
    assert len(listed) == COUNT
    assert all(s["valid"] and not s["alive"] for s in listed)


@pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed")
def test_top_job_list_shows_200_jobs(ended_jobs):
    r = subprocess.run([TOP, "--all"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    shown = {int(row[0]) for row in rows if row and row[0].isdigit()} & ended_jobs
    assert len(shown) == COUNT, "pytrace-top listed %d of our %d ended jobs" % (len(shown), COUNT)
