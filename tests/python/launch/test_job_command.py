"""The job's own command and output (issue 19, items 2, 4, 5, 6, 8 and parts of 12).

- A console script after `--` (pytest, pip) runs traced under its shebang's python; a
  native executable or a shell script is refused in one line (run, record, top, web).
- `pytrace top --once -- job`: the job's output passes through, a failed start prints
  its error, and no file is left; the live view keeps the output aside (never on the
  view's screen) and prints it when it closes.
- The traced job's command line is its own: /proc/PID/cmdline reads `python job.py`.
- `pytrace top --file REC --pid PID` shows that process of the recording.
- multiprocessing workers that end normally (os._exit) read as exited, not died.
- `pytrace top 1` as root, and an unknown command's list of commands.

Real processes, real console scripts, a real terminal (tmux) for the live view.
"""

import json
import os
import re
import select
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest

pytest.importorskip("pytrace")
try:
    from pytrace import _pytrace  # noqa: F401
except ImportError:
    pytest.skip("the _pytrace extension is not built", allow_module_level=True)

from topkit import Tmux, find_top

PY = sys.executable
BIN = os.path.dirname(PY)


def _console_script(name):
    """A real console script `name` (pip writes it: a Python shebang): in this
    interpreter's scripts, or its base installation's (a venv with system packages)."""
    for d in (BIN, sysconfig.get_path("scripts"), os.path.join(sys.base_prefix, "bin")):
        path = os.path.join(d, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                if re.match(rb"#!\S*python", f.readline()):
                    return path
    pytest.skip("no %s console script with a Python shebang here" % name)


def _env(tmp_path, **extra):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(extra)
    return env


def _cli(tmp_path, *args, env=None, timeout=180, **kw):
    return subprocess.run([PY, "-m", "pytrace", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env=env or _env(tmp_path), **kw)


def _left_in_tmp(tmp_path):
    return sorted(os.listdir(tmp_path / "tmp"))


# ---- console scripts and what is not Python ------------------------------------------

@pytest.mark.parametrize("name", ["pytest", "pip"])
def test_record_a_console_script_on_path(tmp_path, name):
    """`record -o x -- pytest --version` (and pip): the command on PATH, a console script
    with a Python shebang, runs traced as `python $(which pytest)` and is recorded (it
    said "can't open file .../pytest")."""
    script = _console_script(name)
    env = _env(tmp_path, PATH=os.path.dirname(script) + os.pathsep + BIN + os.pathsep
               + os.environ.get("PATH", ""))
    plain = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120,
                           env=env)
    rec = tmp_path / "x.pytrace"
    r = _cli(tmp_path, "record", "-o", str(rec), "--", name, "--version", env=env)
    assert r.returncode == plain.returncode == 0, r.stderr
    assert r.stdout == plain.stdout and plain.stdout.strip()
    events = re.search(r"(\d+) events written", r.stderr)
    assert events and int(events.group(1)) > 1000, r.stderr
    # the recording holds the script's own code: its <module> is a frame of the picture
    top = subprocess.run([find_top(), "--file", str(rec), "--once", "--json", "--limit", "100000"],
                         capture_output=True, text=True, timeout=120)
    doc = json.loads(top.stdout)
    assert any(f["file"] == script and f["name"] == "<module>" for f in doc["functions"])
    # and `pytrace run NAME` runs it too
    r = _cli(tmp_path, "run", name, "--version", env=env)
    assert r.returncode == 0 and r.stdout == plain.stdout, r.stderr


@pytest.mark.parametrize("command", ["run", "record", "top", "web"])
def test_a_native_binary_or_shell_script_is_refused_in_one_line(tmp_path, command):
    """`-- /bin/true` ran as a Python file (SyntaxError: null bytes), a shell script
    likewise: each is refused in one line saying what it is, exit 2, nothing left."""
    true = shutil.which("true")
    shell = tmp_path / "job.sh"
    shell.write_text("#!/bin/sh\necho hi\n")
    shell.chmod(0o755)
    for program, what in ((true, "native executable"), ("./job.sh", "sh script")):
        args = [command]
        if command == "record":
            args += ["-o", str(tmp_path / "r.pytrace")]
        if command == "top":
            args += ["--once"]
        args += ([program] if command == "run" else ["--", program])
        r = _cli(tmp_path, *args, timeout=60)
        assert r.returncode == 2, (command, program, r.returncode, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and what in lines[0] and "not a Python program" in lines[0], r.stderr
        assert "SyntaxError" not in r.stderr
    assert _left_in_tmp(tmp_path) == []


# ---- pytrace top -- job: its output ---------------------------------------------------

def test_top_once_passes_the_output_through_and_leaves_no_file(tmp_path):
    """`top --once -- python job.py`: the job's output is on top's stdout and stderr,
    before the table; a job that cannot start says why; nothing is left in TMPDIR (a
    pytrace-top-job-*.log was left by every run)."""
    (tmp_path / "job.py").write_text(
        "import sys\ndef work(n):\n    return sum(range(n))\n"
        "print('job says hello')\nprint('job warns', file=sys.stderr)\n"
        "for i in range(200):\n    work(100)\nsys.exit(3)\n")
    r = _cli(tmp_path, "top", "--once", "--", PY, "job.py")
    assert r.returncode == 3, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "job says hello", r.stdout
    assert any(line.split()[-2:-1] == ["work"] for line in out[1:]), r.stdout
    assert "job warns" in r.stderr
    # a start that fails: python's own error, then ours
    r = _cli(tmp_path, "top", "--once", "--", PY, "missing.py")
    assert r.returncode == 2, r.stderr
    assert "can't open file" in r.stderr and "missing.py" in r.stderr, r.stderr
    r = _cli(tmp_path, "record", "-o", str(tmp_path / "m.pytrace"), "--", PY, "missing.py")
    assert r.returncode == 2 and "can't open file" in r.stderr, r.stderr
    # --json: stdout is the JSON document only; the job's stdout goes to stderr
    r = _cli(tmp_path, "top", "--once", "--json", "--", PY, "job.py")
    assert r.returncode == 3
    assert json.loads(r.stdout)["functions"]
    assert "job says hello" in r.stderr
    assert _left_in_tmp(tmp_path) == []


def test_top_live_view_keeps_the_output_off_the_screen_and_shows_it_after(tmp_path):
    """The live view (curses) owns the screen: a job printing all the while never shows
    on it; when the view closes its output is printed, and nothing is left in TMPDIR."""
    (tmp_path / "talk.py").write_text(
        "import sys, time\ndef work(n):\n    return sum(range(n))\n"
        "for i in range(100000):\n"
        "    if i % 40 == 0:\n"
        "        print('JOB-OUT', i, flush=True)\n        print('JOB-ERR', i, file=sys.stderr, flush=True)\n"
        "    work(2000)\n    time.sleep(0.01)\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = ("cd %s && env TMPDIR=%s %s -m pytrace top -- %s talk.py; echo TOP-DONE rc=$?; sleep 60"
           % (tmp_path, tmp, PY, PY))
    t = Tmux(command="sh -c '%s'" % cmd, name="ptjobout")
    try:
        s = t.wait_for(lambda s: "work" in s and "RUNNING" in s, timeout=60, what="the job's table")
        for _ in range(5):              # the job prints a few lines a second meanwhile
            time.sleep(0.4)
            s = t.screen()
            assert "JOB-OUT" not in s and "JOB-ERR" not in s, s
        t.keys("q")
        s = t.wait_for(lambda s: "TOP-DONE" in s, timeout=60, what="top's end")
        assert "JOB-OUT 0" in s and "JOB-ERR 0" in s and "JOB-OUT 80" in s, s
        assert "the program's output is above" in s
    finally:
        t.kill()
    assert sorted(os.listdir(tmp)) == []


# ---- the job's command line -------------------------------------------------------------

_SHOW_SELF = """\
import json, os, sys, time
print(json.dumps({"argv": sys.argv, "orig_argv": sys.orig_argv[1:],
                  "pythonpath": os.environ.get("PYTHONPATH"),
                  "ours": sorted(k for k in os.environ if k.startswith("PYTRACE")),
                  "path0": sys.path[0], "customize": sorted(m for m in sys.modules if "customize" in m)}),
      flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
"""


def _cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")[:-1]]


@pytest.mark.parametrize("how", ["run", "record", "top"])
def test_the_traced_job_command_line_is_its_own(tmp_path, how):
    """/proc/PID/cmdline of the traced job reads `python show.py GO` (it read `python
    .../_launch.py c_calls=1 policy=drop -- show.py GO`), so ps and pgrep -f show the
    program; sys.argv, sys.orig_argv, sys.path[0], PYTHONPATH and the environment are
    what the untraced program sees."""
    (tmp_path / "show.py").write_text(_SHOW_SELF)
    go = tmp_path / "go"
    go.write_text("")
    plain = subprocess.run([PY, "show.py", str(go)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    go.unlink()
    if how == "run":
        args = ["run", "show.py", str(go)]
    elif how == "record":
        args = ["record", "-o", str(tmp_path / "s.pytrace"), "--", PY, "show.py", str(go)]
    else:
        args = ["top", "--once", "--", PY, "show.py", str(go)]
    job = subprocess.Popen([PY, "-m", "pytrace", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        # its first line, within a minute (top used to keep it in a log file until the end)
        ready, _, _ = select.select([job.stdout], [], [], 60)
        assert ready, "the job's output did not come through"
        seen = json.loads(job.stdout.readline())
        pids = subprocess.run(["pgrep", "-f", "show.py %s" % go], capture_output=True,
                              text=True).stdout.split()
        traced = [p for p in map(int, pids) if p != job.pid or how == "run"]
        assert len(traced) == 1, (pids, job.pid)
        cmdline = _cmdline(traced[0])
        go.write_text("")
        assert job.wait(timeout=120) == 0, job.stderr.read()
    finally:
        go.write_text("")
        if job.poll() is None:
            job.kill()
            job.wait()
    assert cmdline[1:] == ["show.py", str(go)], cmdline
    assert os.path.basename(cmdline[0]).startswith("python"), cmdline
    untraced = json.loads(plain.stdout)
    if how != "run":
        # record and top trace the job's Python children too (--subprocesses is theirs by
        # default): those, and only those, see the children's hook on PYTHONPATH
        assert re.fullmatch(r".*/pytrace-site-\w+", seen.pop("pythonpath") or ""), seen
        seen["ours"].remove("PYTRACE_SUBPROCESS_OPTIONS")
        untraced.pop("pythonpath")
    assert seen == untraced, (seen, plain.stdout)


# ---- pytrace top --file REC --pid PID ------------------------------------------------------

def test_top_file_with_pid_shows_that_process_of_the_recording(tmp_path):
    """`pytrace top --file REC --pid PID` shows process PID of the recording, as
    `pytrace-top --file REC --pid PID` does (PID was taken for a live process to attach:
    "no process PID")."""
    (tmp_path / "job.py").write_text("def work(n):\n    return sum(range(n))\n"
                                     "for i in range(50):\n    work(100)\n")
    rec = tmp_path / "j.pytrace"
    r = _cli(tmp_path, "record", "-o", str(rec), "--", PY, "job.py")
    assert r.returncode == 0, r.stderr
    pid = int(re.search(r"tracing pid (\d+)", r.stderr).group(1))
    ours = _cli(tmp_path, "top", "--file", str(rec), "--pid", str(pid), "--once", "--json")
    theirs = subprocess.run([find_top(), "--file", str(rec), "--pid", str(pid), "--once", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    doc = json.loads(ours.stdout)
    assert doc["pid"] == pid
    assert [f["calls"] for f in doc["functions"] if f["name"] == "work"] == [50]
    assert doc["functions"] == json.loads(theirs.stdout)["functions"]
    # every value option of pytrace-top is one: --tree-budget 64 was taken for pid 64
    budget = _cli(tmp_path, "top", "--file", str(rec), "--tree-budget", "64", "--once", "--json")
    assert budget.returncode == 0, budget.stderr
    assert json.loads(budget.stdout)["functions"] == json.loads(theirs.stdout)["functions"]


def test_top_file_json_pid_is_the_shown_process_of_a_multi_process_recording(tmp_path):
    """`--once --json` of a recording of several processes: "pid" is the shown
    process's (--pid CHILD: the child's; without --pid: the job's), as the text output
    and the screen say. It was the pid of the last process read, whichever was shown."""
    (tmp_path / "job.py").write_text(
        "import os, sys\n"
        "def work(n):\n    return sum(range(n))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    work(100)\n    os._exit(0)\n"
        "os.waitpid(pid, 0)\nprint(os.getpid(), pid, flush=True)\n")
    rec = tmp_path / "f.pytrace"
    r = _cli(tmp_path, "record", "-o", str(rec), "--", PY, "job.py")
    assert r.returncode == 0, r.stderr
    job, child = map(int, r.stdout.split())
    for shown, args in ((job, []), (job, ["--pid", str(job)]), (child, ["--pid", str(child)])):
        out = subprocess.run([find_top(), "--file", str(rec), "--once", "--json", *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert sorted(p["pid"] for p in doc["processes"]) == sorted([job, child]), doc["processes"]
        assert doc["pid"] == shown, (args, doc["pid"], job, child)
        text = subprocess.run([find_top(), "--file", str(rec), "--once", *args],
                              capture_output=True, text=True, timeout=60)
        if args:
            assert text.stdout.startswith("pid %d " % shown), text.stdout[:80]


# ---- workers that end normally ---------------------------------------------------------------

_WORKERS = """\
import multiprocessing as mp, os, sys
def work(x):
    return sum(range(x))
def crash():
    os.kill(os.getpid(), 9)
if __name__ == "__main__":
    mp.set_start_method(sys.argv[1])
    p = mp.Process(target=work, args=(1000,)); p.start(); p.join()
    pool = mp.Pool(2); total = sum(pool.map(work, [100] * 8)); pool.close(); pool.join()
    k = mp.Process(target=crash); k.start(); k.join()
    print(os.getpid(), p.pid, k.pid, p.exitcode, k.exitcode, total, flush=True)
"""


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_workers_that_end_normally_are_exited_and_a_killed_one_died(tmp_path, method):
    """A Process with exit code 0 and the workers of a closed and joined Pool leave
    through os._exit: the recording says each "exited" (they read "died"); a worker
    killed by SIGKILL still reads "died"."""
    (tmp_path / "workers.py").write_text(_WORKERS)
    rec = tmp_path / "w.pytrace"
    r = _cli(tmp_path, "record", "-o", str(rec), "--", PY, "workers.py", method)
    assert r.returncode == 0, r.stderr
    job, ok, killed, ok_code, killed_code, total = map(int, r.stdout.split())
    assert (ok_code, killed_code, total) == (0, -9, 39600)
    top = subprocess.run([find_top(), "--file", str(rec), "--once", "--json", "--limit", "1"],
                         capture_output=True, text=True, timeout=60)
    states = {p["pid"]: p["state"] for p in json.loads(top.stdout)["processes"]}
    assert states[job] == "exited" and states[ok] == "exited", states
    assert states.get(killed, "died") == "died", states      # killed: never "exited"
    workers = set(states) - {job, ok, killed}       # the Pool's (and the forkserver)
    assert len(workers) >= 2, states
    assert {states[p] for p in workers} == {"exited"}, states


# ---- pytrace top 1, unknown commands --------------------------------------------------------

def test_top_pid_1_as_root_gives_no_run_as_root_advice(tmp_path):
    """As root, a pid whose memory the kernel refuses even to root (pid 1 here) was
    answered "run pytrace as root": now one line saying what is wrong with it."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    try:
        os.readlink("/proc/1/exe")
        pytest.skip("pid 1 is readable here")
    except PermissionError:
        pass
    for args in (["top", "1", "--once"], ["record", "-o", str(tmp_path / "x.pytrace"), "1"],
                 ["dump", "1"]):
        r = _cli(tmp_path, *args, timeout=60)
        assert r.returncode != 0
        lines = r.stderr.splitlines()
        assert len(lines) == 1, r.stderr
        assert "as root" not in lines[0].replace("even to root", ""), lines[0]
        assert "pid 1" in lines[0] and "refused" in lines[0], lines[0]


def test_unknown_command_lists_every_command(tmp_path):
    """An unknown command's error lists every command of `pytrace --help` (it left out
    hub), and each listed command answers --help."""
    r = _cli(tmp_path, "frobnicate", timeout=60)
    assert r.returncode == 2
    listed = re.search(r"\(try: ([^)]*)\)", r.stderr).group(1).split(", ")
    usage = _cli(tmp_path, "--help", timeout=60).stdout
    documented = re.findall(r"^  (\w+) ", usage.split("commands:")[1], re.M)
    assert "hub" in listed
    assert set(documented) <= set(listed), (documented, listed)
    for command in listed:
        h = _cli(tmp_path, command, "--help", timeout=60)
        assert h.returncode == 0 and "usage" in h.stdout.lower(), (command, h.stderr)
