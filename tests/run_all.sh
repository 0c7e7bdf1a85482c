#!/usr/bin/env bash
# Runs every test: the C unit tests (ctest, warnings as errors), the fuzz targets, the core
# Python tests under ASan + UBSan (tests/sanitize.sh) and the Python end-to-end tests (pytest)
# on each installed Python (3.11 and 3.12 of this machine, 3.14 and 3.15 inside the Debian
# unstable root, the free-threaded 3.14t built into /opt/python3.14t; see tests/pythons.sh,
# tests/sidroot.sh and tests/freethreaded.sh).
# The package must be installed first (bash .ci/install.sh).
#
# Order: one after the other by default. PYTRACE_TEST_OVERLAP=1 runs the C builds and ctest,
# the fuzz build and the sanitizer build beside the first Python's suite at the lowest
# priority (nice 19, and their session's autogroup nice 19), their output after that suite's,
# any failure of theirs failing the run. It is not the default: in a clean CI run the CPU-time
# tests (tracer/test_cpu_time.py, web/test_web_cputime.py), which need a core for their
# spinning thread, failed beside it (a spinner got 0.49 of its wall time as CPU).
# PYTRACE_TEST_BESIDE_FIRST: a command that runs first in the C part (.ci/run installs the
# other Pythons there: beside the first suite, or before the C build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${PYTRACE_TEST_BUILD:-build/tests}
overlap=${PYTRACE_TEST_OVERLAP:-0}

# The C side: build, ctest, and the builds of the fuzz targets and the sanitizer venv.
c_side() {
    cmake -S . -B "$build" -DPYTRACE_WERROR=ON -DPYTRACE_BUILD_PYTHON=OFF >/dev/null
    cmake --build "$build" -j2
    ctest --test-dir "$build" --output-on-failure -j2
    echo "== fuzz build (tests/fuzz)"
    bash tests/fuzz/run.sh build
    echo "== sanitize build (tests/sanitize.sh)"
    bash tests/sanitize.sh build
}

pytest_on() {
    local py=$1 which=${2:-all}
    # The tests marked reading_side (their subject is a reading program's bounds or
    # robustness: the hub's and the web server's memory budgets, the call tree's, damaged or
    # planted files, a recorder's faults, the exporters' limits; the traced interpreter only
    # makes their load; see tests/python/conftest.py) run with the first Python and the
    # free-threaded one, not again with each other: the reading code is C, and the CLI glue
    # around it still runs on a GIL build and on the free-threaded one.
    local select="not solo"
    if [ "$which" = tracing ]; then
        select="not solo and not reading_side"
    fi
    echo "== pytest on $($py --version) ($py)${2:+, $which}"
    local start=$SECONDS
    # Run from outside the tree so the installed package is the one under test.
    # That interpreter's scripts (pytrace, pytrace-top) come first on PATH.
    local scripts artifacts
    scripts=$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    # screenshots of the browser tests stay after the run: build/artifacts/<python>/web
    artifacts="$root/build/artifacts/$("$py" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')"
    # Two parts: the suite but for the tests marked solo, then those alone (a spinning
    # thread's CPU time against its wall time needs a quiet core; a machine-wide name one
    # squats; see tests/python/conftest.py).
    # PYTRACE_TEST_JOBS=2 runs the first part on two workers; serial by default: beside
    # another test's load, tests that wait a bounded time for processes to meet or read a
    # timeline's last slice failed now and then on 3.14 and 3.15, and no run of the whole
    # CI with two workers has been made yet
    local parallel=""
    if [ "${PYTRACE_TEST_JOBS:-1}" -gt 1 ] && "$py" -c 'import xdist' 2>/dev/null; then
        parallel="-n $PYTRACE_TEST_JOBS"
    fi
    (cd /tmp && PATH="$scripts:$PATH" PYTRACE_BUILD_DIR="$root/$build" PYTRACE_ARTIFACTS="$artifacts" \
        "$py" -m pytest "$root/tests/python" -q -p no:cacheprovider $parallel -m "$select") || return 1
    echo "== pytest on $($py --version), solo tests alone: after $((SECONDS - start)) s"
    (cd /tmp && PATH="$scripts:$PATH" PYTRACE_BUILD_DIR="$root/$build" PYTRACE_ARTIFACTS="$artifacts" \
        "$py" -m pytest "$root/tests/python" -q -p no:cacheprovider -m solo) || return 1
    echo "== pytest on $($py --version): $((SECONDS - start)) s"
}

# The part run beside the first suite (tests/run_all.sh --beside, started below): in a session
# of its own, so that with the kernel's autogroups (each session one scheduling group, where
# a process's nice counts only against its own group) the whole group is made nice 19 too.
if [ "${1:-}" = --beside ]; then
    renice -n 19 -p $$ >/dev/null # before any child: they inherit it
    # (only as its session's leader, as setsid starts it: never the caller's own session)
    if [ -w /proc/$$/autogroup ] && [ "$(ps -o sid= -p $$ | tr -d ' ')" = $$ ]; then
        echo 19 >/proc/$$/autogroup
    fi
    start=$SECONDS
    if [ -n "${PYTRACE_TEST_BESIDE_FIRST:-}" ]; then
        echo "== $PYTRACE_TEST_BESIDE_FIRST"
        bash -c "$PYTRACE_TEST_BESIDE_FIRST"
    fi
    c_side
    echo "== beside the first suite: $((SECONDS - start)) s"
    exit 0
fi

pythons=$(bash tests/pythons.sh)
first=$(head -n 1 <<<"$pythons")
rest=$(tail -n +2 <<<"$pythons")

if [ "$overlap" = 1 ]; then
    c_log=$(mktemp /tmp/pytrace-c-side-XXXXXX)
    setsid bash tests/run_all.sh --beside >"$c_log" 2>&1 </dev/null &
    c_pid=$!
    # (its own session gets no Ctrl-C from the terminal: an interrupted run ends it here)
    trap 'kill -- -"$c_pid" 2>/dev/null || true; rm -f "$c_log"' EXIT
    trap 'exit 130' INT TERM
    status=0
    pytest_on "$first" || status=1
    # (waited for even when the suite failed: nothing is left running)
    c_status=0
    wait "$c_pid" || c_status=1
    echo "== beside the first suite (nice 19): ${PYTRACE_TEST_BESIDE_FIRST:+its command, }the C build, ctest, the fuzz and sanitize builds"
    cat "$c_log"
    if [ $c_status != 0 ]; then
        echo "== beside the first suite: FAILED"
        exit 1
    fi
    [ $status = 0 ] || exit 1
else
    if [ -n "${PYTRACE_TEST_BESIDE_FIRST:-}" ]; then
        echo "== $PYTRACE_TEST_BESIDE_FIRST"
        bash -c "$PYTRACE_TEST_BESIDE_FIRST"
    fi
    c_side
fi

# libFuzzer targets (ASan + UBSan) over every reader of untrusted bytes, bounded in time.
echo "== fuzz (tests/fuzz, ${PYTRACE_FUZZ_SECONDS:-40} s per target)"
bash tests/fuzz/run.sh run

# The Python suite's core tests against an ASan + UBSan build of the extension and pytrace-top.
bash tests/sanitize.sh test

# which tests a Python after the first runs: all of them on a free-threaded build, the
# tracing side only on any other (see pytest_on)
which_for() {
    if "$1" -c 'import sys, sysconfig; sys.exit(0 if sysconfig.get_config_var("Py_GIL_DISABLED") else 1)'; then
        echo all
    else
        echo tracing
    fi
}
if [ "$overlap" = 1 ]; then
    for py in $rest; do pytest_on "$py" "$(which_for "$py")"; done
else
    pytest_on "$first" all
    for py in $rest; do pytest_on "$py" "$(which_for "$py")"; done
fi
