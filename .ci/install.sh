#!/usr/bin/env bash
# Installs everything pytrace needs on a fresh Debian machine (run as root), then
# builds and installs the package into each Python of tests/pythons.sh: 3.11 and 3.12
# of this machine, 3.14 and 3.15 inside the Debian unstable root (tests/sidroot.sh,
# made on the first run, about a minute, and reused after), and the free-threaded 3.14t
# (tests/freethreaded.sh, built once per machine into /opt/python3.14t).
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq build-essential liburcu-dev libncurses-dev flatbuffers-compiler \
    libflatbuffers-dev zlib1g-dev libzstd-dev zstd tmux procps clang util-linux passwd debootstrap \
    chromium >/dev/null
# chromium: the browser tests of pytrace web and the HTML report (tests/python/web/test_web.py) drive
# Debian's chromium with Playwright (its own browser download is not used)

# the free-threaded 3.14t (when PYTRACE_PYTHONS names it): built from ../shared/cpython once
# per machine (about 7 minutes on 2 cores), reused after
case " ${PYTRACE_PYTHONS:-3.11 3.12 3.14 3.15 3.14t} " in
*" 3.14t "*) bash tests/freethreaded.sh ensure ;;
esac
PYTHONS=$(bash tests/pythons.sh)
case "$PYTHONS" in
*/tests/sid/python*) bash tests/sidroot.sh ensure >/dev/null ;;
esac
for py in $PYTHONS; do
    "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        "scikit-build-core>=0.8" cmake ninja flatbuffers pytest pytest-xdist gprof2dot coverage perfetto
    # the browser tests (tests/python/web/test_web.py); a Python it has no wheel for skips them
    "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore playwright ||
        echo "playwright is not available for $py: its browser tests will skip"
    # the PyTorch tests (tests/python/pytorch): torch 2.13.0's CPU wheel on 3.11 only (any other
    # version or Python downloads several GB of CUDA wheels); elsewhere they skip
    case "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" in
    3.11) "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore torch==2.13.0 ;;
    esac
    "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        --no-build-isolation .
done
# pyenv keeps console scripts behind shims; make new ones (pytrace, pytrace-top) visible.
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
echo "pytrace installed for:" $PYTHONS
