"""os._exit is patched in place to finish the segment before the process leaves. A call
that does not exit -- a status outside a C int raises OverflowError, as untraced -- must
leave tracing on: the program catches it and goes on, and what it does next is traced
(before the fix the segment was finished and tracing stopped at the failed call)."""
import subprocess
import sys

JOB = r"""
import os, pytrace
pytrace.start()
for status in (2 ** 40, -2 ** 40, 2 ** 31):
    try:
        os._exit(status)
    except OverflowError:
        pass
print(pytrace.is_tracing(), flush=True)
pytrace.stop()
"""


def test_failed_os_exit_keeps_tracing():
    r = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True"], (r.stdout, r.stderr[-2000:])
