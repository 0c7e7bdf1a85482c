"""stop() and start() inside a running frame: the frames that span both sessions are
prior frames of the second one, and when one of them returns, the calls after it land
under their true caller. On 3.11 without C calls the frame-evaluation hook closes such a
frame itself (it saw it start in the first session) and must then stop treating its level
as a prior frame, or the next frame opened there is closed early."""

import pytest

import pytrace
from calltree import CallTree


def leaf():
    pass


def g():
    leaf()


def h():
    leaf()


def _run(c_calls):
    segments = []

    def f():
        pytrace.stop()
        segments.append(pytrace.start(c_calls=c_calls))
        g()

    def main():
        segments.append(pytrace.start(c_calls=c_calls))
        f()     # opened in the first session, returns in the second
        h()     # after f returned: under main, and leaf under h
        return pytrace.stop()

    counters = main()
    tree = CallTree()
    with pytrace.Reader(segments[-1]) as reader:   # the stopped second session
        for msg in reader:
            tree.feed(msg)
    return counters, tree.to_json()


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_calls_after_a_frame_that_spans_a_restart_land_under_their_caller(c_calls):
    counters, tree = _run(c_calls)
    assert counters.hook_errors == 0, counters.first_error
    (rows,) = tree["threads"].values()

    def name(i):
        return rows[i][1].split(":")[1] if rows[i][1].startswith("py:") else rows[i][1]

    def path(i):
        names = []
        while i > 0:
            names.append(name(i))
            i = rows[i][0]
        return tuple(reversed(names))

    main = "_run.<locals>.main"
    ours = {}
    for i, (_, _, calls) in enumerate(rows):
        p = path(i)
        if i and calls and main in p and p[-1] in ("g", "h", "leaf"):
            ours[tuple(n.replace("_run.<locals>.", "") for n in p[p.index(main):])] = calls
    assert ours == {("main", "f", "g"): 1, ("main", "f", "g", "leaf"): 1,
                    ("main", "h"): 1, ("main", "h", "leaf"): 1}, ours
