#!/usr/bin/env python3
"""Tracing overhead of pytrace against the untraced run and other deterministic tracers.

    python bench/overhead.py [--python python3.12] [--repeat 5] [--rounds 3] [--workload call-heavy]
                             [--tools untraced,pytrace-wait,...] [--no-install]

Every (tool, workload) pair runs in a fresh interpreter (bench/overhead_child.py); the
figure is the best of --repeat timed runs after one warm-up run, all inside one session of
the tool (one cProfile.Profile, one pytrace segment and reader). Tools run interleaved in
--rounds rounds and the median round is reported, so machine drift hits every tool alike. Tools:

  untraced       the workload alone
  hook-floor     an empty C callback on the hook and events pytrace uses (bench/hookfloor.c):
                 what any tracer on that hook pays per event before doing anything
  pytrace-wait   pytrace.start(policy="wait") with a reader draining in another process
                 (nothing may drop; the events_dropped column shows it)
  pytrace-drop   pytrace.start(policy="drop") with no reader: the ring fills in the warm-up
                 run, so this is the cost of dropping (and counting) every event
  cprofile       cProfile.Profile enable/disable
  yappi          yappi.start/stop (defaults: CPU clock, no builtins)
  viztracer      VizTracer start/stop (defaults: no C functions), not saved

ns/event = (tool seconds - untraced seconds) / events, where events is the number of
call and return events of Python and C functions in one run of the workload, counted by
a separate sys.setprofile (3.10/3.11) or sys.monitoring (3.12+) counting pass. pytrace's
own count (events_written, which also holds its bookkeeping records) is shown beside it.
yappi and VizTracer are installed with pip into the measured interpreter if missing
(--no-install to skip them instead). This is a benchmark: it prints figures, it asserts
nothing.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "overhead_child.py")
TOOLS = ["untraced", "hook-floor", "pytrace-wait", "pytrace-drop", "cprofile", "yappi", "viztracer"]
WORKLOADS = ["call-heavy", "mixed"]
PIP_NAMES = {"yappi": "yappi", "viztracer": "viztracer"}


def run_child(python, tool, workload, repeat):
    r = subprocess.run([python, CHILD, tool, workload, str(repeat)], capture_output=True,
                       text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])


def have_module(python, name):
    return subprocess.run([python, "-c", "import " + name], capture_output=True).returncode == 0


def ensure_tool(python, tool, install):
    """True if the tool can run; installs it with pip if allowed. Prints why not."""
    if tool == "hook-floor":
        return True
    if tool.startswith("pytrace"):
        if have_module(python, "pytrace._pytrace"):
            return True
        print("note: %s skipped: pytrace is not installed for %s (pip install .)" % (tool, python))
        return False
    if tool not in PIP_NAMES or have_module(python, tool):
        return True
    if install:
        print("note: installing %s for %s ..." % (PIP_NAMES[tool], python), flush=True)
        r = subprocess.run([python, "-m", "pip", "install", "-q", PIP_NAMES[tool]],
                           capture_output=True, text=True)
        if r.returncode == 0 and have_module(python, tool):
            return True
        print("note: %s skipped: pip install failed: %s"
              % (tool, (r.stderr.strip().splitlines() or ["?"])[-1]))
        return False
    print("note: %s skipped: not installed (--no-install)" % tool)
    return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable, help="interpreter to measure")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per child (best is kept)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds over all tools, interleaved; the median round is reported")
    p.add_argument("--workload", action="append", choices=WORKLOADS)
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--no-install", action="store_true")
    ns = p.parse_args(argv)
    print("$ " + " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv))
    version = subprocess.run([ns.python, "-c", "import sys, platform; print(sys.version.split()[0],"
                              " platform.machine())"], capture_output=True, text=True).stdout.strip()
    print("python: %s (%s)" % (ns.python, version))
    tools = [t for t in ns.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        p.error("unknown tools: %s" % ", ".join(sorted(unknown)))
    if "untraced" not in tools:
        tools.insert(0, "untraced")
    tools = [t for t in tools if ensure_tool(ns.python, t, not ns.no_install)]

    for workload in ns.workload or WORKLOADS:
        events = run_child(ns.python, "count", workload, 1)["events"]
        print()
        print("workload %s: %d call/return events per run (counting pass)" % (workload, events))
        header = "%-14s %9s %8s %10s %16s" % ("tool", "seconds", "ratio", "ns/event", "pytrace events")
        print(header)
        print("-" * len(header))
        results = {t: [] for t in tools}
        for _ in range(ns.rounds):          # interleaved, so drift hits every tool alike
            for tool in tools:
                try:
                    results[tool].append(run_child(ns.python, tool, workload, ns.repeat))
                except Exception as e:  # noqa: BLE001 - report and go on with the others
                    print("%-14s failed: %s" % (tool, e))
        base = None
        for tool in tools:
            runs = sorted(results[tool], key=lambda r: r["seconds"])
            if not runs:
                continue
            res = runs[len(runs) // 2]      # median over rounds of each round's best
            secs = res["seconds"]
            if tool == "untraced":
                base = secs
            ratio = secs / base if base else float("nan")
            per_event = (secs - base) * 1e9 / events if base is not None and events else float("nan")
            own = ""
            if "events_written" in res:
                own = "%d" % res["events_written"]
                if res.get("events_dropped"):
                    own += " (+%d dropped)" % res["events_dropped"]
            print("%-14s %9.3f %7.2fx %10.1f %16s" % (tool, secs, ratio, per_event, own))
    return 0


if __name__ == "__main__":
    sys.exit(main())
