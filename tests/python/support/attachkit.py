"""Shared by the attach tests (attach/): jobs to attach to, driven line by line, and what a dump of their stacks shows."""

import os
import re
import subprocess

from helpers import PY


JOB = r'''
import queue, select, sys, threading
WORKERS = 2
def inner(x):
    return x + 1
def outer(x):
    return inner(x) + inner(x) + inner(x)
def worker(jobs, done):
    total = 0
    while True:
        n = jobs.get()
        if n is None:
            return
        for i in range(n):
            total += outer(i)
        done.put(total)
jobs = [queue.Queue() for _ in range(WORKERS)]
done = queue.Queue()
threads = [threading.Thread(target=worker, args=(q, done), name="worker-%d" % k)
           for k, q in enumerate(jobs)]
for t in threads:
    t.start()
print("ready", flush=True)
while True:
    # the main thread runs Python code at least every 50 ms: a remote script runs then
    ready, _, _ = select.select([sys.stdin], [], [], 0.05)
    if not ready:
        continue
    line = sys.stdin.readline().strip()
    if not line or line == "quit":
        break
    n = int(line)
    for q in jobs:
        q.put(n)
    print("done", n, sorted(done.get() for _ in jobs), flush=True)
for q in jobs:
    q.put(None)
for t in threads:
    t.join()
print("tools", [sys.monitoring.get_tool(i) for i in range(6)] if hasattr(sys, "monitoring") else None)
print("pytrace modules", sorted(m for m in sys.modules if m.startswith("pytrace")))
print("threads", threading.active_count())
sys.exit(3)
'''


class Job:
    """The job above, driven line by line."""

    def __init__(self, tmp_path, python=PY, env=None, args=()):
        self.path = tmp_path / "job.py"
        self.path.write_text(JOB)
        self.proc = subprocess.Popen([python, *args, str(self.path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.out = [self.proc.stdout.readline()]
        assert self.out[0] == "ready\n", self.out
        self.pid = self.proc.pid

    def run(self, n):
        self.proc.stdin.write("%d\n" % n)
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        self.out.append(line)
        assert line.startswith("done %d " % n), line
        return line

    def finish(self):
        rest, _ = self.proc.communicate("quit\n", timeout=120)
        return self.proc.returncode, "".join(self.out) + rest

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def segments_of(pid):
    """pid's segments in /dev/shm (names of the current pattern: other tests plant names of
    the old one, without the random part, for pids that may be ours)."""
    return [n for n in os.listdir("/dev/shm") if re.fullmatch(r"pytrace-%d-\d+-[0-9a-f]{16}" % pid, n)]


STACKS_JOB = r'''
import sys, threading, time
def h():
    print("ready", flush=True)
    sys.stdin.readline()            # blocked in C until the test says go
def g():
    h()
def f():
    g()
def spin():
    return sum(range(50))
def busy(stop):
    while not stop.is_set():
        spin()
        time.sleep(0.001)           # active, but never fills its ring
stop = threading.Event()
worker = threading.Thread(target=f, name="blocked")
spinner = threading.Thread(target=busy, args=(stop,), name="busy")
spinner.start()
worker.start()
worker.join()                       # the main thread waits in C too
stop.set()
spinner.join()
print("finished")
'''


def python_frames(dump, thread_name):
    """The Python functions of one thread's block in `pytrace dump` output, innermost
    first (C functions, "(built-in)", are left out: the thread may be in print() yet)."""
    lines = dump.splitlines()
    start = [i for i, l in enumerate(lines) if l.startswith("Thread ") and '"%s"' % thread_name in l]
    assert start, (thread_name, dump)
    frames = []
    for line in lines[start[0] + 1:]:
        if not line.startswith("    "):
            break
        if not line.endswith("(built-in)"):
            frames.append(line.split()[0])
    return frames


def start_stacks_job(tmp_path, traced):
    script = tmp_path / "stacks.py"
    script.write_text(STACKS_JOB)
    cmd = [PY, "-m", "pytrace", "run", str(script)] if traced else [PY, str(script)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc
