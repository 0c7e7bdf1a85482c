"""What pytrace reads from CPython's private layouts, checked on every Python the suite runs
on (3.11, 3.12, 3.14, 3.15 in CI): a layout that changed would not crash but quietly go wrong."""

import subprocess
import sys

PY = sys.executable

_TWO_SESSIONS = """
import json, pytrace

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def session(n):
    pytrace.start(policy="drop")
    fib(n)
    return pytrace.stop()

few, many = session(3), session(20)     # 9 calls of fib, then 21891
print(json.dumps([few.symbols, many.symbols, many.events_written + many.events_dropped]))
"""


def test_a_function_is_named_once_however_often_it_is_called():
    """The hot path reads a code object's symbol id from its co_extra slot itself (the
    layout of CPython's _PyCodeObjectExtra, private to Objects/codeobject.c), where
    PyUnstable_Code_SetExtra wrote it. Read wrong, every call would look like a first
    sight and name the function again: the symbol count would grow with the calls."""
    r = subprocess.run([PY, "-c", _TWO_SESSIONS], capture_output=True, text=True, timeout=120,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    few, many, events = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    assert events >= 2 * 21891                  # every call and return of fib was seen
    assert many == few, (few, many)             # the same functions, named once each
