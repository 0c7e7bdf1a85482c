"""What an export writes is bounded, and an export of damaged or big input says so:

- collapsed stacks are cut at --max-depth frames (a deep recursion wrote a line per level,
  each as long as its depth: 3 GB from a 249 KB recording), what ran below under a
  "[deeper frames]" line, counted on stderr;
- no format writes past --max-size (default 1 GiB): one line, nothing left;
- a full disk: one line naming the output, nothing left;
- a truncated recording: every format reads everything before the damage (the same events)
  and says where it is, the HTML report on the page too;
- chrome, speedscope and perfetto take --from/--to and --min-duration, and count what they
  leave out;
- the HTML report of thousands of threads gives a view of its own to the busiest only (a
  view per thread was a query over the whole tree per thread: quadratic);
- pstats' header time of a multi-process job is said for what it is.

Recordings are real (`pytrace record` of small jobs) or crafted (support/synthetic.py)
where the shape matters (known durations, thousands of threads)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import PY
from pftrace_reader import check_nesting, read_trace
import synthetic as syn
from pytrace.reader import EventKind, SymbolKind
from pytrace.recording import HEADER_BYTES, RecordingWriter

CALL, RET, MARK = int(EventKind.Call), int(EventKind.Return), int(EventKind.Mark)

DEEP_JOB = """
import sys
sys.setrecursionlimit(10000)
def rec(n):
    if n:
        return rec(n - 1)
    s = 0
    for i in range(2000):
        s += i
    return s
for _ in range(3):
    rec(%d)
"""

SUITE_JOB = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def step(i):
    return sorted(str(fib(i % 12)) for _ in range(3))
for i in range(3000):
    step(i)
print("done")
"""


def _record(tmp_path, name, source):
    job = tmp_path / (name + ".py")
    job.write_text(source)
    rec = tmp_path / (name + ".pytrace")
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", str(job)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return rec


def _export(rec, fmt, out, *extra, timeout=120):
    return subprocess.run([PY, "-m", "pytrace", "export", str(rec), "-f", fmt, "-o", str(out)] + list(extra),
                          capture_output=True, text=True, timeout=timeout)


def _folded(path):
    stacks = {}
    with open(path) as f:
        for line in f:
            k, v = line.rstrip("\n").rsplit(" ", 1)
            stacks[k] = stacks.get(k, 0) + int(v)
    return stacks


@pytest.fixture(scope="module")
def deep_recording(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("deep"), "deep", DEEP_JOB % 3000)


def test_collapsed_deep_recursion_is_cut_at_max_depth(deep_recording, tmp_path):
    """A real 3,000-deep recursion: by default its stacks are cut at 256 frames, one
    '[deeper frames]' line holds what ran below, stderr says how many stacks were cut and
    how deep the deepest was; the weights add up to those of the whole stacks."""
    cut, whole = tmp_path / "cut.folded", tmp_path / "whole.folded"
    r = _export(deep_recording, "collapsed", cut)
    assert r.returncode == 0, r.stderr
    said = [l for l in r.stderr.splitlines() if "deeper than 256 frames" in l]
    assert len(said) == 1, r.stderr
    assert re.search(r"the deepest: 300[0-9]\)", said[0]), said[0]
    r = _export(deep_recording, "collapsed", whole, "--max-depth", "0")
    assert r.returncode == 0, r.stderr
    assert "deeper than" not in r.stderr
    a, b = _folded(cut), _folded(whole)
    assert max(k.count(";") for k in a) <= 256          # 256 frames and the marker
    marked = [k for k in a if k.endswith(";[deeper frames]")]
    assert marked and all(k.count(";") == 256 for k in marked)
    assert sum(a.values()) == sum(b.values())           # nothing lost, only folded
    assert max(k.count(";") for k in b) >= 3000
    # the whole stacks are quadratic in the depth; the cut ones are not
    assert cut.stat().st_size * 10 < whole.stat().st_size, (cut.stat().st_size, whole.stat().st_size)


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
@pytest.mark.parametrize("fmt", ["collapsed", "chrome", "html"])
def test_export_refuses_to_write_past_max_size(deep_recording, tmp_path, fmt):
    """Past --max-size the export stops: one line with the size and how to lift it, exit
    1, no output and no temporary file beside it."""
    out = tmp_path / ("out." + fmt)
    r = _export(deep_recording, fmt, out, "--max-size", "20K", "--max-depth", "0")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "larger than 20 KiB" in lines[0] and "--max-size" in lines[0] and str(out) in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
    # and it is written when asked for
    r = _export(deep_recording, fmt, out, "--max-size", "0", "--max-depth", "0")
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 20 << 10


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_sizes_are_said_in_digits_never_an_exponent(deep_recording, tmp_path):
    """A size of 1000 units or more is said in digits: --max-size 1000K said "larger than
    1e+03 KiB" (and the viewer warning "1.02e+03 MiB" for a 1017 MiB chrome file)."""
    out = tmp_path / "out.json"
    r = _export(deep_recording, "chrome", out, "--max-size", "1000K", "--max-depth", "0")
    assert r.returncode == 1, r.stderr          # its chrome export is over 1000 KiB
    assert "larger than 1000 KiB;" in r.stderr, r.stderr
    assert "e+0" not in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to mount a small tmpfs")
@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
@pytest.mark.parametrize("fmt", ["chrome", "speedscope", "html"])
def test_export_to_a_full_disk_names_the_file(deep_recording, tmp_path, fmt):
    """A disk that fills during the export: one line naming the output and the cause,
    exit 1, nothing left on the disk (it printed only "[Errno 28] ...")."""
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / ("out." + fmt)
    inner = ("mount -t tmpfs -o size=64k tmpfs %s && %s -m pytrace export %s -f %s -o %s; "
             "rc=$?; ls -A %s; exit $rc") % (disk, PY, deep_recording, fmt, out, disk)
    r = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0] == ("pytrace export: writing %s failed: No space left on device; nothing written "
                        "(the partial file was removed)" % out), lines[0]
    assert r.stdout.strip() == "", "left on the full disk: %r" % r.stdout


def _message_offsets(path):
    with open(path, "rb") as f:
        data = f.read()
    off, out = HEADER_BYTES, []
    while off + 4 <= len(data):
        n = int.from_bytes(data[off:off + 4], "little")
        out.append(off)
        off += 4 + n
    return out


@pytest.fixture(scope="module")
def suite_recording(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("suite"), "suite", SUITE_JOB)


ALL_FORMATS = ("pstats", "collapsed", "chrome", "speedscope", "perfetto", "html")


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
@pytest.mark.parametrize("messages", [40, 300])
def test_truncated_recording_every_format_reads_up_to_the_damage(suite_recording, tmp_path, messages):
    """A recording cut inside a message (as `head -c` cuts it): every format reads the
    same events, everything before the cut, and says where the damage is in one line;
    the HTML report shows it on the page. (The report lost up to a batch of 256 messages
    before the damage: 0 events where pstats read 54,012, and said nothing.)"""
    offsets = _message_offsets(suite_recording)
    assert len(offsets) > messages + 1
    cut_at = offsets[messages] + 10                 # 10 bytes into message `messages`
    cut = tmp_path / "cut.pytrace"
    with open(suite_recording, "rb") as f:
        cut.write_bytes(f.read(cut_at))
    events = {}
    for fmt in ALL_FORMATS:
        out = tmp_path / ("out." + fmt)
        r = _export(cut, fmt, out)
        assert r.returncode == 1, (fmt, r.stderr)
        damage = [l for l in r.stderr.splitlines() if "damaged at byte offset %d" % offsets[messages] in l]
        assert len(damage) == 1, (fmt, r.stderr)
        m = re.search(r"pytrace export: (\d+) events", r.stderr)
        events[fmt] = int(m.group(1))
        assert out.exists(), fmt
    assert len(set(events.values())) == 1 and events["pstats"] > 0, events
    page = (tmp_path / "out.html").read_text()
    m = re.search(r'"damage": ?"(damaged at byte offset (\d+)[^"]*)"', page)
    assert m and int(m.group(2)) == offsets[messages], "the report does not say it is damaged"


def _timed_recording(path):
    """One thread: main [0, 100 ms] calling 50 short calls of 10 us (each with a 2 us
    callee) from 0 to 50 ms and one long call of 5 ms at 60 ms, with a mark at 62 ms
    inside it. Ticks are ns."""
    ev = [(0, 1, CALL)]
    t = 1000
    for _ in range(50):
        ev += [(t, 2, CALL), (t + 2000, 4, CALL), (t + 4000, 4, RET), (t + 10000, 2, RET)]
        t += 1_000_000
    ev += [(60_000_000, 3, CALL), (62_000_000, 5, MARK), (65_000_000, 3, RET), (100_000_000, 1, RET)]
    with RecordingWriter(str(path), lossless=True) as w:
        w.append(syn.process_info(pid=777))
        for sid, name in ((1, "main"), (2, "short"), (3, "long"), (4, "tiny")):
            w.append(syn.symbol(sid, name, "t.py", sid, kind=0, profile_name=name))
        w.append(syn.symbol(5, "checkpoint", "", 0, kind=int(SymbolKind.Label)))
        w.append(syn.thread_start(1, ticks=0))
        w.append(syn.event_chunk(1, ev))
        w.append(syn.thread_end(1, 100_000_001, events_written=len(ev)))
        w.append(syn.producer_status(state=3, events_written=len(ev)))


def _names_per_format(path, fmt):
    if fmt == "chrome":
        d = json.loads(path.read_text())
        return sorted(e["name"] for e in d["traceEvents"] if e.get("ph") == "X")
    if fmt == "speedscope":
        d = json.loads(path.read_text())
        frames = d["shared"]["frames"]
        out, stack, last = [], [], -1
        for ev in d["profiles"][0]["events"]:
            assert ev["at"] >= last          # speedscope's rule: events in time order
            last = ev["at"]
            if ev["type"] == "O":
                stack.append(ev["frame"])
            else:
                assert stack.pop() == ev["frame"]      # they nest
                out.append(frames[ev["frame"]]["name"])
        assert not stack
        return sorted(out)
    _tracks, _procs, slices, _inst, _n, _b = read_trace(str(path))
    names = []
    for track in slices.values():
        check_nesting(track)
        names += [s[0] for s in track]
    return sorted(names)


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
@pytest.mark.parametrize("fmt", ["chrome", "speedscope", "perfetto"])
def test_timeline_formats_take_a_time_range_and_a_min_duration(tmp_path, fmt):
    """--min-duration leaves out the shorter calls (callees with them), --from/--to the
    calls that do not overlap the range; what is left nests, and stderr counts the rest."""
    rec = tmp_path / "timed.pytrace"
    _timed_recording(rec)
    out = tmp_path / ("out." + fmt)
    r = _export(rec, fmt, out)
    assert r.returncode == 0, r.stderr
    assert len(_names_per_format(out, fmt)) == 102
    r = _export(rec, fmt, out, "--min-duration", "1ms")
    assert r.returncode == 0, r.stderr
    assert _names_per_format(out, fmt) == ["long", "main"]
    assert "pytrace export: 100 calls left out (--min-duration 1ms)" in r.stderr, r.stderr
    # 20.5 ms to 30 ms overlaps short calls 20..29 (each at i ms + 1 us, 10 us long) and main
    r = _export(rec, fmt, out, "--from", "0.0205", "--to", "30ms")
    assert r.returncode == 0, r.stderr
    assert _names_per_format(out, fmt) == ["main"] + ["short"] * 9 + ["tiny"] * 9
    assert "pytrace export: 83 calls left out (--from, --to)" in r.stderr, r.stderr


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_chrome_time_filter_keeps_a_span_that_outlives_its_frame(tmp_path):
    """A span begun in a function that returns before the span ends goes on under the
    caller (viewer/core/walk.h: the same activation, continued); chrome with --min-duration
    writes both of its pieces (it read the symbol with the continued flag still set in its
    index: a crash)."""
    rec = tmp_path / "span.pytrace"
    span_b, span_e = int(EventKind.SpanBegin), int(EventKind.SpanEnd)
    ms = 1_000_000
    ev = [(0, 1, CALL), (1 * ms, 2, CALL), (2 * ms, 3, span_b), (4 * ms, 2, RET), (10 * ms, 3, span_e),
          (20 * ms, 1, RET)]
    with RecordingWriter(str(rec), lossless=True) as w:
        w.append(syn.process_info(pid=778))
        for sid, name in ((1, "main"), (2, "begin")):
            w.append(syn.symbol(sid, name, "t.py", sid, kind=0, profile_name=name))
        w.append(syn.symbol(3, "load", "", 0, kind=int(SymbolKind.Label)))
        w.append(syn.thread_start(1, ticks=0))
        w.append(syn.event_chunk(1, ev))
        w.append(syn.thread_end(1, 20 * ms + 1, events_written=len(ev)))
        w.append(syn.producer_status(state=3, events_written=len(ev)))
    out = tmp_path / "out.json"
    r = _export(rec, "chrome", out, "--min-duration", "1ms")
    assert r.returncode == 0, r.stderr
    slices = sorted((e["name"], e["ts"], e["dur"]) for e in json.loads(out.read_text())["traceEvents"]
                    if e.get("ph") == "X")
    t0 = min(ts for _n, ts, _d in slices)
    assert [(n, ts - t0, d) for n, ts, d in slices] == [
        ("begin", 1000.0, 3000.0), ("load", 2000.0, 2000.0), ("load", 4000.0, 6000.0), ("main", 0.0, 20000.0)]


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_a_range_past_the_recording_says_how_long_the_recording_is(tmp_path):
    """--from past the recording's end leaves out every call: stderr says so and gives the
    recording's span (it said only "N calls left out", and the output was empty)."""
    rec = tmp_path / "timed.pytrace"
    _timed_recording(rec)
    out = tmp_path / "out.json"
    r = _export(rec, "chrome", out, "--from", "100")
    assert r.returncode == 0, r.stderr
    assert _names_per_format(out, "chrome") == []
    m = re.search(r"pytrace export: 102 calls left out \(--from\); the recording spans (\d+\.\d{3}) s", r.stderr)
    assert m and 0 < float(m.group(1)) < 100, r.stderr
    r = _export(rec, "chrome", out, "--min-duration", "1ms")       # no range: no span said
    assert "calls left out (--min-duration 1ms)\n" in r.stderr, r.stderr


@pytest.mark.parametrize("opt", [("--from", "inf"), ("--from", "1e308"), ("--to", "1e10"),
                                 ("--min-duration", "1e400"), ("--max-size", "inf")])
@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_absurd_times_and_sizes_are_refused_in_one_line(tmp_path, opt):
    """A time past what nanoseconds in 64 bits hold (inf, 1e308, 1e10 s) became an
    OverflowError traceback; an infinite --max-size too. One line, exit 2, no file."""
    rec = tmp_path / "timed.pytrace"
    _timed_recording(rec)
    out = tmp_path / "out.json"
    r = _export(rec, "chrome", out, *opt)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and opt[0] in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_time_options_are_refused_for_other_formats(tmp_path):
    rec = tmp_path / "timed.pytrace"
    _timed_recording(rec)
    r = _export(rec, "pstats", tmp_path / "out.pstats", "--min-duration", "1ms")
    assert r.returncode == 2 and "--min-duration are for --format chrome" in r.stderr, r.stderr
    assert not (tmp_path / "out.pstats").exists()


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_html_report_of_many_threads_has_views_of_the_busiest(tmp_path):
    """3,000 short threads: the report holds a view of its own for the 100 busiest threads
    and says how many threads it has no view of (each view was a query over every thread's
    calls: 20,000 threads took 236 s); the all-threads view still counts every call."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
    try:
        import export_bench
    finally:
        sys.path.pop(0)
    rec = tmp_path / "threads.pytrace"
    export_bench.write_threads_recording(str(rec), 3000)
    out = tmp_path / "report.html"
    r = _export(rec, "html", out, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "18000 events, 3000 threads" in r.stderr, r.stderr
    page = out.read_text()
    m = re.search(r'"threads_without_view": ?(\d+)', page)
    assert m and int(m.group(1)) == 2900, "the report does not say which threads have no view"
    start = page.index('"views"')
    views = json.JSONDecoder().raw_decode(page[page.index("{", start):])[0]
    assert len(views) == 101 and "0" in views
    calls = {n[2]: n[3] for n in views["0"]["nodes"] if n[2] >= 0}
    assert calls == {1: 3000, 2: 3000, 3: 3000}


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_pstats_header_time_of_several_processes_is_said(tmp_path):
    """A pool of 3 forked workers: pstats' header time adds up every process's and
    thread's self time (73.8 s for a 14 s job); export says so beside the job's span."""
    rec = _record(tmp_path, "pool", """
import multiprocessing as mp, time
def spin(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        pass
    return s
if __name__ == "__main__":
    with mp.get_context("fork").Pool(3) as p:
        print(p.map(spin, [0.5, 0.5, 0.5]))
""")
    out = tmp_path / "pool.pstats"
    r = _export(rec, "pstats", out)
    assert r.returncode == 0, r.stderr
    m = re.search(r"pstats' header time \(([\d.]+) s\) is the self time of every function added up over "
                  r"\d+ threads of 4 processes; the job ran ([\d.]+) s", r.stderr)
    assert m, r.stderr
    import pstats
    total, span = float(m.group(1)), float(m.group(2))
    assert abs(pstats.Stats(str(out)).total_tt - total) < 0.001
    assert 0.5 < span < total


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_report_in_chromium_shows_damage_and_lists_threads_with_views(suite_recording, tmp_path):
    """In a real browser: the report of a truncated recording says DAMAGED with the offset
    in its status line; the report of 3,000 threads lists the 100 it has views of (and
    all threads), says how many have none, and draws every thread's timeline row."""
    import webkit
    if webkit.CHROMIUM is None or webkit.sync_playwright is None:
        pytest.skip("needs Debian's chromium and playwright")
    offsets = _message_offsets(suite_recording)
    cut = tmp_path / "cut.pytrace"
    with open(suite_recording, "rb") as f:
        cut.write_bytes(f.read(offsets[40] + 10))
    damaged = tmp_path / "damaged.html"
    assert _export(cut, "html", damaged).returncode == 1
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
    try:
        import export_bench
    finally:
        sys.path.pop(0)
    rec = tmp_path / "threads.pytrace"
    export_bench.write_threads_recording(str(rec), 3000)
    many = tmp_path / "threads.html"
    assert _export(rec, "html", many, timeout=300).returncode == 0
    with webkit.sync_playwright() as p:
        b = p.chromium.launch(executable_path=webkit.CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            errors = []
            _context, page = webkit._page(b, errors)
            page.goto("file://" + str(damaged))
            webkit._wait(page, "window.pytrace && pytrace.state.rows.size > 0")
            status = page.inner_text("#status")
            assert "DAMAGED RECORDING: damaged at byte offset %d" % offsets[40] in status, status
            page.goto("file://" + str(many))
            webkit._wait(page, "window.pytrace && pytrace.state.rows.size > 0")
            assert page.evaluate("document.querySelectorAll('#thread option').length") == 101
            status = page.inner_text("#status")
            assert "2900 threads with few events have no view of their own" in status, status
            assert page.evaluate("pytrace.state.threads.length") == 3000
            assert not errors, errors
        finally:
            b.close()


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_collapsed_writes_one_line_per_distinct_stack(tmp_path):
    """Five code objects of one function (exec'd from one source, as dataclasses and
    namedtuples make their methods) have one label: collapsed writes one line per distinct
    stack, their weights added up (it wrote a line per symbol: duplicates, and a test
    suite's 83,334 lines held 82,975 distinct stacks)."""
    rec = _record(tmp_path, "execd", """
SRC = "def f(n):\\n    return sum(range(n))\\n"
def make():
    ns = {}
    exec(SRC, ns)
    return ns["f"]
for _ in range(5):
    make()(200000)
""")
    out = tmp_path / "out.folded"
    r = _export(rec, "collapsed", out, "--weight", "calls")
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    stacks = [l.rsplit(" ", 1)[0] for l in lines]
    assert len(stacks) == len(set(stacks)), [s for s in stacks if stacks.count(s) > 1][:3]
    f_lines = [l for l in lines if l.rsplit(" ", 1)[0].endswith(";f (<string>:1)")]
    assert len(f_lines) == 1 and f_lines[0].endswith(" 5"), f_lines


@pytest.mark.reading_side   # the exporters' bounds (conftest.py)
def test_perfetto_filtered_call_keeps_its_start_under_a_mark(tmp_path):
    """--min-duration defers a call's slice until it is known to last long enough; a mark
    inside it waits too, so the slice starts where the call did (the track's clock only
    goes forward: the mark written first moved the start of 'long' from 60 to 62 ms)."""
    rec = tmp_path / "timed.pytrace"
    _timed_recording(rec)
    out = tmp_path / "out.pftrace"
    r = _export(rec, "perfetto", out, "--min-duration", "1ms")
    assert r.returncode == 0, r.stderr
    _tracks, _procs, slices, instants, _n, _b = read_trace(str(out))
    (track,) = [t for t in slices.values() if t]
    check_nesting(track)
    main = [s for s in track if s[0] == "main"][0]
    long_ = [s for s in track if s[0] == "long"][0]
    assert long_[3] - main[3] == 60_000_000 and long_[4] - long_[3] == 5_000_000, (main, long_)
    marks = [i for t in instants.values() for i in t if i[0] == "checkpoint"]
    assert len(marks) == 1 and marks[0][1] - main[3] == 62_000_000, marks
