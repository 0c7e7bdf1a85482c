#!/usr/bin/env bash
# Free-threaded CPython 3.14.7 (--disable-gil) for the test suite, built from
# ../shared/cpython/cpython-3.14.7.tar.xz (beside the repository) into /opt/python3.14t.
# Usage: tests/freethreaded.sh ensure
# A machine that already has /opt/python3.14t at 3.14.7 reuses it (one line printed).
set -euo pipefail

VERSION=3.14.7
PREFIX=${PYTRACE_FT_PREFIX:-/opt/python3.14t}
SRC_ROOT=${PYTRACE_FT_SRC:-/opt/src}
JOBS=${PYTRACE_FT_JOBS:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
# shared/ sits beside the clone in CI; a git worktree may carry it inside, or use the
# workplace's copy.
TARBALL=${PYTRACE_FT_TARBALL:-}
if [ -z "$TARBALL" ]; then
    for d in "$here/../shared" "$here/shared" /work/shared; do
        if [ -f "$d/cpython/cpython-$VERSION.tar.xz" ]; then
            TARBALL=$d/cpython/cpython-$VERSION.tar.xz
            break
        fi
    done
    TARBALL=${TARBALL:-$here/../shared/cpython/cpython-$VERSION.tar.xz}
fi
PY=$PREFIX/bin/python3.14t

current_version() {
    [ -x "$PY" ] || return 0
    "$PY" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || true
}

ensure() {
    local have
    have=$(current_version)
    if [ "$have" = "$VERSION" ]; then
        echo "freethreaded: reusing $PY ($have, GIL $("$PY" -c 'import sys; print(sys._is_gil_enabled())'))"
        return 0
    fi
    [ -f "$TARBALL" ] || { echo "freethreaded: no $TARBALL" >&2; return 1; }
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q build-essential libssl-dev \
        zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev uuid-dev \
        libzstd-dev libgdbm-dev libgdbm-compat-dev libncurses-dev libexpat1-dev pkg-config \
        >/dev/null
    mkdir -p "$SRC_ROOT"
    rm -rf "$SRC_ROOT/cpython-$VERSION" "$SRC_ROOT/build-3.14t"
    tar -xJf "$TARBALL" -C "$SRC_ROOT"
    mkdir -p "$SRC_ROOT/build-3.14t"
    (
        cd "$SRC_ROOT/build-3.14t"
        "$SRC_ROOT/cpython-$VERSION/configure" --disable-gil --prefix="$PREFIX" \
            --with-ensurepip=install >configure.log 2>&1
        make -j"$JOBS" >make.log 2>&1
        make install >install.log 2>&1
    ) || { echo "freethreaded: build failed, see $SRC_ROOT/build-3.14t/*.log" >&2; return 1; }
    have=$(current_version)
    [ "$have" = "$VERSION" ] || { echo "freethreaded: built $PY reports '$have'" >&2; return 1; }
    "$PY" -c 'import sys; assert not sys._is_gil_enabled()'
    echo "freethreaded: built $PY ($have)"
}

case "${1:-}" in
    ensure) ensure ;;
    *) echo "usage: $0 ensure" >&2; exit 2 ;;
esac
