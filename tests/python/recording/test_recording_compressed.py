"""Recording format 2.0: EventChunks compressed by chunk (CompressedChunk, zstd after
delta+shuffle), read back byte for byte; format 1.0 files of earlier pytrace stay
readable; damage inside a compressed chunk is reported at its offset with everything
before it kept; a compressed file is followed while it is written.

The recordings are made by `pytrace record` of real jobs; the independent decoder
below uses only the flatc-generated readers and the zstd tool (libzstd's own CLI).
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading

import pytest

from pytrace import recording as rec
from pytrace.fb.CompressedChunk import CompressedChunk
from pytrace.fb.Codec import Codec
from pytrace.fb.EventChunk import EventChunk
from pytrace.fb.Message import Message
from pytrace.fb.MessageBody import MessageBody

from helpers import PY

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "format-1.0.pytrace")

JOB = """
import threading
def leaf(i):
    return i * 2
def work(n):
    t = 0
    for i in range(n):
        t += leaf(i)
    return t
th = threading.Thread(target=work, args=(40000,), name="side")
th.start()
work(60000)
th.join()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("zrec")
    (d / "job.py").write_text(JOB)
    out = d / "job.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "--no-c-calls", "-o", str(out), "--", PY,
                        str(d / "job.py")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def _file_messages(data):
    """(offset, type, bytes) of every message of a recording, read with nothing but the
    format's framing and the flatc-generated Message reader."""
    out, off = [], rec.HEADER_BYTES
    while off + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, off)
        buf = bytes(data[off:off + 4 + size])
        out.append((off, Message.GetRootAs(buf, 4).BodyType(), buf))
        off += (4 + size + 7) & ~7
    return out


def _unshuffle(planes, count):
    """The inverse of codec ZstdDeltaShuffle's transform, as its schema comment says."""
    records = bytearray(16 * count)
    for b in range(16):
        records[b::16] = planes[b * count:(b + 1) * count]
    ticks = 0
    for i in range(count):
        (delta,) = struct.unpack_from("<Q", records, 16 * i)
        ticks = (ticks + delta) & (2**64 - 1)
        struct.pack_into("<Q", records, 16 * i, ticks)
    return bytes(records)


def _body(buf, cls):
    msg = Message.GetRootAs(buf, 4)
    t = cls()
    t.Init(msg.Body().Bytes, msg.Body().Pos)
    return t


def _events_of_chunk(buf):
    c = _body(buf, EventChunk)
    if not c.EventsLength():
        return c.Thread(), c.FirstEvent(), b""
    start = c.Events(0)._tab.Pos
    return c.Thread(), c.FirstEvent(), bytes(buf[start:start + 16 * c.EventsLength()])


def test_record_writes_format_2_with_compressed_chunks_read_back_byte_for_byte(recorded, tmp_path):
    data = recorded.read_bytes()
    assert struct.unpack_from("<8sHH", data, 0) == (rec.MAGIC, 2, rec.FORMAT_MINOR)
    r = rec.RecordingReader(recorded)
    got = list(r)
    assert r.format_version == (2, rec.FORMAT_MINOR)
    assert r.compressed_chunks > 0
    events = sum(len(_events_of_chunk(d)[2]) // 16 for t, d in got if t == MessageBody.EventChunk)
    assert events > 200000
    # nothing but EventChunks in the reader's hands, and no CompressedChunk
    assert MessageBody.CompressedChunk not in {t for t, _ in got}
    # the same messages written without compression (format 1.0: every message as
    # given) read back identical, and the compressed file is at least 4x smaller
    plain = tmp_path / "plain.pytrace"
    w = rec.RecordingWriter(plain, compress=False)
    for t, d in got:
        w.append(d, t)
    w.close()
    assert w.compressed_chunks == 0 and w.format_version == (1, rec.FORMAT_MINOR)
    assert [m for m in rec.RecordingReader(plain)] == got
    assert os.path.getsize(plain) >= 4 * len(data), (os.path.getsize(plain), len(data))
    # and written again with compression: the same file size class, the same messages
    again = tmp_path / "again.pytrace"
    w = rec.RecordingWriter(again)
    for t, d in got:
        w.append(d, t)
    w.close()
    assert w.compressed_chunks == r.compressed_chunks
    assert w.plain_bytes == os.path.getsize(plain)
    assert w.bytes_written == os.path.getsize(again)
    assert list(rec.RecordingReader(again)) == got


@pytest.mark.skipif(shutil.which("zstd") is None, reason="the zstd tool is not installed")
def test_any_flatc_reader_plus_zstd_reads_a_compressed_file(recorded):
    # The file is messages of the one schema: a CompressedChunk decodes with the
    # flatc-generated reader, its data decompresses with the zstd tool, and the
    # transform undone gives exactly the events our reader hands out.
    ours = [_events_of_chunk(d) for t, d in rec.RecordingReader(recorded) if t == MessageBody.EventChunk]
    theirs = []
    compressed = 0
    for _off, t, buf in _file_messages(recorded.read_bytes()):
        if t == MessageBody.EventChunk:
            theirs.append(_events_of_chunk(buf))
        elif t == MessageBody.CompressedChunk:
            c = _body(buf, CompressedChunk)
            assert c.Codec() == Codec.ZstdDeltaShuffle and c.RawBytes() == 16 * c.Count()
            start = c._tab.Vector(c._tab.Offset(14))        # field 5: data
            frame = bytes(buf[start:start + c.DataLength()])
            planes = subprocess.run(["zstd", "-d", "-c", "-q"], input=frame, capture_output=True,
                                    check=True).stdout
            assert len(planes) == c.RawBytes()
            theirs.append((c.Thread(), c.FirstEvent(), _unshuffle(planes, c.Count())))
            compressed += 1
    assert compressed > 0
    assert theirs == ours


def test_format_1_0_file_of_earlier_pytrace_reads_as_it_did():
    # tests/python/recording/fixtures/format-1.0.pytrace was written by `pytrace record` before
    # format 2.0; format-1.0.json holds what the 1.0 reader handed out for it.
    want = json.load(open(os.path.join(HERE, "fixtures", "format-1.0.json")))
    r = rec.RecordingReader(FIXTURE)
    got = [[t, len(d), hashlib.sha256(d).hexdigest()] for t, d in r]
    assert got == want["messages"]
    assert list(r.format_version) == want["format_version"] and r.flags == want["flags"]
    assert r.compressed_chunks == 0
    names = {m.name for m in rec.RecordingReader(FIXTURE).messages() if hasattr(m, "name") and
             hasattr(m, "file")}
    assert {"leaf", "mid", "worker"} <= names
    # pytrace-top --file reads it with the same C reader
    top = shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")
    out = subprocess.run([top, "--file", FIXTURE, "--once", "--json"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    funcs = {f["name"] for f in json.loads(out.stdout)["functions"]}
    assert {"leaf", "mid"} <= funcs, funcs


def _first_compressed(data):
    for i, (off, t, buf) in enumerate(_file_messages(data)):
        if t == MessageBody.CompressedChunk:
            c = _body(buf, CompressedChunk)
            return i, off, buf, c
    raise AssertionError("no compressed chunk")


def _read_until_error(path):
    got = []
    try:
        for item in rec.RecordingReader(path):
            got.append(item)
    except rec.RecordingError as e:
        return got, e
    return got, None


def test_damage_in_a_compressed_chunk_is_reported_at_its_offset(recorded, tmp_path):
    good = recorded.read_bytes()
    whole = list(rec.RecordingReader(recorded))
    index, off, buf, c = _first_compressed(good)
    data_at = off + c._tab.Vector(c._tab.Offset(14))      # file offset of the frame
    bad = tmp_path / "bad.pytrace"
    cases = {
        "bad zstd frame": lambda b: b.__setitem__(data_at, b[data_at] ^ 0xFF),
        # the frame's last 4 bytes are the checksum of its content: one flipped bit there
        # is always caught (a flip inside the body can hit a bit the decoder never uses,
        # see test_damage_in_a_frame_body_never_yields_other_events)
        "damaged checksum": lambda b: b.__setitem__(data_at + c.DataLength() - 2,
                                                    b[data_at + c.DataLength() - 2] ^ 0x10),
        "raw_bytes lies": lambda b: struct.pack_into(
            "<I", b, off + c._tab.Pos + c._tab.Offset(12), c.RawBytes() + 16),
        "count lies": lambda b: struct.pack_into(
            "<I", b, off + c._tab.Pos + c._tab.Offset(8), c.Count() - 1),
    }
    for name, damage in cases.items():
        b = bytearray(good)
        damage(b)
        bad.write_bytes(bytes(b))
        got, err = _read_until_error(bad)
        assert err is not None, name
        assert err.offset == off, (name, err)
        assert "compressed chunk" in err.reason, (name, err.reason)
        assert got == whole[:index], name                    # everything before it, intact


def test_damage_in_a_frame_body_never_yields_other_events(recorded, tmp_path):
    # One flipped bit at each of 64 places in a frame's body: the reader either reports the
    # chunk as damaged at its offset, or (a bit the zstd decoder does not use, such as
    # padding) hands out exactly the events that were written. Never other events.
    good = recorded.read_bytes()
    whole = list(rec.RecordingReader(recorded))
    index, off, buf, c = _first_compressed(good)
    data_at = off + c._tab.Vector(c._tab.Offset(14))
    body = range(6, c.DataLength() - 4)  # past the frame header, before the checksum
    step = max(1, len(body) // 64)
    bad = tmp_path / "bad.pytrace"
    reported = 0
    for at in body[::step]:
        b = bytearray(good)
        b[data_at + at] ^= 0x10
        bad.write_bytes(bytes(b))
        got, err = _read_until_error(bad)
        if err is None:
            assert got == whole, at
            continue
        reported += 1
        assert err.offset == off and "compressed chunk" in err.reason, (at, err)
        assert got == whole[:index], at
    assert reported > 0


def test_truncated_compressed_file(recorded, tmp_path):
    good = recorded.read_bytes()
    whole = list(rec.RecordingReader(recorded))
    index, off, buf, c = _first_compressed(good)
    cut = tmp_path / "cut.pytrace"
    for at in (off + 3, off + 40, off + len(buf) // 2, off + len(buf) - 1):
        b = bytearray(good[:at])
        struct.pack_into("<I", b, 12, 0)          # not FINISHED, as a killed recorder leaves it
        cut.write_bytes(bytes(b))
        got, err = _read_until_error(cut)
        assert err is not None and err.offset == off, (at, err)
        assert "truncated" in err.reason and "never closed by its writer" in err.reason, err.reason
        assert got == whole[:index]


def test_follow_a_compressed_file_while_it_is_written(recorded, tmp_path):
    whole = list(rec.RecordingReader(recorded))
    assert any(t == MessageBody.ProducerStatus for t, _ in whole)
    path = tmp_path / "live.pytrace"
    w = rec.RecordingWriter(path)
    appended = threading.Event()
    read = []

    def follow():
        r = rec.RecordingReader(path, follow=True, timeout=60, interval=0.005)
        for i, item in enumerate(r):
            read.append(item)
            if i == 0:
                appended.set()

    t = threading.Thread(target=follow)
    t.start()
    # one message per flush: the follower sees compressed chunks arrive one by one
    for i, (msg_type, data) in enumerate(whole):
        w.append(data, msg_type)
        w.flush()
        if i == 0:
            assert appended.wait(60)
    compressed = w.compressed_chunks
    w.close(finished=False)      # the ProducerStatus Exited ends the follow, not the flag
    t.join(120)
    assert not t.is_alive()
    assert compressed > 0
    assert read == whole
