#!/usr/bin/env python3
"""Tracing overhead of pytrace against the untraced run and other deterministic tracers.

    python bench/overhead.py [--python python3.12] [--repeat 5] [--rounds 3] [--workload call-heavy]
                             [--tools untraced,pytrace-wait,...] [--no-install]

Every (tool, workload) pair runs in a fresh interpreter (bench/overhead_child.py); a
round's figure is the best of --repeat timed runs after one warm-up run, all inside one
session of the tool (one cProfile.Profile, one pytrace segment and reader). Tools run
interleaved in --rounds rounds. The table shows each tool's best round (noise only adds
time; on a VM whose CPU is throttled for whole stretches, the median round can be a
throttled one for one tool and not for another) and the spread of ns/event over the
rounds; a note says when the untraced run itself varied by more than 10%.

Every tool is measured twice, as it is compared: with C functions traced (pytrace's,
cProfile's and VizTracer's default) and without them (suffix -noc; yappi's default):

  untraced        the workload alone
  hook-floor      an empty C callback on the hook and events pytrace uses
                  (bench/hookfloor.c): what any tracer on that hook pays per event before
                  doing anything. Without C calls on 3.11 that hook is the
                  frame-evaluation function (PEP 523), which only evaluates the frame
  pytrace-wait    pytrace.start(policy="wait") with a reader draining in another process
                  (nothing may drop; the events_dropped column shows it)
  pytrace-drop    pytrace.start(policy="drop") with no reader: the ring fills in the warm-up
                  run, so this is the cost of dropping (and counting) every event
  cprofile        cProfile.Profile(builtins=...) enable/disable
  yappi           yappi.start(builtins=...)/stop (its default clock, CPU time)
  viztracer       VizTracer(ignore_c_function=...) start/stop, not saved

ns/event = (tool seconds - untraced seconds) / events, where events is the number of
call and return events in one run of the workload, counted by a separate sys.setprofile
(3.10/3.11) or sys.monitoring (3.12+) pass: of Python and C functions for the tools that
trace C functions, of Python functions only for the -noc ones. "x cProfile" divides a
tool's ns/event by cProfile's in the same group. pytrace's own count (events_written,
which also holds its bookkeeping records) is shown beside it. yappi and VizTracer are
installed with pip into the measured interpreter if missing (--no-install to skip them
instead). This is a benchmark: it prints figures, it asserts nothing.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "overhead_child.py")
BASE_TOOLS = ["hook-floor", "pytrace-wait", "pytrace-drop", "cprofile", "viztracer", "yappi"]
TOOLS = ["untraced"] + BASE_TOOLS + [t + "-noc" for t in BASE_TOOLS if t != "pytrace-drop"]
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
    tool = tool[:-4] if tool.endswith("-noc") else tool
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
                   help="rounds over all tools, interleaved; each tool's best round is reported")
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
        counts = run_child(ns.python, "count", workload, 1)
        print()
        print("workload %s: %d call/return events per run, %d of them of Python functions "
              "(counting pass)" % (workload, counts["events"], counts["py_events"]))
        results = {t: [] for t in tools}
        for _ in range(ns.rounds):          # interleaved, so drift hits every tool alike
            for tool in tools:
                try:
                    results[tool].append(run_child(ns.python, tool, workload, ns.repeat))
                except Exception as e:  # noqa: BLE001 - report and go on with the others
                    print("%-18s failed: %s" % (tool, e))
        base_runs = sorted(r["seconds"] for r in results.get("untraced", []))
        if not base_runs:
            print("untraced failed: no figures")
            continue
        base = base_runs[0]
        if len(base_runs) > 1 and base_runs[-1] > 1.10 * base_runs[0]:
            print("note: the untraced run took %.3f-%.3f s over the rounds (more than 10%% apart): "
                  "the machine was noisy, the figures below are not reliable; run again"
                  % (base_runs[0], base_runs[-1]))
        header = "%-18s %8s %7s %9s %13s %11s %18s" % (
            "tool", "seconds", "ratio", "ns/event", "spread", "x cProfile", "pytrace events")
        for group, suffix, events in (("C functions traced", "", counts["events"]),
                                      ("C functions not traced", "-noc", counts["py_events"])):
            rows = [t for t in tools if t != "untraced" and t.endswith("-noc") == (suffix == "-noc")]
            if not rows:
                continue
            print()
            print("%s (ns/event over %d events)" % (group, events))
            print(header)
            print("-" * len(header))
            print("%-18s %8.3f %6.2fx %9.1f %13s %11s %18s" % ("untraced", base, 1.0, 0.0, "", "", ""))
            per_event = {}
            for tool in rows:
                runs = sorted(results[tool], key=lambda r: r["seconds"])
                if runs:
                    per_event[tool] = [(r["seconds"] - base) * 1e9 / events for r in runs]
            ref = per_event.get("cprofile" + suffix)
            ref = ref[0] if ref else None
            for tool in rows:
                runs = sorted(results[tool], key=lambda r: r["seconds"])
                if not runs:
                    continue
                res = runs[0]                   # the best round
                ns_event = per_event[tool][0]
                spread = "%.1f-%.1f" % (per_event[tool][0], per_event[tool][-1])
                vs = "%.2f" % (ns_event / ref) if ref else ""
                own = ""
                if "events_written" in res:
                    own = "%d" % res["events_written"]
                    if res.get("events_dropped"):
                        own += " (+%d dropped)" % res["events_dropped"]
                print("%-18s %8.3f %6.2fx %9.1f %13s %11s %18s" % (
                    tool, res["seconds"], res["seconds"] / base, ns_event, spread, vs, own))
            hooks = {r.get("hook") for t in rows for r in results[t] if r.get("hook")}
            if hooks:
                print("pytrace's hook: %s" % ", ".join(sorted(hooks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
