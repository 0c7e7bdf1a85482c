"""Build pytrace messages from Python values (flatbuffers Builder + the generated code).

For tests and benchmarks (it was pytrace.export.synthetic; nothing in the package uses
it): a scripted event list becomes the same size-prefixed FlatBuffers the reader
library hands out, so recordings can be made without a traced process.
"""

import struct

import flatbuffers

from pytrace.fb import EventChunk as _EC
from pytrace.fb import LostCount as _LC
from pytrace.fb import Message as _M
from pytrace.fb import ProcessInfo as _PI
from pytrace.fb import ProducerStatus as _PS
from pytrace.fb import Symbol as _S
from pytrace.fb import ThreadEnd as _TE
from pytrace.fb import ThreadStart as _TS

_EVENT = struct.Struct("<QIHBB")


def _finish(builder, body_type, body, process=0):
    _M.MessageStart(builder)
    _M.MessageAddBodyType(builder, body_type)
    _M.MessageAddBody(builder, body)
    if process:
        _M.MessageAddProcess(builder, process)   # Message.process: which process of a job
    root = _M.MessageEnd(builder)
    builder.FinishSizePrefixed(root, b"PYTR")
    return bytes(builder.Output())


def process_info(pid=1234, ppid=1, command_line="python demo.py", python_version="3.11.7",
                 segment="/pytrace-1234-0", ticks_per_second=1_000_000_000, base_ticks=0,
                 base_monotonic_ns=0, base_realtime_ns=0, drop_policy=1, ring_count=4,
                 ring_capacity_events=4096, process=0):
    b = flatbuffers.Builder(256)
    cl = b.CreateString(command_line)
    pv = b.CreateString(python_version)
    sg = b.CreateString(segment)
    _PI.ProcessInfoStart(b)
    _PI.ProcessInfoAddPid(b, pid)
    _PI.ProcessInfoAddPpid(b, ppid)
    _PI.ProcessInfoAddCommandLine(b, cl)
    _PI.ProcessInfoAddPythonVersion(b, pv)
    _PI.ProcessInfoAddSegment(b, sg)
    _PI.ProcessInfoAddAbiMajor(b, 1)
    _PI.ProcessInfoAddTicksPerSecond(b, ticks_per_second)
    _PI.ProcessInfoAddBaseTicks(b, base_ticks)
    _PI.ProcessInfoAddBaseMonotonicNs(b, base_monotonic_ns)
    _PI.ProcessInfoAddBaseRealtimeNs(b, base_realtime_ns)
    _PI.ProcessInfoAddRingCount(b, ring_count)
    _PI.ProcessInfoAddRingCapacityEvents(b, ring_capacity_events)
    _PI.ProcessInfoAddDropPolicy(b, drop_policy)
    return _finish(b, 1, _PI.ProcessInfoEnd(b), process)


def thread_start(thread, name="MainThread", os_tid=None, ticks=0, ring=0, process=0):
    b = flatbuffers.Builder(64)
    nm = b.CreateString(name)
    _TS.ThreadStartStart(b)
    _TS.ThreadStartAddThread(b, thread)
    _TS.ThreadStartAddRing(b, ring)
    _TS.ThreadStartAddOsTid(b, os_tid if os_tid is not None else 1000 + thread)
    _TS.ThreadStartAddName(b, nm)
    _TS.ThreadStartAddTicks(b, ticks)
    return _finish(b, 2, _TS.ThreadStartEnd(b), process)


def thread_end(thread, ticks, events_written=0, events_dropped=0, process=0):
    b = flatbuffers.Builder(64)
    _TE.ThreadEndStart(b)
    _TE.ThreadEndAddThread(b, thread)
    _TE.ThreadEndAddTicks(b, ticks)
    _TE.ThreadEndAddEventsWritten(b, events_written)
    _TE.ThreadEndAddEventsDropped(b, events_dropped)
    return _finish(b, 3, _TE.ThreadEndEnd(b), process)


def symbol(sid, name, file="demo.py", line=1, kind=0, profile_name=None, process=0):
    """profile_name None: the field is absent, as in recordings made before it existed."""
    b = flatbuffers.Builder(64)
    nm = b.CreateString(name)
    fl = b.CreateString(file)
    pn = b.CreateString(profile_name) if profile_name is not None else None
    _S.SymbolStart(b)
    _S.SymbolAddId(b, sid)
    _S.SymbolAddKind(b, kind)
    _S.SymbolAddName(b, nm)
    _S.SymbolAddFile(b, fl)
    _S.SymbolAddLine(b, line)
    if pn is not None:
        _S.SymbolAddProfileName(b, pn)
    return _finish(b, 4, _S.SymbolEnd(b), process)


def event_chunk(thread, events, first_event=0, process=0):
    """events: iterable of (ticks, id, kind) or (ticks, id, aux, kind, flags)."""
    events = [e if len(e) == 5 else (e[0], e[1], 0, e[2], 0) for e in events]
    b = flatbuffers.Builder(64 + 16 * len(events))
    _EC.EventChunkStartEventsVector(b, len(events))
    for ticks, sid, aux, kind, flags in reversed(events):
        b.Prep(8, 16)
        b.PrependUint8(flags)
        b.PrependUint8(kind)
        b.PrependUint16(aux)
        b.PrependUint32(sid)
        b.PrependUint64(ticks)
    vec = b.EndVector()
    _EC.EventChunkStart(b)
    _EC.EventChunkAddThread(b, thread)
    _EC.EventChunkAddFirstEvent(b, first_event)
    _EC.EventChunkAddEvents(b, vec)
    return _finish(b, 5, _EC.EventChunkEnd(b), process)


def lost_count(thread, dropped_total, process=0):
    b = flatbuffers.Builder(64)
    _LC.LostCountStart(b)
    _LC.LostCountAddThread(b, thread)
    _LC.LostCountAddDroppedTotal(b, dropped_total)
    return _finish(b, 6, _LC.LostCountEnd(b), process)


def producer_status(state=3, events_written=0, events_dropped=0, process=0):
    b = flatbuffers.Builder(64)
    _PS.ProducerStatusStart(b)
    _PS.ProducerStatusAddState(b, state)
    _PS.ProducerStatusAddEventsWritten(b, events_written)
    _PS.ProducerStatusAddEventsDropped(b, events_dropped)
    return _finish(b, 7, _PS.ProducerStatusEnd(b), process)
