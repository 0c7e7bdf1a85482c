"""The `pytrace` command: run (exit codes, argv, path), ls, bad arguments, subprocesses."""

import os
import re
import signal
import shutil
import subprocess
import sys
import time

import pytest

from helpers import CORPUS, PY, corpus


def pytrace_cmd(*args, cwd=CORPUS, env=None, timeout=60):
    return subprocess.run([PY, "-m", "pytrace", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def _announces(stderr):
    return [l for l in stderr.splitlines() if l.startswith("pytrace: tracing pid")]


@pytest.mark.parametrize("args", [
    [],
    ["bogus"],
    ["run"],
    ["run", "--policy", "maybe", "exit_code.py"],
    ["run", "--rings", "x", "exit_code.py"],
    ["run", "--rings", "-1", "exit_code.py"],
    ["run", "--ring-size", "-3", "exit_code.py"],
    ["run", "--nonsense", "exit_code.py"],
    ["run", "no_such_script.py"],
    ["ls", "--bogus"],
    ["record", "--", "python", "x.py"],
    ["record", "-o", "/nonexistent-dir/x.pytrace", "--", "python", "x.py"],
    ["export", "x.pytrace", "--format", "nope", "-o", "out"],
    ["export", "x.pytrace", "-o", "out.unknown-suffix"],
    ["top", "--policy", "maybe", "--", "python", "x.py"],
], ids=lambda a: " ".join(a) or "no-args")
def test_bad_arguments_exit_2_with_one_line(args):
    r = pytrace_cmd(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    if args:
        # one line naming the tool and the command: "pytrace[ COMMAND]: message"
        assert len(lines) == 1 and re.match(r"pytrace( (run|ls|top|record|export))?: \S", lines[0]), r.stderr
    assert not _announces(r.stderr)


@pytest.mark.parametrize("code", [0, 3, 7])
def test_run_passes_the_exit_code_through(code):
    r = pytrace_cmd("run", "exit_code.py", str(code))
    assert r.returncode == code, r.stderr
    assert len(_announces(r.stderr)) == 1
    assert "argv ['%d'] path0 %s name __main__" % (code, CORPUS) in r.stdout


def test_run_uncaught_exception_prints_traceback_and_exits_1():
    r = pytrace_cmd("run", "exit_code.py", "raise")
    assert r.returncode == 1
    assert "Traceback (most recent call last):" in r.stderr
    assert "ValueError: corpus failure" in r.stderr
    assert "exit_code.py" in r.stderr
    assert "cli.py" not in r.stderr and "runpy" not in r.stderr


def test_run_sys_exit_with_message():
    r = pytrace_cmd("run", "exit_code.py", "message")
    assert r.returncode == 1
    assert "exit with a message" in r.stderr


def test_run_module(tmp_path):
    (tmp_path / "modprog.py").write_text(
        "import sys\nprint('module', __name__, sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n")
    r = pytrace_cmd("run", "--no-c-calls", "-m", "modprog", "5", cwd=str(tmp_path))
    assert r.returncode == 5, r.stderr
    assert "module __main__ ['5']" in r.stdout
    assert len(_announces(r.stderr)) == 1


def test_run_options_are_accepted():
    r = pytrace_cmd("run", "--policy", "wait", "--rings", "8", "--ring-size", "1",
                    "--exclude", "json", "--include", CORPUS, "exit_code.py", "0")
    assert r.returncode == 0, r.stderr


def test_subprocesses_are_traced_each_into_its_own_segment():
    r = pytrace_cmd("run", "--subprocesses", "spawner.py")
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("child ")][0]
    _, pid, tracing, segment = line.split()
    assert tracing == "True"
    assert re.fullmatch(r"/pytrace-%s-0-[0-9a-f]{16}" % pid, segment), segment
    assert len(_announces(r.stderr)) == 2   # the parent and the child each say so once


def test_subprocesses_are_not_traced_without_the_option():
    r = pytrace_cmd("run", "spawner.py")
    assert r.returncode == 0, r.stderr
    assert " False None" in r.stdout


def _ls(*args):
    r = pytrace_cmd("ls", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _row_pids(listing):
    pids = set()
    for line in listing.splitlines()[1:]:
        first = line.split()[0] if line.split() else ""
        if first.isdigit():
            pids.add(int(first))
    return pids


def test_ls_lists_live_segments_and_collects_stale_ones():
    job = subprocess.Popen([PY, corpus("waiter"), "60"], stdout=subprocess.PIPE, text=True)
    try:
        segment = job.stdout.readline().strip()
        assert segment.startswith("/pytrace-%d-" % job.pid)
        listing = _ls()
        assert job.pid in _row_pids(listing), listing
        assert "waiter.py" in listing
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    time.sleep(0.1)
    assert job.pid not in _row_pids(_ls())
    assert job.pid in _row_pids(_ls("--all"))
    collected = _ls("--collect")
    assert "removed" in collected
    assert job.pid not in _row_pids(_ls("--all"))
    assert not os.path.exists("/dev/shm" + segment)


_KBI = ("import sys, atexit\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "print(__file__, sys.argv[0], __name__, __spec__, globals().get('__cached__', '<no __cached__>'), "
        "sys.path[0] == __import__('os').path.dirname(__file__), flush=True)\n"
        "if len(sys.argv) > 1:\n"
        "    raise KeyboardInterrupt\n")


@pytest.mark.parametrize("how", ["run", "record"])
def test_uncaught_keyboardinterrupt_ends_by_sigint_as_untraced(tmp_path, how):
    """Untraced, a program left by KeyboardInterrupt runs its atexit handlers and then dies
    of SIGINT (returncode -2); under pytrace run and record its parent sees the same."""
    (tmp_path / "kbi.py").write_text(_KBI)
    plain = subprocess.run([PY, "kbi.py", "x"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == -signal.SIGINT
    if how == "run":
        args = ["run", "kbi.py", "x"]
    else:
        args = ["record", "-o", str(tmp_path / "k.pytrace"), "--", PY, "kbi.py", "x"]
    r = pytrace_cmd(*args, cwd=tmp_path)
    assert r.returncode == plain.returncode, (r.returncode, r.stderr)
    assert "atexit ran" in r.stdout
    assert r.stderr.splitlines().count("KeyboardInterrupt") == 1, r.stderr   # printed once


def test_main_module_matches_plain_python(tmp_path):
    """__file__ of the script is absolute (as python makes it), sys.argv[0] stays as typed,
    and __spec__/__cached__ are those of a script run by python (3.15 sets no __cached__)."""
    (tmp_path / "kbi.py").write_text(_KBI)
    plain = subprocess.run([PY, "kbi.py"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    r = pytrace_cmd("run", "kbi.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == plain.stdout.splitlines()[0]
    cached = "None" if sys.version_info < (3, 15) else "<no __cached__>"
    assert r.stdout.splitlines()[0].startswith(str(tmp_path / "kbi.py") + " kbi.py __main__ None " + cached + " True")


def test_top_once_runs_the_program_to_its_end(tmp_path):
    """`pytrace top --once -- python script.py` without --duration: the program runs to its
    end (it used to be stopped by SIGINT before it ran), its exit code is top's, and the
    table holds its calls."""
    (tmp_path / "ex7.py").write_text("def work(n):\n    return sum(range(n))\n"
                                     "for i in range(300):\n    work(1000)\n"
                                     "print('ok')\nraise SystemExit(7)\n")
    r = pytrace_cmd("top", "--once", "--", PY, "ex7.py", cwd=tmp_path, timeout=120)
    assert r.returncode == 7, (r.returncode, r.stderr)
    assert "[ENDED]" in r.stdout
    row = [l for l in r.stdout.splitlines() if l.split()[-2:-1] == ["work"]]
    header = [l for l in r.stdout.splitlines() if "CALLS" in l.split()][0].split()
    assert row and row[0].split()[header.index("CALLS")] == "300", r.stdout
    assert r.stdout.splitlines()[0] == "ok"          # its output passes through (--once)
    assert "KeyboardInterrupt" not in r.stderr


def test_record_pid_says_at_once_when_it_cannot(tmp_path):
    """`pytrace record -o f PID` on a pid that is gone, or on a process that is not Python
    (so not traced, and not one to attach to), says so in one line at once (it waited 30 s)."""
    t0 = time.monotonic()
    r = pytrace_cmd("record", "-o", str(tmp_path / "a.pytrace"), "999999999", timeout=60)
    assert r.returncode != 0 and "no process 999999999" in r.stderr
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r2 = pytrace_cmd("record", "-o", str(tmp_path / "b.pytrace"), str(sleeper.pid), timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r2.returncode != 0 and "is not a Python process" in r2.stderr, r2.stderr
    assert len(r2.stderr.strip().splitlines()) == 1
    assert time.monotonic() - t0 < 10


def test_run_says_at_exit_what_was_written_and_dropped(tmp_path):
    """`pytrace run` with no reader: at exit it says how many events were written and
    dropped, and how to record instead (it said nothing)."""
    (tmp_path / "busy.py").write_text("def f(n):\n    return n if n < 2 else f(n-1) + f(n-2)\n"
                                      "f(24)\n")
    r = pytrace_cmd("run", "busy.py", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stderr.splitlines() if "events written" in l]
    assert len(line) == 1, r.stderr
    m = re.search(r"(\d+) events written, (\d+) dropped", line[0])
    assert m and int(m.group(2)) > 0
    # `python` where that word on PATH is this interpreter, else its path (a free-threaded
    # python3.14t has no `python` beside it; the next test shows why the path is said)
    on_path = shutil.which("python")
    word = "python" if on_path and (os.path.dirname(os.path.abspath(on_path)) == os.path.dirname(os.path.abspath(PY))
                                    and os.path.realpath(on_path) == os.path.realpath(PY)) else PY
    assert "pytrace record -o out.pytrace -- %s busy.py" % word in line[0], (word, line[0])
    assert "RuntimeWarning" not in r.stderr


def test_run_advice_at_exit_names_the_interpreter_that_ran_the_program(tmp_path):
    """The "record instead" advice names the interpreter that ran the program: `python`
    on PATH may be another one (another version, another venv, a console script's
    shebang), and the advice said `python` whatever it was."""
    (tmp_path / "busy.py").write_text("def f(n):\n    return n if n < 2 else f(n-1) + f(n-2)\n"
                                      "f(24)\n")
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "python").write_text("#!/bin/sh\necho another python\n")
    (other / "python").chmod(0o755)
    env = dict(os.environ, PATH=str(other) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([PY, "-m", "pytrace", "run", "busy.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"pytrace record -o out.pytrace -- (\S+) busy.py$", r.stderr, re.M)
    assert m, r.stderr
    # the advice's interpreter, looked up as a shell would with this PATH, is the one that ran
    ran = subprocess.run([m.group(1), "-c", "import sys; print(sys.prefix)"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == sys.prefix, (m.group(1), ran.stdout, ran.stderr)


def test_pytrace_top_version():
    """pytrace-top -V prints its version (it was rejected as an unknown option)."""
    import shutil
    top = shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")
    for flag in ("-V", "--version"):
        r = subprocess.run([top, flag], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and re.match(r"pytrace-top \d+\.\d+\.\d+ \(segment ABI \d+\.\d+\)$",
                                              r.stdout.strip()), (r.stdout, r.stderr)


def test_dropped_count_is_the_same_everywhere(tmp_path):
    """One run with a small ring and the drop policy: record's summary, export's note and
    pytrace-top --file --json give the same number of dropped events (export used to
    count only the gaps marked in the stream: 1,877,371 against 1,880,907)."""
    (tmp_path / "busy.py").write_text("def f(n):\n    return n if n < 2 else f(n-1) + f(n-2)\n"
                                      "for _ in range(20):\n    f(18)\n")
    rec = tmp_path / "d.pytrace"
    r = pytrace_cmd("record", "-o", str(rec), "--policy", "drop", "--ring-size", "0.125", "--",
                    PY, "busy.py", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    recorded = int(re.search(r"(\d+) events dropped", r.stderr).group(1))
    assert recorded > 0
    e = pytrace_cmd("export", str(rec), "-f", "collapsed", "-o", str(tmp_path / "d.folded"),
                    cwd=tmp_path, timeout=300)
    assert e.returncode == 0, e.stderr
    exported = int(re.search(r"(\d+) events dropped by the job", e.stderr).group(1))
    import json
    import shutil
    top = shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")
    t = subprocess.run([top, "--file", str(rec), "--once", "--json"], capture_output=True,
                       text=True, timeout=120)
    shown = json.loads(t.stdout)["events_dropped"]
    assert recorded == exported == shown, (recorded, exported, shown)


def test_help_names_each_command_and_the_defaults():
    """`pytrace --help` says what each command does; `pytrace run --help` shows the script
    form and the defaults the segment really uses (from the extension, not retyped)."""
    from pytrace import _pytrace
    r = pytrace_cmd("--help")
    assert r.returncode == 0
    for command in ("run", "ls", "top", "record", "export"):
        assert re.search(r"^  %s +\S" % command, r.stdout, re.M), r.stdout
    r = pytrace_cmd("run", "--help")
    assert r.returncode == 0
    assert "usage: pytrace run [options] (script.py | -m module | -c code) [args...]" in r.stdout
    assert "default %d" % _pytrace.DEFAULT_RING_COUNT in r.stdout
    assert "default %g)" % (_pytrace.DEFAULT_RING_BYTES / 2**20) in r.stdout


def test_every_command_of_the_table_parses_its_own_help():
    """The commands come from one table (pytrace.cli.COMMANDS): each row's function is
    found and parses its own arguments (`pytrace NAME --help`: exit 0, its own usage),
    `pytrace --help` shows each row's usage form, and an unknown command's error lists
    every row, in the table's order."""
    from pytrace import cli
    names = [c.name for c in cli.COMMANDS]
    assert {"run", "ls", "top", "record", "export", "merge", "web", "attach", "detach", "dump",
            "hub"} <= set(names)
    top = pytrace_cmd("--help")
    assert top.returncode == 0
    for c in cli.COMMANDS:
        r = pytrace_cmd(c.name, "--help")
        assert r.returncode == 0, (c.name, r.stderr)
        assert r.stdout.startswith("usage: pytrace %s " % c.name), (c.name, r.stdout[:200])
        if c.usage is not None:
            assert "pytrace %s\n" % c.usage in top.stdout, (c.usage, top.stdout)
    r = pytrace_cmd("bogus")
    assert r.returncode == 2
    assert r.stderr == "pytrace: unknown command 'bogus' (try: %s)\n" % ", ".join(names)


def test_missing_script_is_said_once(tmp_path):
    """A missing script: one line as python gives it (exit 2), and `record` adds only that
    the job ended before tracing, not a misleading 'no pytrace segment'."""
    r = pytrace_cmd("run", "missing.py", cwd=tmp_path)
    assert r.returncode == 2
    assert "can't open file '%s': [Errno 2] No such file or directory" % (tmp_path / "missing.py") in r.stderr
    r = pytrace_cmd("record", "-o", str(tmp_path / "m.pytrace"), "--", PY, "missing.py", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("can't open file") == 1
    assert "no pytrace segment" not in r.stderr
    assert "exited (code 2) before tracing started" in r.stderr
