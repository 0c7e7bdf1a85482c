"""What the browser view is sent: pictures computed by the C aggregation
(`_pytrace.Aggregator`, viewer/core/agg.h), packed as small JSON lists.

Nothing here reads events: the tree, the table and the timeline come from the C core;
this module only names call paths with stable numbers (so the page can be sent what
changed since its last picture) and compares pictures.

Shapes (numbers are ns unless said):
  symbol   [id, name, file, line, kind]
  node     [key, parent key, symbol id, calls, self_ns, total_ns, self_cpu_ns, total_cpu_ns]    key 0 = the root
  row      [symbol id, calls, prim_calls, self_ns, total_ns, self_cpu_ns, total_cpu_ns]
  not_observed  {ns, cpu_ns, lost_events}: the view's time nobody saw (Lost gaps), in no node
           or row and not in span_ns, the observed wall time every percentage is of

The CPU parts are the C core's (viewer/core/cct.h, THE RULE FOR CPU TIME); a node's or
row's waiting (off-CPU) time is its wall time less its CPU time.
  cell     [first slice, thread, symbol id (-1: none), top_ns, busy_ns, calls]
  thread   [thread, os_tid, name, ended, events]
"""

import secrets
import threading
import time

# the words pytrace-top and Profile.processes() use (a process that vanished "died")
STATE_NAMES = {0: "starting", 1: "running", 2: "stopped", 3: "exited", 4: "died"}


class PathKeys:
    """Stable numbers for call paths: (parent key, symbol id) -> key, for the life of
    a server, so a node keeps its key from one picture to the next."""

    def __init__(self):
        self._keys = {}
        self._lock = threading.Lock()

    def nodes(self, raw):
        """Aggregator.tree(cpu=True) nodes -> [node] (see the module doc)."""
        keys = [0] * len(raw)
        out = []
        with self._lock:
            table = self._keys
            for i, (sym, parent, _depth, calls, self_ns, total_ns, self_cpu, total_cpu) in enumerate(raw):
                if parent < 0:
                    out.append((0, -1, -1, calls, self_ns, total_ns, self_cpu, total_cpu))
                    continue
                pk = keys[parent]
                k = table.get((pk, sym))
                if k is None:
                    k = table[(pk, sym)] = len(table) + 1
                keys[i] = k
                out.append((k, pk, sym, calls, self_ns, total_ns, self_cpu, total_cpu))
        return out


class ProcessView:
    """One process of an aggregator (`_pytrace.Aggregator` of a stream of several processes):
    the aggregator's queries with process= fixed, which is what Live and report_data read."""

    def __init__(self, agg, index):
        self.agg = agg
        self.index = index

    def counters(self):
        return self.agg.counters(process=self.index)

    def process_info(self):
        return self.agg.process_info(process=self.index)

    def threads(self):
        return self.agg.threads(process=self.index)

    def symbols(self, start=0):
        return self.agg.symbols(start, process=self.index)

    def table(self, thread=0, window=0.0, sort="self", descending=True, filter=None, cpu=False, last_step=False):
        return self.agg.table(thread, window, sort, descending, filter, process=self.index, cpu=cpu,
                              last_step=last_step)

    def tree(self, thread=0, window=0.0, min_fraction=0.0, cpu=False, last_step=False):
        return self.agg.tree(thread, window, min_fraction, process=self.index, cpu=cpu, last_step=last_step)

    def steps(self, thread=0, list=False):
        return self.agg.steps(thread, process=self.index, list=list)

    def timeline(self, thread=0, window=0.0, since=0, group=1):
        return self.agg.timeline(thread, window, since, group, process=self.index)

    def tasks(self, functions=True, functions_of=-1):
        return self.agg.tasks(process=self.index, functions=functions, functions_of=functions_of)

    def task_tree(self, serial=-1, min_fraction=0.0):
        return self.agg.task_tree(serial, process=self.index, min_fraction=min_fraction)


def symbol_list(agg):
    return [(s[0], s[3], s[4], s[5], s[1]) for s in agg.symbols()]


def thread_list(agg):
    return [list(t[:5]) for t in agg.threads()]


def status(agg, processes=1, extra=None):
    from ..losses import OTHER_LOSSES, describe
    c = agg.counters()
    p = agg.process_info()
    d = {"state": STATE_NAMES.get(c["producer_state"], str(c["producer_state"])),
         "events": c["events"], "events_per_second": round(c["events_per_second"]),
         # the job's drops and this view's own gaps in a hub, apart, each with its cause
         # (viewer/core/agg.h: the one definition pytrace-top shows too)
         "dropped": c["dropped"], "dropped_cause": c.get("dropped_cause", ""),
         "missed_in_hub": c.get("missed_in_hub", 0), "missed_cause": c.get("missed_cause", ""),
         "threads": c["threads_seen"], "threads_active": c["threads_active"],
         "processes": processes, "span_ns": c["span_ns"], "unmatched": c["unmatched"],
         "pid": p["pid"], "command": p["command_line"], "python": p["python_version"],
         "window_max": c["window_max_seconds"],
         # a recording whose recorder could not write everything (a full disk)
         "unrecorded": c.get("unrecorded_events", 0),
         # the job's other losses (threads without a ring, symbols dropped, ...), in the
         # words export and record use (pytrace/losses.py)
         "other_losses": describe(c, OTHER_LOSSES),
         # the call tree's budget: calls past it are in [other] nodes (the table is exact)
         "tree_budget": c["tree_budget"], "folded_calls": c["folded_calls"],
         # events naming a symbol never announced (damage; viewer/core/walk.h)
         "unannounced": c.get("unannounced", 0),
         # a stream of more processes than the aggregation reads (process_limit): their
         # messages are counted, never shown
         "process_limit": c.get("process_limit", 0),
         "messages_past_process_limit": c.get("messages_past_process_limit", 0)}
    d.update(extra or {})
    return d


def rows_of(table):
    """Aggregator.table(cpu=True) rows -> [row] (see the module doc)."""
    return [(r[0], r[5], r[6], r[7], r[8], r[11], r[12]) for r in table]


def view_of(agg, thread, window, min_fraction, filt=None, last_step=False):
    """(span_ns, nodes as the C core gives them, rows, not_observed) of a view: span_ns is
    the table's, the observed wall time (the tree's span would count the gaps too).
    last_step: the last complete step alone (viewer/core/agg.h, STEPS; wall time only)."""
    _tspan, raw = agg.tree(thread, window, min_fraction, cpu=True, last_step=last_step)
    span, table, unobserved = agg.table(thread, window, "self", True, filt, cpu=True, last_step=last_step)
    return span, raw, rows_of(table), unobserved


# The steps a page is sent for its chart: the last ones (the summary covers them all).
STEP_BARS_LIVE = 120
STEP_BARS_REPORT = 5000


def steps_of(agg, bars):
    """The summary of the stepping thread's steps (Aggregator.steps) with "bars": the last
    `bars` steps as [number, dur_ns]; None when no step ended."""
    st = agg.steps(0, list=True)
    if not st["count"]:
        return None
    steps = st.pop("list")
    st["bars"] = [[n, d] for n, _end, d in steps[-bars:]]
    return st


# The asyncio tasks a page is sent for its task chooser: those with the most running plus
# waiting time (the summary counts them all, folded ones included), each with its first
# TASK_FUNCTIONS functions by total time. A live page is sent the chosen task's functions
# alone (the aiohttp recording of docs/asyncio.md, 865 tasks, on a loaded machine: the 200
# with all their functions were 695 kB of JSON and 130-170 ms to make; without them, the
# chosen one's aside, 26 kB and 26 ms; a live page asks four times a second).
TASKS_LIVE = 200
TASKS_REPORT = 1000
TASK_FUNCTIONS = 100
# A task's own flame graph (its call tree, viewer/core/tasks.h): a live page is sent the
# chosen task's; the report holds those of the TASK_TREES_REPORT tasks with the most running
# time. Paths under TASK_TREE_FRACTION of the task's running time are left out (too narrow
# to draw), as MIN_FRACTION for the program's flame graph.
TASK_TREES_REPORT = 100
TASK_TREE_FRACTION = 1e-4


def task_tree_of(agg, serial):
    """The flame graph of task `serial`: [[symbol id, parent index, logical calls, self_ns,
    total_ns], ...] depth-first, node 0 the root (symbol -1), node 1 the task (its Task
    symbol), then its logical calls (symbol -2: [other], past the core's node budget)."""
    _span, nodes = agg.task_tree(serial, min_fraction=TASK_TREE_FRACTION)
    return [[sym, parent, calls, self_ns, total_ns] for sym, parent, _depth, calls, self_ns, total_ns in nodes]


def tasks_of(agg, limit, functions=True, chosen=-1, trees=0):
    """The asyncio tasks of the process (Aggregator.tasks: viewer/core/tasks.h's rules, Python
    3.12+), None when the stream has none: {"seen", "kept", "folded", "malformed", "shown",
    "list": [task]}, task = [serial, name, coroutine, state, steps, run_ns, wait_ns,
    {await kind: ns}, [[kind, name], ...] (what it awaits now), [[symbol id, logical calls,
    self_ns, total_ns], ...] (its first TASK_FUNCTIONS functions by total; of every task, or
    only of the task whose serial is `chosen` when not functions), its number of functions,
    its flame graph (task_tree_of; of the chosen one, and of the `trees` with the most running
    time; else None)], the `limit` tasks with the most running plus waiting time (and the
    chosen one), in order of first sight."""
    d = agg.tasks(functions=functions, functions_of=chosen)
    tasks = d.pop("tasks")
    if not tasks and not d["seen"]:
        return None
    d["kept"] = len(tasks)
    order = set(sorted(range(len(tasks)), key=lambda i: (-(tasks[i][6] + tasks[i][7]), i))[:limit])
    with_tree = {tasks[i][3] for i in sorted(order, key=lambda i: (-tasks[i][6], i))[:trees]} | {chosen}
    out = []
    for i, (_sym, name, coro, serial, state, steps, run_ns, wait_ns, wait_by, awaits, fns) in enumerate(tasks):
        if i not in order and serial != chosen:
            continue
        out.append([serial, name, coro, state, steps, run_ns, wait_ns,
                    {k: v for k, v in wait_by.items() if v},
                    [[kind, what] for kind, what, _task in awaits],
                    [[f[0], f[4], f[5], f[6]] for f in fns[:TASK_FUNCTIONS]],   # by total (agg.h)
                    len(fns) if fns or functions or serial == chosen else None,
                    task_tree_of(agg, serial) if serial in with_tree else None])
    d["shown"] = len(out)
    d["list"] = out
    return d


# ---- the HTML report ------------------------------------------------------------

# Call paths under this fraction of the view's time are left out of the flame graph: at
# 1/100000 a path is a hundredth of a pixel wide, and a big import-heavy program (pip) has
# ~100k paths, most of them single calls of microseconds. The table keeps every function.
MIN_FRACTION = 1e-5

# Threads that get a view of their own (flame graph and table) in the report: those with
# the most events. Each view is a query over the whole call tree, so a view per thread
# was quadratic in threads (20,000 short threads: 236 s); the others are in "all threads"
# and the timeline, and the report says how many they are.
THREAD_VIEWS = 100


def _process_report(agg, title, timeline_cells, min_fraction, processes, thread_views=THREAD_VIEWS):
    """One process's pictures (agg: an aggregator or a ProcessView)."""
    keys = PathKeys()
    threads = thread_list(agg)
    views = {}
    # the busiest threads, in their order of first sight
    busiest = sorted(range(len(threads)), key=lambda i: (-threads[i][4], i))[:thread_views]
    with_view = [threads[i][0] for i in sorted(busiest)]
    for thread in [0] + with_view:
        span, raw, rows, unobserved = view_of(agg, thread, 0.0, min_fraction)
        view = {"span_ns": span, "nodes": keys.nodes(raw), "rows": rows, "not_observed": unobserved}
        # a thread that is the whole picture (one thread) is not written twice
        views[str(thread)] = {"same_as": "0"} if thread and view == views["0"] else view
    steps = steps_of(agg, STEP_BARS_REPORT)
    if steps:   # the last complete step alone, of the stepping thread
        span, raw, rows, unobserved = view_of(agg, 0, 0.0, min_fraction, last_step=True)
        views["step"] = {"span_ns": span, "nodes": keys.nodes(raw), "rows": rows, "not_observed": unobserved}
    tl = agg.timeline(0, 0.0, 0, 1)
    slices = tl["last_slice"] - tl["first_slice"] + 1
    group = max(1, -(-slices // timeline_cells))
    if group > 1:
        tl = agg.timeline(0, 0.0, 0, group)
    st = status(agg, processes=processes)
    st["threads_without_view"] = len(threads) - len(with_view)
    return {"title": title, "status": st, "threads": threads, "steps": steps,
            "tasks": tasks_of(agg, TASKS_REPORT, trees=TASK_TREES_REPORT),
            "symbols": symbol_list(agg), "views": views,
            "timeline": {"slice_ns": tl["slice_ns"], "group": tl["group"], "first": tl["first_slice"],
                         "last": tl["last_slice"], "cells": tl["cells"]}}


def report_data(prof, title, timeline_cells=1500, min_fraction=MIN_FRACTION, processes=None):
    """Everything the report shows, from a Profile that read a whole recording: every
    process of it (or the indexes in `processes`), each with its own pictures; the first
    one's at the top level, all of them under "procs" by index, listed in "processes" as
    the live page's chooser lists them ([index, pid, title])."""
    agg = prof.aggregator
    entries = prof.processes()
    if processes is not None:
        entries = [e for e in entries if e.index in set(processes)]
    shown = []
    procs = {}
    for e in entries:
        name = title if e.index == 0 else (e.label or "pid %d" % e.pid)
        procs[str(e.index)] = _process_report(ProcessView(agg, e.index), name, timeline_cells, min_fraction,
                                              len(entries))
        # the chooser names each process by its command and state (the job too, not the file's name)
        shown.append([e.index, e.pid, "%s (%s)" % (e.label or "pid %d" % e.pid, e.state)])
    first = procs[str(shown[0][0])] if shown else _process_report(ProcessView(agg, 0), title, timeline_cells,
                                                                   min_fraction, 1)
    out = {"report": True, "title": title}
    out.update({k: v for k, v in first.items() if k != "title"})
    if len(shown) > 1:
        out["processes"] = shown
        out["procs"] = procs
        out["first_process"] = shown[0][0]
    return out


# ---- the live view: per-page sessions that are sent deltas ----------------------

class Session:
    """What one page holds: the picture it was last sent, per view."""

    def __init__(self):
        self.bytes = SESSION_BYTES
        self.view = None
        self.version = 0
        self.nodes = {}
        self.rows = {}
        self.symbols = {}
        self.threads = None
        self.timeline_from = 0
        self.symbol_text = 0        # bytes of the names and files of the symbols it holds
        self.tasks = None           # the task chooser's list it was last sent (tasks_of)
        self.used = time.monotonic()


# What a page's session holds, estimated (measured with tracemalloc on CPython 3.11: a
# node or row is a tuple of small ints and its dict entry, a symbol the page was sent is
# a 5-tuple with its two strings).
SESSION_BYTES = 2048
NODE_BYTES = 260
ROW_BYTES = 210
SYMBOL_BYTES = 230
# a task of tasks_of (not measured: its list of ten fields with two strings and a dict, and
# each function row a list of four ints)
TASK_BYTES = 900
TASK_FN_BYTES = 150
TASK_NODE_BYTES = 150   # a node of the chosen task's flame graph: a list of five ints


def session_bytes(s):
    syms = SYMBOL_BYTES * len(s.symbols)
    tasks = s.tasks["list"] if s.tasks else ()
    syms += TASK_BYTES * len(tasks) + TASK_FN_BYTES * sum(len(t[9]) for t in tasks)
    syms += TASK_NODE_BYTES * sum(len(t[11] or ()) for t in tasks)
    return SESSION_BYTES + NODE_BYTES * len(s.nodes) + ROW_BYTES * len(s.rows) + syms + s.symbol_text


class SessionBudget:
    """The memory of every page's session together (every Live of a server shares one):
    past `limit` bytes the least recently used sessions are evicted. A page whose session
    was evicted gets a fresh one and, its version no longer matching, the whole picture:
    nothing is lost but the bytes of one full answer."""

    def __init__(self, limit=256 << 20):
        self.limit = limit
        self.lock = threading.Lock()
        self.lives = []
        self.evicted = 0

    def total(self):
        return sum(s.bytes for live in self.lives for s in list(live.sessions.values()))

    def settle(self, keep):
        """Evict least recently used sessions (never `keep`) until all fit the limit."""
        with self.lock:
            entries = [(s.used, live, sid, s) for live in self.lives for sid, s in list(live.sessions.items())]
            total = sum(e[3].bytes for e in entries)
            if total <= self.limit:
                return
            entries.sort(key=lambda e: e[0])
            for _used, live, sid, s in entries:
                if total <= self.limit:
                    break
                if s is keep:
                    continue
                with live.lock:
                    if live.sessions.get(sid) is s:
                        del live.sessions[sid]
                        total -= s.bytes
                        self.evicted += 1


class Live:
    """Deltas for the pages of one aggregator. update() answers a poll."""

    def __init__(self, agg, extra_status=None, min_fraction=MIN_FRACTION, budget=None):
        self.agg = agg
        self.min_fraction = min_fraction
        self.keys = PathKeys()
        self.sessions = {}
        self.lock = threading.Lock()
        self.extra_status = extra_status or (lambda: {})
        self.budget = budget or SessionBudget()
        with self.budget.lock:
            self.budget.lives.append(self)

    def _session(self, sid):
        with self.lock:
            now = time.monotonic()
            s = self.sessions.get(sid)
            if s is None:
                s = self.sessions[sid] = Session()
            s.used = now
            return s

    def update(self, sid, version, thread, window, filt, step=False, task=-1):
        """The delta that brings a page at `version` of view (thread, window, filter, step:
        the last complete step alone) to now. A page that asks for another view, or whose
        version is not the one it was last sent (a lost answer), gets the whole picture."""
        s = self._session(sid)
        view = (thread, window, filt, step)
        full = s.view != view or version != s.version
        if full:
            s.view, s.nodes, s.rows, s.timeline_from = view, {}, {}, 0
            s.symbols, s.threads, s.symbol_text = {}, None, 0
        agg = self.agg
        out = {"full": full}
        # symbols: new or changed ones
        syms = symbol_list(agg)
        new_syms = [x for x in syms if s.symbols.get(x[0]) != x]
        for x in new_syms:
            old = s.symbols.get(x[0])
            if old is not None:
                s.symbol_text -= len(old[1]) + len(old[2])
            s.symbols[x[0]] = x
            s.symbol_text += len(x[1]) + len(x[2])
        out["symbols"] = new_syms
        threads = thread_list(agg)
        if threads != s.threads:
            out["threads"] = threads
            s.threads = threads
        span, raw, table_rows, unobserved = view_of(agg, thread, window, self.min_fraction, filt or None,
                                                    last_step=step)
        out["steps"] = steps_of(agg, STEP_BARS_LIVE)
        tasks = tasks_of(agg, TASKS_LIVE, functions=False, chosen=task)
        if full or tasks != s.tasks:
            out["tasks"] = tasks
            s.tasks = tasks
        nodes = {n[0]: n for n in self.keys.nodes(raw)}
        out["nodes"] = [n for k, n in nodes.items() if s.nodes.get(k) != n]
        out["removed"] = [k for k in s.nodes if k not in nodes]
        s.nodes = nodes
        rows = {r[0]: r for r in table_rows}
        out["rows"] = [r for k, r in rows.items() if s.rows.get(k) != r]
        out["rows_removed"] = [k for k in s.rows if k not in rows]
        s.rows = rows
        out["span_ns"] = span
        out["not_observed"] = unobserved
        tl = agg.timeline(thread, window or 60.0, s.timeline_from, 1)
        out["timeline"] = {"slice_ns": tl["slice_ns"], "group": tl["group"], "first": tl["first_slice"],
                           "last": tl["last_slice"], "cells": tl["cells"], "since": s.timeline_from}
        s.timeline_from = tl["last_slice"]
        out["status"] = status(agg, extra=self.extra_status())
        s.version += 1
        out["version"] = s.version
        s.bytes = session_bytes(s)
        self.budget.settle(keep=s)
        return out


def new_token():
    return secrets.token_urlsafe(24)
