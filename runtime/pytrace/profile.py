"""`pytrace.Profile`: the aggregated picture of a pytrace stream, from Python.

The aggregation is pytrace's C core (viewer/core/agg.h, through `_pytrace.Aggregator`):
the same rules as pytrace-top and every exporter (viewer/core/walk.h), so a Profile
shows the numbers they show. Python only carries the messages in and the results out.

    import pytrace
    prof = pytrace.Profile.from_recording("out.pytrace")
    for f in prof.functions(sort="total")[:10]:       # pytrace-top's table
        print(f.name, f.calls, f.self_ns, f.total_ns)
    root = prof.tree()                                 # the calling-context tree
    prof.tree(window=5.0)                              # ... of the last 5 seconds

    live = pytrace.Profile(window=60)
    with pytrace.Reader(pid, follow=True) as reader:
        for batch in ...: live.feed_many(reader.poll())
        live.functions(window=10)

    for t in prof.stacks():                            # each thread's current stack
        print(t.name, [f.name for f in t.frames])      # outermost first; kind python, c or span

Threads are named by their segment-unique thread number (`Profile.threads()`); `thread=None`
merges every thread (by call path). `window=None` is the whole run; a number of seconds is
the last seconds of trace time (the window keeps `window` seconds at most, in slices of
`slice_seconds`).

`stacks()` is each thread's stack at the point the stream has been read to, as the walk holds
it (so spans sit where pytrace-top and the exporters put them, and a stack reported by Frame
records after a gap replaces what the gap hid); `complete` is False for a thread met
mid-stream (its older frames were read by an earlier reader) until a Frame run reports it.
`pytrace dump` prints these.
"""

from collections import namedtuple

__all__ = ["Profile", "Function", "Node", "ThreadInfo", "SymbolInfo", "Timeline", "TimelineCell",
           "ThreadStack", "StackFrame"]

Function = namedtuple("Function", "id kind name file line calls prim_calls self_ns total_ns self_pct total_pct")
Function.__doc__ = ("A row of the function table (pytrace-top's columns): calls and primitive calls, self "
                    "time and total time (outermost activations only, as pstats' cumtime), in ns and in "
                    "percent of the span of the view.")

Node = namedtuple("Node", "index parent depth id name file line kind calls self_ns total_ns")
Node.__doc__ = ("A node of the calling-context tree: a call path. index 0 is the root (id -1, parent -1), "
                "whose self time is time with nothing on the stack; parents come before their children "
                "(depth-first, children by name).")

ThreadInfo = namedtuple("ThreadInfo", "thread os_tid name ended events depth")
SymbolInfo = namedtuple("SymbolInfo", "id kind known name file line")
TimelineCell = namedtuple("TimelineCell", "slice thread id name top_ns busy_ns calls")
Timeline = namedtuple("Timeline", "slice_ns group first_slice last_slice origin_ns cells")
Timeline.__doc__ = ("Per cell of `group` slices (slice_ns long, slice k starting origin_ns + k * slice_ns "
                    "after the first event; a cell is named by its first slice) and thread: the function "
                    "with the most self time in it (id -1: none), its self time, the time in any frame "
                    "(busy_ns) and the calls started.")

ThreadStack = namedtuple("ThreadStack", "thread os_tid name ended complete frames")
ThreadStack.__doc__ = ("A thread's current stack: frames outermost first ([StackFrame]); complete: they are "
                       "its whole stack (read from its start, or reported by a Frame run since the last gap); "
                       "an ended thread has no frames.")
StackFrame = namedtuple("StackFrame", "id kind name file line symbol_kind start_ns reported")
StackFrame.__doc__ = ("An open entry of a thread's stack: kind 'python', 'c' or 'span' (a pytrace.span; its "
                      "name is the span's); symbol_kind the Symbol's kind (pytrace.reader.SymbolKind, -1 if "
                      "never announced); start_ns: when it began, in ns since the first event of the stream, "
                      "or None when only a Frame record reported it (reported True: its call was not seen).")

_FRAME_KINDS = ("python", "c", "span")   # enum pt_walk_frame_kind (viewer/core/walk.h)

_SORTS = ("self", "total", "calls", "prim_calls", "name", "file")


def _ext():
    from . import _pytrace
    return _pytrace


class Profile:
    """Calls, times and call paths of a pytrace stream, computed by pytrace's C core.

    Feed it the messages of a job (`pytrace.Reader.raw()` / `poll()`) or of a recording
    (`Profile.from_recording`), then ask for the function table, the call tree or the
    timeline, of the whole run or of the last seconds, per thread or merged. Feeding and
    queries may come from different threads (the core is locked per object, without the GIL).
    """

    def __init__(self, window=600.0, slice_seconds=0.1):
        if not slice_seconds > 0:
            raise ValueError("slice_seconds must be > 0")
        if not window > 0:
            raise ValueError("window must be > 0 seconds")
        count = max(1, int(round(window / slice_seconds)))
        if count > 2_000_000:
            raise ValueError("window / slice_seconds = %d slices; at most 2000000 (a shorter window or "
                             "longer slices)" % count)
        self._agg = _ext().Aggregator(slice_ns=max(1, int(round(slice_seconds * 1e9))), slice_count=count)
        self._symbols = {}          # id -> SymbolInfo
        self._symbol_count = -1

    # ---- input ----------------------------------------------------------
    def feed(self, message):
        """One size-prefixed message: bytes, or a (msg_type, bytes) pair. ValueError if
        the FlatBuffers verifier refuses it."""
        self._agg.feed(message)

    def feed_many(self, messages):
        """A sequence of messages (e.g. `Reader.poll()`); returns how many were refused
        by the verifier (skipped)."""
        return self._agg.feed_many(messages)

    def read(self, source, batch=256):
        """Feed everything an iterable of (msg_type, bytes) gives (a `Reader.raw()`, a
        `RecordingReader`), in batches. Returns self."""
        pending = []
        for item in source:
            pending.append(item)
            if len(pending) >= batch:
                self._agg.feed_many(pending)
                pending = []
        if pending:
            self._agg.feed_many(pending)
        return self

    @classmethod
    def from_recording(cls, path, **kw):
        """A Profile of a whole recording (`pytrace record -o path`). A damaged recording
        raises pytrace.recording.RecordingError after everything before the damage was fed;
        use `read(RecordingReader(path))` to keep the Profile in that case."""
        from .recording import RecordingReader
        prof = cls(**kw)
        with RecordingReader(path) as reader:
            prof.read(reader)
        return prof

    # ---- what it holds --------------------------------------------------
    def counters(self):
        """dict: events, events_per_second, dropped (and its three sources), unmatched,
        producer_state, threads_seen, threads_active, symbols, nodes, span_ns, pid, ..."""
        return self._agg.counters()

    def process(self):
        """dict: the job's ProcessInfo (pid, command_line, python_version, segment, ...)."""
        return self._agg.process_info()

    def threads(self):
        """[ThreadInfo] in order of first sight."""
        return [ThreadInfo(*t) for t in self._agg.threads()]

    def stacks(self):
        """[ThreadStack] in order of first sight: each thread's current stack, outermost
        first, as the walk holds it (viewer/core/walk.h)."""
        raw = self._agg.stacks()
        symbols = self.symbols()
        out = []
        for thread, os_tid, name, ended, known, frames in raw:
            fs = []
            for sym, kind, reported, start_ns in frames:
                s = self._symbol(sym, symbols)
                fs.append(StackFrame(sym, _FRAME_KINDS[kind] if kind < len(_FRAME_KINDS) else "python",
                                     s.name if s else "<unknown #%d>" % sym, s.file if s else "",
                                     s.line if s else 0, s.kind if s and s.known else -1,
                                     None if reported else start_ns, reported))
            out.append(ThreadStack(thread, os_tid, name, ended, known, fs))
        return out

    def symbols(self):
        """{id: SymbolInfo} of every function, C function and span label seen."""
        count = self._agg.counters()["symbols"]
        if count != self._symbol_count or any(not s.known for s in self._symbols.values()):
            self._symbols = {s[0]: SymbolInfo(*s) for s in self._agg.symbols()}
            self._symbol_count = len(self._symbols)
        return self._symbols

    def _symbol(self, sym_id, symbols):
        s = symbols.get(sym_id)
        if s is None:
            symbols = self.symbols()
            s = symbols.get(sym_id)
        return s

    # ---- views ----------------------------------------------------------
    @staticmethod
    def _query(thread, window):
        if window is not None and window < 0:
            raise ValueError("window must be >= 0 seconds (None: the whole run)")
        return int(thread or 0), float(window or 0.0)

    def functions(self, thread=None, window=None, sort="self", descending=True, filter=None):
        """[Function]: the function table of the view, sorted by `sort` (self, total,
        calls, prim_calls, name, file); filter: case-insensitive substring of the name."""
        if sort not in _SORTS:
            raise ValueError("sort must be one of %s" % ", ".join(_SORTS))
        thread, window = self._query(thread, window)
        _span, rows = self._agg.table(thread, window, sort, bool(descending), filter or None)
        return [Function(*r) for r in rows]

    def span_ns(self, thread=None, window=None):
        """Wall time of the view (the run, or the window): what percentages refer to."""
        thread, window = self._query(thread, window)
        return self._agg.tree(thread, window)[0]

    def tree(self, thread=None, window=None, min_fraction=0.0):
        """[Node]: the calling-context tree of the view, depth-first; node 0 is the root.
        min_fraction: leave out call paths whose total is below that fraction of the root's."""
        thread, window = self._query(thread, window)
        _span, nodes = self._agg.tree(thread, window, float(min_fraction))
        symbols = self.symbols()
        out = []
        for i, (sym, parent, depth, calls, self_ns, total_ns) in enumerate(nodes):
            if sym < 0:
                out.append(Node(i, -1, depth, -1, "<root>", "", 0, -1, calls, self_ns, total_ns))
                continue
            s = self._symbol(sym, symbols)
            out.append(Node(i, parent, depth, sym, s.name if s else "<unknown #%d>" % sym,
                            s.file if s else "", s.line if s else 0, s.kind if s else -1,
                            calls, self_ns, total_ns))
        return out

    def paths(self, thread=None, window=None, key=None):
        """{(name, name, ...): (calls, self_ns, total_ns)} per call path, outermost first.
        key(node) names a node (default: its name)."""
        key = key or (lambda n: n.name)
        nodes = self.tree(thread, window)
        path = [()] * len(nodes)
        out = {}
        for n in nodes[1:]:
            path[n.index] = path[n.parent] + (key(n),)
            calls, self_ns, total_ns = out.get(path[n.index], (0, 0, 0))
            out[path[n.index]] = (calls + n.calls, self_ns + n.self_ns, total_ns + n.total_ns)
        return out

    def timeline(self, thread=None, window=None, since=0, group=1):
        """Timeline of the slices >= since in the window (None: all the window holds),
        `group` slices per cell."""
        thread, window = self._query(thread, window)
        d = self._agg.timeline(thread, window, int(since), max(1, int(group)))
        symbols = self.symbols()
        cells = []
        for slice_no, th, sym, top_ns, busy_ns, calls in d["cells"]:
            s = self._symbol(sym, symbols) if sym >= 0 else None
            cells.append(TimelineCell(slice_no, th, sym, s.name if s else "", top_ns, busy_ns, calls))
        return Timeline(d["slice_ns"], d["group"], d["first_slice"], d["last_slice"], d["origin_ns"], cells)

    @property
    def aggregator(self):
        """The `_pytrace.Aggregator` underneath (raw tuples, for the web viewer)."""
        return self._agg

    def __repr__(self):
        c = self._agg.counters()
        return "<pytrace.Profile %d events, %d threads, %d functions>" % (
            c["events"], c["threads_seen"], c["symbols"])
