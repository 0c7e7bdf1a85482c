#!/usr/bin/env bash
# Runs each libFuzzer target of tests/fuzz for a bounded time (PYTRACE_FUZZ_SECONDS, default
# 40 per target; PYTRACE_FUZZ_JOBS targets at once, default the CPU count) on a copy of its
# checked-in corpus; hangs (10 s) and crashes are findings, and any finding fails the run. Needs clang (its libFuzzer runtime); prints why and exits 0
# without it only when PYTRACE_FUZZ_OPTIONAL=1.
#   tests/fuzz/run.sh [build|run]   build only, or run what was built (default: both)
set -euo pipefail
step=${1:-all}
case "$step" in build | run | all) ;; *) echo "usage: tests/fuzz/run.sh [build|run]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/../.."
root=$(pwd)
seconds=${PYTRACE_FUZZ_SECONDS:-40}
build=${PYTRACE_FUZZ_BUILD:-build/fuzz}
if ! command -v clang >/dev/null 2>&1; then
    if [ "${PYTRACE_FUZZ_OPTIONAL:-0}" = 1 ]; then
        echo "fuzz: skipped: clang is not installed (apt-get install clang)"
        exit 0
    fi
    echo "fuzz: clang is not installed (apt-get install clang)" >&2
    exit 1
fi
if [ "$step" != run ]; then
    CC=clang CXX=clang++ cmake -S . -B "$build" -DPYTRACE_FUZZ=ON -DPYTRACE_WERROR=ON -DPYTRACE_BUILD_PYTHON=OFF \
        -DPYTRACE_BUILD_TESTS=OFF -DPYTRACE_BUILD_BENCH=OFF -DPYTRACE_BUILD_VIEWER=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j2 >/dev/null
fi
[ "$step" != build ] || exit 0
work=$(mktemp -d /tmp/pytrace-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
targets="fuzz_fb fuzz_agg fuzz_recfile fuzz_segment fuzz_export"
# Each target runs for its full time on one core; PYTRACE_FUZZ_JOBS of them at once (default:
# the CPU count), so on 2 cores the four take two target-times of wall time, not four.
jobs=${PYTRACE_FUZZ_JOBS:-$(nproc)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1

# Runs one target; its summary goes to $work/<target>.result, its status is the finding's.
fuzz_one() {
    local target=$1 log="$work/$1.log" out="$work/$1.result"
    mkdir -p "$work/$target"
    cp "$root/tests/fuzz/corpus/$target/"* "$work/$target/"
    if (cd "$work" && "$root/$build/tests/fuzz/$target" "$work/$target" -max_total_time="$seconds" -timeout=10 \
            -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$target-" \
            >"$log" 2>&1); then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
        echo "fuzz: $target: $runs inputs in ${seconds}s, $cov, no finding" >"$out"
        return 0
    fi
    {
        echo "fuzz: $target: FINDING (log and input follow)"
        grep -E "ERROR|SUMMARY|Test unit written|timeout|deadly" "$log" | head -20 || true
        ls "$work/$target-"* 2>/dev/null | head -3 || true
    } >"$out"
    for a in "$work/$target-"*; do
        [ -f "$a" ] && mkdir -p "$root/tests/fuzz/findings/$target" && cp "$a" "$root/tests/fuzz/findings/$target/"
    done
    return 1
}

failed=0
pids=()
names=()
for target in $targets; do
    fuzz_one "$target" &
    pids+=($!)
    names+=("$target")
    if [ "${#pids[@]}" -ge "$jobs" ]; then
        wait "${pids[0]}" || failed=1
        cat "$work/${names[0]}.result" 2>/dev/null || echo "fuzz: ${names[0]}: did not run"
        pids=("${pids[@]:1}")
        names=("${names[@]:1}")
    fi
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed=1
    cat "$work/${names[$i]}.result" 2>/dev/null || echo "fuzz: ${names[$i]}: did not run"
done
exit $failed
