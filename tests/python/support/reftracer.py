"""Pure-Python reference tracer: the ground truth the pytrace stream is checked against.

Run a program under it exactly like `python script.py args`:

    python reftracer.py --out tree.json [--no-c-calls] [--setprofile] script.py [args...]

It builds one calling-context tree per thread with call counts and writes it as JSON
when the process exits (or when `dump()` is called, e.g. by a forked child before
os._exit). Conventions are pytrace's:

  * a Python function entry is a call; a generator/coroutine resume is a call too, and
    a yield closes the frame like a return;
  * C functions (builtin_function_or_method and method_descriptor callables, the ones
    CPython's profiler reports as c_call) are calls only when c_calls is on;
  * an exception leaving a frame closes it like a return.

Hooks: sys.setprofile + threading.setprofile on 3.10/3.11; sys.monitoring on 3.12+, or
there too sys.setprofile with --setprofile (CPython's own translation of monitoring events
into profile events, a second opinion on what each version reports: test_corpus checks that
both agree).
The tracer is installed before the program's first line, so threads the program starts
at any time are seen. The tree format is the one of calltree (tests/python/support/calltree.py).CallTree.to_json():
{"threads": {tid: [[parent_index, key, count], ...]}} with keys "py:qualname:file:line",
"c:name".
"""

import json
import os
import runpy
import sys
import threading

# builtin_function_or_method (and its subclass builtin_method, PyCMethod), method_descriptor:
# what CPython's own profilers count as C calls (PyCFunction_Check, PyMethodDescr_Type)
_C_TYPES = (type(len), type(str.join))


def _code_key(code):
    qualname = getattr(code, "co_qualname", code.co_name)
    return "py:%s:%s:%d" % (qualname, code.co_filename, code.co_firstlineno)


def _c_key(func):
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", "?")
    return "c:" + name


class _ThreadTree:
    __slots__ = ("rows", "children", "stack")

    def __init__(self):
        self.rows = [[-1, "<root>", 0]]       # [parent, key, count]
        self.children = [{}]                   # key -> row index
        self.stack = [0]

    def push(self, key):
        parent = self.stack[-1]
        kids = self.children[parent]
        index = kids.get(key)
        if index is None:
            index = len(self.rows)
            self.rows.append([parent, key, 0])
            self.children.append({})
            kids[key] = index
        self.rows[index][2] += 1
        self.stack.append(index)

    def pop(self):
        if len(self.stack) > 1:
            self.stack.pop()


class RefTracer:
    def __init__(self, c_calls=True, setprofile=False):
        self.c_calls = c_calls
        self.monitoring = sys.version_info >= (3, 12) and not setprofile
        self.threads = []       # one tree per thread, in order of first event
        self._local = threading.local()
        self.active = False

    def _tree(self):
        try:
            return self._local.tree
        except AttributeError:
            tree = _ThreadTree()
            self._local.tree = tree
            self.threads.append(tree)   # idents are reused; list order is unique
            return tree

    # ---- 3.10 / 3.11: setprofile ---------------------------------------
    def _profile(self, frame, event, arg):
        if event == "call":
            self._tree().push(_code_key(frame.f_code))
        elif event == "return":
            self._tree().pop()
        elif self.c_calls:
            if event == "c_call":
                self._tree().push(_c_key(arg))
            else:  # c_return, c_exception
                self._tree().pop()

    # ---- 3.12+: sys.monitoring -----------------------------------------
    def _mon_start(self, code, offset):
        self._tree().push(_code_key(code))

    def _mon_throw(self, code, offset, exception):
        self._tree().push(_code_key(code))

    def _mon_end(self, code, offset, value):
        self._tree().pop()

    def _mon_call(self, code, offset, callable_, arg0):
        if isinstance(callable_, _C_TYPES):
            self._tree().push(_c_key(callable_))

    def _mon_c_end(self, code, offset, callable_, arg0):
        if isinstance(callable_, _C_TYPES):
            self._tree().pop()

    def start(self):
        self.active = True
        if self.monitoring:
            mon = sys.monitoring
            tool = next(t for t in range(5, -1, -1) if mon.get_tool(t) is None)
            self._tool = tool
            mon.use_tool_id(tool, "pytrace-reftracer")
            E = mon.events
            mon.register_callback(tool, E.PY_START, self._mon_start)
            mon.register_callback(tool, E.PY_RESUME, self._mon_start)
            mon.register_callback(tool, E.PY_THROW, self._mon_throw)
            mon.register_callback(tool, E.PY_RETURN, self._mon_end)
            mon.register_callback(tool, E.PY_YIELD, self._mon_end)
            mon.register_callback(tool, E.PY_UNWIND, self._mon_end)
            events = (E.PY_START | E.PY_RESUME | E.PY_THROW | E.PY_RETURN | E.PY_YIELD
                      | E.PY_UNWIND)
            if self.c_calls:
                mon.register_callback(tool, E.CALL, self._mon_call)
                mon.register_callback(tool, E.C_RETURN, self._mon_c_end)
                mon.register_callback(tool, E.C_RAISE, self._mon_c_end)
                events |= E.CALL | E.C_RETURN | E.C_RAISE
            mon.set_events(tool, events)
        else:
            threading.setprofile(self._profile)
            sys.setprofile(self._profile)

    def stop(self):
        if not self.active:
            return
        self.active = False
        if self.monitoring:
            sys.monitoring.set_events(self._tool, 0)
            sys.monitoring.free_tool_id(self._tool)
        else:
            sys.setprofile(None)
            threading.setprofile(None)

    def to_json(self):
        return {"pid": os.getpid(),
                "threads": {str(i + 1): [list(r) for r in tree.rows]
                            for i, tree in enumerate(list(self.threads))}}


_tracer = None
_out = None


def dump(path=None):
    """Stop tracing and write this process's tree (a forked child calls this)."""
    _tracer.stop()
    path = path or _out.replace("{pid}", str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        json.dump(_tracer.to_json(), f)
    os.replace(path + ".tmp", path)


def main(argv=None):
    global _tracer, _out
    argv = list(sys.argv[1:] if argv is None else argv)
    c_calls = True
    setprofile = False
    while argv and argv[0].startswith("--"):
        opt = argv.pop(0)
        if opt == "--out":
            _out = argv.pop(0)
        elif opt == "--no-c-calls":
            c_calls = False
        elif opt == "--setprofile":
            setprofile = True
        else:
            sys.exit("reftracer: unknown option %s" % opt)
    if not _out or not argv:
        sys.exit("usage: reftracer.py --out PATH [--no-c-calls] [--setprofile] script.py [args]")
    script = os.path.abspath(argv[0])
    sys.argv = argv
    sys.path[0] = os.path.dirname(script)
    sys.modules["reftracer"] = sys.modules[__name__]
    _tracer = RefTracer(c_calls=c_calls, setprofile=setprofile)
    import atexit
    atexit.register(dump)
    _tracer.start()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
