"""A recorder that is killed, or whose disk fills, loses nothing without saying so.

- kill -9 of `pytrace record PID` mid-run: the ring advances only past what the recorder
  wrote, so a second recorder continues where the file of the first ends: together they
  hold every event the job wrote (an event may be in both, never in neither). It used to
  lose up to 0.1 s of events read but not written, with no marker.
- a full disk: one line saying so, the file readable up to the last whole message, the job
  runs on (not held back, not killed) and record exits with the job's own code.
"""

import os
import shutil
import signal
import subprocess
import textwrap
import time

import pytest

from helpers import PY
from pytrace.recording import RecordingError, RecordingReader

JOB = textwrap.dedent("""
    import sys, time
    def f(i):
        return i + 1
    end = time.time() + float(sys.argv[1])
    n = 0
    while time.time() < end:
        for i in range(2000):
            n = f(n)
        time.sleep(0.0005)
    print("job done", flush=True)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
""")


def _chunks(path, killed=False):
    """{thread: [(first_event, count)]} and {thread: events_written from ThreadEnd}.

    killed: the file of a recorder killed by SIGKILL. The kernel may cut its last write
    short (a large write to a file stops at a fatal signal), so the file may end inside
    a message: that tail, and only that, is allowed, and the reader must say so."""
    ranges, written = {}, {}
    with RecordingReader(str(path)) as r:
        try:
            for m in r.messages():
                name = type(m).__name__
                if name == "EventChunk":
                    ranges.setdefault(m.thread, []).append((m.first_event, m.count))
                elif name == "ThreadEnd":
                    written[m.thread] = m.events_written
        except RecordingError as e:
            if not killed:
                raise
            assert "truncated" in e.reason or "inside a size prefix" in e.reason, e
            assert "never closed by its writer" in e.reason, e
            assert os.path.getsize(path) - e.offset < (1 << 20) + (64 << 10), e
    return ranges, written


def _covered(ranges):
    """Merge (first, count) ranges; return the list of [start, end) intervals."""
    out = []
    for first, count in sorted(ranges):
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], first + count)
        else:
            out.append([first, first + count])
    return out


def test_killed_recorder_leaves_no_gap(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", "--policy", "wait", str(job), "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "tracing pid" in proc.stderr.readline()
        first = tmp_path / "first.pytrace"
        # --no-hub: the recorder reads the segment itself, the path whose ring advances only
        # past what it wrote (through a hub, what the hub queued for a killed reader is its)
        rec1 = subprocess.Popen([PY, "-m", "pytrace", "record", "--no-hub", "-o", str(first), str(proc.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and (not first.exists() or first.stat().st_size < 200_000):
            time.sleep(0.01)
        rec1.send_signal(signal.SIGKILL)
        rec1.wait()
        second = tmp_path / "second.pytrace"
        rec2 = subprocess.run([PY, "-m", "pytrace", "record", "--no-hub", "-o", str(second), str(proc.pid)],
                              capture_output=True, text=True, timeout=120)
        assert rec2.returncode == 0, rec2.stderr
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r1, _ = _chunks(first, killed=True)
    r2, written = _chunks(second)
    main = max(written, key=lambda t: written[t])
    total = written[main]
    assert r1.get(main), "the first recorder wrote nothing of the main thread"
    covered = _covered(r1.get(main, []) + r2.get(main, []))
    assert covered == [[0, total]], "events missing from both files: %s of %d" % (covered[:4], total)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to mount a small tmpfs")
def test_disk_full_during_record(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "out.pytrace"
    # 256 KiB: the job's compressed recording takes about 2 MB (its plain one 120 MB)
    inner = ("mount -t tmpfs -o size=256k tmpfs %s && %s -m pytrace record -o %s -- %s %s 3 7; rc=$?; "
             "cp %s %s/kept.pytrace; exit $rc") % (disk, PY, out, PY, job, out, tmp_path)
    r = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 7, (r.returncode, r.stderr)          # the job's own exit code
    assert "job done" in r.stdout                             # it ran to its end
    assert "Traceback" not in r.stderr, r.stderr
    failed = [l for l in r.stderr.splitlines() if "No space left" in l]
    assert len(failed) == 1 and "No space left on device" in failed[0], r.stderr
    assert "were not recorded" in r.stderr
    kept = tmp_path / "kept.pytrace"
    ranges, _ = _chunks(kept)                                 # reads without damage
    assert sum(c for rs in ranges.values() for _, c in rs) > 0
