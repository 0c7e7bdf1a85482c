"""Free-threaded CPython (3.14t) is supported: the import no longer refuses an interpreter
whose ABI flags say "t" (tests/python/freethreaded runs the suite's free-threaded cases on a
real 3.14t; this checks, on any build, that the import has no such refusal left)."""

import subprocess
import sys

import pytest

PY = sys.executable

_AS_FREE_THREADED = "import sys\nsys.abiflags += 't'\n"


def test_import_does_not_refuse_an_abi_flagged_free_threaded_python():
    r = subprocess.run([PY, "-c", _AS_FREE_THREADED + "import pytrace; print(pytrace._ext() is not None)"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]


@pytest.mark.skipif("t" in sys.abiflags, reason="a default-build check; this is a free-threaded build "
                    "(tests/python/freethreaded covers it)")
def test_import_works_on_this_default_build():
    """The same check lets the default build through (no "t" among its ABI flags)."""
    r = subprocess.run([PY, "-c", "import pytrace, sys; "
                        "print('t' in sys.abiflags, pytrace._pytrace is not None)"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]
