#!/usr/bin/env bash
# Runs every test: the C unit tests (ctest, warnings as errors), the fuzz targets, the core
# Python tests under ASan + UBSan (tests/sanitize.sh) and the Python end-to-end tests (pytest)
# on each installed Python (3.11 and 3.12 of this machine, 3.14 and 3.15 inside the Debian
# unstable root, see tests/pythons.sh and tests/sidroot.sh).
# The package must be installed first (bash .ci/install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${PYTRACE_TEST_BUILD:-build/tests}

cmake -S . -B "$build" -DPYTRACE_WERROR=ON -DPYTRACE_BUILD_PYTHON=OFF >/dev/null
cmake --build "$build" -j2
ctest --test-dir "$build" --output-on-failure -j2

# libFuzzer targets (ASan + UBSan) over every reader of untrusted bytes, bounded in time.
echo "== fuzz (tests/fuzz, ${PYTRACE_FUZZ_SECONDS:-40} s per target)"
bash tests/fuzz/run.sh

# The Python suite's core tests against an ASan + UBSan build of the extension and pytrace-top.
bash tests/sanitize.sh

for py in $(bash tests/pythons.sh); do
    echo "== pytest on $($py --version) ($py)"
    start=$SECONDS
    # Run from outside the tree so the installed package is the one under test.
    # That interpreter's scripts (pytrace, pytrace-top) come first on PATH.
    scripts=$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    # screenshots of the browser tests stay after the run: build/artifacts/<python>/web
    artifacts="$root/build/artifacts/$("$py" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')"
    (cd /tmp && PATH="$scripts:$PATH" PYTRACE_BUILD_DIR="$root/$build" PYTRACE_ARTIFACTS="$artifacts" \
        "$py" -m pytest "$root/tests/python" -q -p no:cacheprovider)
    echo "== pytest on $($py --version): $((SECONDS - start)) s"
done
