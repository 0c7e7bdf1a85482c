"""Threads started before tracing starts (they wait for a go signal) and after."""
import threading

import _harness


def crunch(n):
    return sum(square(i) for i in range(n))


def square(x):
    return x * x


def entry_thread(n):
    return crunch(n) + len(str(n))


def early_worker(go, n):
    go.wait()
    entry_thread(n)


def late_worker(n):
    entry_thread(n)


def entry():
    return crunch(100)


if __name__ == "__main__":
    go = threading.Event()
    early = [threading.Thread(target=early_worker, args=(go, 50 + i)) for i in range(3)]
    for t in early:
        t.start()
    _harness.begin(["entry", "entry_thread"])
    late = [threading.Thread(target=late_worker, args=(70 + i,)) for i in range(3)]
    for t in late:
        t.start()
    go.set()
    entry()
    for t in early + late:
        t.join()
    _harness.end()
