"""Exporters on scripted streams: every format shows the same calls and nesting, each
checked with its consumer's parser (pstats, gprof2dot) or its published structure
(speedscope file-format schema, Chrome trace-event format), and pstats agrees with
cProfile on a real workload.
"""

import collections
import json
import marshal
import os
import pstats
import subprocess
import sys

import pytest

from pytrace import recording as rec
from pytrace.export import main as export_main
import synthetic as syn
from exportcheck import _check_nesting, _collapsed, check_speedscope
from pftrace_reader import check_nesting as check_perfetto_nesting
from scripted import (CALL, CCALL, CRET, EXPECTED_CALLS, EXPECTED_PATHS, EXPECTED_SPANS, RET,  # noqa: F401
                      recording)  # (recording: a fixture)


def _export(path, fmt, out, *extra):
    assert export_main([str(path), "--format", fmt, "-o", str(out), *extra]) == 0
    return out


# ---- collapsed -----------------------------------------------------------------

def test_collapsed_calls_and_self_time(recording, tmp_path):
    path, end1 = recording
    calls = _collapsed(_export(path, "collapsed", tmp_path / "c.folded", "--weight", "calls"))
    assert calls == EXPECTED_PATHS
    ns = _collapsed(_export(path, "collapsed", tmp_path / "n.folded"))
    # the gap's time (the fib called before the Lost record, 10 ticks: nobody saw what ran)
    # is its own line, in no function
    assert ns.pop(("<not observed>",)) == 10
    assert set(ns) <= set(EXPECTED_PATHS)
    # Self times and the time nobody saw add up to the wall time of each thread's root frames.
    main_total = sum(v for k, v in ns.items() if k[0] == "<module>")
    assert main_total == end1 - 10
    assert sum(v for k, v in ns.items() if k[0] == "worker") == 30
    # flamegraph.pl's line syntax: "frame;frame count", integer counts
    for line in open(tmp_path / "n.folded"):
        assert line.count(" ") >= 1 and line.rsplit(" ", 1)[1].strip().isdigit()


# ---- pstats --------------------------------------------------------------------

def test_pstats_loads_with_pstats_and_counts_recursion_like_cprofile(recording, tmp_path):
    path, _ = recording
    out = _export(path, "pstats", tmp_path / "p.pstats")
    st = pstats.Stats(str(out))
    by_name = {k[2]: v for k, v in st.stats.items()}
    assert {n: v[1] for n, v in by_name.items()} == {
        ("<built-in method builtins.len>" if n == "builtins.len" else n): c
        for n, c in EXPECTED_CALLS.items()} | {"<span '%s'>" % n: c for n, c in EXPECTED_SPANS.items()}
    fib = by_name["fib"]
    # fib: 6 calls; 3 of them made while another fib was active -> 3 primitive... per thread:
    # fib(3)->fib(2)->fib(1),fib(0); fib(1); the fib before the gap: primitive = 2
    assert fib[0] == 2 and fib[1] == 6
    callers = {k[2]: v for k, v in fib[4].items()}
    assert set(callers) == {"main", "fib"}
    assert callers["main"][:2] == (2, 2)       # (nc, cc) as cProfile stores caller edges
    assert callers["fib"][:2] == (4, 2)        # fib->fib edge: the two calls made by fib(2) nest in fib(3)->fib(2)
    # cumulative time of fib is counted once per outermost call
    assert fib[3] <= sum(v[3] for v in callers.values())
    assert st.total_calls == sum(EXPECTED_CALLS.values()) + sum(EXPECTED_SPANS.values())
    st.sort_stats("cumulative").print_stats(0)      # the printing paths work


def test_pstats_file_loads_in_gprof2dot(recording, tmp_path):
    # gprof2dot is installed by .ci/install.sh: its absence is a failure, not a skip
    path, _ = recording
    out = _export(path, "pstats", tmp_path / "p.pstats")
    r = subprocess.run([sys.executable, "-m", "gprof2dot", "-f", "pstats", str(out),
                        "-n", "0", "-e", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "digraph" in r.stdout and "fib" in r.stdout and "main" in r.stdout


# ---- perfetto / chrome trace-event JSON -------------------------------------------

def test_chrome_json_structure_and_content(recording, tmp_path):
    path, _ = recording
    out = _export(path, "chrome", tmp_path / "t.json")
    doc = json.load(open(out))
    assert isinstance(doc["traceEvents"], list)
    per_tid = collections.defaultdict(list)
    counts = collections.Counter()
    names = {}
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M", "i") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and e["name"]
            if e["cat"] in ("python", "c"):
                per_tid[e["tid"]].append(e)
                counts[e["name"]] += 1
            else:
                assert e["cat"] == "span" and e["name"] == "load batch"
        elif e["ph"] == "M":
            if e["name"] == "thread_name":
                names[e["tid"]] = e["args"]["name"]
        else:
            assert e["s"] == "t"
    assert dict(counts) == EXPECTED_CALLS
    assert names[1].startswith("MainThread") and names[2].startswith("worker-1")
    for evs in per_tid.values():
        _check_nesting(evs)
    instants = [e["name"] for e in doc["traceEvents"] if e["ph"] == "i"]
    assert "epoch 1" in instants and "lost 5 events" in instants
    # ts is CLOCK_MONOTONIC in microseconds
    assert min(e["ts"] for e in doc["traceEvents"] if e["ph"] == "X") == pytest.approx(1e9)


# ---- speedscope -------------------------------------------------------------------

def test_speedscope_structure_and_content(recording, tmp_path):
    path, _ = recording
    out = _export(path, "speedscope", tmp_path / "s.speedscope.json")
    doc = json.load(open(out))
    assert dict(check_speedscope(doc)) == EXPECTED_CALLS | EXPECTED_SPANS
    assert [p["name"].split(" (")[0] for p in doc["profiles"]] == ["MainThread", "worker-1"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith("pytrace-speedscope-")]


# ---- damaged input ------------------------------------------------------------------

def test_export_of_truncated_recording_writes_what_was_read(recording, tmp_path):
    path, _ = recording
    data = open(path, "rb").read()
    cut = tmp_path / "cut.pytrace"
    for size in range(16, len(data), 29):
        cut.write_bytes(data[:size])
        for fmt, name in (("chrome", "t.json"), ("perfetto", "t.pftrace"), ("speedscope", "s.json"),
                          ("collapsed", "c.folded"), ("pstats", "p.pstats")):
            out = tmp_path / name
            rc = export_main([str(cut), "--format", fmt, "-o", str(out)])
            assert rc in (0, 1)
            if fmt == "pstats":
                if marshal.loads(out.read_bytes()):   # pstats refuses an empty profile
                    pstats.Stats(str(out))
            elif fmt == "collapsed":
                _collapsed(out)
            elif fmt == "perfetto":
                from pftrace_reader import read_trace
                for track in read_trace(out)[2].values():
                    check_perfetto_nesting(track)
            else:
                doc = json.load(open(out))
                if fmt == "speedscope":
                    check_speedscope(doc)


def test_export_reports_bad_magic(tmp_path, capsys):
    bad = tmp_path / "bad.pytrace"
    bad.write_bytes(b"garbage!" * 10)
    assert export_main([str(bad), "--format", "collapsed", "-o", str(tmp_path / "x")]) == 1
    assert "offset 0" in capsys.readouterr().err


# ---- pstats against cProfile on a real workload ---------------------------------------

def _workload():
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    def even(n):
        return True if n == 0 else odd(n - 1)

    def odd(n):
        return False if n == 0 else even(n - 1)

    def gen(k):
        for i in range(k):
            yield len([i])

    def risky(i):
        if i % 3 == 0:
            raise ValueError(i)
        return i

    def work():
        total = fib(12)
        for i in range(5):
            even(i + 3)
        total += sum(gen(6))
        for i in range(7):
            try:
                risky(i)
            except ValueError:
                pass
        return sorted([3, 1, 2], key=abs)

    return work


def _trace_to_recording(work, path):
    """A pure-Python tracer (sys.setprofile) writing the same events pytrace writes."""
    ids = {}
    events = []
    import time as _t

    def sid_of(key, label):
        sid = ids.get(key)
        if sid is None:
            sid = ids[key] = (len(ids) + 1, label)
        return sid[0]

    def prof(frame, what, arg):
        now = _t.perf_counter_ns()
        if what == "call":
            code = frame.f_code
            events.append((now, sid_of(code, (0, code.co_name, code.co_filename, code.co_firstlineno)), 0, CALL, 0))
        elif what == "return":
            code = frame.f_code
            events.append((now, sid_of(code, (0, code.co_name, code.co_filename, code.co_firstlineno)), 0, RET, 0))
        elif what == "c_call":
            name = "%s.%s" % (getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__name__,
                              arg.__name__)
            events.append((now, sid_of(arg, (1, name, "~", 0)), 0, CCALL, 0))
        elif what in ("c_return", "c_exception"):
            name = "%s.%s" % (getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__name__,
                              arg.__name__)
            events.append((now, sid_of(arg, (1, name, "~", 0)), 0, CRET, 0))

    sys.setprofile(prof)
    try:
        work()
    finally:
        sys.setprofile(None)
    # drop the trailing c_call of setprofile itself
    while events and events[-1][3] == CCALL:
        events.pop()
    w = rec.RecordingWriter(path)
    w.append(syn.process_info(ticks_per_second=1_000_000_000, base_ticks=events[0][0]))
    for (sid, (kind, name, file, line)) in ids.values():
        w.append(syn.symbol(sid, name, file, line, kind=kind))
    w.append(syn.thread_start(1))
    for i in range(0, len(events), 1000):
        w.append(syn.event_chunk(1, events[i:i + 1000], first_event=i))
    w.append(syn.producer_status(state=3))
    w.close()


def test_pstats_counts_match_cprofile(tmp_path):
    import cProfile
    work = _workload()
    prof = cProfile.Profile()
    prof.runcall(work)
    prof.create_stats()
    ref = {}
    for (file, line, name), (cc, nc, tt, ct, callers) in prof.stats.items():
        if file == "~":
            continue                     # C functions are named differently
        ref[(file, line, name)] = (cc, nc, {k: v[:2] for k, v in callers.items() if k[0] != "~"})
    path = tmp_path / "w.pytrace"
    _trace_to_recording(work, path)
    out = _export(path, "pstats", tmp_path / "w.pstats")
    ours = {}
    for (file, line, name), (cc, nc, tt, ct, callers) in pstats.Stats(str(out)).stats.items():
        if file == "~":
            continue
        ours[(file, line, name)] = (cc, nc, {k: v[:2] for k, v in callers.items() if k[0] != "~"})
        assert tt >= 0 and ct >= 0
    ref.pop(next(k for k in ref if k[2] == "work"), None)
    ours.pop(next(k for k in ours if k[2] == "work"), None)
    # callers of functions called from work(): cProfile sees work as the caller too
    assert ours == ref
    raw = marshal.loads(open(out, "rb").read())
    assert all(len(v) == 5 for v in raw.values())
