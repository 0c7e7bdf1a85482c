"""The `pytrace` command line.

    pytrace run [options] script.py [args...]     run a program traced
    pytrace run [options] -m module [args...]
    pytrace run [options] -c code [args...]
    pytrace ls [--all] [--collect]                 list segments
    pytrace top [PID | SEGMENT | -- python script.py args]   live view (pytrace.top)
    pytrace record -o OUT (-- python script.py args | PID)  record to a file (pytrace.record)
    pytrace export FILE --format F -o OUT         export a recording (pytrace.export)
    pytrace web [PID | --file REC | -- python script.py args]   browser view (pytrace.web)
    pytrace merge A B ... -o OUT                   merge recordings (pytrace.merge)
    pytrace attach [options] PID | detach PID      trace a running process (pytrace.attach)
    pytrace dump PID                               print every thread's stack (pytrace.dump)
    pytrace hub PID | SEGMENT                      serve a job to many readers (pytrace-hub)

`top`, `record`, `export`, `merge` and `web` run `pytrace.<name>.main(argv)`.
"""

import json
import os
import sys

from . import _launch
from .cmdline import ArgumentParser, UsageError, extension, printable, run_parser, start_options

USAGE = """usage: pytrace run [options] (script.py | -m module | -c code) [args...]
       pytrace ls [--all] [--collect]
       pytrace top [PID | SEGMENT | [options] -- python script.py [args...]]
       pytrace record -o OUT [options] (-- python script.py [args...] | PID)
       pytrace export FILE --format perfetto|chrome|speedscope|collapsed|pstats|html -o OUT
       pytrace merge A.pytrace B.pytrace ... -o OUT
       pytrace web [PID | SEGMENT | --file REC | [options] -- python script.py [args...]]
       pytrace attach [options] PID | pytrace detach PID
       pytrace dump PID
       pytrace hub PID | SEGMENT

commands:
  run      run a Python program traced; a reader (pytrace top, record) can attach any time
           (run --hub: with its hub, so any number of readers can)
  ls       list the traced jobs on this machine (--all: also ended ones; --collect: remove those)
  top      the live view of a traced job: pick one, attach to PID, or start a program
  record   write a recording of a job (lossless by default) for export or pytrace top --file
  export   turn a recording into a Perfetto trace, Chrome JSON, speedscope, collapsed stacks, pstats
           or a self-contained HTML report
  merge    one recording of several (a job's ranks recorded on several machines), aligned by wall clock
  web      the live browser view of a traced job (flame graph, table, timeline) on 127.0.0.1
  attach   start tracing inside a running Python 3.14+ process (PEP 768); detach stops it
  dump     print every thread's current Python stack of a process
  hub      serve a running job to any number of readers (top, record, pytrace.Reader) at once

`pytrace COMMAND --help` gives each command's options. pytrace -V: the version."""


def _subprocess_hook():
    return _launch.subprocess_hook()


def _exit_code(exc):
    """The process exit code python would use for a SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


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


def cmd_run(argv):
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
            shebang, shebang_flags, path = _launch.find_program(program[0])
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
        launch["subprocesses"] = _subprocess_hook()
    if hub:
        _start_run_hub(ns.subprocesses)
        if ns.subprocesses:       # the hub reads the tree: a child that ends early waits for it
            opts["exit_wait"] = _launch.HUB_CHILD_EXIT_WAIT
    argv, env = _launch.command(interp, flags, opts, program, **launch)
    if interp == sys.executable and sys.orig_argv:
        argv[0] = sys.orig_argv[0]      # `python -m pytrace run job.py` becomes `python job.py`
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(interp, argv, env)
    except OSError as e:
        sys.stderr.write("pytrace: cannot run %s: %s\n" % (interp, e))
        return 1


def cmd_ls(argv):
    p = ArgumentParser(prog="pytrace ls", description="List pytrace segments.")
    p.add_argument("--all", action="store_true", help="include stale segments of dead processes")
    p.add_argument("--collect", action="store_true", help="remove stale segments")
    p.add_argument("--json", action="store_true", help="print JSON")
    ns = p.parse_args(argv)
    ext = extension()
    if ns.collect:
        removed = ext.collect_stale()
        print("pytrace: removed %d stale segment%s" % (removed, "" if removed == 1 else "s"))
        return 0
    segs = ext.list_segments()
    if not ns.all:
        segs = [s for s in segs if s.get("alive") and s.get("valid", True)]
    if ns.json:
        print(json.dumps(segs, indent=1))
        return 0
    if not segs:
        print("no %ssegments" % ("" if ns.all else "live "))
        return 0
    from .reader import ProducerState
    state_names = {int(st): st.name.lower() for st in ProducerState}   # 0: "empty", 1: "running", ...
    rows = [("PID", "STATE", "THREADS", "EVENTS", "DROPPED", "SEGMENT", "COMMAND")]
    for s in segs:
        state = s.get("state")
        state = state_names.get(state, str(state)) if isinstance(state, int) else str(state)
        if not s.get("alive"):
            state = "stale" if state not in ("exited",) else "exited"
        if not s.get("valid", True):
            state = "invalid"
        cmd = printable(s.get("cmdline") or s.get("error") or "")
        rows.append((str(s.get("pid", "?")), state, str(s.get("threads_active", "")),
                     str(s.get("events_written", "")), str(s.get("events_dropped", "")),
                     printable(s.get("name", "")), cmd))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6])
    from .losses import OTHER_LOSSES, describe
    for s in segs:                    # DROPPED is events; the other losses, one line each
        lost = describe(s, OTHER_LOSSES)
        if lost:
            print("%s also lost: %s" % (printable(s.get("name", "")), lost))
    return 0


def cmd_hub(argv):
    p = ArgumentParser(prog="pytrace hub",
                       description="Start the hub of a running traced job: it becomes the job's one "
                                   "reader and serves it to any number of readers (pytrace top PID, "
                                   "pytrace record PID, pytrace.Reader(PID)), which find it by themselves. "
                                   "It ends when the job ends.")
    p.add_argument("target", metavar="PID|SEGMENT", help="the job (its pid or segment name)")
    p.add_argument("--subprocesses", action="store_true",
                   help="also read every traced process the job starts (each message tagged "
                        "with its process)")
    ns = p.parse_args(argv)
    extension()
    from .reader import start_hub
    try:
        proc, path = start_hub(ns.target, detach=True, subprocesses=ns.subprocesses)
    except OSError as e:
        sys.stderr.write("pytrace hub: %s\n" % (e.strerror or e))
        return 1
    print("pytrace hub: pid %d serves %s at %s%s" % (proc.pid, printable(ns.target), path,
                                                     "; its messages go to %s" % proc.log if proc.log else ""))
    return 0


def cmd_reserved(name, argv):
    import importlib
    try:
        module = importlib.import_module("pytrace." + name)
    except ModuleNotFoundError as e:
        if e.name not in ("pytrace." + name,):
            raise
        sys.stderr.write("pytrace: '%s' is not available in this build\n" % name)
        return 2
    return module.main(argv)


def _cmd_attach(command, argv):
    from . import attach
    return attach.main(command, argv)


def _cmd_dump(command, argv):
    from . import dump
    return dump.main(argv)


# Every command, in USAGE's order: main() dispatches from here, and an unknown command's
# error lists these (one list, so none is left out).
COMMANDS = {
    "run": lambda command, argv: cmd_run(argv),
    "ls": lambda command, argv: cmd_ls(argv),
    "top": cmd_reserved,
    "record": cmd_reserved,
    "export": cmd_reserved,
    "merge": cmd_reserved,
    "web": cmd_reserved,
    "attach": _cmd_attach,
    "detach": _cmd_attach,
    "dump": _cmd_dump,
    "hub": lambda command, argv: cmd_hub(argv),
}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from . import __version__
        print("pytrace", __version__)
        return 0
    command, rest = argv[0], argv[1:]
    try:
        if command not in COMMANDS:
            raise UsageError("unknown command %r (try: %s)" % (command, ", ".join(COMMANDS)))
        code = COMMANDS[command](command, rest)
    except UsageError as e:
        sys.stderr.write("pytrace%s: %s\n" % (" " + e.command if e.command else "", e))
        return 2
    except SystemExit as e:   # argparse --help
        return _exit_code(e)
    return code


def _entry():
    sys.exit(main())


if __name__ == "__main__":
    _entry()
