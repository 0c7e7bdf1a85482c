"""Many threads: every thread of a program is traced with default options (a segment has
256 ring slots and takes a ring's memory only when a thread claims it); past the limit a
user sets (--rings), or when /dev/shm has no room for another ring, a thread runs untraced,
and both the threads and their events are counted, the same by every tool."""

import json
import os
import re
import shutil
import subprocess

import pytest

from helpers import PY

JOB = """
import sys, threading
N = int(sys.argv[1]); CALLS = int(sys.argv[2])
def work(i):
    return i * 2
def run():
    barrier.wait()
    for i in range(CALLS):
        work(i)
barrier = threading.Barrier(N)
ts = [threading.Thread(target=run) for _ in range(N)]
for t in ts: t.start()
for t in ts: t.join()
print("done", N * CALLS)
"""


def top_binary():
    return shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")


def record(tmp_path, *opts, threads, calls):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    out = tmp_path / "out.pytrace"
    cmd = [PY, "-m", "pytrace", "record", "-o", str(out), *opts, "--", PY, str(job),
           str(threads), str(calls)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return r, out


def pstats_calls(tmp_path, rec, name):
    ps = tmp_path / "out.pstats"
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "-f", "pstats", "-o", str(ps)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import pstats
    stats = pstats.Stats(str(ps)).stats
    return sum(v[1] for k, v in stats.items() if k[2] == name), r.stderr


def summary_count(text, phrase):
    m = re.search(r"(\d+) " + re.escape(phrase), text)
    return int(m.group(1)) if m else 0


def test_two_hundred_threads_all_traced_by_default(tmp_path):
    """200 threads running at once, 500 calls each: all 100,000 calls are recorded and
    nothing is reported lost (the default used to trace 16 threads and drop the rest
    silently)."""
    r, rec = record(tmp_path, threads=200, calls=500)
    assert r.returncode == 0, r.stderr
    assert "done 100000" in r.stdout
    assert " 0 events dropped" in r.stderr and "also lost" not in r.stderr, r.stderr
    calls, note = pstats_calls(tmp_path, rec, "work")
    assert calls == 100000
    assert "lost" not in note


def test_threads_past_the_limit_are_counted_everywhere(tmp_path):
    """--rings 4 with 24 threads at once: the threads left without a ring and their events
    are counted, and record's summary, export's note and pytrace-top agree."""
    r, rec = record(tmp_path, "--policy", "drop", "--rings", "4", threads=24, calls=20000)
    assert r.returncode == 0, r.stderr
    untraced = summary_count(r.stderr, "threads ran without a ring")
    events = summary_count(r.stderr, "events of threads without a ring")
    dropped = summary_count(r.stderr, "events dropped")
    assert untraced >= 1, r.stderr
    assert events + dropped > 0, r.stderr
    calls, note = pstats_calls(tmp_path, rec, "work")
    assert summary_count(note, "threads ran without a ring") == untraced, note
    assert summary_count(note, "events of threads without a ring") == events, note
    top = subprocess.run([top_binary(), "--file", str(rec), "--once", "--json"],
                         capture_output=True, text=True, timeout=120)
    snap = json.loads(top.stdout)
    assert snap.get("threads_untraced") == untraced, snap
    assert snap.get("events_untraced") == events, snap
    # Nothing is lost without a count: every call either is in the recording, or its two
    # events are among those dropped or untraced.
    assert calls + (dropped + events) // 2 >= 24 * 20000 - 24
    assert calls < 24 * 20000


def test_stop_counts_threads_without_a_ring(tmp_path):
    """In-process: stop() reports the untraced threads and their events."""
    src = tmp_path / "inproc.py"
    src.write_text(JOB.replace("ts = [", "import pytrace\npytrace.start(ring_count=2)\nts = [")
                   + "c = pytrace.stop()\nprint('counters', c.threads_untraced, c.events_untraced)\n")
    r = subprocess.run([PY, "-W", "ignore", str(src), "12", "20000"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    untraced, events = (int(x) for x in r.stdout.split("counters")[1].split())
    assert untraced >= 1 and events > 0, r.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a private /dev/shm")
def test_small_dev_shm_like_a_container(tmp_path):
    """A 64 MB /dev/shm (Docker's default), in a private mount namespace: `pytrace record`
    with default options starts and the job runs; when room runs out for more rings the
    threads left out are counted, and the job's output and exit code are its own."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    out = tmp_path / "out.pytrace"
    inner = "mount -t tmpfs -o size=64m tmpfs /dev/shm && exec %s -m pytrace record -o %s -- %s %s 40 20000" % (
        PY, out, PY, job)
    r = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "done 800000" in r.stdout
    assert "not enough room" not in r.stderr
    untraced = summary_count(r.stderr, "threads ran without a ring")
    assert untraced >= 1, r.stderr     # 40 rings of 4 MiB do not fit in 64 MB
    calls, _ = pstats_calls(tmp_path, out, "work")
    events = summary_count(r.stderr, "events of threads without a ring")
    dropped = summary_count(r.stderr, "events dropped")
    assert calls > 0 and calls + (dropped + events) // 2 >= 800000 - 40
