"""pytrace.HubClient keeps an error that follows messages, as pytrace.Reader does: the
poll that received messages and then met damage hands those messages out, and the next
poll raises the error (one drain for both, runtime/_pytrace/drain.c).

The hub here is a peer that speaks the hub's wire (hello, welcome, size-prefixed
messages) and then sends a damaged size prefix: a real pytrace-hub never sends one, and
a reader must say so rather than lose what came before it."""

import errno
import os
import shutil
import socket
import struct
import tempfile
import threading

from pytrace import _pytrace
from pytrace.export import synthetic as syn

HELLO_BYTES, WELCOME_BYTES = 32, 64


def _welcome():
    # magic, major, minor, flags, status, queue_kib, hub_pid, root_pid, reserved (viewer/hub/proto.h)
    w = struct.pack("<8sHHIiIQQ24s", b"PTHUBOK\0", 1, 0, 0, 0, 0, os.getpid(), 4242, bytes(24))
    assert len(w) == WELCOME_BYTES
    return w


class DamagingHub:
    """Serves one reader: the welcome, `messages`, then a size prefix of 3 bytes (a
    message is at least 8); keeps the connection open until closed."""

    def __init__(self, messages):
        self.dir = tempfile.mkdtemp(prefix="ptbase-hub-")      # 0700, ours
        self.path = os.path.join(self.dir, "hub.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.messages = messages
        self.conn = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        self.conn = conn
        got = b""
        while len(got) < HELLO_BYTES:
            part = conn.recv(HELLO_BYTES - len(got))
            if not part:
                return
            got += part
        conn.sendall(_welcome() + b"".join(self.messages) + struct.pack("<I", 3) + bytes(8))

    def close(self):
        self.thread.join(timeout=10)
        if self.conn:
            self.conn.close()
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_hub_client_keeps_the_error_that_follows_messages():
    messages = [syn.process_info(pid=4242, segment="/pytrace-4242-0"), syn.producer_status(state=1)]
    hub = DamagingHub(messages)
    try:
        client = _pytrace.HubClient("unused", socket=hub.path)
        got = client.poll(timeout=10)
        # the messages before the damage are handed out, whole
        assert [m for _, m in got] == messages
        # and the damage is not dropped: the next poll raises it
        try:
            client.poll(timeout=1)
        except OSError as e:
            assert e.errno == errno.EBADMSG
            assert "message of 3 bytes; the stream is damaged" in str(e)
        else:
            raise AssertionError("the poll after the damaged message raised nothing")
        assert "damaged" in client.error
        client.close()
    finally:
        hub.close()
