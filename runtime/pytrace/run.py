"""`pytrace run`: run a Python program traced from its first line, as python runs it.

    pytrace run [options] (script.py | -m module | -c code) [args...]

pytrace's options come first; the program's command line starts at the first word
that is not one (a script), or after -m MODULE or -c CODE. This process then becomes
the program (os.execve: same pid, the interpreter's flags kept), with tracing started
in it by the launcher (pytrace._launch) before the program imports anything.
"""

import os
import sys

from . import _job, _launch
from .cmdline import UsageError, run_parser, start_options

_VALUE_OPTIONS = ("--include", "--exclude", "--policy", "--rings", "--ring-size")


def _split_run_args(argv):
    """Split `run` arguments into pytrace's options and the program's command line:
    the program starts at the first non-option (a script) or just after `-m MODULE`
    or `-c CODE`, so its own options are never taken for ours."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-m", "-c"):
            return argv[:i + 2], argv[i + 2:]
        if arg[:2] in ("-m", "-c") and len(arg) > 2:          # -mmodule, -ccode
            return argv[:i] + [arg[:2], arg[2:]], argv[i + 1:]
        if arg == "--":
            return argv[:i], argv[i + 1:]
        if not arg.startswith("-") or arg == "-":
            return argv[:i], argv[i:]
        i += 2 if arg in _VALUE_OPTIONS else 1
    return argv, []


def _start_run_hub(subprocesses):
    """pytrace run --hub: a hub for this very process (its pid stays the job's across the
    exec below); it takes the segment as soon as tracing starts. It prints its socket's
    path once it listens, which happens after the exec: nobody waits for that here."""
    import subprocess
    from .reader import find_hub_binary
    binary = find_hub_binary()
    if binary is None:
        raise UsageError("--hub: pytrace-hub is not installed (pip install pytrace puts it "
                         "next to python)", "run")
    argv = [binary, "--quiet", "--wait", "30", str(os.getpid())]
    if subprocesses:
        argv.insert(1, "--subprocesses")
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)


def main(argv):
    """`pytrace run ARGV`: replaces this process with the program, traced (returns only
    when that fails)."""
    ours, program = _split_run_args(argv)
    hub = "--hub" in ours
    ours = [a for a in ours if a != "--hub"]
    ns = run_parser().parse_args(ours)
    if ns.module is not None and ns.code is not None:
        raise UsageError("give either -m module or -c code, not both", "run")
    if ns.module is None and ns.code is None and not program:
        raise UsageError("give a script (pytrace run script.py), a module (pytrace run -m mod) "
                         "or code (pytrace run -c code)", "run")
    if ns.module is None and ns.code is None and program[0].startswith("-") and program[0] != "-":
        raise UsageError("unknown option %s" % program[0], "run")
    opts = start_options(ns)
    interp, flags = sys.executable, _launch.interpreter_flags()
    if ns.module is not None:
        program = ["-m", ns.module] + program
    elif ns.code is not None:
        program = ["-c", ns.code] + program
    elif program[0] != "-":
        try:     # a console script on PATH (pytrace run pytest) runs under its shebang's python
            shebang, shebang_flags, path = _job.find_program(program[0])
        except ValueError as e:
            raise UsageError(str(e), "run") from None
        program = [path] + program[1:]
        if shebang:
            interp, flags = shebang, shebang_flags
    if program[0] != "-" and ns.module is None and ns.code is None and not os.path.exists(program[0]):
        # as python says it (and exits 2)
        raise UsageError("can't open file %r: [Errno 2] No such file or directory"
                         % os.path.abspath(program[0]), "run")
    # The program runs in a fresh interpreter (same pid, same flags) that starts
    # tracing before it imports anything python itself would not: this one has
    # imported argparse and the pytrace package, whose imports would be hidden.
    launch = {}
    if ns.subprocesses:
        launch["subprocesses"] = _job.subprocess_hook()
    if hub:
        _start_run_hub(ns.subprocesses)
        if ns.subprocesses:       # the hub reads the tree: a child that ends early waits for it
            opts["exit_wait"] = _job.HUB_CHILD_EXIT_WAIT
    argv, env = _job.command(interp, flags, opts, program, **launch)
    if interp == sys.executable and sys.orig_argv:
        argv[0] = sys.orig_argv[0]      # `python -m pytrace run job.py` becomes `python job.py`
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(interp, argv, env)
    except OSError as e:
        sys.stderr.write("pytrace: cannot run %s: %s\n" % (interp, e))
        return 1
