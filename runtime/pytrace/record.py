"""`pytrace record`: write a job's message stream to a recording file while it runs.

    pytrace record -o out.pytrace [options] -- python [flags] script.py [args...]
    pytrace record -o out.pytrace [options] -- python -m module [args...]
    pytrace record -o out.pytrace [options] -- python -c code [args...]
    pytrace record -o out.pytrace PID

The first forms run the program traced with policy wait (lossless by
default: the job waits when its ring is full; `--policy drop` lets it drop events
instead, and the recording then marks every gap), attaches to the child's segment
through the reader library, and writes every message it drains to the file as it
arrives (format: pytrace.recording).

The job is started traced (pytrace._job.start_job, as `pytrace top` and `web` start
theirs; pytrace._launch runs in it): tracing starts before the program imports anything,
and right after it starts the job reports its segment name on a pipe and waits (at most
--attach-timeout) until the recorder has attached. Without that handshake a short
job could exit, and unlink its segment, before the recorder found it, and the start
of any job would race the recorder's attach. The second form attaches to a running
traced job and records until it exits, Ctrl-C or --duration; the policy is the job's
own. A Python 3.14+ process that is not traced is attached first (pytrace.attach, with
this command's --policy and tracing options) and detached again at the end, unless it
exited.

Exit status: the program's exit status when it is not 0 (first form); else 0, 1 when
the recording could not be made, or 3 when it is incomplete (writing failed part way,
e.g. a full disk: the file keeps everything before and says what it lacks).
"""

import argparse
import os
import signal
import sys
import time

from . import _job
from .cmdline import ArgumentParser, UsageError, segment_default, start_options
from .reader import CAUGHT_UP_BYTES, find_hub_binary, open_reader, start_hub
from .recording import RecordingWriter

_POLICY_TEXT = {
    "wait": "recording lossless (policy wait): the job waits when the ring is full",
    "drop": "recording with drops (policy drop): when the ring is full the job drops events "
            "and the recording marks each gap",
}
from .fb.DropPolicy import DropPolicy as _DropPolicy  # noqa: E402 - the schema's numbers
from .fb.MessageBody import MessageBody as _Body  # noqa: E402

_MSG_PROCESS_INFO = _Body.ProcessInfo
_MSG_EVENT_CHUNK = _Body.EventChunk
_POLICY_WAIT = _DropPolicy.Wait
_POLL_MAX_EVENTS = 1 << 20


def _say(text):
    sys.stderr.write("pytrace record: %s\n" % text)
    sys.stderr.flush()


def _parser():
    p = ArgumentParser(
        prog="pytrace record",
        usage="pytrace record -o OUT [options] -- python script.py [args...]\n"
              "       pytrace record -o OUT [options] PID",
        description="Record a traced job to a file (read it with `pytrace export`).")
    p.add_argument("-o", "--output", required=True, help="recording file to write")
    p.add_argument("--policy", choices=("wait", "drop"), default="wait",
                   help="full ring: the job waits for the recorder (default, lossless) or drops "
                        "events (gaps are marked); for a new job only")
    p.add_argument("--no-c-calls", dest="c_calls", action="store_false",
                   help="do not record calls of C functions")
    p.add_argument("--torch", action="store_true",
                   help="record PyTorch's operators, autograd nodes and record_function labels as spans, nested under the Python calls that ran them (torch's ITT instrumentation)")
    p.add_argument("--include", action="append", metavar="MODULE_OR_PATH",
                   help="trace only these modules / path prefixes (repeatable)")
    p.add_argument("--exclude", action="append", metavar="MODULE_OR_PATH",
                   help="do not trace these modules / path prefixes (repeatable)")
    p.add_argument("--rings", type=int, default=0, metavar="N",
                   help="most threads traced at once (default %d; new job only); threads past "
                        "it run untraced and are counted" % segment_default("DEFAULT_RING_COUNT"))
    p.add_argument("--ring-size", type=float, default=0, metavar="MiB",
                   help="size of each ring in MiB (new job only)")
    p.add_argument("--no-hub", dest="hub", action="store_false",
                   help="read the job's segment directly instead of starting its hub (pytrace-hub) "
                        "that other readers (pytrace top, pytrace.Reader) can join; with a PID: "
                        "also when no hub holds it yet")
    p.add_argument("--no-subprocesses", dest="subprocesses", action="store_false",
                   help="new job: record only its own process (by default the hub also reads "
                        "every traced process the job starts, e.g. multiprocessing workers, and "
                        "the recording holds them all, each message tagged with its process)")
    p.add_argument("--attach-timeout", type=float, default=30.0, metavar="S",
                   help="how long to wait for the job's segment to appear (default 30)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="with a PID: stop recording after S seconds (a process attached by "
                        "record is detached then)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- python script.py args..., or the PID of a traced job")
    return p


class _Interrupts:
    """Counts Ctrl-C instead of dying: the recorder must drain and close the file."""

    def __init__(self):
        self.count = 0
        self._old = None

    def __enter__(self):
        self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.count += 1

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._old)


def _pid_not_traced(pid):
    """For `record PID`: why pid cannot be recorded at once (one line), or None if it may
    be a traced job (or one that is just starting to trace)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
            cmdline = " ".join(argv)
    except FileNotFoundError:
        return "no process %d (it has exited, or never was)" % pid
    except OSError:
        return None                     # not ours to read: let the attach say why
    from .attach import started_under_pytrace
    if started_under_pytrace(argv, pid):
        return None                     # started under pytrace: its segment may be on its way
    return ("pid %d is running but is not traced by pytrace; start it with `pytrace record -o "
            "OUT -- %s`" % (pid, cmdline[:80] or "python script.py"))


def _attach(target, child, timeout, auto_hub=False):
    """Attach to a segment (name or pid); retries until it exists. -> Reader or None.
    auto_hub: a running job no one reads gets a hub (reader.auto_hub) so others can join."""
    target_pid = child.pid if child is not None else int(target)
    from . import _pytrace
    if child is None:
        # A running job has its segment already: only one started under pytrace a moment
        # ago may still be on its way, so anything else is said at once, not after 30 s.
        try:
            return open_reader(str(target), defer_release=True, lossless=True,
                               start_hub_if_free=auto_hub)
        except OSError as e:
            import errno
            if e.errno != errno.ENOENT:
                _say("cannot record pid %d: %s" % (target_pid, e))
                return None
        why = _pid_not_traced(target_pid)
        if why is not None:
            _say(why)
            return None
        timeout = min(timeout, 5.0)
    deadline = time.monotonic() + timeout
    last_error = None
    delay = 0.001
    while True:
        try:
            # The ring advances only past what is written (reader.release() after each
            # flush): a recorder killed mid-way leaves the rest to the next reader. When a
            # hub holds the segment, the recorder reads through it (lossless under policy
            # wait: the hub stops draining while the recorder's queue is full).
            return open_reader(str(target), defer_release=True, lossless=True)
        except OSError as e:
            last_error = e
            import errno
            if e.errno == errno.EBUSY:
                _say("cannot attach to pid %d: another reader holds its segment (%s)" % (target_pid, e))
                return None
        exited = child is not None and child.poll() is not None
        if exited or time.monotonic() >= deadline:
            if exited:                      # one last try: the segment outlives the job
                try:
                    return open_reader(str(target), defer_release=True, lossless=True)
                except OSError as e:
                    last_error = e
            if exited:
                # it said why itself (a missing script, a bad option): no second guess here
                _say("the job exited (code %d) before tracing started; nothing was recorded"
                     % child.returncode)
            else:
                _say("no pytrace segment for pid %d after %.0f s: %s" % (target_pid, timeout,
                                                                        last_error))
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _attach_untraced(pid, args, interrupts):
    """record PID of a process that is not traced: attach to it (3.14+, pytrace.attach).
    -> pid (attached here), None (it is traced, or on its way), False (said why). A Ctrl-C
    meanwhile cancels the attach, or, once it is done, ends the recording at once."""
    from . import attach
    try:
        if attach.plan_for_reader(pid) != "attach":
            return None
        options = attach.start_options(args.c_calls, args.include, args.exclude, args.policy,
                                       args.rings, args.ring_size, torch=args.torch)
        result = attach.attach(pid, options, args.attach_timeout, say=_say,
                               cancelled=lambda: interrupts.count > 0)
    except attach.AttachError as e:
        _say(str(e))
        return False
    except Exception as e:  # noqa: BLE001 - a usage error of the options
        _say(str(e))
        return False
    _say("attached to pid %d (Python %s, %s, segment %s); recording until Ctrl-C%s or its exit, "
         "then detaching" % (pid, result.get("python"), result.get("hook"), result.get("segment"),
                             ", --duration" if args.duration is not None else ""))
    return pid


def _detach_and_drain(pid, reader, writer, child, interrupts, discarded):
    """Stop the tracing record started in pid, draining while the process gets to it, then
    read to the end of the session (stop() closes every open frame). -> died."""
    from . import attach

    def drain():
        try:
            batch = reader.poll(_POLL_MAX_EVENTS)
        except BrokenPipeError:
            return
        _write_batch(writer, batch, discarded)
        if batch:
            reader.release()

    try:
        result = attach.detach(pid, say=_say, tick=drain)
    except attach.AttachError as e:
        if e.kind in ("exited", "gone"):
            _say("pid %d exited before it was detached; the recording holds everything read" % pid)
            return False
        _say("%s; it is still traced: pytrace detach %d" % (e, pid))
        return False
    interrupts.count = 0                    # a new Ctrl-C stops the last drain
    died, _ = _record(reader, writer, child, interrupts, True, discarded,
                      until=time.monotonic() + 30.0)
    c = result.get("counters") or {}
    _say("detached from pid %d: it runs on untraced (%d events written while attached)"
         % (pid, c.get("events_written", 0)))
    return died


def _detach_quietly(pid):
    from . import attach
    try:
        attach.detach(pid, say=_say)
    except attach.AttachError as e:
        if e.kind not in ("exited", "gone"):
            _say("%s; it is still traced: pytrace detach %d" % (e, pid))


EXIT_INCOMPLETE = 3     # the recording lacks what could not be written (a full disk)


class _Discarded:
    """The write that failed (a full disk); the writer counts what came after."""
    error = None


def _write_batch(writer, batch, discarded):
    """Append a batch and flush it. A write that fails (disk full) ends writing: the
    file keeps every whole message before it, and the writer counts every message it
    is given from then on and records the count in the file itself (pytrace.recording,
    the loss slot), so the job is never held back by a recorder that cannot write."""
    for msg_type, data in batch:
        try:
            writer.append(data, msg_type)
        except OSError as e:
            _failed(writer, discarded, e)
    try:
        writer.flush()
    except OSError as e:
        _failed(writer, discarded, e)


def _failed(writer, discarded, e):
    if discarded.error is None:
        discarded.error = e
        _say("writing %s stopped after %d events: %s; the job goes on, what it does from now "
             "on is counted in the file, not recorded" % (writer.path, writer.events,
                                                          "the disk is full" if e.errno == 28
                                                          else (e.strerror or e)))


def _record(reader, writer, child, interrupts, pid_mode, discarded, until=None):
    """Drain reader into writer until the job is done. -> (died, stopped): stopped is
    "interrupt" (Ctrl-C), "duration" (monotonic time reached `until`) or False."""
    quiet_since = None
    announced = not pid_mode
    while True:
        try:
            batch = reader.poll(_POLL_MAX_EVENTS)
        except BrokenPipeError:
            return True, False
        size = 0
        for msg_type, data in batch:
            size += len(data)
        _write_batch(writer, batch, discarded)
        if batch:
            reader.release()                # written (or given up on): the job may reuse it
        for msg_type, data in batch:
            if msg_type == _MSG_PROCESS_INFO:
                policy = _policy_of(data)
                if policy is not None:
                    writer.set_lossless(policy == _POLICY_WAIT)
                    if not announced:
                        _say(_POLICY_TEXT["wait" if policy == _POLICY_WAIT else "drop"] + " (the job's setting)")
                        announced = True
        if reader.finished:
            return False, False
        now = time.monotonic()
        if interrupts.count >= (1 if pid_mode else 2):
            return False, "interrupt"
        if until is not None and now >= until:
            return False, "duration"
        if batch:
            quiet_since = None
            if size < CAUGHT_UP_BYTES:
                time.sleep(0.002)           # caught up: let the job run ahead (see reader.py)
            continue
        if child is not None and child.poll() is not None:
            # The job is gone but the reader has not seen it finish: give it a moment.
            quiet_since = quiet_since or now
            if now - quiet_since > 5.0:
                _say("the job exited but its segment did not report it; stopping")
                return True, False
        time.sleep(0.002)


def _policy_of(data):
    # the C parser: decoding with the generated tables would import the flatbuffers
    # package, and with it numpy where installed (80 ms of CPU beside the job)
    from . import _pytrace
    try:
        return _pytrace.message_drop_policy(data)
    except Exception:  # noqa: BLE001 - the file keeps the message either way
        return None


def _summary(reader, writer, path):
    from .losses import OTHER_LOSSES, describe, losses_of
    dropped = writer.lost_events        # every Lost record in the file
    other = {}
    missed = 0
    try:
        stats = reader.stats()
        # through a hub: the Lost records of the gaps this recorder had in the hub's queue
        # are not the job's drops; they are said apart
        missed = int(stats.get("events_missed", 0) or 0)
        dropped = max(dropped - missed, int(stats.get("producer_events_dropped", 0) or 0))
        other = losses_of(stats, OTHER_LOSSES)
    except Exception:  # noqa: BLE001 - the summary must not fail the recording
        pass
    _say("%d events written, %d events dropped, %d bytes, %s" % (
        writer.events, dropped, writer.bytes_written, path))
    if missed:
        _say("%d more events are not in the recording: the recorder fell behind the job's hub "
             "(policy drop; each gap is marked)" % missed)
    lost = describe(other, OTHER_LOSSES)
    if lost:
        _say("the job also lost: %s" % lost)


def main(argv=None):
    args = _parser().parse_args(argv)
    command = list(args.command)
    explicit = bool(command) and command[0] == "--"
    if explicit:
        command = command[1:]
    if not command:
        _say("give a command (pytrace record -o OUT -- python script.py) or a PID")
        return 2
    pid_mode = not explicit and len(command) == 1 and command[0].isdigit()
    path = args.output
    out_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        _say("cannot write %s: %s is not a writable directory; nothing was started" % (path, out_dir))
        return 2

    try:
        from . import _pytrace  # noqa: F401
    except ImportError as e:
        _say("the _pytrace extension is not available (%s); reinstall pytrace" % e)
        return 1

    if args.duration is not None and (not pid_mode or not args.duration > 0):
        _say("--duration S (S > 0) is for recording a running PID")
        return 2
    child = None
    attached = None                     # the pid record attached itself (detached at the end)
    if pid_mode:
        target_pid = int(command[0])
    else:
        try:
            interp, flags, target = _job.split_command(command)
        except ValueError as e:
            _say(str(e))
            return 2
        if not target:
            _say("nothing to run after the interpreter: give a script, -m module or -c code")
            return 2
        try:
            options = start_options(args, "record")
        except UsageError as e:
            _say(str(e))
            return 2
        _say(_POLICY_TEXT[args.policy])
        hook_dir = None
        if args.hub and args.subprocesses and find_hub_binary() is not None:
            # the hub reads the whole tree: its Python children (multiprocessing spawn
            # and forkserver, subprocess) are traced too, not only its fork children
            hook_dir = _job.subprocess_hook()
        else:
            # nothing would read a fork() child's segment (no hub, or --no-subprocesses):
            # it is not traced, rather than waiting on full rings (policy wait) for nobody
            options = dict(options, fork_children=False)
        try:
            child, segment, wait_w = _job.start_job(interp, flags, options, target,
                                                    timeout=args.attach_timeout,
                                                    subprocesses=hook_dir)
        except OSError as e:
            _say("cannot start %s: %s" % (interp, e))
            return 1
        target_pid = child.pid

    hub = None
    with _Interrupts() as interrupts:
        if child is not None:
            if segment and args.hub:
                # the job's hub: holds the segment, drains nothing before we joined
                try:
                    hub, _ = start_hub(segment, hold=1, subprocesses=args.subprocesses)
                except OSError as e:
                    _say("%s; reading the job directly (no other reader can follow it)" % e.strerror)
            try:
                reader = _attach(segment or target_pid, child, args.attach_timeout)
            finally:
                os.close(wait_w)     # lets the job go on, attached or not
        else:
            attached = _attach_untraced(target_pid, args, interrupts)
            if attached is False:
                return 1
            reader = _attach(target_pid, None, args.attach_timeout, auto_hub=args.hub)
        if reader is None:
            if attached:
                _detach_quietly(attached)
            return _finish_child(child, failed=True)
        try:
            writer = RecordingWriter(path, lossless=(not pid_mode and args.policy == "wait"),
                                     loss_slot=True)
        except OSError as e:
            _say("cannot write %s: %s" % (path, e))
            reader.close()
            return _finish_child(child, failed=True)
        died = stopped = damaged = False
        discarded = _Discarded()
        until = time.monotonic() + args.duration if args.duration is not None else None
        try:
            died, stopped = _record(reader, writer, child, interrupts, pid_mode, discarded, until)
            if attached and stopped:
                died = _detach_and_drain(attached, reader, writer, child, interrupts, discarded)
        except ConnectionResetError as e:
            # the hub let go of this recorder (stopped, or it could not keep it): the job
            # goes on, unrecorded from here; not its end
            _say("%s; the recording holds everything read before" % (e.strerror or e))
            damaged = True
        except OSError as e:
            # the segment itself is damaged (corrupt, or shrunk under us): the job may
            # well go on; say what happened, not that it ended
            _say("reading the segment stopped: %s" % (e.strerror or e))
            damaged = True
        finally:
            try:
                writer.close()
            except OSError:
                pass                        # said already; the file holds whole messages
            _summary(reader, writer, path)
            if discarded.error is not None:
                from .losses import unrecorded_text
                _say(unrecorded_text(path, writer.unrecorded_events, writer.unrecorded_messages,
                                     writer.write_errno or discarded.error.errno))
            if died:
                _say("the job ended without reporting its exit; the recording holds everything "
                     "it published")
            if stopped and not attached:
                _say("stopped by %s; the recording holds everything read so far"
                     % ("Ctrl-C" if stopped == "interrupt" else "--duration"))
            try:
                reader.close(unlink_if_finished=True)
            except Exception:  # noqa: BLE001
                pass
        _reap(hub)
        if discarded.error is not None:
            return _finish_child(child, failed=EXIT_INCOMPLETE)
        return _finish_child(child, failed=damaged and child is None)


def _reap(hub):
    """The job's hub ends once every reader has the job's end; do not leave it a zombie."""
    if hub is None:
        return
    try:
        hub.wait(timeout=15.0)
    except Exception:  # noqa: BLE001 - a hub still serving other readers goes on alone
        pass


def _finish_child(child, failed):
    """failed: False, True (exit 1) or an exit code, used when the job's is 0."""
    code = 0 if not failed else (1 if failed is True else failed)
    if child is None:
        return code
    while True:
        try:
            rc = child.wait()
            break
        except KeyboardInterrupt:
            continue
    if rc < 0:
        # The job died of a signal (an uncaught KeyboardInterrupt ends with SIGINT):
        # our parent sees the same death, as it would without pytrace in between.
        _die_like(-rc)
        rc = 128 - rc               # the signal's default action does not kill: a shell's code
    if code and rc == 0:
        return code
    return rc


def _die_like(signum):
    import signal
    if signum in (signal.SIGKILL, signal.SIGSTOP):
        os.kill(os.getpid(), signum)
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    try:
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    except (OSError, ValueError):
        return
    os.kill(os.getpid(), signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
