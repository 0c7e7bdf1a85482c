"""Random valid pytrace streams, written as real recordings (for the agreement test and
bench/export_bench.py).

A model program runs per thread: a true stack of frames (Python functions with
recursion, C functions, generators that yield and resume) and user spans begun and
ended through the helper frames pytrace.span uses (`__enter__` -> `span_begin`,
`__exit__` -> `span_end`), sometimes across frames. The stream shows what a reader
sees: some threads start mid-stream (their stack comes as Frame records first, or not
at all, so returns arrive without calls), events are dropped in bursts (a Lost record
with the count, then the true stack as Frame records), exceptions unwind, marks are
set, and some threads never end (no ThreadEnd).
"""

import random

import synthetic as syn
from pytrace.reader import EventKind, SymbolKind

# the schema's numbers (pytrace.fb, through pytrace.reader), as plain ints
CALL, RET, CCALL, CRET, UNWIND, CUNWIND, YIELD, RESUME = (int(k) for k in (
    EventKind.Call, EventKind.Return, EventKind.CCall, EventKind.CReturn, EventKind.Unwind,
    EventKind.CUnwind, EventKind.Yield, EventKind.Resume))
SPAN_B, SPAN_E, MARK, LOST, FRAME = (int(k) for k in (
    EventKind.SpanBegin, EventKind.SpanEnd, EventKind.Mark, EventKind.Lost, EventKind.Frame))
SYM_PY, SYM_C, SYM_LABEL = (int(k) for k in (SymbolKind.PyFunction, SymbolKind.CFunction,
                                             SymbolKind.Label))

N_PY, N_C, N_GEN, N_SPAN = 12, 4, 3, 3
PY = list(range(1, N_PY + 1))
CF = list(range(100, 100 + N_C))
GEN = list(range(200, 200 + N_GEN))
SPANS = list(range(300, 300 + N_SPAN))
ENTER, BEGIN, EXIT, END = 400, 401, 402, 403


def symbols(file="gen.py", process=0):
    """The symbols; `file` names the Python functions' file (processes of one stream can
    give the same ids to different functions), process tags them (Message.process)."""
    out = []
    sym = lambda *a, **k: out.append(syn.symbol(*a, process=process, **k))  # noqa: E731
    for i in PY:
        sym(i, "f%d" % i, file, 10 * i, kind=SYM_PY, profile_name="f%d" % i)
    for i in CF:
        sym(i, "builtins.c%d" % i, "builtins", 0, kind=SYM_C, profile_name="<built-in method builtins.c%d>" % i)
    for i in GEN:
        sym(i, "g%d" % i, file, 10 * i, kind=SYM_PY, profile_name="g%d" % i)
    for i in SPANS:
        sym(i, "s%d" % i, "", 0, kind=SYM_LABEL)
    sym(ENTER, "_Span.__enter__", "pytrace.py", 1, kind=SYM_PY, profile_name="__enter__")
    sym(EXIT, "_Span.__exit__", "pytrace.py", 2, kind=SYM_PY, profile_name="__exit__")
    sym(BEGIN, "_pytrace.span_begin", "_pytrace", 0, kind=SYM_C, profile_name="<built-in method _pytrace.span_begin>")
    sym(END, "_pytrace.span_end", "_pytrace", 0, kind=SYM_C, profile_name="<built-in method _pytrace.span_end>")
    return out


class _Thread:
    def __init__(self, rng, number, ticks):
        self.rng = rng
        self.number = number
        self.t = ticks
        self.stack = []          # true frames: (id, kind) kind: "py", "c", "gen"
        self.spans = []          # open span ids
        self.suspended = []      # generators that yielded, may resume
        self.out = []            # events the reader sees
        self.dropping = 0        # events still to drop in the current burst
        self.dropped = 0

    def emit(self, sid, kind, aux=0):
        self.t += self.rng.choice((0, 1, 3, 10, 100, 1000))
        ev = (self.t, sid, aux, kind, 0)
        if self.dropping:
            self.dropping -= 1
            self.dropped += 1
            if not self.dropping:     # the gap ends: Lost, then the true stack
                self.out.append((self.t, self.dropped & 0xFFFFFFFF, self.dropped >> 32, LOST, 0))
                for depth, (fid, _k) in enumerate(self.stack):
                    self.out.append((self.t, fid, depth, FRAME, 0))
                self.dropped = 0
            return
        self.out.append(ev)

    def step(self):
        r = self.rng.random()
        top = self.stack[-1] if self.stack else None
        if top and top[1] == "c":
            self.stack.pop()
            self.emit(top[0], CRET if r < 0.9 else CUNWIND)
        elif r < 0.30 and len(self.stack) < 40:
            f = self.rng.choice(PY[:4] if self.rng.random() < 0.5 else PY)   # recursion often
            self.stack.append((f, "py"))
            self.emit(f, CALL)
        elif r < 0.38:
            c = self.rng.choice(CF)
            self.stack.append((c, "c"))
            self.emit(c, CCALL)
        elif r < 0.44 and len(self.stack) < 40:
            if self.suspended and self.rng.random() < 0.6:
                g = self.suspended.pop()
                self.stack.append((g, "gen"))
                self.emit(g, RESUME)
            else:
                g = self.rng.choice(GEN)
                self.stack.append((g, "gen"))
                self.emit(g, CALL)
        elif r < 0.68 and self.stack:
            fid, kind = self.stack.pop()
            if kind == "gen" and self.rng.random() < 0.6:
                self.suspended.append(fid)
                self.emit(fid, YIELD)
            else:
                self.emit(fid, UNWIND if self.rng.random() < 0.1 else RET)
        elif r < 0.72 and len(self.stack) >= 3:
            # a missed return: the reader sees only the return of a deeper frame
            k = self.rng.randrange(1, len(self.stack) - 1)
            fid, _ = self.stack[k]
            del self.stack[k:]
            self.emit(fid, RET)
        elif r < 0.78:
            s = self.rng.choice(SPANS)
            self.spans.append(s)
            if self.rng.random() < 0.7:      # through pytrace.span's helpers
                self.emit(ENTER, CALL)
                self.emit(BEGIN, CCALL)
                self.emit(s, SPAN_B)
                self.emit(BEGIN, CRET)
                self.emit(ENTER, RET)
            else:
                self.emit(s, SPAN_B)
        elif r < 0.83 and self.spans:
            s = self.spans.pop(self.rng.randrange(len(self.spans)) if self.rng.random() < 0.2 else -1)
            if self.rng.random() < 0.7:
                self.emit(EXIT, CALL)
                self.emit(END, CCALL)
                self.emit(s, SPAN_E)
                self.emit(END, CRET)
                self.emit(EXIT, RET)
            else:
                self.emit(s, SPAN_E)
        elif r < 0.85:
            self.emit(self.rng.choice(SPANS), MARK)
        elif r < 0.87 and not self.dropping:
            self.dropping = self.rng.randrange(1, 30)
        elif r < 0.88:
            self.emit(self.rng.choice(PY), RET)   # a return without a call (ignored, counted)
        else:
            self.t += self.rng.randrange(1, 5000)


def recording(path, seed, threads=3, steps=400):
    """Write a random valid recording to `path`; returns the number of events."""
    msgs, total = process_messages(random.Random(seed), threads=threads, steps=steps)
    _write(path, msgs)
    return total


def _write(path, msgs):
    from pytrace.recording import RecordingWriter
    w = RecordingWriter(path, lossless=False)
    for m in msgs:
        w.append(m)
    w.close()


def process_messages(rng, threads=3, steps=400, process=0, pid=77, file="gen.py",
                     ticks_per_second=1_000_000_000, base_ticks=1000, base_monotonic_ns=5 * 10**9,
                     base_realtime_ns=0, command_line="python demo.py"):
    """The messages of one random process, tagged `process` (0: untagged); and its event
    count."""
    msgs = [syn.process_info(pid=pid, ticks_per_second=ticks_per_second, base_ticks=base_ticks,
                             base_monotonic_ns=base_monotonic_ns, base_realtime_ns=base_realtime_ns,
                             command_line=command_line, process=process)]
    msgs += symbols(file, process)
    ths = []
    for n in range(1, threads + 1):
        th = _Thread(rng, n, 1000 + rng.randrange(100))
        start = rng.random()
        if start < 0.4:              # mid-stream start with the stack as Frame records
            for d in range(rng.randrange(1, 5)):
                f = rng.choice(PY)
                th.stack.append((f, "py"))
                th.out.append((th.t, f, d, FRAME, 0))
        elif start < 0.6:            # mid-stream start without: returns come without calls
            th.stack = []
            for _ in range(rng.randrange(1, 4)):
                th.out.append((th.t, rng.choice(PY), 0, RET, 0))
        ths.append(th)
        msgs.append(syn.thread_start(n, "T%d" % n, os_tid=5000 + n, ticks=th.t, process=process))
    total = 0
    live = list(ths)
    for _ in range(steps):
        th = rng.choice(live)
        for _ in range(rng.randrange(1, 20)):
            th.step()
        if th.out and rng.random() < 0.5:
            msgs.append(syn.event_chunk(th.number, th.out, process=process))
            total += len(th.out)
            th.out = []
    for th in ths:
        th.dropping = 0
        if th.out:
            msgs.append(syn.event_chunk(th.number, th.out, process=process))
            total += len(th.out)
        if th.number != threads or rng.random() < 0.5:   # the last thread may never end
            msgs.append(syn.thread_end(th.number, th.t + rng.randrange(0, 100), process=process))
    msgs.append(syn.producer_status(state=3, process=process))
    return msgs, total


# Processes of multi_recording: (Message.process, pid, Python file of its functions, clock).
# The first is untagged, as the hub gives a job's own process (its children are 1, 2, ...).
PROCESSES = (
    (0, 4101, "gen.py", dict(base_ticks=1000, base_monotonic_ns=5 * 10**9)),
    (2, 4102, "worker.py", dict(base_ticks=7 * 10**6, base_monotonic_ns=6 * 10**9)),
    (5, 4103, "gen.py", dict(base_ticks=0, base_monotonic_ns=7 * 10**9)),
)


def multi_recording(path, seed, processes=PROCESSES, threads=3, steps=300):
    """One recording of several random processes (a job's process tree), their messages
    interleaved at random (each process's in its order, its ProcessInfo first), and beside
    it each process alone, untagged, in `path`.pPID. Processes of one stream give the same
    symbol ids to functions of different files (gen.py, worker.py) and share others (the C
    functions, the span helpers). Returns {pid: path of the process alone}."""
    rng = random.Random(seed)
    per, alone = [], {}
    for tag, pid, file, clock in processes:
        sub = random.Random(rng.randrange(2**32))
        msgs, _ = process_messages(sub, threads=threads, steps=steps, process=tag, pid=pid, file=file,
                                   command_line="python job.py --rank %d" % tag, **clock)
        per.append(msgs)
        alone[pid] = "%s.p%d" % (path, pid)
    # the same processes again, untagged, one file each (the same random choices)
    rng2 = random.Random(seed)
    for tag, pid, file, clock in processes:
        sub = random.Random(rng2.randrange(2**32))
        msgs, _ = process_messages(sub, threads=threads, steps=steps, process=0, pid=pid, file=file,
                                   command_line="python job.py --rank %d" % tag, **clock)
        _write(alone[pid], msgs)
    merged, queues = [], [list(m) for m in per]
    while any(queues):
        q = rng.choice([q for q in queues if q])
        for _ in range(rng.randrange(1, 6)):
            if q:
                merged.append(q.pop(0))
    _write(path, merged)
    return alone
