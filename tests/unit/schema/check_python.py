"""tests/unit/schema: the flatc-generated Python readers read what our C builder
wrote (test_schema's sample file) and see every value the C test put in.

Usage: PYTHONPATH=<build>/python python3 check_python.py SAMPLES_FILE
"""
import struct
import sys

from pytrace.fb.Message import Message
from pytrace.fb.MessageBody import MessageBody
from pytrace.fb.ProcessInfo import ProcessInfo
from pytrace.fb.ThreadStart import ThreadStart
from pytrace.fb.ThreadEnd import ThreadEnd
from pytrace.fb.Symbol import Symbol
from pytrace.fb.EventChunk import EventChunk
from pytrace.fb.LostCount import LostCount
from pytrace.fb.ProducerStatus import ProducerStatus
from pytrace.fb.CompressedChunk import CompressedChunk
from pytrace.fb.Codec import Codec
from pytrace.fb.ClockKind import ClockKind
from pytrace.fb.ProducerState import ProducerState
from pytrace.fb.SymbolKind import SymbolKind


def messages(data):
    off = 0
    while off < len(data):
        (prefix,) = struct.unpack_from("<I", data, off)
        end = off + 4 + prefix
        assert end <= len(data), f"message at {off} runs past the end"
        buf = bytes(data[off:end])
        assert Message.MessageBufferHasIdentifier(buf, 0, size_prefixed=True), f"no PYTR at {off}"
        yield Message.GetRootAs(buf, 4)
        off = end


def body(msg, cls):
    table = msg.Body()
    assert table is not None, "message without body"
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    return obj


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    msgs = list(messages(data))
    assert [m.BodyType() for m in msgs] == [
        MessageBody.ProcessInfo, MessageBody.ThreadStart, MessageBody.ThreadEnd,
        MessageBody.Symbol, MessageBody.EventChunk, MessageBody.LostCount,
        MessageBody.ProducerStatus, MessageBody.EventChunk, MessageBody.CompressedChunk,
        MessageBody.ProcessInfo, MessageBody.EventChunk, MessageBody.Symbol,
    ], [m.BodyType() for m in msgs]
    # Message.process: untagged messages read 0, the tagged ones their process
    assert [m.Process() for m in msgs] == [0] * 9 + [3, 3, 0xFFFFFFFF], [m.Process() for m in msgs]

    p = body(msgs[0], ProcessInfo)
    assert p.Pid() == 4242 and p.Ppid() == 1
    assert p.CommandLine() == b'python3 -m app --x "y"', p.CommandLine()
    assert p.PythonVersion() == b"3.11.2"
    assert p.Segment() == b"/pytrace-4242-0"
    assert (p.AbiMajor(), p.AbiMinor(), p.Clock()) == (1, 0, ClockKind.Tsc)
    assert p.TicksPerSecond() == 2999999999 and p.BaseTicks() == 123456789
    assert p.BaseMonotonicNs() == 987654321 and p.BaseRealtimeNs() == 1700000000123456789
    assert p.RingCount() == 64 and p.RingCapacityEvents() == 131040 and p.DropPolicy() == 1

    t = body(msgs[1], ThreadStart)
    assert (t.Thread(), t.Ring(), t.OsTid(), t.Name(), t.Ticks()) == (7, 3, 99999, b"MainThread", 555)

    e = body(msgs[2], ThreadEnd)
    assert (e.Thread(), e.Ticks(), e.EventsWritten(), e.EventsDropped()) == (7, 777, 1000000, 12)

    s = body(msgs[3], Symbol)
    assert (s.Id(), s.Kind(), s.Line()) == (17, SymbolKind.PyFunction, 314)
    assert s.Name() == b"Klass.method" and s.File().decode("utf-8") == "/src/m\u00e9.py"
    assert s.ProfileName() == b"method", s.ProfileName()

    c = body(msgs[4], EventChunk)
    assert (c.Thread(), c.FirstEvent(), c.EventsLength()) == (7, 1024, 5)
    for i in range(5):
        ev = c.Events(i)
        assert (ev.Ticks(), ev.Id(), ev.Aux(), ev.Kind(), ev.Flags()) == (1000 + i, 17 + i, i * 3, 1 + i, i & 1), i

    lc = body(msgs[5], LostCount)
    assert (lc.Thread(), lc.DroppedTotal()) == (7, 4096)

    ps = body(msgs[6], ProducerStatus)
    assert ps.State() == ProducerState.Exited
    assert (ps.HeartbeatNs(), ps.EventsWritten(), ps.EventsDropped(), ps.HookErrors(),
            ps.SymbolsDropped(), ps.ThreadsUntraced(), ps.TracingDisplaced(),
            ps.EventsUntraced()) == (111, 222, 333, 444, 555, 666, 777, 888)

    c = body(msgs[7], EventChunk)
    assert (c.Thread(), c.FirstEvent(), c.EventsLength()) == (8, 0, 0)
    cc = body(msgs[8], CompressedChunk)
    assert (cc.Thread(), cc.FirstEvent(), cc.Count(), cc.Codec(), cc.RawBytes()) == (
        9, 4096, 5, Codec.ZstdDeltaShuffle, 80)
    assert bytes(cc.Data(i) for i in range(cc.DataLength())) == \
        b"\x28\xb5\x2f\xfd\x01\x02\x03"
    p = body(msgs[9], ProcessInfo)
    assert p.Pid() == 4242 and p.Segment() == b"/pytrace-4242-0" and p.DropPolicy() == 1
    c = body(msgs[10], EventChunk)
    assert (c.Thread(), c.FirstEvent(), c.EventsLength()) == (7, 1024, 5)
    assert (c.Events(4).Ticks(), c.Events(4).Id()) == (1004, 21)
    s = body(msgs[11], Symbol)
    assert s.Name() == b"Klass.method" and s.ProfileName() == b"method"
    print(f"python: {len(msgs)} messages read with every field as written")


if __name__ == "__main__":
    main(sys.argv[1])
