"""A segment file that shrinks under a live reader (another process truncates it): each
reader (pytrace-top, pytrace.Reader, pytrace record) says so in one line and ends without a
signal, and keeps what it read. They used to die of SIGBUS."""

import os
import shutil
import subprocess
import textwrap
import time

import pytest

from helpers import PY

pytestmark = pytest.mark.reading_side   # the reading programs' bounds (conftest.py)

JOB = textwrap.dedent("""
    import sys, pytrace
    print(pytrace.start(), flush=True)
    def f(i):
        return i + 1
    n = 0
    for i in range(100000):
        n = f(n)
    sys.stdin.read()          # blocks in C: the job writes nothing more after this
""")

READER = textwrap.dedent("""
    import sys, pytrace
    n = 0
    try:
        with pytrace.Reader(sys.argv[1], follow=True, hub=False) as r:
            for m in r:
                n += 1
                if n == 1:
                    print("reading", flush=True)
    except OSError as e:
        print("error:", e, flush=True)
    print("messages", n, flush=True)
""")


def top_binary():
    return shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")


@pytest.fixture
def job(tmp_path):
    src = tmp_path / "job.py"
    src.write_text(JOB)
    proc = subprocess.Popen([PY, str(src)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    segment = proc.stdout.readline().strip()
    assert segment.startswith("/pytrace-"), segment
    yield proc, segment
    proc.kill()                 # its own writes to the shrunk file would fault
    proc.wait()
    try:
        os.unlink("/dev/shm" + segment)
    except FileNotFoundError:
        pass


def _shrink(segment):
    os.truncate("/dev/shm" + segment, 4096)


def _wait_read(check, seconds=30):
    end = time.time() + seconds
    while time.time() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("the reader read nothing")


def test_pytrace_top_survives_shrink(job, tmp_path):
    proc, segment = job
    out = tmp_path / "top.json"
    with open(out, "w") as f:
        top = subprocess.Popen([top_binary(), "--no-hub", segment, "--once", "--json", "--duration", "4"],
                               stdout=f, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        _shrink(segment)
        _, err = top.communicate(timeout=60)
    assert top.returncode >= 0, "pytrace-top died of signal %d" % -top.returncode
    import json
    snap = json.loads(out.read_text())
    assert "shrank under the reader" in snap.get("error", ""), snap.get("error")
    assert snap["events_read"] >= 200000        # what it read before is kept
    assert any(r["name"] == "f" and r["calls"] == 100000 for r in snap["functions"])


def test_reader_survives_shrink(job, tmp_path):
    proc, segment = job
    src = tmp_path / "reader.py"
    src.write_text(READER)
    rd = subprocess.Popen([PY, str(src), segment], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    assert rd.stdout.readline().strip() == "reading"
    time.sleep(1.0)
    _shrink(segment)
    out, err = rd.communicate(timeout=60)
    assert rd.returncode == 0, "reader exit %d: %s" % (rd.returncode, err[-2000:])
    lines = out.strip().splitlines()
    assert lines[0].startswith("error:") and "shrank under the reader" in lines[0], out
    assert int(lines[-1].split()[1]) > 10


def _calls_in(path):
    """Python calls in a recording so far (it is compressed: its size says little)."""
    from pytrace.recording import RecordingError, RecordingReader
    calls = 0
    try:
        with RecordingReader(str(path)) as r:
            for m in r.messages():
                if type(m).__name__ == "EventChunk":
                    calls += sum(1 for e in m.iter_events() if e[3] == 1)
    except RecordingError:
        pass                    # the tail being written
    return calls


def test_record_survives_shrink(job, tmp_path):
    proc, segment = job
    path = tmp_path / "out.pytrace"
    rec = subprocess.Popen([PY, "-m", "pytrace", "record", "--no-hub", "-o", str(path), str(proc.pid)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_read(lambda: path.exists() and _calls_in(path) >= 100000, seconds=60)
    time.sleep(0.5)
    _shrink(segment)
    out, _ = rec.communicate(timeout=60)
    assert rec.returncode == 1, "record exit %d: %s" % (rec.returncode, out)
    lines = [l for l in out.splitlines() if "shrank under the reader" in l]
    assert len(lines) == 1, out
    assert "ended without reporting its exit" not in out
    assert _calls_in(path) >= 100000
