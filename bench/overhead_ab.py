#!/usr/bin/env python3
"""Before/after: pytrace's ns/event in two installs of it, interleaved in one run.

    python bench/overhead_ab.py --a VENV_A/bin/python --b VENV_B/bin/python
                                [--workload call-heavy] [--rounds 5] [--repeat 5]
                                [--tools untraced,pytrace-wait,pytrace-drop,pytrace-wait-noc]

A and B are interpreters of the same Python with two builds of pytrace installed (say
main's and a branch's). Every (side, tool) runs in a fresh interpreter through
bench/overhead_child.py, as bench/overhead.py does; each round runs every tool on both
sides back to back, A first in odd rounds and B first in even ones, so that drift of the
machine hits both alike. ns/event = (tool seconds - that side's best untraced seconds) /
events (counted by the child's counting pass of side A). The table shows each side's
best round and the spread over the rounds, and B - A. It prints figures and asserts
nothing.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import run_child  # noqa: E402  (the same child, the same timing)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="interpreter with build A (before)")
    p.add_argument("--b", required=True, help="interpreter with build B (after)")
    p.add_argument("--workload", default="call-heavy", choices=["call-heavy", "mixed"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tools", default="untraced,pytrace-wait,pytrace-drop,pytrace-wait-noc")
    ns = p.parse_args(argv)
    tools = [t for t in ns.tools.split(",") if t]
    if "untraced" not in tools:
        tools.insert(0, "untraced")
    sides = {"A": ns.a, "B": ns.b}
    counts = run_child(ns.a, "count", ns.workload, 1)
    print("A: %s\nB: %s" % (ns.a, ns.b))
    print("workload %s: %d call/return events per run, %d of Python functions"
          % (ns.workload, counts["events"], counts["py_events"]))
    res = {(s, t): [] for s in sides for t in tools}
    for rnd in range(ns.rounds):
        order = ["A", "B"] if rnd % 2 == 0 else ["B", "A"]
        for tool in tools:
            for side in order:
                try:
                    res[(side, tool)].append(run_child(sides[side], tool, ns.workload, ns.repeat))
                except Exception as e:  # noqa: BLE001 - report and go on
                    print("%s %s failed: %s" % (side, tool, e))
    base = {s: min((r["seconds"] for r in res[(s, "untraced")]), default=None) for s in sides}
    print("untraced best: A %.4f s, B %.4f s" % (base["A"], base["B"]))
    print("%-18s %10s %13s %10s %13s %8s   %s" % ("tool", "A ns/ev", "A spread", "B ns/ev", "B spread",
                                                 "B-A", "events written A / B"))
    for tool in tools:
        if tool == "untraced":
            continue
        events = counts["py_events"] if tool.endswith("-noc") else counts["events"]
        row = {}
        for s in sides:
            per = sorted((r["seconds"] - base[s]) * 1e9 / events for r in res[(s, tool)])
            if per:
                best = min(res[(s, tool)], key=lambda r: r["seconds"])
                row[s] = (per, best.get("events_written", ""))
        if len(row) != 2:
            continue
        (pa, wa), (pb, wb) = row["A"], row["B"]
        print("%-18s %10.1f %13s %10.1f %13s %+8.1f   %s / %s" % (
            tool, pa[0], "%.1f-%.1f" % (pa[0], pa[-1]), pb[0], "%.1f-%.1f" % (pb[0], pb[-1]),
            pb[0] - pa[0], wa, wb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
