"""pytrace-top beyond the table's numbers (issue 10, items 8-10):

- CPU: the table is wall time (a sleeping frame counts), so pytrace-top also shows what
  the kernel counted (/proc, read by the viewer): the process's and each thread's CPU%,
  on the screen, in --once text and in --json. The job here has a thread that spins and
  one that sleeps: the spinning thread's CPU% is high, the sleeping one's near 0, while
  the sleeping function's wall share is high. Bounds are generous (the machine is
  shared); nothing asserts a duration.
- The status line names the selected thread; at 60 columns the function names are not
  cut to 8 characters while number columns keep their full width.
- The job list hides ended segments of other processes, as `pytrace ls` does.
- `pytrace top --help` gives its three forms, the job options and pytrace-top's options,
  and its guide (docs/top.md) documents every pytrace-top option.

Needs the package installed (pytrace-top on PATH, or PYTRACE_TOP) and tmux.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from topkit import ROOT, TOP, WORKLOAD, Tmux, rows_by_name

PY = sys.executable

pytestmark = [
    pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed (pip install /work/main)"),
]
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

CPU_WORKLOAD = r'''
import sys, threading, time

def spin_loop(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(20000):
            n += i
    return n

def nap(seconds):
    time.sleep(seconds)

def sleeper(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        nap(0.2)

seconds = float(sys.argv[1])
threads = [threading.Thread(target=spin_loop, args=(seconds,), name="spinner"),
           threading.Thread(target=sleeper, args=(seconds,), name="sleeper")]
for t in threads:
    t.start()
for t in threads:
    t.join()
'''


class Job:
    """`python -m pytrace run SCRIPT ARGS` with its pid and segment; stop() kills it."""

    def __init__(self, tmp, name, source, *args):
        self.script = os.path.join(str(tmp), name)
        with open(self.script, "w") as f:
            f.write(source)
        self.proc = subprocess.Popen([PY, "-m", "pytrace", "run", self.script, *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.segment = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"into (/pytrace-\S+?);", line)
            if m:
                self.segment = m.group(1)
                break
        if not self.segment:
            self.stop()
            pytest.fail("the traced job did not announce its segment")

    def kill(self):
        """SIGKILL: the job leaves its segment behind, its pid gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        self.kill()
        if self.segment:
            try:
                os.unlink("/dev/shm" + self.segment)
            except OSError:
                pass


@pytest.fixture(scope="module")
def cpu_job(tmp_path_factory):
    j = Job(tmp_path_factory.mktemp("cpu"), "cpu_work.py", CPU_WORKLOAD, 600)
    time.sleep(1.0)
    yield j
    j.stop()


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    j = Job(tmp_path_factory.mktemp("top"), "workload_top.py", WORKLOAD, 600)
    time.sleep(1.0)
    yield j
    j.stop()


def _threads_by_name(doc):
    return {t["name"]: t for t in doc["threads"]}


# ---- CPU -------------------------------------------------------------------------------

def test_once_json_gives_cpu_of_each_thread_and_wall_shares(cpu_job):
    r = subprocess.run([TOP, str(cpu_job.pid), "--once", "--json", "--duration", "3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    threads = _threads_by_name(doc)
    spinner, sleeper = threads["spinner"], threads["sleeper"]
    assert doc["cpu_basis"] == "measured" and doc["cpu_measured_seconds"] > 1.0, doc
    # the kernel's figures: the spinning thread works, the sleeping one does not
    assert spinner["cpu_pct"] > 20.0, spinner
    assert sleeper["cpu_pct"] < 5.0, sleeper
    assert spinner["cpu_seconds"] > sleeper["cpu_seconds"]
    # the process counts all its threads; with the GIL, at most about one core
    assert doc["cpu_pct"] >= spinner["cpu_pct"] - 5.0, doc["cpu_pct"]
    assert doc["cpu_pct"] < 150.0, doc["cpu_pct"]
    # the table is wall time: the sleeping function's share is high, and the shares of
    # the three threads add up to well over what the process used
    rows = rows_by_name(doc)
    assert rows["time.sleep"]["self_wall_pct"] > 50.0, rows["time.sleep"]
    assert rows["sleeper"]["total_wall_pct"] > 50.0, rows["sleeper"]
    assert rows["spin_loop"]["self_wall_pct"] > 50.0, rows["spin_loop"]
    assert sum(f["self_wall_pct"] for f in doc["functions"]) > doc["cpu_pct"] + 100.0


def test_once_text_gives_cpu_and_says_wall(cpu_job):
    r = subprocess.run([TOP, str(cpu_job.pid), "--once", "--duration", "2", "--limit", "10"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.search(r"cpu \d+\.\d% over \d+\.\d s$", lines[0]), lines[0]
    spinner = [x for x in lines if x.rstrip().endswith(" spinner")]
    sleeper = [x for x in lines if x.rstrip().endswith(" sleeper")]
    assert spinner and sleeper, r.stdout
    # THREAD OS_TID CPU% CPU-TIME EVENTS NAME
    assert float(spinner[0].split()[2]) > 20.0, spinner
    assert float(sleeper[0].split()[2]) < 5.0, sleeper
    assert re.search(r"^OWN%WALL TOT%WALL\s+WAIT%\s+OWN\s+TOTAL\s+CALLS", r.stdout, re.M), r.stdout


def test_once_without_duration_gives_cpu_since_start(cpu_job):
    r = subprocess.run([TOP, str(cpu_job.pid), "--once", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["cpu_basis"] == "since_start" and doc["cpu_measured_seconds"] is None
    threads = _threads_by_name(doc)
    assert threads["spinner"]["cpu_pct"] > 20.0 and threads["sleeper"]["cpu_pct"] < 5.0, threads


def _thread_cpu(line, name):
    m = re.search(r"\d+ %s (\d+\.\d)%%" % name, line)
    return float(m.group(1)) if m else None


@needs_tmux
def test_screen_shows_process_and_thread_cpu(cpu_job):
    t = Tmux(cpu_job.pid, width=160, height=30)
    try:
        def busy_and_idle(s):
            lines = s.splitlines()
            threads = [x for x in lines if x.startswith(" threads (cpu):")]
            if not threads:
                return False
            spin, nap = _thread_cpu(threads[0], "spinner"), _thread_cpu(threads[0], "sleeper")
            return spin is not None and nap is not None and spin > 20.0 and nap < 5.0
        s = t.wait_for(busy_and_idle, what="the spinner's CPU high and the sleeper's near 0")
        status = s.splitlines()[0]
        m = re.search(r"\[RUNNING\]  cpu (\d+\.\d)%", status)
        assert m and float(m.group(1)) > 20.0, status
        assert "OWN%WALL" in s and "TOT%WALL" in s
    finally:
        t.close()


# ---- the selected thread's name, narrow terminals --------------------------------------

@needs_tmux
def test_status_line_names_the_selected_thread(workload):
    t = Tmux(workload.pid, width=200, height=30)
    try:
        t.wait_for(lambda s: "side_work" in s and "work3" in s, what="both threads' functions")
        def label(s):
            m = re.search(r"window \d+s  (thread \d+(?: \(\w+\))?|all threads)  ", s.splitlines()[0])
            return m.group(1) if m else None
        labels = [label(t.screen())]
        assert labels == ["all threads"], labels
        # all threads -> each thread -> all threads, from the thread list (T): its rows are
        # "all threads", then the live threads; the cursor opens on the shown one (PgUp: the top)
        for keys in (("PPage", "Down", "Enter"), ("PPage", "Down", "Down", "Enter"), ("a",)):
            t.keys("T")
            t.wait_for(lambda s: "pick a thread" in s, what="the thread list")
            t.keys(*keys)
            s = t.wait_for(lambda s: label(s) not in (None, labels[-1]), what="the next thread")
            labels.append(label(s))
        assert labels[-1] == "all threads"
        assert sorted(labels[1:3]) == ["thread 1 (MainThread)", "thread 2 (side)"], labels
    finally:
        t.close()


@needs_tmux
@pytest.mark.parametrize("width", [60, 44])
def test_narrow_terminal_keeps_function_names(workload, width):
    t = Tmux(workload.pid, width=width, height=40)
    try:
        def table_in_view(s):
            return re.search(r"\bside_work\b", s) and re.search(r"\btime\.sleep\b", s) and "FUNCTION" in s
        s = t.wait_for(table_in_view, what="whole function names at %d columns" % width)
        lines = s.splitlines()
        assert max(len(x) for x in lines) <= width
        at = [i for i, x in enumerate(lines) if "FUNCTION" in x][0]
        header, rows = lines[at], [x for x in lines[at + 1:-1] if x.strip()]
        assert "OWN%WALL" in header
        col = header.index("FUNCTION")
        names = [x[col:].split("  ")[0].strip() for x in rows]
        # no name is cut, and the function column has at least half the width (or all
        # that its widest name needs): number columns shrank or went first
        assert not [n for n in names if n.endswith(("\u2026", "~"))], rows
        assert width - col >= min(width // 2, max(len(n) for n in names)), (header, names)
    finally:
        t.close()


# ---- the job list ----------------------------------------------------------------------

def _ls(*args):
    r = subprocess.run([PY, "-m", "pytrace", "ls", "--json", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_job_list_hides_ended_segments_as_pytrace_ls_does(tmp_path, workload):
    dead = Job(tmp_path, "dead_job.py", "import time\nwhile True: time.sleep(1)\n")
    try:
        dead.kill()
        assert dead.segment in [s["name"] for s in _ls("--all")]
        assert dead.segment not in [s["name"] for s in _ls()]
        # not on a terminal: the list is printed
        r = subprocess.run([TOP], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert workload.segment in r.stdout
        assert dead.segment not in r.stdout
        r = subprocess.run([TOP, "--all"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert dead.segment in r.stdout and workload.segment in r.stdout
        if shutil.which("tmux"):
            t = Tmux("", width=250, height=60)
            try:
                s = t.wait_for(lambda s: workload.segment in s, what="the live job in the picker")
                assert dead.segment not in s
            finally:
                t.close()
        assert os.path.exists("/dev/shm" + dead.segment)  # it was there all along
    finally:
        dead.stop()


# ---- help ------------------------------------------------------------------------------

def _top_options():
    r = subprocess.run([TOP, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    return sorted(set(re.findall(r"^\s+(--[a-z]+)", r.stdout, re.M)))


def test_pytrace_top_help_gives_every_form_and_option():
    r = subprocess.run([PY, "-m", "pytrace", "top", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "pytrace top PID | SEGMENT" in out
    assert "-- python script.py [args...]" in out
    for job_option in ("--no-c-calls", "--include", "--exclude", "--policy", "--ring-size"):
        assert re.search(r"^\s+%s\b" % job_option, out, re.M), job_option
    assert "(default 4)" in out      # the job options read as `pytrace run --help` says them
    options = _top_options()
    assert {"--once", "--json", "--duration", "--limit", "--window", "--thread", "--sort"} <= set(options)
    for option in options:
        assert re.search(r"^\s+%s\b" % option, out, re.M), option


def test_the_guide_documents_every_pytrace_top_option():
    # pytrace-top's guide is docs/top.md (the README points to it)
    with open(os.path.join(ROOT, "docs", "top.md")) as f:
        guide = f.read()
    missing = [o for o in _top_options() if o not in guide]
    assert not missing, missing
    for doc in ("README.md", os.path.join("docs", "top.md")):
        with open(os.path.join(ROOT, doc)) as f:
            assert "as CPU% does in `top`" not in f.read(), doc
