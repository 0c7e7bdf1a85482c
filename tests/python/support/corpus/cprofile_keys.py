"""Every form of name cProfile gives a function, run deterministically (test_pstats_keys).

Python: functions, methods, nested functions, lambdas, comprehensions, a generator
(each resume counts as a call). C: module functions (<built-in method builtins.len>),
methods of builtin and extension types (<method 'append' of 'list' objects>), called
bound, unbound (list.append(x, ...)) and on subclass instances (named after the type
that defines them), class and static methods (<built-in method fromkeys>), a method
first called through super() from a Python override (cProfile names it after the
override: <function Hexed.hex at 0x...>), and object.__new__
(<built-in method __new__ of type object at 0x...>).
"""
import collections
import io
import math


class Counter:
    def __init__(self):
        self.items = []

    def add(self, value):
        self.items.append(value)
        return len(self.items)

    @classmethod
    def make(cls):
        return cls()

    @staticmethod
    def double(x):
        return 2 * x


class MyList(list):
    """A subclass that adds nothing: its append is list.append."""


class Hexed(bytearray):
    """Overrides hex and calls the C method through super()."""

    def hex(self):
        return super().hex()


class Plain:
    pass


def squares(n):
    for i in range(n):
        yield i * i


def outer(k):
    def inner(x):
        return x + k
    return sum(map(inner, range(k)))


def main():
    c = Counter.make()
    for i in range(7):
        c.add(Counter.double(i))
    mine = MyList()
    for i in range(5):
        mine.append(i)
    mine.reverse()
    plain = []
    list.append(plain, 1)
    plain.extend([2, 3])
    total = len(plain) + len(mine) + sum(squares(6)) + outer(4)
    total += max([3, 1, 2], key=lambda v: -v)
    total += len({k: v for k, v in zip("abc", range(3))})
    total += len(dict.fromkeys("xyz")) + int.from_bytes(b"\x01\x02", "big")
    table = str.maketrans("ab", "ba")
    text = " ".join(["ab", "ba"]).translate(table).upper()
    buf = io.StringIO()
    buf.write(text)
    dq = collections.deque()
    dq.append(buf.getvalue())
    total += len(dq) + int(math.sqrt(16))
    total += len(Hexed(b"\x01\x02").hex()) + len(bytearray(b"\x03").hex())
    obj = object.__new__(Plain)
    total += isinstance(obj, Plain)
    return total


if __name__ == "__main__":
    print(main())
