#!/usr/bin/env bash
# The Python suite's core tests against an ASan + UBSan build: the extension and pytrace-top
# are built with PYTRACE_SANITIZE=ON into a venv of their own (build/sanitize, not the one
# under test elsewhere) and a chosen set of tests/python that drives the C code (the walk,
# exports, recordings, damaged segments and files, rings, lifecycle) runs against it.
# CPython is not instrumented, so libasan is preloaded into every process the tests start
# (the traced jobs, readers and pytrace-top inherit it); CPython's own leaks are not
# findings (detect_leaks=0). An ASan report is written to a log file, whichever process it
# came from, and any such file fails the run. A UBSan report (GCC's runtime writes it to the
# process's stderr whatever log_path says) stops its process with status 1 (halt_on_error),
# which fails the test that started it; pytest itself runs with --capture=sys, so a report
# from the pytest process (the exporters, pytrace.Reader) stays on the run's stderr.
#   PYTRACE_SANITIZE_PYTHON  the Python version to use (default 3.11, see tests/pythons.sh)
#   PYTRACE_SANITIZE_BUILD   where the build and venv go (default build/sanitize)
#   PYTRACE_SANITIZE_TESTS   the test files under tests/python (default: the set below), -k style extras in
#                            PYTRACE_SANITIZE_PYTEST_ARGS
#   tests/sanitize.sh [build|test]   build only, or test what was built (default: both)
set -euo pipefail
step=${1:-all}
case "$step" in build | test | all) ;; *) echo "usage: tests/sanitize.sh [build|test]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
root=$(pwd)
build=${PYTRACE_SANITIZE_BUILD:-build/sanitize}
case "$build" in /*) ;; *) build=$root/$build ;; esac
py=$(PYTRACE_PYTHONS=${PYTRACE_SANITIZE_PYTHON:-3.11} bash tests/pythons.sh)
# What runs C code on untrusted or unusual input: the corpus and generated streams through the
# walk and every exporter, recordings (format, compression, live, mutated), damaged segments,
# pytrace-top on recordings, rings (threads, reuse, losses), the job's lifecycle, the Aggregator
# binding (pytrace.Profile), merging recordings, multi-process exports and the hub with its clients.
tests=${PYTRACE_SANITIZE_TESTS:-"tracer/test_corpus.py export/test_export_agreement.py
    export/test_export_formats.py export/test_export_perfetto.py export/test_export_bounds.py
    tracer/test_deep_recursion.py tracer/test_spans_filters.py recording/test_recording_format.py
    recording/test_recording_compressed.py recording/test_recording_live.py
    segment/test_segment_damage.py recording/test_fuzz_recordings.py top/test_top_file.py
    segment/test_threads_rings.py segment/test_ring_reuse.py tracer/test_loss_counters.py
    segment/test_lifecycle.py reader/test_web_profile.py recording/test_merge.py
    export/test_multiprocess_export.py hub/test_hub.py"}

venv=$build/venv
if [ "$step" != test ]; then
    if [ ! -x "$venv/bin/python" ]; then
        "$py" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "scikit-build-core>=0.8" cmake ninja flatbuffers pytest gprof2dot perfetto
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
        -C cmake.define.PYTRACE_SANITIZE=ON -C cmake.build-type=RelWithDebInfo -C build-dir="$build/skbuild" "$root"
fi

ext=$("$venv/bin/python" -c 'import glob, os, sysconfig
print(glob.glob(os.path.join(sysconfig.get_path("platlib"), "pytrace", "_pytrace*.so"))[0])')
# (ldd's output is taken whole: an early exit of grep -q or awk would fail the pipe under pipefail)
ext_libs=$(ldd "$ext")
top_libs=$(ldd "$venv/bin/pytrace-top")
libasan=$(awk '/libasan/ {print $3}' <<<"$ext_libs" | head -1)
if [ -z "$libasan" ] || [[ "$top_libs" != *libasan* ]]; then
    echo "sanitize: the extension or pytrace-top is not linked with ASan ($ext); is the compiler gcc?" >&2
    exit 1
fi
[ "$step" != build ] || exit 0

logs=$(mktemp -d /tmp/pytrace-sanitize-XXXXXX)
trap 'rm -rf "$logs"' EXIT
paths=()
for t in $tests; do paths+=("$root/tests/python/$t"); done
echo "== sanitize: ASan + UBSan, $("$venv/bin/python" --version), ${#paths[@]} test files"
start=$SECONDS
status=0
# From outside the tree, so the installed (instrumented) package is the one under test;
# its scripts (pytrace, pytrace-top) come first on PATH.
(cd /tmp && PATH="$venv/bin:$PATH" PYTRACE_TOP="$venv/bin/pytrace-top" PYTHONMALLOC=malloc \
    LD_PRELOAD="$libasan" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:log_path=$logs/asan" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan" \
    "$venv/bin/python" -m pytest "${paths[@]}" -q -p no:cacheprovider --capture=sys ${PYTRACE_SANITIZE_PYTEST_ARGS:-}) ||
    status=1
reports=$(ls "$logs" 2>/dev/null | wc -l)
if [ "$reports" != 0 ]; then
    status=1
    echo "sanitize: $reports report(s) from the sanitizers:"
    for f in "$logs"/*; do
        echo "---- $(basename "$f")"
        head -60 "$f"
    done
fi
echo "== sanitize: $((SECONDS - start)) s, $([ $status = 0 ] && echo "no finding" || echo FAILED)"
exit $status
