"""Chrome trace-event JSON, as Perfetto (ui.perfetto.dev) and chrome://tracing load it.

One JSON object {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}.
Events, written to the output as they happen (nothing is kept but the open stacks):

- "M" metadata: process_name (the command line) and thread_name per thread;
- "X" complete event per call, written when the call closes: name = qualname, cat
  "python" or "c", ts/dur in microseconds (3 decimals = ns), pid, tid = the segment's
  thread number, args {file, line};
- "X" per user span, cat "span";
- "i" instant events (scope thread) for marks (cat "mark") and for gaps where the
  producer dropped events (cat "pytrace", name "lost N events").

ts is CLOCK_MONOTONIC in microseconds, so recordings of several processes on one
machine line up.
"""

import json

from .stackwalk import Exporter

_FLUSH_EVERY = 2048


class _ThreadSink:
    __slots__ = ("exp", "stack", "tid")

    def __init__(self, exp, tid):
        self.exp = exp
        self.tid = tid
        self.stack = []          # (sid, start_ticks)

    def push(self, ticks, sid):
        self.stack.append((sid, ticks))

    def pop(self, ticks):
        sid, start = self.stack.pop()
        exp = self.exp
        head = exp.heads.get(sid)
        if head is None:
            head = exp.head(sid)
        to_us = exp.us_per_tick
        base = exp.base_ticks
        buf = exp.buf
        buf.append('%s,"tid":%d,"ts":%.3f,"dur":%.3f}' % (
            head, self.tid, (start - base) * to_us + exp.base_us, (ticks - start) * to_us))
        if len(buf) >= _FLUSH_EVERY:
            exp.flush()


class PerfettoExporter(Exporter):
    def __init__(self, out):
        self.out = out               # a text file object
        self.buf = []
        self.heads = {}              # sid -> '\n{"ph":"X",...,"pid":P' prefix
        self.walker = None
        self.pid = 0
        self.us_per_tick = 0.001
        self.base_ticks = 0
        self.base_us = 0.0
        self.calls = 0

    def begin(self, walker):
        self.walker = walker
        info = walker.info
        self.pid = info.pid if info else 0
        self.us_per_tick = walker.ns_per_tick / 1000.0
        self.base_ticks = walker.base_ticks
        self.base_us = walker.base_monotonic_ns / 1000.0
        self.out.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        name = info.command_line if info and info.command_line else "python"
        self.out.write(json.dumps({"ph": "M", "name": "process_name", "pid": self.pid, "tid": 0,
                                   "args": {"name": "%s (pid %d)" % (name, self.pid)}}))

    def head(self, sid):
        sym = self.walker.sym(sid)
        cat = "python" if sym.kind == 0 else ("c" if sym.kind == 1 else "span")
        args = {"file": sym.file, "line": sym.line}
        h = ',\n{"ph":"X","cat":"%s","name":%s,"args":%s,"pid":%d' % (
            cat, json.dumps(sym.name), json.dumps(args, separators=(",", ":")), self.pid)
        self.heads[sid] = h
        return h

    def flush(self):
        self.calls += len(self.buf)
        self.out.write("".join(self.buf))
        self.buf.clear()

    def thread_sink(self, state):
        return _ThreadSink(self, state.thread)

    def _meta_thread(self, state):
        name = state.name
        if state.os_tid:
            name = "%s (tid %d)" % (name, state.os_tid)
        self.buf.append(",\n" + json.dumps({"ph": "M", "name": "thread_name", "pid": self.pid,
                                            "tid": state.thread, "args": {"name": name}}))

    def _ts(self, ticks):
        return (ticks - self.base_ticks) * self.us_per_tick + self.base_us

    def span(self, state, sid, begin_ticks, end_ticks):
        sym = self.walker.sym(sid)
        self.buf.append(',\n{"ph":"X","cat":"span","name":%s,"pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f}' % (
            json.dumps(sym.name), self.pid, state.thread, self._ts(begin_ticks),
            (end_ticks - begin_ticks) * self.us_per_tick))

    def mark(self, state, sid, ticks):
        sym = self.walker.sym(sid)
        self.buf.append(',\n{"ph":"i","s":"t","cat":"mark","name":%s,"pid":%d,"tid":%d,"ts":%.3f}' % (
            json.dumps(sym.name), self.pid, state.thread, self._ts(ticks)))

    def lost(self, state, ticks, count):
        self.buf.append(',\n{"ph":"i","s":"t","cat":"pytrace","name":"lost %d events","pid":%d,'
                        '"tid":%d,"ts":%.3f,"args":{"count":%d}}' % (
                            count, self.pid, state.thread, self._ts(ticks), count))

    def thread_end(self, state):
        self._meta_thread(state)

    def finish(self, walker):
        self.flush()
        other = {"exporter": "pytrace", "events": walker.events, "lost_events": walker.lost_events}
        if walker.info is not None:
            other["python_version"] = walker.info.python_version
            other["command_line"] = walker.info.command_line
        self.out.write('\n],"otherData":%s}\n' % json.dumps(other))
        self.out.flush()
