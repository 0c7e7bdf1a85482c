"""The launcher: runs a Python program traced from its first line, as python runs it.

    python [flags] PROGRAM, with PYTRACE_LAUNCH=options and pytrace/_boot first on
    PYTHONPATH (boot() starts tracing), or, with -E, -I or -S:
    python [flags] .../pytrace/_launch.py [name=value ...] -- PROGRAM
    PROGRAM: script.py args | -m module args | -c code args | - args | dir-or-zip args

This file is what runs inside the traced job; the parents' side, that makes these
command lines and starts and stops the job, is pytrace._job. `pytrace run` replaces
itself with this (os.execve: same pid, the interpreter's flags kept), and `pytrace
record`, `top` and `web` start their job with it (_job.command(), _job.start_job()).
The first form keeps the program's own command line (ps, /proc/PID/
cmdline); the rest of this text tells the second, whose rules boot() keeps too. The options are start()'s (c_calls=0, policy=wait, include=X, ...)
plus report_fd= / wait_fd= (record and top's handshake: the segment name goes out
on one pipe, then the job waits until the reader holds the segment), quiet=1 (no
summary at exit: the recorder gives it) and subprocesses=DIR (the sitecustomize
that traces Python children, see autostart()).

Why a script run by path: the picture of a program must hold everything the program
does, its first imports too. So this file imports nothing that `python script.py`
has not imported at startup (not the pytrace package, not runpy unless python
itself would: `-m` and dir/zip programs), loads the extension from the file beside
it, prepares everything it needs after start() before it, starts tracing and only
then runs the program, the way python does (a script is compiled and executed in
a fresh __main__; `-m` goes through runpy._run_module_as_main, as python -m does).

pytrace's frames are not in the picture: start() hides this file and the API
module (hide=...: their code produces no events, nor do its C calls -- the
handshake's read, stop()), and caller_stack=False leaves out the frames below the
launcher. Tracing stops in an atexit handler registered before the program runs,
so it runs after the program's own handlers and after the interpreter joined the
program's threads. A traceback the program leaves is shown without our frames.
"""

import os
import sys

ENV_OPTIONS = "PYTRACE_SUBPROCESS_OPTIONS"   # start() options for traced children
LAUNCH_ENV = "PYTRACE_LAUNCH"                # the job's options, read by boot() (_job.command())
# Files of the package whose code is pytrace's own: never in a picture.
HIDDEN_FILES = ("__init__.py", "_launch.py", "_steps.py", "_torch.py")  # _steps: the Optimizer.step hook; _torch: the --torch glue
BOOT_FILES = ("sitecustomize.py", "usercustomize.py")     # in _boot/: see boot()

# Python's own options (python --help): flags, and those that take a value.
_PY_FLAG_LETTERS = "bBdEiIOPqRsSuv"
_PY_VALUE_LETTERS = "WX"
_PY_LONG_VALUE = ("--check-hash-based-pycs",)
_START_KEYS = {"c_calls": "bool", "policy": "str", "include": "list", "exclude": "list",
               "ring_count": "int", "chunk_bytes": "int", "chunks_per_ring": "int",
               "symlog_bytes": "int", "wait_timeout": "float", "exit_wait": "float",
               "fork_children": "bool", "torch": "bool"}
_LAUNCH_KEYS = {"report_fd": "int", "wait_fd": "int", "quiet": "bool", "subprocesses": "str",
                "pythonpath": "str"}


# ---- the command line, read here and by the parents (pytrace._job) --------------------

def split_python_args(args):
    """Split python's arguments (without the interpreter) into its flags and the
    program: (flags, program), program being [] or one of [script, *args],
    ["-m", module, *args], ["-c", code, *args], ["-", *args]. ValueError, in one
    line, for an option that does not run a program (-h, -V) or is not supported."""
    flags = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return flags, args[i + 1:]
        if arg == "-" or not arg.startswith("-"):
            return flags, args[i:]
        if arg.startswith("--"):
            name, eq, _ = arg.partition("=")
            if name not in _PY_LONG_VALUE:
                raise ValueError("python option %s does not run a program" % name
                                 if name in ("--help", "--version", "--help-env", "--help-xoptions",
                                             "--help-all")
                                 else "unknown python option %s" % name)
            if eq:
                flags.append(arg)
                i += 1
            elif i + 1 < len(args):
                flags += args[i:i + 2]
                i += 2
            else:
                raise ValueError("python option %s needs a value" % name)
            continue
        # a cluster of short options: -u, -OO, -uB, -Wignore, -X dev, -c code, -mjson.tool
        for j in range(1, len(arg)):
            letter = arg[j]
            if letter in "cm" or letter in _PY_VALUE_LETTERS:
                attached = arg[j + 1:]
                if not attached and i + 1 >= len(args):
                    raise ValueError("python option -%s needs a value" % letter)
                value = attached or args[i + 1]
                if j > 1:
                    flags.append(arg[:j])
                i += 1 if attached else 2
                if letter in "cm":
                    return flags, ["-" + letter, value] + args[i:]
                flags += ["-" + letter, value]
                break
            if letter in "hV?":
                raise ValueError("python option -%s does not run a program" % letter)
            if letter not in _PY_FLAG_LETTERS:
                raise ValueError("python option -%s is not supported by pytrace" % letter
                                 if letter == "x" else "unknown python option -%s" % letter)
        else:
            flags.append(arg)
            i += 1
    return flags, []


def interpreter_flags(orig_argv=None):
    """The flags this interpreter was started with (-X dev, -u, -O, ...), from
    sys.orig_argv: what a new interpreter needs to run the program alike."""
    argv = sys.orig_argv if orig_argv is None else orig_argv
    try:
        return split_python_args(list(argv[1:]))[0]
    except ValueError:
        return []


def encode_options(options):
    """start() options (a dict) -> launcher arguments name=value."""
    out = []
    for key, value in options.items():
        kind = _START_KEYS.get(key) or _LAUNCH_KEYS.get(key)
        if kind is None:
            raise ValueError("pytrace: the launcher does not take %r" % key)
        if value is None:
            continue
        if kind == "list":
            out += ["%s=%s" % (key, v) for v in ([value] if isinstance(value, str) else value)]
        elif kind == "bool":
            out.append("%s=%d" % (key, bool(value)))
        else:
            out.append("%s=%s" % (key, value))
    return out


# ---- in the traced process: everything before start() -------------------------------

def _say(text):
    if sys.stderr is not None:
        sys.stderr.write("pytrace: %s\n" % text)
        sys.stderr.flush()


def _parse_launch_args(args):
    """-> (start options, launcher options, program)."""
    start, launch = {}, {}
    for i, arg in enumerate(args):
        if arg == "--":
            return start, launch, args[i + 1:]
        key, eq, value = arg.partition("=")
        kind = _START_KEYS.get(key) or _LAUNCH_KEYS.get(key)
        if not eq or kind is None:
            raise ValueError("unknown launcher argument %r" % arg)
        target = start if key in _START_KEYS else launch
        if kind == "list":
            target.setdefault(key, []).append(value)
        elif kind == "bool":
            target[key] = value not in ("0", "")
        elif kind == "int":
            target[key] = int(value)
        elif kind == "float":
            target[key] = float(value)
        else:
            target[key] = value
    raise ValueError("no program after the launcher's arguments")


def _load_extension():
    """The _pytrace extension beside this file, loaded without the pytrace package (and
    without importlib's Python-level API, which python does not import at startup).
    None if there is none for this interpreter."""
    external = sys.modules["_frozen_importlib_external"]
    bootstrap = sys.modules["_frozen_importlib"]
    name = "pytrace._pytrace"
    if name in sys.modules:
        return sys.modules[name]
    here = os.path.dirname(__file__)
    for suffix in external.EXTENSION_SUFFIXES:
        path = os.path.join(here, "_pytrace" + suffix)
        if os.path.isfile(path):
            break
    else:
        return None
    loader = external.ExtensionFileLoader(name, path)
    spec = bootstrap.spec_from_loader(name, loader, origin=path)
    module = bootstrap.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module    # `import pytrace` by the program finds it: one tracer
    return module


def _other_install():
    """This interpreter's own pytrace launcher (another Python version than the one
    this file was installed for), or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    suffixes = sys.modules["_frozen_importlib_external"].EXTENSION_SUFFIXES
    for entry in sys.path:
        pkg = os.path.join(os.path.abspath(entry or os.curdir), "pytrace")
        if pkg == here or not os.path.isfile(os.path.join(pkg, "_launch.py")):
            continue
        if any(os.path.isfile(os.path.join(pkg, "_pytrace" + s)) for s in suffixes):
            return os.path.join(pkg, "_launch.py")
    return None


# A script's and stdin's __main__ have __cached__ = None before 3.15, none from 3.15 on.
_NO_CACHED = {"__cached__": None} if sys.version_info < (3, 15) else {}


def _fresh_main(**extra):
    """A new __main__ module, as python makes it."""
    import builtins
    main = type(sys)("__main__")
    main.__loader__ = sys.modules["_frozen_importlib"].BuiltinImporter
    if sys.version_info < (3, 14):  # 3.14 (PEP 649): none until the module annotates something
        main.__annotations__ = {}
    main.__builtins__ = builtins
    for key, value in extra.items():
        setattr(main, key, value)
    return main


class _Program:
    """What python would run for PROGRAM, prepared before tracing starts: its code
    (scripts, -c, stdin), its __main__ module, sys.argv and sys.path[0]."""

    def __init__(self, program):
        self.code = None            # compiled code to exec in self.main
        self.main = None
        self.module = None          # -m: run by runpy._run_module_as_main(module, True)
        self.importer = False       # dir/zip: runpy._run_module_as_main("__main__", False)
        head = program[0] if program else None
        if head is None:
            raise _Refused("give a program: script.py, -m module or -c code", 2)
        if head == "-c":
            self.argv = ["-c"] + program[2:]
            self.path0 = ""
            self.main = _fresh_main()
            self.code = compile(program[1], "<string>", "exec", dont_inherit=True)
        elif head == "-m":
            self.argv = ["-m"] + program[2:]      # runpy puts the module's file in argv[0]
            self.path0 = os.getcwd()
            self.main = _fresh_main()
            self.module = program[1]
        elif head == "-":
            if sys.stdin is None or sys.stdin.isatty():
                raise _Refused("a program typed at the terminal (-) cannot be traced; "
                               "give a script, -m module or -c code", 2)
            self.argv = ["-"] + program[1:]
            self.path0 = ""
            self.main = _fresh_main(__file__="<stdin>", **_NO_CACHED)
            self.code = compile(sys.stdin.buffer.read(), "<stdin>", "exec", dont_inherit=True)
        else:
            self._script(program)

    def _script(self, program):
        path = program[0]
        self.argv = list(program)
        # __file__ and the code's filename: absolute, as python makes them (not normalised)
        abspath = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
        if os.path.isdir(path) or _is_zip(path):
            self.importer = True
            self.path0 = abspath
            self.main = _fresh_main()
            return
        self.path0 = os.path.dirname(os.path.realpath(path))
        try:
            # _io: 3.14+ no longer import io at startup (io.open_code is _io.open_code)
            with sys.modules["_io"].open_code(abspath) as f:
                source = f.read()
        except OSError as e:
            raise _Refused("%s: can't open file %r: [Errno %d] %s" % (
                sys.orig_argv[0] if sys.orig_argv else sys.executable, abspath, e.errno,
                e.strerror), 2, plain=True) from None
        loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", abspath)
        self.main = _fresh_main(__file__=abspath, **_NO_CACHED)
        self.main.__loader__ = loader
        self.code = compile(source, abspath, "exec", dont_inherit=True)

    def enter(self):
        """sys.argv, sys.path[0] and __main__ as python sets them for the program."""
        sys.argv[:] = self.argv
        if not sys.flags.isolated and not getattr(sys.flags, "safe_path", False) and sys.path:
            sys.path[0] = self.path0      # python put this file's directory there
        sys.modules["__main__"] = self.main


class _Refused(Exception):
    def __init__(self, message, code, plain=False):
        super().__init__(message)
        self.code = code
        self.plain = plain


def _is_zip(path):
    try:
        sys.modules["zipimport"].zipimporter(path)
        return True
    except Exception:  # noqa: BLE001 - not a zip python could run
        return False


def _register_at_exit(func):
    """atexit.register(func) without leaving atexit imported: python does not import
    it at startup, and the program's own `import atexit` must be its own (the
    handlers live in the interpreter, not in the module object)."""
    had = "atexit" in sys.modules
    import atexit
    atexit.register(func)
    if not had:
        del sys.modules["atexit"]


def _hidden(extra=()):
    here = os.path.dirname(__file__)
    return ([os.path.join(here, name) for name in HIDDEN_FILES]
            + [os.path.join(here, "_boot", name) for name in BOOT_FILES] + list(extra))


def env_encode(tokens):
    return "\n".join(t.replace("\\", "\\\\").replace("\n", "\\n") for t in tokens)


def _env_decode(text):
    out = []
    for line in text.split("\n"):
        token, i = [], 0
        while i < len(line):
            if line[i] == "\\" and i + 1 < len(line):
                token.append("\n" if line[i + 1] == "n" else line[i + 1])
                i += 2
            else:
                token.append(line[i])
                i += 1
        out.append("".join(token))
    return out


# ---- the children of a job (pytrace run --subprocesses) -----------------------------
#
# Every child that should be traced -- a Python child started with the hook on its
# PYTHONPATH (subprocess, multiprocessing spawn and forkserver), and a fork() child of a
# traced process -- leaves one file in HOOK_DIR/children: traced-PID holding
# "SEGMENT<TAB>PPID", or untraced-PID holding why not (no room in /dev/shm, an
# interpreter without pytrace, ...). The launcher counts them at exit, so a child that
# could not be traced is reported with a count, never silently; a reader of the job
# (the hub) finds the children's segments there. A Python child that never runs site
# (python -S, -I) cannot be seen here.

LEDGER = "children"


def _ledger_note(hook_dir, kind, text):
    try:
        d = os.path.join(hook_dir, LEDGER)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        fd = os.open(os.path.join(d, "%s-%d" % (kind, os.getpid())), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     0o600)
        try:
            os.write(fd, text.encode("utf-8", "replace")[:4000])
        finally:
            os.close(fd)
    except OSError:
        pass


def read_ledger(hook_dir):
    """{"traced": {pid: (segment, ppid)}, "untraced": {pid: reason}} of the job's children."""
    out = {"traced": {}, "untraced": {}}
    try:
        names = os.listdir(os.path.join(hook_dir, LEDGER))
    except OSError:
        return out
    for name in names:
        kind, _, pid = name.rpartition("-")
        if kind not in out or not pid.isdigit():
            continue
        try:
            with open(os.path.join(hook_dir, LEDGER, name), "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        if kind == "traced":
            segment, _, ppid = text.partition("\t")
            out[kind][int(pid)] = (segment, int(ppid) if ppid.isdigit() else 0)
        else:
            out[kind][int(pid)] = text
    return out


def _watch_forks(ext, hook_dir):
    """After fork() in a traced process: the child traces into its own segment (the
    extension's own fork hook, which runs first, made it); note it in the ledger, or
    say why it is not traced."""
    state = {}

    def before():
        state["tracing"] = ext.is_tracing()

    def after_in_child():
        if not state.pop("tracing", False):
            return
        try:
            if ext.is_tracing():
                if hook_dir:
                    _ledger_note(hook_dir, "traced", "%s\t%d" % (ext.segment_name(), os.getppid()))
                return
            reason = ext.counters().get("first_error") or "tracing did not resume after fork()"
        except Exception as e:  # noqa: BLE001 - the child runs on regardless
            reason = str(e)
        if hook_dir:
            _ledger_note(hook_dir, "untraced", reason)
        else:
            _say("child %d not traced: %s" % (os.getpid(), reason))

    def after_in_parent():
        state.pop("tracing", None)

    os.register_at_fork(before=before, after_in_child=after_in_child, after_in_parent=after_in_parent)


def _children_summary(hook_dir, quiet):
    ledger = read_ledger(hook_dir)
    traced, untraced = ledger["traced"], ledger["untraced"]
    if traced and not quiet:
        _say("%d child process%s traced, each into its own segment" % (
            len(traced), "" if len(traced) == 1 else "es"))
    if untraced:          # a loss: said also with --quiet
        shown = sorted(untraced.items())[:5]
        _say("%d child process%s NOT traced: %s%s" % (
            len(untraced), "" if len(untraced) == 1 else "es",
            "; ".join("pid %d: %s" % (pid, why.strip().splitlines()[0] if why.strip() else "?")
                      for pid, why in shown),
            "; ..." if len(untraced) > len(shown) else ""))


class _Session:
    """One traced run: what the atexit handler needs, prepared before start()."""

    def __init__(self, ext, quiet, hook_dir, program_words):
        self.ext = ext
        self.quiet = quiet
        self.hook_dir = hook_dir
        self.program_words = program_words
        self.pid = os.getpid()    # a fork() child inherits the handler: the hook dir is not its

    def stop_at_exit(self):
        # registered before the program ran: runs after its handlers, after the
        # interpreter joined its threads. Only C calls until tracing is off.
        ext = self.ext
        glue = getattr(ext, "_torch_glue", None)
        if glue is not None:
            glue.disable()     # torch's profiler state off: torch warns of it left on at exit
        if not ext.is_tracing():
            counters = None
        else:
            try:
                counters = ext.stop()
            except Exception:  # noqa: BLE001 - never fail the program's exit
                counters = None
        # From here on nothing is traced. Nothing here may eval() a string: that resets
        # the interpreter's note of an uncaught KeyboardInterrupt, and the process would
        # exit 1 instead of dying of SIGINT (so no shutil, shlex: their imports do).
        if self.hook_dir and os.getpid() == self.pid:
            try:
                _children_summary(self.hook_dir, self.quiet)
            except Exception:  # noqa: BLE001 - never fail the program's exit
                pass
            _remove_tree(self.hook_dir)
        if counters is None or self.quiet:
            return
        try:
            _summary(counters, self.program_words)
        except Exception:  # noqa: BLE001
            pass


def _losses():
    """pytrace/losses.py, loaded by path: no package import at exit."""
    path = os.path.join(os.path.dirname(__file__), "losses.py")
    namespace = {"__name__": "pytrace.losses", "__file__": path}
    with open(path, "rb") as f:
        exec(compile(f.read(), path, "exec"), namespace)
    return namespace


def _remove_tree(top):
    try:
        for root, dirs, files in os.walk(top, topdown=False):
            for name in files:
                os.unlink(os.path.join(root, name))
            for name in dirs:
                os.rmdir(os.path.join(root, name))
        os.rmdir(top)
    except OSError:
        pass


_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def _shell_quote(word):
    """shlex.quote, without importing shlex (see stop_at_exit)."""
    if word and all(ch in _SHELL_SAFE for ch in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _python_word():
    """How the advice at exit names this interpreter: `python` where that word on PATH is
    it (the same file in the same folder: a venv's python is not its base's), else its path
    (`python` could be another version, or another venv's, than the one that ran the
    program: a console script's shebang). Only os: see stop_at_exit."""
    exe = sys.executable or "python"
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d or ".", "python")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            same = (os.path.dirname(os.path.abspath(p)) == os.path.dirname(os.path.abspath(exe))
                    and os.path.realpath(p) == os.path.realpath(exe))
            return "python" if same else exe
    return exe


def _summary(c, program_words):
    line = "%d events written, %d dropped" % (c.get("events_written", 0), c.get("events_dropped", 0))
    if c.get("events_dropped"):
        line += ("; a ring was full (no reader, or one that fell behind). To keep every "
                 "event, record instead: pytrace record -o out.pytrace -- %s %s"
                 % (_shell_quote(_python_word()), " ".join(_shell_quote(w) for w in program_words)))
    _say(line)
    losses = _losses()
    other = losses["describe"](c, losses["OTHER_LOSSES"])
    if other:
        _say("also lost: %s%s" % (other, "; first error: %s" % c["first_error"]
                                   if c.get("first_error") else ""))


def _handshake(report_fd, wait_fd, segment):
    """Report the segment and wait until the reader holds it (or gave up: EOF)."""
    try:
        if report_fd is not None:
            os.write(report_fd, (segment + "\n").encode())
            os.close(report_fd)
        if wait_fd is not None:
            os.read(wait_fd, 1)
    except OSError:
        pass
    finally:
        if wait_fd is not None:
            try:
                os.close(wait_fd)
            except OSError:
                pass


def _load_torch_glue(ext):
    """pytrace/_torch.py, loaded by path as the extension is (without the package), and
    kept out of sys.modules (code that walks sys.modules, inspect.getmodule, would walk
    one module more than untraced): the extension holds it (pytrace.stop() finds it)."""
    glue = getattr(ext, "_torch_glue", None)
    if glue is not None:
        return glue
    name = "pytrace._torch"
    path = os.path.join(os.path.dirname(__file__), "_torch.py")
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader(name, path)
    bootstrap = sys.modules["_frozen_importlib"]
    module = bootstrap.module_from_spec(bootstrap.spec_from_loader(name, loader, origin=path))
    loader.exec_module(module)
    ext._torch_glue = module
    return module
def _role_of(me):
    """What a multiprocessing child is in its job, from its Process object: its name
    ("ForkPoolWorker-1", "SpawnPoolWorker-2"), or "DataLoader worker N" for a worker
    that runs torch's _worker_loop (its worker_id argument: what
    torch.utils.data.get_worker_info().id says once the loop runs). None for the main
    process."""
    if me is None or (type(me).__name__ == "_MainProcess" and me.name == "MainProcess"):
        return None
    target = getattr(me, "_target", None)
    code = getattr(target, "__code__", None)
    if (code is not None and code.co_name == "_worker_loop"
            and getattr(target, "__module__", "") == "torch.utils.data._utils.worker"):
        names = code.co_varnames[:code.co_argcount]
        args, kwargs = getattr(me, "_args", ()), getattr(me, "_kwargs", {})
        worker = kwargs.get("worker_id")
        if worker is None and "worker_id" in names and names.index("worker_id") < len(args):
            worker = args[names.index("worker_id")]
        if isinstance(worker, int):
            return "DataLoader worker %d" % worker
    name = getattr(me, "name", None)
    return name if isinstance(name, str) else None


def _set_role(ext, me):
    """The role into the segment. Never raises into the program."""
    try:
        role = _role_of(me)
        if role:
            ext.set_role(role)
    except Exception:  # noqa: BLE001 - the program runs on regardless
        pass


class _RoleAnchor:
    """What multiprocessing's after-fork registry holds our hook by (a weak value)."""


_ROLE_ANCHOR = _RoleAnchor()
_role_watching = []


def _watch_role(ext):
    """Learn this process's role where multiprocessing knows it, without changing the
    program (once per process).
    - A fork child of a process that uses multiprocessing (os.register_at_fork: in the
      child) registers with multiprocessing's own after-fork hooks, which
      Process._bootstrap runs in the child once its Process is current_process().
    - A spawn or forkserver child (`... --multiprocessing-fork`) runs no after-fork hook
      (SpawnProcess._after_fork does nothing): an audit hook reads its name when the
      child unpickles its Process object (below)."""
    if _role_watching:
        return
    _role_watching.append(True)

    def after_fork(_anchor):
        process = sys.modules.get("multiprocessing.process")
        if process is not None:
            _set_role(ext, process.current_process())

    def register():
        util = sys.modules.get("multiprocessing.util")
        if util is not None and ext.is_tracing():
            util.register_after_fork(_ROLE_ANCHOR, after_fork)

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=register)
    if "--multiprocessing-fork" not in getattr(sys, "orig_argv", sys.argv):
        return
    # The child unpickles its Process object from its parent after prepare() gave
    # current_process() the child's name: the "pickle.find_class" of that Process's
    # class says the name is there; torch's _worker_loop among the classes and functions
    # that follow says it is a DataLoader worker (its index is not known this way).
    # Only that event is looked at, and only the first few of them.
    left = [64]

    def audit(event, args):
        if event != "pickle.find_class" or not left[0]:
            return
        left[0] -= 1
        try:
            module, name = args
            if module == "torch.utils.data._utils.worker" and name == "_worker_loop":
                left[0] = 0
                ext.set_role("DataLoader worker")
            elif module == "multiprocessing.context" and name.endswith("Process"):
                process = sys.modules.get("multiprocessing.process")
                if process is not None:
                    _set_role(ext, process.current_process())
        except Exception:  # noqa: BLE001 - an audit hook must never raise into the program
            left[0] = 0

    sys.addaudithook(audit)


def _start(ext, options):
    """ext.start() and the checks pytrace.start() makes, with C calls only after it."""
    options = dict(options)
    torch = options.pop("torch", False)
    glue = _load_torch_glue(ext) if torch else None     # before tracing: its code is not the program's
    why = glue.prepare_environment(ext) if glue is not None else None
    segment = ext.start(**options)
    if glue is not None:
        glue.enable(ext, why)
    _watch_role(ext)
    # pytrace.start() in the program finds it here: it then does nothing (tracing is
    # on already), rather than fail with "already tracing" (the program is not changed)
    ext._launcher_segment = segment
    now = ext.counters()
    if now.get("tracing_displaced") or not now.get("hook"):
        _say(now.get("first_error") or "not tracing")
    return segment


def _main(args):
    try:
        options, launch, program = _parse_launch_args(args)
    except ValueError as e:
        _say(str(e))
        return 2
    ext = _load_extension()
    if ext is None:
        other = _other_install()
        if other is not None:        # this interpreter's own pytrace runs it
            flags = interpreter_flags()
            os.execv(sys.executable, [sys.executable] + flags + [other] + list(args))
        _say("%s (Python %d.%d) has no pytrace extension: install pytrace for it "
             "(pip install pytrace)" % (sys.executable, sys.version_info[0], sys.version_info[1]))
        return 1
    try:
        prog = _Program(program)
    except _Refused as e:
        if e.plain:
            sys.stderr.write(str(e) + "\n")
        else:
            _say(str(e))
        return e.code
    sys.orig_argv = list(sys.orig_argv[:1]) + interpreter_flags() + list(program)
    prog.enter()
    hook_dir = launch.get("subprocesses")
    if hook_dir:
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = hook_dir + (os.pathsep + old if old else "")
        os.environ[ENV_OPTIONS] = env_encode(encode_options(options))
    runpy = None
    if prog.module is not None or prog.importer:
        import runpy                 # as python -m (and a dir/zip program) imports it
    session = _Session(ext, launch.get("quiet", False), hook_dir, program)
    _register_at_exit(session.stop_at_exit)
    report_fd, wait_fd = launch.get("report_fd"), launch.get("wait_fd")
    options = dict(options, hide=_hidden(), caller_stack=False)
    code, main = prog.code, prog.main
    # The launcher's frames stay under the program's: code that walks out to the
    # outermost frame must not take its globals for the program's __main__.
    globals()["__name__"] = "pytrace._launch"
    module, importer = prog.module, prog.importer
    del prog

    # ---- tracing: from here on only C calls and the program --------------------------
    try:
        segment = _start(ext, options)
    except (OSError, RuntimeError, ValueError, TypeError) as e:
        if report_fd is not None or wait_fd is not None:
            # a reader (record, top) waits for the segment: it says the job failed
            _say("cannot start tracing: %s" % e)
            if wait_fd is not None:
                os.close(wait_fd)
            return 1
        # `pytrace run`: the program is never changed by its tracer, so it runs, untraced,
        # with its own output and exit status (as a --subprocesses child does)
        _say("cannot start tracing: %s; the program runs untraced"
             % (e.strerror if isinstance(e, OSError) and e.strerror else e))
        segment = None
    if segment is not None:
        _handshake(report_fd, wait_fd, segment)
    if segment is not None and options.get("fork_children", True):
        _watch_forks(ext, hook_dir)
    if segment is not None and sys.stderr is not None:
        sys.stderr.write("pytrace: tracing pid %d into %s; attach with: pytrace-top %d\n"
                         % (os.getpid(), segment, os.getpid()))
        sys.stderr.flush()
    if code is not None:
        exec(code, main.__dict__)
    elif importer:
        runpy._run_module_as_main("__main__", False)
    else:
        runpy._run_module_as_main(module, True)
    return 0


def boot(hook_file):
    """In a job started by _job.command(): called by _boot/sitecustomize.py (and
    usercustomize.py) while site.py imports them, before python runs the program,
    which it then runs itself: its command line, sys.argv, sys.orig_argv, __main__,
    sys.path[0] and tracebacks are python's own. Starts tracing at the last of the two
    hooks that site.py imports (the rest of python's startup is not in the picture),
    after putting back PYTHONPATH (os.environ and sys.path) and removing LAUNCH_ENV, so
    that the program and its children see the environment they would see untraced.
    -> the module of that name our hook shadows (None if there is none)."""
    name = os.path.splitext(os.path.basename(hook_file))[0]
    real = _chain_customize(name, hook_file)
    site = sys.modules.get("site")
    if name == "sitecustomize" and getattr(site, "ENABLE_USER_SITE", False):
        return real                   # site.py imports usercustomize next: start there
    raw = os.environ.get(LAUNCH_ENV)
    if raw is None:
        return real                   # not a job of ours (PYTHONPATH copied by hand)
    ext = _load_extension()
    if ext is None:
        other = _other_install()
        if other is not None:         # this interpreter's own pytrace boots it
            from _frozen_importlib_external import SourceFileLoader
            code = SourceFileLoader("pytrace._launch", other).get_code("pytrace._launch")
            namespace = {"__name__": "pytrace._launch", "__file__": other}
            exec(code, namespace)
            if "boot" in namespace:
                return namespace["boot"](os.path.join(os.path.dirname(other), "_boot",
                                                      os.path.basename(hook_file)))
            _exec_older(other, raw)   # a pytrace of before boot(): its launcher's command line
        _say("%s (Python %d.%d) has no pytrace extension: install pytrace for it "
             "(pip install pytrace)" % (sys.executable, sys.version_info[0], sys.version_info[1]))
        _exit_now(1)
    # the environment and sys.path as they would be untraced
    here = os.path.abspath(os.path.dirname(hook_file))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    for key in list(sys.path_importer_cache):
        if os.path.abspath(key) == here:
            del sys.path_importer_cache[key]
    del os.environ[LAUNCH_ENV]
    try:
        options, launch, _ = _parse_launch_args(_env_decode(raw) + ["--"])
    except ValueError as e:
        _say(str(e))
        _exit_now(2)
    if "pythonpath" in launch:
        os.environ["PYTHONPATH"] = launch["pythonpath"]
    else:
        os.environ.pop("PYTHONPATH", None)
    report_fd, wait_fd = launch.get("report_fd"), launch.get("wait_fd")
    try:
        program = split_python_args(list(sys.orig_argv[1:]))[1]
    except ValueError:
        program = list(sys.orig_argv[1:])
    refusal = _refusal(program)
    if refusal is not None:           # python says it (can't open file) or we do; untraced
        if launch.get("subprocesses"):
            _remove_tree(launch["subprocesses"])     # the children's hook: none will come
        if refusal:
            _say(refusal)
            _exit_now(2)
        for fd in (report_fd, wait_fd):
            if fd is not None:
                os.close(fd)
        return real
    hook_dir = launch.get("subprocesses")
    if hook_dir:
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = hook_dir + (os.pathsep + old if old else "")
        os.environ[ENV_OPTIONS] = env_encode(encode_options(options))
    if program and program[0] == "-m" or os.path.isdir(program[0]) or _is_zip(program[0]):
        import runpy                  # python -m imports it now: not in the program's picture
    session = _Session(ext, launch.get("quiet", False), hook_dir, program)
    _register_at_exit(session.stop_at_exit)
    options = dict(options, hide=_hidden(), caller_stack=False)
    started, armed = [], []

    def start_at_run(event, args):
        # python's own audit events, raised from C as it runs the program: "cpython.run_*"
        # once the rest of its startup is done (site, the script's importer), then "exec"
        # of the program's compiled code (after __main__.__loader__ is made): tracing
        # starts there, with no Python frame of python's under the program. -m starts at
        # run_module, as the launcher runs runpy traced. Called for every audit event of
        # the process after that (a hook cannot be removed): one test, in hidden code.
        if started:
            return
        if event in _RUN_EVENTS:
            # the code python then execs: the script (by its path), <string>, <stdin>
            expected = {"cpython.run_command": "<string>", "cpython.run_stdin": "<stdin>"}.get(event)
            if event == "cpython.run_file":
                expected = os.path.abspath(str(args[0]))
                if expected.endswith(".pyc"):
                    expected = None   # run without an "exec" event: start now
            if expected is not None:
                armed.append(expected)
                return                # start at its "exec"
        elif event != "exec" or not armed:
            return
        else:
            # 3.14+ exec linecache's module code (imported for -c) before the program's
            filename = getattr(args[0], "co_filename", None)
            if filename != armed[0] and (filename is None or os.path.abspath(filename) != armed[0]):
                armed.append(filename)
                if len(armed) < 4:    # never wait for ever on something unforeseen
                    return
        started.append(event)
        # ---- tracing: from here on only C calls, then python runs the program ---------
        try:
            segment = _start(ext, options)
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            if report_fd is None and wait_fd is None:
                # `pytrace run`: the program is never changed by its tracer, so it runs,
                # untraced, with its own output and exit status (as in _main)
                _say("cannot start tracing: %s; the program runs untraced"
                     % (e.strerror if isinstance(e, OSError) and e.strerror else e))
                if hook_dir:
                    _remove_tree(hook_dir)
                return
            _say("cannot start tracing: %s" % e)
            if hook_dir:
                _remove_tree(hook_dir)
            _exit_now(1)
        _handshake(report_fd, wait_fd, segment)
        if options.get("fork_children", True):
            _watch_forks(ext, hook_dir)
        if sys.stderr is not None:
            sys.stderr.write("pytrace: tracing pid %d into %s; attach with: pytrace-top %d\n"
                             % (os.getpid(), segment, os.getpid()))
            sys.stderr.flush()

    sys.addaudithook(start_at_run)
    return real


# Raised by python's main (Modules/main.c) just before it runs the program.
_RUN_EVENTS = frozenset(("cpython.run_file", "cpython.run_command", "cpython.run_module",
                         "cpython.run_stdin"))


def _exec_older(launcher, raw):
    """Run the job through `launcher` (an older pytrace's, which has no boot()) by its
    command line, with the environment put back. Returns only if that fails."""
    try:
        options, launch, _ = _parse_launch_args(_env_decode(raw) + ["--"])
        program = split_python_args(list(sys.orig_argv[1:]))[1]
    except ValueError:
        return
    os.environ.pop(LAUNCH_ENV, None)
    if "pythonpath" in launch:
        os.environ["PYTHONPATH"] = launch.pop("pythonpath")
    else:
        os.environ.pop("PYTHONPATH", None)
    options.update(launch)
    try:
        os.execv(sys.executable, [sys.executable] + interpreter_flags() + [launcher]
                 + encode_options(options) + ["--"] + program)
    except OSError:
        pass


def _refusal(program):
    """Before tracing a job that python itself runs: "" when python will refuse it
    itself at once (a script that is not there), a line of ours for what cannot be
    traced (a program typed at the terminal), None when it runs."""
    head = program[0] if program else None
    if head is None or head == "-":
        if sys.stdin is None or sys.stdin.isatty():
            return ("a program typed at the terminal (-) cannot be traced; give a script, "
                    "-m module or -c code")
        return None
    if head in ("-c", "-m"):
        return None
    return None if os.path.exists(head) else ""


def _exit_now(code):
    """Leave from inside site.py's import of our hook (SystemExit there is fatal)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def _show_without_launcher(hook):
    """sys.excepthook for the program's uncaught exception: its traceback without the
    launcher's frames at the top, as python shows it; then the program's hook again."""
    own = __file__

    def excepthook(exc_type, exc, tb):
        sys.excepthook = hook
        while tb is not None and tb.tb_frame.f_code.co_filename == own:
            tb = tb.tb_next
        if exc is not None:
            exc.__traceback__ = tb
        if getattr(sys, "last_value", None) is exc:
            sys.last_traceback = tb
        hook(exc_type, exc, tb)
    return excepthook


# ---- a traced Python child (pytrace run --subprocesses) ------------------------------

def autostart(hook_file):
    """Called by the sitecustomize.py and usercustomize.py that `pytrace run
    --subprocesses` puts first on PYTHONPATH: runs the module of that name it
    shadows, then starts tracing with the options in ENV_OPTIONS -- at the last
    of the two that site.py imports, so that the rest of python's startup is not
    in the child's picture. A failure is said in one line; the program runs anyway."""
    name = os.path.splitext(os.path.basename(hook_file))[0]       # sitecustomize, usercustomize
    _chain_customize(name, hook_file)
    site = sys.modules.get("site")
    if name == "sitecustomize" and getattr(site, "ENABLE_USER_SITE", False):
        return                        # site.py imports usercustomize next: start there
    raw = os.environ.get(ENV_OPTIONS)
    ext = sys.modules.get("pytrace._pytrace")
    if raw is None or ext is not None and ext.is_tracing():   # "": default options
        return
    try:
        options, launch, _ = _parse_launch_args(_env_decode(raw) + ["--"])
        ext = _load_extension()
        if ext is None:
            raise RuntimeError("no pytrace extension for Python %d.%d" % sys.version_info[:2])
        hook_dir = os.path.join(os.path.dirname(hook_file), "")
        options.update(hide=_hidden([hook_dir]), caller_stack=False, cmdline=_cmdline())
        session = _Session(ext, False, None, list(sys.orig_argv[1:]))
        _register_at_exit(session.stop_at_exit)
        segment = _start(ext, options)
        if options.get("fork_children", True):
            _watch_forks(ext, hook_dir)
    except Exception as e:  # noqa: BLE001 - the child program must run regardless
        _say("child %d not traced: %s" % (os.getpid(), e))
        _ledger_note(os.path.dirname(os.path.abspath(hook_file)), "untraced", str(e))
        return
    _ledger_note(hook_dir, "traced", "%s\t%d" % (segment, os.getppid()))
    _say("tracing pid %d into %s; attach with: pytrace-top %d" % (os.getpid(), segment, os.getpid()))


def _chain_customize(name, hook_file):
    """Run the sitecustomize / usercustomize our hook shadows, if there is one further
    on sys.path (as site.py would: errors other than its absence are reported).
    -> that module, or None."""
    hook_dir = os.path.dirname(os.path.abspath(hook_file))
    ours = sys.modules.pop(name, None)
    saved = list(sys.path)
    real = None
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != hook_dir]
        real = __import__(name)
    except ImportError as e:
        if e.name != name:
            sys.stderr.write("Error in %s; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                             % (name, type(e).__name__, e))
    except Exception as e:  # noqa: BLE001 - behave like site.py: report and continue
        sys.stderr.write("Error in %s; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (name, type(e).__name__, e))
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules[name] = ours
    return real


def _cmdline():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return " ".join(sys.orig_argv)


if __name__ == "__main__":
    try:
        _code = _main(sys.argv[1:])
    except SystemExit:
        raise
    except BaseException:
        sys.excepthook = _show_without_launcher(sys.excepthook)
        raise
    if _code:
        sys.exit(_code)
