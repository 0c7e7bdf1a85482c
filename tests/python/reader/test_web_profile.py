"""pytrace.Profile: the Python API over the C aggregation (viewer/core/agg.h, through
_pytrace.Aggregator). On recordings of the corpus programs it gives the call paths of the
reference calltree (tests/python/support/calltree.py), per thread and merged, and the function
table of pytrace-top (exactly); its window and timeline follow the phases of a real job;
bad input gets one clear error."""

import json
import os
import subprocess

import pytest

import pytrace
from calltree import CallTree, symbol_key
from helpers import CORPUS, PY
from pytrace.recording import RecordingReader
from topkit import TOP


def _record(tmp_path, program, *args):
    src = program if os.path.isabs(program) else os.path.join(CORPUS, program)
    path = tmp_path / (os.path.basename(src) + ".pytrace")
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(path), "--", PY, src] + list(args),
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0 and path.exists(), r.stderr
    return path


def _reference(path):
    tree = CallTree(include_spans=True, frames_count_as_calls=True)
    with RecordingReader(path) as reader:
        for msg in reader.messages():
            tree.feed(msg)
    return tree


@pytest.mark.parametrize("program", ["recursion.py", "generators.py", "threads.py", "exceptions.py",
                                     "spans.py"])
def test_profile_paths_agree_with_reference_calltree(program, tmp_path):
    path = _record(tmp_path, program)
    prof = pytrace.Profile.from_recording(path)
    ref = _reference(path)
    syms = prof.symbols()

    def key(node):
        return symbol_key(syms[node.id])

    def calls(paths):
        return {p: v[0] for p, v in paths.items() if v[0]}

    merged = {p: c for p, c in ref.edges().items() if c}
    assert merged and calls(prof.paths(key=key)) == merged
    threads = prof.threads()
    assert {t.thread for t in threads} == set(ref.threads)
    from calltree import edges_from_rows
    for t in threads:
        want = {p: c for p, c in edges_from_rows(ref.rows(t.thread)).items() if c}
        assert calls(prof.paths(thread=t.thread, key=key)) == want, t
    assert prof.counters()["events"] == ref.events


def _top_rows(path):
    r = subprocess.run([TOP, "--file", str(path), "--once", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["functions"]


@pytest.mark.parametrize("program", ["threads.py", "spans.py"])
def test_profile_functions_equal_pytrace_top(program, tmp_path):
    path = _record(tmp_path, program)
    prof = pytrace.Profile.from_recording(path)
    fields = ("calls", "prim_calls", "self_ns", "total_ns")
    top = sorted((f["name"], f["file"], f["line"]) + tuple(f[k] for k in fields) for f in _top_rows(path)
                 if f["calls"] or f["self_ns"] or f["total_ns"])
    ours = sorted((f.name, f.file, f.line) + tuple(getattr(f, k) for k in fields) for f in prof.functions())
    assert ours and ours == top
    # per thread, the rows add up to the merged ones
    merged = {f.id: f for f in prof.functions()}
    summed = {}
    for t in prof.threads():
        for f in prof.functions(thread=t.thread):
            summed[f.id] = summed.get(f.id, 0) + f.calls
    assert summed == {i: f.calls for i, f in merged.items()}
    # sort and filter
    by_calls = prof.functions(sort="calls")
    assert [f.calls for f in by_calls] == sorted((f.calls for f in by_calls), reverse=True)
    some = by_calls[0].name
    assert all(some.lower() in f.name.lower() for f in prof.functions(filter=some.upper()))
    assert prof.functions(filter="no function has this name") == []


PHASES = r'''
import time

def alpha():
    x = 0
    for i in range(20000):      # no call in the loop: the time is alpha's own
        x += i

def beta():
    x = 0
    for i in range(20000):
        x += i

def phase(fn, seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()

phase(alpha, 1.0)
phase(beta, 1.5)
'''


def test_profile_window_and_timeline_follow_phases(tmp_path):
    src = tmp_path / "phases.py"
    src.write_text(PHASES)
    path = _record(tmp_path, str(src))
    prof = pytrace.Profile.from_recording(path, window=60, slice_seconds=0.1)
    whole = {f.name for f in prof.functions()}
    assert {"alpha", "beta", "phase"} <= whole
    # the last 0.5 s of trace time is all in phase 2 (beta ran for its last 1.5 s)
    last = {f.name: f for f in prof.functions(window=0.5)}
    assert "beta" in last and "alpha" not in last
    tree_names = {n.name for n in prof.tree(window=0.5)}
    assert "beta" in tree_names and "alpha" not in tree_names
    tl = prof.timeline()
    assert tl.slice_ns == 100_000_000
    main_thread = prof.threads()[0].thread
    tops = [c.name for c in tl.cells if c.thread == main_thread and c.busy_ns]
    assert "alpha" in tops and "beta" in tops
    # alpha's slices all come before beta's, except the one slice where the phase changed
    first_beta = tops.index("beta")
    assert "beta" not in tops[:first_beta] and tops[first_beta:].count("alpha") <= 1
    assert tops[-1] == "beta"
    later = prof.timeline(since=tl.last_slice)
    assert later.cells and [c.slice for c in later.cells] == [tl.last_slice] * len(later.cells)
    coarse = prof.timeline(group=5)
    assert coarse.group == 5 and all(c.slice % 5 == 0 for c in coarse.cells)
    # the same ticks; each cell rounds its own ticks to ns once
    fine_busy = sum(c.busy_ns for c in tl.cells)
    assert abs(sum(c.busy_ns for c in coarse.cells) - fine_busy) <= len(tl.cells)


def test_profile_refuses_bad_input_with_one_clear_error():
    prof = pytrace.Profile()
    with pytest.raises(ValueError, match="not a valid pytrace message"):
        prof.feed(b"\x08\x00\x00\x00garbage!")
    assert prof.feed_many([b"\x04\x00\x00\x00abcd", (3, b"\x00" * 3)]) == 2
    assert prof.counters()["refused_messages"] == 3
    with pytest.raises(ValueError, match="window"):
        prof.functions(window=-1)
    with pytest.raises(ValueError, match="sort"):
        prof.functions(sort="nope")
    assert prof.functions() == [] and len(prof.tree()) == 1


def test_tree_min_fraction_leaves_out_exactly_the_small_paths(tmp_path):
    path = _record(tmp_path, "recursion.py")
    prof = pytrace.Profile.from_recording(path)
    full = prof.tree()
    thr = full[0].total_ns * 1e-3
    small = prof.tree(min_fraction=1e-3)

    def paths(nodes):
        out = [()] * len(nodes)
        for n in nodes[1:]:
            out[n.index] = out[n.parent] + ((n.id, n.total_ns, n.calls),)
        return set(out[1:])
    kept = {p for p in paths(full) if all(total >= thr for _id, total, _calls in p)}
    assert len(small) < len(full)
    assert paths(small) == kept
    assert all(n.total_ns >= thr for n in small[1:])
