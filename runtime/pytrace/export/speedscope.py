"""speedscope JSON (https://www.speedscope.app/file-format-schema.json), evented profiles.

    {"$schema": "https://www.speedscope.app/file-format-schema.json",
     "profiles": [{"type": "evented", "name": THREAD, "unit": "nanoseconds",
                   "startValue": S, "endValue": E,
                   "events": [{"type": "O", "frame": I, "at": T}, {"type": "C", ...}, ...]},
                  ...one per thread],
     "shared": {"frames": [{"name": ..., "file": ..., "line": ...}, ...]},
     "name": ..., "activeProfileIndex": 0, "exporter": "pytrace"}

"at" is integer nanoseconds since the recording's base tick. Frames are numbered on
first use; key order does not matter to JSON, so "shared" is written last, once every
frame is known. Each thread's events go to a temporary file next to the output while
the recording is read (an in-memory buffer of bounded size is flushed to it), and the
output is assembled from those files at the end: memory stays bounded by the number of
distinct frames and threads, not by the number of events.
"""

import json
import os
import shutil
import tempfile

from .stackwalk import Exporter

_THREAD_BUFFER = 4096              # events buffered per thread before an append
_TOTAL_BUFFER = 1 << 18            # events buffered over all threads


class _ThreadSink:
    __slots__ = ("exp", "state", "buf", "path", "count", "frames", "start_at", "end_at")

    def __init__(self, exp, state, path):
        self.exp = exp
        self.state = state
        self.buf = []
        self.path = path
        self.count = 0
        self.frames = []         # frame indices of the open stack
        self.start_at = None
        self.end_at = 0

    def push(self, ticks, sid):
        exp = self.exp
        frame = exp.frame_index.get(sid)
        if frame is None:
            frame = exp.new_frame(sid)
        at = int((ticks - exp.base_ticks) * exp.ns_per_tick)
        if self.start_at is None:
            self.start_at = at
        self.frames.append(frame)
        self.buf.append('{"type":"O","frame":%d,"at":%d}' % (frame, at))
        if len(self.buf) >= _THREAD_BUFFER:
            self.spill()

    def pop(self, ticks):
        exp = self.exp
        at = int((ticks - exp.base_ticks) * exp.ns_per_tick)
        self.end_at = at
        self.buf.append('{"type":"C","frame":%d,"at":%d}' % (self.frames.pop(), at))
        if len(self.buf) >= _THREAD_BUFFER:
            self.spill()

    def spill(self):
        if not self.buf:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write((",\n" if self.count else "") + ",\n".join(self.buf))
        self.count += len(self.buf)
        self.buf.clear()


class SpeedscopeExporter(Exporter):
    def __init__(self, out, tmp_dir=None):
        self.out = out               # a text file object
        self.tmp = tempfile.mkdtemp(prefix="pytrace-speedscope-", dir=tmp_dir)
        self.frame_index = {}
        self.frames = []
        self.sinks = []
        self.walker = None
        self.base_ticks = 0
        self.ns_per_tick = 1.0

    def begin(self, walker):
        self.walker = walker
        self.base_ticks = walker.base_ticks
        self.ns_per_tick = walker.ns_per_tick

    def new_frame(self, sid):
        sym = self.walker.sym(sid)
        frame = {"name": sym.name}
        if sym.kind == 0:
            frame["file"] = sym.file
            frame["line"] = sym.line
        index = self.frame_index[sid] = len(self.frames)
        self.frames.append(frame)
        return index

    def thread_sink(self, state):
        sink = _ThreadSink(self, state, os.path.join(self.tmp, "thread-%d.json" % len(self.sinks)))
        self.sinks.append(sink)
        return sink

    def _maybe_spill_all(self):
        if sum(len(s.buf) for s in self.sinks) > _TOTAL_BUFFER:
            for s in self.sinks:
                s.spill()

    def thread_end(self, state):
        self._maybe_spill_all()

    def finish(self, walker):
        try:
            self._assemble(walker)
        finally:
            self.discard()

    def discard(self):
        """Remove the per-thread spill files (also when the export is interrupted)."""
        for s in self.sinks:
            f = getattr(s, "f", None)
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _assemble(self, walker):
        out = self.out
        info = walker.info
        name = info.command_line if info and info.command_line else "pytrace recording"
        out.write('{"$schema":"https://www.speedscope.app/file-format-schema.json",\n"profiles":[')
        first = True
        for sink in self.sinks:
            sink.spill()
            if not sink.count:
                continue
            st = sink.state
            start = sink.start_at if sink.start_at is not None else 0
            end = max(sink.end_at, start)
            pname = "%s (tid %d)" % (st.name, st.os_tid) if st.os_tid else st.name
            out.write("%s\n{\"type\":\"evented\",\"name\":%s,\"unit\":\"nanoseconds\","
                      "\"startValue\":%d,\"endValue\":%d,\"events\":[\n" % (
                          "" if first else ",", json.dumps(pname), start, end))
            first = False
            with open(sink.path, "r", encoding="utf-8") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            out.write("]}")
        out.write('\n],\n"shared":{"frames":')
        json.dump(self.frames, out)
        out.write('},\n"name":%s,"activeProfileIndex":0,"exporter":"pytrace"}\n' % json.dumps(name))
        out.flush()
