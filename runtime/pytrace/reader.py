"""Reading a pytrace segment from Python.

`Reader(pid_or_segment)` attaches to a live segment (through the C reader library in
`pytrace._pytrace`) and yields the messages of schema/pytrace.fbs, decoded by the
flatc-generated code in `pytrace.fb`:

    with pytrace.Reader(1234, follow=True) as reader:
        for msg in reader:            # ProcessInfo, Symbol, EventChunk, ...
            ...
        # or: for msg_type, data in reader.raw(): ...   (size-prefixed FlatBuffers)

`decode(msg_type, data)` decodes one raw message later (e.g. from a recording).

Event chunks are decoded lazily: an `EventChunk` keeps its bytes and the position of
the events vector (found through the generated accessors); `chunk.events` is a list
of `Event` namedtuples and `chunk.iter_events()` yields plain tuples quickly.
"""

import enum
import struct
import time
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Optional

# The schema's numbers, from the flatc-generated code (never retyped here).
from .fb.ClockKind import ClockKind as _GenClockKind
from .fb.DropPolicy import DropPolicy as _GenDropPolicy
from .fb.EventFlags import EventFlags as _GenEventFlags
from .fb.EventKind import EventKind as _GenEventKind
from .fb.MessageBody import MessageBody as _GenMessageBody
from .fb.ProducerState import ProducerState as _GenProducerState
from .fb.SymbolKind import SymbolKind as _GenSymbolKind


__all__ = [
    "Reader", "decode", "decode_stream", "MsgType", "EventKind", "ProducerState",
    "SymbolKind", "Event", "ProcessInfo", "ThreadStart", "ThreadEnd", "Symbol",
    "EventChunk", "LostCount", "ProducerStatus", "EventFlags", "ClockKind", "DropPolicy",
    "FLAG_C_FUNCTION", "FLAG_THROWN", "FLAG_SYNTHETIC",
]


def _members(generated, rename=None, skip=()):
    """(name, value) pairs of a flatc-generated enum class, in value order."""
    rename = rename or {}
    pairs = [(rename.get(name, name), value) for name, value in vars(generated).items()
             if not name.startswith("_") and isinstance(value, int) and name not in skip]
    return sorted(pairs, key=lambda pair: pair[1])


def _enum(name, generated, doc, base=enum.IntEnum, **how):
    made = base(name, _members(generated, **how), module=__name__)
    made.__doc__ = doc
    return made


MsgType = _enum("MsgType", _GenMessageBody, "MessageBody union types (schema union MessageBody).",
                skip=("NONE",))
EventKind = _enum("EventKind", _GenEventKind, "Event.kind values (schema enum EventKind).",
                  rename={"None_": "NONE"})
EventFlags = _enum("EventFlags", _GenEventFlags, "Event.flags bits (schema enum EventFlags).",
                   base=enum.IntFlag)
ProducerState = _enum("ProducerState", _GenProducerState, "Producer states (schema enum ProducerState).")
SymbolKind = _enum("SymbolKind", _GenSymbolKind, "Symbol.kind values (schema enum SymbolKind).")
ClockKind = _enum("ClockKind", _GenClockKind, "ProcessInfo.clock values (schema enum ClockKind).")
DropPolicy = _enum("DropPolicy", _GenDropPolicy, "ProcessInfo.drop_policy values (schema enum DropPolicy).")

FLAG_C_FUNCTION = int(EventFlags.CFunction)
FLAG_THROWN = int(EventFlags.Thrown)
FLAG_SYNTHETIC = int(EventFlags.Synthetic)

EVENT_BYTES = 16
_EVENT = struct.Struct("<QIHBB")   # ticks, id, aux, kind, flags (schema struct Event)

Event = namedtuple("Event", "ticks id aux kind flags")
Event.__doc__ = ("One 16-byte record. For kind Lost the dropped count is id | aux << 32; for kind "
                 "CpuTime the thread's CPU time in ns modulo 2**48 is id | aux << 32.")


def _str(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def _opt_str(b):
    return b.decode("utf-8", "replace") if b is not None else None


@dataclass
class ProcessInfo:
    pid: int
    ppid: int
    command_line: str
    python_version: str
    segment: str
    abi_major: int
    abi_minor: int
    clock: int
    ticks_per_second: int
    base_ticks: int
    base_monotonic_ns: int
    base_realtime_ns: int
    ring_count: int
    ring_capacity_events: int
    drop_policy: int
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    role: str = None    # what the process is in its job, once known (it comes again with it); None: not known
    type = MsgType.ProcessInfo

    def ticks_to_ns(self, ticks):
        """Monotonic nanoseconds of a tick value."""
        tps = self.ticks_per_second or 1_000_000_000
        return (ticks - self.base_ticks) * 1_000_000_000 // tps + self.base_monotonic_ns


@dataclass
class ThreadStart:
    thread: int
    ring: int
    os_tid: int
    name: str
    ticks: int
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    type = MsgType.ThreadStart


@dataclass
class ThreadEnd:
    thread: int
    ticks: int
    events_written: int
    events_dropped: int
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    type = MsgType.ThreadEnd


@dataclass
class Symbol:
    id: int
    kind: int
    name: str
    file: str
    line: int
    profile_name: Optional[str] = None   # the name cProfile gives it; None in older recordings
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    type = MsgType.Symbol


@dataclass
class LostCount:
    thread: int
    dropped_total: int
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    type = MsgType.LostCount


@dataclass
class ProducerStatus:
    state: int
    heartbeat_ns: int
    events_written: int
    events_dropped: int
    hook_errors: int
    symbols_dropped: int
    threads_untraced: int = 0
    tracing_displaced: int = 0
    events_untraced: int = 0
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    # recording files only: what its writer read and could not write (a full disk)
    unrecorded_events: int = 0
    unrecorded_messages: int = 0
    unrecorded_errno: int = 0
    type = MsgType.ProducerStatus


@dataclass
class EventChunk:
    """A run of consecutive events of one thread.

    `data` is the message (size-prefixed FlatBuffer); the events are the `count`
    16-byte records at `events_offset`.
    """
    thread: int
    first_event: int
    count: int
    data: bytes = field(repr=False)
    events_offset: int = field(repr=False)
    process: int = 0    # Message.process: which process of a multi-process stream (0: the only one)
    type = MsgType.EventChunk

    def __len__(self):
        return self.count

    def events_view(self):
        """The events vector as a memoryview of count * 16 bytes."""
        start = self.events_offset
        return memoryview(self.data)[start:start + EVENT_BYTES * self.count]

    def iter_events(self):
        """(ticks, id, aux, kind, flags) tuples, without building namedtuples."""
        return _EVENT.iter_unpack(self.events_view())

    @property
    def events(self):
        """The events as a list of `Event` namedtuples (built on first use)."""
        cached = self.__dict__.get("_events")
        if cached is None:
            make = Event._make
            cached = [make(t) for t in self.iter_events()]
            self.__dict__["_events"] = cached
        return cached

    def event(self, index):
        if not 0 <= index < self.count:
            raise IndexError(index)
        return Event._make(_EVENT.unpack_from(self.data, self.events_offset + EVENT_BYTES * index))


# ---- decoding with the flatc-generated code ---------------------------------

_fb = None


def _gen():
    """Import the generated readers once (pytrace.fb, installed by the build)."""
    global _fb
    if _fb is None:
        from .fb import (EventChunk as _EC, LostCount as _LC, Message as _M,
                         ProcessInfo as _PI, ProducerStatus as _PS, Symbol as _S,
                         ThreadEnd as _TE, ThreadStart as _TS)
        _fb = {
            "Message": _M.Message,
            MsgType.ProcessInfo: _PI.ProcessInfo,
            MsgType.ThreadStart: _TS.ThreadStart,
            MsgType.ThreadEnd: _TE.ThreadEnd,
            MsgType.Symbol: _S.Symbol,
            MsgType.EventChunk: _EC.EventChunk,
            MsgType.LostCount: _LC.LostCount,
            MsgType.ProducerStatus: _PS.ProducerStatus,
        }
    return _fb


def _events_vector_start(table):
    """Byte position of events[0] in the buffer, through the generated accessors.

    EventChunk.Events(j) positions struct j at Vector(o) + 16 * j; Events(0) gives us
    the start without restating the vtable slot here.
    """
    first = table.Events(0)
    return first._tab.Pos if first is not None else 0


def decode(msg_type, data):
    """Decode one size-prefixed Message (bytes) into a dataclass of this module.

    msg_type is the MessageBody type the reader reported; it is checked against the
    one in the buffer. Raises ValueError on a message that does not decode.
    """
    gen = _gen()
    if len(data) < 12:
        raise ValueError("message of %d bytes is too short" % len(data))
    (size,) = struct.unpack_from("<I", data, 0)
    if size + 4 > len(data):
        raise ValueError("message size prefix %d exceeds the %d bytes given" % (size, len(data)))
    try:
        msg = gen["Message"].GetRootAs(data, 4)
        body_type = msg.BodyType()
        if msg_type and body_type != msg_type:
            raise ValueError("message type %d, but the buffer holds type %d" % (msg_type, body_type))
        cls = gen.get(body_type)
        body = msg.Body()
        if cls is None or body is None:
            raise ValueError("unknown message type %d" % body_type)
        t = cls()
        t.Init(body.Bytes, body.Pos)
        decoded = _DECODERS[body_type](t, data)
        decoded.process = msg.Process()
        return decoded
    except (struct.error, IndexError) as e:
        raise ValueError("corrupt message of type %d: %s" % (msg_type, e)) from None


def _d_process_info(t, data):
    return ProcessInfo(t.Pid(), t.Ppid(), _str(t.CommandLine()), _str(t.PythonVersion()),
                       _str(t.Segment()), t.AbiMajor(), t.AbiMinor(), t.Clock(),
                       t.TicksPerSecond(), t.BaseTicks(), t.BaseMonotonicNs(),
                       t.BaseRealtimeNs(), t.RingCount(), t.RingCapacityEvents(),
                       t.DropPolicy(), role=_str(t.Role()) if t.Role() is not None else None)


def _d_event_chunk(t, data):
    count = t.EventsLength()
    start = _events_vector_start(t) if count else 0
    if start + EVENT_BYTES * count > len(data):
        raise ValueError("event vector of %d events overruns the %d-byte message" % (count, len(data)))
    return EventChunk(t.Thread(), t.FirstEvent(), count, data, start)


_DECODERS = {
    MsgType.ProcessInfo: _d_process_info,
    MsgType.ThreadStart: lambda t, d: ThreadStart(t.Thread(), t.Ring(), t.OsTid(), _str(t.Name()), t.Ticks()),
    MsgType.ThreadEnd: lambda t, d: ThreadEnd(t.Thread(), t.Ticks(), t.EventsWritten(), t.EventsDropped()),
    MsgType.Symbol: lambda t, d: Symbol(t.Id(), t.Kind(), _str(t.Name()), _str(t.File()), t.Line(),
                                        _opt_str(t.ProfileName())),
    MsgType.EventChunk: _d_event_chunk,
    MsgType.LostCount: lambda t, d: LostCount(t.Thread(), t.DroppedTotal()),
    MsgType.ProducerStatus: lambda t, d: ProducerStatus(t.State(), t.HeartbeatNs(), t.EventsWritten(),
                                                        t.EventsDropped(), t.HookErrors(), t.SymbolsDropped(),
                                                        t.ThreadsUntraced(), t.TracingDisplaced(),
                                                        t.EventsUntraced(), 0, t.UnrecordedEvents(),
                                                        t.UnrecordedMessages(), t.UnrecordedErrno()),
}


def decode_stream(buf):
    """Split a concatenation of size-prefixed Messages (e.g. a recording's body) and
    yield decoded messages. Messages are 8-aligned if the writer padded them; a zero
    size prefix is skipped as padding."""
    view = bytes(buf)
    pos = 0
    while pos + 4 <= len(view):
        (size,) = struct.unpack_from("<I", view, pos)
        if size == 0:
            pos += 4
            continue
        data = view[pos:pos + 4 + size]
        msg = _gen()["Message"].GetRootAs(data, 4)
        yield decode(msg.BodyType(), data)
        pos += 4 + size


# ---- live reader ------------------------------------------------------------

def is_hub_client(handle):
    """True if handle (what open_reader returned) reads through a hub."""
    return type(handle).__name__ == "HubClient"


def open_reader(target, any_user=False, lock=True, hub=None, defer_release=False,
                lossless=False, start_hub_if_free=False):
    """The extension's reader of target: a _pytrace.Reader on the segment, or, when a
    hub holds the segment (or hub=True), a _pytrace.HubClient (the same methods).
    start_hub_if_free=True (and hub=None): a running job that no one reads gets a hub
    of its own (pytrace-hub --idle-exit, see auto_hub) and is read through it, so
    that other readers can join; hub=False: the segment directly, always.
    OSError with the segment's own words when neither works."""
    from . import _pytrace
    import errno
    if hub is None and start_hub_if_free and lock and not any_user:
        client = auto_hub(target, lossless=lossless)
        if client is not None:
            return client
    for attempt in range(3):
        if hub is not True:
            try:
                return _pytrace.Reader(target, any_user=any_user, lock=lock,
                                       defer_release=defer_release)
            except OSError as e:
                if hub is False or e.errno != errno.EBUSY or not lock:
                    raise
                busy = e
        else:
            busy = None
        try:
            return _pytrace.HubClient(target, lossless=lossless, any_user=any_user)
        except OSError as e:
            # a hub that let the segment go meanwhile (its last reader left): read
            # it directly, again; held by a plain reader: say so, as before
            if busy is not None and e.errno == errno.ENOENT and attempt < 2:
                continue
            if busy is not None and e.errno in (errno.ENXIO, errno.ENOENT):
                raise busy from None
            raise


def auto_hub(target, lossless=False):
    """Read target through a hub, starting one when its job runs and no one reads it
    (or joining the hub that holds it): a HubClient, or None when the job should be
    read directly instead (no such job, it has ended, it is not yours, another plain
    reader holds it, or pytrace-hub cannot start). The policy is the C one that
    pytrace-top follows (viewer/hub/autohub.h: _pytrace.start_auto_hub). Two readers
    that start a hub at the same moment both end up on the one that took the segment."""
    from . import _pytrace
    import errno
    try:
        return _pytrace.HubClient(str(target), lossless=lossless)
    except OSError as e:
        if e.errno not in (errno.ENOENT,):
            return None                 # held by a plain reader: the direct path says so
    hub = find_hub_binary()
    if hub is None:
        return None
    try:
        segment, _ = _pytrace.start_auto_hub(str(target), hub)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None                 # no running job of yours that no one reads
        segment = str(target)           # another reader's hub took it first, perhaps
    try:
        return _pytrace.HubClient(segment, lossless=lossless)
    except OSError:
        return None


def installed_program(name):
    """pytrace's program `name` (pytrace-hub, pytrace-top): the one pip installed next to
    this interpreter's scripts, else the one on PATH (None if absent)."""
    import os
    import shutil
    import sysconfig
    scripts = sysconfig.get_path("scripts")
    cand = os.path.join(scripts, name) if scripts else None
    if cand and os.access(cand, os.X_OK):
        return cand
    return shutil.which(name)


def find_hub_binary():
    """pytrace-hub next to this interpreter's scripts, else on PATH (None if absent)."""
    return installed_program("pytrace-hub")


def start_hub(target, hold=0, detach=False, timeout=10.0, stderr=None, subprocesses=False,
              wait=0, idle_exit=0):
    """Start pytrace-hub for target (a pid or segment name): -> (Popen, socket path).
    hold=N: it drains only once N readers joined (so they all get the job from its
    first event). subprocesses=True: it also reads every traced process of the job's
    tree, each message tagged with its process. The hub runs in its own session (a
    Ctrl-C of the caller's terminal does not cut the readers' stream short). detach=True
    (`pytrace hub PID`, whose hub outlives it): once it listens, the hub holds none of
    the caller's stdio (a caller whose output is read, `out=$(pytrace hub PID 2>&1)`,
    would wait for the job's end); its messages go to `proc.log` (the socket's path with
    .log, removed at its end when empty). OSError with one line when it cannot start or
    does not come up."""
    import subprocess
    from ._job import read_line
    binary = find_hub_binary()
    if binary is None:
        raise OSError(2, "pytrace-hub is not installed (pip install pytrace puts it next to python)")
    argv = [binary, "--quiet"]
    if hold:
        argv += ["--hold", str(int(hold))]
    if subprocesses:
        argv.append("--subprocesses")
    if wait:
        argv += ["--wait", str(wait)]
    if idle_exit:
        argv += ["--idle-exit", str(idle_exit)]
    if detach:
        argv.append("--detach")
        if stderr is None:
            stderr = subprocess.PIPE    # what it says before it detaches: read on failure below
    argv.append(str(target))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=stderr, start_new_session=True, close_fds=True)
    proc.log = None
    path = read_line(proc.stdout.fileno(), timeout)     # its socket's path, once it listens
    proc.stdout.close()
    if not path:
        try:
            proc.wait(timeout=1.0 if proc.poll() is None else 0)
        except subprocess.TimeoutExpired:
            proc.kill()
        said = ""
        if detach and proc.stderr is not None:
            said = proc.stderr.read().decode(errors="replace").strip().splitlines()
            said = ": " + said[-1] if said else ""
            proc.stderr.close()
        raise OSError(5, "pytrace-hub for %s did not start (exit code %s)%s" % (target, proc.poll(), said))
    if detach:
        if proc.stderr is not None:
            proc.stderr.close()
        proc.log = path[:-len(".sock")] + ".log" if path.endswith(".sock") else None
    return proc, path


_TERMINAL_STATES = (ProducerState.Stopped, ProducerState.Exited, ProducerState.Dead)

# A poll that brought less than this found the reader close behind the producer. Polling
# again at once would read the cache lines the producer is writing (and the chunk length
# it stores on every event) from the other core, which slows the traced program down:
# followers sleep `interval` first. A producer that outruns that gives bigger polls.
CAUGHT_UP_BYTES = 256 * 1024


class Reader:
    """A reader of one job (by pid, "/pytrace-<pid>-<seq>" or its name).

    It attaches to the segment itself when no one holds it; when a hub (pytrace-hub,
    started by `pytrace record`, `pytrace top -- ...` or `pytrace hub PID`) holds it,
    it reads through the hub instead (`via_hub`), so any number of readers can follow
    one job. hub=True: only through a hub; hub=False: only directly (OSError EBUSY when
    another reader holds the segment). Iterating
    yields decoded messages; `raw()` yields (msg_type, bytes). With follow=True the
    iteration keeps polling (sleeping `interval` seconds after a poll that found it
    caught up with the producer, see CAUGHT_UP_BYTES) until the producer stopped or
    exited and everything it published was read; without it, iteration ends at the
    first empty poll.
    """

    def __init__(self, pid_or_segment, any_user=False, follow=False, interval=0.002,
                 lock=True, hub=None):
        target = str(pid_or_segment)
        self.follow = follow
        self.interval = interval
        # a follower of a running job that no one reads starts the job's hub (so others
        # can join); a one-shot read (follow=False) takes what is there directly
        self._r = open_reader(target, any_user=any_user, lock=lock, hub=hub,
                              start_hub_if_free=follow)
        self.via_hub = is_hub_client(self._r)
        self.segment = getattr(self._r, "segment", "") or target
        self.events_read = 0
        self.producer_state = None      # last ProducerStatus.state seen in the stream

    # one poll -------------------------------------------------------------
    def poll(self, max_events=0):
        """Drain what is published now: a list of (msg_type, bytes). After a dead
        producer has been drained, raises BrokenPipeError; a reader the hub
        disconnected before the job's end raises ConnectionResetError."""
        return self._r.poll(max_events)

    @property
    def finished(self):
        return bool(self._r.finished)

    @property
    def error(self):
        return self._r.error

    @property
    def disconnected(self):
        """True once the hub closed this reader's stream before the job's end (it was
        stopped, or it could not keep this reader): poll and iteration raise
        ConnectionResetError ("disconnected from the hub ..."). Not the job's death:
        the job may still run, and a new Reader reads it again."""
        return bool(getattr(self._r, "disconnected", False))

    def stats(self):
        return self._r.stats()

    # iteration --------------------------------------------------------------
    def raw(self):
        """Yield (msg_type, size-prefixed FlatBuffer bytes)."""
        follow = self.follow
        while True:
            state = self._state() if follow else None
            try:
                batch = self._r.poll(0, self.interval) if self.via_hub and follow else self._r.poll(0)
            except BrokenPipeError:
                return          # producer died; everything it published was handed out
            if batch:
                size = 0
                for msg_type, data in batch:
                    size += len(data)
                    if msg_type == MsgType.ProducerStatus:
                        self._note_status(data)
                    yield msg_type, data
                if follow and size < CAUGHT_UP_BYTES and not self.via_hub:
                    time.sleep(self.interval)   # caught up: let the producer run ahead
                continue
            if self._r.finished or not follow:
                return
            # Both states were read before this empty poll, so nothing more will come.
            # (Through a hub the end is the hub closing the stream: `finished`.)
            if not self.via_hub and (state in _TERMINAL_STATES
                                     or self.producer_state in _TERMINAL_STATES):
                return
            if not self.via_hub:            # a hub's poll waited for it already
                time.sleep(self.interval)

    def _note_status(self, data):
        try:
            self.producer_state = decode(MsgType.ProducerStatus, data).state
        except ValueError:
            pass

    def _state(self):
        try:
            st = self._r.stats()
        except Exception:  # noqa: BLE001 - a stats failure must not end the stream
            return None
        value = st.get("producer_state") if isinstance(st, dict) else None
        try:
            return ProducerState(value)
        except ValueError:              # absent, or a state this version does not know
            return None

    def __iter__(self):
        for msg_type, data in self.raw():
            msg = decode(msg_type, data)
            if msg_type == MsgType.EventChunk:
                self.events_read += msg.count
            yield msg

    # lifetime -------------------------------------------------------------
    def close(self, unlink_if_finished=True):
        """Detach. A finished segment (the job exited and everything was read) is
        removed unless unlink_if_finished=False: no other reader can use it."""
        if self._r is not None:
            self._r.close(unlink_if_finished=unlink_if_finished)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<pytrace.Reader %s>" % self.segment
