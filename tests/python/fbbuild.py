"""Build schema messages with the flatc-generated Python builders (test input for the
decoder and the call tree, independent of the C builder)."""

import flatbuffers

from pytrace.fb import EventChunk as EC
from pytrace.fb import Message as M
from pytrace.fb import ProcessInfo as PI
from pytrace.fb import ProducerStatus as PS
from pytrace.fb import Symbol as S
from pytrace.fb import ThreadEnd as TE
from pytrace.fb import ThreadStart as TS
from pytrace.fb.Event import CreateEvent


def _finish(b, body_type, body):
    M.Start(b)
    M.AddBodyType(b, body_type)
    M.AddBody(b, body)
    b.FinishSizePrefixed(M.End(b), file_identifier=b"PYTR")
    return bytes(b.Output())


def symbol(sym_id, kind, name, file="", line=0):
    b = flatbuffers.Builder(64)
    n = b.CreateString(name)
    f = b.CreateString(file)
    S.Start(b)
    S.AddId(b, sym_id)
    S.AddKind(b, kind)
    S.AddName(b, n)
    S.AddFile(b, f)
    S.AddLine(b, line)
    return 4, _finish(b, 4, S.End(b))


def chunk(thread, first_event, events):
    """events: (ticks, id, aux, kind, flags) tuples."""
    b = flatbuffers.Builder(64 + 16 * len(events))
    EC.StartEventsVector(b, len(events))
    for ticks, sym_id, aux, kind, flags in reversed(events):
        CreateEvent(b, ticks, sym_id, aux, kind, flags)
    vec = b.EndVector()
    EC.Start(b)
    EC.AddThread(b, thread)
    EC.AddFirstEvent(b, first_event)
    EC.AddEvents(b, vec)
    return 5, _finish(b, 5, EC.End(b))


def process_info(pid, segment="/pytrace-1-0"):
    b = flatbuffers.Builder(128)
    seg = b.CreateString(segment)
    cmd = b.CreateString("python x.py")
    ver = b.CreateString("3.x")
    PI.Start(b)
    PI.AddPid(b, pid)
    PI.AddCommandLine(b, cmd)
    PI.AddPythonVersion(b, ver)
    PI.AddSegment(b, seg)
    PI.AddAbiMajor(b, 1)
    PI.AddTicksPerSecond(b, 1_000_000_000)
    PI.AddRingCount(b, 4)
    return 1, _finish(b, 1, PI.End(b))


def thread_start(thread, name="MainThread"):
    b = flatbuffers.Builder(64)
    n = b.CreateString(name)
    TS.Start(b)
    TS.AddThread(b, thread)
    TS.AddName(b, n)
    return 2, _finish(b, 2, TS.End(b))


def thread_end(thread, written, dropped=0):
    b = flatbuffers.Builder(64)
    TE.Start(b)
    TE.AddThread(b, thread)
    TE.AddEventsWritten(b, written)
    TE.AddEventsDropped(b, dropped)
    return 3, _finish(b, 3, TE.End(b))


def producer_status(state, written=0):
    b = flatbuffers.Builder(64)
    PS.Start(b)
    PS.AddState(b, state)
    PS.AddEventsWritten(b, written)
    return 7, _finish(b, 7, PS.End(b))
