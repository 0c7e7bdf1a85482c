"""The `pytrace` command line.

    pytrace run [options] script.py [args...]     run a program traced
    pytrace run [options] -m module [args...]
    pytrace ls [--all] [--collect]                 list segments
    pytrace top [PID | SEGMENT | -- python script.py args]   live view (pytrace.top)
    pytrace record -o OUT (-- python script.py args | PID)  record to a file (pytrace.record)
    pytrace export FILE --format F -o OUT         export a recording (pytrace.export)

`top`, `record` and `export` run `pytrace.<name>.main(argv)`.
"""

import argparse
import json
import os
import runpy
import sys
import tempfile

USAGE = """usage: pytrace run [options] (script.py | -m module) [args...]
       pytrace ls [--all] [--collect]
       pytrace top [PID | SEGMENT | [options] -- python script.py [args...]]
       pytrace record -o OUT [options] (-- python script.py [args...] | PID)
       pytrace export FILE --format perfetto|speedscope|collapsed|pstats -o OUT

commands:
  run      run a Python program traced; a reader (pytrace top, record) can attach any time
  ls       list the traced jobs on this machine (--all: also ended ones; --collect: remove those)
  top      the live view of a traced job: pick one, attach to PID, or start a program
  record   write a recording of a job (lossless by default) for export or pytrace top --file
  export   turn a recording into Perfetto/Chrome JSON, speedscope, collapsed stacks or pstats

`pytrace COMMAND --help` gives each command's options. pytrace -V: the version."""

ENV_OPTIONS = "PYTRACE_SUBPROCESS_OPTIONS"   # JSON start() options for traced children
RESERVED = ("top", "record", "export")


class UsageError(Exception):
    """Wrong arguments: printed as one line "pytrace[ COMMAND]: message", exit 2."""

    def __init__(self, message, command=None):
        super().__init__(message)
        self.command = command


class _Parser(argparse.ArgumentParser):
    """argparse that reports one line and exits 2 (through UsageError)."""

    def error(self, message):
        # "pytrace record: the following arguments are required: -o/--output"
        raise UsageError(message, self.prog.split(" ", 1)[-1] if " " in self.prog else None)


def _default(name):
    """A default of the segment, from the extension (never retyped here)."""
    from . import _ext
    return getattr(_ext(), name)


def _run_parser():
    p = _Parser(prog="pytrace run", add_help=True,
                usage="pytrace run [options] (script.py | -m module) [args...]",
                description="Run a Python program with tracing on. It runs as `python script.py` "
                            "would (same output, exit code and signals); a reader can attach at "
                            "any time: pytrace top PID, pytrace record -o OUT PID.")
    p.add_argument("--no-c-calls", dest="c_calls", action="store_false",
                   help="do not record calls of C functions")
    p.add_argument("--include", action="append", default=None, metavar="MODULE_OR_PATH",
                   help="trace only these modules / path prefixes (repeatable)")
    p.add_argument("--exclude", action="append", default=None, metavar="MODULE_OR_PATH",
                   help="do not trace these modules / path prefixes (repeatable)")
    p.add_argument("--policy", choices=("drop", "wait"), default="drop",
                   help="full ring: drop events (default) or wait for the reader")
    p.add_argument("--rings", type=int, default=0, metavar="N",
                   help="most threads traced at once (default %d; a ring's memory is taken "
                        "when a thread first needs it); threads past it run untraced, counted"
                   % _default("DEFAULT_RING_COUNT"))
    p.add_argument("--ring-size", type=float, default=0, metavar="MiB",
                   help="size of each ring in MiB (default %g)" % (_default("DEFAULT_RING_BYTES") / 2**20))
    p.add_argument("--subprocesses", action="store_true",
                   help="trace Python child processes too, each into its own segment")
    p.add_argument("-m", dest="module", default=None, metavar="MODULE",
                   help="run a library module as a script")
    return p


def _start_options(ns):
    opts = {"c_calls": ns.c_calls, "include": ns.include, "exclude": ns.exclude,
            "policy": ns.policy}
    if ns.rings < 0 or ns.rings > 4096:
        raise UsageError("--rings must be between 1 and 4096", "run")
    if ns.rings:
        opts["ring_count"] = ns.rings
    if ns.ring_size < 0:
        raise UsageError("--ring-size must be positive (MiB)", "run")
    if ns.ring_size:
        # A ring is chunks of 64 KiB; round the count to a power of two the layout accepts.
        ring_bytes = int(ns.ring_size * (1 << 20))
        chunk = 64 << 10
        chunks = max(2, ring_bytes // chunk)
        chunks = 1 << (chunks.bit_length() - 1)
        if chunks > (1 << 16):
            raise UsageError("--ring-size %g MiB is too large" % ns.ring_size, "run")
        opts["chunk_bytes"] = chunk
        opts["chunks_per_ring"] = chunks
    return opts


def _announce(segment):
    sys.stderr.write("pytrace: tracing pid %d into %s; attach with: pytrace-top %d\n"
                     % (os.getpid(), segment, os.getpid()))
    sys.stderr.flush()


def _install_subprocess_hook(opts):
    """Make Python children start tracing: a sitecustomize.py on PYTHONPATH that imports
    pytrace._autostart, which reads the options from ENV_OPTIONS."""
    hook_dir = tempfile.mkdtemp(prefix="pytrace-site-")
    with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
        f.write("# written by `pytrace run --subprocesses`\n"
                "import pytrace._autostart\n"
                "pytrace._autostart.main(__file__)\n")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = hook_dir + (os.pathsep + old if old else "")
    os.environ[ENV_OPTIONS] = json.dumps(opts)

    import atexit
    import shutil
    atexit.register(shutil.rmtree, hook_dir, True)


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


def _print_exception(exc, skip_file):
    """Print like the interpreter does, without pytrace's own frames on top."""
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename in skip_file
                              or "runpy" in os.path.basename(tb.tb_frame.f_code.co_filename)):
        tb = tb.tb_next
    exc.__traceback__ = tb     # the display uses the exception's own traceback
    sys.excepthook(type(exc), exc, tb)


_VALUE_OPTIONS = ("--include", "--exclude", "--policy", "--rings", "--ring-size")


def _split_run_args(argv):
    """Split `run` arguments into pytrace's options and the program's command line:
    the program starts at the first non-option (a script) or just after `-m MODULE`,
    so its own options are never taken for ours."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[:i + 2], argv[i + 2:]
        if arg.startswith("-m") and len(arg) > 2:            # -mmodule
            return argv[:i] + ["-m", arg[2:]], argv[i + 1:]
        if arg == "--":
            return argv[:i], argv[i + 1:]
        if not arg.startswith("-") or arg == "-":
            return argv[:i], argv[i:]
        i += 2 if arg in _VALUE_OPTIONS else 1
    return argv, []


def cmd_run(argv):
    ours, program = _split_run_args(argv)
    ns = _run_parser().parse_args(ours)
    ns.target = program
    if ns.module is None and not ns.target:
        raise UsageError("give a script (pytrace run script.py) or a module (pytrace run -m mod)", "run")
    if ns.module is None and ns.target[0].startswith("-"):
        raise UsageError("unknown option %s" % ns.target[0], "run")
    opts = _start_options(ns)

    if ns.module is not None:
        sys.argv = [ns.module] + ns.target   # runpy sets argv[0] to the module's file
        sys.path[0] = os.getcwd()            # as `python -m` does
    else:
        script = ns.target[0]
        if not os.path.exists(script):
            # as python says it (and exits 2)
            raise UsageError("can't open file %r: [Errno 2] No such file or directory"
                             % os.path.abspath(script), "run")
        sys.argv = list(ns.target)
        sys.path[0] = os.path.dirname(os.path.abspath(script))

    import pytrace
    if ns.subprocesses:
        _install_subprocess_hook(opts)
    try:
        segment = pytrace.start(**opts)
    except (OSError, RuntimeError, ValueError) as e:
        sys.stderr.write("pytrace: cannot start tracing: %s\n" % e)
        return 1
    _announce(segment)

    import atexit
    import shlex
    global _RUN_COMMAND
    _RUN_COMMAND = " ".join(shlex.quote(a) for a in (
        (["-m", ns.module] + list(ns.target)) if ns.module is not None else list(ns.target)))
    # Stop after the interpreter joined the program's non-daemon threads (atexit runs
    # after threading's shutdown), so their tails are traced too.
    atexit.register(_stop_at_exit)

    skip = (__file__,)
    try:
        if ns.module is not None:
            runpy.run_module(ns.module, run_name="__main__", alter_sys=True)
        else:
            _run_script(sys.argv[0])
    except SystemExit as e:
        return _exit_code(e)
    except KeyboardInterrupt as e:
        _print_exception(e, skip)
        # Untraced, the interpreter ends a program that a KeyboardInterrupt left by
        # killing itself with SIGINT once atexit handlers ran (its parent sees a SIGINT
        # death, not exit 130). Let the interpreter do exactly that: the exception goes
        # out of the entry point, already printed.
        sys.excepthook = _already_printed
        raise KeyboardInterrupt from None
    except BaseException as e:  # noqa: BLE001 - report like the interpreter
        _print_exception(e, skip)
        return 1
    return 0


def _already_printed(*exc_info):
    pass


def _run_script(path):
    """Run a script file as `python path` does: in a module that becomes __main__, with
    an absolute __file__ and code filename, sys.argv[0] left as typed. Directories and
    zip files (a __main__.py inside) go through runpy, as python does."""
    if not os.path.isfile(path):
        runpy.run_path(path, run_name="__main__")
        return
    import builtins
    import importlib.machinery
    import io
    import types
    # As python makes it absolute (cwd joined, nothing normalised): "/a/../b.py" stays,
    # so code filenames, and the pstats keys made of them, are the untraced program's.
    abspath = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    main = types.ModuleType("__main__")
    main.__file__ = abspath
    main.__cached__ = None
    main.__builtins__ = builtins
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", abspath)
    main.__spec__ = None
    main.__package__ = None
    with io.open_code(abspath) as f:
        source = f.read()
    code = compile(source, abspath, "exec", dont_inherit=True)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


# Set by `pytrace record`'s child: the recorder reports the counts itself.
QUIET_EXIT = False
_RUN_COMMAND = ""     # the program as given to `pytrace run`, for the hint at exit


def _stop_at_exit():
    import warnings

    import pytrace
    if not pytrace.is_tracing():
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # said below in full lines, not as a warning
            c = pytrace.stop()
    except Exception:  # noqa: BLE001 - never fail the program's exit
        return
    if QUIET_EXIT:
        return
    from .losses import OTHER_LOSSES, describe
    try:
        line = "pytrace: %d events written, %d dropped" % (c.events_written, c.events_dropped)
        if c.events_dropped:
            line += ("; a ring was full (no reader, or one that fell behind). To keep every "
                     "event, record instead: pytrace record -o out.pytrace -- python %s"
                     % _RUN_COMMAND)
        sys.stderr.write(line + "\n")
        other = describe(c, OTHER_LOSSES)
        if other:
            sys.stderr.write("pytrace: also lost: %s%s\n" % (
                other, "; first error: %s" % c.first_error if c.first_error else ""))
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass


_STATE_NAMES = {0: "empty", 1: "running", 2: "stopped", 3: "exited", 4: "dead"}


def cmd_ls(argv):
    p = _Parser(prog="pytrace ls", description="List pytrace segments.")
    p.add_argument("--all", action="store_true", help="include stale segments of dead processes")
    p.add_argument("--collect", action="store_true", help="remove stale segments")
    p.add_argument("--json", action="store_true", help="print JSON")
    ns = p.parse_args(argv)
    from . import _ext
    ext = _ext()
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
    rows = [("PID", "STATE", "THREADS", "EVENTS", "DROPPED", "SEGMENT", "COMMAND")]
    for s in segs:
        state = s.get("state")
        state = _STATE_NAMES.get(state, str(state)) if isinstance(state, int) else str(state)
        if not s.get("alive"):
            state = "stale" if state not in ("exited",) else "exited"
        if not s.get("valid", True):
            state = "invalid"
        cmd = _printable(s.get("cmdline") or s.get("error") or "")
        rows.append((str(s.get("pid", "?")), state, str(s.get("threads_active", "")),
                     str(s.get("events_written", "")), str(s.get("events_dropped", "")),
                     _printable(s.get("name", "")), cmd))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6])
    from .losses import OTHER_LOSSES, describe
    for s in segs:                    # DROPPED is events; the other losses, one line each
        lost = describe(s, OTHER_LOSSES)
        if lost:
            print("%s also lost: %s" % (_printable(s.get("name", "")), lost))
    return 0


def _printable(text):
    """Names from a segment are untrusted: escape control characters for the terminal."""
    return "".join(c if c.isprintable() else "\\x%02x" % ord(c) if ord(c) < 256 else "?"
                   for c in str(text))


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
        if command == "run":
            code = cmd_run(rest)
        elif command == "ls":
            code = cmd_ls(rest)
        elif command in RESERVED:
            code = cmd_reserved(command, rest)
        else:
            raise UsageError("unknown command %r (try: run, ls, top, record, export)" % command)
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
