"""Shared by the hub tests: a job of known shape and the installed binaries (pytrace-top, pytrace-hub)."""

import os
import shutil
import textwrap

from helpers import PY


JOB = textwrap.dedent("""
    import sys
    def leaf(i):
        return i + 1
    def middle(n):
        s = 0
        for i in range(n):
            s += leaf(i)
        return s
    def outer(rounds, n, marker):
        for r in range(rounds):
            middle(n)
            if marker and r == rounds // 2:
                open(marker, "w").close()
    outer(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
""")


def _bin(name):
    return shutil.which(name) or os.path.join(os.path.dirname(PY), name)
