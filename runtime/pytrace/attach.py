"""`pytrace attach PID`, `pytrace detach PID`, and attaching for `top PID` / `record PID`.

    pytrace attach [run's options] [--timeout S] PID    start tracing inside a running process
    pytrace detach [--timeout S] PID                     stop it again; every hook is removed

Python 3.14 and newer let one process run a script in another (PEP 768,
`sys.remote_exec`): the target's main thread runs it at its next eval-breaker check,
as it runs signal handlers. pytrace hands it `_remote_script.py` (read as text, with one
call line of parameters appended), which loads a `_pytrace` built for the target's
interpreter and calls its start() (or stop()) there. The frames already running on
every thread become the roots, as for `pytrace.start()` anywhere.

How the attaching side learns the outcome: the script writes its result (a Python
literal) into a FIFO in the attacher's own directory, and the attacher reads it without
blocking, with a timeout (see _Folder for why the target never gets a directory of its
own). The script never raises into the target and prints nothing there. A script that
comes too late (its main thread was blocked in C past the timeout) does nothing: the
attacher replaces the pending request by an empty one, and the script checks a deadline
(on CLOCK_MONOTONIC, shared by both processes) before it changes anything.

`sys.remote_exec` talks only to an interpreter of its own major.minor version: when the
target runs another one, the call is made by the target's own interpreter binary
(/proc/PID/exe, run with -I -S). Which `_pytrace` the target loads: the one it already
has, else the one of a pytrace package on its own sys.path, else this pytrace's own if
it was built for the same interpreter (same extension suffix); else the attach fails
with one line that says how to install pytrace there.
"""

import ast
import errno
import fcntl
import os
import stat
import re
import shutil
import subprocess
import sys
import tempfile
import time

MIN_VERSION = (3, 14)
DEFAULT_TIMEOUT = 10.0
_SCRIPT_SOURCE = None


class AttachError(Exception):
    """Why an attach or detach could not be done: one line a person can act on."""

    def __init__(self, message, kind="error"):
        super().__init__(message)
        self.kind = kind


# ---- the target process --------------------------------------------------------------

class Target:
    """What /proc says about a process, read once."""

    def __init__(self, pid):
        self.pid = pid
        self.proc = "/proc/%d" % pid
        self.uid = None
        self.start_time = None
        self.argv = []
        self.cmdline = ""
        self.exe = None          # resolved path of its executable, when readable
        self.version = None      # (major, minor) of its Python, when known
        self.runnable = False    # self.exe is a python binary that can run our helpers
        self.embedded_in = None  # the executable that embeds libpython X.Y


def _start_time(pid):
    """Field 22 of /proc/PID/stat (the process's start, in clock ticks), or None if it is
    gone or a zombie (it has exited; its parent has not reaped it yet)."""
    from . import _pytrace
    st = _pytrace.proc_stat(pid)
    if st is None or st["state"] in ("Z", "X"):
        return None
    return st["start"]


def alive(target):
    """Still the same process (a reused pid has another start time)."""
    return _start_time(target.pid) == target.start_time


def _user_name(uid):
    try:
        import pwd
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (ImportError, KeyError):
        return "uid %d" % uid


def _ptrace_hint():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = f.read().strip()
    except OSError:
        scope = None
    if scope and scope != "0":
        return ("kernel.yama.ptrace_scope is %s, which lets only a parent process or root "
                "read and write another process's memory" % scope)
    return "the kernel refused access to its memory (ptrace restrictions, or the process is not dumpable)"


def permission_error(target, what="attach to"):
    if target.uid is not None and target.uid != os.geteuid() and os.geteuid() != 0:
        return AttachError("permission denied: pid %d belongs to %s; only that user or root can "
                           "%s it" % (target.pid, _user_name(target.uid), what), "permission")
    if os.geteuid() == 0:
        # root was refused too: "run as root" would be no advice. Say what is known of
        # the process instead (a Python program or not, by its command line).
        argv0 = os.path.basename(target.argv[0]) if target.argv else ""
        looks = ("" if not argv0 or re.match(r"python|pypy", argv0)
                 else "; it does not look like a Python program (%s), and pytrace reads only "
                      "Python processes started under pytrace or attached (Python 3.14+)" % argv0)
        return AttachError("cannot %s %s: the kernel refused access even to root (another "
                           "namespace or container, or a process that is not dumpable)%s"
                           % (what, describe(target), looks), "permission")
    return AttachError("permission denied: cannot %s pid %d: %s; run pytrace as root, or start the "
                       "program under pytrace (pytrace run ...)" % (what, target.pid, _ptrace_hint()),
                       "permission")


_PY_NAME = re.compile(r"python(\d+)\.(\d+)[a-z]*")
_LIBPY = re.compile(r"/libpython(\d+)\.(\d+)[a-z]*\.so")


def inspect_target(pid, what="attach to"):
    """-> Target. Raises AttachError for a pid that is gone or not ours to read."""
    t = Target(pid)
    try:
        t.uid = os.stat(t.proc).st_uid
    except FileNotFoundError:
        raise AttachError("no process %d (it has exited, or never was)" % pid, "gone") from None
    except OSError as e:
        raise AttachError("cannot read /proc/%d: %s" % (pid, e.strerror or e)) from None
    t.start_time = _start_time(pid)
    if t.start_time is None:        # gone meanwhile, or a zombie (exited, not reaped yet)
        raise AttachError("no process %d (it has exited, or never was)" % pid, "gone")
    try:
        with open(t.proc + "/cmdline", "rb") as f:
            t.argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        t.cmdline = " ".join(t.argv)
    except OSError:
        pass
    if t.uid != os.geteuid() and os.geteuid() != 0:
        raise permission_error(t, what)
    try:
        exe = os.readlink(t.proc + "/exe")
    except PermissionError:
        raise permission_error(t, what) from None
    except FileNotFoundError:
        if _start_time(pid) is None:
            raise AttachError("no process %d (it has exited, or never was)" % pid, "gone") from None
        raise AttachError("pid %d is not a Python process (it has no executable: a kernel thread?)"
                          % pid, "not-python") from None
    except OSError as e:
        raise AttachError("cannot read /proc/%d/exe: %s" % (pid, e.strerror or e)) from None
    if exe.endswith(" (deleted)"):
        exe = exe[:-len(" (deleted)")]
    t.exe = exe
    m = _PY_NAME.fullmatch(os.path.basename(exe))
    if m:
        t.version = (int(m.group(1)), int(m.group(2)))
        t.runnable = _safe_to_run(t.proc + "/exe")
        return t
    try:
        with open(t.proc + "/maps") as f:
            m = _LIBPY.search(f.read())
    except PermissionError:
        raise permission_error(t, what) from None
    except OSError:
        m = None
    if m:
        t.version = (int(m.group(1)), int(m.group(2)))
        t.embedded_in = exe
        return t
    if re.fullmatch(r"python\d*", os.path.basename(exe)) and _safe_to_run(t.proc + "/exe"):
        # a python binary whose name has no version: ask it (the same binary as the target).
        # Root asks it as the process's own user: its standard library may be in a folder
        # of that user's (only the version is read back, as numbers)
        as_user = {}
        if os.geteuid() == 0 and t.uid != 0:
            try:
                as_user = dict(user=t.uid, group=os.stat(t.proc).st_gid, extra_groups=[])
            except OSError:
                return t
        try:
            r = subprocess.run([t.proc + "/exe", "-I", "-S", "-c",
                                "import sys; print(*sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=10, **as_user)
            major, minor = (int(x) for x in r.stdout.split())
            t.version = (major, minor)
            t.runnable = True
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return t


def _safe_to_run(path):
    """May we run the target's own interpreter binary? Only one that this user or root
    owns and no one else can write: root must never run a binary another user chose."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def describe(target):
    """"pid N (its command line)", escaped for the terminal (it is the process's to choose).
    A long one ends at a word, with "...", never cut mid-word."""
    from .cmdline import printable
    cmd = target.cmdline or target.exe or "?"
    if len(cmd) > 80:
        cut = cmd.rfind(" ", 0, 80)
        cmd = (cmd[:cut] if cut > 0 else cmd[:80]) + " ..."
    return "pid %d (%s)" % (target.pid, printable(cmd))


def require_attachable(target, verb="attaching"):
    """Says at once what makes attaching impossible: an older Python, or none at all."""
    if target.version is not None and target.version < MIN_VERSION:
        raise AttachError(
            "%s runs Python %d.%d, and %s needs Python %d.%d+ (PEP 768 sys.remote_exec); start it "
            "under pytrace instead: pytrace run script.py, or pytrace record -o OUT -- python script.py"
            % (describe(target), target.version[0], target.version[1], verb, *MIN_VERSION), "old-python")
    if target.version is None and not hasattr(sys, "remote_exec"):
        from .cmdline import printable
        raise AttachError("%s is not a Python process (%s)" % (describe(target),
                                                              printable(target.exe or "?")),
                          "not-python")


# ---- segments ------------------------------------------------------------------------

def live_segment(pid):
    """The name of pid's segment that is being traced into now, or None. Only segments of
    this user count: no reader opens another user's (not even root's)."""
    from . import _pytrace
    uid = os.geteuid()
    for s in _pytrace.list_segments():
        if (s.get("pid") == pid and s.get("alive") and s.get("valid", True) and s.get("state") == 1
                and s.get("uid") == uid):
            return s.get("name")
    return None


def plan_for_reader(pid):
    """What `record PID` / `top PID` / `dump PID` do with pid: "traced" (it has a live
    segment), "starting" (started under pytrace: its segment may be on its way), or
    "attach" (a Python process that is not traced). Raises AttachError (gone, not ours)."""
    if live_segment(pid):
        return "traced"
    target = inspect_target(pid)
    if started_under_pytrace(target.argv, pid):
        return "starting"
    if target.uid != os.geteuid():
        # root may attach, but its segment would be the process's user's, which no reader
        # of root's opens: say so now instead of after attaching
        raise AttachError("%s belongs to %s: its segment would be that user's, which root's "
                          "readers do not open; run this as that user"
                          % (describe(target), _user_name(target.uid)), "permission")
    return "attach"


def started_under_pytrace(argv, pid=None):
    """`pytrace run ...` (which becomes `python job.py` with pytrace's options in its
    environment, _launch.LAUNCH_ENV, or `python .../pytrace/_launch.py ... -- PROGRAM`
    with -E, -I, -S), `python -m pytrace ...`, and the jobs record and top start."""
    if pid is not None:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:     # as it was at exec
                if any(v.startswith(b"PYTRACE_LAUNCH=") for v in f.read().split(b"\0")):
                    return True
        except OSError:
            pass
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1].split(".")[0] == "pytrace":
            return True
        if arg.startswith("-mpytrace"):
            return True
        if arg == "--":
            break
        if arg.endswith(os.sep + "pytrace" + os.sep + "_launch.py"):
            return True
    return any(os.path.basename(a) == "pytrace" for a in argv[:2])


# ---- running code in the target --------------------------------------------------------

_EXEC_HELPER = """\
import sys
try:
    sys.remote_exec(int(sys.argv[1]), sys.argv[2])
except BaseException as e:
    print("%s: %s" % (type(e).__name__, e))
    sys.exit(1)
"""


def _exec_error(target, text):
    if "PermissionError" in text or "Permission denied" in text or "Operation not permitted" in text:
        return permission_error(target)
    if not alive(target):
        return AttachError("%s exited during the attach" % describe(target), "exited")
    if "Remote debugging is not enabled" in text:
        return AttachError(
            "%s has remote debugging turned off (PYTHON_DISABLE_REMOTE_DEBUG is set, or it runs with "
            "-X disable-remote-debug, or its Python was built without it), so pytrace cannot attach; "
            "start it under pytrace instead: pytrace run script.py" % describe(target), "disabled")
    if "PyRuntime" in text or "debug offsets" in text:
        return AttachError("%s is not a Python process (no Python %d.%d+ runtime found in its memory: "
                           "%s)" % (describe(target), *MIN_VERSION, text.strip()), "not-python")
    return AttachError("sys.remote_exec on %s failed: %s" % (describe(target), text.strip()))


def remote_exec(target, path, verb="attach"):
    """Ask target to run the script at path (returns at once, as sys.remote_exec does).
    verb: what the user asked ("attach", "detach"), for the one-line refusals."""
    own = sys.version_info[:2]
    if hasattr(sys, "remote_exec") and (target.version == own or target.version is None):
        try:
            sys.remote_exec(target.pid, path)
        except PermissionError:
            raise permission_error(target) from None
        except (OSError, RuntimeError, ValueError) as e:
            raise _exec_error(target, "%s: %s" % (type(e).__name__, e)) from None
        return
    if not target.runnable:
        raise AttachError(
            "%s runs Python %d.%d (in %s), and this pytrace runs on %d.%d: attach with a pytrace "
            "installed for Python %d.%d (python%d.%d -m pytrace attach %d)"
            % (describe(target), target.version[0], target.version[1], target.embedded_in or target.exe,
               own[0], own[1], target.version[0], target.version[1], target.version[0],
               target.version[1], target.pid), "other-python")
    exe = target.proc + "/exe"
    if os.geteuid() == 0:
        # root runs the target's interpreter only where dump would: that very file, with
        # its directories and standard library root's alone (one rule, in dump); dump
        # imports this module, hence the import here
        from .dump import interpreter_for_root
        exe = interpreter_for_root(target, verb)
    try:
        r = subprocess.run([exe, "-I", "-S", "-c", _EXEC_HELPER, str(target.pid), path],
                           capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise AttachError("%s exited during the attach" % describe(target), "exited") from None
    except (OSError, subprocess.SubprocessError) as e:
        raise AttachError("cannot run %s to reach pid %d: %s" % (target.exe, target.pid, e)) from None
    if r.returncode != 0:
        lines = (r.stdout + r.stderr).strip().splitlines()
        raise _exec_error(target, lines[-1] if lines else "exit code %d" % r.returncode)


def _script_source():
    global _SCRIPT_SOURCE
    if _SCRIPT_SOURCE is None:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_remote_script.py")) as f:
            _SCRIPT_SOURCE = f.read()
    return _SCRIPT_SOURCE


class _PidLock:
    """One attach or detach of a pid at a time: the target has a single slot for a pending
    script (a second request would overwrite the first).

    The lock is flock() on a file in a directory that only this user can write
    (/run/pytrace for root, else $XDG_RUNTIME_DIR/pytrace, else TMPDIR/pytrace-locks-UID),
    opened without following links and checked on the fd: a directory of ours that no one
    else may write, a regular file of ours. It was an abstract Unix socket name, which any
    user can bind first (root's attach then failed at once, and `record PID` waited its
    whole timeout): a name in a shared namespace is a lock anyone can take. So only this
    user's own commands share the lock. Root and the target's owner do not: the owner can
    always fill its own process's slot (sys.remote_exec needs nothing of pytrace), and a
    request that is overwritten ends in the timeout, changing nothing (the script checks
    its deadline and cancel marker first). A directory of the name that is not ours
    (another user made it first) is passed over; with none left we go on without a lock
    rather than be stopped by another user."""

    def __init__(self, pid, timeout):
        self.pid = pid
        self.timeout = timeout
        self.dir_fd = None
        self.fd = None
        self.name = "attach-%d.lock" % pid

    @staticmethod
    def _directories():
        uid = os.geteuid()
        places = ["/run/pytrace"] if uid == 0 else []
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isabs(runtime):
            places.append(os.path.join(runtime, "pytrace"))
        try:
            places.append(os.path.join(tempfile.gettempdir(), "pytrace-locks-%d" % uid))
        except OSError:
            pass                            # none usable (a full disk)
        return places

    @staticmethod
    def _open_private_dir(path):
        """-> an fd of directory path if it is this user's and no one else may write in it."""
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            return fd
        os.close(fd)
        return None

    def _try_lock(self):
        """-> True (held), False (another of ours holds it), None (no lock to be had here)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.name, flags, 0o600, dir_fd=self.dir_fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except OSError:
                return None
            # the holder before us unlinks the file as it lets go: a lock on that file
            # locks nothing, so the name must still be this file
            try:
                now = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return False
            self.fd, fd = fd, None
            return True
        finally:
            if fd is not None:
                os.close(fd)

    def __enter__(self):
        for path in self._directories():
            self.dir_fd = self._open_private_dir(path)
            if self.dir_fd is not None:
                break
        if self.dir_fd is None:
            return self                     # no place of our own: go on without
        deadline = time.monotonic() + self.timeout
        while True:
            held = self._try_lock()
            if held is None:
                self._close()
                return self                 # no lock to be had here: go on without
            if held:
                return self
            if time.monotonic() >= deadline:
                self._close()
                raise AttachError("another pytrace attach or detach of pid %d is under way" % self.pid,
                                  "busy")
            time.sleep(0.02)

    def _close(self):
        if self.fd is not None:
            try:
                os.unlink(self.name, dir_fd=self.dir_fd)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None

    def __exit__(self, *exc):
        self._close()


def _main_thread_state(pid):
    """How the main thread of pid waits now, in words (for the progress line)."""
    from . import _pytrace
    st = _pytrace.proc_stat(pid)
    if st is None:
        return "unknown"
    state = st["state"]
    try:
        with open("/proc/%d/wchan" % pid) as f:
            wchan = f.read().strip()
    except OSError:
        wchan = ""
    if state == "R":
        return "running"
    return "waiting in the kernel%s" % (" (%s)" % wchan if wchan and wchan != "0" else "")


def run_in_target(target, action, params, timeout, say=None, tick=None, cancelled=None):
    """Run _remote_script's `action` in target; -> its result dict. tick() is called
    while waiting (a recorder drains the job's rings meanwhile); cancelled() (and Ctrl-C)
    gives up as the timeout does."""
    with _PidLock(target.pid, timeout):
        start = time.monotonic()
        deadline = start + timeout

        def script(folder):
            # compiled under a name that says what it is: its frames are on the main thread's
            # stack when tracing starts (and stops), so they show in the picture
            p = dict(params, action=action, script=folder.script, result=folder.result,
                     deadline=deadline, cancel=folder.cancel)
            return "exec(compile(%r, %r, 'exec'))\n_pytrace_remote(%r)\n" % (
                _script_source(), "<pytrace %s>" % action, p)

        folder = _Folder(target, action, script)
        try:
            return _run_in(target, action, start, deadline, timeout, say, tick, cancelled, folder)
        finally:
            folder.close()


def _folder_places():
    """Where the request is written: the temporary directory, else /dev/shm (memory: a
    detach on a full disk still detaches). Both must be shared with the target (README:
    Limits). tempfile passes over a directory it cannot write a file in, and has none to
    give when the disk is full."""
    try:
        places = [tempfile.gettempdir()]
    except OSError:
        places = []
    return places + ["/dev/shm"] if "/dev/shm" not in places else places


class _Folder:
    """The request's directory: the script the target runs, and `result`, the FIFO its
    answer comes back through.

    Root attaching to another user's process must never open anything that user can
    plant. The directory used to be chowned to the target's user, so that the script
    could write its result file there; that user could then replace `result` or
    `cancelled` with a symlink to a root-only file (root truncated or printed it) or a
    FIFO (root's read hung past its --timeout). Checking each open (O_NOFOLLOW,
    O_NONBLOCK, fstat) would leave every future open in that directory one mistake
    from the same hole, so the directory stays ours: mode 0711 (the target may read the
    script by its name, and list nothing), nothing in it writable by another user but the
    FIFO we make ourselves, whose writing end is given to the target's user (mode 0200).
    We read it without blocking, at most RESULT_MAX bytes; a writer that never closes it
    only runs us into our own deadline. Whatever comes through it is the target user's
    word about its own process, parsed as a literal and cleaned (_parse_result)."""

    RESULT_MAX = 1 << 20

    def __init__(self, target, action, script):
        self.path = None
        self.keep = False
        self.result_fd = None
        self.data = b""
        errors = []
        for place in _folder_places():
            try:
                self._make(place, target, action)
                self._write_script(script(self))
                return
            except OSError as e:
                errors.append("in %s: %s" % (place, e.strerror or e))
                self._remove()
        raise AttachError("cannot write the %s request for %s (%s); nothing was changed in it"
                          % (action, describe(target), "; ".join(errors) or "no place to write it"),
                          "no-space")

    def _make(self, place, target, action):
        other = os.geteuid() == 0 and target.uid not in (None, 0)
        self.path = tempfile.mkdtemp(prefix="pytrace-attach-" if place != "/dev/shm" else ".pytrace-attach-",
                                     dir=place)
        if other:
            os.chmod(self.path, 0o711)
        self.script = os.path.join(self.path, "pytrace_%s.py" % action)
        self.result = os.path.join(self.path, "result")
        self.cancel = os.path.join(self.path, "cancelled")
        os.mkfifo(self.result, 0o600)
        if other:
            os.chown(self.result, target.uid, -1, follow_symlinks=False)
            os.chmod(self.result, 0o200)      # our directory: no one can swap the name
        # the reading end first: the script's non-blocking open for writing fails without it
        self.result_fd = os.open(self.result, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not stat.S_ISFIFO(os.fstat(self.result_fd).st_mode):
            raise OSError(errno.EINVAL, "result is not our FIFO")

    def _write_script(self, text):
        fd = os.open(self.script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)

    def mark_cancelled(self):
        try:
            os.close(os.open(self.cancel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o644))
        except OSError:
            pass

    def read_result(self):
        """-> the result dict once a writer has written it and closed the FIFO, else None."""
        if self.result_fd is None:
            return None
        while True:
            try:
                chunk = os.read(self.result_fd, 65536)
            except BlockingIOError:
                return None             # a writer has it open, and has not finished
            except OSError as e:
                return {"status": "error", "error": "reading the result failed: %s" % (e.strerror or e)}
            if not chunk:
                break                   # no writer (now): what came is whole
            self.data += chunk
            if len(self.data) > self.RESULT_MAX:
                self.data = b""
                return {"status": "error", "error": "the result is larger than %d bytes" % self.RESULT_MAX}
        if not self.data:
            return None
        data, self.data = self.data, b""
        return _parse_result(data.decode("utf-8", errors="replace"))

    def _remove(self):
        if self.result_fd is not None:
            os.close(self.result_fd)
            self.result_fd = None
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def close(self):
        if self.keep:
            # the request may still name our script: it stays (the FIFO closed, so a late
            # script's answer goes nowhere, and `cancelled` tells it to do nothing)
            if self.result_fd is not None:
                os.close(self.result_fd)
                self.result_fd = None
        else:
            self._remove()


def _run_in(target, action, start, deadline, timeout, say, tick, cancelled, folder):
    remote_exec(target, folder.script, action)
    # From here on the process may read the script at any moment: every way out either
    # has its result, or has replaced the request by an empty one (a script file that is
    # gone when it looks would be reported on the process's stderr).
    try:
        result, interrupted = _wait_result(target, action, folder, start, deadline, timeout,
                                           say, tick, cancelled)
    except BaseException:
        _give_up(target, folder, always_keep=True)
        raise
    if result is not None:
        return result
    _give_up(target, folder)
    grace = time.monotonic() + 0.5          # one that started ours just now gets to finish
    while time.monotonic() < grace:
        result = folder.read_result()
        if result is not None and result.get("status") != "late":
            return result
        if tick is not None:
            tick()
        time.sleep(0.01)
    if interrupted:
        raise AttachError("interrupted before %s ran the %s code; nothing was changed in it"
                          % (describe(target), action), "interrupted")
    raise AttachError(
        "%s did not run the %s code within %g s: its main thread has not run Python code since "
        "(now: %s; a main thread blocked in time.sleep, a lock, join() or I/O runs it only when it "
        "wakes); nothing was changed in it; --timeout S waits longer"
        % (describe(target), action, timeout, _main_thread_state(target.pid)), "timeout")


def _wait_result(target, action, folder, start, deadline, timeout, say, tick, cancelled):
    """-> (result, False), or (None, interrupted) at the deadline, cancelled() or Ctrl-C."""
    said = False
    delay = 0.001
    try:
        while True:
            result = folder.read_result()
            if result is not None:
                return result, False
            if not alive(target):
                raise AttachError("%s exited during the %s" % (describe(target), action), "exited")
            now = time.monotonic()
            if now >= deadline:
                return None, False
            if cancelled is not None and cancelled():
                return None, True
            if say is not None and not said and now - start >= 1.0:
                said = True
                say("pid %d has not run the %s code yet: it runs when the main thread next runs "
                    "Python code (now: %s); waiting up to %g s"
                    % (target.pid, action, _main_thread_state(target.pid), timeout))
            if tick is not None:
                tick()
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
    except KeyboardInterrupt:
        return None, True


def _give_up(target, folder, always_keep=False):
    """The script must do nothing if it still runs: the request is replaced by an empty
    one, and the marker file makes ours do nothing (it checks it, and its deadline,
    first). The folder is kept if the request may still name our script."""
    folder.mark_cancelled()
    try:
        remote_exec(target, os.devnull)
        replaced = True
    except AttachError:
        replaced = False
    if (always_keep or not replaced) and alive(target):
        folder.keep = True


def _parse_result(text):
    try:
        result = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):   # {[]: 1}: TypeError
        result = None
    if not isinstance(result, dict):
        from .cmdline import printable
        return {"status": "error", "error": "unreadable result %r" % printable(text[:200])}
    # written by the other process: its strings reach a terminal, its segment name a reader
    from .cmdline import printable
    clean = {}
    for key, value in result.items():
        if isinstance(value, str):
            value = printable(value)[:400]
        elif isinstance(value, dict):
            value = {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, int)}
        elif not isinstance(value, (int, float, type(None))):
            continue
        clean[key] = value
    if clean.get("status") in ("ok", "already") and \
            not re.fullmatch(r"/pytrace-\d+-\d+-[0-9a-f]{16}", str(clean.get("segment", ""))):
        return {"status": "error", "error": "the result names no valid segment"}
    return clean


# ---- attach and detach -----------------------------------------------------------------

def _own_extension():
    """This pytrace's _pytrace and the suffix that ties it to this interpreter's ABI
    (".cpython-314-x86_64-linux-gnu.so"): a target loads it only if that is its own."""
    try:
        from . import _pytrace
        path = _pytrace.__file__
    except (ImportError, AttributeError):
        return {}
    import importlib.machinery
    tag = importlib.machinery.EXTENSION_SUFFIXES[0]
    return {"path": path, "suffix": tag} if path.endswith(tag) else {}


def attach(pid, options, timeout=DEFAULT_TIMEOUT, say=None, target=None, cancelled=None):
    """Start tracing inside pid with start() options; -> the result dict (segment, hook,
    python, executable, from). Raises AttachError."""
    target = target or inspect_target(pid)
    segment = live_segment(pid)
    if segment:
        raise AttachError("%s is already traced (segment %s); watch it with pytrace top %d or record "
                          "it with pytrace record -o OUT %d" % (describe(target), segment, pid, pid),
                          "already")
    require_attachable(target)
    params = {"options": options, "fallback": _own_extension()}
    result = run_in_target(target, "attach", params, timeout, say=say, cancelled=cancelled)
    status = result.get("status")
    if status == "ok":
        return result
    if status == "already":
        raise AttachError("%s is already traced (segment %s); watch it with pytrace top %d"
                          % (describe(target), result.get("segment") or "?", pid), "already")
    if status == "no-pytrace":
        exe = result.get("executable") or target.exe or "python3"
        raise AttachError(
            "%s runs Python %s (%s), for which no pytrace is installed (%s); install it there and "
            "attach with it: %s -m pip install pytrace && %s -m pytrace attach %d; the process runs on "
            "unchanged" % (describe(target), result.get("python", "?"), exe, result.get("error", ""),
                           exe, exe, pid), "no-pytrace")
    if status == "no-hook":
        raise AttachError("could not trace %s: %s; it runs on unchanged" % (describe(target),
                                                                           result.get("error")), "no-hook")
    if status == "late":
        raise AttachError("%s ran the attach code too late; nothing was changed" % describe(target),
                          "timeout")
    raise AttachError("the attach code failed inside %s: %s" % (describe(target), result.get("error")))


def loaded_note(result):
    """Says when the target's environment had no pytrace and this one's _pytrace was loaded."""
    if str(result.get("from", "")).startswith("the attaching pytrace"):
        return "; its environment has no pytrace, so this pytrace's _pytrace was loaded into it"
    return ""


def detach(pid, timeout=DEFAULT_TIMEOUT, say=None, tick=None, target=None):
    """Stop the tracing that `attach` started in pid; -> the result dict (counters).
    Raises AttachError."""
    target = target or inspect_target(pid, "detach from")
    require_attachable(target, "detaching")
    result = run_in_target(target, "detach", {}, timeout, say=say, tick=tick)
    status = result.get("status")
    if status == "ok":
        return result
    if status == "not-traced":
        raise AttachError("%s is not traced" % describe(target), "not-traced")
    if status == "not-attached":
        raise AttachError("%s traces itself (pytrace run, or pytrace.start() in its code; segment %s); "
                          "pytrace detach stops only what pytrace attach started"
                          % (describe(target), result.get("segment") or "?"), "not-attached")
    if status == "late":
        raise AttachError("%s ran the detach code too late; it is still traced" % describe(target), "timeout")
    raise AttachError("the detach code failed inside %s: %s" % (describe(target), result.get("error")))


def start_options(c_calls=True, include=None, exclude=None, policy="drop", rings=0, ring_size=0,
                  torch=False):
    """start() options from run's command-line values (checked as `pytrace run` checks them)."""
    from types import SimpleNamespace

    from .cmdline import start_options as from_namespace
    return from_namespace(SimpleNamespace(c_calls=c_calls, include=include, exclude=exclude,
                                          policy=policy, rings=rings, ring_size=ring_size,
                                          torch=torch))


# ---- pytrace top PID ------------------------------------------------------------------

_VIEW_VALUE_OPTIONS = ("--file", "--duration", "--window", "--thread", "--limit", "--sort",
                       "--pid", "--tree-budget", "--policy", "--ring-size", "--include", "--exclude")


def _view_pid(argv):
    """The pid `pytrace top ARGS` names, or None (a segment name, a file, none)."""
    positional = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in _VIEW_VALUE_OPTIONS:
            i += 2
            continue
        if a in ("-h", "--help", "-V", "--version", "--file") or a.startswith("--file="):
            return None
        if not a.startswith("-"):
            positional.append(a)
        i += 1
    if len(positional) == 1 and positional[0].isdigit() and int(positional[0]) > 0:
        return int(positional[0])
    return None


def _job_options(job_opts):
    """`pytrace top`'s job options (--no-c-calls, --policy, --ring-size, --include,
    --exclude; as split by top._split_options) -> start() options."""
    values = {"c_calls": True, "include": None, "exclude": None, "policy": "drop", "ring_size": 0,
              "torch": False}
    i = 0
    while i < len(job_opts):
        a = job_opts[i]
        if a == "--no-c-calls":
            values["c_calls"] = False
            i += 1
            continue
        if a == "--torch":
            values["torch"] = True
            i += 1
            continue
        name, eq, value = a.partition("=")
        if not eq:
            value = job_opts[i + 1]
            i += 1
        i += 1
        if name in ("--include", "--exclude"):
            key = name[2:]
            values[key] = (values[key] or []) + [value]
        elif name == "--policy":
            values["policy"] = value
        elif name == "--ring-size":
            values["ring_size"] = float(value)
    return start_options(values["c_calls"], values["include"], values["exclude"], values["policy"],
                         0, values["ring_size"], torch=values["torch"])


def view_untraced(viewer_path, argv, split_options, say):
    """`pytrace top PID` of a process that is not traced: attach (3.14+), run pytrace-top on
    its segment, detach when the view closes. -> the exit code, or None when pid is not
    for this (traced, starting under pytrace, or no pid given): pytrace-top handles it."""
    pid = _view_pid(argv)
    if pid is None:
        return None
    import signal
    state = {"viewer": None, "interrupts": 0}

    def on_sigint(signum, frame):
        # Before the viewer runs, Ctrl-C cancels the attach; then it is the viewer's: it
        # quits and prints what --once prints (a terminal sends it to both of us, a kill
        # only to us).
        state["interrupts"] += 1
        viewer = state["viewer"]
        if viewer is not None and viewer.poll() is None:
            viewer.send_signal(signum)

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        try:
            if plan_for_reader(pid) != "attach":
                return None
            job_opts, view_opts = split_options(argv)
            options = _job_options(job_opts)
            result = attach(pid, options, DEFAULT_TIMEOUT, say=say,
                            cancelled=lambda: state["interrupts"] > 0)
        except AttachError as e:
            say(str(e))
            return 1
        except Exception as e:  # noqa: BLE001 - a bad job option (ValueError, cli.UsageError)
            say(str(e) or "bad option")
            return 2
        say("attached to pid %d (Python %s, %s); it is detached when the view closes"
            % (pid, result.get("python"), result.get("hook")))
        code = 130
        try:
            if state["interrupts"] == 0:
                view = [result.get("segment") if a == str(pid) else a for a in view_opts]
                state["viewer"] = subprocess.Popen([viewer_path] + view)
                code = state["viewer"].wait()
        finally:
            try:
                detach(pid, DEFAULT_TIMEOUT, say=say)
                say("detached from pid %d: it runs on untraced" % pid)
            except AttachError as e:
                if e.kind not in ("exited", "gone"):
                    say("%s; it is still traced: pytrace detach %d" % (e, pid))
        return 128 - code if code < 0 else code
    finally:
        signal.signal(signal.SIGINT, old)


# ---- command line --------------------------------------------------------------------

def _say_as(command):
    def say(text):
        sys.stderr.write("pytrace %s: %s\n" % (command, text))
        sys.stderr.flush()
    return say


def _parser(command):
    from .cmdline import ArgumentParser, segment_default
    if command == "attach":
        p = ArgumentParser(prog="pytrace attach", usage="pytrace attach [options] PID",
                    description="Start tracing inside a running Python 3.14+ process that was not "
                                "started under pytrace (PEP 768). The frames already running become "
                                "the roots. Watch it with pytrace top PID, record it with pytrace "
                                "record -o OUT PID, stop with pytrace detach PID.")
        p.add_argument("--no-c-calls", dest="c_calls", action="store_false",
                       help="do not record calls of C functions")
        p.add_argument("--torch", action="store_true",
                       help="record PyTorch's operators, autograd nodes and record_function labels as spans, nested under the Python calls that ran them (torch's ITT instrumentation) (torch must not be imported yet: its ITT collector is chosen "
                            "at import)")
        p.add_argument("--include", action="append", default=None, metavar="MODULE_OR_PATH",
                       help="trace only these modules / path prefixes (repeatable)")
        p.add_argument("--exclude", action="append", default=None, metavar="MODULE_OR_PATH",
                       help="do not trace these modules / path prefixes (repeatable)")
        p.add_argument("--policy", choices=("drop", "wait"), default="drop",
                       help="full ring: drop events (default) or wait for the reader")
        p.add_argument("--rings", type=int, default=0, metavar="N",
                       help="most threads traced at once (default %d)" % segment_default("DEFAULT_RING_COUNT"))
        p.add_argument("--ring-size", type=float, default=0, metavar="MiB",
                       help="size of each ring in MiB (default %g)"
                            % (segment_default("DEFAULT_RING_BYTES") / 2**20))
    else:
        p = ArgumentParser(prog="pytrace detach", usage="pytrace detach [--timeout S] PID",
                    description="Stop the tracing that pytrace attach started in PID: every hook is "
                                "removed and the process goes on as before.")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help="how long to wait for the process's main thread to run the code "
                        "(default %g)" % DEFAULT_TIMEOUT)
    p.add_argument("pid", metavar="PID", help="the process")
    return p


def main(argv):
    """`pytrace attach ARGV`."""
    return _command_line("attach", argv)


def detach_main(argv):
    """`pytrace detach ARGV`."""
    return _command_line("detach", argv)


def _command_line(command, argv):
    from .cmdline import UsageError, extension
    ns = _parser(command).parse_args(argv)
    if not ns.pid.isdigit() or int(ns.pid) <= 0:
        raise UsageError("PID must be a process id, not %r" % ns.pid, command)
    if not ns.timeout > 0:
        raise UsageError("--timeout must be positive", command)
    pid = int(ns.pid)
    say = _say_as(command)
    try:
        extension()
    except ImportError as e:
        say(str(e).replace("pytrace: ", "", 1))
        return 1
    try:
        if command == "attach":
            try:
                options = start_options(ns.c_calls, ns.include, ns.exclude, ns.policy, ns.rings,
                                        ns.ring_size, torch=ns.torch)
            except UsageError as e:
                raise UsageError(str(e), command) from None
            start = time.monotonic()
            result = attach(pid, options, ns.timeout, say=say)
            say("tracing pid %d into %s (Python %s, %s%s; attached in %.0f ms); watch: pytrace top %d; "
                "record: pytrace record -o OUT %d; stop: pytrace detach %d"
                % (pid, result.get("segment"), result.get("python"), result.get("hook"),
                   loaded_note(result), (time.monotonic() - start) * 1e3, pid, pid, pid))
        else:
            result = detach(pid, ns.timeout, say=say)
            c = result.get("counters") or {}
            say("pid %d is no longer traced (%d events written, %d dropped); every hook is removed"
                % (pid, c.get("events_written", 0), c.get("events_dropped", 0)))
    except AttachError as e:
        say(str(e))
        return 1
    except OSError as e:        # one line, whatever the system refused
        say("%s of pid %d failed: %s" % (command, pid, e))
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    return 0
