"""`pytrace top`: the live terminal view.

    pytrace top                                  pick a traced job (runs pytrace-top)
    pytrace top PID | SEGMENT [options]          attach to a running traced job; a Python
                                                 3.14+ process that is not traced is attached
                                                 (pytrace attach) and detached when the view closes
    pytrace top --help                           these forms, the job options and pytrace-top's
    pytrace top [job options] -- python script.py [args...]    (or -m module, -c code)
                                                 start the program traced and show it at once

Job options (before `--`): --no-c-calls, --torch, --policy drop|wait, --ring-size MiB,
--include X, --exclude X (as for `pytrace run`); any other option before `--` goes to
pytrace-top (e.g. --once --json --duration S).

With --once the program's output passes through (its standard output to ours, or to
our standard error with --json, so that standard output holds only the JSON) and the
table follows at its end. The live view owns the screen: the program's output is kept
aside in unnamed files (nothing is left in /tmp, even if top is killed) and printed
when the view closes. Quitting the view while the program still runs stops it (SIGINT,
then SIGTERM); the exit code is the program's.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import _job
from .cmdline import UsageError, job_options_help, run_parser, start_options

_JOB_FLAGS_WITH_VALUE = ("--policy", "--ring-size", "--include", "--exclude")
_JOB_FLAGS = ("--no-c-calls", "--torch")


def _say(text):
    sys.stderr.write("pytrace top: %s\n" % text)
    sys.stderr.flush()


def find_viewer():
    """pytrace-top next to this interpreter's scripts, else on PATH."""
    from .reader import installed_program
    return installed_program("pytrace-top")


def _split_options(before):
    """-> (options for `pytrace run`, options for pytrace-top)."""
    job, view = [], []
    i = 0
    while i < len(before):
        a = before[i]
        name = a.split("=", 1)[0]
        if name in _JOB_FLAGS_WITH_VALUE:
            if "=" in a:
                job.append(a)
                i += 1
            elif i + 1 < len(before):
                job += before[i:i + 2]
                i += 2
            else:
                raise ValueError("%s needs a value" % a)
            value = job[-1].split("=", 1)[1] if "=" in job[-1] else job[-1]
            if name == "--policy" and value not in ("drop", "wait"):
                raise ValueError("--policy must be drop or wait, not %r" % value)
            if name == "--ring-size":
                try:
                    if float(value) <= 0:
                        raise ValueError
                except ValueError:
                    raise ValueError("--ring-size must be a positive number of MiB, not %r" % value) from None
        elif a in _JOB_FLAGS:
            job.append(a)
            i += 1
        else:
            view.append(a)
            i += 1
    return job, view


_USAGE = """usage: pytrace top [--all]                        pick a traced job from the list of live ones
       pytrace top PID | SEGMENT [view options]     attach to a running traced job
       pytrace top [job options] [view options] PID a Python 3.14+ process that is not traced:
                                                    attach to it, and detach when the view closes
       pytrace top --file REC [view options]        show a recording (pytrace record -o REC)
       pytrace top [job options] [view options] -- python script.py [args...]
                                                    start the program traced and show it at once
                                                    (python's flags, -m module, -c code too)

The live view of a traced job (the pytrace-top program; `pytrace top ARGS` runs
`pytrace-top ARGS` when there is no `--`).

With `--`, the program runs as `pytrace run` runs it (a console script on PATH too,
e.g. -- pytest). The live view keeps the program's output aside and prints it when the
view closes. Quitting the view while the program runs stops it; the exit code is the
program's. With --once the program's output passes through, the view waits for the
program's end (or --duration S) and prints its table.

job options (before --, as for pytrace run):
"""


def _help(viewer_path):
    """pytrace top's own help: its three forms, the job options (formatted by `pytrace
    run`'s own parser, so they read the same) and pytrace-top's options."""
    try:
        job = job_options_help(_JOB_FLAGS + _JOB_FLAGS_WITH_VALUE)
    except Exception:           # the defaults come from the extension: never fail --help on it
        job = "".join("  %s\n" % f for f in _JOB_FLAGS + _JOB_FLAGS_WITH_VALUE)
    text = _USAGE + job + "\nview options (any other option before --, passed to pytrace-top):\n"
    if viewer_path is None:
        return text + "  (pytrace-top is not installed; pip install pytrace puts it next to python)\n"
    try:
        r = subprocess.run([viewer_path, "--help"], capture_output=True, text=True, timeout=10)
        view = r.stdout
    except (OSError, subprocess.SubprocessError) as e:
        view = "  (pytrace-top --help failed: %s)\n" % e
    lines = view.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("options:")), None)
    if start is None:           # not the layout expected: show it whole
        return text + view
    return text + "\n".join(lines[start + 1:]) + "\n"


def _wait_attached(segment, viewer, timeout):
    """True once the viewer process holds the segment's consumer lock."""
    from . import _pytrace
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if viewer.poll() is not None:
            return False
        for s in _pytrace.list_segments():
            if s["name"] == segment and s["consumer_pid"] == viewer.pid:
                return True
        time.sleep(0.02)
    return False


def _still_tracing(segment):
    """True while the job's segment is there and running (not stopped or exited)."""
    from . import _pytrace
    try:
        return any(s.get("name") == segment and s.get("state") == 1 and s.get("alive")
                   for s in _pytrace.list_segments())
    except OSError:
        return True


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    viewer_path = find_viewer()
    if any(a in ("-h", "--help") for a in (argv[:argv.index("--")] if "--" in argv else argv)):
        sys.stdout.write(_help(viewer_path))
        return 0
    if viewer_path is None:
        _say("pytrace-top is not installed (pip install pytrace puts it next to python)")
        return 1
    if "--" not in argv:
        # a Python 3.14+ process that is not traced: attach, view, detach (pytrace.attach)
        from . import attach
        code = attach.view_untraced(viewer_path, argv, _split_options, _say)
        if code is not None:
            return code
        # attach / pick: pytrace-top does it all
        os.execv(viewer_path, [viewer_path] + argv)
    cut = argv.index("--")
    try:
        job_opts, view_opts = _split_options(argv[:cut])
        interp, flags, target = _job.split_command(argv[cut + 1:])
    except ValueError as e:
        _say(str(e))
        return 2
    if not target:
        _say("give the program to run: pytrace top -- python script.py [args]")
        return 2

    if "--once" in view_opts and not any(o == "--duration" or o.startswith("--duration=")
                                         for o in view_opts):
        # --once on a program we start: its table when it ends (the viewer stops at the
        # job's end), not an empty one taken before it ran
        view_opts = view_opts + ["--duration", "31536000"]
    try:
        options = start_options(run_parser().parse_args(job_opts), "top")
    except UsageError as e:
        _say(str(e))
        return 2
    if "--once" in view_opts:
        # the table comes at the end: the output passes through (--json: stdout is the JSON's)
        aside = None
        streams = {"stdout": sys.stderr if "--json" in view_opts else None}
    else:
        # the screen is the view's: unnamed files (gone with the last fd), shown after it
        aside = (tempfile.TemporaryFile(), tempfile.TemporaryFile())
        streams = {"stdin": subprocess.DEVNULL, "stdout": aside[0], "stderr": aside[1]}
    sys.stdout.flush()
    sys.stderr.flush()
    hook_dir = _job.subprocess_hook()       # the job removes it at its exit
    try:
        job, segment, wait_w = _job.start_job(interp, flags, options, target,
                                              subprocesses=hook_dir, **streams)
    except OSError as e:
        _say("cannot start %s: %s" % (interp, e))
        _close(aside)
        shutil.rmtree(hook_dir, ignore_errors=True)
        return 1
    if not segment:
        os.close(wait_w)
        rc = job.wait()
        shutil.rmtree(hook_dir, ignore_errors=True)   # a job that never traced left it
        _replay(aside)
        _say("the program did not start tracing (exit code %d)" % rc)
        return rc or 1

    # The job's hub: other readers (pytrace record PID, pytrace.Reader) can follow the
    # job beside the view; it drains nothing before the view joined (--hold 1).
    from .reader import start_hub
    hub = None
    try:
        hub, _ = start_hub(segment, hold=1, subprocesses=True)
    except OSError as e:
        _say("%s; the view reads the job directly" % e.strerror)
    viewer = subprocess.Popen([viewer_path, segment] + view_opts)
    try:
        if hub is None and not _wait_attached(segment, viewer, 10.0) and viewer.poll() is None:
            _say("pytrace-top did not attach within 10 s; the program runs on untraced by it")
    finally:
        os.close(wait_w)        # the program goes on
    interrupted = False
    while True:
        try:
            viewer.wait()
            break
        except KeyboardInterrupt:
            interrupted = True
    if job.poll() is None and not _still_tracing(segment):
        # Its tracing ended (the viewer saw it: --once): the program is in its last
        # steps (interpreter finalisation), not to be interrupted there.
        try:
            job.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass
    if job.poll() is None:
        note = _job.stop_job(job)
        if note:
            _say(note)
    rc = job.wait()
    if hub is not None:
        try:
            hub.wait(timeout=15.0)
        except subprocess.TimeoutExpired:
            pass                # still serving another reader: it ends with them
    if rc < 0:
        rc = 128 - rc
    if aside is not None:
        _replay(aside)
        _say("the program's output is above (exit code %d)" % rc)
    return 130 if interrupted and rc == 0 else rc


def _replay(aside):
    """The program's output kept aside while the view had the screen: to ours, then closed."""
    if aside is None:
        return
    for f, out in zip(aside, (sys.stdout, sys.stderr)):
        f.seek(0)
        out.flush()
        shutil.copyfileobj(f, out.buffer)
        out.flush()
    _close(aside)


def _close(aside):
    for f in aside or ():
        f.close()
