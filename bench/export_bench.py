"""Export benchmark: a recording of >= 100 million events, exported to every format in
a child process each, pinned to one core; prints M events/s, wall time and peak RSS per
format next to the size of the recording and of each output (and its bytes per
event). Not a test: it asserts
nothing.

    python bench/export_bench.py                      # 100M events, in a temp dir
    python bench/export_bench.py --events 10e6 --workdir /tmp/pt-bench --keep
    python bench/export_bench.py --threads 2000,5000,10000,50000   # the HTML report vs threads

--threads: crafted recordings of N short threads each (a thread runs main -> work -> leaf
once, as a program that starts a thread per task); prints the HTML report's and pstats'
export time and the report's size per N (the report did a query over every thread's
calls per thread: quadratic).

Needs pytrace installed for this interpreter. Disk: the recording is ~16 bytes per event
(1.6 GB for 100M); each output is written, measured and deleted before the next.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

WORKLOAD = '''
import sys

def tick():
    pass

def main(calls):
    for _ in range(calls):
        tick()

main(int(sys.argv[1]))
'''

FORMATS = (("collapsed", "stacks.folded"), ("pstats", "profile.pstats"),
           ("chrome", "trace.json"), ("perfetto", "trace.pftrace"),
           ("speedscope", "profile.speedscope.json"))


def _one_core():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_measured(cmd, one_core=False):
    """Run cmd; return (exit status, wall seconds, peak RSS of that child in bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_one_core if one_core else None)
    # wait4 gives this child's own rusage (RUSAGE_CHILDREN would be the max over all).
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return proc.returncode, wall, usage.ru_maxrss * 1024, err


def mib(n):
    return n / (1 << 20)


def write_threads_recording(path, threads):
    """A recording of `threads` short threads, one after another (crafted: the messages
    a job that starts a thread per task gives)."""
    # the message builder the tests use (tests/python/support/synthetic.py: not in the wheel)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python",
                                    "support"))
    try:
        import synthetic as syn
    finally:
        sys.path.pop(0)
    from pytrace.reader import EventKind
    from pytrace.recording import RecordingWriter
    call, ret = int(EventKind.Call), int(EventKind.Return)
    with RecordingWriter(path, lossless=True) as w:
        w.append(syn.process_info(pid=4242, command_line="python threads.py"))
        for sid, name in ((1, "main"), (2, "work"), (3, "leaf")):
            w.append(syn.symbol(sid, name, "threads.py", sid, kind=0, profile_name=name))
        t = 1000
        for n in range(1, threads + 1):
            w.append(syn.thread_start(n, name="Thread-%d" % n, ticks=t))
            w.append(syn.event_chunk(n, [(t + 1, 1, call), (t + 2, 2, call), (t + 3, 3, call),
                                         (t + 50, 3, ret), (t + 60, 2, ret), (t + 70, 1, ret)]))
            w.append(syn.thread_end(n, t + 80, events_written=6))
            t += 100_000            # 0.1 ms apart
        w.append(syn.producer_status(state=3, events_written=6 * threads))


def bench_threads(counts, work):
    py = sys.executable
    print("%-8s %12s %12s %14s" % ("threads", "html s", "pstats s", "html MiB"))
    for n in counts:
        rec = os.path.join(work, "threads-%d.pytrace" % n)
        write_threads_recording(rec, n)
        row = [n]
        for fmt in ("html", "pstats"):
            out = os.path.join(work, "threads-%d.%s" % (n, fmt))
            rc, wall, _rss, err = run_measured([py, "-m", "pytrace", "export", rec, "-f", fmt, "-o", out])
            if rc != 0:
                print("%s failed (exit %d): %s" % (fmt, rc, err.strip()[-300:]))
            size = os.path.getsize(out) if os.path.exists(out) else 0
            if os.path.exists(out):
                os.unlink(out)
            row += [wall, size]
        os.unlink(rec)
        print("%-8d %12.2f %12.2f %14.1f" % (row[0], row[1], row[3], mib(row[2])), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=float, default=100e6, help="events to record (default 100e6)")
    p.add_argument("--workdir", default=None, help="where to put the recording (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the recording")
    p.add_argument("--recording", default=None, help="export this existing recording instead")
    p.add_argument("--threads", default=None, metavar="N,N,...",
                   help="instead: the HTML report (and pstats) of crafted recordings of N short threads")
    args = p.parse_args()
    py = sys.executable
    print("command: %s" % " ".join(shlex.quote(a) for a in [py] + sys.argv))
    print("python:  %s" % sys.version.split()[0])
    work = args.workdir or tempfile.mkdtemp(prefix="pytrace-export-bench-")
    os.makedirs(work, exist_ok=True)
    if args.threads:
        try:
            bench_threads([int(float(x)) for x in args.threads.split(",")], work)
        finally:
            if not args.workdir:
                shutil.rmtree(work, ignore_errors=True)
        return 0
    try:
        if args.recording:
            rec = args.recording
            events = None
        else:
            script = os.path.join(work, "tight_calls.py")
            with open(script, "w") as f:
                f.write(WORKLOAD)
            rec = os.path.join(work, "bench.pytrace")
            calls = int(args.events) // 2 + 1000        # Call + Return per call
            cmd = [py, "-m", "pytrace", "record", "-o", rec, "--no-c-calls", "--", py, script, str(calls)]
            print("record:  %s" % " ".join(shlex.quote(a) for a in cmd))
            rc, wall, rss, err = run_measured(cmd)
            summary = [line for line in err.splitlines() if "events written" in line]
            if rc != 0 or not summary:
                print(err, file=sys.stderr)
                print("recording failed (exit %d)" % rc, file=sys.stderr)
                return 1
            events = int(summary[-1].split("pytrace record: ")[1].split(" events written")[0])
            print("         %s" % summary[-1])
            print("         %.1f s wall, recorder+job peak RSS %.0f MiB" % (wall, mib(rss)))
        size = os.path.getsize(rec)
        print("recording: %s, %.1f MiB%s" % (rec, mib(size),
                                            ", %d events" % events if events is not None else ""))
        print()
        print("%-11s %10s %14s %12s %16s %9s %s" % ("format", "wall s", "peak RSS MiB", "RSS/file",
                                                    "output MiB", "B/event", "events/s"))
        for fmt, name in FORMATS:
            out = os.path.join(work, name)
            cmd = [py, "-m", "pytrace", "export", rec, "--format", fmt, "-o", out]
            rc, wall, rss, err = run_measured(cmd, one_core=True)
            out_size = os.path.getsize(out) if os.path.exists(out) else 0
            if os.path.exists(out):
                os.unlink(out)
            if rc != 0:
                print("%-11s failed (exit %d): %s" % (fmt, rc, err.strip().splitlines()[-1:] or ""))
                continue
            if events is None:
                line = [x for x in err.splitlines() if x.startswith("pytrace export: ") and " events, " in x]
                n = int(line[0].split()[2]) if line else 0
            else:
                n = events
            rate = ("%.2fM" % (n / wall / 1e6)) if n else "-"
            per_event = ("%.2f" % (out_size / n)) if n else "-"
            print("%-11s %10.1f %14.1f %11.2f%% %16.1f %9s %s" % (fmt, wall, mib(rss), 100.0 * rss / size,
                                                              mib(out_size), per_event, rate), flush=True)
    finally:
        if not args.keep and not args.recording:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
