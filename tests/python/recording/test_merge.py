"""`pytrace merge`: the recordings of two different runs become one recording of two
processes. Each process keeps its own counts (an export with --pid equals the export of
its own recording), its event chunks stay compressed and keep their process tag through
compression (read back byte for byte), and the processes are placed on one time axis by
their recordings' wall-clock bases."""

import collections
import json
import os
import struct
import subprocess

import pytest

from pytrace.fb.CompressedChunk import CompressedChunk
from pytrace.fb.Message import Message
from pytrace.fb.MessageBody import MessageBody

from helpers import PY

JOB = """
import sys
def leaf(i):
    return i + 1
def work(n):
    return sum(leaf(i) for i in range(n))
work(int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("merge")
    (d / "job.py").write_text(JOB)
    out = []
    for n in (3000, 5000):
        path = d / ("run%d.pytrace" % n)
        r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(path), "--", PY, str(d / "job.py"), str(n)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out.append(path)
    merged = d / "all.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "merge", str(out[0]), str(out[1]), "-o", str(merged)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "2 processes" in r.stderr
    return out, merged, d


def _messages(path):
    from pytrace.recording import RecordingReader
    with RecordingReader(str(path)) as rr:
        return list(rr.messages())


def _events(msgs):
    """Per process: the bytes of every event, in order."""
    out = collections.defaultdict(bytearray)
    for m in msgs:
        if m.type == 5:      # EventChunk
            out[m.process] += m.data[m.events_offset:m.events_offset + 16 * m.count]
    return out


def test_processes_keep_their_events_and_tags_through_compression(runs):
    (a, b), merged, _d = runs
    msgs = _messages(merged)
    infos = [m for m in msgs if m.type == 1]
    assert [m.process for m in infos] == [1, 2]
    assert {m.process for m in msgs} == {1, 2}
    got = _events(msgs)
    assert got[1] == _events(_messages(a))[0] and len(got[1]) > 0
    assert got[2] == _events(_messages(b))[0] and len(got[2]) > 0
    # on file: event chunks are CompressedChunks, each carrying its process (flatc's reader)
    data = open(merged, "rb").read()
    off, tags = 16, collections.Counter()
    while off < len(data):
        (size,) = struct.unpack_from("<I", data, off)
        msg = Message.GetRootAs(data, off + 4)
        if msg.BodyType() == MessageBody.CompressedChunk:
            tags[msg.Process()] += 1
        off += (4 + size + 7) & ~7
    assert tags[1] > 0 and tags[2] > 0 and set(tags) == {1, 2}


def _pstats(path, out, *extra):
    import pstats
    from pytrace.export import main as export_main
    assert export_main([str(path), "-f", "pstats", "-o", str(out), *extra]) == 0
    return {k: v[:4] for k, v in pstats.Stats(str(out)).stats.items()}


def test_each_process_keeps_its_own_counts(runs):
    (a, b), merged, d = runs
    pids = [m.pid for m in _messages(merged) if m.type == 1]
    assert pids[0] != pids[1]
    for path, pid in ((a, pids[0]), (b, pids[1])):
        mine = _pstats(merged, d / "m.pstats", "--pid", str(pid))
        assert mine == _pstats(path, d / "one.pstats")
        leaf = [v for k, v in mine.items() if k[2] == "leaf"]
        assert leaf and leaf[0][1] == (3000 if path == a else 5000)


def test_processes_are_aligned_by_wall_clock(runs):
    (a, b), merged, d = runs
    ia, ib = (_messages(p)[0] for p in (a, b))
    assert ia.base_realtime_ns and ib.base_realtime_ns and ia.base_realtime_ns < ib.base_realtime_ns
    ma, mb = (m for m in _messages(merged) if m.type == 1)
    # one relation between wall clock and the file's time axis for every process
    assert ma.base_realtime_ns - ma.base_monotonic_ns == mb.base_realtime_ns - mb.base_monotonic_ns
    # the earlier run is the reference: its clock is unchanged; the other's ticks are too
    assert (ma.base_monotonic_ns, ma.base_ticks) == (ia.base_monotonic_ns, ia.base_ticks)
    assert mb.base_ticks == ib.base_ticks and mb.ticks_per_second == ib.ticks_per_second
    # in the timeline, run b starts after run a by the time between their wall-clock bases
    from pytrace.export import main as export_main
    out = d / "all.json"
    assert export_main([str(merged), "-f", "chrome", "-o", str(out)]) == 0
    first = {}
    for e in json.load(open(out))["traceEvents"]:
        if e["ph"] == "X":
            first[e["pid"]] = min(first.get(e["pid"], e["ts"]), e["ts"])
    wall = {}
    for info, path in ((ia, a), (ib, b)):
        ticks = min(struct.unpack_from("<Q", m.data, m.events_offset)[0] for m in _messages(path)
                    if m.type == 5 and m.count)
        wall[info.pid] = info.base_realtime_ns + (ticks - info.base_ticks) * 1e9 / info.ticks_per_second
    # the first slice is at or after the first event; their gap agrees within the run's own spread
    gap_timeline = (first[ib.pid] - first[ia.pid]) * 1000
    gap_wall = wall[ib.pid] - wall[ia.pid]
    assert gap_timeline > 0
    assert abs(gap_timeline - gap_wall) < 0.05e9, (gap_timeline, gap_wall)


def test_merge_refuses_its_output_as_input_and_a_non_recording(runs, tmp_path):
    (a, _b), _merged, _d = runs
    junk = tmp_path / "junk.pytrace"
    junk.write_bytes(b"not a recording at all")
    r = subprocess.run([PY, "-m", "pytrace", "merge", str(a), str(junk), "-o", str(tmp_path / "o.pytrace")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "junk.pytrace" in r.stderr
    assert not os.path.exists(tmp_path / "o.pytrace")
    r = subprocess.run([PY, "-m", "pytrace", "merge", str(a), "-o", str(a)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "is one of the inputs" in r.stderr
