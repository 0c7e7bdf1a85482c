"""A program that recurses deeper than an 8 MiB C stack could hold one C frame per call
runs traced as it runs untraced, and the stream has every call. On 3.11 without C calls
this is the frame-evaluation hook's fall-back: it cannot run such a program itself (each
call recurses on the C stack under it), so it hands the session to the profile hook
before the stack runs out."""

import sys

import pytest

from helpers import qualname_of, run_traced

DEPTH = 30000   # as in corpus/deep_recursion.py

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="3.10 evaluates every Python call on the C stack: this depth crashes it untraced")


def _rec_chain(rows):
    """(calls of rec, longest chain of rec nodes) in one thread's tree rows."""
    calls = 0
    chain = {}              # row index -> rec nodes from here up to the first non-rec
    longest = 0
    for i, (parent, key, count) in enumerate(rows):
        if i == 0 or qualname_of(key) != "rec":
            continue
        calls += count
        chain[i] = chain.get(parent, 0) + 1   # parents come before children
        longest = max(longest, chain[i])
    return calls, longest


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_deep_recursion_runs_and_every_call_is_in_the_stream(c_calls, tmp_path):
    run = run_traced("deep_recursion", tmp_path, c_calls=c_calls, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == str(DEPTH)
    main = run.by_role("main")
    assert "drain_err" not in main, main["drain_err"]
    counters, trace = main["counters"], main["trace"]
    assert counters["hook_errors"] == 0, counters["first_error"]
    assert counters["events_dropped"] == 0
    assert trace["events_read"] == counters["events_written"]
    if sys.version_info[:2] == (3, 11) and not c_calls:
        assert counters["hook"] == ("frame evaluation (PEP 523), then PyEval_SetProfile "
                                    "(deep C stack)")
    (rows,) = [r for r in trace["tree"]["threads"].values() if len(r) > DEPTH]
    calls, longest = _rec_chain(rows)
    assert calls == DEPTH + 1           # rec(DEPTH) .. rec(0), each called once
    assert longest == DEPTH + 1         # nested one in the other, none misplaced
