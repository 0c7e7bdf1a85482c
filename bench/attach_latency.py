"""How long `pytrace attach` and `pytrace detach` take, by what the target's main thread does.

sys.remote_exec (PEP 768) only asks: the target's main thread runs the script at its next
eval-breaker check, so the latency is how soon the main thread runs Python code again,
plus the attach itself (loading _pytrace, creating the segment, instrumenting the code).

    python3.14 bench/attach_latency.py [--rounds N]

Each target is a fresh process of this interpreter; the figures are the wall time of
pytrace.attach.attach() / detach() in this process (from the request to the answer in
its result FIFO).
A main thread blocked in C (time.sleep, a lock, join) runs nothing until it wakes: those
rows give the time until it woke, or the timeout.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

TARGETS = {
    "busy main thread (pure Python loop)": '''
        import time
        end = time.monotonic() + 600
        while time.monotonic() < end:
            sum(range(100))
    ''',
    "main thread sleeps 10 ms at a time": '''
        import time
        while True:
            time.sleep(0.01)
    ''',
    "main thread in select(0.05), 2 busy workers (GIL)": '''
        import select, sys, threading
        def spin():
            while True:
                sum(range(100))
        for _ in range(2):
            threading.Thread(target=spin, daemon=True).start()
        while True:
            select.select([], [], [], 0.05)
    ''',
    "main thread in time.sleep(1.0) loops": '''
        import time
        while True:
            time.sleep(1.0)
    ''',
    "main thread blocked in join() (never wakes)": '''
        import threading, time
        t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
        t.start()
        t.join()
    ''',
}


def measure(code, rounds, timeout):
    from pytrace import attach
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))
    proc = subprocess.Popen([sys.executable, f.name])
    time.sleep(0.5)
    options = attach.start_options()
    a, d, failures = [], [], []
    try:
        for _ in range(rounds):
            t0 = time.monotonic()
            try:
                attach.attach(proc.pid, options, timeout)
            except attach.AttachError as e:
                failures.append("attach: %s" % e.kind)
                continue
            a.append(time.monotonic() - t0)
            t0 = time.monotonic()
            try:
                attach.detach(proc.pid, 60.0)
            except attach.AttachError as e:
                failures.append("detach: %s" % e.kind)
                break
            d.append(time.monotonic() - t0)
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        os.unlink(f.name)
    return a, d, failures


def fmt(values):
    if not values:
        return "%-26s" % "-"
    ms = sorted(v * 1e3 for v in values)
    return "%7.1f %7.1f %7.1f ms   " % (ms[0], statistics.median(ms), ms[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--timeout", type=float, default=2.0, help="attach timeout (s)")
    ns = p.parse_args()
    print("python: %s (%s)" % (sys.executable, sys.version.split()[0]))
    print("%d attach/detach rounds per target, attach timeout %g s; min / median / max"
          % (ns.rounds, ns.timeout))
    print("%-52s %-26s %-26s %s" % ("target", "attach", "detach", "failures"))
    for name, code in TARGETS.items():
        a, d, failures = measure(code, ns.rounds, ns.timeout)
        print("%-52s %s %s %s" % (name, fmt(a), fmt(d), ", ".join(sorted(set(failures))) or "-"))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
