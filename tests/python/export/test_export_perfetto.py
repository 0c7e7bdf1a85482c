"""`pytrace export --format perfetto`: Perfetto's own protobuf trace, read back with the
bindings the `perfetto` package ships (pftrace_reader.py: a plain protobuf parse that
applies the trace processor's TrackEvent rules and fails on anything they refuse); then:
every slice nests on its thread's track, slices per function equal the pstats
export's call counts (scripted stream, random streams, corpus recordings), threads
carry pid, tid and name, marks and gaps are instants and the gaps say how many events
were lost."""

import collections
import os
import subprocess

import pytest

from helpers import CORPUS, PY
from pytrace.export import export as export_api
from pytrace.export import main as export_main
from streamgen import recording as random_recording
from exportcheck import _pstats
from scripted import EXPECTED_CALLS, EXPECTED_SPANS
from scripted import recording  # noqa: F401  (the scripted recording fixture)
from pftrace_reader import check_nesting, read_trace, slice_counts


def export_pftrace(path, out, *extra):
    assert export_main([str(path), "--format", "perfetto", "-o", str(out), *extra]) == 0
    return out


def test_perfetto_scripted_recording(recording, tmp_path):  # noqa: F811
    path, _ = recording
    out = export_pftrace(path, tmp_path / "t.pftrace")
    tracks, processes, slices, instants, npk, batches = read_trace(out)
    assert batches >= 1                                         # compressed by default
    assert [pid for pid, _name in processes.values()] == [4242]
    threads = {tid: (pid, name) for pid, tid, name in tracks.values()}
    assert threads == {100: (4242, "MainThread"), 101: (4242, "worker-1")}
    counts = collections.Counter()
    for track in slices.values():
        for name, *_rest, continued in track:
            counts[name] += not continued
    assert dict(counts) == EXPECTED_CALLS | EXPECTED_SPANS
    for uuid, track in slices.items():
        check_nesting(track)
    by_tid = {tracks[u][1]: v for u, v in instants.items()}
    names = [(n, a) for n, _ts, a in by_tid[100]]
    assert ("epoch 1", {}) in names
    assert ("lost 5 events", {"lost_events": 5}) in names
    # file:line of Python functions is the interned source location
    main = {(f, l) for track in slices.values() for n, f, l, *_ in track if n == "main"}
    assert main == {("app.py", 3)}
    # timestamps are CLOCK_MONOTONIC ns: the recording's base is 10**12 ns at tick 0
    assert min(s[3] for track in slices.values() for s in track) == 10**12
    # at most 5 bytes an event even on this tiny trace is not the point; the plain
    # packets are the same trace
    plain = export_pftrace(path, tmp_path / "p.pftrace", "--uncompressed")
    t2, p2, s2, i2, npk2, batches2 = read_trace(plain)
    assert batches2 == 0 and (t2, p2, s2, i2, npk2) == (tracks, processes, slices, instants, npk)


@pytest.mark.parametrize("seed", range(8))
def test_perfetto_slices_equal_pstats_calls_on_random_streams(seed, tmp_path):
    path = tmp_path / "r.pytrace"
    random_recording(path, seed)
    out = tmp_path / "r.pftrace"
    result, error = export_api(str(path), "perfetto", str(out))
    assert error is None
    tracks, _procs, slices, instants, _n, _b = read_trace(out)
    for track in slices.values():
        check_nesting(track)
    calls = {k: v[0] for k, v in _pstats(path, tmp_path, None).items()}
    assert slice_counts(slices) == calls
    # every gap is an instant that says how many events were lost, and they add up
    lost = [a["lost_events"] for track in instants.values() for n, _ts, a in track if n.startswith("lost ")]
    assert all(n == "lost %d events" % a["lost_events"] for track in instants.values()
               for n, _ts, a in track if n.startswith("lost "))
    assert sum(lost) == result.lost_events and lost, "the random streams have gaps"
    assert len({tid for _pid, tid, _name in tracks.values()}) == len(tracks)


@pytest.mark.parametrize("program", ["recursion.py", "generators.py", "spans.py", "threads.py", "exceptions.py"])
def test_perfetto_slices_equal_pstats_calls_on_corpus(program, tmp_path):
    src = os.path.join(CORPUS, program)
    path = tmp_path / "c.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(path), "--", PY, src], capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert os.path.exists(path), r.stderr
    out = export_pftrace(path, tmp_path / "c.pftrace")
    tracks, processes, slices, _instants, _n, _b = read_trace(out)
    for track in slices.values():
        check_nesting(track)
    calls = {k: v[0] for k, v in _pstats(path, tmp_path, None).items()}
    assert slice_counts(slices) == calls
    (pid, pname), = processes.values()
    assert pid > 0 and program in pname
    assert all(p == pid and tid > 0 and name for p, tid, name in tracks.values())
    assert any(name == "MainThread" and tid == pid for _p, tid, name in tracks.values())
    if program == "threads.py":
        assert len(tracks) > 1


def test_perfetto_json_alias_is_chrome_with_a_note(recording, tmp_path, capsys):  # noqa: F811
    import json
    path, _ = recording
    assert export_main([str(path), "--format", "perfetto-json", "-o", str(tmp_path / "t.json")]) == 0
    assert "perfetto-json is now called chrome" in capsys.readouterr().err
    assert json.load(open(tmp_path / "t.json"))["traceEvents"]
    # -o x.pftrace picks perfetto; --format perfetto -o x.json says what changed
    assert export_main([str(path), "-o", str(tmp_path / "g.pftrace")]) == 0
    read_trace(tmp_path / "g.pftrace")
    assert export_main([str(path), "-f", "perfetto", "-o", str(tmp_path / "old.json")]) == 0
    assert "use --format chrome for JSON" in capsys.readouterr().err
