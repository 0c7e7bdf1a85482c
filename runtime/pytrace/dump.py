"""`pytrace dump PID`: every thread's current Python stack, innermost frame first.

Two sources, tried in this order:

1. The job's own segment, when it is traced: the reader replays the rings from where the
   last reader left them (nothing is consumed: the cursors are not moved) into a
   pytrace.Profile, and each thread's stack is the one pytrace's walk holds
   (Profile.stacks(): the C core's rules, viewer/core/walk.h, never a second walker
   here). A thread whose stream is read from its start is complete; one whose beginning
   a previous reader took gets its stack from the Frame records the producer writes on
   the reader's request, which it does on that thread's next event (with room in its
   ring). C functions on the stack show (time.sleep, lock.acquire), and open
   pytrace.span spans where the walk puts them; Python frames give the line where the
   function starts.
2. The process's memory, on Python 3.14+: the standard library's remote unwinder
   (`_remote_debugging`, which `python -m asyncio ps` and the 3.15 sampling profiler use)
   reads every thread's frames without running anything in the process, so it also
   works when the main thread is blocked (where `sys.remote_exec` would wait for it).
   Used for an untraced process, and for a traced one whose segment a reader that is not
   a hub holds (a hub's is read through the hub, which serves every thread's stack to a
   reader that joins) or where a thread has not answered the stack request (it is
   blocked). Lines are the current ones.

Anything older than 3.14 and not traced gets one line saying so.
"""

import ast
import os
import subprocess
import sys
import time

from .attach import AttachError, MIN_VERSION, describe, inspect_target, live_segment, permission_error

# Run by the target's own interpreter binary when it is not this one's version: the
# unwinder reads only processes of its own major.minor.
_UNWIND = """\
import sys
def frames_of(thread):
    out = []
    for f in (getattr(thread, "frame_info", None) or thread[1] or []):
        loc = getattr(f, "location", None)
        line = getattr(f, "lineno", None)
        if line is None and loc is not None:
            line = getattr(loc, "lineno", None)
        out.append((str(getattr(f, "funcname", "?")), str(getattr(f, "filename", "?")), int(line or 0)))
    return out
def main(pid):
    import _remote_debugging
    unwinder = _remote_debugging.RemoteUnwinder(pid, all_threads=True)
    threads = []
    for item in unwinder.get_stack_trace():
        for thread in (getattr(item, "threads", None) or [item]):
            tid = getattr(thread, "thread_id", None)
            threads.append((int(thread[0] if tid is None else tid), frames_of(thread)))
    return threads
if __name__ == "__main__":
    try:
        print(repr(("ok", main(int(sys.argv[1])))))
    except BaseException as e:
        print(repr(("error", type(e).__name__, str(e))))
"""


def _say(text):
    sys.stderr.write("pytrace dump: %s\n" % text)
    sys.stderr.flush()


def _printable(text):
    from .cmdline import printable
    return printable(text)


# ---- from the process's memory (3.14+) -------------------------------------------------

def _other_root(target):
    """pid's root directory as we see it (/proc/PID/root) when it is not ours: it runs in a
    chroot (or another mount namespace's root). None when it is ours or cannot be told."""
    import os
    try:
        theirs = os.stat(target.proc + "/root/")
        ours = os.stat("/")
    except OSError:
        return None
    if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
        return None
    try:
        return os.readlink(target.proc + "/root")
    except OSError:
        return "?"


def _exe_inside(target, root, base):
    """The target's interpreter as a path inside its root (its /proc/PID/exe reads as a
    path of ours, under root), checked to be that very file in base (the root, pinned
    by an fd: /proc/self/fd/N); None if it cannot be told."""
    import os
    exe = target.exe or ""
    if root in ("?", "/") or not exe.startswith(root.rstrip("/") + "/"):
        return None
    inside = exe[len(root.rstrip("/")):]
    try:
        a = os.stat(target.proc + "/exe")
        b = os.stat(base + inside)
    except OSError:
        return None
    return inside if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) else None


# Entries of the interpreter's standard library checked one by one: past this many, the
# root is not taken to be root's alone (a stdlib has about 1,500).
_TREE_MAX = 50000


def _root_only(base, path, links=None):
    """Walk path inside base (a root directory, pinned by an fd) one component at a
    time, following symbolic links within base as the kernel does in a chroot: -> the
    resolved path if every directory walked through and the entry itself belong to
    root and no one else may write them; "" if it does not exist (then no one but root
    can make it); None if something on the way is another user's."""
    import os
    import stat as st_
    links = [0] if links is None else links
    todo = [p for p in path.split("/") if p]
    cur = []
    try:
        st = os.lstat(base + "/")
    except OSError:
        return None
    if st.st_uid != 0 or st.st_mode & 0o022:
        return None
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            if cur:
                cur.pop()
            continue
        here = "/" + "/".join(cur + [name])
        try:
            st = os.lstat(base + here)
        except FileNotFoundError:
            return ""
        except NotADirectoryError:
            return ""
        except OSError:
            return None
        if st_.S_ISLNK(st.st_mode):         # in a directory of root's: it stays what it is
            links[0] += 1
            try:
                target = os.readlink(base + here)
            except OSError:
                return None
            if links[0] > 40:
                return None
            if target.startswith("/"):
                cur = []
            todo = [p for p in target.split("/") if p] + todo
            continue
        if st.st_uid != 0 or st.st_mode & 0o022:
            return None
        cur.append(name)
    return "/" + "/".join(cur)


def _tree_root_only(base, path, budget):
    """Every entry under path (resolved, inside base) root's alone; links checked where
    they lead. budget: [entries left]."""
    import os
    import stat as st_
    for dirpath, dirnames, filenames in os.walk(base + path):
        for name in dirnames + filenames:
            budget[0] -= 1
            if budget[0] < 0:
                return False
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                return False
            if st_.S_ISLNK(st.st_mode):
                if _root_only(base, full[len(base):]) is None:
                    return False
            elif st.st_uid != 0 or st.st_mode & 0o022:
                return False
    return True


def _trusted_root(base, inside, version):
    """May root run inside's interpreter in the root base (pinned by an fd)? Root must
    never run a program (or a library, or Python source) another user chose: the root
    directory, every directory down to the interpreter, the interpreter, the standard
    library the interpreter finds from where it lies (lib/pythonX.Y under each directory
    above it, every file of it), and the directories and files the loader reads must
    each be root's and writable by no one else, checked through links as the loader
    follows them (then none of them can be swapped between this check and the run)."""
    import os
    paths = [inside, "/etc", "/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf",
             "/etc/ld.so.conf.d", "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"]
    arch = "%s-linux-gnu" % os.uname().machine
    paths += ["/lib/" + arch, "/usr/lib/" + arch]
    trees = []
    above = os.path.dirname(inside)
    while True:
        for lib in ("lib", "lib64"):
            paths.append(os.path.join(above, lib))
            trees.append(os.path.join(above, lib, "python%d.%d" % tuple(version[:2])))
        if above == "/":
            break
        above = os.path.dirname(above)
    for path in paths:
        if _root_only(base, path) is None:
            return False
    budget = [_TREE_MAX]
    for tree in trees:
        resolved = _root_only(base, tree)
        if resolved is None or resolved and not _tree_root_only(base, resolved, budget):
            return False
    return True


def interpreter_for_root(target, verb):
    """-> the path by which root may run target's own interpreter (to read its stacks, or
    to reach it with sys.remote_exec, when it runs another Python version than this one):
    the very file the process runs, which must be that file here too, with every directory
    above it, its standard library tree and the loader's files root's alone
    (_trusted_root). Root never runs a program, library or Python source another user
    chose. Raises AttachError("other-root") in one line saying what to do instead.
    verb: what the user asked ("dump", "attach", "detach")."""
    exe = target.proc + "/exe"
    # run as /proc/PID/exe, the interpreter finds its standard library from the path the
    # process sees, which another user's mount namespace can make a directory of theirs
    # here: run it by a path of ours that is that very file
    try:
        same = os.stat(exe), os.stat(target.exe)
    except OSError:
        same = None
    if not same or (same[0].st_dev, same[0].st_ino) != (same[1].st_dev, same[1].st_ino):
        raise AttachError("%s runs Python %d.%d from %s, which is not that file here (another "
                          "mount namespace?): %s it with a pytrace installed for Python %d.%d"
                          % (describe(target), *target.version, _printable(target.exe),
                             verb, *target.version), "other-root")
    if not _trusted_root("", target.exe, target.version):
        raise AttachError("%s runs Python %d.%d from %s, whose directories or standard library "
                          "are not root's alone: root does not run it; %s it with a pytrace "
                          "installed for Python %d.%d"
                          % (describe(target), *target.version, _printable(target.exe), verb,
                             *target.version), "other-root")
    return target.exe


_UNWIND_TRIES = 5       # reads of a running process's stacks before its failure is said


def _unwind(target):
    """-> [(os thread id, [(function, file, line), ...innermost first])]. Raises AttachError."""
    root = _other_root(target)
    if root is not None:
        # The unwinder finds the interpreter's data through the files /proc/PID/maps names,
        # which are paths inside the target's root; and a chroot's interpreter may need
        # that root's C library (run from here it printed nothing, and dump said "list
        # index out of range"). Read it with its own interpreter, chrooted into its root.
        return _unwind_in_root(target, root)
    if target.version == sys.version_info[:2] or (target.version is None and sys.version_info >= MIN_VERSION):
        namespace = {"__name__": "pytrace_unwind"}
        exec(compile(_UNWIND, "<pytrace unwind>", "exec"), namespace)
        # The unwinder reads a running process: a thread that moves its frames while they
        # are read fails it ("Failed to parse initial frame in chain", 1 dump in 10 on 3.15
        # with a busy thread). Such a read is tried again, a few times.
        for attempt in range(_UNWIND_TRIES):
            try:
                return namespace["main"](target.pid)
            except PermissionError:
                raise permission_error(target, "read the stacks of") from None
            except ImportError as e:
                raise AttachError("this Python has no remote unwinder (%s)" % e) from None
            except RuntimeError as e:
                if attempt + 1 < _UNWIND_TRIES:
                    time.sleep(0.01)
                    continue
                return _unwind_failed(target, "%s: %s" % (type(e).__name__, e))
            except (OSError, ValueError, UnicodeDecodeError) as e:
                return _unwind_failed(target, "%s: %s" % (type(e).__name__, e))
    if not target.runnable:
        raise AttachError("%s runs Python %d.%d (in %s): dump it with a pytrace installed for Python "
                          "%d.%d" % (describe(target), *target.version, target.embedded_in or target.exe,
                                     *target.version))
    exe = target.proc + "/exe"
    if os.geteuid() == 0:
        exe = interpreter_for_root(target, "dump")
    return _run_unwinder(target, [exe], target.exe, None)


def _unwind_in_root(target, root):
    import os
    where = "pid %d runs in another root (%s: a chroot or container)" % (target.pid, _printable(root))
    if target.version is None or target.version < MIN_VERSION:
        raise AttachError("%s, with no Python %d.%d+ found there; run pytrace dump inside it"
                          % (where, *MIN_VERSION), "other-root")
    # The root is pinned: checked and entered through this one fd. The process may change
    # its root meanwhile (a user namespace gives it chroot): /proc/PID/root, looked up
    # again to enter it, could then be a directory of that user's.
    try:
        root_fd = os.open(target.proc + "/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise AttachError("%s exited" % describe(target), "exited") from None
    except OSError as e:
        raise AttachError("%s, which cannot be opened: %s" % (where, e.strerror or e), "other-root") from None
    try:
        base = "/proc/self/fd/%d" % root_fd
        inside = _exe_inside(target, root, base) if target.runnable else None
        if inside is not None and not _trusted_root(base, inside, target.version):
            raise AttachError("%s that is not root's alone (a directory of it, or of its interpreter, "
                              "standard library or libraries, belongs to or is writable by another "
                              "user): root does not run programs there; run pytrace dump inside it"
                              % where, "other-root")
        if inside is None:
            raise AttachError("%s, and its interpreter (%s) is not one pytrace may run there; run "
                              "pytrace dump inside it" % (where, _printable(target.exe or "?")),
                              "other-root")
        if os.geteuid() != 0:
            raise AttachError("%s: reading its stacks from here means running its interpreter in that "
                              "root (chroot), which needs root; run pytrace dump inside it, or as root"
                              % where, "permission")

        def enter():
            os.fchdir(root_fd)
            os.chroot(".")
            os.chdir("/")

        return _run_unwinder(target, [inside], "%s in %s" % (inside, root), enter)
    finally:
        os.close(root_fd)


def _run_unwinder(target, exe, shown, preexec):
    """Run _UNWIND with the interpreter exe (an argv prefix); -> its threads."""
    try:
        r = subprocess.run(exe + ["-I", "-S", "-c", _UNWIND, str(target.pid)], capture_output=True,
                           text=True, timeout=60, preexec_fn=preexec, errors="replace")
    except FileNotFoundError:
        raise AttachError("%s exited" % describe(target), "exited") from None
    except (OSError, subprocess.SubprocessError) as e:
        raise AttachError("reading the stacks of %s through %s failed: %s"
                          % (describe(target), _printable(shown), e)) from None
    lines = r.stdout.strip().splitlines()
    try:
        answer = ast.literal_eval(lines[-1]) if lines else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        answer = None
    if not (isinstance(answer, tuple) and len(answer) >= 2 and answer[0] in ("ok", "error")):
        said = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        raise AttachError("reading the stacks of %s through %s failed: it gave no answer (%s)"
                          % (describe(target), _printable(shown), _printable(said[:300])))
    if answer[0] == "ok":
        return answer[1]
    if answer[1] == "PermissionError":
        raise permission_error(target, "read the stacks of")
    return _unwind_failed(target, "%s: %s" % (answer[1], answer[2] if len(answer) > 2 else ""))


def _unwind_failed(target, text):
    from .attach import alive
    if not alive(target):
        raise AttachError("%s exited" % describe(target), "exited")
    if "PyRuntime" in text or "debug offsets" in text:
        raise AttachError("%s is not a Python process (no Python %d.%d+ runtime found in its memory)"
                          % (describe(target), *MIN_VERSION), "not-python")
    raise AttachError("reading the stacks of %s failed: %s" % (describe(target), text))


def _thread_label(pid, tid):
    if tid == pid:
        return "MainThread"
    try:
        with open("/proc/%d/task/%d/comm" % (pid, tid)) as f:
            return f.read().strip()
    except OSError:
        return ""


def _thread_state(pid, tid):
    from . import _pytrace
    st = _pytrace.proc_stat(pid, tid)
    if st is None:
        return ""
    return "running" if st["state"] == "R" else "waiting"


def stacks_from_memory(target):
    threads = []
    for tid, frames in _unwind(target):
        threads.append({
            "tid": tid, "name": _thread_label(target.pid, tid), "state": _thread_state(target.pid, tid),
            "frames": ["%s (%s:%d)" % (_printable(fn), _printable(path), line) for fn, path, line in frames],
            "complete": True,
        })
    threads.sort(key=lambda t: (t["tid"] != target.pid, t["tid"]))
    return threads


# ---- from the segment -----------------------------------------------------------------

def _frame_line(frame):
    """One line of dump's output for a StackFrame (pytrace.profile)."""
    from .reader import SymbolKind
    if frame.kind == "span":
        return "%s (span)" % _printable(frame.name)
    if frame.symbol_kind == SymbolKind.PyFunction:
        return "%s (%s:%d)" % (_printable(frame.name), _printable(frame.file), frame.line)
    if frame.symbol_kind == SymbolKind.CFunction:
        return "%s (built-in)" % _printable(frame.name)
    return "<unknown function %d>" % frame.id


def stacks_from_segment(pid, wait=0.5):
    """-> (segment, hub, threads): hub is None (read directly), else the hub's pid (True
    when it cannot be told). A segment a hub holds is read through the
    hub: it serves a reader that joins late every thread's open frames as Frame records
    (the walk's own stacks), so those are complete. Raises OSError (no segment, or a
    reader that is not a hub holds it)."""
    return _read_segment(pid, wait)[:3]


def _read_segment(pid, wait=0.5):
    """stacks_from_segment's (segment, hub, threads), and the lines of the await graph."""
    from .profile import Profile
    from .reader import is_hub_client, open_reader

    # never released: nothing consumed; EBUSY (a hub holds it): through the hub
    reader = open_reader(str(pid), defer_release=True)
    hub = (_segment_holder(pid) or True) if is_hub_client(reader) else None
    # the aggregation's window is not used here: keep it to one slice
    prof = Profile(window=1.0, slice_seconds=1.0)
    deadline = time.monotonic() + wait
    got = False
    late = hub is not None       # a hub serves a late reader the stacks, not the task records
    try:
        while True:
            batch = reader.poll(1 << 20)
            if batch:
                got = True
                prof.feed_many(batch)     # messages the verifier refuses are skipped
                # a thread met mid-stream (a previous reader took its start): its tasks'
                # earlier records are gone too
                late = late or any(not t.complete for t in prof.stacks() if not t.ended)
            elif got and all(t.complete for t in prof.stacks() if not t.ended):
                break                     # (a hub's first answer may take a moment)
            if reader.finished or time.monotonic() >= deadline:
                break
            if not batch:
                time.sleep(0.01)
    finally:
        segment = getattr(reader, "segment", "") or ""     # a hub's: from the ProcessInfo it sent
        reader.close(unlink_if_finished=False)
    out = []
    for t in prof.stacks():
        if t.ended:
            continue
        out.append({"tid": t.os_tid, "name": _printable(t.name), "state": "",
                    "frames": [_frame_line(f) for f in reversed(t.frames)], "complete": bool(t.complete)})
    out.sort(key=lambda t: (t["tid"] != pid, t["tid"]))
    return segment, hub, out, await_graph(prof.tasks(), prof.tasks_summary(), late)


def _task_label(task):
    return "%s [%s] %s" % (_printable(task.name), _printable(task.coroutine), task.state)


def await_graph(tasks, summary, late=False):
    """The lines of dump's await graph: the tasks not yet done (pytrace.Profile.tasks(), the C
    core's picture of the stream at its end, i.e. at the dump) as a tree of who awaits whom,
    like `python -m asyncio pstree`: a task's children are the tasks it awaits, and what else
    it awaits (a sleep, a lock, I/O ...) is a leaf. A task awaited by several shows under each,
    its own awaits under one of them only; one that awaits a task of its own chain (a cycle)
    says so."""
    joined_late = "(the stream was joined late: a task that has not run since is not known)"
    if not summary["seen"] and late:
        return ["No asyncio task records in what dump read " + joined_late]
    if not summary["seen"]:
        return ["No asyncio task records in the stream (they are written on Python 3.12+ with C calls "
                "traced, while task records are on; or no task has run)."]
    by_id = {t.id: t for t in tasks}
    live = [t for t in tasks if t.state in ("pending", "running")]
    awaited = {a.task_id for t in live for a in t.awaits if a.task_id is not None}
    lines = ["Await graph: %d asyncio task%s not done, who awaits whom (%d done, cancelled or failed "
             "not shown)" % (len(live), "" if len(live) == 1 else "s", summary["seen"] - len(live))]
    if late:
        lines.append("    " + joined_late)
    if summary["malformed"]:
        lines.append("    (%d task records ignored as damage)" % summary["malformed"])
    shown = set()

    def kids_of(task, chain):
        """[((text, task to expand or None), last)] of what task awaits."""
        kids = []
        for a in task.awaits:
            child = by_id.get(a.task_id) if a.task_id is not None else None
            if a.task_id is None:
                kids.append(("%s: %s" % (a.kind, _printable(a.name)), None))
            elif child is None:
                kids.append(("task %s (not known)" % _printable(a.name), None))
            elif child.id in chain:
                kids.append(("%s (awaits its own awaiter: a cycle)" % _task_label(child), None))
            elif child.id in shown:
                kids.append(("%s (awaited elsewhere too: its awaits are shown there)" % _task_label(child), None))
            else:
                shown.add(child.id)     # each task's awaits are expanded once
                kids.append((_task_label(child), child))
        return [(k, i == len(kids) - 1) for i, k in enumerate(kids)]

    def tree(root):
        # depth-first without recursion: a chain of awaits may be longer than Python's stack
        lines.append(_task_label(root))
        shown.add(root.id)
        stack = [(iter(kids_of(root, {root.id})), "", {root.id})]
        while stack:
            kids, prefix, chain = stack[-1]
            item = next(kids, None)
            if item is None:
                stack.pop()
                continue
            (text, child), last = item
            lines.append(prefix + ("`-- " if last else "|-- ") + text)
            if child is not None:
                inner = chain | {child.id}
                stack.append((iter(kids_of(child, inner)), prefix + ("    " if last else "|   "), inner))

    # the tasks no live task awaits, then any not reached from them (awaited in a cycle only)
    for t in [t for t in live if t.id not in awaited] + [t for t in live if t.id in awaited]:
        if t.id not in shown:
            tree(t)
    return lines


def _segment_holder(pid):
    """The pid of the reader that holds pid's segment (its hub), or None."""
    try:
        from . import _pytrace
        for s in _pytrace.list_segments():
            if s.get("pid") == pid and s.get("alive") and s.get("consumer_pid"):
                return int(s["consumer_pid"])
    except (ImportError, OSError, ValueError, TypeError):
        pass
    return None


# ---- command line ---------------------------------------------------------------------

def _print(target, source, threads, tasks=None):
    head = "Process %d: %s" % (target.pid, _printable(target.cmdline or target.exe or "?"))
    print(head)
    print("Python %s; %s; innermost frame first" % (
        "%d.%d" % target.version if target.version else "?", source))
    for t in threads:
        state = " (%s)" % t["state"] if t.get("state") else ""
        print()
        print('Thread %d "%s"%s' % (t["tid"], t["name"], state))
        for line in t["frames"]:
            print("    " + line)
        if not t["complete"]:
            print("    ... older frames not known: a previous reader read the start of this "
                  "thread's stream, and it has not answered the request for its stack (it is "
                  "blocked, or its ring is full)")
        elif not t["frames"]:
            print("    (no Python frame)")
    if tasks:
        print()
        for line in tasks:
            print(line)


def main(argv=None):
    from .cmdline import ArgumentParser, UsageError
    p = ArgumentParser(prog="pytrace dump", usage="pytrace dump PID",
                description="Print every thread's current Python stack, innermost frame first: "
                            "from the job's pytrace segment when it is traced, else (Python 3.14+) "
                            "read from the process's memory; nothing is run in the process.")
    p.add_argument("pid", metavar="PID")
    ns = p.parse_args(argv)
    if not ns.pid.isdigit() or int(ns.pid) <= 0:
        raise UsageError("PID must be a process id, not %r" % ns.pid, "dump")
    pid = int(ns.pid)
    denied = None
    try:
        target = inspect_target(pid, "read the stacks of")
    except AttachError as e:
        if e.kind != "permission":
            _say(str(e))
            return 1
        from .attach import Target
        target, denied = Target(pid), e     # its segment may still be ours to read
    partial = busy = None
    try:
        segment = live_segment(pid)
    except ImportError:
        segment = None
    if segment:
        try:
            name, hub, threads, tasks = _read_segment(pid)
            source = "stacks from its pytrace segment %s" % _printable(name)
            if hub is not None:
                source += " through the hub that holds it%s" % (" (pid %d)" % hub if hub is not True else "")
            if all(t["complete"] for t in threads) or denied is not None:
                _print(target, source, threads, tasks)
                return 0
            partial = (source, threads, tasks)
        except OSError as e:
            busy = e                        # another reader holds it, or it just ended
    if denied is not None:
        _say(str(denied))
        return 1
    version = target.version
    if (version or sys.version_info[:2]) < MIN_VERSION:
        if partial is not None:
            _print(target, *partial)
            return 0
        if version is None:
            _say("%s is not a Python process (%s)" % (describe(target), _printable(target.exe or "?")))
            return 1
        if busy is not None:
            _say("cannot read the segment of %s: %s; reading the stacks of an untraced process "
                 "needs Python %d.%d+" % (describe(target), busy, *MIN_VERSION))
            return 1
        _say("%s runs Python %s and is not traced: dumping it needs Python %d.%d+ (or start it "
             "under pytrace: pytrace run script.py)"
             % (describe(target), "%d.%d" % version if version else "?", *MIN_VERSION))
        return 1
    try:
        threads = stacks_from_memory(target)
    except AttachError as e:
        if partial is not None:
            _say("reading its stacks from its memory failed (%s): what its segment tells" % e)
            _print(target, *partial)
            return 0
        _say(str(e))
        return 1
    # what the segment read first tells of the tasks (joined late: says so)
    _print(target, "stacks read from its memory (nothing runs in it)", threads, partial[2] if partial else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
