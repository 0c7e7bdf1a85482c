"""Filters: with exclude=["filtered_helper"], nothing of that module is traced."""
import filtered_helper

import _harness


def mine(i):
    return filtered_helper.helper(i) + 1


def entry():
    return sum(mine(i) for i in range(30))


if __name__ == "__main__":
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
