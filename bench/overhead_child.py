"""One measurement of bench/overhead.py, in a fresh interpreter.

    python overhead_child.py TOOL WORKLOAD REPEAT

Prints one JSON line: {"seconds": best wall time of the workload, "events": ...}.
TOOL: untraced | count | hook-floor | pytrace-wait | pytrace-drop | cprofile | yappi | viztracer
"count" runs the workload once under a counting profiler and reports the number of
call/return events (Python and C functions, the ones a deterministic profiler sees).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

# ---- workloads -------------------------------------------------------------


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def add(self, other):
        return Vec(self.x + other.x, self.y + other.y)

    def dot(self, other):
        return self.x * other.x + self.y * other.y


def call_heavy():
    total = fib(27)
    v = Vec(0, 0)
    step = Vec(1, 2)
    for _ in range(250000):
        v = v.add(step)
        total += v.dot(step)
    return total


WORD = re.compile(r"[a-z]+(\d+)")


class Record:
    def __init__(self, name, value):
        self.name = name
        self.value = value

    def key(self):
        return (self.value % 17, self.name)

    def as_dict(self):
        return {"name": self.name, "value": self.value, "tags": [self.value % 3, "x"]}


def mixed():
    total = 0
    for round_ in range(50):
        records = [Record("item%d" % i, (i * 7919 + round_) % 1000) for i in range(1500)]
        text = json.dumps([r.as_dict() for r in records])
        back = json.loads(text)
        total += len(back)
        for m in WORD.finditer(text[:20000]):
            total += int(m.group(1)) & 1
        records.sort(key=Record.key)
        total += sorted(back, key=lambda d: (d["value"], d["name"]))[0]["value"]
    return total


WORKLOADS = {"call-heavy": call_heavy, "mixed": mixed}

# ---- tools -----------------------------------------------------------------


def count_events(work):
    """Call/return events of Python and C functions (what cProfile sees)."""
    n = [0]
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        tool = 5
        mon.use_tool_id(tool, "count")
        E = mon.events
        c_types = (type(len), type(str.join))

        def py(*args):
            n[0] += 1

        def call(code, offset, func, arg0):
            if isinstance(func, c_types):
                n[0] += 1

        def c_end(code, offset, func, arg0):
            if isinstance(func, c_types):
                n[0] += 1
        for ev in (E.PY_START, E.PY_RESUME, E.PY_THROW, E.PY_RETURN, E.PY_YIELD, E.PY_UNWIND):
            mon.register_callback(tool, ev, py)
        mon.register_callback(tool, E.CALL, call)
        mon.register_callback(tool, E.C_RETURN, c_end)
        mon.register_callback(tool, E.C_RAISE, c_end)
        mon.set_events(tool, E.PY_START | E.PY_RESUME | E.PY_THROW | E.PY_RETURN | E.PY_YIELD
                       | E.PY_UNWIND | E.CALL | E.C_RETURN | E.C_RAISE)
        work()
        mon.set_events(tool, 0)
    else:
        def prof(frame, event, arg):
            n[0] += 1
        sys.setprofile(prof)
        work()
        sys.setprofile(None)
    return n[0] - 2   # the profiler's own install/remove calls


def _timed(work, repeat, before=None, after=None):
    best = None
    for _ in range(repeat):
        if before:
            before()
        t0 = time.perf_counter()
        work()
        dt = time.perf_counter() - t0
        if after:
            after()
        best = dt if best is None else min(best, dt)
    return best


def run_pytrace(work, repeat, policy):
    """One tracing session (and, for policy wait, one live reader in another process)
    across all timed runs, as cProfile keeps one Profile: first-sight interning is paid
    in the warm-up run, like every other tool's per-function setup."""
    import pytrace
    segment = pytrace.start(policy=policy, wait_timeout=10.0)
    reader = None
    if policy == "wait":
        go = tempfile.mktemp(prefix="pytrace-bench-go-")
        reader = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--reader",
                                   segment, go])
        while not os.path.exists(go):
            time.sleep(0.001)
        os.unlink(go)
    work()   # warm-up inside the session: symbols are interned here
    before = pytrace.counters()
    best = _timed(work, repeat)
    after = pytrace.stop()
    if reader is not None:
        reader.wait()
    runs = repeat
    return best, {"events_written": (after.events_written - before.events_written) // runs,
                  "events_dropped": (after.events_dropped - before.events_dropped) // runs}


def load_hookfloor():
    """Build bench/hookfloor.c for this interpreter (cached in the temp dir) and import it."""
    import importlib.util
    import sysconfig
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hookfloor.c")
    out_dir = os.path.join(tempfile.gettempdir(), "pytrace-hookfloor-%s" % sys.implementation.cache_tag)
    os.makedirs(out_dir, exist_ok=True)
    so = os.path.join(out_dir, "hookfloor" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"],
                        src, "-o", so], check=True)
    spec = importlib.util.spec_from_file_location("hookfloor", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_hookfloor(work, repeat):
    """Empty C callbacks on exactly the hook and events pytrace uses (c_calls on)."""
    hf = load_hookfloor()
    if sys.version_info >= (3, 12):
        mon, E, tool = sys.monitoring, sys.monitoring.events, 4
        mon.use_tool_id(tool, "hookfloor")
        events = (E.PY_START | E.PY_RESUME | E.PY_THROW | E.PY_RETURN | E.PY_YIELD | E.PY_UNWIND
                  | E.CALL | E.C_RETURN | E.C_RAISE)
        noop = hf.vc_noop()   # the callback kind pytrace registers (vectorcall object)
        for ev in (E.PY_START, E.PY_RESUME, E.PY_THROW, E.PY_RETURN, E.PY_YIELD, E.PY_UNWIND,
                   E.CALL, E.C_RETURN, E.C_RAISE):
            mon.register_callback(tool, ev, noop)
        seconds = _timed(work, repeat, lambda: mon.set_events(tool, events), lambda: mon.set_events(tool, 0))
        mon.free_tool_id(tool)
        return seconds
    return _timed(work, repeat, lambda: hf.setprofile(True), lambda: hf.setprofile(False))


def reader_main(segment, go):
    """Drain a segment in this process until the producer stopped (raw messages)."""
    import pytrace
    with pytrace.Reader(segment, follow=True) as reader:
        open(go, "w").close()
        for _ in reader.raw():
            pass


def main(argv):
    if argv[0] == "--reader":
        return reader_main(argv[1], argv[2])
    tool, workload, repeat = argv[0], argv[1], int(argv[2])
    work = WORKLOADS[workload]
    work()   # warm up: imports, caches, specialisation
    extra = {}
    if tool == "untraced":
        seconds = _timed(work, repeat)
    elif tool == "count":
        seconds, extra["events"] = 0.0, count_events(work)
    elif tool in ("pytrace-wait", "pytrace-drop"):
        seconds, extra = run_pytrace(work, repeat, tool.split("-")[1])
    elif tool == "hook-floor":
        seconds = run_hookfloor(work, repeat)
    elif tool == "cprofile":
        import cProfile
        prof = cProfile.Profile()
        seconds = _timed(work, repeat, prof.enable, prof.disable)
    elif tool == "yappi":
        import yappi
        seconds = _timed(work, repeat, yappi.start, yappi.stop)
    elif tool == "viztracer":
        from viztracer import VizTracer
        tracer = VizTracer(verbose=0, tracer_entries=2_000_000)
        seconds = _timed(work, repeat, tracer.start, tracer.stop)
    else:
        raise SystemExit("unknown tool %s" % tool)
    print(json.dumps(dict(seconds=seconds, **extra)))


if __name__ == "__main__":
    main(sys.argv[1:])
