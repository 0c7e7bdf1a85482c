"""The user's program is the root of its picture (issue 10, items 3, 4 and 9's `-c`).

`pytrace run`, `record -- python ...` and `top -- python ...` start the program through
the launcher (pytrace/_launch.py): tracing starts before the program imports anything
that plain python would not have imported, and pytrace's own code -- the launcher, the
handshake with the recorder, stop() at exit -- leaves nothing in the picture. Checked
on real programs through the real exports (pstats, collapsed stacks).
"""

import ast
import os
import pstats
import signal
import subprocess
import sys
import threading
import time

import pytest

pytrace = pytest.importorskip("pytrace")
try:
    from pytrace import _pytrace
except ImportError:
    pytest.skip("the _pytrace extension is not built", allow_module_level=True)

PY = sys.executable
PACKAGE_DIR = os.path.dirname(os.path.abspath(pytrace.__file__))

PROGRAM = """\
import json

def work(n):
    return json.dumps(list(range(n)))

for _ in range(20):
    work(50)
print("done")
"""


def _cli(*args, cwd, timeout=120):
    return subprocess.run([PY, "-m", "pytrace", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _export(recording, tmp_path):
    """-> (pstats stats dict, collapsed lines [(frames, weight)])."""
    pst, folded = tmp_path / "out.pstats", tmp_path / "out.folded"
    for fmt, out in (("pstats", pst), ("collapsed", folded)):
        r = _cli("export", str(recording), "-f", fmt, "-o", str(out), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    stacks = []
    for line in folded.read_text().splitlines():
        stack, _, weight = line.rpartition(" ")
        stacks.append((stack.split(";"), int(weight)))
    return pstats.Stats(str(pst)).stats, stacks


def _pytrace_frames(stats, stacks):
    """Every frame of pytrace's own in the two exports: code inside the package, or a C
    function of its extension or of the handshake (posix.read)."""
    found = set()
    for (filename, _, name) in stats:
        if filename.startswith(PACKAGE_DIR) or "_pytrace." in name or "posix.read" in name:
            found.add((filename, name))
    for frames, _ in stacks:
        for frame in frames:
            if PACKAGE_DIR in frame or frame.startswith(("_pytrace.", "posix.read")):
                found.add(frame)
    return found


def _roots(stats):
    """pstats entries nobody called: the roots of the picture."""
    return {key for key, (_, _, _, _, callers) in stats.items() if not callers}


def _plain_startup_modules():
    r = subprocess.run([PY, "-c", "import sys; print(sorted(sys.modules))"], capture_output=True,
                       text=True, timeout=60)
    return set(ast.literal_eval(r.stdout))


# A site-packages .pth file may import threading before any program runs (this machine's
# does, through certifi). Python then runs threading._shutdown after the program's last
# line: the process's own code, traced as it runs, and a root of its picture beside the
# program's <module>. It is no frame of pytrace's.
THREADING_AT_START = "threading" in _plain_startup_modules()
_SHUTDOWN = threading._shutdown.__code__
SHUTDOWN_ROOTS = ({(_SHUTDOWN.co_filename, _SHUTDOWN.co_firstlineno, "_shutdown")}
                  if THREADING_AT_START else set())
SHUTDOWN_STACKS = ({"_shutdown (%s:%d)" % (_SHUTDOWN.co_filename, _SHUTDOWN.co_firstlineno)}
                   if THREADING_AT_START else set())


def _is_hub(pid):
    """A recorder of a pid reads through the hub it starts for a job that has none:
    is pid a pytrace-hub?"""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")[0].endswith(b"pytrace-hub")
    except OSError:
        return False


def _module_code(stats, suffix):
    return [key for key in stats if key[0].endswith(suffix) and key[2] == "<module>"]


@pytest.mark.parametrize("c_calls", [True, False], ids=["c_calls", "no_c_calls"])
def test_record_a_script_its_module_is_the_only_root_and_no_pytrace_frame(tmp_path, c_calls):
    """`record -- python script.py`: no frame of pytrace (its launcher, the handshake's
    posix.read, stop()) in the pstats and collapsed exports, the script's <module> is the
    only root, and its first `import json` shows json's own module code (pytrace had
    imported json, and much else, before the program ran)."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    rec = tmp_path / "p.pytrace"
    args = ["record", "-o", str(rec)] + ([] if c_calls else ["--no-c-calls"]) + ["--", PY, "prog.py"]
    r = _cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    stats, stacks = _export(rec, tmp_path)
    assert not _pytrace_frames(stats, stacks)
    assert _roots(stats) == {(str(script), 1, "<module>")} | SHUTDOWN_ROOTS
    assert {frames[0] for frames, _ in stacks} == {"<module> (%s:1)" % script} | SHUTDOWN_STACKS
    assert _module_code(stats, os.path.join("json", "__init__.py")), sorted(stats)[:20]
    assert _module_code(stats, os.path.join("json", "encoder.py"))
    work = [v for k, v in stats.items() if k[2] == "work"]
    assert len(work) == 1 and work[0][1] == 20


def test_run_then_record_pid_no_pytrace_frame(tmp_path):
    """`pytrace run script.py` (same pid: it replaces itself with the launcher) and
    `pytrace record -o f PID` attached while it runs: the recording has no pytrace frame,
    and the script's <module> is the main thread's only root."""
    script = tmp_path / "waits.py"
    go = tmp_path / "go"
    script.write_text("import os, sys, time\n"
                      "def work(n):\n    return sum(range(n))\n"
                      "print(os.getpid(), flush=True)\n"
                      "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.01)\n"
                      "for _ in range(30):\n    work(1000)\n")
    job = subprocess.Popen([PY, "-m", "pytrace", "run", "waits.py", str(go)], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    recorder = None
    try:
        assert int(job.stdout.readline()) == job.pid
        rec = tmp_path / "r.pytrace"
        recorder = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(rec), str(job.pid)],
                                    cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(s["pid"] == job.pid and (s["consumer_pid"] == recorder.pid or _is_hub(s["consumer_pid"]))
                      for s in _pytrace.list_segments()):
            assert time.monotonic() < deadline and recorder.poll() is None, "recorder never attached"
            time.sleep(0.02)
        go.write_text("")
        assert job.wait(timeout=60) == 0, job.stderr.read()
        assert recorder.wait(timeout=60) == 0, recorder.stderr.read()
    finally:
        for p in (job, recorder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    stats, stacks = _export(rec, tmp_path)
    assert not _pytrace_frames(stats, stacks)
    assert _roots(stats) == {(str(script), 1, "<module>")} | SHUTDOWN_ROOTS
    work = [v for k, v in stats.items() if k[2] == "work"]
    assert len(work) == 1 and work[0][1] == 30


_SHOW_MODULES = "import sys; print(sorted(sys.modules)); print(sys.flags.dev_mode, sys.flags.optimize)"


def _modules_and_flags(stdout):
    lines = stdout.splitlines()
    return set(ast.literal_eval(lines[0])), lines[1]


@pytest.mark.parametrize("flags", [[], ["-X", "dev", "-O"]], ids=["no_flags", "dev_O"])
@pytest.mark.parametrize("how", ["record_script", "record_c", "run_c", "run_script"])
def test_tracing_starts_before_anything_python_would_not_import(tmp_path, flags, how):
    """The modules loaded when the program's first line runs (tracing is on by then) are
    a subset of what plain python with the same flags loads, plus pytrace's extension;
    and the program runs with those flags (run replaces itself keeping them)."""
    (tmp_path / "show.py").write_text(_SHOW_MODULES + "\n")
    plain = subprocess.run([PY] + flags + ["-c", _SHOW_MODULES], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    program = ["show.py"] if how.endswith("script") else ["-c", _SHOW_MODULES]
    if how.startswith("record"):
        cmd = [PY, "-m", "pytrace", "record", "-o", str(tmp_path / "m.pytrace"), "--", PY] + flags + program
    else:
        cmd = [PY] + flags + ["-m", "pytrace", "run"] + program
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    traced, traced_flags = _modules_and_flags(r.stdout)
    untraced, plain_flags = _modules_and_flags(plain.stdout)
    assert traced_flags == plain_flags
    extension = {"pytrace._pytrace"}
    if "dev" in flags and sys.version_info < (3, 12) and "encodings.ascii" not in untraced:
        # 3.10/3.11 in dev mode look up the codec that the name of any extension module
        # is encoded with when it is loaded (importdl.c): loading one imports it
        extension.add("encodings.ascii")
    assert traced - untraced == extension, sorted(traced - untraced)


def test_module_program_loads_what_python_m_loads(tmp_path):
    """`record -- python -m mod`: runpy is imported, as python -m imports it, and nothing
    else beyond pytrace's extension."""
    (tmp_path / "showmod.py").write_text(_SHOW_MODULES + "\n")
    plain = subprocess.run([PY, "-m", "showmod"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    r = _cli("record", "-o", str(tmp_path / "m.pytrace"), "--", PY, "-m", "showmod", cwd=tmp_path)
    assert plain.returncode == 0 and r.returncode == 0, (plain.stderr, r.stderr)
    traced, _ = _modules_and_flags(r.stdout)
    untraced, _ = _modules_and_flags(plain.stdout)
    assert traced - untraced == {"pytrace._pytrace"}, sorted(traced - untraced)


_C_PROGRAM = ("import sys, json\n"
              "def work():\n    return json.dumps(sys.argv)\n"
              "print(work(), repr(sys.path[0]), __name__)\n"
              "sys.exit(3)\n")


def test_record_python_c_runs_like_python(tmp_path):
    """`record -- python -c code args` (refused with a hint about PYTHONOPTIMIZE): the
    program sees what python gives it (argv, sys.path[0], __main__), exits with its
    code, and the recording's root is its <module> in <string>."""
    plain = subprocess.run([PY, "-c", _C_PROGRAM, "a", "b"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode == 3
    rec = tmp_path / "c.pytrace"
    r = _cli("record", "-o", str(rec), "--", PY, "-c", _C_PROGRAM, "a", "b", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert r.stdout == plain.stdout == '["-c", "a", "b"] \'\' __main__\n'
    stats, stacks = _export(rec, tmp_path)
    assert not _pytrace_frames(stats, stacks)
    # (pstats keys the program with the code namedtuple eval()s: both are <string>:1)
    assert {frames[0] for frames, _ in stacks} == {"<module> (<string>:1)"} | SHUTDOWN_STACKS
    assert [v[1] for k, v in stats.items() if k[2] == "work"] == [1]


def test_top_once_python_c(tmp_path):
    """`pytrace top --once -- python -c code`: runs, and its table has the program's calls."""
    code = "def work(n):\n    return sum(range(n))\nfor i in range(40):\n    work(100)\n"
    r = _cli("top", "--once", "--", PY, "-c", code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    row = [line for line in r.stdout.splitlines() if line.split()[-2:-1] == ["work"]]
    header = [line for line in r.stdout.splitlines() if "CALLS" in line.split()][0].split()
    assert row and row[0].split()[header.index("CALLS")] == "40", r.stdout


def test_threading_imported_by_the_program_is_in_its_picture(tmp_path):
    """threading, imported by the program after tracing started, shows its module code,
    and a thread it starts is traced (on 3.10/3.11 with C calls the hook for new threads
    is set when the program imports threading; pytrace imported it before)."""
    (tmp_path / "thr.py").write_text(
        "import threading\n"
        "def worker():\n    return sum(range(100))\n"
        "t = threading.Thread(target=worker)\nt.start()\nt.join()\n")
    rec = tmp_path / "t.pytrace"
    r = _cli("record", "-o", str(rec), "--", PY, "thr.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stats, stacks = _export(rec, tmp_path)
    assert not _pytrace_frames(stats, stacks)
    if not THREADING_AT_START:      # else site imported it before the program, as untraced
        assert _module_code(stats, "threading.py")
    assert [v[1] for k, v in stats.items() if k[2] == "worker"] == [1]


def test_module_traceback_is_pythons(tmp_path):
    """An uncaught exception of `-m module` prints the traceback python -m prints (runpy's
    frames included, none of pytrace's), exit 1; a KeyboardInterrupt still ends by SIGINT."""
    (tmp_path / "failing.py").write_text("def f():\n    raise KeyError('x')\nf()\n")
    plain = subprocess.run([PY, "-m", "failing"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    r = _cli("run", "-m", "failing", cwd=tmp_path)
    assert r.returncode == plain.returncode == 1
    ours = [line for line in r.stderr.splitlines() if not line.startswith("pytrace: ")]
    assert ours == plain.stderr.splitlines()
    r = _cli("run", "-c", "raise KeyboardInterrupt", cwd=tmp_path)
    assert r.returncode == -signal.SIGINT, r.stderr
    assert "_launch" not in r.stderr


def test_subprocess_child_has_no_pytrace_frame(tmp_path):
    """`pytrace run --subprocesses`: a traced Python child, recorded by pid, has no frame
    of pytrace's (its sitecustomize start, the launcher) in its picture, and its first
    `import json` shows json's module code."""
    (tmp_path / "child.py").write_text(
        "import os, sys, time\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n"
        "import json\n"
        "def work():\n    return json.dumps([1])\n"
        "for _ in range(5):\n    work()\n")
    (tmp_path / "parent.py").write_text(
        "import subprocess, sys\nsubprocess.run([sys.executable, 'child.py'] + sys.argv[1:], check=True)\n")
    pid_file, go = tmp_path / "child.pid", tmp_path / "go"
    job = subprocess.Popen([PY, "-m", "pytrace", "run", "--subprocesses", "parent.py", str(pid_file),
                            str(go)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    recorder = None
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline and job.poll() is None, job.stderr.read()
            time.sleep(0.02)
        child = int(pid_file.read_text())
        rec = tmp_path / "child.pytrace"
        recorder = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(rec), str(child)],
                                    cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        while not any(s["pid"] == child and (s["consumer_pid"] == recorder.pid or _is_hub(s["consumer_pid"]))
                      for s in _pytrace.list_segments()):
            assert time.monotonic() < deadline and recorder.poll() is None, "recorder never attached"
            time.sleep(0.02)
        go.write_text("")
        assert job.wait(timeout=60) == 0, job.stderr.read()
        assert recorder.wait(timeout=60) == 0, recorder.stderr.read()
    finally:
        for p in (job, recorder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    stats, stacks = _export(rec, tmp_path)
    assert not _pytrace_frames(stats, stacks)
    assert _module_code(stats, os.path.join("json", "__init__.py"))
    assert [v[1] for k, v in stats.items() if k[2] == "work"] == [5]
