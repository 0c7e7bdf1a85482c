"""A job for the reader-lifecycle tests, run under `pytrace run`.

    busy.py GO_FILE [GO_FILE2] [--threads N] [--linger SECONDS]

Waits until GO_FILE exists (a reader is attached), makes calls for a while in N threads,
then, if GO_FILE2 is given, keeps making calls until GO_FILE2 exists (and for SECONDS
more), and exits.
"""
import os
import sys
import threading
import time


def wait_for(path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit("busy: %s never appeared" % path)
        time.sleep(0.002)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def phase(rounds):
    return sum(fib(12) for _ in range(rounds))


def main(argv):
    threads, linger = 1, 0.0
    if "--threads" in argv:
        i = argv.index("--threads")
        threads = int(argv[i + 1])
        del argv[i:i + 2]
    if "--linger" in argv:
        i = argv.index("--linger")
        linger = float(argv[i + 1])
        del argv[i:i + 2]
    wait_for(argv[1])
    workers = [threading.Thread(target=phase, args=(100,)) for _ in range(threads - 1)]
    for t in workers:
        t.start()
    phase(100)
    for t in workers:
        t.join()
    if len(argv) > 2:
        while not os.path.exists(argv[2]):
            phase(5)
            time.sleep(0.001)
        until = time.monotonic() + linger
        while time.monotonic() < until:
            phase(5)
            time.sleep(0.001)
        phase(50)
    print("done")


if __name__ == "__main__":
    main(sys.argv)
