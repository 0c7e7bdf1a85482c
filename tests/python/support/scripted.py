"""Shared by the export tests: a scripted stream of two threads whose calls, paths and spans are
known (a Frame record at the start, recursion, a generator, an exception, C calls, a span, a
mark, a gap and the stack rebuilt after it), written as a recording by the `recording` fixture."""

import pytest

from pytrace import recording as rec
import synthetic as syn
from pytrace.reader import EventKind, SymbolKind

# the schema's numbers (pytrace.fb, through pytrace.reader), as plain ints
CALL, RET, CCALL, CRET, UNWIND, CUNWIND, YIELD, RESUME = (int(k) for k in (
    EventKind.Call, EventKind.Return, EventKind.CCall, EventKind.CReturn, EventKind.Unwind,
    EventKind.CUnwind, EventKind.Yield, EventKind.Resume))
SPAN_B, SPAN_E, MARK, LOST, FRAME = (int(k) for k in (
    EventKind.SpanBegin, EventKind.SpanEnd, EventKind.Mark, EventKind.Lost, EventKind.Frame))

SYMS = {1: ("<module>", "app.py", 1), 2: ("main", "app.py", 3), 3: ("fib", "app.py", 10),
        4: ("gen", "app.py", 20), 5: ("boom", "app.py", 30), 6: ("builtins.len", "builtins", 0),
        7: ("worker", "app.py", 40), 8: ("load batch", "", 0), 9: ("epoch 1", "", 0)}
KIND = {6: SymbolKind.CFunction, 8: SymbolKind.Label, 9: SymbolKind.Label}


def _thread1():
    """MainThread: <module> already running (Frame), main -> fib(3) recursion,
    a generator resumed twice, an exception unwinding boom, a C call, a span, a mark,
    then a gap (Lost) after which the stack is rebuilt as <module>;main, and main is
    left open at the end."""
    t = iter(range(0, 10_000, 10))
    n = lambda: next(t)  # noqa: E731
    ev = [(n(), 1, 0, FRAME, 0), (n(), 2, 0, CALL, 0)]
    # fib(3): fib -> fib -> fib, fib
    ev += [(n(), 3, CALL), (n(), 3, CALL), (n(), 3, CALL), (n(), 3, RET), (n(), 3, CALL),
           (n(), 3, RET), (n(), 3, RET), (n(), 3, CALL), (n(), 3, RET), (n(), 3, RET)]
    # generator: two resumes (first is the call), each ends with a yield; then exhausted
    ev += [(n(), 4, CALL), (n(), 4, YIELD), (n(), 4, RESUME), (n(), 4, YIELD),
           (n(), 4, RESUME), (n(), 4, RET)]
    ev += [(n(), 5, CALL), (n(), 6, CCALL), (n(), 6, CUNWIND), (n(), 5, UNWIND)]
    ev += [(n(), 8, SPAN_B), (n(), 6, CCALL), (n(), 6, CRET), (n(), 9, MARK), (n(), 8, SPAN_E)]
    # gap: fib was entered, then events were dropped; rebuilt stack is <module>;main
    ev += [(n(), 3, CALL), (n(), 5, 0, LOST, 0), (n(), 1, 0, FRAME, 0), (n(), 2, 1, FRAME, 0),
           (n(), 6, CCALL), (n(), 6, CRET)]
    ev = [e if len(e) == 5 else (e[0], e[1], 0, e[2], 0) for e in ev]
    return ev, ev[-1][0]


def _thread2():
    ev = [(5, 7, 0, CALL, 0), (15, 6, 0, CCALL, 0), (25, 6, 0, CRET, 0), (35, 7, 0, RET, 0)]
    return ev


# Expected calls per stack path (a frame opened once = one call).
EXPECTED_PATHS = {
    ("<module>",): 1,
    ("<module>", "main"): 1,
    ("<module>", "main", "fib"): 3,      # fib(3), the fib opened before the gap, ... see below
    ("<module>", "main", "fib", "fib"): 2,
    ("<module>", "main", "fib", "fib", "fib"): 2,
    ("<module>", "main", "gen"): 3,
    ("<module>", "main", "boom"): 1,
    ("<module>", "main", "boom", "builtins.len"): 1,
    ("<module>", "main", "builtins.len"): 1,
    # the span is an entry of the stack (viewer/core/walk.h): what runs inside nests under it
    ("<module>", "main", "load batch"): 1,
    ("<module>", "main", "load batch", "builtins.len"): 1,
    ("worker",): 1,
    ("worker", "builtins.len"): 1,
}
# fib paths: fib(3) [1] -> fib(2) [2] -> fib(1) [3], fib(0) [3]; fib(1) [2]; fib before gap [1]
EXPECTED_PATHS[("<module>", "main", "fib")] = 2
EXPECTED_PATHS[("<module>", "main", "fib", "fib")] = 2
EXPECTED_PATHS[("<module>", "main", "fib", "fib", "fib")] = 2
EXPECTED_CALLS = {"<module>": 1, "main": 1, "fib": 6, "gen": 3, "boom": 1, "builtins.len": 4,
                  "worker": 1}
EXPECTED_SPANS = {"load batch": 1}     # a span counts one call, like a frame


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    path = d / "s.pytrace"
    ev1, end1 = _thread1()
    msgs = [syn.process_info(pid=4242, ticks_per_second=1_000_000_000, base_monotonic_ns=10**12)]
    for sid, (name, file, line) in SYMS.items():
        msgs.append(syn.symbol(sid, name, file, line, kind=KIND.get(sid, SymbolKind.PyFunction)))
    msgs.append(syn.thread_start(1, "MainThread", 100))
    msgs.append(syn.event_chunk(1, ev1[:7]))
    msgs.append(syn.thread_start(2, "worker-1", 101))
    msgs.append(syn.event_chunk(2, _thread2()))
    msgs.append(syn.thread_end(2, 40))
    msgs.append(syn.event_chunk(1, ev1[7:], first_event=7))
    msgs.append(syn.producer_status(state=3))
    w = rec.RecordingWriter(path, lossless=False)
    for m in msgs:
        w.append(m)
    w.close()
    return path, end1
