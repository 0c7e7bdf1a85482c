"""Fork while tracing: the child traces into its own segment from the moment fork()
returns (never into the parent's rings), a child that leaves with os._exit() does not
leave its segment behind, and Python 3.12+ sees no extra thread at fork()."""

import os
import subprocess
import sys
import textwrap

import pytrace._pytrace as native

PROGRAM = textwrap.dedent("""
    import os, sys, warnings
    import pytrace
    warnings.simplefilter("error")          # 3.12+: a multi-threaded fork() warns
    pytrace.start()
    def work(n):
        return sum(range(n))
    pids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            work(1000)
            # one write(2) of < PIPE_BUF bytes: lines of several children never interleave
            os.write(1, (pytrace._pytrace.segment_name() + "\\n").encode())
            os._exit(0)                      # skips every exit handler, like multiprocessing
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    print(pytrace._pytrace.segment_name(), flush=True)
    pytrace.stop()
""")


def _segments_of(pids):
    return [s for s in native.list_segments() if s["pid"] in pids]


def test_fork_children_get_own_segments_and_leave_none_behind(tmp_path):
    script = tmp_path / "forker.py"
    script.write_text(PROGRAM)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "multi-threaded" not in r.stderr
    names = r.stdout.split()
    assert len(names) == 4, r.stdout
    # three children and the parent, each its own segment
    assert len(set(names)) == 4
    child_pids = {int(n.split("-")[1]) for n in names[:3]}
    parent_pid = int(names[3].split("-")[1])
    assert parent_pid not in child_pids
    # the parent's exit removed its own segment and its dead children's
    left = _segments_of(child_pids | {parent_pid})
    assert left == [], left


FORKING_JOB = textwrap.dedent("""
    import glob, os
    def work(n):
        return sum(range(n))
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            work(1000)
            # the child's own segments (pytrace-PID-...): one if it traces, none if not
            mine = glob.glob("/dev/shm/pytrace-%d-*" % os.getpid())
            os.write(1, ("child segments %d\\n" % len(mine)).encode())
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    print("parent done")
""")


def _record(tmp_path, *opts):
    script = tmp_path / "job.py"
    script.write_text(FORKING_JOB)
    out = tmp_path / "job.pytrace"
    r = subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", str(out), *opts, "--",
                        sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def test_record_without_subprocesses_leaves_fork_children_untraced(tmp_path):
    # `record --no-subprocesses`: nothing reads a fork child's segment, so the child is
    # not traced (no segment; under the recorder's policy wait its threads would sit on
    # full rings for nobody). Its output and the job's are the program's own.
    r = _record(tmp_path, "--no-subprocesses")
    assert r.stdout.splitlines() == ["child segments 0", "child segments 0", "parent done"], r.stdout
    assert "not traced" not in r.stderr, r.stderr
    # the default follows them: each child traces into a segment of its own
    r = _record(tmp_path)
    assert r.stdout.splitlines() == ["child segments 1", "child segments 1", "parent done"], r.stdout
