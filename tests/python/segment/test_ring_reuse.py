"""A thread that started while every ring was taken is traced as soon as a reader frees
the ring of a thread that ended (it retries its claim), with its stack so far."""

import os
import subprocess
import sys
import textwrap
import time

import pytrace

PROGRAM = textwrap.dedent("""
    import os, sys, threading, time
    import pytrace
    stop_file = sys.argv[1]
    print(pytrace.start(ring_count=2), flush=True)   # main thread + one more
    def short():
        sum(range(100))
    a = threading.Thread(target=short, name="short-lived")
    a.start(); a.join()                               # its ring is now RETIRED, not free
    def late_work():
        return sum(range(1000))
    def late_loop():
        while not os.path.exists(stop_file):
            late_work()
            time.sleep(0.001)
    b = threading.Thread(target=late_loop, name="late-thread")
    b.start(); b.join()
    c = pytrace.stop()
    print("threads_untraced", c.threads_untraced, flush=True)
""")


def test_thread_gets_a_ring_once_a_reader_frees_one(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(PROGRAM)
    stop_file = tmp_path / "stop"
    job = subprocess.Popen([sys.executable, str(script), str(stop_file)], stdout=subprocess.PIPE,
                           text=True)
    try:
        segment = job.stdout.readline().strip()
        assert segment.startswith("/pytrace-")
        time.sleep(0.5)          # the late thread runs untraced: no free ring, no reader yet
        names, late_ids, late_thread, late_events = {}, set(), None, 0
        with pytrace.Reader(segment) as reader:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and late_events == 0:
                for msg in reader:
                    kind = type(msg).__name__
                    if kind == "Symbol" and msg.name == "late_work":
                        late_ids.add(msg.id)
                    elif kind == "ThreadStart":
                        names[msg.thread] = msg.name
                        if msg.name == "late-thread":
                            late_thread = msg.thread
                    elif kind == "EventChunk" and msg.thread == late_thread:
                        late_events += sum(1 for e in msg.events if e.id in late_ids)
                time.sleep(0.05)
            stop_file.write_text("")
            out, _ = job.communicate(timeout=30)
        assert "short-lived" in names.values()
        assert late_thread is not None, names
        assert late_events > 0
        assert int(out.split("threads_untraced")[1]) >= 1   # it really found no ring at first
        assert job.returncode == 0
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
