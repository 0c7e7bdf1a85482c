"""Does pytrace-top keep up with a busy job?

Starts a traced job (`python -m pytrace run`) whose two threads call a C function
(len) in a tight loop (each call is a CCall + CReturn record), attaches
`pytrace-top PID --once --json --duration D`, and prints:
  - events the job produced per second (events read + dropped over the job's span),
  - events the viewer read, events the job dropped (0 means the viewer kept up),
  - the viewer's own CPU time (utime + stime from /proc/<pid>/stat, and wait4).

Usage: python bench/top_keepup.py [--seconds 10] [--ring-size MiB] [--top PATH]
Not a test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

JOB = r'''
import sys, threading, time

def f():
    pass

def spin(seconds, out, i):
    # C calls (CCall + CReturn records) are cheaper for the job than Python calls
    n = 0
    s = "x"
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        for _ in range(10000):
            len(s); len(s); len(s); len(s); len(s); len(s); len(s); len(s)
        n += 80000
        if rate:  # paced: this thread's share of `rate` events/s (2 events a call)
            ahead = start + n * 2 / (rate / 2) - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    out[i] = n

seconds = float(sys.argv[1])
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0   # events/s of both threads; 0: no pacing
out = [0, 0]
ts = [threading.Thread(target=spin, args=(seconds, out, i)) for i in range(2)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
dt = time.monotonic() - t0
print("JOB calls=%d seconds=%.3f" % (sum(out), dt), file=sys.stderr, flush=True)
'''


def find_top(arg):
    if arg:
        return arg
    found = shutil.which("pytrace-top")
    if found:
        return found
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for cand in sorted(os.listdir(root)):
        p = os.path.join(root, cand, "viewer", "pytrace-top")
        if cand.startswith("build") and os.access(p, os.X_OK):
            return p
    sys.exit("pytrace-top not found: pip install . or pass --top")


def proc_cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--ring-size", type=float, default=64, help="MiB per ring")
    ap.add_argument("--top", default=None)
    args = ap.parse_args()
    top = find_top(args.top)

    tmp = tempfile.mkdtemp(prefix="pt-keepup-")
    script = os.path.join(tmp, "job.py")
    with open(script, "w") as f:
        f.write(JOB)
    job_cmd = [sys.executable, "-m", "pytrace", "run", "--ring-size", str(args.ring_size), script,
               str(args.seconds)]
    job = subprocess.Popen(job_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    segment = None
    for line in job.stderr:
        m = re.search(r"into (/pytrace-\S+?);", line)
        if m:
            segment = m.group(1)
            break
    if not segment:
        job.kill()
        sys.exit("the job did not announce a segment")

    top_cmd = [top, segment, "--once", "--json", "--duration", str(args.seconds + 30)]
    t0 = time.monotonic()
    viewer = subprocess.Popen(top_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last_cpu = 0.0
    while viewer.poll() is None:
        c = proc_cpu_seconds(viewer.pid)
        if c is not None:
            last_cpu = c
        if job.poll() is not None:
            break
        time.sleep(0.2)
    # the viewer stops once the job EXITED and everything is drained
    out, err = viewer.communicate(timeout=args.seconds + 60)
    wall = time.monotonic() - t0
    job_err = job.stderr.read()
    job.wait()
    if viewer.returncode != 0:
        print("viewer failed:", err.strip())
    doc = json.loads(out)
    m = re.search(r"calls=(\d+) seconds=([\d.]+)", job_err)
    calls, job_seconds = (int(m.group(1)), float(m.group(2))) if m else (0, args.seconds)
    job_seconds = job_seconds or args.seconds
    produced = doc["events_read"] + doc["events_dropped"]
    print("command: %s" % " ".join(job_cmd))
    print("viewer : %s" % " ".join(top_cmd))
    print("job    : %d calls in %.2f s -> %.1f M events/s produced (2 records per call: %.1f M/s)"
          % (calls, job_seconds, produced / job_seconds / 1e6, 2 * calls / job_seconds / 1e6))
    print("viewer : events read %d, events dropped by the job %d (%.3f%%), state %s"
          % (doc["events_read"], doc["events_dropped"],
             100.0 * doc["events_dropped"] / produced if produced else 0.0, doc["state"]))
    print("viewer : CPU %.2f s (utime+stime, last /proc sample) over %.2f s wall (%.0f%% of one core)"
          % (last_cpu, wall, 100.0 * last_cpu / wall if wall else 0))
    print("top rows:", ", ".join("%s %d calls" % (r["name"], r["calls"]) for r in doc["functions"][:3]))


if __name__ == "__main__":
    main()
