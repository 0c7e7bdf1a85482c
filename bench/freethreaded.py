"""Free-threaded Python (3.14t) against the GIL build (3.14): what tracing a call-heavy loop
costs per event, and how traced throughput per thread scales from 1 to 2 threads on 3.14t.

    python3 bench/freethreaded.py [--calls N] [--repeat R] [--ft PY] [--gil PY]

Each run is a fresh process: T threads (a barrier starts them at once) each call f() N
times; each thread reports its own seconds. Untraced runs are the plain program; traced runs
are `PY -m pytrace record -o FILE -- PY -c PROGRAM` (the recorder drains the rings, policy
drop, default ring size; the recording's dropped count is printed). ns/event = (traced -
untraced seconds per thread) / (2 events per call). Runs are interleaved (untraced, traced,
untraced, ...) and the median of R is taken, as the machine is noisy. Per-thread throughput
is calls per second of one thread's own loop; with 2 threads on 2 cores it should not fall
below the 1-thread figure when the tracer shares nothing between threads.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PROGRAM = r'''
import json, sys, threading, time
T, N = int(sys.argv[1]), int(sys.argv[2])
def f(x):
    return x
def work(barrier, out, i):
    barrier.wait()
    t0 = time.perf_counter()
    for j in range(N):
        f(j)
    out[i] = time.perf_counter() - t0
barrier = threading.Barrier(T)
out = [0.0] * T
ts = [threading.Thread(target=work, args=(barrier, out, i)) for i in range(T)]
for t in ts: t.start()
for t in ts: t.join()
gil = getattr(sys, "_is_gil_enabled", lambda: True)()
print("RESULT " + json.dumps({"seconds": out, "gil": gil}))
'''


def run(py, threads, calls, traced):
    cmd = [py, "-c", PROGRAM, str(threads), str(calls)]
    dropped = None
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    # under the tree (ignored): the Debian unstable root of tests/sid/python3.14 sees it
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as tmp:
        if traced:
            rec = os.path.join(tmp, "ft.pytrace")
            cmd = [py, "-m", "pytrace", "record", "-o", rec, "--"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd="/tmp")
        if r.returncode != 0:
            sys.exit("%s failed:\n%s" % (" ".join(cmd[:6]), r.stderr))
        for line in r.stderr.splitlines():
            if "dropped" in line:
                dropped = line.strip()
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1]
    res = json.loads(line[7:])
    res["dropped"] = dropped
    return res


def measure(py, threads, calls, repeat):
    plain, traced, gil, notes = [], [], None, set()
    for _ in range(repeat):
        a = run(py, threads, calls, False)
        b = run(py, threads, calls, True)
        plain.append(statistics.mean(a["seconds"]))
        traced.append(statistics.mean(b["seconds"]))
        gil = b["gil"]
        if b["dropped"]:
            notes.add(b["dropped"])
    return statistics.median(plain), statistics.median(traced), gil, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ft", default="/opt/python3.14t/bin/python3.14t")
    ap.add_argument("--gil", default=os.path.join(ROOT, "tests", "sid", "python3.14"))
    a = ap.parse_args()
    print("call-heavy loop: f(j) x %d per thread, median of %d interleaved runs" % (a.calls, a.repeat))
    rows = {}
    for label, py in (("3.14 (GIL)", a.gil), ("3.14t", a.ft)):
        try:
            plain, traced, gil, notes = measure(py, 1, a.calls, a.repeat)
        except SystemExit as e:     # an interpreter that cannot record here: said, not hidden
            print("%-11s not measured: %s" % (label, str(e).strip().splitlines()[-1]))
            continue
        ns = (traced - plain) / (2 * a.calls) * 1e9
        rows[label] = (plain, traced)
        print("%-11s 1 thread : untraced %6.1f ns/call, traced %6.1f ns/call, %5.1f ns/event "
              "(GIL enabled: %s)%s" % (label, plain / a.calls * 1e9, traced / a.calls * 1e9, ns, gil,
                                      "; " + "; ".join(sorted(notes)) if notes else ""))
    for threads in (1, 2):
        plain, traced, gil, notes = measure(a.ft, threads, a.calls, a.repeat)
        print("3.14t       %d thread%s: traced %5.2f M calls/s per thread (untraced %5.2f M/s), "
              "GIL enabled: %s%s" % (threads, "s" if threads > 1 else " ", a.calls / traced / 1e6,
                                     a.calls / plain / 1e6, gil,
                                     "; " + "; ".join(sorted(notes)) if notes else ""))


if __name__ == "__main__":
    main()
