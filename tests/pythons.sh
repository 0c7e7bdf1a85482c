#!/usr/bin/env bash
# Prints the interpreters to install for and test on, one path per line.
# PYTRACE_PYTHONS overrides the versions ("3.11 3.12" by default). A version is
# found as pythonX.Y on PATH, else under pyenv's versions folder (its shims only
# answer for the versions `pyenv global` names).
set -euo pipefail
for v in ${PYTRACE_PYTHONS:-3.11 3.12}; do
    found=""
    if p=$(command -v "python$v" 2>/dev/null) && "$p" -c 'pass' 2>/dev/null; then
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
