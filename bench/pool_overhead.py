"""Pool overhead (issue 13): a 1,000-task multiprocessing.Pool, untraced and recorded.

    python bench/pool_overhead.py [--tasks 1000] [--runs 5] [--workers 4,50]
                                  [--methods fork,spawn]

For each start method and pool size it runs the job untraced (`python job.py`) and
recorded (`pytrace record -o F -- python job.py`, --subprocesses on by default),
interleaved, `--runs` times each. The job measures its own pool time (Pool() to the
end of its `with` block, time.perf_counter) and prints it; the figure is the median.
The recording is then checked: calls of the worker function, per process, equal the
tasks that process ran (the job prints them), and add up to the tasks.
Prints one line per case. Not a test: no time is asserted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

JOB = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys, time
    def work(i):
        s = 0
        for k in range(200):
            s += k
        return os.getpid()
    if __name__ == "__main__":
        method, workers, tasks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        ctx = mp.get_context(method)
        t0 = time.perf_counter()
        with ctx.Pool(workers) as p:
            pids = p.map(work, range(tasks), chunksize=1)
        t1 = time.perf_counter()
        per = {}
        for pid in pids:
            per[pid] = per.get(pid, 0) + 1
        print(json.dumps({"pool_s": t1 - t0, "per_pid": per}))
""")


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(argv), p.stderr[-2000:]))
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def worker_calls(path):
    """Calls of `work` per pid, from the recording."""
    from pytrace.recording import RecordingReader
    from pytrace.reader import EventKind
    names, pids, calls = {}, {}, {}
    with RecordingReader(path) as rr:
        for m in rr.messages():
            kind = type(m).__name__
            proc = getattr(m, "process", 0)
            if kind == "ProcessInfo":
                pids[proc] = m.pid
            elif kind == "Symbol":
                names[(proc, m.id)] = m.name
            elif kind == "EventChunk":
                for _t, ident, _a, k, _f in m.iter_events():
                    if k == EventKind.Call and names.get((proc, ident)) == "work":
                        calls[pids[proc]] = calls.get(pids[proc], 0) + 1
    return calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", default="4,50")
    ap.add_argument("--methods", default="fork,spawn")
    a = ap.parse_args()
    py = sys.executable
    tmp = tempfile.mkdtemp(prefix="pool-bench-")
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    print("command: %s bench/pool_overhead.py --tasks %d --runs %d --workers %s --methods %s"
          % (os.path.basename(py), a.tasks, a.runs, a.workers, a.methods))
    hook = ("sys.monitoring" if sys.version_info >= (3, 12) else "PyEval_SetProfile (C calls on)")
    print("python %s, hook %s" % (sys.version.split()[0], hook))
    print("pool time, median of %d interleaved runs (the job's own clock around the pool)" % a.runs)
    for method in a.methods.split(","):
        for workers in [int(w) for w in a.workers.split(",")]:
            args = [job, method, str(workers), str(a.tasks)]
            plain, traced, ok = [], [], True
            for i in range(a.runs):
                out, _ = run([py] + args)
                plain.append(out["pool_s"])
                rec = os.path.join(tmp, "r%d.pytrace" % i)
                out, err = run([py, "-m", "pytrace", "record", "-o", rec, "--", py] + args)
                traced.append(out["pool_s"])
                calls = worker_calls(rec)
                want = {int(k): v for k, v in out["per_pid"].items()}
                if calls != want or sum(calls.values()) != a.tasks:
                    ok = False
                    print("  MISMATCH run %d: recorded %s, ran %s" % (i, calls, want))
                os.unlink(rec)
            mp_, mt = statistics.median(plain), statistics.median(traced)
            print("  %-5s Pool(%2d) %d tasks: untraced %.3f s, recorded %.3f s = %.2fx; "
                  "per-process calls of work %s"
                  % (method, workers, a.tasks, mp_, mt, mt / mp_, "exact" if ok else "WRONG"))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
