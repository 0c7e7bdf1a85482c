"""Helper module that the filter test excludes."""


def helper(i):
    return inner(i) * 2


def inner(i):
    return i
