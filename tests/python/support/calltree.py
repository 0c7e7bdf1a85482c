"""Calling-context tree rebuilt from a pytrace stream: a small Python reference used by the tests (the readers use viewer/core/walk.[ch]; its rules for Frame records and spans differ, see below).

Feed it decoded messages (`pytrace.reader`) or raw (type, bytes) pairs; it keeps one
stack per thread and one tree per thread whose nodes are call paths, each with the
number of calls made along that path:

    tree = CallTree()
    for msg in pytrace.Reader(pid, follow=True, hub=False):   # the segment itself
        tree.feed(msg)
    tree.edges()          # {(fn, fn, ..., fn): calls} over all threads

Stream rules (schema/pytrace.fbs):
  * Call / CCall / Resume open a frame and count one call; Return, CReturn, Unwind,
    CUnwind and Yield close it. A generator resume is a call of the generator frame.
  * Frame records (outermost first, aux = depth) give the stack as it is: at the start
    of tracing and after every Lost record. A run of them replaces the thread's stack;
    they do not count as calls (the calls happened before the stream saw them) unless
    frames_count_as_calls is set.
  * Lost discards the thread's stack: nothing is known until the Frame records.
  * SpanBegin / SpanEnd open and close a node named by the label when include_spans is
    set (the default); otherwise they are ignored. Spans are intervals, not frames: the
    SpanBegin is written from inside helper frames (`_Span.__enter__`, the C function
    `span_begin`) that return while the span stays open. So when a frame returns from
    under open spans, the spans move up to its caller (the span node is re-parented), and
    SpanEnd removes its span from wherever it is in the stack, leaving the frames above
    it (e.g. `__exit__`) to return normally. Marks never enter the tree; they are kept in
    `marks` as (thread, label).
  * A close that does not match the top of the stack (e.g. the return of the function
    that started tracing) is tolerated: if the id is found deeper, the frames above it
    are closed too; if not, it is ignored. Both are counted in `unmatched`.

Node keys: "py:<qualname>:<file>:<line>", "c:<name>", "span:<label>" (see symbol_key).
"""

from pytrace.reader import (EventChunk, EventKind, MsgType, Symbol, SymbolKind, ThreadEnd,
                     ThreadStart, decode)

__all__ = ["CallTree", "symbol_key", "edges_from_rows", "edges_below"]

_CALL, _RETURN, _CCALL, _CRETURN = (int(k) for k in (
    EventKind.Call, EventKind.Return, EventKind.CCall, EventKind.CReturn))
_UNWIND, _CUNWIND, _YIELD, _RESUME = (int(k) for k in (
    EventKind.Unwind, EventKind.CUnwind, EventKind.Yield, EventKind.Resume))
_SPAN_BEGIN, _SPAN_END, _MARK, _LOST, _FRAME = (int(k) for k in (
    EventKind.SpanBegin, EventKind.SpanEnd, EventKind.Mark, EventKind.Lost, EventKind.Frame))
_OPEN = frozenset((_CALL, _CCALL, _RESUME))
_CLOSE = frozenset((_RETURN, _CRETURN, _UNWIND, _CUNWIND, _YIELD))


def symbol_key(sym):
    """The node key of a Symbol."""
    if sym.kind == SymbolKind.CFunction:
        return "c:" + sym.name
    if sym.kind == SymbolKind.Label:
        return "span:" + sym.name
    return "py:%s:%s:%d" % (sym.name, sym.file, sym.line)


class _Thread:
    __slots__ = ("rows", "children", "stack", "ids", "in_frames", "name", "events")

    def __init__(self):
        self.rows = [[-1, "<root>", 0]]   # [parent index, key, calls]
        self.children = [{}]              # per row: key -> row index
        self.stack = [0]                  # row indices; [0] is the root
        self.ids = [0]                    # symbol id per stack entry (0 for the root)
        self.in_frames = False
        self.name = ""
        self.events = 0

    def reset(self):
        del self.stack[1:]
        del self.ids[1:]

    def open(self, key, sym_id, count):
        parent = self.stack[-1]
        kids = self.children[parent]
        index = kids.get(key)
        if index is None:
            index = len(self.rows)
            self.rows.append([parent, key, 0])
            self.children.append({})
            kids[key] = index
        if count:
            self.rows[index][2] += 1
        self.stack.append(index)
        self.ids.append(sym_id)


class CallTree:
    def __init__(self, include_spans=True, frames_count_as_calls=False, key=symbol_key):
        self.include_spans = include_spans
        self.frames_count_as_calls = frames_count_as_calls
        self._key = key
        self.symbols = {}       # id -> Symbol
        self._keys = {}         # id -> node key
        self.threads = {}       # thread number -> _Thread
        self.marks = []         # (thread, label)
        self.lost = 0           # events the producer reported lost in Lost records
        self.unmatched = 0      # closes that did not match the top of the stack
        self.events = 0
        self.ended = set()      # threads whose ThreadEnd was seen

    # ---- input ----------------------------------------------------------
    def feed(self, msg):
        """Feed one decoded message (pytrace.reader dataclasses)."""
        if isinstance(msg, EventChunk):
            self.add_events(msg.thread, msg.iter_events())
        elif isinstance(msg, Symbol):
            self.symbols[msg.id] = msg
            self._keys[msg.id] = self._key(msg)
        elif isinstance(msg, ThreadStart):
            self._thread(msg.thread).name = msg.name
        elif isinstance(msg, ThreadEnd):
            self.ended.add(msg.thread)

    def feed_raw(self, msg_type, data):
        self.feed(decode(msg_type, data))

    def _thread(self, thread):
        t = self.threads.get(thread)
        if t is None:
            t = self.threads[thread] = _Thread()
        return t

    def _name(self, sym_id):
        key = self._keys.get(sym_id)
        return key if key is not None else "?%d" % sym_id

    def add_events(self, thread, events):
        """Apply (ticks, id, aux, kind, flags) tuples of one thread, in order."""
        t = self._thread(thread)
        keys = self._keys
        frames_count = self.frames_count_as_calls
        n = 0
        for _ticks, sym_id, aux, kind, _flags in events:
            n += 1
            if kind in _OPEN:
                t.in_frames = False
                key = keys.get(sym_id)
                t.open(key if key is not None else "?%d" % sym_id, sym_id, True)
            elif kind in _CLOSE:
                t.in_frames = False
                self._close(t, sym_id)
            elif kind == _FRAME:
                if not t.in_frames or aux == 0:
                    t.reset()
                    t.in_frames = True
                t.open(self._name(sym_id), sym_id, frames_count)
            elif kind == _SPAN_BEGIN:
                t.in_frames = False
                if self.include_spans:
                    t.open(self._name(sym_id), ~sym_id, True)   # ~id marks a span entry
            elif kind == _SPAN_END:
                t.in_frames = False
                if self.include_spans:
                    self._end_span(t, sym_id)
            elif kind == _MARK:
                sym = self.symbols.get(sym_id)
                self.marks.append((thread, sym.name if sym else "?%d" % sym_id))
            elif kind == _LOST:
                self.lost += sym_id | (aux << 32)
                t.reset()
                t.in_frames = False
        t.events += n
        self.events += n

    def _close(self, t, sym_id):
        ids = t.ids
        top = len(ids) - 1
        if top > 0 and (ids[top] == sym_id or (sym_id == 0 and ids[top] >= 0)):
            t.stack.pop()
            ids.pop()
            return
        # open spans on top: the frame returning is the first non-span below them
        frame = top
        while frame > 0 and ids[frame] < 0:
            frame -= 1
        if frame > 0 and frame < top and (ids[frame] == sym_id or sym_id == 0):
            self._lift_spans(t, frame)
            return
        self.unmatched += 1
        for depth in range(frame, 0, -1):
            if ids[depth] == sym_id:
                del t.stack[depth:]
                del ids[depth:]
                return

    def _lift_spans(self, t, frame):
        """Remove stack entry `frame` (a returning frame) and re-parent the open spans
        above it under the frame's caller."""
        stack, ids, rows = t.stack, t.ids, t.rows
        del stack[frame]
        del ids[frame]
        for depth in range(frame, len(stack)):
            old = stack[depth]
            rows[old][2] -= 1
            parent = stack[depth - 1]
            key = rows[old][1]
            kids = t.children[parent]
            index = kids.get(key)
            if index is None:
                index = len(rows)
                rows.append([parent, key, 0])
                t.children.append({})
                kids[key] = index
            rows[index][2] += 1
            stack[depth] = index

    def _end_span(self, t, sym_id):
        ids = t.ids
        want = ~sym_id
        for depth in range(len(ids) - 1, 0, -1):
            if ids[depth] == want:
                del t.stack[depth]
                del ids[depth]
                return
        self.unmatched += 1

    # ---- output ---------------------------------------------------------
    def stack(self, thread):
        """The current stack of a thread as node keys, outermost first."""
        t = self.threads[thread]
        return [t.rows[i][1] for i in t.stack[1:]]

    def rows(self, thread):
        """Flat tree of one thread: [parent index, key, calls]; row 0 is the root."""
        return self.threads[thread].rows

    def to_json(self):
        return {"threads": {str(th): [list(r) for r in t.rows] for th, t in self.threads.items()},
                "marks": [list(m) for m in self.marks], "lost": self.lost,
                "unmatched": self.unmatched, "events": self.events}

    def edges(self):
        """{path tuple (outermost first): calls} summed over all threads."""
        out = {}
        for t in self.threads.values():
            for path, calls in edges_from_rows(t.rows).items():
                out[path] = out.get(path, 0) + calls
        return out


def _paths(rows):
    """Path tuple of every row (row 0, the root, is the empty path)."""
    paths = [()] * len(rows)
    for i in range(1, len(rows)):
        parent, key, _ = rows[i]
        paths[i] = paths[parent] + (key,)   # parents always precede children
    return paths


def edges_from_rows(rows):
    """{path: calls} of one flat tree."""
    paths = _paths(rows)
    return {paths[i]: rows[i][2] for i in range(1, len(rows))}


def edges_below(rows, is_root):
    """{path relative to a root: calls} for the subtrees of the outermost nodes whose
    key satisfies is_root(key), summed over every occurrence of those nodes. The root
    itself appears as the 1-tuple (root_key,)."""
    out = {}
    rel = [None] * len(rows)
    for i in range(1, len(rows)):
        parent, key, calls = rows[i]
        if rel[parent] is not None:
            path = rel[parent] + (key,)
        elif is_root(key):
            path = (key,)
        else:
            continue
        rel[i] = path
        out[path] = out.get(path, 0) + calls
    return out
