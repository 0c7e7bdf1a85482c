"""Collapsed stacks ("folded" format) for flamegraph.pl, inferno and speedscope.

One line per distinct call stack: frames from the root to the leaf joined by ";",
a space, and an integer weight:

    main (app.py:10);load (app.py:20);json.loads 1834211

weight "ns" (default): the stack's self time in integer nanoseconds (time spent in the
leaf frame itself, not in its callees), summed over all threads; stacks with zero self
time are left out. weight "calls": how many times the leaf frame was entered with
exactly this stack (frames already running when tracing started, or rebuilt after a
gap, count once). Python frames are named "qualname (file:line)", C functions by
their name. ";" inside a name is written as ":" and control characters as spaces so
each line stays parseable. With per_thread=True each stack starts with a
"thread NAME (tid N)" frame.

Memory: one node per distinct calling context (not per call).
"""

import re

from .stackwalk import Exporter, frame_label

_UNSAFE = re.compile(r"[\x00-\x1f\x7f;]")
_PATH_CACHE_CHARS = 16 << 20     # cached parent paths, in characters


def _clean(name):
    return _UNSAFE.sub(lambda m: ":" if m.group() == ";" else " ", name)


class _ThreadSink:
    __slots__ = ("agg", "root", "stack")

    def __init__(self, agg, root):
        self.agg = agg
        self.root = root
        self.stack = []          # [node, start_ticks, child_ticks]

    def push(self, ticks, sid):
        stack = self.stack
        agg = self.agg
        parent = stack[-1][0] if stack else self.root
        kids = agg.children[parent]
        node = kids.get(sid)
        if node is None:
            node = agg.new_node(parent, sid)
            kids[sid] = node
        agg.calls[node] += 1
        stack.append([node, ticks, 0])

    def pop(self, ticks):
        stack = self.stack
        node, start, child = stack.pop()
        dur = ticks - start
        self.agg.self_ticks[node] += dur - child
        if stack:
            stack[-1][2] += dur


class CollapsedExporter(Exporter):
    def __init__(self, out, weight="ns", per_thread=False):
        if weight not in ("ns", "calls"):
            raise ValueError("weight must be 'ns' or 'calls'")
        self.out = out               # a text file object
        self.weight = weight
        self.per_thread = per_thread
        self.parent = [-1]
        self.sid = [None]            # node 0: the shared root
        self.children = [{}]
        self.calls = [0]
        self.self_ticks = [0]
        self.labels = {}             # thread root nodes: node -> label
        self.walker = None

    def begin(self, walker):
        self.walker = walker

    def new_node(self, parent, sid):
        self.parent.append(parent)
        self.sid.append(sid)
        self.children.append({})
        self.calls.append(0)
        self.self_ticks.append(0)
        return len(self.parent) - 1

    def thread_sink(self, state):
        root = 0
        if self.per_thread:
            root = self.new_node(0, None)
            self.labels[root] = "thread %s (tid %d)" % (state.name, state.os_tid)
        return _ThreadSink(self, root)

    def finish(self, walker):
        names = {}

        def name_of(node):
            label = self.labels.get(node)
            if label is not None:
                return _clean(label)
            sid = self.sid[node]
            s = names.get(sid)
            if s is None:
                s = names[sid] = _clean(frame_label(walker.sym(sid)))
            return s

        ns_per_tick = walker.ns_per_tick
        # Paths of parents are cached to write children fast, within a budget of
        # characters: a deep recursion has one distinct stack per depth, and caching
        # each whole path would take memory quadratic in the depth (7.3 GB for a
        # 60,000-deep one). Past the budget a path is rebuilt from the parent links,
        # so memory stays bounded by the nodes plus the budget. (The output itself is
        # one line per stack, as the format has it: quadratic in such a depth.)
        paths = {}
        budget = [_PATH_CACHE_CHARS]
        write = self.out.write
        for node in range(1, len(self.parent)):
            if self.sid[node] is None:
                continue
            if self.weight == "ns":
                value = int(round(self.self_ticks[node] * ns_per_tick))
            else:
                value = self.calls[node]
            if value <= 0:
                continue
            parent = self.parent[node]
            prefix = paths.get(parent) if parent else ""
            if prefix is None:
                prefix = self._path(parent, name_of, paths, budget)
            if prefix:
                write(prefix)
                write(";")
            write(name_of(node))
            write(" %d\n" % value)
        self.out.flush()

    def _path(self, node, name_of, paths, budget):
        parts = []
        n = node
        while n:
            cached = paths.get(n)
            if cached is not None:
                parts.append(cached)
                break
            parts.append(name_of(n))
            n = self.parent[n]
        path = ";".join(reversed(parts))
        if len(path) <= budget[0]:
            paths[node] = path
            budget[0] -= len(path)
        return path
