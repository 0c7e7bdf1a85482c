"""pytrace-top, the pstats export and the collapsed export read a recording with one
set of rules (viewer/core/walk.h), so they agree on every function's calls, primitive
calls, self and total time, exactly: on random valid streams (drops and resyncs, spans
across frames through pytrace.span's helpers, mid-stream starts, recursion, generators,
threads that never end) and on recordings of the corpus programs."""

import os
import subprocess
import sys

import pytest

from exportcheck import _key, _pstats
from helpers import CORPUS, PY
from streamgen import recording as random_recording
from topkit import TOP


def _top(path):
    import json
    r = subprocess.run([TOP, "--file", str(path), "--once", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows, shared = {}, {}
    # Two functions can share a key (every exec'd "<string>" module code at line 1): pstats
    # adds such entries up, as cProfile does, so their rows are added up here too; each row
    # was rounded to ns on its own, so `shared` (rows per key) bounds the rounding.
    for f in doc["functions"]:
        if f["calls"] or f["self_ns"] or f["total_ns"]:
            key = _key(f["name"], f["file"], f["line"])
            row = rows.setdefault(key, [0, 0, 0, 0])
            shared[key] = shared.get(key, 0) + 1
            for i, field in enumerate(("calls", "prim_calls", "self_ns", "total_ns")):
                row[i] += f[field]
    return {k: tuple(v) for k, v in rows.items()}, shared


def _collapsed(path, tmp_path, labels):
    from pytrace.export import main as export_main
    ns_out, calls_out = tmp_path / "n.folded", tmp_path / "c.folded"
    # whole stacks (the default cuts them at 256 frames, and a function's rows need them all)
    assert export_main([str(path), "-f", "collapsed", "--max-depth", "0", "-o", str(ns_out)]) == 0
    assert export_main([str(path), "-f", "collapsed", "--max-depth", "0", "--weight", "calls",
                        "-o", str(calls_out)]) == 0
    rows = {}

    def stacks(p):
        for line in open(p, encoding="utf-8"):
            stack, _, w = line.rstrip("\n").rpartition(" ")
            yield [labels(f) for f in stack.split(";")], int(w)

    lines = {}       # function -> lines its self and total were summed from (rounding bound)
    unobserved = 0   # the <not observed> lines: time nobody saw, in no function (a root's child)
    for frames, w in stacks(calls_out):
        assert UNOBSERVED not in frames, "time nobody saw has no calls"
        r = rows.setdefault(frames[-1], [0, 0, 0, 0])
        r[0] += w
        if frames[-1] not in frames[:-1]:
            r[1] += w
    for frames, w in stacks(ns_out):
        if UNOBSERVED in frames:
            assert frames == [UNOBSERVED], frames
            unobserved += w
            continue
        rows.setdefault(frames[-1], [0, 0, 0, 0])[2] += w
        for f in set(frames):
            rows.setdefault(f, [0, 0, 0, 0])[3] += w
            lines[f] = lines.get(f, 0) + 1
    return {k: tuple(v) for k, v in rows.items() if any(v)}, lines, unobserved


UNOBSERVED = "<not observed>"


def _label(frame):
    """ "f3 (gen.py:30)" -> ("f3", "gen.py", 30); C names and spans as they are."""
    name, sep, where = frame.rpartition(" (")
    if sep and where.endswith(")") and ":" in where:
        file, _, line = where[:-1].rpartition(":")
        if line.isdigit() and int(line) > 0:
            return (name, file, int(line))
    return frame


def _agree(path, tmp_path, exact=True):
    """Calls and primitive calls agree exactly. Times agree exactly in ticks; in ns they
    are exact when a tick is a ns (the random streams), else each tool rounds ticks to ns
    once per number it shows: pstats (float seconds) within 1 ns of pytrace-top, collapsed
    (one rounded integer per stack) within 1 ns per line summed."""
    top, shared = _top(path)
    assert top, "pytrace-top shows no function"
    ps = _pstats(path, tmp_path, top)
    co, lines, unobserved = _collapsed(path, tmp_path, _label)
    # time inside gaps is in no function: pstats and collapsed leave it out of every row
    # (as pytrace-top does), collapsed shows it as one <not observed> line, the time the
    # export reports (what `pytrace export` says on stderr)
    from pytrace.export import export
    for fmt in ("pstats", "collapsed"):
        res, err = export(str(path), fmt, str(tmp_path / ("u." + fmt)), max_depth=0)
        assert err is None
        assert abs(res.unobserved_ns - unobserved) <= 1, (fmt, res.unobserved_ns, unobserved)
        assert res.unobserved_lost >= res.lost_events - res.lost_no_ring
    if exact:
        assert ps == top
        assert co == top
        return top
    assert set(ps) == set(top) == set(co)
    for k, (calls, prim, self_ns, total_ns) in top.items():
        assert ps[k][:2] == co[k][:2] == (calls, prim), k
        rounding = shared.get(k, 1)
        assert abs(ps[k][2] - self_ns) <= rounding and abs(ps[k][3] - total_ns) <= rounding, (k, ps[k], top[k])
        bound = lines.get(k, 0) + rounding
        assert abs(co[k][2] - self_ns) <= bound and abs(co[k][3] - total_ns) <= bound, (k, co[k], top[k])
    return top


@pytest.mark.parametrize("seed", range(16))
def test_top_pstats_collapsed_agree_on_random_streams(seed, tmp_path):
    path = tmp_path / "r.pytrace"
    random_recording(path, seed)
    rows = _agree(path, tmp_path)
    assert any(isinstance(k, str) and k.startswith("s3") for k in rows)   # spans are in the picture


@pytest.mark.parametrize("program", ["recursion.py", "generators.py", "spans.py", "threads.py", "exceptions.py"])
def test_top_pstats_collapsed_agree_on_corpus_recordings(program, tmp_path):
    src = os.path.join(CORPUS, program)
    if not os.path.exists(src):
        pytest.fail("corpus program %s is missing" % program)
    path = tmp_path / "c.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(path), "--", PY, src], capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert os.path.exists(path), r.stderr
    _agree(path, tmp_path, exact=False)
