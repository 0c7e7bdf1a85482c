"""The decoder and the reference call tree, on messages built with the flatc-generated
Python builders (no tracer involved)."""

import struct

import pytest

import fbbuild
from calltree import CallTree, edges_below
from pytrace.reader import (EventChunk, EventKind as K, ProcessInfo, ProducerStatus, Symbol,
                            SymbolKind, ThreadStart, decode, decode_stream)

PY, C, LABEL = (int(k) for k in (SymbolKind.PyFunction, SymbolKind.CFunction, SymbolKind.Label))


def _syms():
    return [fbbuild.symbol(1, PY, "main", "m.py", 1),
            fbbuild.symbol(2, PY, "fib", "m.py", 5),
            fbbuild.symbol(3, C, "len", "builtins", 0),
            fbbuild.symbol(4, PY, "gen", "m.py", 9),
            fbbuild.symbol(5, LABEL, "load batch"),
            fbbuild.symbol(6, LABEL, "epoch 3"),
            fbbuild.symbol(8, PY, "_Span.__enter__", "p.py", 1),
            fbbuild.symbol(9, PY, "_Span.__exit__", "p.py", 2),
            fbbuild.symbol(10, C, "span_begin", "_pytrace", 0)]


def _ev(kind, sym_id=0, aux=0, flags=0, ticks=0):
    return (ticks, sym_id, aux, int(kind), flags)


def test_decode_every_message_type():
    t, data = fbbuild.process_info(4242, "/pytrace-4242-0")
    pi = decode(t, data)
    assert isinstance(pi, ProcessInfo) and pi.pid == 4242 and pi.segment == "/pytrace-4242-0"
    ts = decode(*fbbuild.thread_start(3, "worker"))
    assert isinstance(ts, ThreadStart) and (ts.thread, ts.name) == (3, "worker")
    te = decode(*fbbuild.thread_end(3, 10, 2))
    assert (te.thread, te.events_written, te.events_dropped) == (3, 10, 2)
    sym = decode(*fbbuild.symbol(7, C, "dict.get", "builtins", 0))
    assert isinstance(sym, Symbol) and (sym.id, sym.kind, sym.name) == (7, C, "dict.get")
    ps = decode(*fbbuild.producer_status(3, 99))
    assert isinstance(ps, ProducerStatus) and (ps.state, ps.events_written) == (3, 99)


def test_decode_gives_each_message_its_process():
    """Message.process: a multi-process stream's messages say whose they are; an untagged
    message (one process, older files) is process 0."""
    assert decode(*fbbuild.process_info(4242)).process == 0
    assert decode(*fbbuild.process_info(4242, process=2)).process == 2
    sym = decode(*fbbuild.symbol(7, C, "dict.get", "builtins", 0, process=5))
    assert (sym.process, sym.name) == (5, "dict.get")
    chunk = decode(*fbbuild.chunk(2, 500, [(1, 1, 0, int(K.Call), 0)], process=0xFFFFFFFF))
    assert (chunk.process, chunk.thread, chunk.count) == (0xFFFFFFFF, 2, 1)
    stream = b"".join(fbbuild.process_info(p, process=p)[1] for p in (1, 2, 3))
    assert [m.process for m in decode_stream(stream)] == [1, 2, 3]


def test_event_chunk_fast_path_matches_generated_accessors():
    events = [(1000 + i, i, i % 7, 1 + i % 13, i % 4) for i in range(200)]
    t, data = fbbuild.chunk(2, 500, events)
    msg = decode(t, data)
    assert isinstance(msg, EventChunk)
    assert (msg.thread, msg.first_event, msg.count) == (2, 500, 200)
    assert [tuple(e) for e in msg.events] == events
    assert list(msg.iter_events()) == events
    # the generated accessor reads the same bytes
    from pytrace.fb.Message import Message
    from pytrace.fb.EventChunk import EventChunk as GenChunk
    m = Message.GetRootAs(data, 4)
    body = m.Body()
    gen = GenChunk()
    gen.Init(body.Bytes, body.Pos)
    e = gen.Events(17)
    assert (e.Ticks(), e.Id(), e.Aux(), e.Kind(), e.Flags()) == events[17]
    assert msg.event(17) == events[17]


def test_decode_rejects_garbage():
    t, data = fbbuild.chunk(1, 0, [_ev(K.Call, 1)])
    with pytest.raises(ValueError):
        decode(t, data[:8])
    with pytest.raises(ValueError):
        decode(t, struct.pack("<I", 1000) + data[4:])
    with pytest.raises(ValueError):
        decode(4, data)    # wrong type claimed


def test_decode_stream_splits_messages():
    msgs = _syms() + [fbbuild.chunk(1, 0, [_ev(K.Call, 1), _ev(K.Return, 1)])]
    blob = b"".join(d for _, d in msgs)
    out = list(decode_stream(blob))
    assert [type(m).__name__ for m in out] == ["Symbol"] * (len(msgs) - 1) + ["EventChunk"]


def _tree(events_by_thread, **kw):
    tree = CallTree(**kw)
    for t, d in _syms():
        tree.feed_raw(t, d)
    for thread, events in events_by_thread.items():
        # split across chunks to check continuity
        for i in range(0, len(events), 3):
            tree.feed_raw(*fbbuild.chunk(thread, i, events[i:i + 3]))
    return tree


MAIN, FIB, LEN, GEN = "py:main:m.py:1", "py:fib:m.py:5", "c:len", "py:gen:m.py:9"


def test_calls_returns_recursion_and_c_calls():
    ev = [_ev(K.Call, 1),
          _ev(K.Call, 2), _ev(K.Call, 2), _ev(K.Return, 2), _ev(K.Call, 2), _ev(K.Unwind, 2),
          _ev(K.Return, 2),
          _ev(K.CCall, 3), _ev(K.CReturn, 3), _ev(K.CCall, 3), _ev(K.CUnwind, 3),
          _ev(K.Return, 1)]
    tree = _tree({1: ev})
    assert tree.edges() == {(MAIN,): 1, (MAIN, FIB): 1, (MAIN, FIB, FIB): 2, (MAIN, LEN): 2}
    assert tree.unmatched == 0 and tree.stack(1) == []


def test_generator_resume_counts_as_call():
    ev = [_ev(K.Call, 1), _ev(K.Call, 4), _ev(K.Yield, 4), _ev(K.Resume, 4), _ev(K.Yield, 4),
          _ev(K.Resume, 4, flags=2), _ev(K.Unwind, 4), _ev(K.Return, 1)]
    assert _tree({1: ev}).edges() == {(MAIN,): 1, (MAIN, GEN): 3}


def test_frames_then_lost_rebuilds_stack():
    ev = [_ev(K.Frame, 1, aux=0), _ev(K.Frame, 2, aux=1),       # running when tracing started
          _ev(K.Call, 2), _ev(K.Return, 2),
          _ev(K.Lost, 5),                                         # 5 records dropped
          _ev(K.Frame, 1, aux=0), _ev(K.Frame, 2, aux=1), _ev(K.Frame, 2, aux=2),
          _ev(K.CCall, 3), _ev(K.CReturn, 3), _ev(K.Return, 2), _ev(K.Return, 2),
          _ev(K.Return, 1)]
    tree = _tree({1: ev})
    assert tree.lost == 5
    assert tree.edges() == {(MAIN,): 0, (MAIN, FIB): 0, (MAIN, FIB, FIB): 1,
                            (MAIN, FIB, FIB, LEN): 1}
    assert tree.unmatched == 0


ENTER, EXIT = "py:_Span.__enter__:p.py:1", "py:_Span.__exit__:p.py:2"


def test_spans_marks_and_threads():
    # the span opens inside __enter__ (and the C span_begin) and closes inside __exit__
    ev1 = [_ev(K.Call, 1),
           _ev(K.Call, 8), _ev(K.CCall, 10), _ev(K.SpanBegin, 5), _ev(K.CReturn, 10),
           _ev(K.Return, 8),
           _ev(K.Call, 2), _ev(K.Return, 2), _ev(K.Mark, 6),
           _ev(K.Call, 9), _ev(K.SpanEnd, 5), _ev(K.Return, 9),
           _ev(K.Return, 1)]
    ev2 = [_ev(K.Call, 2), _ev(K.Return, 2)]
    tree = _tree({1: ev1, 7: ev2})
    edges = {p: c for p, c in tree.edges().items() if c}
    span = "span:load batch"
    assert edges == {(MAIN,): 1, (MAIN, ENTER): 1, (MAIN, ENTER, "c:span_begin"): 1,
                     (MAIN, span): 1, (MAIN, span, FIB): 1, (MAIN, span, EXIT): 1,
                     (FIB,): 1}
    assert tree.unmatched == 0 and tree.stack(1) == []
    assert tree.marks == [(1, "epoch 3")]
    flat = _tree({1: ev1}, include_spans=False)
    assert {p: c for p, c in flat.edges().items() if c} == {
        (MAIN,): 1, (MAIN, ENTER): 1, (MAIN, ENTER, "c:span_begin"): 1, (MAIN, FIB): 1,
        (MAIN, EXIT): 1}


def test_nested_spans_lift_together():
    ev = [_ev(K.Call, 1), _ev(K.Call, 8), _ev(K.SpanBegin, 5), _ev(K.SpanBegin, 6),
          _ev(K.Return, 8), _ev(K.Call, 2), _ev(K.Return, 2), _ev(K.SpanEnd, 6),
          _ev(K.SpanEnd, 5), _ev(K.Return, 1)]
    tree = _tree({1: ev})
    edges = {p: c for p, c in tree.edges().items() if c}
    assert edges[(MAIN, "span:load batch", "span:epoch 3", FIB)] == 1
    assert tree.unmatched == 0 and tree.stack(1) == []


def test_unmatched_return_is_tolerated_and_counted():
    ev = [_ev(K.Return, 9), _ev(K.Call, 1), _ev(K.Call, 2), _ev(K.Return, 1)]
    tree = _tree({1: ev})
    assert tree.unmatched == 2 and tree.stack(1) == []


def test_edges_below_takes_outermost_roots():
    rows = [[-1, "<root>", 0], [0, "a", 1], [1, "entry", 2], [2, "x", 4], [3, "entry", 1],
            [0, "entry", 1], [5, "x", 1]]
    got = edges_below(rows, lambda k: k == "entry")
    assert got == {("entry",): 3, ("entry", "x"): 5, ("entry", "x", "entry"): 1}
