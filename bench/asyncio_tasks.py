#!/usr/bin/env python3
"""The cost of asyncio task records (issue 23): many short tasks, interleaved in one run.

    python bench/asyncio_tasks.py [--tasks 20000] [--sleeps 3] [--rounds 5]
    valgrind --tool=callgrind python bench/asyncio_tasks.py --only tasks-on --tasks 2000

Each round runs the same workload (N tasks, each awaiting asyncio.sleep(0) S times: S + 1
steps per task, S Pending suspends with one Sleep await each) three ways, back to back:
untraced; traced (pytrace.start, drop policy, C calls on) with task records off
(`_pytrace._tasks_set(False)`); traced with them on (the default). The best round of
each is kept. Printed: ns per task step and per task over untraced, and the difference
that task records make. It prints figures and asserts nothing.

--only MODE runs one mode once (for callgrind: the instruction counts of tasks-on and
tasks-off runs, less each other, over the task steps give the cost of a step's records
without the machine's noise; the ring fills early in a run and most events are then
dropped, so the tracer's own share is that of the drop path; --ring-mib 64 gives a ring
that holds the whole run, the cost when a reader keeps up).
"""

import argparse
import asyncio
import time

import pytrace
from pytrace import _pytrace


async def _worker(sleeps):
    for _ in range(sleeps):
        await asyncio.sleep(0)


async def _main(tasks, sleeps):
    await asyncio.gather(*(asyncio.create_task(_worker(sleeps)) for _ in range(tasks)))


def _once(mode, tasks, sleeps, ring_mib=0):
    loop = asyncio.new_event_loop()
    try:
        if mode != "untraced":
            _pytrace._tasks_set(mode == "tasks-on")
            if ring_mib:   # one ring that holds the whole run: no push takes the drop path
                pytrace.start(policy="drop", chunk_bytes=1 << 20, chunks_per_ring=ring_mib)
            else:
                pytrace.start(policy="drop")
        t0 = time.perf_counter()
        loop.run_until_complete(_main(tasks, sleeps))
        elapsed = time.perf_counter() - t0
        stats = _pytrace._tasks_stats()
        if mode != "untraced":
            pytrace.stop()
    finally:
        loop.close()
        _pytrace._tasks_set(True)
    return elapsed, stats


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--sleeps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", choices=("untraced", "tasks-off", "tasks-on"),
                   help="run this mode once and print its time only")
    p.add_argument("--ring-mib", type=int, default=0,
                   help="with --only: a ring of this many MiB (a power of two) that holds the whole "
                        "run, so records go the way they go when a reader keeps up, not the full "
                        "ring's drop path (default: the tracer's ring, which fills early)")
    ns = p.parse_args(argv)
    if ns.only:
        elapsed, stats = _once(ns.only, ns.tasks, ns.sleeps, ns.ring_mib)
        print("%s: %d tasks x %d sleep(0) in %.1f ms; %s" % (ns.only, ns.tasks, ns.sleeps, elapsed * 1e3, stats))
        return
    modes = ("untraced", "tasks-off", "tasks-on")
    best = dict.fromkeys(modes, float("inf"))
    last_stats = None
    for r in range(ns.rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        for mode in order:
            elapsed, stats = _once(mode, ns.tasks, ns.sleeps)
            best[mode] = min(best[mode], elapsed)
            if mode == "tasks-on":
                last_stats = stats
    steps = ns.tasks * (ns.sleeps + 1)
    print("%d tasks x %d sleep(0): %d task steps per run, best of %d rounds" % (
        ns.tasks, ns.sleeps, steps, ns.rounds))
    print("task symbols written in the last traced run: %s" % last_stats)
    for mode in modes:
        extra = best[mode] - best["untraced"]
        print("%-9s %8.1f ms   %7.0f ns/step  %8.0f ns/task over untraced" % (
            mode, best[mode] * 1e3, extra / steps * 1e9, extra / ns.tasks * 1e9))
    d = best["tasks-on"] - best["tasks-off"]
    print("task records: %+.0f ns per task step, %+.0f ns per task (tasks-on - tasks-off)" % (
        d / steps * 1e9, d / ns.tasks * 1e9))


if __name__ == "__main__":
    main()
