"""pytrace recording files: the reader's message stream, kept on disk.

The file format (version 2.1; 1.x is the same without compressed chunks) is specified once,
in docs/stream-format.md ("The recording file"): the 16-byte header and its flags, messages
padded to 8 bytes, CompressedChunk (zstd after delta and shuffle), the loss slot, the end of
a recording and what is damage. Reading, verifying, compressing and writing are done by one
implementation in C (viewer/core/recfile.c, through the extension: ``_pytrace.RecFileReader``,
``RecFileWriter``, ``verify_message``), the one pytrace-top --file uses too.

This module: `RecordingWriter` (``loss_slot=True`` writes the loss slot, as `pytrace record`
does; ``compress=False`` writes format 1), and `RecordingReader`, which yields the messages
(an EventChunk for each CompressedChunk, byte for byte the message the writer was given; at
the end of an INCOMPLETE file one more ProducerStatus with the slot's counts) and raises
`RecordingError` at damage, with its ``offset``.

Follow mode: ``RecordingReader(path, follow=True)`` reads a file that is still being written:
a missing header, a short size prefix or a message whose bytes are not all there yet means
"not written yet": it waits and reads again. It stops at end of file once it has read a
ProducerStatus with state Exited or Dead, or the header's FINISHED flag is set, or when
nothing new arrived for ``timeout`` seconds (then ``timed_out`` is True).
"""

import os
import struct
import time

from .fb.MessageBody import MessageBody as _MessageBody

__all__ = [
    "MAGIC", "FORMAT_MAJOR", "FORMAT_MINOR", "HEADER_BYTES", "FLAG_LOSSLESS",
    "FLAG_FINISHED", "FLAG_INCOMPLETE", "RecordingError", "RecordingWriter", "RecordingReader",
    "verify_message", "read_header",
]

MAGIC = b"PYTRREC\x00"
FORMAT_MAJOR = 2            # what the writer writes (with compression)
FORMAT_MINOR = 1
FORMAT_MAJOR_PLAIN = 1      # what it writes with compress=False
READABLE_MAJORS = (1, 2)
HEADER_BYTES = 16
FLAG_LOSSLESS = 0x1
FLAG_FINISHED = 0x2
FLAG_INCOMPLETE = 0x4       # the writer could not write everything (a full disk)
_HEADER = struct.Struct("<8sHHI")

# Largest message accepted (viewer/core/recfile.h PT_RECFILE_MAX_MESSAGE_BYTES): a
# ring chunk is at most 16 MiB; anything far bigger is a damaged size prefix.
MAX_MESSAGE_BYTES = 64 << 20

# Message types (schema union MessageBody): the schema's numbers, from pytrace.fb.
_MSG_EVENT_CHUNK = _MessageBody.EventChunk
_MSG_PRODUCER_STATUS = _MessageBody.ProducerStatus


def _native():
    from . import _pytrace
    return _pytrace


class RecordingError(Exception):
    """A recording is damaged. `offset` is the file offset of the damage, `reason` what
    is wrong; everything before `offset` was read and handed out."""

    def __init__(self, path, offset, reason):
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__("%s: damaged at byte offset %d: %s" % (path, offset, reason))


def verify_message(data):
    """Verify one size-prefixed message (bytes) with the C verifier every pytrace
    reader uses. Returns its body type; raises ValueError saying what is wrong."""
    return _native().verify_message(data)


def read_header(data):
    """Parse the 16-byte header: (major, minor, flags). Raises ValueError."""
    if len(data) < HEADER_BYTES:
        raise ValueError("file is shorter than the %d-byte header" % HEADER_BYTES)
    magic, major, minor, flags = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError("bad magic %r: not a pytrace recording" % magic)
    if major not in READABLE_MAJORS:
        raise ValueError("unsupported recording format %d.%d (this pytrace reads 1.x and 2.x): it was "
                         "written by another version of pytrace" % (major, minor))
    return major, minor, flags


# ---- writer -------------------------------------------------------------------

class RecordingWriter:
    """Appends reader messages to a recording file.

    ``append(data)`` takes one size-prefixed message as handed out by the reader
    (verified) and buffers it, an EventChunk compressed (``compress=True``, the
    default: format 2.0; ``compress=False`` writes format 1.0, readable by older
    pytrace). ``flush()`` pushes buffered bytes to the file so followers see them.
    ``close()`` flushes and, unless ``finished=False``, sets the FINISHED flag.

    A write that fails part way (a full disk) is undone: ``flush`` then cuts the file
    back to the last whole message (``committed`` bytes), drops the buffer (the
    counters go back to what the file holds) and raises once; the file stays a readable
    recording. From then on nothing more is written: ``append`` counts what it is given
    (``unrecorded_events``, ``unrecorded_messages``; ``write_errno`` says why) and the
    file says so itself (INCOMPLETE, and with ``loss_slot=True``, as `pytrace record`
    writes, the counts in the loss slot; see the format above). Without it the file
    holds exactly the messages appended. ``plain_bytes`` is what the file would take without compression.
    """

    def __init__(self, path, lossless=False, buffer_bytes=1 << 20, compress=True, level=None,
                 loss_slot=False):
        from . import _output
        native = _native()
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
        try:
            self._w = native.RecFileWriter(
                self._f.fileno(), FLAG_LOSSLESS if lossless else 0, compress=compress,
                level=native.RECORDING_DEFAULT_LEVEL if level is None else level,
                buffer_bytes=buffer_bytes, loss_slot=loss_slot)
            self._w.flush()          # a follower sees a recording from the start
        except BaseException:
            self._f.close()
            raise
        self.format_version = (FORMAT_MAJOR if compress else FORMAT_MAJOR_PLAIN, FORMAT_MINOR)

    def _stat(self, name):
        return self._w.stats()[name]

    flags = property(lambda self: self._stat("flags"))
    bytes_written = property(lambda self: self._stat("bytes_written"))
    committed = property(lambda self: self._stat("committed"))
    plain_bytes = property(lambda self: self._stat("plain_bytes"))
    messages = property(lambda self: self._stat("messages"))
    events = property(lambda self: self._stat("events"))
    lost_events = property(lambda self: self._stat("lost_events"))
    compressed_chunks = property(lambda self: self._stat("compressed_chunks"))
    unrecorded_events = property(lambda self: self._stat("unrecorded_events"))
    unrecorded_messages = property(lambda self: self._stat("unrecorded_messages"))
    write_errno = property(lambda self: self._stat("write_errno"))

    def stats(self):
        """All counters at once (dict)."""
        return self._w.stats()

    def set_lossless(self, lossless):
        """Rewrite the LOSSLESS flag (e.g. once ProcessInfo told the policy)."""
        flags = self.flags
        self._w.set_flags((flags | FLAG_LOSSLESS) if lossless else (flags & ~FLAG_LOSSLESS))

    def append(self, data, msg_type=None):
        """Append one message; ValueError if it is not one, OSError if the flush it
        caused (a full buffer) failed. msg_type is accepted for the callers that
        know it; the message itself says its type."""
        self._w.append(data)

    def flush(self):
        self._w.flush()

    def close(self, finished=True):
        if self._f.closed:
            return
        try:
            self._w.close(finished=finished)
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
    size-prefixed FlatBuffer, without padding; a compressed chunk comes out as the
    EventChunk it stands for); ``messages()`` yields the decoded dataclasses of
    `pytrace.reader` (ProcessInfo, Symbol, EventChunk, ...). On damage both raise
    `RecordingError` after everything before it. Attributes: ``lossless``,
    ``finished_flag``, ``incomplete``, ``unrecorded()``, ``format_version``, ``offset`` (of the next message),
    ``timed_out`` (follow mode), ``compressed_chunks`` (read so far).
    """

    def __init__(self, path, follow=False, timeout=30.0, interval=0.05, block_bytes=4 << 20):
        self.path = os.fspath(path)
        self.follow = follow
        self.timeout = timeout
        self.interval = interval
        self.block_bytes = block_bytes      # kept for callers; the C reader sizes its cache
        self._rf = self._open()
        self.format_version = None
        self.flags = 0
        self.timed_out = False
        self.producer_done = False

    def _open(self):
        try:
            return _native().RecFileReader(self.path)
        except OSError as e:
            # the C reader's line says what and which file; keep errno for callers
            raise OSError(e.errno, os.strerror(e.errno) if e.errno else str(e), self.path) from None

    @property
    def offset(self):
        return self._rf.offset if self._rf is not None else HEADER_BYTES

    @property
    def compressed_chunks(self):
        return self._rf.compressed_chunks

    @property
    def lossless(self):
        return bool(self.flags & FLAG_LOSSLESS) and not self.incomplete

    @property
    def incomplete(self):
        """The writer could not write everything it read (a full disk)."""
        return bool(self.flags & FLAG_INCOMPLETE)

    def unrecorded(self):
        """None, or {events, messages, errno} that the writer read and could not write
        (the loss slot, read again; counts 0 if the loss came before the slot)."""
        return self._rf.unrecorded()

    @property
    def finished_flag(self):
        return bool(self.flags & FLAG_FINISHED)

    def close(self):
        self._rf.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _error(self, offset, reason):
        return RecordingError(self.path, offset, reason)

    def _wait(self, deadline):
        """Follow mode: sleep until more may be there. False = give up (timed out)."""
        if time.monotonic() >= deadline:
            self.timed_out = True
            return False
        time.sleep(self.interval)
        return True

    def _replaced(self):
        try:
            a = os.stat(self.path)
        except OSError:
            return False
        return (a.st_dev, a.st_ino) != self._identity

    def __iter__(self):
        return self._raw()

    def raw(self):
        return self._raw()

    def _raw(self):
        rf = self._rf
        try:
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino)
        except OSError:
            self._identity = None
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                item = rf.next()
            except ValueError as e:
                offset, reason = e.args if len(e.args) == 2 else (rf.offset, str(e))
                self._note_header(rf)
                raise self._error(offset, reason) from None
            if item is not None:
                self._note_header(rf)
                if item[0] == _MSG_PRODUCER_STATUS and rf.ended():
                    self.producer_done = True
                deadline = time.monotonic() + self.timeout
                yield item
                continue
            self._note_header(rf)
            if self.follow and not rf.header_read and self._identity is not None and self._replaced():
                # `pytrace record` puts a new file at the path (renamed over it): a
                # follower that opened the path first reads the new one
                rf.close()
                self._rf = rf = self._open()
                st = os.stat(self.path)
                self._identity = (st.st_dev, st.st_ino)
                continue
            if self.follow and not self._follow_done() and self._wait(deadline):
                continue
            if self.timed_out:
                if not rf.header_read:
                    raise self._error(rf.pending, "timed out waiting for the header")
                return
            try:
                rf.finish()
            except ValueError as e:
                offset, reason = e.args
                raise self._error(offset, reason) from None
            return

    def _note_header(self, rf):
        if rf.header_read:
            self.format_version = (rf.major, rf.minor)
            self.flags = rf.flags

    def _follow_done(self):
        if self.producer_done:
            return True
        if not self._rf.header_read:
            return False
        done = self._rf.ended()        # re-reads the FINISHED flag
        self.flags = self._rf.flags
        return done

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
