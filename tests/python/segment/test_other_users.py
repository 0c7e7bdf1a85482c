"""Another local user plants files of pytrace's name pattern in /dev/shm (a FIFO, a symlink,
a file that shrinks and regrows, 40,000 names of the old pattern) and tries to read root's
job. None of it hangs or crashes root's `pytrace ls`, `pytrace-top` or traced programs, stops
`pytrace run`, or gives the other user a root job's segment.

Needs root (to create the second user); skipped otherwise."""

import os
import re
import shutil
import signal
import stat
import subprocess
import textwrap
import time

import pytest

from helpers import PY
from users import as_other, other_uid, popen_other  # noqa: F401 (other_uid: a fixture)

SHM = "/dev/shm"
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None
                                or shutil.which("runuser") is None,
                                reason="needs root, useradd and runuser to act as a second user")


def run_pytrace(*args, timeout=60, **kw):
    return subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def top_binary():
    return shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")


def _clean(prefixes):
    for n in os.listdir(SHM):
        if any(n.startswith(p) for p in prefixes):
            p = os.path.join(SHM, n)
            try:
                if os.path.isdir(p) and not os.path.islink(p):
                    os.rmdir(p)
                else:
                    os.unlink(p)
            except FileNotFoundError:
                pass


def _assert_no_signal(r, what):
    assert r.returncode >= 0, "%s died of signal %d: %s" % (what, -r.returncode, r.stderr[-2000:])


@pytest.fixture
def planted(other_uid, tmp_path):
    """The other user's FIFO, symlink and a file of our pattern that it shrinks and regrows
    in a loop (a valid segment header copied in, so a reader that maps it reads on)."""
    prefixes = ["pytrace-424242-", "pytrace-424243-", "pytrace-424244-"]
    _clean(prefixes)
    maker = tmp_path / "maker.py"
    maker.write_text(textwrap.dedent("""
        import sys, pytrace
        name = pytrace.start()
        data = open("/dev/shm" + name, "rb").read()
        pytrace.stop()
        sys.stdout.buffer.write(data[:1 << 20])
    """))
    header = subprocess.run([PY, str(maker)], check=True, timeout=60, capture_output=True).stdout
    proc = popen_other("""
        fifo = "/dev/shm/pytrace-424242-0"
        os.mkfifo(fifo, 0o666)
        os.symlink("/etc/passwd", "/dev/shm/pytrace-424243-0")
        path = "/dev/shm/pytrace-424244-0"
        big = 73 << 20
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, sys.stdin.buffer.read())
        print("ready", flush=True)
        import time
        end = time.time() + 120
        while time.time() < end:
            os.ftruncate(fd, 4096)
            os.ftruncate(fd, big)
    """, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdin.write(header)
    proc.stdin.close()
    assert proc.stdout.readline().strip() == b"ready"
    yield proc
    proc.kill()
    proc.wait()
    _clean(prefixes)


@pytest.mark.reading_side   # the readers against planted files (conftest.py)
def test_planted_files_do_not_hang_or_crash_root_tools(planted, other_uid, tmp_path):
    """`pytrace ls`, `pytrace ls --all`, pytrace-top's list and a traced program's exit
    (which collects its children's segments) go on while another user's FIFO, symlink and
    shrinking file sit in /dev/shm; they are listed as what they are and left in place."""
    for _ in range(5):
        r = run_pytrace("ls", "--all", timeout=30)
        _assert_no_signal(r, "pytrace ls --all")
        assert r.returncode == 0, r.stderr
        assert "pytrace-424244-0" in r.stdout and "owned by uid %d" % other_uid in r.stdout
        r = run_pytrace("ls", timeout=30)
        _assert_no_signal(r, "pytrace ls")
        assert r.returncode == 0, r.stderr
    r = subprocess.run([top_binary()], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    _assert_no_signal(r, "pytrace-top list")
    assert r.returncode == 0, r.stderr
    script = tmp_path / "done.py"
    script.write_text("print('done')\n")
    for _ in range(10):
        r = run_pytrace("run", str(script), timeout=30)
        _assert_no_signal(r, "traced program")
        assert r.returncode == 0 and "done" in r.stdout, r.stderr
    assert stat.S_ISFIFO(os.lstat(SHM + "/pytrace-424242-0").st_mode)
    assert os.path.islink(SHM + "/pytrace-424243-0")
    assert os.path.exists(SHM + "/pytrace-424244-0")


def test_pre_created_names_do_not_stop_pytrace_run(other_uid, tmp_path):
    """40,000 names of the old /pytrace-<pid>-<seq> pattern, planted for the pids the next
    jobs will get, do not stop root's `pytrace run`: names carry a random part."""
    r = as_other("""
        first = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
        for pid in range(first, first + 40):
            for seq in range(1000):
                open("/dev/shm/pytrace-%d-%d" % (pid, seq), "w").close()
        print(first)
    """, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    first = int(r.stdout)
    try:
        ran = 0
        script = tmp_path / "ran.py"
        script.write_text("print('ran')\n")
        for _ in range(6):
            r = run_pytrace("run", str(script), timeout=60)
            assert r.returncode == 0 and "ran" in r.stdout, r.stderr
            ran += 1
        assert ran == 6
    finally:
        _clean(["pytrace-%d-" % pid for pid in range(first, first + 40)])


def test_other_user_cannot_read_root_job(other_uid, tmp_path):
    """A root job's segment is 0600 root; the other user's pytrace-top and pytrace.Reader are
    refused in one line, and a pid lookup ignores files that are not the caller's."""
    job = tmp_path / "job.py"
    job.write_text("import time\nfor _ in range(300):\n    time.sleep(0.1)\n")
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", str(job)], stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stderr.readline()
        m = re.search(r"(/pytrace-\d+-\d+-[0-9a-f]{16})", line)
        assert m, line
        seg = m.group(1)
        st = os.stat(SHM + seg)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
        code = """
            try:
                pytrace.Reader(sys.argv[1])
            except Exception as e:
                print("refused:", e)
        """
        r = as_other(code, seg, capture_output=True, text=True, timeout=30)
        assert r.stdout.startswith("refused:"), r.stdout + r.stderr
        assert len(r.stdout.strip().splitlines()) == 1, r.stdout
        # by pid: the other user's lookup does not find (or open) root's file
        r = as_other(code, str(proc.pid), capture_output=True, text=True, timeout=30)
        assert r.stdout.startswith("refused:") and "no pytrace segment for pid" in r.stdout, r.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


@pytest.mark.reading_side   # the readers against planted files (conftest.py)
def test_root_does_not_map_other_users_segment(other_uid, tmp_path):
    """A valid segment of the other user's job is listed by root's `pytrace ls --all` from
    its owner alone (not opened), and root's pid lookup does not pick it."""
    proc = popen_other("""
        import time
        print(pytrace.start(), flush=True)
        time.sleep(60)
    """, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"(/pytrace-(\d+)-\d+-[0-9a-f]{16})", line)
        assert m, line
        seg, pid = m.group(1), m.group(2)
        r = run_pytrace("ls", "--all", "--json", timeout=30)
        import json
        entry = [s for s in json.loads(r.stdout) if s["name"] == seg][0]
        assert entry["uid"] == other_uid and not entry["valid"]
        assert "owned by uid %d" % other_uid in entry["error"]
        r = subprocess.run([top_binary(), pid, "--once"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "no pytrace segment for pid" in r.stderr, r.stderr
    finally:
        proc.kill()
        proc.wait(timeout=30)
        _clean(["pytrace-%d-" % proc.pid])
