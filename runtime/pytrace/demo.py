"""A small bundled job for trying pytrace: `pytrace run -m pytrace.demo`.

Two threads with a known shape: `heavy` does three times the work of `light`,
plus recursion, a generator, JSON and regex work, and a user span per round.
"""
import json
import re
import sys
import threading
import time

import pytrace

WORD = re.compile(r"[a-z]+")


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def heavy():
    return spin(30000)


def light():
    return spin(10000)


def numbers(limit):
    for i in range(limit):
        yield i * 2


def parse_round(i):
    text = json.dumps({"round": i, "words": ["alpha", "beta", "gamma"] * 10})
    return len(WORD.findall(json.loads(text)["words"][0] * 5)) + sum(numbers(50))


def worker(rounds):
    for i in range(rounds):
        with pytrace.span("round"):
            heavy()
            light()
            fib(12)
            parse_round(i)


def main(argv):
    seconds = float(argv[1]) if len(argv) > 1 else 3.0
    deadline = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < deadline:
        threads = [threading.Thread(target=worker, args=(20,), name=f"worker-{k}") for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rounds += 40
        pytrace.mark(f"batch {rounds}")
    print(f"demo: {rounds} rounds in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
