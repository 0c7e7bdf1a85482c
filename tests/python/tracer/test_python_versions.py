"""What pytrace reads from CPython's private layouts, checked on every Python the suite runs
on (3.11, 3.12, 3.14, 3.15 in CI): a layout that changed would not crash but quietly go wrong."""

import subprocess
import sys

import pytest

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


# The program's view of its __main__: every dunder name, with the values that do not depend
# on the run (a loader or spec by its type).
_MAIN_PROBE = (
    "import sys\n"
    "shown = ('__cached__', '__file__', '__package__', '__annotations__', '__doc__', '__name__')\n"
    "print(sorted((k, repr(v) if k in shown else type(v).__name__)\n"
    "             for k, v in globals().items() if k.startswith('__')))\n"
)


@pytest.mark.parametrize("form", ["script", "-c", "stdin", "-m"])
def test_main_module_is_pythons_on_this_version(tmp_path, form):
    """What python puts in __main__ changes between versions (3.14 has no __annotations__
    there, 3.15 no __cached__): a program run by `pytrace run` sees the same names and
    values as under plain python, for each way of naming the program."""
    (tmp_path / "probe.py").write_text(_MAIN_PROBE)
    args, stdin = {"script": (["probe.py"], None), "-c": (["-c", _MAIN_PROBE], None),
                   "stdin": (["-"], _MAIN_PROBE), "-m": (["-m", "probe"], None)}[form]
    plain = subprocess.run([PY, *args], cwd=tmp_path, input=stdin, capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    traced = subprocess.run([PY, "-m", "pytrace", "run", *args], cwd=tmp_path, input=stdin,
                            capture_output=True, text=True, timeout=60)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    assert "__builtins__" in plain.stdout and "__name__', \"'__main__'\"" in plain.stdout
