"""Free-threaded Python (3.14t, built with --disable-gil; tests/freethreaded.sh): the tracer
runs with threads really at once and never turns the GIL back on.

- `pytrace record` of two threads each calling f() 200,000 times at once (a barrier starts
  them together) records exactly 400,000 calls of f, with nothing dropped, and the traced
  program itself sees sys._is_gil_enabled() False;
- N threads at once under --policy wait with small rings (the writers must wait for the
  recorder): exact counts, 0 dropped;
- start()/stop() over and over while threads start, run and end: every session stops
  cleanly (no error, no hook error), its segment's stream is balanced, and the GIL stays off;
- attach/detach (PEP 768) to a 3.14t job whose threads are running: the recording is
  balanced and the job goes on untraced with the GIL still off;
- a reader on a GIL build (pyenv's python3.11 with pytrace installed) reads the 3.14t
  recording: the same exact counts, and `pytrace export` writes it; and records a running
  3.14t job's segment live (`pytrace record PID` of the GIL build, mapping the segment
  itself or through the job's hub): every call, 0 dropped.

Every test is skipped, with the reason, on an interpreter that has the GIL."""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading

import pytest

from helpers import PY

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

pytestmark = pytest.mark.skipif(
    not FREE_THREADED,
    reason="free-threaded Python only (Py_GIL_DISABLED; tests/freethreaded.sh builds 3.14t); "
           "this is %s" % sys.version.split()[0])


def pytrace(*args, timeout=300, **kw):
    return subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def calls_of(path, name):
    """(calls of the function named `name`, the recording's counters) by the C aggregation."""
    from pytrace import Profile
    prof = Profile.from_recording(str(path))
    rows = [f for f in prof.functions() if f.name == name]
    # one symbol: threads meeting the function at once intern it once (pt_intern_mutex)
    assert len(rows) == 1, rows
    return rows[0].calls, prof.counters()


THREADS_AT_ONCE = r'''
import sys, threading
N, CALLS = int(sys.argv[1]), int(sys.argv[2])
def f():
    return 1
def worker(barrier, out, i):
    barrier.wait()                  # every thread starts calling at once
    n = 0
    for _ in range(CALLS):
        n += f()
    out[i] = n
barrier = threading.Barrier(N)
out = [0] * N
threads = [threading.Thread(target=worker, args=(barrier, out, i)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert out == [CALLS] * N, out
with open(sys.argv[3], "w") as fh:
    fh.write("gil %s\n" % sys._is_gil_enabled())
'''


def record_threads(tmp_path, n, calls, *opts):
    script = tmp_path / "at_once.py"
    script.write_text(THREADS_AT_ONCE)
    out = tmp_path / "at_once.pytrace"
    gil = tmp_path / "gil.txt"
    r = pytrace("record", *opts, "-o", str(out), "--", PY, str(script), str(n), str(calls), str(gil))
    assert r.returncode == 0, r.stderr
    assert gil.read_text() == "gil False\n", "the traced program ran with the GIL back on"
    return out, r


def test_two_threads_200k_calls_each_recorded_exactly(tmp_path):
    out, r = record_threads(tmp_path, 2, 200_000)
    calls, c = calls_of(out, "f")
    assert calls == 400_000, (calls, c, r.stderr)
    assert c["dropped"] == 0 and c["unmatched"] == 0, c
    assert c["threads_seen"] >= 3, c           # the main thread and both workers


def test_four_threads_policy_wait_small_rings_exact_zero_dropped(tmp_path):
    # 4 x 100,000 calls = 800,000 records through 0.25 MiB rings: the writers fill them
    # and must wait for the recorder, never drop
    out, r = record_threads(tmp_path, 4, 100_000, "--policy", "wait", "--ring-size", "0.25")
    calls, c = calls_of(out, "f")
    assert calls == 400_000, (calls, c, r.stderr)
    assert c["dropped"] == 0 and c["unmatched"] == 0, c


START_STOP_CHURN = r'''
import sys, threading, time
import pytrace
from pytrace import Profile, Reader
def f(x):
    return x + 1
def worker(ev):
    n = 0
    while not ev.is_set():
        for _ in range(100):
            n = f(n)
        time.sleep(0.0005)
def short():
    for i in range(2000):
        f(i)
live = []            # (thread, its stop event)
def spawn():
    ev = threading.Event()
    t = threading.Thread(target=worker, args=(ev,))
    t.start()
    live.append((t, ev))
problems = []
for session in range(12):
    spawn()                              # starts while tracing is off
    pytrace.start()
    reader = Reader(pytrace.segment_name())
    prof = Profile()
    spawn()                              # starts during the session
    for _ in range(3):                   # start and end during the session
        t = threading.Thread(target=short)
        t.start()
        prof.feed_many(reader.poll())
        t.join()
    prof.feed_many(reader.poll())
    ending = live.pop(0)
    ending[1].set()                      # ends while we stop
    c = pytrace.stop()
    ending[0].join()
    prof.feed_many(reader.poll())
    reader.close()
    pc = prof.counters()
    if c.first_error or c.hook_errors:
        problems.append((session, "stop", c))
    if pc["unmatched"] or pc["dropped"] != c.events_dropped:
        problems.append((session, "stream", pc, c.events_dropped))
    calls = sum(fn.calls for fn in prof.functions() if fn.name == "f")
    if calls < 3 * 2000:
        problems.append((session, "f", calls))
for t, ev in live:
    ev.set()
    t.join()
print("problems", problems)
print("gil", sys._is_gil_enabled())
'''


def test_threads_start_and_end_during_start_stop(tmp_path):
    script = tmp_path / "churn.py"
    script.write_text(START_STOP_CHURN)
    r = subprocess.run([PY, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-2:] == ["problems []", "gil False"], r.stdout + r.stderr


ATTACH_JOB = r'''
import select, sys, threading
def inner(x):
    return x + 1
def outer(x):
    return inner(x) + inner(x) + inner(x)
def worker(stop):
    n = 0
    while not stop.is_set():
        n += outer(n) & 1
stop = threading.Event()
threads = [threading.Thread(target=worker, args=(stop,)) for _ in range(2)]
for t in threads:
    t.start()
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0.05)[0]:
    pass
stop.set()
for t in threads:
    t.join()
print("tools", [sys.monitoring.get_tool(i) for i in range(6)], "gil", sys._is_gil_enabled())
'''


def test_attach_detach_to_a_job_with_running_threads(tmp_path):
    script = tmp_path / "busy.py"
    script.write_text(ATTACH_JOB)
    proc = subprocess.Popen([PY, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        out = tmp_path / "busy.pytrace"
        r = pytrace("record", "-o", str(out), "--duration", "1", str(proc.pid))
        assert r.returncode == 0, r.stderr
        assert "detached from pid %d" % proc.pid in r.stderr, r.stderr
        from pytrace import Profile
        prof = Profile.from_recording(str(out))
        c = prof.counters()
        calls = {fn.name: fn.calls for fn in prof.functions()}
        assert c["unmatched"] == 0, c
        assert calls.get("outer", 0) > 0 and calls.get("inner", 0) >= 3 * (calls["outer"] - 2), calls
    finally:
        rest, _ = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0
    assert rest == "tools [None, None, None, None, None, None] gil False\n", rest


def gil_python_with_pytrace():
    """A GIL build of Python with pytrace installed (pyenv's 3.11), or None."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for path in sorted(glob.glob(os.path.join(root, "versions", "3.1[1-3].*", "bin", "python3.1[1-3]"))) + \
            [shutil.which("python3.11") or ""]:
        if path and os.access(path, os.X_OK):
            r = subprocess.run([path, "-c", "import sys, sysconfig, pytrace._pytrace; "
                                "sys.exit(1 if sysconfig.get_config_var('Py_GIL_DISABLED') else 0)"],
                               capture_output=True)
            if r.returncode == 0:
                return path
    return None


def test_gil_build_reader_reads_a_free_threaded_recording(tmp_path):
    other = gil_python_with_pytrace()
    if other is None:
        pytest.skip("no GIL build of Python with pytrace installed (pyenv's python3.11)")
    out, _ = record_threads(tmp_path, 2, 50_000)
    here, _ = calls_of(out, "f")
    assert here == 100_000
    r = subprocess.run([other, "-c", textwrap.dedent('''
        import sys
        from pytrace import Profile
        p = Profile.from_recording(sys.argv[1])
        c = p.counters()
        print(sum(f.calls for f in p.functions() if f.name == "f"), c["dropped"], c["unmatched"])
    '''), str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["100000", "0", "0"], r.stdout
    folded = tmp_path / "out.collapsed"
    r = subprocess.run([other, "-m", "pytrace", "export", str(out), "-f", "collapsed", "-o", str(folded)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = folded.read_text().splitlines()
    # "frame;frame;... count", each frame "name (file:line)": f's stacks end in f of at_once.py
    leaves = [l.rsplit(" ", 1)[0].split(";")[-1] for l in lines]
    assert any(leaf.startswith("f (") and "at_once.py:" in leaf for leaf in leaves), lines[:10]


LIVE_JOB = r'''
import sys, threading
import pytrace
pytrace.start(policy="wait", wait_timeout=60)
print(pytrace.segment_name(), flush=True)
sys.stdin.readline()                # the GIL build's recorder reads the segment now
def f():
    return 1
def worker(barrier):
    barrier.wait()
    for _ in range(50_000):
        f()
barrier = threading.Barrier(2)
threads = [threading.Thread(target=worker, args=(barrier,)) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
c = pytrace.stop()
print("gil", sys._is_gil_enabled(), "dropped", c.events_dropped, flush=True)
'''


@pytest.mark.parametrize("via", ["direct", "hub"])
def test_gil_build_reader_records_a_running_free_threaded_jobs_segment(tmp_path, via):
    """A 3.14t job traces itself (policy wait); `pytrace record PID` of a GIL build reads its
    segment live while two of its threads call f() 50,000 times each at once: the
    recording holds all 100,000 calls, nothing dropped on either side. direct: the GIL
    build's own reader maps the segment (--no-hub); hub: through the job's pytrace-hub."""
    other = gil_python_with_pytrace()
    if other is None:
        pytest.skip("no GIL build of Python with pytrace installed (pyenv's python3.11)")
    script = tmp_path / "live.py"
    script.write_text(LIVE_JOB)
    job = subprocess.Popen([PY, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    rec = None
    # the lines read below have no timeout of their own: past 180 s both processes are
    # killed, so the reads end (EOF) and the test fails instead of hanging
    watchdog = threading.Timer(180, lambda: [p.kill() for p in (job, rec) if p is not None])
    watchdog.start()
    try:
        assert job.stdout.readline().startswith("/pytrace-")
        out = tmp_path / "live.pytrace"
        rec = subprocess.Popen([other, "-m", "pytrace", "record", "-o", str(out)]
                               + (["--no-hub"] if via == "direct" else []) + [str(job.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = rec.stderr.readline()      # said once it reads the segment
        assert "recording" in first, first + rec.stderr.read()
        job.stdin.write("go\n")
        job.stdin.flush()
        said = job.stdout.readline()
        job.stdin.close()
        assert job.wait(timeout=120) == 0
        _, err = rec.communicate(timeout=120)
        assert rec.returncode == 0, err
    finally:
        watchdog.cancel()
        for p in (job, rec):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert said == "gil False dropped 0\n", said
    calls, c = calls_of(out, "f")
    assert calls == 100_000, (calls, c, err)
    assert c["dropped"] == 0 and c["unmatched"] == 0, c


def test_import_keeps_the_gil_off():
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    r = subprocess.run([PY, "-c", "import sys, pytrace, pytrace._pytrace; print(sys._is_gil_enabled())"],
                       capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert r.returncode == 0 and r.stdout == "False\n", r.stdout + r.stderr
    assert "GIL" not in r.stderr, r.stderr     # no "enabling the GIL" RuntimeWarning


LOOPS_AT_ONCE = r'''
import asyncio, sys, threading
THREADS, TASKS = int(sys.argv[1]), int(sys.argv[2])
async def leaf():
    await asyncio.sleep(0)
async def main(t, barrier):
    barrier.wait()                  # every loop starts making tasks at once
    for r in range(TASKS // 100):
        await asyncio.gather(*(asyncio.create_task(leaf(), name="t%d-%d" % (t, r * 100 + i))
                               for i in range(100)))
barrier = threading.Barrier(THREADS)
threads = [threading.Thread(target=asyncio.run, args=(main(t, barrier),)) for t in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("gil", sys._is_gil_enabled())
'''


def test_asyncio_loops_in_threads_at_once_each_task_one_serial(tmp_path):
    """Four event loops in four threads make 2,000 tasks each at once: every task is
    recorded once, by its name, with a serial of its own (1..N, none twice): the task
    records' symbol dicts and serial counter are shared by the threads (pt_tasks.c's
    lock). Before the lock, runs gave some tasks the same serial."""
    threads, tasks = 4, 2000
    script = tmp_path / "loops.py"
    script.write_text(LOOPS_AT_ONCE)
    out = tmp_path / "loops.pytrace"
    r = pytrace("record", "-o", str(out), "--", PY, str(script), str(threads), str(tasks))
    assert r.returncode == 0, r.stderr
    assert "gil False" in r.stdout, r.stdout
    assert "0 events dropped" in r.stderr, r.stderr
    from pytrace import Profile
    prof = Profile.from_recording(str(out))
    summary = prof.tasks_summary()
    got = prof.tasks()
    # 8,000 named tasks, asyncio.run's 4 main tasks and its shutdown tasks; below the
    # core's done-task budget (2 * 4096), so every one is kept
    assert summary["folded"] == 0 and summary["malformed"] == 0, summary
    assert summary["seen"] == summary["kept"] == len(got), summary
    named = sorted(t.name for t in got if t.name.startswith("t"))
    assert named == sorted("t%d-%d" % (t, i) for t in range(threads) for i in range(tasks))
    serials = sorted(t.serial for t in got)
    assert serials == list(range(1, len(got) + 1)), [s for s in serials if serials.count(s) > 1][:10]
    assert all(t.state == "done" and t.steps == 2 for t in got if t.name.startswith("t")), \
        [t for t in got if t.name.startswith("t") and (t.state != "done" or t.steps != 2)][:3]
