"""Exceptions raised deep and caught at various depths, re-raised, and in C calls."""
import _harness


class AppError(Exception):
    pass


def level(n, fail_at):
    if n == fail_at:
        raise AppError(n)
    return level(n + 1, fail_at) if n < 10 else n


def catch_at(depth_catch, fail_at):
    def inner(k):
        if k == depth_catch:
            try:
                return level(k, fail_at)
            except AppError:
                return -1
        return inner(k + 1)
    return inner(0)


def reraise():
    try:
        level(0, 3)
    except AppError as e:
        raise RuntimeError("wrapped") from e


def c_raises():
    try:
        int("not a number")
    except ValueError:
        pass
    try:
        {}["missing"]
    except KeyError:
        pass


def entry():
    total = 0
    for d in range(4):
        total += catch_at(d, 6)
    for _ in range(3):
        try:
            reraise()
        except RuntimeError:
            total += 1
    c_raises()
    return total


if __name__ == "__main__":
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
