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

`tasks()` is the per-task picture of an asyncio program (Python 3.12+: viewer/core/tasks.h's
rules through pt_agg_tasks): each task's state, steps, running and waiting time by what it
awaited, what it awaits now (dump's await graph) and its own table of logical calls.

A stream may hold several processes: a recording of a job that forked or spawned children
(`pytrace record` follows them by default), a hub that follows a job's children, a
`pytrace merge`. Each process keeps its own threads, functions and clock (the rule of
pytrace-top, viewer/core/aggset.h): `processes()` lists them in order of first sight, and
every query takes `process=` its index (default 0: the first process seen, the job's root).

    for p in prof.processes():                         # index, tag, pid, command line, state, ...
        print(p.pid, p.command_line, prof.functions(process=p.index)[:3])

At most 1024 processes are read (fewer with a window of more than 32 million slices in all);
`counters()["messages_past_process_limit"]` counts the messages of the others.
"""

import os
from collections import namedtuple

__all__ = ["Profile", "Function", "Node", "ThreadInfo", "SymbolInfo", "Timeline", "TimelineCell",
           "ThreadStack", "StackFrame", "ProcessEntry", "Task", "TaskFunction", "TaskAwait"]

Function = namedtuple("Function", "id kind name file line calls prim_calls self_ns total_ns self_pct total_pct")
Function.__doc__ = ("A row of the function table (pytrace-top's columns): calls and primitive calls, self "
                    "time and total time (outermost activations only, as pstats' cumtime), in ns and in "
                    "percent of the span of the view.")

Node = namedtuple("Node", "index parent depth id name file line kind calls self_ns total_ns")
Node.__doc__ = ("A node of the calling-context tree: a call path. index 0 is the root (id -1, parent -1), "
                "whose self time is time with nothing on the stack; parents come before their children "
                "(depth-first, children by name).")

ThreadInfo = namedtuple("ThreadInfo", "thread os_tid name ended events depth")
ProcessEntry = namedtuple("ProcessEntry", "index tag pid ppid command_line state events threads_active role label")
ProcessEntry.__doc__ = ("A process of the stream: its index (what `process=` takes), its Message.process "
                        "tag, pid and parent pid (0 until its ProcessInfo came), command line, state "
                        "(running, stopped, exited, died; ? before its first status) and events read.")

_STATES = {1: "running", 2: "stopped", 3: "exited", 4: "died"}
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

Task = namedtuple("Task", "id name coroutine serial state steps run_ns wait_ns wait_by awaits functions")
Task.__doc__ = ("An asyncio task of the stream (viewer/core/tasks.h holds the rules): id, its Task symbol; "
                "name, the task's name at its first step; coroutine, its coroutine's __qualname__; serial, "
                "its number in the process (1, 2, ...); state: pending, running, done, cancelled or "
                "failed; steps it ran; run_ns, the wall time of its steps; wait_ns, the time between "
                "its steps, and wait_by {kind: ns} what it was charged to (future, task, sleep, io, "
                "thread, sync; other: the suspend named nothing); awaits: (TaskAwait, ...) what a "
                "pending task awaits now; functions: (TaskFunction, ...) of its own call tree, most "
                "total time first.")
TaskAwait = namedtuple("TaskAwait", "kind name task_id")
TaskAwait.__doc__ = ("What a pending task awaits: kind (future, task, sleep, io, thread, sync), name (the "
                     "awaited task's name, else a label: asyncio.sleep, Event.wait, ...) and task_id, the "
                     "awaited task's Task.id (None when kind is not task).")
TaskFunction = namedtuple("TaskFunction", "id name file line calls self_ns total_ns")
TaskFunction.__doc__ = ("A function of a task's own table: LOGICAL calls (one per coroutine call, however many "
                        "times it was resumed), self time and total time of its running pieces (not the "
                        "time it was suspended; outermost activations only), in ns.")

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

    def __init__(self, window=600.0, slice_seconds=0.1, tree_budget_mib=256):
        """tree_budget_mib: memory for each process's call tree; past it, new call paths fold
        into [other] nodes (counters()["folded_calls"] counts their calls; the function table
        stays exact)."""
        if not slice_seconds > 0:
            raise ValueError("slice_seconds must be > 0")
        if not window > 0:
            raise ValueError("window must be > 0 seconds")
        count = max(1, int(round(window / slice_seconds)))
        if count > 2_000_000:
            raise ValueError("window / slice_seconds = %d slices; at most 2000000 (a shorter window or "
                             "longer slices)" % count)
        if not (isinstance(tree_budget_mib, int) and 1 <= tree_budget_mib <= 1 << 24):
            raise ValueError("tree_budget_mib must be a whole number of MiB from 1 to 16777216")
        self._agg = _ext().Aggregator(slice_ns=max(1, int(round(slice_seconds * 1e9))), slice_count=count,
                                      tree_budget=tree_budget_mib << 20)
        self._symbols = {}          # process index -> {id: SymbolInfo}

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
        try:
            for item in source:
                pending.append(item)
                if len(pending) >= batch:
                    ready, pending = pending, []
                    self._agg.feed_many(ready)
        finally:
            # what came before an error of the source (damage in a recording) is fed too:
            # it was dropped, up to a whole batch (a report of 0 events where pstats had 54,012)
            if pending:
                self._agg.feed_many(pending)
        return self

    @classmethod
    def from_recording(cls, path, **kw):
        """A Profile of a whole recording (`pytrace record -o path`). A damaged recording
        raises pytrace.recording.RecordingError after everything before the damage was fed;
        use `read(RecordingReader(path))` to keep the Profile in that case. A recording
        whose recorder could not write everything (a full disk) gives a RuntimeWarning
        with what it lacks (counters()["unrecorded_events"])."""
        from .recording import RecordingReader
        prof = cls(**kw)
        with RecordingReader(path) as reader:
            prof.read(reader)
            lost = reader.unrecorded()
        if lost is not None:
            import warnings
            from .losses import unrecorded_text
            warnings.warn(unrecorded_text(os.fspath(path), lost["events"], lost["messages"],
                                          lost["errno"]), RuntimeWarning, stacklevel=2)
        return prof

    # ---- what it holds --------------------------------------------------
    def processes(self):
        """[ProcessEntry] of the stream, in order of first sight (one for a job that did
        not fork or spawn traced children)."""
        out = []
        for index, tag, pid, ppid, cmd, state, active, events, role, label in self._agg.processes():
            name = _STATES.get(state) or ("running" if active else "?")
            out.append(ProcessEntry(index, tag, pid, ppid, cmd, name, events, active, role, label))
        return out

    def counters(self, process=0):
        """dict: events, events_per_second, dropped (and its three sources), unmatched,
        producer_state, threads_seen, threads_active, symbols, nodes, span_ns, pid,
        unrecorded_events (a recording that lacks what its recorder could not write), ...
        of that process; processes and messages_past_process_limit of the stream."""
        return self._agg.counters(process=process)

    def process(self, process=0):
        """dict: that process's ProcessInfo (pid, command_line, python_version, segment, ...)."""
        return self._agg.process_info(process=process)

    def threads(self, process=0):
        """[ThreadInfo] of that process in order of first sight."""
        return [ThreadInfo(*t) for t in self._agg.threads(process=process)]

    def stacks(self, process=0):
        """[ThreadStack] of that process in order of first sight: each thread's current stack, outermost
        first, as the walk holds it (viewer/core/walk.h)."""
        raw = self._agg.stacks(process=process)
        symbols = self.symbols(process)
        out = []
        for thread, os_tid, name, ended, known, frames in raw:
            fs = []
            for sym, kind, reported, start_ns in frames:
                s = self._symbol(sym, symbols, process)
                fs.append(StackFrame(sym, _FRAME_KINDS[kind] if kind < len(_FRAME_KINDS) else "python",
                                     s.name if s else "<unknown #%d>" % sym, s.file if s else "",
                                     s.line if s else 0, s.kind if s and s.known else -1,
                                     None if reported else start_ns, reported))
            out.append(ThreadStack(thread, os_tid, name, ended, known, fs))
        return out

    def symbols(self, process=0):
        """{id: SymbolInfo} of every function, C function and span label that process used."""
        count = self._agg.counters(process=process)["symbols"]
        have = self._symbols.get(process)
        if have is None or len(have) != count or any(not s.known for s in have.values()):
            have = self._symbols[process] = {s[0]: SymbolInfo(*s) for s in self._agg.symbols(process=process)}
        return have

    def _symbol(self, sym_id, symbols, process):
        s = symbols.get(sym_id)
        if s is None:
            symbols = self.symbols(process)
            s = symbols.get(sym_id)
        return s

    def tasks(self, process=0):
        """[Task]: the asyncio tasks of that process in order of first sight (Python 3.12+ with task
        records on; an empty list otherwise). Done tasks past the core's budget are folded:
        tasks_summary() counts them."""
        out = []
        for sym, name, coro, serial, state, steps, run_ns, wait_ns, wait_by, awaits, fns in \
                self._agg.tasks(process=process)["tasks"]:
            functions = tuple(TaskFunction(*f) for f in fns)   # by total time (viewer/core/agg.h)
            out.append(Task(sym, name, coro, serial, state, steps, run_ns, wait_ns, wait_by,
                            tuple(TaskAwait(*a) for a in awaits), tuple(functions)))
        return out

    def tasks_summary(self, process=0):
        """dict: seen (tasks seen), kept (those tasks() lists), folded (done tasks folded past the
        core's budget) with their folded_steps, folded_run_ns and folded_wait_ns, malformed
        (task records ignored as damage), tree_nodes (the nodes of the kept tasks' trees,
        task_tree()) and tree_folded (logical calls in their [other] nodes past the core's node
        budget); seen == kept + folded."""
        d = self._agg.tasks(process=process)
        tasks = d.pop("tasks")
        d["kept"] = len(tasks)
        return d

    # ---- views ----------------------------------------------------------
    @staticmethod
    def _query(thread, window):
        if window is not None and window < 0:
            raise ValueError("window must be >= 0 seconds (None: the whole run)")
        return int(thread or 0), float(window or 0.0)

    def functions(self, thread=None, window=None, sort="self", descending=True, filter=None, process=0):
        """[Function]: the function table of the view, sorted by `sort` (self, total,
        calls, prim_calls, name, file); filter: case-insensitive substring of the name."""
        if sort not in _SORTS:
            raise ValueError("sort must be one of %s" % ", ".join(_SORTS))
        thread, window = self._query(thread, window)
        _span, rows = self._agg.table(thread, window, sort, bool(descending), filter or None, process=process)
        return [Function(*r) for r in rows]

    def span_ns(self, thread=None, window=None, process=0):
        """Wall time of the view (the run, or the window): what percentages refer to."""
        thread, window = self._query(thread, window)
        return self._agg.tree(thread, window, process=process)[0]

    def tree(self, thread=None, window=None, min_fraction=0.0, process=0):
        """[Node]: the calling-context tree of the view, depth-first; node 0 is the root.
        min_fraction: leave out call paths whose total is below that fraction of the root's."""
        thread, window = self._query(thread, window)
        _span, nodes = self._agg.tree(thread, window, float(min_fraction), process=process)
        return self._nodes(nodes, process)

    def task_tree(self, task=None, min_fraction=0.0, process=0):
        """[Node]: the call tree of one asyncio task (a Task of tasks(), or its serial) or, with
        None, of every kept task side by side; depth-first, node 0 the root. Under the root one
        node per task (its name; kind: the Task symbol kind; no calls, no time of its own), above
        it the task's logical calls from its coroutine (one call of a coroutine however many
        resumptions), their time the time they ran, not the time the task was suspended
        (viewer/core/tasks.h). An id of -2 is an [other] node past the core's node budget."""
        serial = -1 if task is None else int(getattr(task, "serial", task))
        _span, nodes = self._agg.task_tree(serial, process=process, min_fraction=float(min_fraction))
        return self._nodes(nodes, process)

    def _nodes(self, nodes, process):
        symbols = self.symbols(process)
        out = []
        for i, (sym, parent, depth, calls, self_ns, total_ns) in enumerate(nodes):
            if parent < 0:
                out.append(Node(i, -1, depth, -1, "<root>", "", 0, -1, calls, self_ns, total_ns))
                continue
            if sym == -2:  # the calls below parent folded past the tree budget
                out.append(Node(i, parent, depth, -2, "[other]", "", 0, -1, calls, self_ns, total_ns))
                continue
            s = self._symbol(sym, symbols, process)
            out.append(Node(i, parent, depth, sym, s.name if s else "<unknown #%d>" % sym,
                            s.file if s else "", s.line if s else 0, s.kind if s else -1,
                            calls, self_ns, total_ns))
        return out

    def paths(self, thread=None, window=None, key=None, process=0):
        """{(name, name, ...): (calls, self_ns, total_ns)} per call path, outermost first.
        key(node) names a node (default: its name)."""
        key = key or (lambda n: n.name)
        nodes = self.tree(thread, window, process=process)
        path = [()] * len(nodes)
        out = {}
        for n in nodes[1:]:
            path[n.index] = path[n.parent] + (key(n),)
            calls, self_ns, total_ns = out.get(path[n.index], (0, 0, 0))
            out[path[n.index]] = (calls + n.calls, self_ns + n.self_ns, total_ns + n.total_ns)
        return out

    def timeline(self, thread=None, window=None, since=0, group=1, process=0):
        """Timeline of the slices >= since in the window (None: all the window holds),
        `group` slices per cell."""
        thread, window = self._query(thread, window)
        d = self._agg.timeline(thread, window, int(since), max(1, int(group)), process=process)
        symbols = self.symbols(process)
        cells = []
        for slice_no, th, sym, top_ns, busy_ns, calls in d["cells"]:
            s = self._symbol(sym, symbols, process) if sym >= 0 else None
            cells.append(TimelineCell(slice_no, th, sym, s.name if s else "", top_ns, busy_ns, calls))
        return Timeline(d["slice_ns"], d["group"], d["first_slice"], d["last_slice"], d["origin_ns"], cells)

    @property
    def aggregator(self):
        """The `_pytrace.Aggregator` underneath (raw tuples, for the web viewer)."""
        return self._agg

    def __repr__(self):
        c = self._agg.counters()
        more = " (process 0 of %d)" % c["processes"] if c["processes"] > 1 else ""
        return "<pytrace.Profile %d events, %d threads, %d functions%s>" % (
            c["events"], c["threads_seen"], c["symbols"], more)
