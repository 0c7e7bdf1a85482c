"""The `pytrace` command line, from one table of commands (COMMANDS).

Each row names a command, its form in `pytrace --help`'s usage lines, its summary
under "commands:", and the function that parses its arguments and runs it:
"module:function" of this package, imported only when that command runs, called with
the arguments after the command's name, returning the exit status. `pytrace --help`
and the error for an unknown command are made from the table. A command reports wrong
arguments by raising cmdline.UsageError (one line "pytrace COMMAND: ...", exit 2);
argparse's --help ends it through SystemExit.
"""

import json
import sys

from .cmdline import ArgumentParser, UsageError, extension, printable


class Command:
    """A row of COMMANDS. usage: the command's form after "pytrace " in the usage lines
    (None: shown in another's); summary: its lines under "commands:" (None: told in
    another's); entry: "module:function" of the function that runs it, f(argv) -> exit
    status."""

    __slots__ = ("name", "usage", "summary", "entry")

    def __init__(self, name, usage, summary, entry):
        self.name = name
        self.usage = usage
        self.summary = summary
        self.entry = entry


COMMANDS = (
    Command("run", "run [options] (script.py | -m module | -c code) [args...]",
            "run a Python program traced; a reader (pytrace top, record) can attach any time\n"
            "(run --hub: with its hub, so any number of readers can)",
            "run:main"),
    Command("ls", "ls [--all] [--collect]",
            "list the traced jobs on this machine (--all: also ended ones; --collect: remove those)",
            "cli:cmd_ls"),
    Command("top", "top [PID | SEGMENT | [options] -- python script.py [args...]]",
            "the live view of a traced job: pick one, attach to PID, or start a program",
            "top:main"),
    Command("record", "record -o OUT [options] (-- python script.py [args...] | PID)",
            "write a recording of a job (lossless by default) for export or pytrace top --file",
            "record:main"),
    Command("export", "export FILE --format perfetto|chrome|speedscope|collapsed|pstats|html -o OUT",
            "turn a recording into a Perfetto trace, Chrome JSON, speedscope, collapsed stacks, "
            "pstats\nor a self-contained HTML report",
            "export:main"),
    Command("merge", "merge A.pytrace B.pytrace ... -o OUT",
            "one recording of several (a job's ranks recorded on several machines), aligned by "
            "wall clock",
            "merge:main"),
    Command("web", "web [PID | SEGMENT | --file REC | [options] -- python script.py [args...]]",
            "the live browser view of a traced job (flame graph, table, timeline) on 127.0.0.1",
            "web:main"),
    Command("attach", "attach [options] PID | pytrace detach PID",
            "start tracing inside a running Python 3.14+ process (PEP 768); detach stops it",
            "attach:main"),
    Command("detach", None, None, "attach:detach_main"),
    Command("dump", "dump PID",
            "print every thread's current Python stack of a process",
            "dump:main"),
    Command("hub", "hub PID | SEGMENT",
            "serve a running job to any number of readers (top, record, pytrace.Reader) at once",
            "cli:cmd_hub"),
)


def usage():
    """`pytrace --help`: every command's usage form, then its summary."""
    forms = [c.usage for c in COMMANDS if c.usage is not None]
    lines = ["usage: pytrace " + forms[0]] + ["       pytrace " + form for form in forms[1:]]
    lines += ["", "commands:"]
    column = max(len(c.name) for c in COMMANDS) + 3
    for c in COMMANDS:
        if c.summary is not None:
            first, *more = c.summary.split("\n")
            lines.append("  " + c.name.ljust(column) + first)
            lines += [" " * (2 + column) + line for line in more]
    lines += ["", "`pytrace COMMAND --help` gives each command's options. pytrace -V: the version."]
    return "\n".join(lines)


def _load(command):
    """The function that runs `command`, or None where its module is not in this build."""
    import importlib
    module_name, _, function = command.entry.partition(":")
    module_name = "%s.%s" % (__package__ or "pytrace", module_name)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        return None
    return getattr(module, function)


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


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from . import __version__
        print("pytrace", __version__)
        return 0
    name, rest = argv[0], argv[1:]
    try:
        command = next((c for c in COMMANDS if c.name == name), None)
        if command is None:
            raise UsageError("unknown command %r (try: %s)" % (name, ", ".join(c.name for c in COMMANDS)))
        run = _load(command)
        if run is None:
            sys.stderr.write("pytrace: '%s' is not available in this build\n" % name)
            return 2
        code = run(rest)
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
