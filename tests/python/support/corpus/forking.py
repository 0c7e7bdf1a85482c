"""os.fork: the child does its own work and exits; the parent works and waits."""
import os

import _harness


def work(n):
    return sum(step(i) for i in range(n))


def step(i):
    return i % 7


def entry_child():
    return work(60) + len(str(os.getpid()))


def entry():
    return work(40)


if __name__ == "__main__":
    _harness.begin(["entry"])
    pid = os.fork()
    if pid == 0:
        _harness.child_begin(["entry_child"])
        entry_child()
        _harness.child_exit(0)
    entry()
    os.waitpid(pid, 0)
    _harness.end()
