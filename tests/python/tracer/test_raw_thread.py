"""Threads started with _thread.start_new_thread, not threading, after tracing started,
are traced where the hook is interpreter-wide: sys.monitoring (3.12+) and the
frame-evaluation hook (3.11 without C calls). PyEval_SetProfile (3.10, and 3.11 with C
calls) is per thread, and only threading's threads get it (threading.setprofile), as
for VizTracer and yappi: docs/hooks.md, "Threads"."""

import sys

import pytest

from helpers import qualname_of, rooted_edges, run_traced


def _hook_is_interpreter_wide(c_calls):
    return sys.version_info >= (3, 12) or (sys.version_info >= (3, 11) and not c_calls)


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_thread_started_with_the_thread_module_is_traced(c_calls, tmp_path):
    if not _hook_is_interpreter_wide(c_calls):
        pytest.skip("PyEval_SetProfile reaches only threading's threads on this Python")
    run = run_traced("raw_thread", tmp_path, c_calls=c_calls)
    assert run.returncode == 0, run.stderr[-3000:]
    main = run.by_role("main")
    assert "drain_err" not in main, main["drain_err"]
    counters, trace = main["counters"], main["trace"]
    assert counters["hook_errors"] == 0, counters["first_error"]
    assert trace["events_read"] == counters["events_written"]
    edges = {" > ".join(qualname_of(k) for k in path): calls
             for path, calls in rooted_edges(trace["tree"], ["raw_entry"]).items()}
    assert edges.get("raw_entry") == 1, edges
    via = "raw_entry > c:sum > " if c_calls else "raw_entry > "
    assert edges.get(via + "raw_entry.<locals>.<genexpr> > leaf") == 5, edges
    assert counters["threads"] == 2       # the main thread and the _thread one
