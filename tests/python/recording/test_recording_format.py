"""The recording file format: round trip, damage reporting, follow mode.

Built from synthetic messages (flatc-generated builders), so these run without a
traced process.
"""

import os
import struct
import threading
import time

import pytest

from pytrace import recording as rec
import synthetic as syn
from pytrace.reader import decode

pytestmark = pytest.mark.reading_side   # the recording format's readers (conftest.py)


def _messages():
    events = [(0, 1, 13), (10, 2, 1), (20, 3, 3), (25, 3, 4), (30, 2, 2)]
    return [
        syn.process_info(command_line="python demo.py --x", drop_policy=1),
        syn.thread_start(1, "MainThread"),
        syn.symbol(1, "<module>", "demo.py", 1),
        syn.symbol(2, "work", "demo.py", 5),
        syn.symbol(3, "builtins.len", "builtins", 0, kind=1),
        syn.event_chunk(1, events),
        syn.event_chunk(1, [(40, 2, 1), (50, 2, 2)], first_event=5),
        syn.thread_end(1, 60, events_written=7),
        syn.producer_status(state=3, events_written=7),
    ]


def _write(path, messages, lossless=True, finished=True, compress=True):
    w = rec.RecordingWriter(path, lossless=lossless, compress=compress)
    for m in messages:
        w.append(m)
    w.close(finished=finished)
    return w


@pytest.mark.parametrize("compress", [True, False])
def test_round_trip_keeps_bytes_order_and_alignment(tmp_path, compress):
    # chunks of fewer than 16 events are stored as they are, compression on or off;
    # the version says whether the file may hold compressed chunks
    path = tmp_path / "a.pytrace"
    msgs = _messages()
    w = _write(path, msgs, compress=compress)
    assert w.events == 7 and w.compressed_chunks == 0
    major = 2 if compress else 1
    raw = path.read_bytes()
    assert raw[:8] == b"PYTRREC\x00"
    assert struct.unpack_from("<HHI", raw, 8) == (major, rec.FORMAT_MINOR, rec.FLAG_LOSSLESS | rec.FLAG_FINISHED)
    assert len(raw) % 8 == 0
    r = rec.RecordingReader(path)
    got = list(r)
    assert [d for _, d in got] == msgs
    assert [t for t, _ in got] == [1, 2, 4, 4, 4, 5, 5, 3, 7]
    assert r.lossless and r.finished_flag and r.format_version == (major, rec.FORMAT_MINOR)
    # every message starts 8-aligned in the file
    off = rec.HEADER_BYTES
    for m in msgs:
        assert off % 8 == 0 and raw[off:off + len(m)] == m
        off += len(m) + (-len(m) & 7)
    decoded = list(rec.RecordingReader(path).messages())
    assert decoded[0].command_line == "python demo.py --x"
    assert decoded[5].count == 5 and [e[3] for e in decoded[5].iter_events()] == [13, 1, 3, 4, 2]


def test_reader_reads_with_plain_generated_code(tmp_path):
    """A reader in another language needs only the schema: this is the recipe of\n    docs/stream-format.md."""
    from pytrace.fb.Message import Message
    path = tmp_path / "a.pytrace"
    _write(path, _messages())
    data = path.read_bytes()
    off, types = 16, []
    while off < len(data):
        (size,) = struct.unpack_from("<I", data, off)
        msg = Message.GetRootAs(data, off + 4)        # size-prefixed: root after the prefix
        types.append(msg.BodyType())
        off += (4 + size + 7) & ~7
    assert types == [1, 2, 4, 4, 4, 5, 5, 3, 7]


def test_writer_rejects_non_messages(tmp_path):
    w = rec.RecordingWriter(tmp_path / "x.pytrace")
    with pytest.raises(ValueError):
        w.append(b"\x00" * 20)
    with pytest.raises(ValueError):
        w.append(struct.pack("<I", 100) + b"PYTRxxxx")
    w.close()


def _read_all(path, follow=False):
    """-> (messages read, error or None)"""
    got = []
    try:
        for t, d in rec.RecordingReader(path, follow=follow, timeout=0.5):
            got.append(d)
    except rec.RecordingError as e:
        return got, e
    return got, None


def test_truncation_at_every_offset(tmp_path):
    path = tmp_path / "a.pytrace"
    msgs = _messages()
    _write(path, msgs)
    full = path.read_bytes()
    ends, off = [], 16
    for m in msgs:
        ends.append(off + len(m))                 # end of message bytes
        off += len(m) + (-len(m) & 7)
    cut_path = tmp_path / "cut.pytrace"
    for cut in range(0, len(full)):
        cut_path.write_bytes(full[:cut])
        got, err = _read_all(cut_path)
        complete = sum(1 for e in ends if e <= cut)
        if cut < 16:
            assert err is not None and err.offset <= cut, cut
            assert got == []
            continue
        assert got == msgs[:complete], cut
        starts = [16] + [((e + 7) & ~7) for e in ends[:-1]]
        if cut in starts or (complete and ends[complete - 1] <= cut < ((ends[complete - 1] + 7) & ~7)):
            assert err is None, (cut, err)          # clean cut between messages (maybe without padding)
        else:
            assert err is not None, cut
            assert err.offset == starts[complete], (cut, err)
            assert "truncated" in err.reason or "size prefix" in err.reason


def test_flipped_bytes_never_crash_and_report_offset(tmp_path):
    path = tmp_path / "a.pytrace"
    msgs = _messages()
    _write(path, msgs)
    full = path.read_bytes()
    bad = tmp_path / "bad.pytrace"
    detected = 0
    prefixes, ends, off = set(), [], 16
    for m in msgs:
        prefixes.update(range(off, off + 4))
        off += len(m) + (-len(m) & 7)
        ends.append(off)
    for pos in range(len(full)):
        for mask in (0x01, 0x80, 0xFF):
            b = bytearray(full)
            b[pos] ^= mask
            bad.write_bytes(bytes(b))
            got, err = _read_all(bad)
            # Every message before the damaged one is read, unchanged. (A flipped
            # scalar inside a message verifies: the format has no checksum.)
            before = sum(1 for e in ends if e <= pos)
            assert len(got) >= before and got[:before] == msgs[:before], pos
            if err is not None:
                detected += 1
                if pos in prefixes:
                    # A damaged size prefix can only be noticed where the framing breaks.
                    assert 0 <= err.offset < len(full), (pos, err)
                else:
                    assert 0 <= err.offset <= pos, (pos, err)
            # Decoding what was accepted must not raise anything but ValueError.
            for d in got:
                try:
                    decode(0, d)
                except ValueError:
                    pass
    assert detected > len(full)      # most flips are caught by framing or verification


def test_bad_magic_and_version(tmp_path):
    path = tmp_path / "a.pytrace"
    _write(path, _messages())
    full = bytearray(path.read_bytes())
    bad = tmp_path / "b.pytrace"
    bad.write_bytes(b"NOTPYTR\x00" + full[8:])
    got, err = _read_all(bad)
    assert got == [] and err.offset == 0 and "magic" in err.reason
    v3 = bytearray(full)
    struct.pack_into("<H", v3, 8, 3)          # a major this pytrace does not know
    bad.write_bytes(bytes(v3))
    got, err = _read_all(bad)
    assert got == [] and err.offset == 8 and "unsupported recording format 3.%d" % rec.FORMAT_MINOR in err.reason
    assert "another version of pytrace" in err.reason
    minor = bytearray(full)
    struct.pack_into("<H", minor, 10, 7)      # a newer minor is accepted
    bad.write_bytes(bytes(minor))
    got, err = _read_all(bad)
    assert err is None and len(got) == len(_messages())


def test_verification_failures_are_reported(tmp_path):
    msgs = _messages()
    path = tmp_path / "v.pytrace"
    # wrong identifier in the third message
    broken = bytearray(msgs[2])
    broken[8:12] = b"XXXX"
    _write(path, msgs[:2])
    with open(path, "ab") as f:
        f.write(bytes(broken) + bytes(-len(broken) & 7))
    got, err = _read_all(path)
    assert got == msgs[:2] and "identifier" in err.reason
    # a string that runs off the message
    sym = bytearray(msgs[2])
    # the name string's length lives after its offset: corrupt every u32 until one is caught
    caught = 0
    for pos in range(12, len(sym) - 4, 4):
        s = bytearray(sym)
        struct.pack_into("<I", s, pos, 0x7FFFFFF0)
        path.write_bytes(b"")
        _write(path, msgs[:2])
        with open(path, "ab") as f:
            f.write(bytes(s) + bytes(-len(s) & 7))
        got, err = _read_all(path)
        assert got[:2] == msgs[:2]
        if err is not None:
            caught += 1
            assert err.offset == os.path.getsize(path) - len(s) - (-len(s) & 7)
    assert caught >= 3


def test_implausible_size_and_nonzero_padding(tmp_path):
    msgs = _messages()
    path = tmp_path / "s.pytrace"
    _write(path, msgs[:1])
    with open(path, "ab") as f:
        f.write(struct.pack("<I", 0xFFFFFFF0) + b"\0" * 12)
    got, err = _read_all(path)
    assert got == msgs[:1] and "implausible" in err.reason
    m = msgs[2]
    assert len(m) % 8                    # has padding
    _write(path, msgs[:1])
    with open(path, "ab") as f:
        f.write(m + b"\x01" + bytes((-len(m) & 7) - 1))
    got, err = _read_all(path)
    assert "padding" in err.reason and err.offset == 16 + len(msgs[0]) + (-len(msgs[0]) & 7)


def test_follow_reads_a_file_being_written(tmp_path):
    path = tmp_path / "live.pytrace"
    msgs = _messages()
    w = rec.RecordingWriter(path, lossless=True, buffer_bytes=0)
    got = []

    def follow():
        for _t, d in rec.RecordingReader(path, follow=True, timeout=10, interval=0.01):
            got.append(d)

    reader = threading.Thread(target=follow)
    reader.start()
    # Write byte-dribbles, including partial size prefixes and partial messages.
    raw = b"".join(m + bytes(-len(m) & 7) for m in msgs[:-1])
    f = open(path, "ab", buffering=0)
    for i in range(0, len(raw), 37):
        f.write(raw[i:i + 37])
        time.sleep(0.003)
    time.sleep(0.1)
    assert got == msgs[:-1]               # everything so far, still following
    assert reader.is_alive()
    f.write(msgs[-1] + bytes(-len(msgs[-1]) & 7))   # ProducerStatus Exited ends the stream
    f.close()
    reader.join(5)
    assert not reader.is_alive()
    assert got == msgs
    w.close()


def test_follow_stops_on_finished_flag_and_times_out(tmp_path):
    path = tmp_path / "f.pytrace"
    msgs = _messages()[:-1]                # no ProducerStatus Exited
    _write(path, msgs, finished=True)
    t0 = time.monotonic()
    r = rec.RecordingReader(path, follow=True, timeout=5)
    assert [d for _, d in r] == msgs and not r.timed_out
    assert time.monotonic() - t0 < 2
    _write(path, msgs, finished=False)
    r = rec.RecordingReader(path, follow=True, timeout=0.3)
    assert [d for _, d in r] == msgs and r.timed_out


def test_follow_waits_for_the_header(tmp_path):
    path = tmp_path / "h.pytrace"
    path.write_bytes(b"PYTR")
    msgs = _messages()

    def later():
        time.sleep(0.2)
        _write(path, msgs)

    t = threading.Thread(target=later)
    t.start()
    got = [d for _, d in rec.RecordingReader(path, follow=True, timeout=5, interval=0.01)]
    t.join()
    assert got == msgs
