"""`pytrace attach` / `detach` (PEP 768 sys.remote_exec, Python 3.14+), and `pytrace top PID`
and `pytrace record PID` on a process that is not traced: they attach by themselves, and
say in one line at once why they cannot (an older Python, not Python, gone, another user,
remote debugging turned off, no pytrace for the target's interpreter, the process exits
during the attach, already traced).

Everything runs against real processes. The job below does a known amount of work only
when told to (a line on its stdin), so the calls made while attached are known exactly;
its main thread runs Python code at least every 50 ms (select with a timeout), which is
when a remote script runs."""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from helpers import PY
from attachkit import Job, python_frames, segments_of, start_stacks_job

NEEDS_314 = pytest.mark.skipif(sys.version_info < (3, 14), reason="attaching needs Python 3.14+ "
                               "(PEP 768 sys.remote_exec); this is %d.%d" % sys.version_info[:2])


# A job that prints at its end and never waits for us.
# Works, then waits until the test says it is done (a file beside it: see finish()),
# so that it is alive for every command the test runs however loaded the machine is.
SHORT_JOB = r'''
import os, time
def step(i):
    return i * 2
total = 0
for i in range(200):
    total += step(i)
    time.sleep(0.01)
deadline = time.monotonic() + 300
while not os.path.exists(__file__ + ".stop") and time.monotonic() < deadline:
    time.sleep(0.01)
print("finished", total)
'''


def finish(script, proc):
    """Let a SHORT_JOB end; its (stdout, stderr)."""
    open(str(script) + ".stop", "w").close()
    return proc.communicate(timeout=120)


def pytrace(*args, timeout=180, **kw):
    return subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def one_line(stderr):
    lines = [l for l in stderr.strip().splitlines() if l]
    assert len(lines) == 1, stderr
    return lines[0]


def untraced_output(tmp_path, counts):
    job = Job(tmp_path)
    for n in counts:
        job.run(n)
    return job.finish()


def window(path):
    """One recording: Call counts by function name, and every problem with its balance:
    per thread, Frame records (the stack at attach, or after a Lost record) come before
    anything else, every close closes the frame on top, and nothing is open at the end
    (detach closed it). -> (calls, problems, events lost as the Lost records say)."""
    from pytrace.recording import RecordingReader
    from pytrace.reader import EventKind, decode
    names, calls, problems = {}, Counter(), []
    stacks, started, lost = {}, {}, 0
    with RecordingReader(path) as rec:
        for msg_type, data in rec:
            msg = decode(msg_type, data)
            if msg_type == 4:
                names[msg.id] = msg.name
            elif msg_type == 5:
                stack = stacks.setdefault(msg.thread, [])
                for ticks, sid, aux, kind, flags in msg.iter_events():
                    if kind == EventKind.CpuTime:        # the thread's CPU clock: no stack change
                        continue
                    if kind == 13:                       # Frame
                        if started.get(msg.thread):
                            problems.append("thread %d: Frame record after its first event" % msg.thread)
                        stack.append(sid)
                        continue
                    started[msg.thread] = True
                    if kind in (1, 3, 8):                # Call, CCall, Resume
                        stack.append(sid)
                        if kind == 1:
                            calls[names.get(sid, sid)] += 1
                    elif kind in (2, 4, 5, 6, 7):        # Return, CReturn, Unwind, CUnwind, Yield
                        if not stack or stack[-1] != sid:
                            problems.append("thread %d: close of %s with %s on top" % (
                                msg.thread, names.get(sid, sid), names.get(stack[-1]) if stack else "nothing"))
                        else:
                            stack.pop()
                    elif kind == 12:                     # Lost: the stack follows as Frames
                        lost += sid | (aux << 32)
                        stack.clear()
                        started[msg.thread] = False
    for thread, stack in stacks.items():
        if stack:
            problems.append("thread %d: still open at the end: %s" % (thread, [names.get(s) for s in stack]))
    return calls, problems, lost


def older_python():
    """An interpreter older than 3.14 on this machine (this one, if it is), or None."""
    if sys.version_info < (3, 14):
        return sys.executable
    for pattern in ("/usr/bin/python3.1[0-3]", "/usr/local/bin/python3.1[0-3]",
                    "/root/.pyenv/versions/3.1[0-3].*/bin/python3.1[0-3]"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def other_version_python():
    """A system interpreter of another 3.14+ minor version than this one (its environment
    has no pytrace), or None."""
    for minor in range(14, 20):
        if minor == sys.version_info[1]:
            continue
        path = shutil.which("python3.%d" % minor, path="/usr/bin:/usr/local/bin")
        if path:
            r = subprocess.run([path, "-c", "import pytrace"], capture_output=True)
            if r.returncode != 0:
                return path
    return None


# ---- every Python ------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["attach"], ["attach", "abc"], ["attach", "--timeout", "0", "1"], ["attach", "--policy", "x", "1"],
    ["attach", "--rings", "-1", "1"], ["detach"], ["detach", "1", "2"], ["dump"], ["dump", "-3"],
], ids=lambda a: " ".join(a))
def test_bad_arguments_are_one_line_exit_2(args):
    r = pytrace(*args)
    assert r.returncode == 2, r.stderr
    assert one_line(r.stderr).startswith("pytrace %s: " % args[0]), r.stderr


def test_older_python_is_said_at_once_by_every_command(tmp_path):
    """attach, record PID, top PID and dump PID on a plain process of Python < 3.14: one
    line, at once, that attaching needs 3.14+ and to use `pytrace run`; the process runs
    on. --attach-timeout 3600: a recorder that waited for a segment would hang here."""
    python = older_python()
    if python is None:
        pytest.skip("no Python older than 3.14 on this machine")
    script = tmp_path / "short.py"
    script.write_text(SHORT_JOB)
    proc = subprocess.Popen([python, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        for args in (["attach", str(proc.pid)],
                     ["record", "-o", str(tmp_path / "r.pytrace"), "--attach-timeout", "3600", str(proc.pid)],
                     ["top", str(proc.pid), "--once"],
                     ["dump", str(proc.pid)]):
            r = pytrace(*args)
            line = one_line(r.stderr)
            assert r.returncode == 1, (args, r.stderr)
            assert "needs Python 3.14+" in line and "pytrace run" in line, line
            assert "runs Python %d.%d" % tuple(int(x) for x in subprocess.run(
                [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                text=True).stdout.split()) in line, line
        assert not os.path.exists(tmp_path / "r.pytrace")
    finally:
        out, _ = finish(script, proc)
    assert proc.returncode == 0 and out == "finished 39800\n"


def test_not_python_and_gone_are_said_at_once(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for args in (["attach", str(sleeper.pid)],
                     ["record", "-o", str(tmp_path / "r.pytrace"), "--attach-timeout", "3600", str(sleeper.pid)],
                     ["top", str(sleeper.pid), "--once"], ["dump", str(sleeper.pid)]):
            r = pytrace(*args)
            assert r.returncode == 1 and "is not a Python process" in one_line(r.stderr), (args, r.stderr)
    finally:
        sleeper.kill()
        sleeper.wait()
    for args in (["attach", str(sleeper.pid)], ["detach", str(sleeper.pid)], ["dump", str(sleeper.pid)],
                 ["top", str(sleeper.pid), "--once"]):
        r = pytrace(*args)
        assert r.returncode == 1 and "no process %d" % sleeper.pid in one_line(r.stderr), (args, r.stderr)


def test_attach_to_a_traced_job_says_already_traced(tmp_path):
    script = tmp_path / "short.py"
    script.write_text(SHORT_JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().startswith("pytrace: tracing pid")
        r = pytrace("attach", str(proc.pid))
        line = one_line(r.stderr)
        assert r.returncode == 1 and "is already traced" in line and "pytrace top %d" % proc.pid in line, line
    finally:
        out, _ = finish(script, proc)
    assert proc.returncode == 0 and out == "finished 39800\n"


# ---- 3.14+ ------------------------------------------------------------------------------

@NEEDS_314
def test_twenty_attach_detach_cycles_exact_counts_output_unchanged(tmp_path):
    """20 cycles on a running two-worker job, alternating the two ways in: `pytrace record
    PID` (attaches, and detaches on Ctrl-C) and `pytrace attach --policy wait` + `pytrace
    record PID` + `pytrace detach` (record ends by itself: the segment is released). Each
    window has exactly the outer/inner calls made while attached, in a balanced stream with
    nothing lost; the work done between windows is not in any; the job's output, exit code,
    sys.monitoring tools, modules and threads are those of an untraced run."""
    K, BETWEEN = 400, 150
    counts = []
    job = Job(tmp_path)
    try:
        for cycle in range(20):
            out = tmp_path / ("w%02d.pytrace" % cycle)
            if cycle % 2 == 0:
                rec = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(out), str(job.pid)],
                                       stderr=subprocess.PIPE, text=True)
                first = rec.stderr.readline()
                assert "attached to pid %d" % job.pid in first, first
                job.run(K)
                rec.send_signal(signal.SIGINT)
                _, err = rec.communicate(timeout=120)
                assert rec.returncode == 0, first + err
                assert "detached from pid %d" % job.pid in err, err
            else:
                r = pytrace("attach", "--policy", "wait", str(job.pid))
                assert r.returncode == 0 and "tracing pid %d" % job.pid in r.stderr, r.stderr
                rec = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(out), str(job.pid)],
                                       stderr=subprocess.PIPE, text=True)
                first = rec.stderr.readline()
                assert "recording lossless" in first, first
                job.run(K)
                r = pytrace("detach", str(job.pid))
                assert r.returncode == 0 and "no longer traced" in r.stderr, r.stderr
                _, err = rec.communicate(timeout=120)    # ends by itself: the session was released
                assert rec.returncode == 0, first + err
            assert "0 events dropped" in err, err
            counts.append(K)
            calls, problems, lost = window(out)
            assert problems == [] and lost == 0, (cycle, problems[:5], lost)
            assert calls["outer"] == 2 * K and calls["inner"] == 6 * K, (cycle, calls)
            assert segments_of(job.pid) == [], segments_of(job.pid)
            job.run(BETWEEN)                      # detached: in no recording
            counts.append(BETWEEN)
        code, output = job.finish()
    finally:
        job.kill()
    want_code, want_output = untraced_output(tmp_path, counts)
    assert (code, output) == (want_code, want_output)
    assert "tools [None, None, None, None, None, None]\npytrace modules []\nthreads 1\n" in output


@NEEDS_314
def test_record_duration_attaches_mid_call_and_detaches(tmp_path):
    """`record --duration` on a job whose workers are busy: the calls running at attach
    become roots (Frame records), the ones running at detach are closed by it, the stream
    is balanced, and the job finishes as untraced."""
    script = tmp_path / "busy.py"
    script.write_text(textwrap.dedent('''
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
        while not select.select([sys.stdin], [], [], 0.05)[0]:    # the test's go
            pass
        stop.set()
        for t in threads:
            t.join()
        print("tools", [sys.monitoring.get_tool(i) for i in range(6)])
    '''))
    proc = subprocess.Popen([PY, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        out = tmp_path / "busy.pytrace"
        r = pytrace("record", "-o", str(out), "--duration", "1", str(proc.pid))
        assert r.returncode == 0, r.stderr
        assert "detached from pid %d" % proc.pid in r.stderr, r.stderr
        # Lossless has a bound (1 s per gap): a recorder held up by the disk longer than that
        # makes the job drop, and every drop is counted and marked
        dropped = int(re.search(r"(\d+) events dropped", r.stderr).group(1))
        calls, problems, lost = window(out)
        assert problems == [] and lost == dropped, (problems[:5], lost, dropped)
        assert calls["outer"] > 0 and calls["inner"] >= 3 * (calls["outer"] - 2), calls
    finally:
        rest, _ = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0 and rest == "tools [None, None, None, None, None, None]\n", rest


@NEEDS_314
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
def test_top_attaches_and_detaches_an_untraced_process(tmp_path):
    """`pytrace top PID` in a terminal (tmux) on an untraced job: attaches, shows the job's
    functions, and detaches when the view is quit; the job ends as untraced."""
    from topkit import Tmux
    job = Job(tmp_path)
    err = tmp_path / "top.err"
    t = Tmux(command="%s -m pytrace top %d 2>%s" % (PY, job.pid, err), name="ptattach")
    try:
        wait_for_text(err, "attached to pid %d" % job.pid)
        for _ in range(3):
            job.run(300)
        t.wait_for(lambda screen: "outer" in screen and "inner" in screen, what="the job's functions")
        t.keys("q")
        wait_for_text(err, "detached from pid %d" % job.pid)
        assert segments_of(job.pid) == []
        code, output = job.finish()
    finally:
        t.kill()
        job.kill()
    assert code == 3 and "tools [None, None, None, None, None, None]\npytrace modules []\nthreads 1\n" in output


def wait_for_text(path, text, timeout=60):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError("no %r in %s: %s" % (text, path, path.read_text() if path.exists() else "(none)"))


@NEEDS_314
def test_attach_loads_this_pytrace_into_a_python_without_it(tmp_path):
    """The job runs on the base interpreter of this venv, whose environment has no pytrace:
    the attach loads this pytrace's _pytrace (built for the same interpreter), says so,
    and detach leaves nothing of it."""
    base = getattr(sys, "_base_executable", sys.executable)
    if subprocess.run([base, "-c", "import pytrace"], capture_output=True).returncode == 0:
        pytest.skip("the base interpreter %s has a pytrace of its own" % base)
    job = Job(tmp_path, python=base)
    try:
        r = pytrace("attach", str(job.pid))
        assert r.returncode == 0 and "its environment has no pytrace" in r.stderr, r.stderr
        job.run(100)
        r = pytrace("detach", str(job.pid))
        assert r.returncode == 0, r.stderr
        code, output = job.finish()
    finally:
        job.kill()
    assert code == 3 and "pytrace modules []\nthreads 1\n" in output, output


@NEEDS_314
def test_attach_without_pytrace_for_the_target_python_is_one_line(tmp_path):
    """A process of another Python version whose environment has no pytrace (this one's
    _pytrace is not built for it): one line with the command that fixes it; the process
    finishes with its normal output. (sys.remote_exec only reaches its own version: the
    request goes through the process's own interpreter binary, as dump's reading does.)"""
    python = other_version_python()
    if python is None:
        pytest.skip("no other Python 3.14+ without pytrace on this machine")
    script = tmp_path / "short.py"
    script.write_text(SHORT_JOB)
    proc = subprocess.Popen([python, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        r = pytrace("attach", str(proc.pid))
        line = one_line(r.stderr)
        assert r.returncode == 1, line
        assert "no pytrace is installed" in line and "%s -m pip install pytrace" % python in line, line
        r = pytrace("record", "-o", str(tmp_path / "r.pytrace"), str(proc.pid))
        assert r.returncode == 1 and "no pytrace is installed" in one_line(r.stderr), r.stderr
        # dump needs nothing in it: the stacks are read through its own interpreter binary
        r = pytrace("dump", str(proc.pid))
        assert r.returncode == 0 and "stacks read from its memory" in r.stdout, r.stdout + r.stderr
        assert "<module>" in python_frames(r.stdout, "MainThread"), r.stdout
    finally:
        out, err = finish(script, proc)
    assert (proc.returncode, out, err) == (0, "finished 39800\n", "")


@NEEDS_314
@pytest.mark.parametrize("how", ["env", "xoption"])
def test_remote_debugging_turned_off_is_one_line(tmp_path, how):
    script = tmp_path / "short.py"
    script.write_text(SHORT_JOB)
    env = dict(os.environ)
    args = [PY]
    if how == "env":
        env["PYTHON_DISABLE_REMOTE_DEBUG"] = "1"
    else:
        args += ["-X", "disable-remote-debug"]
    proc = subprocess.Popen(args + [str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        for cmd in (["attach"], ["top", "--once"], ["record", "-o", str(tmp_path / "r.pytrace")]):
            r = pytrace(*cmd, str(proc.pid))
            line = one_line(r.stderr)
            assert r.returncode == 1 and "remote debugging turned off" in line, (cmd, line)
    finally:
        out, err = finish(script, proc)
    assert (proc.returncode, out, err) == (0, "finished 39800\n", "")


@NEEDS_314
def test_process_that_exits_during_the_attach(tmp_path):
    """The main thread sleeps in C (time.sleep), so the attach waits for it and says so;
    the process is killed meanwhile: one more line says it exited during the attach."""
    proc = subprocess.Popen([PY, "-c", "import time; print('ready', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        att = subprocess.Popen([PY, "-m", "pytrace", "attach", "--timeout", "600", str(proc.pid)],
                               stderr=subprocess.PIPE, text=True)
        waiting = att.stderr.readline()
        assert "has not run the attach code yet" in waiting and "main thread" in waiting, waiting
        proc.kill()
        _, err = att.communicate(timeout=120)
        assert att.returncode == 1 and "exited during the attach" in one_line(err), err
    finally:
        proc.kill()
        proc.wait()


@NEEDS_314
def test_attach_timeout_changes_nothing(tmp_path):
    """A main thread blocked past --timeout: the attach gives up in one line, and the
    script it left pending does nothing when the main thread wakes (no segment, no output,
    no module)."""
    script = tmp_path / "sleepy.py"
    script.write_text(textwrap.dedent('''
        import sys, time
        print("ready", flush=True)
        sys.stdin.readline()                 # blocked in C until the test says go
        for i in range(20):                  # then Python code runs for a while
            time.sleep(0.01)
        print("modules", sorted(m for m in sys.modules if m.startswith("pytrace")))
        print("tools", [sys.monitoring.get_tool(i) for i in range(6)])
    '''))
    proc = subprocess.Popen([PY, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        r = pytrace("attach", "--timeout", "1.5", str(proc.pid))
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert "did not run the attach code within 1.5 s" in lines[-1], r.stderr
        assert "nothing was changed" in lines[-1]
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert (proc.returncode, err) == (0, "")
    assert out == "modules []\ntools [None, None, None, None, None, None]\n"
    assert segments_of(proc.pid) == []


@NEEDS_314
def test_detach_refuses_a_job_that_traces_itself(tmp_path):
    script = tmp_path / "short.py"
    script.write_text(SHORT_JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().startswith("pytrace: tracing pid")
        r = pytrace("detach", str(proc.pid))
        line = one_line(r.stderr)
        assert r.returncode == 1 and "traces itself" in line, line
    finally:
        out, err = finish(script, proc)
    assert proc.returncode == 0 and out == "finished 39800\n"
    assert "events written" in err           # its own tracing ran to the end


@NEEDS_314
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_is_refused(tmp_path):
    """An unprivileged user (nobody, uid 65534) cannot attach to, detach or dump root's
    process: one line each; the process runs on unchanged."""
    script = tmp_path / "short.py"
    script.write_text(SHORT_JOB)
    proc = subprocess.Popen([PY, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    as_nobody = textwrap.dedent('''
        import os, sys
        import pytrace, pytrace.cli, pytrace.attach, pytrace.dump
        pytrace._ext()
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        sys.exit(pytrace.cli.main(sys.argv[1:]))
    ''')
    try:
        for cmd in (["attach"], ["detach"], ["dump"], ["record", "-o", "/tmp/pytrace-nobody.pytrace"],
                    ["top", "--once"]):
            r = subprocess.run([PY, "-c", as_nobody, *cmd, str(proc.pid)], capture_output=True,
                               text=True, timeout=120, cwd="/")
            line = one_line(r.stderr)
            assert r.returncode == 1 and "permission denied" in line and "belongs to root" in line, (cmd, line)
    finally:
        out, err = finish(script, proc)
    assert (proc.returncode, out, err) == (0, "finished 39800\n", "")


# ---- pytrace dump --------------------------------------------------------------------------


def test_dump_of_a_traced_job_reads_its_segment_and_consumes_nothing(tmp_path):
    proc = start_stacks_job(tmp_path, traced=True)
    try:
        first = pytrace("dump", str(proc.pid))
        second = pytrace("dump", str(proc.pid))
        for r in (first, second):
            assert r.returncode == 0, r.stderr
            assert "stacks from its pytrace segment /pytrace-%d-" % proc.pid in r.stdout, r.stdout
            assert "older frames not known" not in r.stdout, r.stdout
            assert python_frames(r.stdout, "blocked")[:3] == ["h", "g", "f"], r.stdout
            assert "Thread.run" in python_frames(r.stdout, "blocked")
            assert "spin" in python_frames(r.stdout, "busy") or "busy" in python_frames(r.stdout, "busy")
            assert "<module>" in python_frames(r.stdout, "MainThread"), r.stdout
        # nothing was consumed: a recorder still gets the job's whole stream from its start
        rec = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(tmp_path / "all.pytrace"),
                                str(proc.pid)], stderr=subprocess.PIPE, text=True)
        assert "recording" in rec.stderr.readline()
    finally:
        out, _ = proc.communicate("go\n", timeout=120)
    rec.wait(timeout=120)
    assert proc.returncode == 0 and out == "finished\n"
    calls, problems, lost = window(tmp_path / "all.pytrace")
    assert calls["f"] == 1 and calls["g"] == 1 and calls["h"] == 1, calls


SPAN_JOB = r'''
import sys, threading, pytrace
def inner():
    print("ready", flush=True)
    sys.stdin.readline()            # blocked in C, inside the span
def outer():
    with pytrace.span("load batch"):
        inner()
def side(started, stop):
    with pytrace.span("side work"):
        started.set()
        stop.wait()                 # blocked in C, inside its own span
started, stop = threading.Event(), threading.Event()
t = threading.Thread(target=side, args=(started, stop), name="side")
t.start()
started.wait()
outer()
stop.set()
t.join()
print("finished")
'''


def dump_stack(dump, thread_name):
    """One thread's block of `pytrace dump` output as names, outermost first (each
    line's text before its " (...)")."""
    lines = dump.splitlines()
    start = [i for i, l in enumerate(lines) if l.startswith("Thread ") and '"%s"' % thread_name in l]
    assert start, (thread_name, dump)
    names = []
    for line in lines[start[0] + 1:]:
        if not line.startswith("    "):
            break
        names.append(line[4:].rsplit(" (", 1)[0])
    return names[::-1]


def test_dump_shows_the_stack_the_walk_holds(tmp_path):
    """A traced job whose threads are inside user spans (pytrace.span) and blocked in C
    calls: dump prints each open span where the walk (viewer/core/walk.h) puts it, between
    the frame that opened it and what runs under it, and its stacks are call paths of
    the calling-context tree pytrace.Profile builds from a recording of the same stream.
    (The Python rebuild dump had before ignored spans.)"""
    script = tmp_path / "spans.py"
    script.write_text(SPAN_JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        r = pytrace("dump", str(proc.pid))
        assert r.returncode == 0, r.stderr
        assert "stacks from its pytrace segment" in r.stdout, r.stdout
        assert "older frames not known" not in r.stdout, r.stdout
        main, side = dump_stack(r.stdout, "MainThread"), dump_stack(r.stdout, "side")
        assert "    load batch (span)" in r.stdout.splitlines(), r.stdout
        i = main.index("<module>")
        assert main[i:i + 4] == ["<module>", "outer", "load batch", "inner"], r.stdout
        assert main[-1].endswith("readline"), r.stdout          # the C call in progress
        j = side.index("side")
        assert side[j:j + 2] == ["side", "side work"], r.stdout
        rec = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(tmp_path / "all.pytrace"),
                                str(proc.pid)], stderr=subprocess.PIPE, text=True)
        assert "recording" in rec.stderr.readline()
    finally:
        out, _ = proc.communicate("go\n", timeout=120)
    rec.wait(timeout=120)
    assert proc.returncode == 0 and out == "finished\n"
    import pytrace as pt
    prof = pt.Profile.from_recording(str(tmp_path / "all.pytrace"))
    by_name = {t.name: t.thread for t in prof.threads()}
    for name, stack in (("MainThread", main), ("side", side)):
        paths = prof.paths(thread=by_name[name])
        assert tuple(stack) in paths, (name, stack, sorted(p for p in paths if p[-1] == stack[-1]))
    # the whole stream read: every thread ended, nothing open
    assert prof.stacks() and all(t.ended and t.complete and not t.frames for t in prof.stacks())


@NEEDS_314
def test_dump_of_an_untraced_process_reads_its_memory(tmp_path):
    """Its main thread is blocked in join() (where a remote script would wait for it): the
    stacks are read from its memory, and it goes on unchanged."""
    proc = start_stacks_job(tmp_path, traced=False)
    try:
        r = pytrace("dump", str(proc.pid))
        assert r.returncode == 0, r.stderr
        assert "stacks read from its memory" in r.stdout, r.stdout
        assert python_frames(r.stdout, "blocked")[:3] == ["h", "g", "f"], r.stdout
        assert "Thread.join" in python_frames(r.stdout, "MainThread"), r.stdout
        assert segments_of(proc.pid) == []
    finally:
        out, err = proc.communicate("go\n", timeout=120)
    assert (proc.returncode, out, err) == (0, "finished\n", "")


def test_dump_after_a_reader_took_the_start_of_the_stream(tmp_path):
    """A recorder read the job's stream first: dump asks the job for its stacks. The busy
    thread answers (Frame records); the blocked ones cannot: on 3.14+ dump reads the stacks
    from memory instead, before 3.14 it prints what it knows and says what it does not."""
    proc = start_stacks_job(tmp_path, traced=True)
    try:
        r = pytrace("record", "-o", str(tmp_path / "first.pytrace"), "--duration", "0.5", str(proc.pid))
        assert r.returncode == 0, r.stderr
        r = pytrace("dump", str(proc.pid))
        assert r.returncode == 0, r.stderr
        assert "spin" in python_frames(r.stdout, "busy") or "busy" in python_frames(r.stdout, "busy")
        if sys.version_info >= (3, 14):
            assert "stacks read from its memory" in r.stdout, (r.stdout, r.stderr)
            assert python_frames(r.stdout, "blocked")[:3] == ["h", "g", "f"], r.stdout
        else:
            assert "stacks from its pytrace segment" in r.stdout, r.stdout
            block = r.stdout.split('"blocked"', 1)[1].split("\nThread ", 1)[0]
            assert "older frames not known" in block, r.stdout
            busy = r.stdout.split('"busy"', 1)[1].split("\nThread ", 1)[0]
            assert "older frames not known" not in busy and "Thread.run" in busy, r.stdout
    finally:
        out, _ = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0 and out == "finished\n"
