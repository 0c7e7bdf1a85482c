"""Generators: plain iteration, yield from, send, throw, close, generator expressions."""
import _harness


def count_up(n):
    for i in range(n):
        yield i


def delegate(n):
    yield -1
    yield from count_up(n)
    result = yield from inner_return()
    yield result


def inner_return():
    yield "x"
    return 42


def accumulator():
    total = 0
    while True:
        try:
            value = yield total
        except ValueError:
            total = -total
            continue
        if value is None:
            break
        total += value
    return total


def guarded():
    try:
        while True:
            yield 1
    finally:
        cleanup()


def cleanup():
    return None


def entry():
    out = sum(count_up(30))
    out += len(list(delegate(10)))
    acc = accumulator()
    next(acc)
    for v in range(20):
        acc.send(v)
    acc.throw(ValueError)
    acc.send(5)
    try:
        acc.send(None)
    except StopIteration as stop:
        out += stop.value
    g = guarded()
    next(g)
    next(g)
    g.close()
    out += sum(x * 2 for x in count_up(15))
    return out


if __name__ == "__main__":
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
