#!/usr/bin/env bash
# Prints the interpreters to install for and test on, one path per line.
# PYTRACE_PYTHONS overrides the versions ("3.11 3.12 3.14 3.15" by default).
# 3.14 and 3.15 are those of the Debian unstable root (tests/sidroot.sh, made by
# .ci/install.sh): their path is a launcher, tests/sid/pythonX.Y, that runs them
# inside it. Any other version is found as pythonX.Y on PATH, else under pyenv's
# versions folder (its shims only answer for the versions `pyenv global` names).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for v in ${PYTRACE_PYTHONS:-3.11 3.12 3.14 3.15}; do
    found=""
    if [ -x "$here/sid/python$v" ]; then
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
        echo "pytrace: Python $v not found (looked for python$v on PATH and under pyenv); set PYTRACE_PYTHONS" >&2
        exit 1
    fi
    echo "$found"
done
