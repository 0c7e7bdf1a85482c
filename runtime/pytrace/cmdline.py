"""What the pytrace commands share (run, ls, top, record, export): their argument
parser, the options that start a traced job, and how they show untrusted names.

`pytrace.cli` dispatches the commands; each command module imports what it needs from
here, so no command module imports another's private names, and none imports `cli`.
"""

import argparse


class UsageError(Exception):
    """Wrong arguments: printed as one line "pytrace[ COMMAND]: message", exit 2."""

    def __init__(self, message, command=None):
        super().__init__(message)
        self.command = command


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports one line and exits 2 (through UsageError)."""

    def error(self, message):
        # "pytrace record: the following arguments are required: -o/--output"
        raise UsageError(message, self.prog.split(" ", 1)[-1] if " " in self.prog else None)


def extension():
    """The _pytrace extension, or ImportError saying how to get it."""
    try:
        from . import _pytrace
    except ImportError as e:
        raise ImportError("pytrace: the _pytrace extension is not available (%s); "
                          "reinstall with `pip install pytrace`" % e) from None
    return _pytrace


def segment_default(name):
    """A default of the segment, from the extension (never retyped here)."""
    return getattr(extension(), name)


def printable(text):
    """Names from a segment are untrusted: escape control characters for the terminal."""
    return "".join(c if c.isprintable() else "\\x%02x" % ord(c) if ord(c) < 256 else "?"
                   for c in str(text))


# The options of a traced job that `pytrace top` takes before `--` as well.
JOB_OPTIONS = ("--no-c-calls", "--torch", "--include", "--exclude", "--policy", "--ring-size")


def run_parser(only=None):
    """The parser of `pytrace run`'s options. only: a set of option strings; the parser
    then has just those (pytrace top formats its job options with it)."""
    whole = only is None
    p = ArgumentParser(prog="pytrace run", add_help=whole,
                       usage="pytrace run [options] (script.py | -m module | -c code) [args...]",
                       description="Run a Python program with tracing on from its first line. It "
                                   "runs as `python script.py` would (same pid, output, exit code "
                                   "and signals); a reader can attach at any time: pytrace top "
                                   "PID, pytrace record -o OUT PID." if whole else None)

    def add(*flags, **how):
        if whole or only & set(flags):
            p.add_argument(*flags, **how)

    add("--no-c-calls", dest="c_calls", action="store_false",
        help="do not record calls of C functions")
    add("--torch", action="store_true",
        help="record PyTorch's operators, autograd nodes and record_function labels as spans, nested under the Python calls that ran them (torch's ITT instrumentation)")
    add("--include", action="append", default=None, metavar="MODULE_OR_PATH",
        help="trace only these modules / path prefixes (repeatable)")
    add("--exclude", action="append", default=None, metavar="MODULE_OR_PATH",
        help="do not trace these modules / path prefixes (repeatable)")
    add("--policy", choices=("drop", "wait"), default="drop",
        help="full ring: drop events (default) or wait for the reader")
    if whole or "--rings" in only:
        add("--rings", type=int, default=0, metavar="N",
            help="most threads traced at once (default %d; a ring's memory is taken "
                 "when a thread first needs it); threads past it run untraced, counted"
            % segment_default("DEFAULT_RING_COUNT"))
    if whole or "--ring-size" in only:
        add("--ring-size", type=float, default=0, metavar="MiB",
            help="size of each ring in MiB (default %g)" % (segment_default("DEFAULT_RING_BYTES") / 2**20))
    add("--subprocesses", action="store_true",
        help="trace Python child processes too, each into its own segment")
    add("-m", dest="module", default=None, metavar="MODULE",
        help="run a library module as a script")
    add("-c", dest="code", default=None, metavar="CODE",
        help="run the program passed as a string")
    return p


def job_options_help(options=JOB_OPTIONS):
    """The help lines of these `pytrace run` options, as `pytrace run --help` shows them."""
    text = run_parser(only=set(options)).format_help()
    # usage, a blank line, the "options:" heading, then the options
    lines = text.split("\n\n", 1)[1].splitlines(True)
    return "".join(lines[1:])


def start_options(ns, command="run"):
    """start() options from parsed run/record/top arguments (UsageError if wrong)."""
    opts = {"c_calls": ns.c_calls, "include": ns.include, "exclude": ns.exclude,
            "policy": ns.policy}
    if getattr(ns, "torch", False):
        opts["torch"] = True
    if ns.rings < 0 or ns.rings > 4096:
        raise UsageError("--rings must be between 1 and 4096", command)
    if ns.rings:
        opts["ring_count"] = ns.rings
    if ns.ring_size < 0:
        raise UsageError("--ring-size must be positive (MiB)", command)
    if ns.ring_size:
        # A ring is chunks of 64 KiB; round the count to a power of two the layout accepts.
        # A ring under two chunks (a small /dev/shm) is two smaller chunks, 4 KiB at least.
        ring_bytes = int(ns.ring_size * (1 << 20))
        chunk = 64 << 10
        if ring_bytes < 2 * chunk:
            chunk = max(4096, 1 << (max(1, ring_bytes // 2).bit_length() - 1))
        chunks = max(2, ring_bytes // chunk)
        chunks = 1 << (chunks.bit_length() - 1)
        if chunks > (1 << 16):
            raise UsageError("--ring-size %g MiB is too large" % ns.ring_size, command)
        opts["chunk_bytes"] = chunk
        opts["chunks_per_ring"] = chunks
    return opts
