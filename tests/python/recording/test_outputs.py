"""Output files of record and export: a link planted at the output path is replaced, never
written through; an export never overwrites its own input; files are owner-only (they
hold command lines and code names); Ctrl-C during an export leaves no partial output and
no temporary files, and prints no traceback."""

import os
import signal
import stat
import subprocess
import time

import pytest

from helpers import PY

JOB = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
for _ in range(%d):
    fib(18)
"""


def _record(tmp_path, out, rounds=2):
    job = tmp_path / "job.py"
    job.write_text(JOB % rounds)
    return subprocess.run([PY, "-m", "pytrace", "record", "-o", str(out), "--no-c-calls", "--",
                           PY, str(job)], capture_output=True, text=True, timeout=300)


def _export(rec, out, fmt="collapsed"):
    return subprocess.run([PY, "-m", "pytrace", "export", str(rec), "-f", fmt, "-o", str(out)],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def recording(tmp_path):
    rec = tmp_path / "rec.pytrace"
    r = _record(tmp_path, rec)
    assert r.returncode == 0, r.stderr
    return rec


def test_record_replaces_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "out.pytrace"
    link.symlink_to(victim)
    r = _record(tmp_path, link)
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "keep"
    st = os.lstat(link)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_export_replaces_a_planted_link_and_is_owner_only(tmp_path, recording):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for fmt, name in (("collapsed", "o.folded"), ("pstats", "o.pstats"), ("speedscope", "o.json")):
        link = tmp_path / name
        link.symlink_to(victim)
        r = _export(recording, link, fmt)
        assert r.returncode == 0, r.stderr
        assert victim.read_text() == "keep"
        st = os.lstat(link)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, fmt
    assert stat.S_IMODE(os.stat(recording).st_mode) == 0o600


def test_export_refuses_its_own_input(tmp_path, recording):
    before = recording.read_bytes()
    link = tmp_path / "alias.folded"
    link.symlink_to(recording)
    for out in (recording, link):
        r = _export(recording, out)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "is the input recording" in lines[0], r.stderr
        assert recording.read_bytes() == before


def test_ctrl_c_during_export_leaves_nothing(tmp_path):
    rec = tmp_path / "big.pytrace"
    r = _record(tmp_path, rec, rounds=40)
    assert r.returncode == 0, r.stderr
    outdir = tmp_path / "out"
    outdir.mkdir()
    before = set(os.listdir(outdir))
    # the signal must come while the export writes (its temporary files exist); on a
    # loaded machine the export may finish before this process looks, or before the
    # signal lands: then it is tried again
    for attempt in range(5):
        proc = subprocess.Popen([PY, "-m", "pytrace", "export", str(rec), "-f", "speedscope",
                                 "-o", str(outdir / "p.json")], stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and not (set(os.listdir(outdir)) - before) and proc.poll() is None:
            time.sleep(0.01)
        assert set(os.listdir(outdir)) != before, "the export wrote nothing to interrupt"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            break
        assert os.path.exists(outdir / "p.json"), err      # finished first: a whole export
        os.unlink(outdir / "p.json")
    else:
        pytest.fail("the export finished before this test could interrupt it, 5 times")
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert set(os.listdir(outdir)) == before, os.listdir(outdir)
