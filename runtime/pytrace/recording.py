"""pytrace recording files: the reader's message stream, kept on disk.

File format (version 1.0)
=========================

All integers are little-endian.

Header, 16 bytes at offset 0::

    offset size  field
         0    8  magic          b"PYTRREC\\x00"
         8    2  format major   1   (a reader refuses any other major)
        10    2  format minor   0   (a reader accepts any minor of its major)
        12    4  flags          bit 0  LOSSLESS: recorded with ring policy "wait"
                                       (no event was dropped on purpose)
                                bit 1  FINISHED: set by the writer when it closed the
                                       file normally; nothing will be appended
                                other bits: zero, ignored by readers

Messages follow from offset 16, back to back. Each message is exactly the bytes the
reader library handed out: a size-prefixed FlatBuffer of schema/pytrace.fbs (root
``Message``, file identifier ``"PYTR"`` at bytes 8..11 of the message), i.e. a u32
size prefix S followed by S bytes. It is followed by zero bytes up to the next multiple
of 8 (the padding is not counted in S), so every message starts 8-aligned in the file
and can be read in place with the alignment the FlatBuffers verifier expects::

    [u32 S][S bytes of FlatBuffer][0..7 zero bytes]   repeated

The stream order is the reader's: ProcessInfo first; a Symbol before any EventChunk
that uses its id; a thread's ThreadStart before its events and ThreadEnd after them;
ProducerStatus whenever the producer state changes (Exited last in a complete job).
A reader in any language needs only the schema: skip 16 bytes, then repeatedly read
S, hand bytes [off, off + 4 + S) to the generated ``Message`` reader as a
size-prefixed buffer, and advance by 4 + S rounded up to 8.

Damage
------
`RecordingReader` yields everything before the first damaged byte and then raises
`RecordingError`, whose ``offset`` is the file offset of the damage and whose message
says what is wrong: bad magic, unsupported version, a file that ends inside a message
(truncation; in a file its writer never closed, as a killed recorder leaves it, the
message says so), an implausible size, non-zero padding, or a
message that fails verification (identifier, offsets, vtables, strings and vectors
bounds-checked the way the stock FlatBuffers verifier does, then decoded with the
flatc-generated code; any decoding exception is wrapped).

Follow mode
-----------
``RecordingReader(path, follow=True)`` reads a file that is still being written: a
missing header, a short size prefix or a message whose bytes are not all there yet
means "not written yet": it waits and reads again. It stops at end of file once it has
read a ProducerStatus with state Exited or Dead, or the header's FINISHED flag is set,
or when nothing new arrived for ``timeout`` seconds (then ``timed_out`` is True).
"""

import os
import struct
import time

__all__ = [
    "MAGIC", "FORMAT_MAJOR", "FORMAT_MINOR", "HEADER_BYTES", "FLAG_LOSSLESS",
    "FLAG_FINISHED", "RecordingError", "RecordingWriter", "RecordingReader",
    "verify_message", "read_header",
]

MAGIC = b"PYTRREC\x00"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
HEADER_BYTES = 16
FLAG_LOSSLESS = 0x1
FLAG_FINISHED = 0x2
_HEADER = struct.Struct("<8sHHI")
_FLAGS_OFFSET = 12

# Largest message we accept: a ring chunk is at most 16 MiB (shm/layout.h
# PT_MAX_CHUNK_BYTES); anything far bigger is a damaged size prefix.
MAX_MESSAGE_BYTES = 64 << 20
_IDENTIFIER = b"PYTR"
_ZEROS = bytes(8)

# Message types (schema union MessageBody) and the states that end a stream.
_MSG_EVENT_CHUNK = 5
_MSG_PRODUCER_STATUS = 7
_STATE_EXITED = 3
_STATE_DEAD = 4


class RecordingError(Exception):
    """A recording is damaged. `offset` is the file offset of the damage, `reason` what
    is wrong; everything before `offset` was read and handed out."""

    def __init__(self, path, offset, reason):
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__("%s: damaged at byte offset %d: %s" % (path, offset, reason))


def _pad8(n):
    return -n & 7


# ---- verification -------------------------------------------------------------
#
# The stock FlatBuffers verifier is not available from Python, and the generated
# Python readers do no bounds checks (a wild offset may even wrap around through a
# negative index). So every message is first checked here the way the verifier
# checks it: root offset, identifier, vtables, fields inside their table, scalar
# alignment, strings (length in bounds, NUL-terminated) and vectors in bounds; then
# it is decoded with the flatc-generated code (pytrace.reader.decode).

_U8, _U16, _U32, _U64, _STR, _EVVEC = "u8", "u16", "u32", "u64", "str", "events"
_SIZE = {_U8: 1, _U16: 2, _U32: 4, _U64: 8, _STR: 4, _EVVEC: 4}

_BODY_FIELDS = {
    1: (_U64, _U64, _STR, _STR, _STR, _U16, _U16, _U8, _U64, _U64, _U64, _U64, _U32, _U64,
        _U8),                                               # ProcessInfo
    2: (_U64, _U32, _U64, _STR, _U64),                      # ThreadStart
    3: (_U64, _U64, _U64, _U64),                            # ThreadEnd
    4: (_U32, _U8, _STR, _STR, _U32, _STR),                 # Symbol
    5: (_U64, _U64, _EVVEC),                                # EventChunk
    6: (_U64, _U64),                                        # LostCount
    7: (_U8, _U64, _U64, _U64, _U64, _U64, _U64, _U64, _U64),  # ProducerStatus
}
_BODY_NAMES = {1: "ProcessInfo", 2: "ThreadStart", 3: "ThreadEnd", 4: "Symbol",
               5: "EventChunk", 6: "LostCount", 7: "ProducerStatus"}

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i32 = struct.Struct("<i").unpack_from


class _Bad(Exception):
    pass


def _table(buf, start, end, pos, nfields, what):
    """Check the table at pos; return (vtable pos, vtable size, table size)."""
    if pos & 3 or pos < start + 4 or pos + 4 > end:
        raise _Bad("%s table at +%d is outside the message or misaligned" % (what, pos - start))
    vt = pos - _i32(buf, pos)[0]
    if vt & 1 or vt < start + 4 or vt + 4 > end:
        raise _Bad("%s vtable at +%d is outside the message" % (what, vt - start))
    vt_size, tbl_size = _u16(buf, vt)[0], _u16(buf, vt + 2)[0]
    if vt_size < 4 or vt_size & 1 or vt + vt_size > end:
        raise _Bad("%s vtable size %d is invalid" % (what, vt_size))
    if tbl_size < 4 or pos + tbl_size > end:
        raise _Bad("%s table size %d runs past the message" % (what, tbl_size))
    return vt, vt_size, tbl_size


def _field(buf, start, vt, vt_size, tbl_size, pos, index, kind, what):
    """Position of field `index` (0 if absent), checked against its table."""
    slot = 4 + 2 * index
    if slot >= vt_size:
        return 0
    off = _u16(buf, vt + slot)[0]
    if off == 0:
        return 0
    size = _SIZE[kind]
    if off + size > tbl_size:
        raise _Bad("%s field %d runs past its table" % (what, index))
    fpos = pos + off
    if (fpos - start) & (size - 1):
        raise _Bad("%s field %d is misaligned" % (what, index))
    return fpos


def _verify_at(buf, start, end):
    """Verify the size-prefixed message occupying buf[start:end]; return its body type
    and, for an EventChunk, (vector start, count)."""
    root_base = start + 4                       # offsets are relative to the buffer after the prefix
    if end - root_base < 8:
        raise _Bad("message of %d bytes is too short" % (end - start))
    if buf[root_base + 4:root_base + 8] != _IDENTIFIER:
        raise _Bad("file identifier is %r, not %r" % (bytes(buf[root_base + 4:root_base + 8]), _IDENTIFIER))
    root = root_base + _u32(buf, root_base)[0]
    vt, vt_size, tbl_size = _table(buf, start, end, root, 2, "Message")
    type_pos = _field(buf, start, vt, vt_size, tbl_size, root, 0, _U8, "Message")
    body_type = buf[type_pos] if type_pos else 0
    fields = _BODY_FIELDS.get(body_type)
    if fields is None:
        raise _Bad("unknown message type %d" % body_type)
    name = _BODY_NAMES[body_type]
    body_ref = _field(buf, start, vt, vt_size, tbl_size, root, 1, _U32, "Message")
    if not body_ref:
        raise _Bad("%s message has no body" % name)
    body = body_ref + _u32(buf, body_ref)[0]
    bvt, bvt_size, btbl_size = _table(buf, start, end, body, len(fields), name)
    vector = None
    for index, kind in enumerate(fields):
        fpos = _field(buf, start, bvt, bvt_size, btbl_size, body, index, kind, name)
        if not fpos or kind not in (_STR, _EVVEC):
            continue
        target = fpos + _u32(buf, fpos)[0]
        if (target - start) & 3 or target + 4 > end:
            raise _Bad("%s field %d points outside the message" % (name, index))
        length = _u32(buf, target)[0]
        if kind == _STR:
            if target + 4 + length + 1 > end:
                raise _Bad("%s string field %d runs past the message" % (name, index))
            if buf[target + 4 + length] != 0:
                raise _Bad("%s string field %d is not NUL-terminated" % (name, index))
        else:
            if target + 4 + 16 * length > end:
                raise _Bad("%s events vector of %d events runs past the message" % (name, length))
            vector = (target + 4, length)
    return body_type, vector


def verify_message(data):
    """Verify one size-prefixed message (bytes). Returns its body type; raises
    ValueError saying what is wrong."""
    if len(data) < 4:
        raise ValueError("message of %d bytes is too short" % len(data))
    size = _u32(data, 0)[0]
    if size + 4 > len(data):
        raise ValueError("size prefix %d exceeds the %d bytes given" % (size, len(data)))
    try:
        return _verify_at(data, 0, 4 + size)[0]
    except _Bad as e:
        raise ValueError(str(e)) from None
    except (struct.error, IndexError) as e:  # a bound we did not anticipate
        raise ValueError("unreadable message: %s" % e) from None


def read_header(data):
    """Parse the 16-byte header: (major, minor, flags). Raises ValueError."""
    if len(data) < HEADER_BYTES:
        raise ValueError("file is shorter than the %d-byte header" % HEADER_BYTES)
    magic, major, minor, flags = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError("bad magic %r: not a pytrace recording" % magic)
    if major != FORMAT_MAJOR:
        raise ValueError("unsupported recording format %d.%d (this pytrace reads %d.x)"
                         % (major, minor, FORMAT_MAJOR))
    return major, minor, flags


# ---- writer -------------------------------------------------------------------

class RecordingWriter:
    """Appends reader messages to a recording file.

    ``append(data)`` takes one size-prefixed message as handed out by the reader
    (checked: size prefix and identifier) and writes it with its padding. ``flush()``
    pushes buffered bytes to the file so followers see them. ``close()`` flushes and,
    unless ``finished=False``, sets the FINISHED flag.

    The buffer is ours (not a BufferedWriter's) so that a write that fails part way
    (a full disk) is undone: ``flush`` then cuts the file back to the last whole message
    (``committed`` bytes) and raises; the file stays a readable recording.
    """

    def __init__(self, path, lossless=False, buffer_bytes=1 << 20):
        from . import _output
        self.path = os.fspath(path)
        # A new owner-only file, renamed over the path at once: a link planted at the
        # path is replaced, never written through, and a killed recorder still leaves
        # a readable recording where the user asked for it.
        self._f, tmp = _output.create(self.path, binary=True, buffering=0)
        try:
            _output.commit(tmp, self.path)
        except BaseException:
            self._f.close()
            _output.discard(tmp)
            raise
        self._fd = self._f.fileno()
        self._buf = bytearray()
        self._buffer_bytes = buffer_bytes
        self.flags = FLAG_LOSSLESS if lossless else 0
        self._buf += _HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, self.flags)
        self.bytes_written = HEADER_BYTES
        self.committed = 0       # bytes on file, all whole messages
        self._at_commit = (0, 0, 0)
        self.messages = 0
        self.events = 0
        self.lost_events = 0     # sum of the producer's Lost records
        try:
            self.flush()         # a follower sees a recording from the start
        except BaseException:
            self._f.close()
            raise

    def set_lossless(self, lossless):
        """Rewrite the LOSSLESS flag (e.g. once ProcessInfo told the policy)."""
        self._set_flags((self.flags | FLAG_LOSSLESS) if lossless else (self.flags & ~FLAG_LOSSLESS))

    def _set_flags(self, flags):
        self.flags = flags
        if self.committed >= HEADER_BYTES:
            os.pwrite(self._fd, struct.pack("<I", flags), _FLAGS_OFFSET)
        else:
            struct.pack_into("<I", self._buf, _FLAGS_OFFSET, flags)

    def append(self, data, msg_type=None):
        if len(data) < 12:
            raise ValueError("message of %d bytes is too short" % len(data))
        size = _u32(data, 0)[0]
        if size + 4 != len(data):
            raise ValueError("size prefix %d does not match the %d-byte message" % (size, len(data)))
        if data[8:12] != _IDENTIFIER:
            raise ValueError("message lacks the %r identifier" % _IDENTIFIER)
        buf = self._buf
        buf += data
        pad = _pad8(len(data))
        if pad:
            buf += _ZEROS[:pad]
        self.bytes_written += len(data) + pad
        self.messages += 1
        if msg_type is None or msg_type == _MSG_EVENT_CHUNK:
            self._count_events(data)
        if len(buf) >= self._buffer_bytes:
            self.flush()

    def _count_events(self, data):
        try:
            body_type, vector = _verify_at(data, 0, len(data))
        except (_Bad, struct.error, IndexError):
            return
        if body_type != _MSG_EVENT_CHUNK or vector is None:
            return
        start, count = vector
        self.events += count
        # Lost records (kind 12) carry the producer's drop count. The kind bytes are
        # sliced out in C (every 16th byte) so a clean chunk costs no Python loop.
        kinds = data[start + 14:start + 16 * count:16]
        at = kinds.find(12)
        while at >= 0:
            rec = start + 16 * at
            self.lost_events += _u32(data, rec + 8)[0] | (_u16(data, rec + 12)[0] << 32)
            at = kinds.find(12, at + 1)

    def flush(self):
        """Write the buffer. On failure the file is cut back to the last whole message,
        the buffer is dropped (its messages are not in the file) and the error raised."""
        view = memoryview(self._buf)
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError:
            view.release()
            try:
                os.ftruncate(self._fd, self.committed)
            except OSError:
                pass
            self._buf = bytearray()
            self.bytes_written = self.committed
            self.messages, self.events, self.lost_events = self._at_commit
            raise
        view.release()
        self.committed += done
        self._buf = bytearray()
        self._at_commit = (self.messages, self.events, self.lost_events)

    def close(self, finished=True):
        if self._f.closed:
            return
        try:
            self.flush()
            if finished and self.committed >= HEADER_BYTES:
                self._set_flags(self.flags | FLAG_FINISHED)
        finally:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- reader -------------------------------------------------------------------

class RecordingReader:
    """Reads a recording message by message, with bounded memory.

    Iterating yields (msg_type, bytes) for each verified message (the bytes are the
    size-prefixed FlatBuffer, without padding); ``messages()`` yields the decoded
    dataclasses of `pytrace.reader` (ProcessInfo, Symbol, EventChunk, ...). On damage
    both raise `RecordingError` after everything before it. Attributes: ``lossless``,
    ``finished_flag``, ``format_version``, ``offset`` (of the next message),
    ``timed_out`` (follow mode).
    """

    def __init__(self, path, follow=False, timeout=30.0, interval=0.05, block_bytes=4 << 20):
        self.path = os.fspath(path)
        self.follow = follow
        self.timeout = timeout
        self.interval = interval
        self.block_bytes = block_bytes
        self._f = open(self.path, "rb", buffering=0)
        self.format_version = None
        self.flags = 0
        self.offset = HEADER_BYTES
        self.timed_out = False
        self.producer_done = False

    @property
    def lossless(self):
        return bool(self.flags & FLAG_LOSSLESS)

    @property
    def finished_flag(self):
        return bool(self.flags & FLAG_FINISHED)

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _error(self, offset, reason):
        return RecordingError(self.path, offset, reason)

    def _reread_flags(self):
        try:
            raw = os.pread(self._f.fileno(), 4, _FLAGS_OFFSET)
        except OSError:
            return
        if len(raw) == 4:
            self.flags = _u32(raw, 0)[0]

    def _wait(self, deadline):
        """Follow mode: sleep until more may be there. False = give up (timed out)."""
        if time.monotonic() >= deadline:
            self.timed_out = True
            return False
        time.sleep(self.interval)
        return True

    def _replaced(self):
        try:
            a, b = os.stat(self.path), os.fstat(self._f.fileno())
        except OSError:
            return False
        return (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino)

    def _read_header(self):
        deadline = time.monotonic() + self.timeout
        data = b""
        while True:
            data += self._f.read(HEADER_BYTES - len(data))
            if len(data) >= HEADER_BYTES:
                break
            if not self.follow:
                raise self._error(len(data), "file ends inside the %d-byte header (%d bytes)"
                                  % (HEADER_BYTES, len(data)))
            if data[:len(MAGIC)] != MAGIC[:len(data)]:
                break
            if self._replaced():
                # `pytrace record` puts a new file at the path (renamed over it): a
                # follower that opened the path first reads the new one
                self._f.close()
                self._f = open(self.path, "rb", buffering=0)
                data = b""
                continue
            if not self._wait(deadline):
                raise self._error(len(data), "timed out waiting for the header")
        magic, major, minor, flags = _HEADER.unpack_from(data.ljust(HEADER_BYTES, b"\0"), 0)
        if magic != MAGIC:
            raise self._error(0, "bad magic %r: not a pytrace recording" % magic)
        if major != FORMAT_MAJOR:
            raise self._error(8, "unsupported recording format %d.%d (this pytrace reads %d.x)"
                              % (major, minor, FORMAT_MAJOR))
        self.format_version = (major, minor)
        self.flags = flags

    def __iter__(self):
        return self._raw()

    def raw(self):
        return self._raw()

    def _raw(self):
        self._read_header()
        f = self._f
        buf = b""            # bytes of the file from buf_off on
        buf_off = HEADER_BYTES
        pos = 0              # index in buf of the next message
        eof = False
        deadline = time.monotonic() + self.timeout

        def fill(need):
            """Have at least `need` bytes from pos; False if the file has fewer now."""
            nonlocal buf, buf_off, pos, eof
            while len(buf) - pos < need:
                chunk = f.read(max(self.block_bytes, need - (len(buf) - pos)))
                if not chunk:
                    eof = True
                    return False
                if pos:
                    buf_off += pos
                    buf = buf[pos:] + chunk
                    pos = 0
                else:
                    buf += chunk
            return True

        def more_may_come():
            """Follow mode at a short read: wait and retry (True), or stop (False)."""
            return self.follow and not self._follow_done() and self._wait(deadline)

        while True:
            off = buf_off + pos
            self.offset = off
            if not fill(4):
                have = len(buf) - pos
                if more_may_come():
                    continue
                if have == 0:
                    return          # clean end of the file (or of a followed stream)
                if self.timed_out:
                    return
                raise self._error(off, "file ends inside a size prefix (%d of 4 bytes)%s"
                                  % (have, self._unfinished_note()))
            size = _u32(buf, pos)[0]
            if size < 8 or size > MAX_MESSAGE_BYTES:
                raise self._error(off, "implausible message size %d" % size)
            total = 4 + size
            padded = total + _pad8(total)
            if not fill(padded):
                if more_may_come():
                    continue
                if self.timed_out:
                    return
                if len(buf) - pos < total:
                    raise self._error(off, "message of %d bytes is truncated: the file ends %d bytes "
                                      "into it%s" % (total, len(buf) - pos, self._unfinished_note()))
                # A complete message whose final padding is missing at the end of the file.
            end = min(padded, len(buf) - pos)
            pad = buf[pos + total:pos + end]
            if pad.count(0) != len(pad):
                raise self._error(off, "non-zero padding after the message (its size prefix %d may be damaged)" % size)
            try:
                body_type, _vector = _verify_at(buf, pos, pos + total)
            except _Bad as e:
                raise self._error(off, "message fails verification: %s" % e) from None
            except (struct.error, IndexError) as e:
                raise self._error(off, "message fails verification: %s" % e) from None
            data = buf[pos:pos + total]
            if body_type == _MSG_PRODUCER_STATUS:
                self._note_status(data, off)
            pos += end
            deadline = time.monotonic() + self.timeout
            yield body_type, data

    def _unfinished_note(self):
        """Why a file may end inside a message: its writer never closed it (a recorder
        killed while writing leaves its last write cut short)."""
        if self.finished_flag:
            return ""
        return "; the file was never closed by its writer (a recorder killed while writing)"

    def _note_status(self, data, off):
        from .reader import decode
        try:
            st = decode(_MSG_PRODUCER_STATUS, data)
        except Exception as e:  # noqa: BLE001 - any decode failure is damage
            raise self._error(off, "ProducerStatus does not decode: %s" % e) from None
        if st.state in (_STATE_EXITED, _STATE_DEAD):
            self.producer_done = True

    def _follow_done(self):
        if self.producer_done:
            return True
        self._reread_flags()
        return self.finished_flag

    def messages(self):
        """Decoded messages (dataclasses of pytrace.reader), verified first."""
        from .reader import decode
        it = self._raw()
        for msg_type, data in it:
            try:
                yield decode(msg_type, data)
            except Exception as e:  # noqa: BLE001 - generated code may raise anything
                raise self._error(self.offset, "message does not decode: %s" % e) from None

    def decoded(self):
        """(msg_type, bytes, decoded message) triples."""
        from .reader import decode
        for msg_type, data in self._raw():
            try:
                msg = decode(msg_type, data)
            except Exception as e:  # noqa: BLE001
                raise self._error(self.offset, "message does not decode: %s" % e) from None
            yield msg_type, data, msg
