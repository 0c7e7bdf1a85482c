"""User spans (context manager, decorator, bare decorator) and marks."""
import pytrace

import _harness


@pytrace.span("decorated step")
def step(i):
    return i + 1


@pytrace.span
def bare(i):
    return i * 2


def entry():
    total = 0
    for epoch in range(3):
        pytrace.mark("epoch %d" % epoch)
        with pytrace.span("load batch"):
            total += step(epoch)
        total += bare(epoch)
    return total


if __name__ == "__main__":
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
