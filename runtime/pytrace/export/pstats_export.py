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
- Keys are cProfile's own, so a file compares with and adds to cProfile's
  (pstats.Stats.add): Python functions (co_filename, co_firstlineno, co_name), C
  functions ("~", 0, label) with the label cProfile's Modules/_lsprof.c gives,
  computed by the tracer on first sight from the same objects
  ("<built-in method builtins.len>", "<method 'append' of 'list' objects>", ...).
  Caller keys are the same keys. Recordings made before the tracer stored these
  names get co_name from the qualname's last part, and C labels from the stored
  owner and name (exact for module functions and for methods called on their own
  type). With qualnames=True: (file, first line, qualname) and
  ("~", 0, "<built-in method Owner.name>") instead, pytrace's own names.
- Two functions with one key (cProfile keeps the last one's numbers) are added
  together.
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


def _old_c_label(sym):
    """cProfile's label of a C function from a recording without profile names: the
    tracer stored "module.func" (file = module) for module functions and
    "Owner.method" for methods."""
    name, module = sym.name, sym.file
    if module and name.startswith(module + ".") and "." not in name[len(module) + 1:]:
        return "<built-in method %s>" % name
    if "." in name:
        owner, method = name.rsplit(".", 1)
        return "<method '%s' of '%s' objects>" % (method, owner)
    return "<built-in method %s>" % name


def pstats_key(sym, qualnames=False):
    """The pstats key of a symbol: cProfile's (default) or with pytrace's qualnames."""
    if sym.kind == 0:
        if qualnames:
            return (sym.file, sym.line, sym.name)
        name = sym.profile_name
        if name is None:            # older recording: co_name is the qualname's last part
            name = sym.name.rsplit(".", 1)[-1]
        return (sym.file, sym.line, name)
    if qualnames:
        return ("~", 0, "<built-in method %s>" % sym.name)
    label = sym.profile_name
    if label is None:
        label = _old_c_label(sym)
    return ("~", 0, label)


class PstatsExporter(Exporter):
    def __init__(self, out, qualnames=False):
        self.out = out                # a binary file object
        self.qualnames = qualnames
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
                k = keys[sid] = pstats_key(walker.sym(sid), self.qualnames)
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
