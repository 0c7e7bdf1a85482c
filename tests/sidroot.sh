#!/usr/bin/env bash
# The Debian unstable root that runs Python 3.14 and 3.15 (their packages need a newer C library
# than this machine's). Made once per machine with debootstrap and reused while it is valid.
#
#   tests/sidroot.sh ensure              make the root if it is missing or not valid; print its path
#   tests/sidroot.sh check               exit 0 if the root is valid (says what is wrong if not)
#   tests/sidroot.sh python X.Y ARGS...  run the root's venv python X.Y (used by tests/sid/pythonX.Y)
#   tests/sidroot.sh run CMD...          run CMD inside the root
#
# Inside, each command gets its own mount namespace (nothing stays mounted on the host): the
# root bound on itself (so `unshare -m` works inside), the host's /proc, /sys (pytrace's clock
# reads the kernel's clocksource there; without it, it falls back from the TSC to the slower
# clock_gettime), /dev/pts (tmux), /dev/shm (segments are visible both ways), and this source
# tree at the same path, so paths given on the command line mean the same on both sides. The
# working directory is kept (it must exist inside: the tree, /tmp, ...). The environment is
# passed on, less what names the host's interpreters and libraries.
#
# PYTRACE_SIDROOT: where the root lives (/opt/pytrace-sid); PYTRACE_SID_MIRROR: the Debian
# mirror (default: the one in this machine's apt sources).
set -euo pipefail

tree=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${PYTRACE_SIDROOT:-/opt/pytrace-sid}
VERSIONS="3.14 3.15"
# What the root holds. A change here makes the root invalid, so the next `ensure` remakes it.
# An older root is brought up to date in place (repair) rather than made again.
INCLUDE="python3.14-dev,python3.15-dev,python3.14-venv,python3.15-venv,gcc,g++,make,cmake,liburcu-dev,\
libncurses-dev,flatbuffers-compiler,libflatbuffers-dev,zlib1g-dev,libzstd-dev,zstd,tmux,procps,passwd,\
util-linux"
# Python packages of each venv (/opt/pytrace-venv/X.Y inside): the build and test tools, as
# .ci/install.sh installs them on the host.
PIP_PACKAGES="scikit-build-core>=0.8 cmake ninja flatbuffers pytest gprof2dot coverage perfetto"
SPEC="sid minbase $INCLUDE | $PIP_PACKAGES"
STAMP=etc/pytrace-sidroot.spec

die() {
    echo "sidroot: $*" >&2
    exit 1
}

# The Debian mirror of this machine's apt sources (deb822 URIs: or one-line deb entries).
mirror() {
    if [ -n "${PYTRACE_SID_MIRROR:-}" ]; then
        echo "$PYTRACE_SID_MIRROR"
        return
    fi
    local url
    url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?//p' |
        tr ' ' '\n' | grep -E '^https?://[^ ]*/debian/?$' | head -n 1 || true)
    [ -n "$url" ] || die "no Debian mirror found in /etc/apt/sources.list*; set PYTRACE_SID_MIRROR"
    echo "$url"
}

# The files that let pip inside reach the same package index, and name resolution.
copy_host_config() {
    local dir=$1 cert
    cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    cp /etc/hosts "$dir/etc/hosts" 2>/dev/null || true
    [ -f /etc/pip.conf ] && cp /etc/pip.conf "$dir/etc/pip.conf"
    if [ -d /etc/xdg/pip ]; then
        mkdir -p "$dir/etc/xdg/pip"
        cp -r /etc/xdg/pip/. "$dir/etc/xdg/pip/"
    fi
    for cert in "${PIP_CERT:-}" $(sed -n 's/^[[:space:]]*cert[[:space:]]*=[[:space:]]*//p' /etc/pip.conf 2>/dev/null); do
        if [ -n "$cert" ] && [ -f "$cert" ]; then
            mkdir -p "$dir$(dirname "$cert")"
            cp "$cert" "$dir$cert"
        fi
    done
}

# Runs "$@" inside root $1 (see the top of this file).
enter() {
    local dir=$1
    shift
    local cwd=$PWD
    case "$cwd/" in
    "$tree"/*) ;;
    *) [ -d "$dir$cwd" ] || die "the working directory $cwd does not exist inside $dir: run from this tree or /tmp" ;;
    esac
    [ -d "$dir$tree" ] || mkdir -p "$dir$tree"
    exec env -u PYTHONHOME -u PYTHONPATH -u LD_LIBRARY_PATH -u LD_PRELOAD -u VIRTUAL_ENV \
        -u PYENV_VERSION -u PIP_FIND_LINKS \
        PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin" \
        unshare -m --propagation private /bin/sh -c '
            dir=$1 tree=$2 cwd=$3
            shift 3
            mount --bind "$dir" "$dir" &&
            mount --bind /proc "$dir/proc" &&
            mount --bind /sys "$dir/sys" &&
            mount --bind /dev/pts "$dir/dev/pts" &&
            mount --bind /dev/shm "$dir/dev/shm" &&
            mount --bind "$tree" "$dir$tree" || exit 125
            exec chroot "$dir" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"' \
        sidroot "$dir" "$tree" "$cwd" "$@"
}

# Says what is wrong with root $1 (nothing if it is valid); the exit status tells.
problems() {
    local dir=$1 v status missing
    [ -f "$dir/$STAMP" ] || { echo "$dir is not a finished root (no $STAMP)"; return 1; }
    [ "$(cat "$dir/$STAMP")" = "$SPEC" ] || { echo "$dir was made for another list of packages"; return 1; }
    # shellcheck disable=SC2046
    status=$(chroot "$dir" dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $(echo "$INCLUDE" | tr ',' ' ') 2>&1) &&
        missing=$(echo "$status" | grep -v ' ii *$' || true) || missing=$status
    [ -z "$missing" ] || { echo "packages not installed in $dir: $(echo "$missing" | tr '\n' ' ')"; return 1; }
    for v in $VERSIONS; do
        chroot "$dir" "/opt/pytrace-venv/$v/bin/python" -c \
            'import sys, scikit_build_core, pytest, flatbuffers; assert sys.version_info[:2] == tuple(map(int, sys.argv[1].split(".")))' \
            "$v" >/dev/null 2>&1 || { echo "python$v or its venv (/opt/pytrace-venv/$v) does not run in $dir"; return 1; }
    done
    return 0
}

# Installs into root $1 (finished, for older lists) what the lists now name; 0 if it is
# valid then.
repair() {
    local dir=$1 v
    echo "sidroot: bringing $dir up to the current package lists" >&2
    # shellcheck disable=SC2046
    (enter "$dir" /bin/sh -c 'apt-get update -qq -o Acquire::Check-Valid-Until=false -o Acquire::Check-Date=false && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "$@" >/dev/null' sh $(echo "$INCLUDE" | tr ',' ' ')) ||
        return 1
    for v in $VERSIONS; do
        if [ ! -x "$dir/opt/pytrace-venv/$v/bin/python" ]; then
            (enter "$dir" "python$v" -m venv "/opt/pytrace-venv/$v") || return 1
        fi
        # shellcheck disable=SC2086
        (enter "$dir" "/opt/pytrace-venv/$v/bin/python" -m pip install -q --disable-pip-version-check \
            --root-user-action=ignore $PIP_PACKAGES) || return 1
    done
    echo "$SPEC" >"$dir/$STAMP"
    problems "$dir" >/dev/null
}

make_root() {
    local new="$ROOT.new" url
    url=$(mirror)
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    rm -rf --one-file-system "$new"
    echo "sidroot: making $ROOT from $url (debootstrap sid, about a minute)" >&2
    local start=$SECONDS
    if ! debootstrap --variant=minbase --include="$INCLUDE" sid "$new" "$url" >"$ROOT.log" 2>&1; then
        tail -n 20 "$ROOT.log" >&2
        die "debootstrap failed (whole log: $ROOT.log)"
    fi
    echo "sidroot: debootstrap took $((SECONDS - start)) s" >&2
    copy_host_config "$new"
    for v in $VERSIONS; do
        (enter "$new" "python$v" -m venv "/opt/pytrace-venv/$v") ||
            die "python$v -m venv failed inside $new"
        # shellcheck disable=SC2086
        (enter "$new" "/opt/pytrace-venv/$v/bin/python" -m pip install -q --disable-pip-version-check \
            --root-user-action=ignore $PIP_PACKAGES) || die "pip install in the $v venv failed inside $new"
    done
    echo "$SPEC" >"$new/$STAMP"
    local why
    why=$(problems "$new") || die "the new root is not valid: $why"
    rm -rf --one-file-system "$ROOT"
    mv "$new" "$ROOT"
    echo "sidroot: made $ROOT in $((SECONDS - start)) s" >&2
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
ensure)
    [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, mounts)"
    exec 9>"$ROOT.lock"
    flock 9
    cd "$tree" # commands inside keep the working directory: one that exists there
    if why=$(problems "$ROOT"); then
        copy_host_config "$ROOT"
        echo "sidroot: reusing $ROOT" >&2
    else
        start=$SECONDS
        if [ -f "$ROOT/$STAMP" ] && copy_host_config "$ROOT" && repair "$ROOT"; then
            echo "sidroot: updated $ROOT in $((SECONDS - start)) s" >&2
        else
            [ -e "$ROOT" ] && echo "sidroot: remaking $ROOT: $why" >&2
            make_root
        fi
    fi
    echo "$ROOT"
    ;;
check)
    why=$(problems "$ROOT") || die "$why (make it with: bash tests/sidroot.sh ensure)"
    ;;
python)
    [ $# -ge 1 ] || die "usage: sidroot.sh python X.Y [ARGS...]"
    v=$1
    shift
    [ -f "$ROOT/$STAMP" ] || die "no root at $ROOT for python$v (make it with: bash tests/sidroot.sh ensure)"
    enter "$ROOT" "/opt/pytrace-venv/$v/bin/python" "$@"
    ;;
run)
    [ -f "$ROOT/$STAMP" ] || die "no root at $ROOT (make it with: bash tests/sidroot.sh ensure)"
    enter "$ROOT" "$@"
    ;;
*)
    die "usage: sidroot.sh ensure | check | python X.Y [ARGS...] | run CMD..."
    ;;
esac
