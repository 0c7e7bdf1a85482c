"""The streaming stack walker shared by every exporter.

It reads a recording message by message and keeps only what a picture needs: each
thread's current stack (symbol ids), its open user spans, the symbol table and the
clock. Exporters receive opens and closes as they happen and keep their own bounded
aggregates; no event list is ever held.

How the stream becomes opens and closes (per thread):

- Call, CCall, Resume open a frame; Return, CReturn, Unwind, CUnwind, Yield close the
  frame on top. A close whose id is not the top's but is deeper on the stack closes the
  frames above it too (at the same tick); a close of a frame that is not on the stack
  at all (e.g. one that opened before tracing started) is ignored and counted.
- Frame records (outermost first, at thread start and after a Lost record) rebuild the
  stack: frames that match the stack we had, from the bottom up, stay open (they are
  the same calls still running); from the first difference on, the old frames are
  closed at the tick of the Lost record (or of the first Frame record) and the
  recorded ones are opened at the Frame record's tick.
- Lost: the stack is unknown from here until the Frame records that follow it; if none
  follow, the whole old stack is closed at the Lost record's tick.
- SpanBegin/SpanEnd are matched per thread on their own stack (not mixed with frames);
  Mark is an instant.
- ThreadEnd closes what is still open at its tick; at the end of the recording the
  frames still open are closed at their thread's last tick.
- Ticks are made non-decreasing per thread (a tick below the previous one is raised
  to it), so every duration is >= 0.
"""

import struct

from ..reader import decode
from ..recording import RecordingError, RecordingReader

__all__ = ["Walker", "ThreadState", "Exporter", "Symbol", "frame_label"]

_iter_events = struct.Struct("<QIHBB").iter_unpack

# event kind -> action
_OPEN, _CLOSE, _FRAME, _SPAN_BEGIN, _SPAN_END, _MARK, _LOST, _BAD = 1, 2, 3, 4, 5, 6, 7, 8
_ACTION = [_BAD] * 256
for _k in (1, 3, 8):            # Call, CCall, Resume
    _ACTION[_k] = _OPEN
for _k in (2, 4, 5, 6, 7):      # Return, CReturn, Unwind, CUnwind, Yield
    _ACTION[_k] = _CLOSE
_ACTION[13] = _FRAME
_ACTION[9] = _SPAN_BEGIN
_ACTION[10] = _SPAN_END
_ACTION[11] = _MARK
_ACTION[12] = _LOST


class Symbol:
    __slots__ = ("id", "kind", "name", "file", "line", "profile_name")

    def __init__(self, sid, kind, name, file, line, profile_name=None):
        self.id, self.kind, self.name, self.file, self.line = sid, kind, name, file, line
        self.profile_name = profile_name    # cProfile's name; None in older recordings


def frame_label(sym):
    """How a frame is named in stack-shaped outputs: "qualname (file:line)" for Python
    functions (as py-spy names them), the bare name for C functions and labels."""
    if sym.kind == 0:
        return "%s (%s:%d)" % (sym.name, sym.file, sym.line)
    return sym.name


class ThreadState:
    __slots__ = ("thread", "name", "os_tid", "stack", "open", "sink", "first_ticks", "last_ticks",
                 "end_ticks", "rebuilding", "rebuild_depth", "diverged", "lost_ticks",
                 "spans", "ended", "lost_events", "unmatched", "events")

    def __init__(self, thread, name="", os_tid=0, ticks=None):
        self.thread = thread
        self.name = name or "thread %d" % thread
        self.os_tid = os_tid
        self.stack = []
        self.open = {}          # sid -> frames of it on `stack` (unmatched closes in O(1))
        self.sink = None
        self.first_ticks = ticks
        self.last_ticks = ticks or 0
        self.end_ticks = None
        self.rebuilding = False
        self.rebuild_depth = 0
        self.diverged = False
        self.lost_ticks = None
        self.spans = []
        self.ended = False
        self.lost_events = 0
        self.unmatched = 0
        self.events = 0


class Exporter:
    """What the walker calls. A per-thread sink has push(ticks, sid) and pop(ticks)."""

    def begin(self, walker):                      # after ProcessInfo (or at the first other message)
        pass

    def symbol(self, sym):
        pass

    def thread_sink(self, state):                 # -> object with push(ticks, sid), pop(ticks)
        raise NotImplementedError

    def span(self, state, sid, begin_ticks, end_ticks):
        pass

    def mark(self, state, sid, ticks):
        pass

    def lost(self, state, ticks, count):
        pass

    def thread_end(self, state):
        pass

    def finish(self, walker):
        pass


class Walker:
    """Feeds a recording through an Exporter. `run(path)` returns the RecordingError
    that stopped the read early, or None."""

    def __init__(self, exporter):
        self.exporter = exporter
        self.info = None
        self.symbols = {}
        self.threads = {}
        self.base_ticks = 0
        self.ticks_per_second = 1_000_000_000
        self.ns_per_tick = 1.0
        self.base_monotonic_ns = 0
        self.base_realtime_ns = 0
        self.started = False
        self.events = 0
        self.lost_events = 0
        self.unmatched = 0
        self.bad_events = 0
        self.producer_status = None
        self.reader = None

    # ---- clock ------------------------------------------------------------
    def ns(self, ticks):
        """Nanoseconds since the recording's base tick (float)."""
        return (ticks - self.base_ticks) * self.ns_per_tick

    # ---- symbols ----------------------------------------------------------
    def sym(self, sid):
        s = self.symbols.get(sid)
        if s is None:
            s = self.symbols[sid] = Symbol(sid, 0, "<unknown symbol %d>" % sid, "?", 0)
            self.exporter.symbol(s)
        return s

    # ---- driving ----------------------------------------------------------
    def run(self, path, follow=False, timeout=30.0):
        error = None
        with RecordingReader(path, follow=follow, timeout=timeout) as reader:
            self.reader = reader
            try:
                for msg_type, data in reader:
                    try:
                        msg = decode(msg_type, data)
                    except Exception as e:  # noqa: BLE001 - generated code may raise anything
                        raise RecordingError(reader.path, reader.offset,
                                             "message does not decode: %s" % e) from None
                    self.message(msg_type, msg)
            except RecordingError as e:
                error = e
        self.finish()
        return error

    def _start(self):
        if not self.started:
            self.started = True
            self.exporter.begin(self)

    def message(self, msg_type, msg):
        if msg_type == 5:
            self._start()
            self.chunk(msg.thread, msg.events_view())
        elif msg_type == 4:
            self._start()
            s = Symbol(msg.id, msg.kind, msg.name, msg.file, msg.line, msg.profile_name)
            self.symbols[msg.id] = s
            self.exporter.symbol(s)
        elif msg_type == 1:
            if self.info is None:
                self.info = msg
                self.base_ticks = msg.base_ticks
                self.ticks_per_second = msg.ticks_per_second or 1_000_000_000
                self.ns_per_tick = 1e9 / self.ticks_per_second
                self.base_monotonic_ns = msg.base_monotonic_ns
                self.base_realtime_ns = msg.base_realtime_ns
            self._start()
        elif msg_type == 2:
            self._start()
            st = self.threads.get(msg.thread)
            if st is None:
                self._thread(msg.thread, msg.name, msg.os_tid, msg.ticks)
            else:
                st.name = msg.name or st.name
                st.os_tid = msg.os_tid or st.os_tid
        elif msg_type == 3:
            self._start()
            st = self.threads.get(msg.thread)
            if st is not None and not st.ended:
                self.end_thread(st, msg.ticks)
        elif msg_type == 7:
            self.producer_status = msg

    def _thread(self, thread, name="", os_tid=0, ticks=None):
        st = self.threads[thread] = ThreadState(thread, name, os_tid, ticks)
        st.sink = self.exporter.thread_sink(st)
        return st

    def chunk(self, thread, view):
        st = self.threads.get(thread)
        if st is None:
            st = self._thread(thread)
        stack = st.stack
        open_count = st.open
        open_get = open_count.get
        push = st.sink.push
        pop = st.sink.pop
        action = _ACTION
        last = st.last_ticks
        rebuilding = st.rebuilding
        n = 0
        for ticks, sid, aux, kind, flags in _iter_events(view):
            n += 1
            if ticks < last:
                ticks = last
            last = ticks
            act = action[kind]
            if act == _OPEN:
                if rebuilding:
                    self._end_rebuild(st, ticks)
                    rebuilding = False
                stack.append(sid)
                open_count[sid] = open_get(sid, 0) + 1
                push(ticks, sid)
            elif act == _CLOSE:
                if rebuilding:
                    self._end_rebuild(st, ticks)
                    rebuilding = False
                if stack and stack[-1] == sid:
                    stack.pop()
                    open_count[sid] -= 1
                    pop(ticks)
                else:
                    self._unmatched(st, sid, ticks)
            elif act == _FRAME:
                if rebuilding and aux == 0 and st.rebuild_depth:
                    self._end_rebuild(st, ticks)
                self._frame(st, ticks, sid)
                rebuilding = True
            else:
                if rebuilding and act != _LOST:
                    self._end_rebuild(st, ticks)
                    rebuilding = False
                if act == _LOST:
                    self._lost(st, ticks, sid | (aux << 32))
                    rebuilding = True
                elif act == _SPAN_BEGIN:
                    st.spans.append((sid, ticks))
                elif act == _SPAN_END:
                    self._span_end(st, sid, ticks)
                elif act == _MARK:
                    self.exporter.mark(st, sid, ticks)
                else:
                    self.bad_events += 1
        if st.first_ticks is None and n:
            st.first_ticks = _first_ticks(view)
        st.last_ticks = last
        st.rebuilding = rebuilding
        st.events += n
        self.events += n

    # ---- the rare cases ---------------------------------------------------
    def _close_to(self, st, depth, ticks):
        stack, pop, open_count = st.stack, st.sink.pop, st.open
        while len(stack) > depth:
            open_count[stack.pop()] -= 1
            pop(ticks)

    def _unmatched(self, st, sid, ticks):
        """A close that is not of the top frame closes the innermost frame of its function
        and every frame above it; with no open frame of it, it is counted and ignored.
        The count of open frames per function answers the second case at once, so a
        stream of returns without calls (a reader that starts mid-stream, a hostile
        file) costs time linear in its events, whatever the depth."""
        if not st.open.get(sid):
            st.unmatched += 1
            self.unmatched += 1
            return
        stack = st.stack
        for depth in range(len(stack) - 1, -1, -1):
            if stack[depth] == sid:
                self._close_to(st, depth, ticks)
                return
        st.unmatched += 1
        self.unmatched += 1

    def _frame(self, st, ticks, sid):
        if not st.rebuilding:
            st.rebuilding = True
            st.rebuild_depth = 0
            st.diverged = False
            st.lost_ticks = None
        depth = st.rebuild_depth
        stack = st.stack
        if st.diverged or depth >= len(stack) or stack[depth] != sid:
            if not st.diverged:
                st.diverged = True
                self._close_to(st, depth, st.lost_ticks if st.lost_ticks is not None else ticks)
            stack.append(sid)
            st.open[sid] = st.open.get(sid, 0) + 1
            st.sink.push(ticks, sid)
        st.rebuild_depth = depth + 1

    def _end_rebuild(self, st, ticks):
        close_at = st.lost_ticks if st.lost_ticks is not None else ticks
        self._close_to(st, st.rebuild_depth, close_at)
        st.rebuilding = False
        st.rebuild_depth = 0
        st.diverged = False
        st.lost_ticks = None

    def _lost(self, st, ticks, count):
        if st.rebuilding:
            self._end_rebuild(st, ticks)
        st.rebuilding = True
        st.rebuild_depth = 0
        st.diverged = False
        st.lost_ticks = ticks
        st.lost_events += count
        self.lost_events += count
        self.exporter.lost(st, ticks, count)

    def _span_end(self, st, sid, ticks):
        spans = st.spans
        for i in range(len(spans) - 1, -1, -1):
            if spans[i][0] == sid:
                begin = spans[i][1]
                del spans[i]
                self.exporter.span(st, sid, begin, ticks)
                return

    def end_thread(self, st, ticks=None):
        if ticks is None or ticks < st.last_ticks:
            ticks = st.last_ticks
        if st.rebuilding:
            self._end_rebuild(st, ticks)
        self._close_to(st, 0, ticks)
        while st.spans:
            sid, begin = st.spans.pop()
            self.exporter.span(st, sid, begin, ticks)
        st.end_ticks = ticks
        st.last_ticks = ticks
        st.ended = True
        self.exporter.thread_end(st)

    def finish(self):
        self._start()
        for st in list(self.threads.values()):
            if not st.ended:
                self.end_thread(st)
        self.exporter.finish(self)


def _first_ticks(view):
    return struct.unpack_from("<Q", view, 0)[0]
