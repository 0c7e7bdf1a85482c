"""Deep recursion, mutual recursion and small method calls."""
import sys

import _harness


def depth(n):
    if n == 0:
        return 0
    return 1 + depth(n - 1)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm1(self):
        return abs(self.x) + abs(self.y)

    def moved(self, dx):
        return Point(self.x + dx, self.y)


def entry():
    total = depth(400) + fib(15)
    for i in range(50):
        total += is_even(i * 3)
    p = Point(1, -2)
    for i in range(200):
        p = p.moved(1)
        total += p.norm1()
    return total


if __name__ == "__main__":
    sys.setrecursionlimit(5000)
    _harness.begin(["entry"])
    result = entry()
    _harness.end()
    print(result)
