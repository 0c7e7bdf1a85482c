"""CPU time and time nobody saw in the exports (issue 21), on scripted streams whose
CpuTime and Lost records are known: pstats and collapsed in CPU time (--time cpu) give a
spinning function its wall time and a waiting one none; a Lost gap's time is in no
function (pstats leaves it out and says so on stderr, collapsed shows <not observed>);
perfetto has a "CPU usage" counter track per thread and chrome a counter per thread;
CpuTime records change no slice, call or event of any format."""

import json
import pstats

import pytest

from pytrace import recording as rec
from pytrace.export import export, main as export_main
from pytrace.cmdline import UsageError
from pytrace.reader import EventKind, SymbolKind
import synthetic as syn
from exportcheck import _collapsed
from pftrace_reader import read_trace

CALL, RET, CCALL, CRET, LOST, CPU = (int(k) for k in (
    EventKind.Call, EventKind.Return, EventKind.CCall, EventKind.CReturn, EventKind.Lost, EventKind.CpuTime))

MS = 1_000_000                  # ticks are ns (ticks_per_second 1e9)
SPIN_MS, WAIT_MS = 40, 40
SYMS = {1: ("main", "job.py", 1), 2: ("spin", "job.py", 10), 3: ("time.sleep", "time", 0),
        4: ("waiter", "job.py", 20)}


def _cpu(ticks, cpu_ns):
    """A CpuTime record: the thread's CPU ns at ticks, in id | aux << 32 (48 bits)."""
    cpu_ns &= (1 << 48) - 1
    return (ticks, cpu_ns & 0xffffffff, cpu_ns >> 32, CPU, 0)


def _spinner(cpu=True):
    """Thread 1: main calls spin, which runs on a CPU all the time for SPIN_MS; a CpuTime
    record every ms (a baseline at the start). The CPU clock starts at a large value, so
    the 48-bit wrap is crossed on the way."""
    base = (1 << 48) - 5 * MS
    ev = [(0, 1, 0, CALL, 0), (0, 2, 0, CALL, 0)]
    if cpu:
        ev.insert(0, _cpu(0, base))
    for i in range(1, SPIN_MS + 1):
        if cpu:
            ev.append(_cpu(i * MS, base + i * MS))
    ev += [(SPIN_MS * MS, 2, 0, RET, 0), (SPIN_MS * MS, 1, 0, RET, 0)]
    return ev


def _waiter(cpu=True):
    """Thread 2: waiter calls time.sleep for WAIT_MS, on a CPU 1 % of the time."""
    ev = [(0, 4, 0, CALL, 0), (0, 3, 0, CCALL, 0)]
    if cpu:
        ev.insert(0, _cpu(0, 7_000))
    for i in range(1, WAIT_MS + 1):
        if cpu:
            ev.append(_cpu(i * MS, 7_000 + i * MS // 100))
    ev += [(WAIT_MS * MS, 3, 0, CRET, 0), (WAIT_MS * MS, 4, 0, RET, 0)]
    return ev


def _write(path, threads, ends=None):
    msgs = [syn.process_info(pid=4343, ticks_per_second=1_000_000_000, base_monotonic_ns=10**12)]
    for sid, (name, file, line) in SYMS.items():
        msgs.append(syn.symbol(sid, name, file, line, kind=int(SymbolKind.CFunction if file in ("time", "builtins")
                                                               else SymbolKind.PyFunction)))
    for number, ev in threads.items():
        msgs.append(syn.thread_start(number, "spinner" if number == 1 else "waiter", os_tid=500 + number))
        msgs.append(syn.event_chunk(number, ev))
        if ends and number in ends:
            msgs.append(syn.thread_end(number, ends[number]))
    msgs.append(syn.producer_status(state=3))
    w = rec.RecordingWriter(path, lossless=False)
    for m in msgs:
        w.append(m)
    w.close()
    return path


@pytest.fixture
def job(tmp_path):
    return _write(tmp_path / "cpu.pytrace", {1: _spinner(), 2: _waiter()})


def _rows(path):
    return {k[2]: v for k, v in pstats.Stats(str(path)).stats.items()}


# ---- pstats and collapsed in CPU time --------------------------------------------

def test_pstats_cpu_time_gives_the_spinner_its_wall_time_and_the_waiter_none(job, tmp_path):
    wall = _rows(_export(job, "pstats", tmp_path / "w.pstats"))
    cpu = _rows(_export(job, "pstats", tmp_path / "c.pstats", "--time", "cpu"))
    assert set(cpu) == set(wall)                         # the same functions, calls, callers
    for name in wall:
        assert cpu[name][:2] == wall[name][:2] and set(cpu[name][4]) == set(wall[name][4])
    # wall time: spinning and sleeping look alike
    assert wall["spin"][2] == pytest.approx(SPIN_MS / 1e3)
    assert wall["<built-in method time.sleep>"][2] == pytest.approx(WAIT_MS / 1e3)
    # CPU time: the spinner ran on a CPU all its wall time, the sleeper 1 % of it
    assert cpu["spin"][2] == pytest.approx(SPIN_MS / 1e3, rel=1e-6)
    assert cpu["spin"][3] == pytest.approx(SPIN_MS / 1e3, rel=1e-6)
    assert cpu["main"][3] == pytest.approx(SPIN_MS / 1e3, rel=1e-6)    # cumulative: its callee's
    assert cpu["main"][2] == 0
    assert cpu["<built-in method time.sleep>"][2] == pytest.approx(WAIT_MS / 1e3 / 100, rel=1e-6)
    assert cpu["waiter"][3] == pytest.approx(WAIT_MS / 1e3 / 100, rel=1e-6)
    # the caller edges carry CPU time too
    (edge,) = cpu["spin"][4].values()
    assert edge[2] == pytest.approx(SPIN_MS / 1e3, rel=1e-6)


def test_collapsed_cpu_time_weighs_stacks_by_cpu(job, tmp_path):
    wall = _collapsed(_export(job, "collapsed", tmp_path / "w.folded"))
    cpu = _collapsed(_export(job, "collapsed", tmp_path / "c.folded", "--time", "cpu"))
    assert wall[("main", "spin")] == wall[("waiter", "time.sleep")] == SPIN_MS * MS
    assert cpu[("main", "spin")] == SPIN_MS * MS
    assert cpu[("waiter", "time.sleep")] == WAIT_MS * MS // 100


def test_cpu_time_options_are_refused_where_they_mean_nothing(job, tmp_path):
    with pytest.raises(UsageError, match="--time is for --format pstats and collapsed"):
        export_main([str(job), "-f", "chrome", "--time", "cpu", "-o", str(tmp_path / "x.json")])
    with pytest.raises(UsageError, match="choose one"):
        export_main([str(job), "-f", "collapsed", "--time", "cpu", "--weight", "calls",
                     "-o", str(tmp_path / "x.folded")])
    with pytest.raises(ValueError):
        export(str(job), "perfetto", str(tmp_path / "x.pftrace"), time="cpu")


def test_cpu_time_of_a_recording_without_cpu_samples_is_said_to_be_zero(tmp_path, capsys):
    path = _write(tmp_path / "old.pytrace", {1: _spinner(cpu=False)})
    capsys.readouterr()
    rows = _rows(_export(path, "pstats", tmp_path / "c.pstats", "--time", "cpu"))
    assert rows["spin"][2] == 0
    assert "holds no CPU time samples" in capsys.readouterr().err


# ---- time nobody saw ---------------------------------------------------------------

def _gapped():
    """main calls spin; 10 ms into it events are lost (a Lost record of 500 events at
    30 ms: the 20 ms before it nobody saw), then the stack is rebuilt by Frame records
    and spin returns at 40 ms."""
    frame = int(EventKind.Frame)
    return [_cpu(0, 0), (0, 1, 0, CALL, 0), (0, 2, 0, CALL, 0), _cpu(10 * MS, 10 * MS),
            (10 * MS, 5, 0, CCALL, 0),
            (30 * MS, 500, 0, LOST, 0), _cpu(30 * MS, 30 * MS), (30 * MS, 1, 0, frame, 0),
            (30 * MS, 2, 1, frame, 0), (40 * MS, 2, 0, RET, 0), _cpu(40 * MS, 40 * MS), (40 * MS, 1, 0, RET, 0)]


@pytest.fixture
def gapped(tmp_path):
    SYMS[5] = ("len", "builtins", 0)
    try:
        return _write(tmp_path / "gap.pytrace", {1: _gapped()})
    finally:
        del SYMS[5]


def test_pstats_leaves_the_gap_out_and_says_how_much(gapped, tmp_path, capsys):
    capsys.readouterr()
    rows = _rows(_export(gapped, "pstats", tmp_path / "g.pstats"))
    err = capsys.readouterr().err
    # 40 ms of thread time, 20 of them inside the gap: no function has them (len, on top
    # when the events were lost, is not charged), and the export says so, one line
    assert sum(v[2] for v in rows.values()) == pytest.approx(0.020)
    assert rows["main"][3] == pytest.approx(0.020)
    assert rows["spin"][3] == pytest.approx(0.020)
    assert rows["<built-in method len>"][2] == 0
    lines = [ln for ln in err.splitlines() if "not observed" in ln]
    assert lines == ["pytrace export: not observed: 20.0 ms of thread time (500 events lost), in no function"]
    res, _ = export(str(gapped), "pstats", str(tmp_path / "h.pstats"))
    assert (res.unobserved_ns, res.unobserved_lost, res.lost_events) == (20 * MS, 500, 500)
    # in CPU time the gap's CPU is nobody's too (the thread was on a CPU all along)
    cpu = _rows(_export(gapped, "pstats", tmp_path / "c.pstats", "--time", "cpu"))
    assert sum(v[2] for v in cpu.values()) == pytest.approx(0.020)
    assert "20.0 ms of CPU time" in capsys.readouterr().err


def test_collapsed_shows_the_gap_as_not_observed(gapped, tmp_path):
    rows = _collapsed(_export(gapped, "collapsed", tmp_path / "g.folded"))
    assert rows[("<not observed>",)] == 20 * MS
    assert rows[("main", "spin")] == 20 * MS                     # 10 ms before the gap, 10 after
    assert ("main", "spin", "len") not in rows                   # on top when events were lost
    assert sum(rows.values()) == 40 * MS                         # every tick of the thread, once
    # per thread: the thread's own <not observed> frame, under it
    per = _collapsed(_export(gapped, "collapsed", tmp_path / "p.folded", "--per-thread"))
    assert per[("thread spinner", "<not observed>")] == 20 * MS
    cpu = _collapsed(_export(gapped, "collapsed", tmp_path / "c.folded", "--time", "cpu"))
    assert cpu[("<not observed>",)] == 20 * MS                   # its CPU: on a CPU all along


# ---- the timeline formats ------------------------------------------------------------

def test_perfetto_has_a_cpu_usage_counter_per_thread(tmp_path):
    path = _write(tmp_path / "e.pytrace", {1: _spinner(), 2: _waiter()}, ends={1: SPIN_MS * MS + 5})
    out = _export(path, "perfetto", tmp_path / "t.pftrace")
    counters = {}
    tracks, _procs, slices, _inst, _n, _b = read_trace(str(out), counters)
    by_tid = {tid: uuid for uuid, (_pid, tid, _name) in tracks.items()}
    assert len(counters) == 2
    got = {}
    for uuid, (name, parent, values) in counters.items():
        assert name == "CPU usage" and parent in tracks           # under its thread's track
        got[tracks[parent][1]] = values
    t0 = 10**12
    spin, wait = got[501], got[502]
    # a step per interval between two records, set at its start: 0, 1, ... ms
    assert [ts - t0 for ts, _v in wait] == [i * MS for i in range(WAIT_MS)]
    assert all(v == pytest.approx(0.01) for _ts, v in wait)
    # the spinner: ~1 all along, then 0 from its ThreadEnd on
    assert [ts - t0 for ts, _v in spin] == [i * MS for i in range(SPIN_MS)] + [SPIN_MS * MS + 5]
    assert all(v == pytest.approx(1.0) for _ts, v in spin[:-1]) and spin[-1][1] == 0
    # the slices are the ones of the stream without CpuTime records
    plain = _export(_write(tmp_path / "p.pytrace", {1: _spinner(False), 2: _waiter(False)},
                           ends={1: SPIN_MS * MS + 5}), "perfetto", tmp_path / "p.pftrace")
    counters_plain = {}
    tracks2, _p2, slices2, inst2, _n2, _b2 = read_trace(str(plain), counters_plain)
    assert not counters_plain
    assert sorted(map(tuple, (s[:5] for t in slices.values() for s in t))) == \
        sorted(map(tuple, (s[:5] for t in slices2.values() for s in t)))
    assert {by_tid[501], by_tid[502]} <= set(slices)


def test_chrome_has_a_counter_per_thread_and_the_same_slices(tmp_path):
    path = _write(tmp_path / "e.pytrace", {1: _spinner(), 2: _waiter()})
    doc = json.load(open(_export(path, "chrome", tmp_path / "t.json")))
    plain = json.load(open(_export(_write(tmp_path / "p.pytrace", {1: _spinner(False), 2: _waiter(False)}),
                                   "chrome", tmp_path / "p.json")))
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [e for e in doc["traceEvents"] if e["ph"] != "C"] == plain["traceEvents"]
    by_name = {}
    for e in counters:
        by_name.setdefault(e["name"], []).append(e["args"]["cpu"])
    assert set(by_name) == {"CPU usage (thread 1)", "CPU usage (thread 2)"}
    assert len(by_name["CPU usage (thread 1)"]) == SPIN_MS
    assert all(v == pytest.approx(1.0) for v in by_name["CPU usage (thread 1)"])
    assert all(v == pytest.approx(0.01) for v in by_name["CPU usage (thread 2)"])


def test_speedscope_is_unchanged_by_cpu_records(tmp_path):
    a = _export(_write(tmp_path / "e.pytrace", {1: _spinner(), 2: _waiter()}), "speedscope", tmp_path / "a.json")
    b = _export(_write(tmp_path / "p.pytrace", {1: _spinner(False), 2: _waiter(False)}), "speedscope",
                tmp_path / "b.json")
    assert json.load(open(a)) == json.load(open(b))


def _export(path, fmt, out, *extra):
    assert export_main([str(path), "--format", fmt, "-o", str(out), *extra]) == 0
    return out


def test_a_real_job_with_drops_leaves_every_gap_out_and_counts_it(tmp_path):
    """A job recorded with a small ring and the drop policy: every gap's events are counted
    on the <not observed> time (the count the export prints is the gaps' Lost records),
    and pstats' self times plus that time are the thread time collapsed shows, line by line."""
    import re
    import subprocess
    from helpers import PY
    (tmp_path / "busy.py").write_text("def f(n):\n    return n if n < 2 else f(n-1) + f(n-2)\n"
                                      "for _ in range(20):\n    f(18)\n")
    path = tmp_path / "d.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(path), "--policy", "drop", "--ring-size",
                        "0.125", "--", PY, "busy.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res, err = export(str(path), "pstats", str(tmp_path / "d.pstats"))
    assert err is None and res.lost_events > 0
    assert res.unobserved_lost == res.lost_events + res.lost_no_ring
    assert res.unobserved_ns > 0
    e = subprocess.run([PY, "-m", "pytrace", "export", str(path), "-f", "pstats", "-o", str(tmp_path / "e.pstats")],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode == 0, e.stderr
    said = re.search(r"not observed: \S+ \S+ of thread time \((\d+) events lost", e.stderr)
    assert said and int(said.group(1)) == res.lost_events, e.stderr
    total_tt = sum(v[2] for v in pstats.Stats(str(tmp_path / "d.pstats")).stats.values())
    folded = tmp_path / "d.folded"
    assert export_main([str(path), "-f", "collapsed", "--max-depth", "0", "-o", str(folded)]) == 0
    lines = [ln.rstrip("\n").rpartition(" ") for ln in open(folded)]
    unobserved = sum(int(w) for s, _, w in lines if s == "<not observed>")
    observed = sum(int(w) for s, _, w in lines if s != "<not observed>")
    assert unobserved == res.unobserved_ns
    assert abs(observed - total_tt * 1e9) <= len(lines) + 1000      # each line rounds to a ns once
