"""Free-threaded CPython (3.13t, 3.14t): pytrace refuses to load there, in one clear line.

No free-threaded interpreter is packaged for our machines, so the test makes this one report
what such a build reports (the ABI flag "t" in sys.abiflags) in a fresh process before
`import pytrace`. The build refuses too (runtime/CMakeLists.txt, pt_tracer.h); that needs a
free-threaded interpreter's headers and is not tested here."""

import subprocess
import sys

PY = sys.executable

_AS_FREE_THREADED = "import sys\nsys.abiflags += 't'\n"


def test_import_refuses_free_threaded_python_in_one_line():
    r = subprocess.run([PY, "-c", _AS_FREE_THREADED + "import pytrace"], capture_output=True,
                       text=True, timeout=60, cwd="/")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    v = "%d.%d" % sys.version_info[:2]
    assert last.startswith("ImportError: pytrace does not support free-threaded Python yet: "
                           "Python %st runs without the GIL" % v), r.stderr
    assert "use the default build (python%s, not python%st)" % (v, v) in last


def test_import_works_on_this_default_build():
    """The same check lets the default build through (no "t" among its ABI flags)."""
    r = subprocess.run([PY, "-c", "import pytrace, sys; "
                        "print('t' in sys.abiflags, pytrace._pytrace is not None)"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]
