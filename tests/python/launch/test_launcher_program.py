"""A program run under a launcher (`pytrace run`, `record --`) behaves as without pytrace.

- a program that calls os.execv: the segment of the image that exec replaces is ended and
  removed at the exec (the "os.exec" audit event), not left in /dev/shm for good (each
  such run used to leave a 1 GB-sparse segment); a failed exec raises as it would and the
  program goes on;
- a program that calls pytrace.start() itself: under a launcher that traces it already,
  start() does nothing and returns the launcher's segment, its stop() leaves tracing on;
  it used to die with "RuntimeError: already tracing" and exit 1.
"""

import glob
import os
import re
import subprocess
import textwrap

from helpers import PY

EXEC_JOB = textwrap.dedent("""
    import os, sys
    def work():
        return sum(range(1000))
    work()
    try:
        os.execv("/nonexistent/pytrace-test-binary", ["x"])   # a failed exec: raises as always
    except OSError as e:
        print("exec failed:", e.errno, flush=True)
    work()
    os.execv(sys.executable, [sys.executable, "-c", "print('after exec'); raise SystemExit(4)"])
""")

START_JOB = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("error")             # a warning would end the program here
    import pytrace
    def work():
        return sum(range(1000))
    segment = pytrace.start(policy="drop")
    work()
    counters = pytrace.stop()
    with pytrace.trace():
        work()
    print("start returned a segment:", segment.startswith("/pytrace-"), flush=True)
    print("counted events:", counters.events_written > 0, flush=True)
    sys.exit(5)
""")


def _pid_of(stderr):
    m = re.search(r"tracing pid (\d+) into (/pytrace-\S+);", stderr)
    assert m, stderr
    return int(m.group(1)), m.group(2)


def test_run_of_a_program_that_execs_leaves_no_segment(tmp_path):
    job = tmp_path / "exec_job.py"
    job.write_text(EXEC_JOB)
    r = subprocess.run([PY, "-m", "pytrace", "run", str(job)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 4, r.stderr                       # the exec'd program's own code
    assert "exec failed: 2" in r.stdout and "after exec" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    pid, segment = _pid_of(r.stderr)
    left = glob.glob("/dev/shm/pytrace-%d-*" % pid)
    assert left == [], "the exec left its segment: %s" % left


def test_record_of_a_program_that_execs_ends_and_removes_its_segment(tmp_path):
    job = tmp_path / "exec_job.py"
    job.write_text(EXEC_JOB)
    out = tmp_path / "exec.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(out), "--", PY, str(job)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr
    assert "after exec" in r.stdout
    pid, _ = _pid_of(r.stderr)
    assert glob.glob("/dev/shm/pytrace-%d-*" % pid) == []
    from pytrace.recording import RecordingReader
    with RecordingReader(str(out)) as rec:
        states = [m.state for m in rec.messages() if type(m).__name__ == "ProducerStatus"]
    assert states and states[-1] == 3, states                # Exited, at the exec


def test_start_in_a_program_under_run_does_nothing(tmp_path):
    job = tmp_path / "start_job.py"
    job.write_text(START_JOB)
    alone = subprocess.run([PY, str(job)], capture_output=True, text=True, timeout=120)
    r = subprocess.run([PY, "-m", "pytrace", "run", str(job)], capture_output=True, text=True,
                       timeout=120)
    assert alone.returncode == 5, alone.stderr
    assert r.returncode == 5, r.stderr                       # the program's own code
    assert r.stdout == alone.stdout, (r.stdout, alone.stdout)
    assert "Traceback" not in r.stderr and "already tracing" not in r.stderr, r.stderr
    _, segment = _pid_of(r.stderr)
    notes = [l for l in r.stderr.splitlines() if "pytrace.start() does nothing" in l]
    assert len(notes) == 1 and segment in notes[0], r.stderr
    # the launcher kept tracing to the end: its summary counts the program's events
    assert re.search(r"pytrace: \d+ events written", r.stderr), r.stderr
