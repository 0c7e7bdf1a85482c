"""A small /dev/shm (a container's, a CI runner's): the program always runs, and the
smallest configuration traces where it fits.

Each test runs in a private mount namespace (`unshare -m`) with its own small tmpfs on
/dev/shm, so nothing else on the machine sees it. Before: with 2 MiB even `--rings 1
--ring-size 1` failed (the 8 MiB symbol log had to fit whole), the program never ran
(exit 1), and the message suggested a configuration that did not fit either.
"""

import os
import re
import shutil
import subprocess
import textwrap

import pytest

from helpers import PY

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="needs root and unshare for a private /dev/shm")

JOB = textwrap.dedent("""
    import sys
    def f(n):
        return n + 1
    print("program output", sum(f(i) for i in range(1000)), flush=True)
    sys.exit(6)
""")


def _in_small_shm(size, *commands):
    """Run each command (a list) in one private mount namespace whose /dev/shm is a
    tmpfs of `size`; -> [(returncode, stdout, stderr)]."""
    script = ["mount -t tmpfs -o size=%s tmpfs /dev/shm || exit 99" % size]
    for i, cmd in enumerate(commands):
        q = " ".join("'%s'" % c.replace("'", "'\\''") for c in cmd)
        script.append("%s >$OUT/o%d 2>$OUT/e%d; echo $? >$OUT/r%d" % (q, i, i, i))
    return script


def _run(tmp_path, size, *commands):
    out = tmp_path / "out"
    out.mkdir()
    script = "\n".join(_in_small_shm(size, *commands))
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], env=dict(os.environ, OUT=str(out)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr)
    return [(int((out / ("r%d" % i)).read_text()), (out / ("o%d" % i)).read_text(),
             (out / ("e%d" % i)).read_text()) for i in range(len(commands))]


def test_run_in_a_2_mib_shm(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    alone = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=60)
    (rc_default, out_default, err_default), (rc_small, out_small, err_small) = _run(
        tmp_path, "2m",
        [PY, "-m", "pytrace", "run", str(job)],
        [PY, "-m", "pytrace", "run", "--rings", "1", "--ring-size", "1", str(job)])
    # the default (4 MiB rings) does not fit: one line with what it needs and what is
    # free, and the program runs, untraced, with its own output and exit status
    assert rc_default == alone.returncode == 6, err_default
    assert out_default == alone.stdout
    lines = [l for l in err_default.splitlines() if "cannot start tracing" in l]
    assert len(lines) == 1 and "the program runs untraced" in lines[0], err_default
    m = re.search(r"not enough room in /dev/shm for a segment: it needs (\d+) KiB .*, (\d+) KiB are "
                  r"free; .*\(--rings 1 --ring-size 0\.01 needs (\d+) KiB\)", lines[0])
    assert m, lines[0]
    needed, free, smallest = (int(x) for x in m.groups())
    assert needed > free and 1900 <= free <= 2048 and smallest < 256, lines[0]
    # one 1 MiB ring fits: the symbol log is cut to what is left, and it traces
    assert rc_small == 6 and out_small == alone.stdout, err_small
    assert "tracing pid" in err_small and "cannot start" not in err_small, err_small
    assert re.search(r"pytrace: \d+ events written", err_small), err_small


def test_smallest_configuration_records_in_a_256_kib_shm(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    rec = tmp_path / "small.pytrace"
    [(rc, out, err)] = _run(tmp_path, "256k",
                            [PY, "-m", "pytrace", "record", "-o", str(rec), "--rings", "1",
                             "--ring-size", "0.01", "--", PY, str(job)])
    assert rc == 6 and "program output" in out, err
    assert "Traceback" not in err, err
    from pytrace.recording import RecordingReader
    with RecordingReader(str(rec)) as r:
        msgs = list(r.messages())
    events = sum(m.count for m in msgs if type(m).__name__ == "EventChunk")
    names = {m.name for m in msgs if type(m).__name__ == "Symbol"}
    assert events >= 2000, events                       # f() 1000 times, call and return
    assert "f" in names


def test_start_in_a_2_mib_shm_says_what_it_needs(tmp_path):
    code = ("import pytrace\n"
            "try:\n"
            "    pytrace.start()\n"
            "except OSError as e:\n"
            "    print('refused:', e.strerror)\n"
            "print('segment:', pytrace.start(ring_count=1, chunk_bytes=4096, chunks_per_ring=2))\n"
            "pytrace.stop()\n")
    [(rc, out, err)] = _run(tmp_path, "2m", [PY, "-c", code])
    assert rc == 0, err
    assert re.search(r"refused: not enough room in /dev/shm for a segment: it needs \d+ KiB", out), out
    assert "segment: /pytrace-" in out, out
