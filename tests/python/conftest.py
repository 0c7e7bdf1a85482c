"""pytest setup for the end-to-end tests.

The tests are grouped by area (tracer/, segment/, launch/, reader/, recording/, export/,
hub/, top/, web/, attach/); what several of them share is in support/ (helpers, topkit,
the reference tracer and call tree, the stream builders, the corpus programs), which is
put on sys.path here so that a test imports it by name (`from helpers import PY`).

Corpus programs and helpers run from this tree must not leave __pycache__ directories in it."""
import os
import sys

os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)

# Many tests send SIGINT (Ctrl-C) to a program and check how it ends. A shell runs a
# background command (`bash .ci/run &`, nohup) with SIGINT ignored, and an ignored signal
# stays ignored across fork and exec: every program the tests start would then shrug
# Ctrl-C off (seen: exports that finished, web servers killed after their grace, jobs
# left running). The tests' children get Ctrl-C's default, as from a terminal.
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    # tests/run_all.sh runs the suite in two parts: `-m "not solo"` (on two pytest-xdist
    # workers with PYTRACE_TEST_JOBS=2; serial by default) and then `-m solo` alone. A solo test needs a quiet core (its spinning thread's
    # CPU time is asserted against its wall time), orders functions by their own time, waits
    # a bounded time for processes to meet (the hub's pools), or takes a machine-wide name
    # that a test beside it would see.
    config.addinivalue_line("markers", "solo: run alone after the parallel part (tests/run_all.sh)")
    # A reading_side test's subject is a reading program's bounds or robustness (the hub's
    # and the web server's memory budgets, the call tree's budget, damaged or planted files,
    # a recorder's faults, the exporters' limits, the recording format): C reading code and
    # the CLI glue around it, whose input (a recording, a job) only makes the load; what a
    # test asserts of the tracer itself (a traced depth, a child's command line, the mode of
    # a segment the tracer made) is not marked. tests/run_all.sh runs them with the first
    # Python of its list and with the free-threaded one (so the glue runs on a GIL build and
    # on the free-threaded build), and leaves them out with the other Pythons.
    config.addinivalue_line("markers", "reading_side: the subject is a reading program's bounds "
                            "or robustness, not the tracer (tests/run_all.sh: first and "
                            "free-threaded Pythons only)")
