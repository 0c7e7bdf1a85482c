"""pytrace.HubClient keeps an error that follows messages, as pytrace.Reader does: the
poll that received messages and then met damage hands those messages out, and the next
poll raises the error (one drain for both, runtime/_pytrace/drain.c).

The hub here is a peer that speaks the hub's wire (hello, welcome, size-prefixed
messages) and then sends a damaged size prefix: a real pytrace-hub never sends one, and
a reader must say so rather than lose what came before it."""

import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

import pytest

from pytrace import _pytrace
import synthetic as syn

pytestmark = pytest.mark.reading_side   # the hub client's drain (conftest.py)

HELLO_BYTES, WELCOME_BYTES = 32, 64


def _welcome():
    # magic, major, minor, flags, status, queue_kib, hub_pid, root_pid, reserved (viewer/hub/proto.h)
    w = struct.pack("<8sHHIiIQQ24s", b"PTHUBOK\0", 1, 0, 0, 0, 0, os.getpid(), 4242, bytes(24))
    assert len(w) == WELCOME_BYTES
    return w


class DamagingHub:
    """Serves one reader: the welcome, `messages`, then a size prefix of 3 bytes (a
    message is at least 8); keeps the connection open until closed. With `later`, the
    welcome and `messages` first, then `later` once go() is called."""

    def __init__(self, messages, later=None):
        self.dir = tempfile.mkdtemp(prefix="ptbase-hub-")      # 0700, ours
        self.path = os.path.join(self.dir, "hub.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.messages = messages
        self.later = later
        self.go_event = threading.Event()
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
        if self.later is None:
            conn.sendall(_welcome() + b"".join(self.messages) + struct.pack("<I", 3) + bytes(8))
            return
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        conn.sendall(_welcome() + b"".join(self.messages))
        if self.go_event.wait(60):
            conn.sendall(b"".join(self.later))

    def go(self):
        self.go_event.set()

    def close(self):
        self.go_event.set()
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


# The reader of the second test: its poll meets an error that the client does not meet
# again (the drain's own buffer cannot grow: out of memory, under RLIMIT_AS), after a
# message it drained. The message before is handed out; the next poll raises ENOMEM,
# where HubClient's own poll used to return an empty list, the big message gone unsaid.
READER = r"""
import errno, fcntl, json, os, resource, select, struct, sys, termios
from pytrace import _pytrace
path, want = sys.argv[1], int(sys.argv[2])
c = _pytrace.HubClient("unused", socket=path)
first = c.poll(timeout=10)                 # the client's buffers exist from here on
print("ready", flush=True)
sys.stdin.readline()                       # the hub sent the rest
buf = bytearray(4)
while True:                                # all of it waits in the socket
    select.select([c.fileno], [], [], 1)
    fcntl.ioctl(c.fileno, termios.FIONREAD, buf)
    if struct.unpack("i", buf)[0] >= want:
        break
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) << 10 for l in f if l.startswith("VmSize:")][0]
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm + (128 << 10), hard))
try:
    second = c.poll()
finally:
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
try:
    third = ["returned", len(c.poll())]
except OSError as e:
    third = ["raised", e.errno]
print(json.dumps({"first": len(first), "second": [len(m) for _, m in second], "third": third}), flush=True)
"""


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""), reason="RLIMIT_AS and ASan's shadow memory")
def test_hub_client_keeps_a_drain_error_that_follows_messages():
    small = syn.producer_status(state=1)
    big = struct.pack("<I", (160 << 10) - 4) + bytes((160 << 10) - 4)   # the drain grows to 256 KiB
    hub = DamagingHub([syn.process_info(pid=4242, segment="/pytrace-4242-0")], later=[small, big])
    reader = subprocess.Popen([sys.executable, "-c", READER, hub.path, str(len(small) + len(big))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        hub.go()
        reader.stdin.write("sent\n")
        reader.stdin.flush()
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0, err
        got = json.loads(out.strip().splitlines()[-1])
        assert got["first"] == 1
        assert got["second"] == [len(small)]             # the message before the failure, handed out
        assert got["third"] == ["raised", errno.ENOMEM]  # and the failure said by the next poll
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        hub.close()
