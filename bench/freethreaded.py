"""Free-threaded Python (3.14t) against the GIL build (3.14): what tracing a call-heavy loop
costs per event, and how traced throughput per thread scales from 1 to 2 threads on 3.14t.

    python3 bench/freethreaded.py [--calls N] [--repeat R] [--ft PY] [--gil PY]

Each run is a fresh process: T threads (a barrier starts them at once) each call f() N
times; each thread reports its own seconds. Three ways to run it:

- untraced: the plain program;
- held: the program starts tracing itself (`pytrace.start`, policy drop) with rings that
  hold the whole run, and no reader runs while the threads call: the tracer's own work
  alone (every thread writing its own ring), with no reader taking a core. The events
  written and dropped are printed (dropped must be 0);
- recorded: `PY -m pytrace record -o FILE -- PY -c PROGRAM` (the recorder drains the rings
  live, default policy wait and ring size); the recording's written and dropped counts are
  printed.

ns/event = (traced - untraced seconds per thread) / (2 events per call). Runs are
interleaved (untraced, held, recorded, untraced, ...) and the median of R is taken, as the
machine is noisy. Per-thread throughput is calls per second of one thread's own loop; with
2 threads on 2 cores it should not fall below the 1-thread figure when the tracer shares
nothing between threads (held). Recorded, the recorder is a third process on the 2 cores.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRATCH = os.path.join(ROOT, "build", "scratch")

PROGRAM = r"""
import json, sys, threading, time
T, N, HOLD = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "held"
def f(x):
    return x
def work(barrier, out, i):
    barrier.wait()
    t0 = time.perf_counter()
    for j in range(N):
        f(j)
    out[i] = time.perf_counter() - t0
barrier = threading.Barrier(T + 1)   # the threads and this one, once tracing is on
out = [0.0] * T
ts = [threading.Thread(target=work, args=(barrier, out, i)) for i in range(T)]
for t in ts: t.start()
counts = {}
if HOLD:
    import pytrace
    # a ring per thread that holds its 2 N events and the stack records around them
    # (a power of two of 1 MiB chunks)
    mib = 1 << ((2 * N * 16 >> 20) + 2).bit_length()
    try:
        pytrace.start(policy="drop", chunk_bytes=1 << 20, chunks_per_ring=mib)
    except BaseException:
        barrier.abort()
        raise
# separate processes started together (the machine's own 2-way scaling) meet at a wall time
at = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
while time.time() < at:
    time.sleep(0.001)
barrier.wait()
for t in ts: t.join()
if HOLD:
    c = pytrace.stop()
    counts = {"written": c.events_written, "dropped": c.events_dropped}
gil = getattr(sys, "_is_gil_enabled", lambda: True)()
print("RESULT " + json.dumps({"seconds": out, "gil": gil, "counts": counts}))
"""

MODES = ("untraced", "held", "recorded")


_inner = {}


def inner(py):
    """The interpreter's own path as the recorder sees it (tests/sid/python3.14 runs inside
    the Debian unstable root, where that wrapper does not exist)."""
    if py not in _inner:
        _inner[py] = subprocess.run([py, "-c", "import sys; print(sys.executable)"],
                                    capture_output=True, text=True, check=True,
                                    cwd=SCRATCH).stdout.strip()
    return _inner[py]


def run(py, threads, calls, mode, processes=1):
    """One run of T threads (or `processes` processes of T threads started together):
    {"seconds": [per thread], "gil": ..., "notes": [(written, dropped) per process]}."""
    notes = []
    # under the tree (ignored): the Debian unstable root of tests/sid/python3.14 sees it
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        cmds = []
        at = "%.3f" % (time.time() + 0.5) if processes > 1 else "0"
        for i in range(processes):
            cmd = [py, "-c", PROGRAM, str(threads), str(calls), mode, at]
            if mode == "recorded":
                rec = os.path.join(tmp, "ft%d.pytrace" % i)
                cmd = [py, "-m", "pytrace", "record", "-o", rec, "--", inner(py)] + cmd[1:]
            cmds.append(cmd)
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=tmp) for c in cmds]
        res = {"seconds": [], "gil": None}
        for cmd, p in zip(cmds, procs):
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                sys.exit("%s failed:\n%s" % (" ".join(cmd[:6]), err))
            note = None
            for line in err.splitlines():
                if "dropped" in line:
                    m = re.search(r"([\d,]+) events written, ([\d,]+) events dropped", line)
                    if m:
                        note = tuple(int(g.replace(",", "")) for g in m.groups())
            line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
            one = json.loads(line[7:])
            res["seconds"] += one["seconds"]
            res["gil"] = one["gil"]
            if one["counts"]:
                note = (one["counts"]["written"], one["counts"]["dropped"])
            if mode != "untraced" and note is None:   # never a figure without its counts
                sys.exit("%s: no events written/dropped line in:\n%s" % (" ".join(cmd[:6]), err))
            if note:
                notes.append(note)
    res["notes"] = notes
    return res


def measure(configs, calls, repeat):
    """Every (interpreter, threads, processes) of configs in each of its modes, interleaved
    run by run (the machine's speed drifts): {config: {mode: (median seconds per thread,
    GIL enabled, counts)}}."""
    secs = {c: {m: [] for m in c[3]} for c in configs}
    notes = {c: {m: [] for m in c[3]} for c in configs}
    gil = {}
    for _ in range(repeat):
        for c in configs:
            py, threads, processes, modes = c
            for m in modes:
                res = run(py, threads, calls, m, processes)
                secs[c][m].append(statistics.mean(res["seconds"]))
                gil[c] = res["gil"]
                notes[c][m] += res["notes"]
    return {c: {m: (statistics.median(secs[c][m]), gil[c], counts(notes[c][m])) for m in c[3]}
            for c in configs}


def counts(notes):
    """The runs' events written and dropped (per process), as one line."""
    if not notes:
        return ""
    w = sorted(n[0] for n in notes)
    d = max(n[1] for n in notes)
    return "{:,}{} events written per process, {} dropped".format(
        w[0], "" if w[0] == w[-1] else " to {:,}".format(w[-1]), "{:,} at most".format(d) if d else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ft", default="/opt/python3.14t/bin/python3.14t")
    ap.add_argument("--gil", default=os.path.join(ROOT, "tests", "sid", "python3.14"))
    a = ap.parse_args()
    os.makedirs(SCRATCH, exist_ok=True)
    print("call-heavy loop: f(j) x {:,} per thread, median of {} interleaved runs".format(
        a.calls, a.repeat))
    rows = [("3.14 (GIL)", (a.gil, 1, 1, MODES)), ("3.14t", (a.ft, 1, 1, MODES)),
            ("3.14t", (a.ft, 2, 1, MODES)),
            # the machine's own scaling: 2 processes of 1 thread each share nothing at all,
            # so what they lose per thread against 1 process is the cores' (a hypervisor,
            # shared caches), not the interpreter's nor the tracer's
            ("3.14t", (a.ft, 1, 2, ("untraced", "held")))]
    try:
        res = measure([c for _, c in rows], a.calls, a.repeat)
    except SystemExit as e:     # an interpreter that cannot run or record here: said
        sys.exit("not measured: %s" % str(e).strip().splitlines()[-1])
    for label, c in rows:
        r = res[c]
        plain = r["untraced"][0]
        what = ("%d threads" % c[1] if c[1] > 1 else
                "2 processes of 1 thread, started together" if c[2] > 1 else "1 thread")
        print("%-10s %s (GIL enabled: %s): untraced %5.2f M calls/s per thread"
              % (label, what, r["untraced"][1], a.calls / plain / 1e6))
        for m in c[3][1:]:
            t, _, notes = r[m]
            print("    %-8s %5.2f M calls/s per thread, %5.1f ns/event%s"
                  % (m, a.calls / t / 1e6, (t - plain) / (2 * a.calls) * 1e9,
                     " (%s)" % notes if notes else ""))


if __name__ == "__main__":
    main()
