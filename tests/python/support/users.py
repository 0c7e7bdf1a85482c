"""Shared by the tests that act as a second local user (segment/test_other_users.py,
attach/test_attach_other_users.py): the user itself (made once, needs root) and Python
run as that user."""

import subprocess
import textwrap

import pytest

from helpers import PY

OTHER = "pytrace-other"


@pytest.fixture(scope="module")
def other_uid():
    r = subprocess.run(["id", "-u", OTHER], capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", OTHER], check=True)
        r = subprocess.run(["id", "-u", OTHER], capture_output=True, text=True, check=True)
    return int(r.stdout)


# Python run as the other user: the interpreter and pytrace are loaded as root (root's
# pyenv is not readable by other users), then the process drops to OTHER's uid and gid
# before the test's code runs. Files it needs come through argv or stdin.
_AS_OTHER = textwrap.dedent("""
    import os, pwd, sys
    import pytrace, pytrace.reader
    pytrace._ext()
    _pw = pwd.getpwnam(%r)
    os.setgroups([])
    os.setgid(_pw.pw_gid)
    os.setuid(_pw.pw_uid)
""") % OTHER


def as_other(code, *args, **kw):
    return subprocess.run([PY, "-c", _AS_OTHER + textwrap.dedent(code), *args], **kw)


def popen_other(code, *args, **kw):
    return subprocess.Popen([PY, "-c", _AS_OTHER + textwrap.dedent(code), *args], **kw)
