"""Ground truth: the call tree rebuilt from the live stream equals, edge by edge with call
counts, the tree of the pure-Python reference tracer, for every corpus program.

Each program is run twice: tracing itself with pytrace.start(policy="wait") while a
separate reader process (drain.py) drains its segment live, and under reftracer.py.
Only the subtrees below the program's own root functions are compared (interpreter
startup and the harness are outside them).
"""

import sys

import pytest

from helpers import diff_edges, expected_hook, rooted_edges, run_ref, run_traced

PROGRAMS = ["recursion", "generators", "async_tasks", "exceptions", "ccalls", "threads",
            "forking"]
# Every program with c_calls=False too: on 3.11 that runs on another hook (the
# frame-evaluation adapter) than with C calls (PyEval_SetProfile).
C_CALLS_OFF = PROGRAMS


def _check_process(traced, ref, role, c_calls):
    assert "drain_err" not in traced, traced["drain_err"]
    assert "trace" in traced, "the reader wrote no result for the %s process" % role
    out = traced["trace"]
    assert out["finished"] or out["states"], "reader ended without seeing the producer stop"
    counters = traced["counters"]
    assert counters["hook"] == expected_hook(c_calls)
    # policy wait: nothing dropped, and the reader got every event the producer wrote
    assert counters["events_dropped"] == 0
    assert counters["hook_errors"] == 0, counters["first_error"]
    assert out["events_read"] == counters["events_written"]
    assert out["gaps"] == 0 and out["tree"]["lost"] == 0
    got = rooted_edges(out["tree"], traced["roots"])
    want = rooted_edges(ref["ref"], ref["roots"])
    assert want, "the reference tree has nothing below %s" % ref["roots"]
    problems = diff_edges(got, want)
    assert not problems, "%s process: call trees differ:\n  %s" % (role, "\n  ".join(problems))


CASES = ([pytest.param(p, True, id="%s-c_calls" % p) for p in PROGRAMS]
         + [pytest.param(p, False, id="%s-no_c_calls" % p) for p in C_CALLS_OFF])


@pytest.mark.parametrize("program, c_calls", CASES)
def test_stream_tree_equals_reference_tree(program, c_calls, tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "r").mkdir()
    traced = run_traced(program, tmp_path / "t", c_calls=c_calls)
    assert traced.returncode == 0, traced.stderr[-3000:]
    ref = run_ref(program, tmp_path / "r", c_calls=c_calls)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert traced.stdout == ref.stdout            # same program, same result
    roles = {p["role"] for p in ref.procs.values()}
    assert roles == {p["role"] for p in traced.procs.values()}
    for role in sorted(roles):
        _check_process(traced.by_role(role), ref.by_role(role), role, c_calls)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the reference has one hook before 3.12")
@pytest.mark.parametrize("program, c_calls", CASES)
def test_reference_hooks_agree(program, c_calls, tmp_path):
    """The ground truth itself: on 3.12+ the reference tracer reads sys.monitoring, the hook
    pytrace uses. Each Python version may change what that reports (3.14 renumbered the
    events, for one); CPython's sys.setprofile, which it builds from the same events with
    its own rules, must give the reference the same tree for every corpus program."""
    (tmp_path / "m").mkdir()
    (tmp_path / "p").mkdir()
    mon = run_ref(program, tmp_path / "m", c_calls=c_calls)
    assert mon.returncode == 0, mon.stderr[-3000:]
    prof = run_ref(program, tmp_path / "p", c_calls=c_calls, setprofile=True)
    assert prof.returncode == 0, prof.stderr[-3000:]
    assert mon.stdout == prof.stdout
    roles = {p["role"] for p in mon.procs.values()}
    assert roles == {p["role"] for p in prof.procs.values()}
    for role in sorted(roles):
        m, p = mon.by_role(role), prof.by_role(role)
        want = rooted_edges(m["ref"], m["roots"])
        assert want, "the reference tree has nothing below %s" % m["roots"]
        problems = diff_edges(rooted_edges(p["ref"], p["roots"]), want,
                              names=("sys.setprofile", "sys.monitoring"))
        assert not problems, "%s process: the reference's trees differ:\n  %s" % (
            role, "\n  ".join(problems))


def test_fork_child_traces_into_its_own_segment(tmp_path):
    run = run_traced("forking", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    parent, child = run.by_role("main"), run.by_role("child")
    p_info, c_info = parent["trace"]["process"], child["trace"]["process"]
    assert p_info["segment"] != c_info["segment"]
    assert c_info["ppid"] == p_info["pid"] != c_info["pid"]
    assert "-%d-" % c_info["pid"] in c_info["segment"]
    assert child["trace"]["events_read"] == child["counters"]["events_written"] > 0
