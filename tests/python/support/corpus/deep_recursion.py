"""A recursion 30,000 calls deep (the program raises the recursion limit), which runs
untraced on 3.11+ because Python-to-Python calls use no C stack there."""
import sys

import _harness

DEPTH = 30000


def rec(n):
    return 0 if n == 0 else rec(n - 1) + 1


def entry():
    return rec(DEPTH)


if __name__ == "__main__":
    sys.setrecursionlimit(DEPTH + 1000)
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
