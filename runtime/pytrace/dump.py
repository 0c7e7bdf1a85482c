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
   Used for an untraced process, and for a traced one whose segment another reader holds
   or where a thread has not answered the stack request (it is blocked). Lines are the
   current ones.

Anything older than 3.14 and not traced gets one line saying so.
"""

import ast
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

def _unwind(target):
    """-> [(os thread id, [(function, file, line), ...innermost first])]. Raises AttachError."""
    if target.version == sys.version_info[:2] or (target.version is None and sys.version_info >= MIN_VERSION):
        namespace = {"__name__": "pytrace_unwind"}
        exec(compile(_UNWIND, "<pytrace unwind>", "exec"), namespace)
        try:
            return namespace["main"](target.pid)
        except PermissionError:
            raise permission_error(target, "read the stacks of") from None
        except ImportError as e:
            raise AttachError("this Python has no remote unwinder (%s)" % e) from None
        except (OSError, RuntimeError, ValueError, UnicodeDecodeError) as e:
            return _unwind_failed(target, "%s: %s" % (type(e).__name__, e))
    if not target.runnable:
        raise AttachError("%s runs Python %d.%d (in %s): dump it with a pytrace installed for Python "
                          "%d.%d" % (describe(target), *target.version, target.embedded_in or target.exe,
                                     *target.version))
    try:
        r = subprocess.run([target.proc + "/exe", "-I", "-S", "-c", _UNWIND, str(target.pid)],
                           capture_output=True, text=True, timeout=60)
        answer = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    except FileNotFoundError:
        raise AttachError("%s exited" % describe(target), "exited") from None
    except (OSError, subprocess.SubprocessError, ValueError, SyntaxError, IndexError) as e:
        raise AttachError("reading the stacks of %s through %s failed: %s" % (describe(target), target.exe, e)) from None
    if answer[0] == "ok":
        return answer[1]
    if answer[1] == "PermissionError":
        raise permission_error(target, "read the stacks of")
    return _unwind_failed(target, "%s: %s" % (answer[1], answer[2]))


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
    try:
        with open("/proc/%d/task/%d/stat" % (pid, tid), "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""
    return "running" if state == "R" else "waiting"


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
    """-> (segment, threads). Raises OSError (no segment, or another reader holds it)."""
    from . import _pytrace
    from .profile import Profile

    reader = _pytrace.Reader(str(pid), defer_release=True)   # never released: nothing consumed
    segment = getattr(reader, "segment", "") or ""
    # the aggregation's window is not used here: keep it to one slice
    prof = Profile(window=1.0, slice_seconds=1.0)
    deadline = time.monotonic() + wait
    try:
        while True:
            batch = reader.poll(1 << 20)
            if batch:
                prof.feed_many(batch)     # messages the verifier refuses are skipped
            elif all(t.complete for t in prof.stacks() if not t.ended):
                break
            if reader.finished or time.monotonic() >= deadline:
                break
            if not batch:
                time.sleep(0.01)
    finally:
        reader.close(unlink_if_finished=False)
    out = []
    for t in prof.stacks():
        if t.ended:
            continue
        out.append({"tid": t.os_tid, "name": _printable(t.name), "state": "",
                    "frames": [_frame_line(f) for f in reversed(t.frames)], "complete": bool(t.complete)})
    out.sort(key=lambda t: (t["tid"] != pid, t["tid"]))
    return segment, out


# ---- command line ---------------------------------------------------------------------

def _print(target, source, threads):
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
            name, threads = stacks_from_segment(pid)
            source = "stacks from its pytrace segment %s" % _printable(name)
            if all(t["complete"] for t in threads) or denied is not None:
                _print(target, source, threads)
                return 0
            partial = (source, threads)
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
            _print(target, *partial)
            return 0
        _say(str(e))
        return 1
    _print(target, "stacks read from its memory (nothing runs in it)", threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
