"""pytrace: live tracing for CPython.

Every call and return of the traced program goes into lock-free rings in a shared-memory
segment; another process reads them live (`pytrace.Reader`, `pytrace-top`, ...).

    import pytrace
    pytrace.start()                       # -> "/pytrace-1234-0"
    with pytrace.span("load batch"):
        ...
    pytrace.mark("epoch 3")
    counters = pytrace.stop()

    with pytrace.trace(c_calls=False, exclude=["logging"]):
        ...

    @pytrace.span                          # span named by the function's qualname
    def step(): ...
"""

import functools
import inspect
import os
import sys
import threading
import warnings
from dataclasses import dataclass, fields

from ._launch import HIDDEN_FILES as _HIDDEN_FILES  # noqa: E402
from .losses import describe as _describe_losses
from .reader import Reader, decode  # noqa: F401  (public)
from .profile import Profile  # noqa: F401  (public; the C aggregation, viewer/core/agg.h)

try:
    from importlib.metadata import version as _dist_version
    __version__ = _dist_version("pytrace")
except Exception:  # noqa: BLE001 - running from a source tree
    __version__ = "0.1.0"

try:
    from . import _pytrace
except ImportError as _e:  # the extension is not built: the reader-side helpers still work
    _pytrace = None
    _import_error = _e

# pytrace's own files (this one, the launcher): their code is hidden from every picture
_HIDDEN = [os.path.join(os.path.dirname(__file__), name) for name in _HIDDEN_FILES]

__all__ = ["start", "stop", "trace", "span", "mark", "step", "counters", "is_tracing", "Reader",
           "Counters", "decode", "segment_name", "Profile", "__version__"]


def _ext():
    if _pytrace is None:
        raise ImportError("pytrace: the _pytrace extension is not available (%s); "
                          "reinstall with `pip install pytrace`" % _import_error)
    return _pytrace


@dataclass
class Counters:
    """What the tracer did, as reported by stop() / counters()."""
    segment: str = ""
    events_written: int = 0
    events_dropped: int = 0
    hook_errors: int = 0
    symbols: int = 0
    symbols_dropped: int = 0
    threads: int = 0
    threads_untraced: int = 0   # threads that ran without a ring (none free, or no room
                                # for one in /dev/shm); each tries again every 100 ms
    tracing_displaced: int = 0  # threads the program's own profile function took over
                                # (sys.setprofile, cProfile on 3.10/3.11): not traced
    events_untraced: int = 0    # events of threads while they had no ring
    first_error: str = ""
    hook: str = ""          # the interpreter hook in use: sys.monitoring, PyEval_SetProfile,
                            # or frame evaluation (PEP 523) (3.11 with c_calls=False)

    @classmethod
    def _from(cls, d):
        names = {f.name for f in fields(cls)}
        c = cls(**{k: v for k, v in d.items() if k in names})
        if c.first_error is None:
            c.first_error = ""
        if c.hook is None:
            c.hook = ""
        return c


# Label ids are interned once per name and segment: the cache is emptied whenever a
# new segment starts (start(), and the fork child's own segment).
_labels = {}
_labels_lock = threading.Lock()


def _clear_labels():
    _labels.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_clear_labels)


def _label(name):
    label_id = _labels.get(name)
    if label_id is None:
        with _labels_lock:
            label_id = _labels.get(name)
            if label_id is None:
                label_id = _labels[name] = _pytrace.label(name)
    return label_id


def start(c_calls=True, include=None, exclude=None, policy="drop", *, ring_count=0,
          chunk_bytes=0, chunks_per_ring=0, symlog_bytes=0, wait_timeout=1.0, clock="auto",
          cmdline=None, fork_children=True, torch=False):
    """Start tracing every thread of this process into a new segment; return its name.

    include/exclude: module names or path prefixes (a string or a list). policy "drop"
    (a full ring drops events and says so with a Lost record) or "wait" (the producer
    waits up to wait_timeout seconds for the reader). fork_children: a fork() child traces
    into a segment of its own (True), or is not traced (False). torch: record PyTorch's
    operators, autograd nodes and record_function labels as spans (through torch's ITT
    instrumentation; start before importing torch). Raises RuntimeError if tracing is
    already on, OSError if the segment cannot be created.

    Under a launcher that traces the program already (`pytrace run`, `record --`, `top
    --`, a traced subprocess), start() does nothing and returns the launcher's segment
    (said once on stderr), and the stop() that matches it does nothing either: the
    program runs as it would without pytrace, traced by the launcher.
    """
    global _launcher_nested
    ext = _ext()
    launcher_segment = getattr(ext, "_launcher_segment", None)
    if launcher_segment is not None and ext.is_tracing() and ext.segment_name() == launcher_segment:
        if not _launcher_nested_said:
            _say_launcher_nested(launcher_segment)
        _launcher_nested += 1
        return launcher_segment
    if isinstance(include, str):
        include = [include]
    if isinstance(exclude, str):
        exclude = [exclude]
    if policy not in ("drop", "wait"):
        raise ValueError("pytrace.start: policy must be 'drop' or 'wait', not %r" % (policy,))
    _clear_labels()
    glue = why = None
    if torch:
        from . import _torch as glue
        ext._torch_glue = glue
        why = glue.prepare_environment(ext)  # before torch is imported: ittnotify reads it then
    # pytrace's own code (this module, the launcher) never produces events: after
    # ext.start() only C functions are called here, unless there is a warning to give.
    name = ext.start(c_calls=c_calls, include=include, exclude=exclude, policy=policy,
                     ring_count=ring_count, chunk_bytes=chunk_bytes,
                     chunks_per_ring=chunks_per_ring, symlog_bytes=symlog_bytes,
                     wait_timeout=wait_timeout, clock=clock, cmdline=cmdline, hide=_HIDDEN,
                     fork_children=fork_children)
    if glue is not None:
        glue.enable(ext, why)
    now = ext.counters()
    if now["tracing_displaced"] or not now["hook"]:
        # No hook (3.12: every free sys.monitoring id is taken) or a thread already runs
        # the program's own profiler: say it now, not only at stop().
        warnings.warn("pytrace: %s" % (now["first_error"] or "not tracing"), RuntimeWarning,
                      stacklevel=2)
    return name


_launcher_nested = 0         # start() calls that found the launcher tracing (no-ops)
_launcher_nested_said = False


def _say_launcher_nested(segment):
    global _launcher_nested_said
    _launcher_nested_said = True
    try:
        sys.__stderr__.write("pytrace: the program's pytrace.start() does nothing: the launcher "
                             "traces it already (into %s), and its stop() leaves that on\n" % segment)
        sys.__stderr__.flush()
    except Exception:  # noqa: BLE001 - never fail the program for a note
        pass


def stop():
    """Stop tracing; return the Counters. Warns (RuntimeWarning, one line) if anything
    was lost: events or symbols dropped, hook errors, threads left untraced. The stop()
    of a start() that did nothing under a launcher does nothing: it returns the counters
    so far."""
    global _launcher_nested
    if _launcher_nested > 0:
        _launcher_nested -= 1
        return counters()
    glue = getattr(_ext(), "_torch_glue", None)
    if glue is not None:
        glue.disable()
    result = Counters._from(_ext().stop())
    _clear_labels()
    # the Optimizer.step hook goes with the trace: installed by the program
    # (pytrace._steps) or by --torch (the glue's copy, which glue.disable() removed)
    _steps_mod = sys.modules.get("pytrace._steps")
    if _steps_mod is not None:
        _steps_mod.uninstall_optimizer_steps()
    lost = _describe_losses(result)
    if lost:
        warnings.warn("pytrace: %s%s" % (lost, "; first error: %s" % result.first_error
                                         if result.first_error else ""),
                      RuntimeWarning, stacklevel=2)
    return result


def counters():
    """Counters of the running (or last) trace."""
    return Counters._from(_ext().counters())


def is_tracing():
    return _pytrace is not None and bool(_pytrace.is_tracing())


def segment_name():
    """Name of the current segment ("/pytrace-<pid>-<seq>"), or None."""
    return _ext().segment_name()


class trace:
    """Context manager: start() on entry, stop() on exit.

        with pytrace.trace(policy="wait") as t:
            ...
        t.segment, t.counters
    """

    def __init__(self, c_calls=True, include=None, exclude=None, policy="drop", **options):
        self._args = dict(c_calls=c_calls, include=include, exclude=exclude, policy=policy,
                          **options)
        self.segment = None
        self.counters = None

    def __enter__(self):
        self.segment = start(**self._args)
        return self

    def __exit__(self, *exc):
        self.counters = stop()
        return False


class _Span:
    """A named span: a context manager and a decorator."""
    __slots__ = ("name", "_open")

    def __init__(self, name):
        self.name = name
        self._open = threading.local()

    def __enter__(self):
        if _pytrace is not None and _pytrace.is_tracing():
            label_id = _label(self.name)
            _pytrace.span_begin(label_id)
            self._open.__dict__.setdefault("ids", []).append(label_id)
        else:
            self._open.__dict__.setdefault("ids", []).append(None)
        return self

    def __exit__(self, *exc):
        label_id = self._open.ids.pop()
        if label_id is not None and _pytrace.is_tracing():
            _pytrace.span_end(label_id)
        return False

    def __call__(self, func):
        name = self.name
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                with _Span(name):
                    return await func(*args, **kwargs)
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with _Span(name):
                return func(*args, **kwargs)
        return wrapper

    def __repr__(self):
        return "pytrace.span(%r)" % self.name


def span(name):
    """A user span: `with pytrace.span("load batch"):`, `@pytrace.span("x")`, or bare
    `@pytrace.span` (named by the function's qualified name)."""
    if callable(name) and not isinstance(name, str):
        return _Span(getattr(name, "__qualname__", getattr(name, "__name__", "span")))(name)
    if not isinstance(name, str):
        raise TypeError("pytrace.span: name must be a str, not %s" % type(name).__name__)
    return _Span(name)


def mark(name):
    """An instant mark with a label (ignored when not tracing)."""
    if _pytrace is not None and _pytrace.is_tracing():
        _pytrace.mark(_label(name))


def step(name="step"):
    """End a step of the program's loop on this thread (a training step): a mark with
    the Step flag. The step runs from this thread's previous step() (or, for the first,
    from the thread's first traced event) to this call; pytrace-top's step mode, the web
    view, the HTML report and the exports show each step and the last one alone. Ignored
    when not tracing. Optimizer.step calls are marked for you under --torch
    (pytrace._steps.install_optimizer_steps)."""
    if not isinstance(name, str):  # the same error traced or not
        raise TypeError("pytrace.step: name must be a str, not %s" % type(name).__name__)
    if _pytrace is not None and _pytrace.is_tracing():
        _pytrace.step(_label(name))
