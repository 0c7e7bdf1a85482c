"""Child tracing under `pytrace run --subprocesses`: every process of a
multiprocessing.Pool job (fork, spawn and forkserver) and a Python child started with
subprocess traces into its own segment that records its parent; read segment by segment
(a reader per segment, as the hub will), the worker function's calls add up to exactly
the number of tasks. A child that cannot be traced (an interpreter without pytrace) is
counted and reported when the job ends, never silently."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pytrace
import pytrace._pytrace as native
from pytrace.reader import EventChunk, EventKind, ProcessInfo, ProducerStatus, Symbol

from helpers import PY

TASKS = 60

POOL_JOB = textwrap.dedent("""
    import multiprocessing as mp, os, subprocess, sys, time

    GO = sys.argv[2]

    def wait_for_reader():
        # the test attaches a reader to this process's segment, then creates GO/<pid>
        while not os.path.exists(os.path.join(GO, str(os.getpid()))):
            time.sleep(0.005)

    def work(i):
        return i * i

    if __name__ == "__main__":
        wait_for_reader()
        ctx = mp.get_context(sys.argv[1])
        with ctx.Pool(3, initializer=wait_for_reader) as pool:
            # every worker is read before the tasks go (else a worker that starts late finds
            # the work done and is terminated before a reader saw its segment)
            while not all(os.path.exists(os.path.join(GO, str(w.pid))) for w in pool._pool):
                time.sleep(0.005)
            assert sum(pool.map(work, range(%d), chunksize=1)) == sum(i * i for i in range(%d))
        # a Python child through subprocess: its own segment too
        subprocess.run([sys.executable, "-c",
                        "import os, sys; sys.path.insert(0, %%r); import job; job.wait_for_reader(); "
                        "[job.work(i) for i in range(7)]" %% os.path.dirname(os.path.abspath(__file__)),
                        "-", GO], check=True)
""" % (TASKS, TASKS))


class _SegmentReader(threading.Thread):
    """Drains one segment to its end: calls of `work`, ProcessInfo, drops."""

    def __init__(self, name):
        super().__init__(daemon=True)
        self.name_ = name
        self.reader = pytrace.Reader(name, follow=True, hub=False)
        self.calls, self.info, self.dropped, self.error = {}, None, 0, None
        self.symbols = {}

    def run(self):
        try:
            for msg in self.reader:
                if isinstance(msg, ProcessInfo):
                    self.info = msg
                elif isinstance(msg, Symbol):
                    self.symbols[msg.id] = msg.name
                elif isinstance(msg, EventChunk):
                    for ev in msg.iter_events():
                        if ev[3] == int(EventKind.Call):
                            self.calls[ev[1]] = self.calls.get(ev[1], 0) + 1
                        elif ev[3] == int(EventKind.Lost):
                            self.dropped += ev[1] | ev[2] << 32
                elif isinstance(msg, ProducerStatus):
                    self.dropped = max(self.dropped, msg.events_dropped)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def work_calls(self):
        return sum(n for sid, n in self.calls.items() if self.symbols.get(sid) == "work")


def _run_tree(tmp_path, method):
    """Run the job; attach a reader to the segment of every process of its tree (by the
    ppid chain in the segments) before letting the process go on. Returns the readers,
    the job's pid and its stderr."""
    (tmp_path / "job.py").write_text(POOL_JOB)
    go = tmp_path / "go"
    go.mkdir()
    job = subprocess.Popen([PY, "-m", "pytrace", "run", "--subprocesses", "--no-c-calls", "--rings", "8",
                            "--ring-size", "8",
                            str(tmp_path / "job.py"), method, str(go)], stderr=subprocess.PIPE, text=True,
                           cwd=str(tmp_path))
    err = []
    drain = threading.Thread(target=lambda: err.append(job.stderr.read()), daemon=True)
    drain.start()
    tree, readers = {job.pid}, {}
    deadline = time.monotonic() + 120
    while job.poll() is None and time.monotonic() < deadline:
        for s in native.list_segments():
            if s["pid"] in readers or not s.get("alive") or s["ppid"] not in tree and s["pid"] not in tree:
                continue
            tree.add(s["pid"])
            try:
                r = _SegmentReader(s["name"])
            except Exception:  # noqa: BLE001 - a process that ended before we came (no go file: not ours)
                continue
            r.start()
            readers[s["pid"]] = r
            (go / str(s["pid"])).touch()
        time.sleep(0.01)
    if job.poll() is None:
        job.kill()
        pytest.fail("the job did not end")
    for s in native.list_segments():   # the segments of workers the pool terminated (SIGTERM)
        if s["pid"] in tree and not s.get("alive") and s["name"].startswith("/pytrace-"):
            try:
                os.unlink("/dev/shm" + s["name"])
            except OSError:
                pass
    drain.join(30)
    for r in readers.values():
        r.join(60)
        assert not r.is_alive(), r.name_
        assert r.error is None, r.error
    return readers, job.pid, err[0] if err else "", job.returncode


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_children_trace_into_own_segments_and_add_up(tmp_path, method):
    readers, job_pid, stderr, code = _run_tree(tmp_path, method)
    assert code == 0, stderr
    pids = set(readers)
    # each segment is its own process and records its parent, a process of the job
    for pid, r in readers.items():
        assert r.info is not None and r.info.pid == pid
        assert r.info.ppid in pids or r.info.ppid == job_pid or pid == min(pids), (pid, r.info.ppid)
    workers = {pid: r.work_calls() for pid, r in readers.items() if r.work_calls()}
    assert sum(workers.values()) == TASKS + 7, workers       # pool tasks + the subprocess child's 7
    assert any(n == 7 for n in workers.values())              # the subprocess child, on its own
    for pid in workers:
        assert readers[pid].dropped == 0, pid
    assert len(workers) >= 2
    # the launcher counted its children: every process but the first is one
    line = [ln for ln in stderr.splitlines() if "child process" in ln and "traced, each" in ln]
    assert line, stderr
    assert int(line[0].split()[1]) == len(readers) - 1 >= 4, (line, sorted(readers))
    assert "NOT traced" not in stderr


OTHER = "/root/.pyenv/versions/3.13.0/bin/python3.13"


@pytest.mark.skipif(not os.path.exists(OTHER), reason="needs a second interpreter without pytrace")
def test_child_that_cannot_be_traced_is_counted(tmp_path):
    if subprocess.run([OTHER, "-c", "import pytrace._pytrace"], capture_output=True).returncode == 0:
        pytest.skip("%s has pytrace" % OTHER)
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import subprocess, sys
        for _ in range(2):
            subprocess.run([sys.argv[1], "-c", "print('child ran')"], check=True)
        subprocess.run([sys.executable, "-c", "print('traced child ran')"], check=True)
    """))
    r = subprocess.run([PY, "-m", "pytrace", "run", "--subprocesses", str(tmp_path / "job.py"), OTHER],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("child ran") == 3                   # the program is not changed
    lines = [ln for ln in r.stderr.splitlines() if "NOT traced" in ln]
    assert len(lines) == 1, r.stderr
    assert "2 child processes NOT traced" in lines[0] and "no pytrace extension for Python 3.13" in lines[0]
    assert "1 child process traced" in r.stderr


def test_run_quiet_still_reports_untraced_children(tmp_path):
    """The count of untraced children is a loss: said with --quiet too (the launcher's
    own option that record and top use)."""
    if not os.path.exists(OTHER) or subprocess.run([OTHER, "-c", "import pytrace._pytrace"],
                                                   capture_output=True).returncode == 0:
        pytest.skip("needs a second interpreter without pytrace")
    from pytrace import _job
    hook = tmp_path / "hook"
    hook.mkdir()
    _job.write_subprocess_hook(str(hook))
    (tmp_path / "job.py").write_text("import subprocess, sys\nsubprocess.run([sys.argv[1], '-c', 'pass'])\n")
    argv, env = _job.command(PY, [], {}, [str(tmp_path / "job.py"), OTHER], quiet=True,
                             subprocesses=str(hook))
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1 child process NOT traced" in r.stderr
    assert "events written" not in r.stderr                  # quiet otherwise
    assert not hook.exists()                                  # the launcher removed its hook dir


def test_fork_child_exiting_normally_leaves_the_hook_for_later_children(tmp_path):
    """A fork() child inherits the launcher's exit handler: when it exits normally it must
    not remove the job's hook dir (later Python children would silently go untraced) nor
    print the job's summary."""
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import os, subprocess, sys
        pid = os.fork()
        if pid == 0:
            sys.exit(0)                  # normal exit: atexit handlers run in the child
        os.waitpid(pid, 0)
        subprocess.run([sys.executable, "-c", "import sys; print('child', 'sitecustomize' in sys.modules)"],
                       check=True)
    """))
    r = subprocess.run([PY, "-m", "pytrace", "run", "--subprocesses", str(tmp_path / "job.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "child True"
    assert [ln for ln in r.stderr.splitlines() if "child process" in ln] == \
        ["pytrace: 2 child processes traced, each into its own segment"], r.stderr
