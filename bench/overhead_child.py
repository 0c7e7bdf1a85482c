"""One measurement of bench/overhead.py, in a fresh interpreter.

    python overhead_child.py TOOL WORKLOAD REPEAT

Prints one JSON line: {"seconds": best wall time of the workload, ...}.
TOOL: untraced | count | hook-floor | pytrace-wait | pytrace-drop | cprofile | yappi |
      viztracer, and with the suffix -noc (C functions not traced): hook-floor-noc,
      pytrace-wait-noc, cprofile-noc, yappi-noc, viztracer-noc.
"count" runs the workload once under a counting profiler and reports the number of
call/return events: "events" of Python and C functions (what a deterministic profiler
sees with C calls on) and "py_events" of Python functions only.
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
    """(call/return events of Python and C functions, of Python functions only) in one run
    of `work`: what a deterministic profiler sees with and without C calls. The counter's
    own remove call (sys.setprofile(None), set_events(tool, 0)) is not counted."""
    n = [0]
    c = [0]
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        tool = 5
        mon.use_tool_id(tool, "count")
        E = mon.events
        c_types = (type(len), type(str.join))
        own = mon.set_events

        def py(*args):
            n[0] += 1

        def c_event(code, offset, func, arg0):
            if isinstance(func, c_types) and func is not own:
                n[0] += 1
                c[0] += 1
        for ev in (E.PY_START, E.PY_RESUME, E.PY_THROW, E.PY_RETURN, E.PY_YIELD, E.PY_UNWIND):
            mon.register_callback(tool, ev, py)
        for ev in (E.CALL, E.C_RETURN, E.C_RAISE):
            mon.register_callback(tool, ev, c_event)
        mon.set_events(tool, E.PY_START | E.PY_RESUME | E.PY_THROW | E.PY_RETURN | E.PY_YIELD
                       | E.PY_UNWIND | E.CALL | E.C_RETURN | E.C_RAISE)
        work()
        mon.set_events(tool, 0)
        mon.free_tool_id(tool)
    else:
        own = sys.setprofile

        def prof(frame, event, arg):
            if event.startswith("c_"):
                if arg is own:
                    return
                c[0] += 1
            n[0] += 1
        sys.setprofile(prof)
        work()
        sys.setprofile(None)
    return n[0], n[0] - c[0]


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


def run_pytrace(work, repeat, policy, c_calls=True):
    """One tracing session (and, for policy wait, one live reader in another process)
    across all timed runs, as cProfile keeps one Profile: first-sight interning is paid
    in the warm-up run, like every other tool's per-function setup."""
    import pytrace
    segment = pytrace.start(policy=policy, wait_timeout=10.0, c_calls=c_calls)
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
                  "events_dropped": (after.events_dropped - before.events_dropped) // runs,
                  "hook": after.hook}


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


def run_hookfloor(work, repeat, c_calls=True):
    """Empty C callbacks on exactly the hook and events pytrace uses."""
    hf = load_hookfloor()
    if sys.version_info >= (3, 12):
        mon, E, tool = sys.monitoring, sys.monitoring.events, 4
        mon.use_tool_id(tool, "hookfloor")
        events = E.PY_START | E.PY_RESUME | E.PY_THROW | E.PY_RETURN | E.PY_YIELD | E.PY_UNWIND
        if c_calls:
            events |= E.CALL | E.C_RETURN | E.C_RAISE
        noop = hf.vc_noop()   # the callback kind pytrace registers (vectorcall object)
        for ev in (E.PY_START, E.PY_RESUME, E.PY_THROW, E.PY_RETURN, E.PY_YIELD, E.PY_UNWIND,
                   E.CALL, E.C_RETURN, E.C_RAISE):
            mon.register_callback(tool, ev, noop)
        seconds = _timed(work, repeat, lambda: mon.set_events(tool, events), lambda: mon.set_events(tool, 0))
        mon.free_tool_id(tool)
        return seconds
    if not c_calls and hasattr(hf, "set_eval"):     # 3.11: pytrace's frame-evaluation hook
        return _timed(work, repeat, lambda: hf.set_eval(True), lambda: hf.set_eval(False))
    return _timed(work, repeat, lambda: hf.setprofile(True), lambda: hf.setprofile(False))


def reader_main(segment, go):
    """Drain a segment in this process until the producer stopped (raw messages)."""
    import pytrace
    # the segment itself (hub=False): a hub would wait for the job to exit, and the job
    # waits here for this reader to end after its stop() (the bench hung in reader.wait())
    with pytrace.Reader(segment, follow=True, hub=False) as reader:
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
    c_calls = not tool.endswith("-noc")
    name = tool[:-4] if tool.endswith("-noc") else tool
    if name == "untraced":
        seconds = _timed(work, repeat)
    elif name == "count":
        seconds = 0.0
        extra["events"], extra["py_events"] = count_events(work)
    elif name in ("pytrace-wait", "pytrace-drop"):
        seconds, extra = run_pytrace(work, repeat, name.split("-")[1], c_calls)
    elif name == "hook-floor":
        seconds = run_hookfloor(work, repeat, c_calls)
    elif name == "cprofile":
        import cProfile
        prof = cProfile.Profile(builtins=c_calls)
        seconds = _timed(work, repeat, prof.enable, prof.disable)
    elif name == "yappi":
        import yappi
        seconds = _timed(work, repeat, lambda: yappi.start(builtins=c_calls), yappi.stop)
    elif name == "viztracer":
        from viztracer import VizTracer
        tracer = VizTracer(verbose=0, tracer_entries=2_000_000, ignore_c_function=not c_calls)
        seconds = _timed(work, repeat, tracer.start, tracer.stop)
    else:
        raise SystemExit("unknown tool %s" % tool)
    print(json.dumps(dict(seconds=seconds, **extra)))


if __name__ == "__main__":
    main(sys.argv[1:])
