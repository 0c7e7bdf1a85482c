#!/usr/bin/env bash
# Prints the interpreters to install for and test on, one path per line.
# PYTRACE_PYTHONS overrides the versions ("3.11 3.12 3.14 3.15 3.14t" by default).
# 3.14t is the free-threaded CPython 3.14.7 that tests/freethreaded.sh builds into
# /opt/python3.14t (PYTRACE_FT_PREFIX); .ci/install.sh builds it first when it is missing.
# 3.14 and 3.15 are those of the Debian unstable root (tests/sidroot.sh, made by
# .ci/install.sh): their path is a launcher, tests/sid/pythonX.Y, that runs them
# inside it. Any other version is found as pythonX.Y on PATH, else under pyenv's
# versions folder (its shims only answer for the versions `pyenv global` names).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for v in ${PYTRACE_PYTHONS:-3.11 3.12 3.14 3.15 3.14t}; do
    found=""
    ft=${PYTRACE_FT_PREFIX:-/opt/python3.14t}/bin/python$v
    if [ "$v" = 3.14t ]; then
        [ -x "$ft" ] && found=$ft
    elif [ -x "$here/sid/python$v" ]; then
        found=$here/sid/python$v
    elif p=$(command -v "python$v" 2>/dev/null) && "$p" -c 'pass' 2>/dev/null; then
        found=$p
    else
        root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
        for cand in $(ls -d "$root"/versions/"$v".*/bin/"python$v" 2>/dev/null | sort -V -r); do
            found=$cand
            break
        done
    fi
    if [ -z "$found" ]; then
        if [ "$v" = 3.14t ]; then
            echo "pytrace: Python 3.14t not found at $ft (tests/freethreaded.sh ensure builds it); set PYTRACE_PYTHONS" >&2
        else
            echo "pytrace: Python $v not found (looked for python$v on PATH and under pyenv); set PYTRACE_PYTHONS" >&2
        fi
        exit 1
    fi
    echo "$found"
done
