"""pstats files (the format of cProfile's dump_stats) for pstats, snakeviz, gprof2dot.

The file is marshal.dumps of the dict pstats.Stats loads:

    {(file, line, name): (cc, nc, tt, ct, callers)}
    callers = {(file, line, name) of the caller: (nc, cc, tt, ct)}

with the exact conventions of cProfile (Lib/cProfile.py snapshot_stats and
Modules/_lsprof.c), so every consumer reads it the way it reads cProfile's output:

- nc: calls (each return, unwind or yield closes one call; Resume opens one, as
  cProfile counts generators under sys.monitoring); cc: primitive calls = nc minus the
  calls made while another call of the same function was active on the same thread.
- tt: time in the function itself (seconds); ct: cumulative time, added only when the
  outermost active call of the function returns, so recursion is not counted twice.
- Caller edges carry the same four numbers for the (caller, callee) pair, in cProfile's
  order (nc, cc, tt, ct), with the recursion level tracked per pair. Root frames have
  no callers.
- Python functions are keyed (file, first line, qualname); C functions
  ("~", 0, "<built-in method NAME>") like cProfile keys builtins.
- Frames already running when tracing started count as one call each.

Threads are aggregated together, each with its own recursion levels.
Memory: one entry per function and per caller edge.
"""

import marshal

from .stackwalk import Exporter


class _ThreadSink:
    __slots__ = ("agg", "stack", "level", "edge_level")

    def __init__(self, agg):
        self.agg = agg
        self.stack = []          # [sid, start_ticks, child_ticks]
        self.level = {}          # sid -> active calls on this thread
        self.edge_level = {}     # (caller sid, callee sid) -> active calls

    def push(self, ticks, sid):
        stack = self.stack
        level = self.level
        level[sid] = level.get(sid, 0) + 1
        if stack:
            edge = (stack[-1][0], sid)
            el = self.edge_level
            el[edge] = el.get(edge, 0) + 1
        stack.append([sid, ticks, 0])

    def pop(self, ticks):
        stack = self.stack
        sid, start, child = stack.pop()
        dur = ticks - start
        inline = dur - child
        agg = self.agg
        level = self.level
        lv = level[sid] - 1
        level[sid] = lv
        f = agg.funcs.get(sid)
        if f is None:
            f = agg.funcs[sid] = [0, 0, 0, 0]      # nc, recursive calls, tt, ct (ticks)
        f[0] += 1
        f[2] += inline
        if lv == 0:
            f[3] += dur
        else:
            f[1] += 1
        if stack:
            caller = stack[-1]
            caller[2] += dur
            edge = (caller[0], sid)
            el = self.edge_level
            elv = el[edge] - 1
            el[edge] = elv
            e = agg.edges.get(edge)
            if e is None:
                e = agg.edges[edge] = [0, 0, 0, 0]
            e[0] += 1
            e[2] += inline
            if elv == 0:
                e[3] += dur
            else:
                e[1] += 1


def pstats_key(sym):
    if sym.kind == 0:
        return (sym.file, sym.line, sym.name)
    return ("~", 0, "<built-in method %s>" % sym.name)


class PstatsExporter(Exporter):
    def __init__(self, out):
        self.out = out                # a binary file object
        self.funcs = {}
        self.edges = {}

    def thread_sink(self, state):
        return _ThreadSink(self)

    def build(self, walker):
        """The stats dict pstats.Stats expects."""
        spt = 1.0 / walker.ticks_per_second
        keys = {}

        def key(sid):
            k = keys.get(sid)
            if k is None:
                k = keys[sid] = pstats_key(walker.sym(sid))
            return k

        stats = {}
        for sid, (nc, rec, tt, ct) in self.funcs.items():
            k = key(sid)
            old = stats.get(k)
            if old is None:
                stats[k] = [nc - rec, nc, tt, ct, {}]
            else:                       # two symbols with the same key: merge
                old[0] += nc - rec
                old[1] += nc
                old[2] += tt
                old[3] += ct
        for (caller, callee), (nc, rec, tt, ct) in self.edges.items():
            entry = stats.get(key(callee))
            if entry is None:
                continue
            callers = entry[4]
            ck = key(caller)
            prev = callers.get(ck)
            if prev is None:
                callers[ck] = [nc, nc - rec, tt, ct]
            else:
                prev[0] += nc
                prev[1] += nc - rec
                prev[2] += tt
                prev[3] += ct
        result = {}
        for k, (cc, nc, tt, ct, callers) in stats.items():
            result[k] = (cc, nc, tt * spt, ct * spt,
                         {ck: (e[0], e[1], e[2] * spt, e[3] * spt) for ck, e in callers.items()})
        return result

    def finish(self, walker):
        self.out.write(marshal.dumps(self.build(walker)))
        self.out.flush()
