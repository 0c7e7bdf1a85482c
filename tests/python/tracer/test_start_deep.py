"""Tracing that starts deep inside a program: the frames already running are the roots
of the picture (Frame records), and when they return -- which a hook may not report,
the frame-evaluation hook never does for frames it did not see start -- the next calls
land under their true callers. Checked on the stream a live reader rebuilt, with and
without C calls (on 3.11 these are two different hooks)."""

import pytest

from helpers import expected_hook, qualname_of, rooted_edges, run_traced

OURS = {"outer", "middle", "start_here", "work", "after", "leaf", "early_worker", "waiter",
        "after_wait"}


def _our_paths(tree, roots):
    """{path of qualnames: calls} below `roots`, keeping only this program's functions."""
    out = {}
    for path, calls in rooted_edges(tree, roots).items():
        names = tuple(qualname_of(k) for k in path)
        if set(names) <= OURS:
            out[" > ".join(names)] = calls
    return out


def _frame_paths(tree):
    """Qualname paths of nodes with zero calls: frames that were running at the start."""
    found = set()
    for rows in tree["threads"].values():
        for i, (parent, key, calls) in enumerate(rows):
            if calls == 0 and i > 0:
                names = []
                j = i
                while j > 0:
                    names.append(qualname_of(rows[j][1]))
                    j = rows[j][0]
                found.add(" > ".join(reversed(names)))
    return found


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_frames_running_at_start_are_roots_and_later_calls_find_their_callers(c_calls, tmp_path):
    run = run_traced("deep_start", tmp_path, c_calls=c_calls)
    assert run.returncode == 0, run.stderr[-3000:]
    main = run.by_role("main")
    assert "drain_err" not in main, main["drain_err"]
    counters, trace = main["counters"], main["trace"]
    assert counters["hook"] == expected_hook(c_calls)
    assert counters["hook_errors"] == 0, counters["first_error"]
    assert trace["events_read"] == counters["events_written"]
    tree = trace["tree"]

    # the roots: what was running when tracing started, in both threads
    frames = _frame_paths(tree)
    assert any(p.endswith("outer > middle > start_here") for p in frames), sorted(frames)
    assert any(p.endswith("early_worker > waiter") for p in frames), sorted(frames)

    # every call made after the start, under its true caller, and nothing else
    got = _our_paths(tree, ["outer", "early_worker"])
    assert got == {
        "outer > middle > work": 1,
        "outer > middle > work > leaf": 1,
        "outer > after": 1,
        "outer > after > leaf": 2,
        "early_worker > after_wait": 1,
        "early_worker > after_wait > leaf": 1,
    }, got
