"""500 threads alive at once under `record` (policy wait, 256 rings): each loss has its
true cause and its own count.

245 threads find no ring (the main thread holds one of the 256). What they do is
counted as events of threads without a ring -- not as events dropped by a full ring:
under policy wait nothing waited and nothing was dropped. A thread that gets a ring
later (another thread ended) marks its gap with a Lost record flagged LostNoRing. It used
to move those events into events_dropped, so `record` said "N events dropped" and
`export` "(a full ring, policy drop)" for a lossless recording.
"""

import re
import struct
import subprocess
import textwrap

from helpers import PY
from pytrace.recording import RecordingReader
from pytrace.fb.EventFlags import EventFlags
from pytrace.fb.EventKind import EventKind

THREADS = 500

JOB = textwrap.dedent("""
    import sys, threading
    n_threads, work = int(sys.argv[1]), int(sys.argv[2])
    threading.stack_size(256 << 10)
    started = threading.Barrier(n_threads + 1)
    finished = threading.Barrier(n_threads + 1)
    def f(i):
        return i + 1
    def worker():
        started.wait()          # every thread alive at once
        n = 0
        for i in range(work):
            n = f(n)
        finished.wait()
    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    started.wait()
    finished.wait()
    for t in threads:
        t.join()
    print("done", flush=True)
""")


def test_500_threads_under_policy_wait_drop_nothing_and_say_why(tmp_path):
    job = tmp_path / "threads.py"
    job.write_text(JOB)
    rec = tmp_path / "threads.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(job),
                        str(THREADS), "2000"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    m = re.search(r"pytrace record: \d+ events written, (\d+) events dropped", r.stderr)
    assert m and int(m.group(1)) == 0, r.stderr               # lossless: nothing dropped
    m = re.search(r"(\d+) threads ran without a ring .*?, (\d+) events of threads without a ring",
                  r.stderr)
    assert m, r.stderr
    untraced_threads, untraced_events = int(m.group(1)), int(m.group(2))
    assert untraced_threads == THREADS + 1 - 256, r.stderr    # the main thread holds a ring
    assert untraced_events > 0

    # the stream: under policy wait the only gaps are those of threads without a ring,
    # each flagged so, and they are part of the untraced count
    causes = {}
    with RecordingReader(str(rec)) as reader:
        for msg in reader.messages():
            if type(msg).__name__ != "EventChunk":
                continue
            for i in range(msg.count):
                _, ident, aux, kind, flags = struct.unpack_from("<QIHBB", msg.data, msg.events_offset + 16 * i)
                if kind == EventKind.Lost:
                    causes[flags] = causes.get(flags, 0) + (ident | aux << 32)
    assert set(causes) <= {EventFlags.LostNoRing}, causes
    assert causes.get(EventFlags.LostNoRing, 0) <= untraced_events

    ex = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "-f", "collapsed", "-o",
                         str(tmp_path / "x.folded")], capture_output=True, text=True, timeout=300)
    assert ex.returncode == 0, ex.stderr
    assert "events dropped" not in ex.stderr and "a full ring" not in ex.stderr, ex.stderr
    assert ("%d threads ran without a ring" % untraced_threads) in ex.stderr, ex.stderr
    assert ("%d events of threads without a ring not recorded" % untraced_events) in ex.stderr
