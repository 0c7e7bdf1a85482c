"""The parent's side of a traced job: how `pytrace run`, `record`, `top` and `web`
start a Python program traced, and stop it.

    argv, env = command(interp, flags, options, program)     `pytrace run` execs it
    job, segment, wait_w = start_job(interp, flags, options, program)   record, top, web:
        the job reports its segment and waits, traced, until wait_w is closed (attach first)
    note = stop_job(job)                                      Ctrl-C, then SIGTERM, SIGKILL

What runs inside the job is the launcher (pytrace/_launch.py), which imports nothing of
this package: what both sides read -- python's command line (split_python_args,
interpreter_flags) and the encoding of the options (encode_options, env_encode,
LAUNCH_ENV) -- is defined there, once, and used from here.
"""

import os
import re
import sys

from . import _launch

# A process of a tree that a hub reads (record, top, run --hub --subprocesses) waits at
# its exit, when no reader holds its segment yet, up to this long for the hub (start()'s
# exit_wait): a child that ends before the hub found it is read all the same. The hub
# gives up on a child it cannot attach in the same 2 s (CHILD_RETRY_NS).
HUB_CHILD_EXIT_WAIT = 2.0


PYTHON_NAME = r"python[0-9.]*t?"   # an interpreter by its name (split_command too); t: free-threaded


def split_command(command):
    """`python [flags] program...` (or just the program: a script run by this interpreter,
    or a console script on PATH, see find_program) -> (interpreter, its flags,
    program as _launch.split_python_args gives it).
    ValueError (one line) for what python would not run as a program."""
    interp = sys.executable
    if command and re.fullmatch(PYTHON_NAME, os.path.basename(command[0])):
        interp, command = command[0], command[1:]
    elif command and not command[0].startswith("-"):
        # a program without its interpreter: a script, or a console script on PATH
        shebang, flags, path = find_program(command[0])
        return shebang or interp, flags, [path] + list(command[1:])
    flags, program = _launch.split_python_args(list(command))
    return interp, flags, program


def find_program(word):
    """A program named without an interpreter (`record -- pytest`, `pytrace run job.py`):
    a file here, else a command on PATH, run as the shell would run it but traced.
    -> (interpreter or None for pytrace's own, its flags, the path to run). A script with
    a Python shebang (a console script: pytest, pip) runs under that shebang's interpreter,
    where its packages are; one with no shebang is Python source, as before. ValueError,
    in one line, for what is not Python: a native executable, a shell or other script."""
    import shutil
    path = word
    if os.sep not in word and not os.path.exists(word):
        path = shutil.which(word)
        if path is None:
            return None, [], word        # python says it: can't open file
    if os.path.isdir(path) or not os.path.isfile(path):
        return None, [], path            # a directory with __main__.py; or python says why
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None, [], path
    if head.startswith(b"\x7fELF") or b"\0" in head[:1024] and not head.startswith(b"PK"):
        raise ValueError("%s is a native executable, not a Python program: pytrace runs Python "
                         "(a script, -m module, -c code, or a Python console script)" % path)
    if not head.startswith(b"#!") or not os.access(path, os.X_OK):
        return None, [], path            # Python source (or a zip), run as python runs it
    shebang = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    words = list(shebang)
    if words and os.path.basename(words[0]) == "env":        # #!/usr/bin/env [-S] python3 -u
        words = [w for w in words[1:] if w != "-S" and "=" not in w]
        if words:
            words[0] = shutil.which(words[0]) or words[0]
    if words and re.fullmatch(PYTHON_NAME, os.path.basename(words[0])):
        try:
            flags = _launch.split_python_args(words[1:])[0]
        except ValueError:
            flags = []
        return words[0], flags, path
    shim = re.search(rb'exec "([^"]*/pyenv)" exec', head)
    if shim and word == os.path.basename(word):      # pyenv's shim: the command it runs
        import subprocess
        try:
            real = subprocess.run([shim.group(1).decode(errors="replace"), "which", word],
                                  capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            real = ""
        if real and real != path and os.path.isfile(real):
            return find_program(real)
    raise ValueError("%s is a %s script, not a Python program: pytrace runs Python (a script, "
                     "-m module, -c code, or a Python console script)"
                     % (path, os.path.basename(shebang[0]) if shebang else "#!"))


def launcher_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.py")


def boot_dir():
    """The directory of the sitecustomize.py / usercustomize.py that start a job's
    tracing (put first on its PYTHONPATH by command(); see boot())."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def _skips_boot(flags):
    """True if these interpreter flags keep python from importing sitecustomize from
    PYTHONPATH (-E, -I: no PYTHONPATH; -S: no site)."""
    i = 0
    while i < len(flags):
        flag = flags[i]
        if flag in ("-W", "-X") or flag.startswith("--"):
            i += 1 if "=" in flag else 2
            continue
        if any(letter in flag[1:] for letter in "EIS"):
            return True
        i += 1
    return False


def command(interp, flags, options, program, env=None, **launch):
    """-> (argv, environment) that run `program` (as split_python_args gives it) traced
    with start() `options`, under `interp` with its `flags`. launch: report_fd, wait_fd,
    quiet, subprocesses. env: the environment to start from (os.environ).

    The command line is the program's own (`python [flags] job.py args`, as ps and
    /proc/PID/cmdline show it untraced): the options travel in LAUNCH_ENV, and the
    sitecustomize of boot_dir(), first on PYTHONPATH, starts tracing (_launch.boot()),
    and puts PYTHONPATH back. Flags that keep python from reading PYTHONPATH or from running
    site (-E, -I, -S) get the launcher's command line instead: python .../_launch.py
    [options] -- PROGRAM."""
    opts = dict(options)
    opts.update({k: v for k, v in launch.items() if v is not None})
    env = dict(os.environ if env is None else env)
    if _skips_boot(flags):
        return ([interp] + list(flags) + [launcher_path()] + _launch.encode_options(opts) + ["--"]
                + list(program)), env
    if "PYTHONPATH" in env:
        opts["pythonpath"] = env["PYTHONPATH"]
    env["PYTHONPATH"] = boot_dir() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[_launch.LAUNCH_ENV] = _launch.env_encode(_launch.encode_options(opts))
    return [interp] + list(flags) + list(program), env


def start_job(interp, flags, options, program, timeout=30.0, subprocesses=None, **popen):
    """Start `program` traced with the handshake (record, top): -> (Popen, segment name
    or "" if tracing did not start within `timeout` s, wait_fd). The job waits, with
    tracing on, until wait_fd is closed: attach first, then close it. subprocesses: a
    directory from write_subprocess_hook() (its Python children are traced too; the
    job removes it at exit): the job's hub reads them, so each waits for it at exit
    (HUB_CHILD_EXIT_WAIT). OSError if the interpreter cannot be started."""
    import subprocess
    if subprocesses:
        options = dict(options, exit_wait=HUB_CHILD_EXIT_WAIT)
    report_r, report_w = os.pipe()
    wait_r, wait_w = os.pipe()
    argv, env = command(interp, flags, options, program, env=popen.pop("env", None),
                        report_fd=report_w, wait_fd=wait_r, quiet=True, subprocesses=subprocesses)
    try:
        job = subprocess.Popen(argv, pass_fds=(report_w, wait_r), env=env, **popen)
    except OSError:
        os.close(report_r)
        os.close(wait_w)
        raise
    finally:
        os.close(report_w)
        os.close(wait_r)
    segment = read_line(report_r, timeout)
    os.close(report_r)
    return job, segment, wait_w


def stop_job(job):
    """Stop a job we started (record, top, web): SIGINT as a terminal's Ctrl-C would, then
    SIGTERM, then SIGKILL, each after a grace. -> None where SIGINT was enough (or the job
    had ended), else one line for the user: which signal ended it and what that leaves."""
    import signal
    import subprocess
    for sig, grace in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        if job.poll() is not None:
            break
        job.send_signal(sig)
        try:
            job.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGINT:
            return None
        return ("the program did not end within 5 s of SIGINT (Ctrl-C); %s ended it, before its "
                "tracing could finish: its segment may be left in /dev/shm (pytrace ls --collect "
                "removes it)" % signal.Signals(sig).name)
    return None


def read_line(fd, timeout):
    """The first line a child writes to fd, within timeout seconds ("" if none): the
    segment name a job reports once tracing started, the socket a hub listens on."""
    import select
    import time
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            ready, _, _ = select.select([fd], [], [], left)
        except InterruptedError:
            continue
        if not ready:
            break
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n")[0].decode(errors="replace").strip()


def subprocess_hook():
    """A new directory holding the sitecustomize.py that traces Python children (the
    launcher puts it first on their PYTHONPATH and removes it at exit)."""
    import tempfile
    hook_dir = tempfile.mkdtemp(prefix="pytrace-site-")
    write_subprocess_hook(hook_dir)
    return hook_dir


def write_subprocess_hook(hook_dir):
    """The sitecustomize.py and usercustomize.py of `pytrace run --subprocesses` in
    hook_dir: they run autostart() from the launcher without importing the pytrace
    package (its bytecode cache is used)."""
    text = ("# written by `pytrace run --subprocesses`: trace this Python child too\n"
            "def _pytrace_autostart(launcher=%r, hook=__file__):\n"
            "    from _frozen_importlib_external import SourceFileLoader\n"
            "    code = SourceFileLoader('pytrace._launch', launcher).get_code('pytrace._launch')\n"
            "    namespace = {'__name__': 'pytrace._launch', '__file__': launcher}\n"
            "    exec(code, namespace)\n"
            "    namespace['autostart'](hook)\n"
            "_pytrace_autostart()\n"
            "del _pytrace_autostart\n" % launcher_path())
    for name in ("sitecustomize.py", "usercustomize.py"):
        with open(os.path.join(hook_dir, name), "w") as f:
            f.write(text)
