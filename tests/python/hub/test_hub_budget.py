"""The hub within one memory budget, however many readers say hello and never read.

Real jobs, a real hub (pytrace-hub), real readers in processes of their own: a small
client process that opens many connections, says hello on each and never reads
(SILENT), pytrace-top --once --json and pytrace.Reader through the hub. The hub's
peak RSS is read from /proc (VmHWM) and checked against its budget plus a fixed
margin: a bound, not a speed. Each hub runs under an address-space limit, so a hub
without a budget fails the bound without taking the machine's memory."""

import errno
import json
import os
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import PY

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
              pytest.mark.reading_side]   # the hub's bounds (conftest.py)

MIB = 1 << 20
# What the hub holds besides its queues: its own code and heap, the symbols and stacks
# it keeps, one partly sent message per reader (a ring chunk at most).
MARGIN = 64 * MIB
# The address-space limit of a hub under test: far above budget + margin, far below
# what a hub without a budget reaches with these readers (3.34 GB with 100).
HUB_AS_LIMIT = 2 << 30

# A busy job that runs until a stop file exists (policy drop: it never waits for anyone).
JOB = textwrap.dedent("""
    import os, sys
    def leaf(i):
        return i + 1
    def middle(n):
        s = 0
        for i in range(n):
            s += leaf(i)
        return s
    stop = sys.argv[1]
    while not os.path.exists(stop):
        middle(2000)
""")

# Opens N connections to the hub's socket, says hello on each (asking for queue_kib),
# prints each welcome's status on one line as JSON, then never reads until killed.
SILENT = textwrap.dedent("""
    import json, socket, struct, sys, time
    path, n, queue_kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    hello = struct.pack("<8sHHII12x", b"PTHUBHI\\0", 1, 0, 0, queue_kib)
    conns, statuses = [], []
    for i in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(path)
        try:
            s.sendall(hello)
        except BrokenPipeError:
            pass            # refused at once: the hub sent its welcome and closed
        w = b""
        while len(w) < 64:
            c = s.recv(64 - len(w))
            if not c:
                break
            w += c
        statuses.append(struct.unpack_from("<i", w, 16)[0] if len(w) == 64 else None)
        conns.append(s)
    print(json.dumps(statuses), flush=True)
    while True:
        time.sleep(3600)
""")


def _bin(name):
    return shutil.which(name) or os.path.join(os.path.dirname(PY), name)


def _limit_as():
    resource.setrlimit(resource.RLIMIT_AS, (HUB_AS_LIMIT, HUB_AS_LIMIT))


def start_job(tmp_path):
    from pytrace import _job
    script = tmp_path / "job.py"
    script.write_text(JOB)
    stop = tmp_path / "stop"
    job, segment, wait_w = _job.start_job(PY, [], {"c_calls": True, "policy": "drop"},
                                          [str(script), str(stop)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert segment, "the job did not start tracing"
    return job, segment, wait_w, stop


def start_hub(segment, *opts):
    hub = subprocess.Popen([_bin("pytrace-hub"), *opts, segment], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, preexec_fn=_limit_as)
    path = hub.stdout.readline().strip()
    assert path.endswith(".sock"), hub.stderr.read()
    return hub, path


def silent_readers(sock, n, queue_kib=0):
    p = subprocess.Popen([PY, "-c", SILENT, sock, str(n), str(queue_kib)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line, p.stderr.read()
    return p, json.loads(line)


def peak_rss(pid):
    """VmHWM of a live process, in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM for pid %d" % pid)


def events_written(segment):
    from pytrace import _pytrace
    for s in _pytrace.list_segments():
        if s["name"] == segment.lstrip("/") or "/" + s["name"].lstrip("/") == segment:
            return s.get("events_written", 0)
    return 0


def _stop_all(procs):
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
    for p in procs:
        if p is not None:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


def _wait_for_copies(hub, stop_at, need_bytes):
    """Until the job has written enough that every silent reader's copy together passes
    need_bytes (the hub drains it all: policy drop), at most 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and hub.poll() is None:
        if stop_at() >= need_bytes:
            return True
        time.sleep(0.1)
    return False


def test_hub_memory_stays_within_its_budget_with_100_silent_readers_and_a_cut_top_shows_running(tmp_path):
    """100 readers say hello and never read while the job writes far more than
    100 x 32 MiB of copies: the hub's peak RSS stays under its default budget (256 MiB)
    plus a margin (without a budget it grew to 3.34 GB). pytrace-top reading through the
    same hub, stopped for a while so that the budget cuts it too, shows the job as
    RUNNING afterwards, with the events it missed in the hub counted apart from the
    job's drops (events_missed_in_hub, with its cause)."""
    job, segment, wait_w, stop = start_job(tmp_path)
    hub = silent = top = None
    try:
        hub, sock = start_hub(segment, "--hold", "1")
        silent, statuses = silent_readers(sock, 100)
        assert statuses == [0] * 100
        os.close(wait_w)
        wait_w = None
        top = subprocess.Popen([_bin("pytrace-top"), "--once", "--json", "--duration", "40", str(job.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        time.sleep(1.0)
        top.send_signal(signal.SIGSTOP)          # a slow reader: the hub cuts it
        w0 = events_written(segment)
        # 16 bytes an event, 100 copies: 800 MiB of copies is far past the budget and margin;
        # and 3 M events (48 MB) while top is stopped: more than its queue (32 MiB) holds,
        # once the budget has cut the silent readers down
        grew = _wait_for_copies(hub, lambda: min(events_written(segment) * 16 * 100,
                                                 (events_written(segment) - w0) * 800 * MIB // 3_000_000),
                                800 * MIB)
        time.sleep(1.0)
        top.send_signal(signal.SIGCONT)         # it reads on for the rest of its 40 s
        assert time.monotonic() - t0 < 35, "too slow to leave top time to read after its cut"
        assert grew, "the job did not write enough in 60 s"
        assert hub.poll() is None, hub.stderr.read()
        peak = peak_rss(hub.pid)
        assert peak <= 256 * MIB + MARGIN, "hub peak RSS %.0f MiB, budget 256 MiB" % (peak / MIB)
        out, err = top.communicate(timeout=60)
        assert top.returncode == 0, err
        t = json.loads(out)
        assert job.poll() is None
        assert t["state"] == "RUNNING", t
        assert t["events_missed_in_hub"] > 0, "the stopped top was never cut by the hub"
        assert "the hub cut it" in t["events_missed_cause"]
        assert t.get("error", "") == ""
    finally:
        stop.write_text("")
        if wait_w is not None:
            os.close(wait_w)
        _stop_all([top, silent])
        if job.poll() is None:
            job.wait(timeout=60)
        if hub is not None:
            hub.wait(timeout=60)
    assert "budget" in hub.stderr.read()


def test_hub_caps_each_readers_queue_request_by_its_budget(tmp_path):
    """Three silent readers each ask for a 1 GiB queue (the most a hello may ask) of a
    hub with --budget-mib 16: their queues together stay within 16 MiB (without the
    budget three such readers took a hub to 3.15 GB), and the welcome tells each the
    bound it got: the budget, not 1 GiB."""
    job, segment, wait_w, stop = start_job(tmp_path)
    hub = silent = None
    try:
        hub, sock = start_hub(segment, "--hold", "1", "--budget-mib", "16")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock)
        s.sendall(struct.pack("<8sHHII12x", b"PTHUBHI\0", 1, 0, 0, 1 << 20))
        w = s.recv(64, socket.MSG_WAITALL)
        status, queue_kib = struct.unpack_from("<iI", w, 16)
        s.close()
        assert status == 0 and queue_kib == 16 * 1024
        silent, statuses = silent_readers(sock, 3, queue_kib=1 << 20)
        assert statuses == [0, 0, 0]
        os.close(wait_w)
        wait_w = None
        # 240 MiB of copies: three times the bound below (budget + margin), which a hub
        # that kept them all would pass
        assert _wait_for_copies(hub, lambda: events_written(segment) * 16 * 3, 240 * MIB)
        assert hub.poll() is None, hub.stderr.read()
        peak = peak_rss(hub.pid)
        assert peak <= 16 * MIB + MARGIN, "hub peak RSS %.0f MiB, budget 16 MiB" % (peak / MIB)
    finally:
        stop.write_text("")
        if wait_w is not None:
            os.close(wait_w)
        _stop_all([silent])
        if job.poll() is None:
            job.wait(timeout=60)
        if hub is not None:
            hub.wait(timeout=60)


def test_hub_refuses_readers_past_its_limit_with_a_clear_message(tmp_path):
    """1,000 connections would each hold memory and a descriptor: past the hub's limit of
    readers at once (256 by default) a reader is refused, and told why in one line."""
    job, segment, wait_w, stop = start_job(tmp_path)
    hub = silent = None
    try:
        hub, sock = start_hub(segment, "--hold", "1")
        silent, statuses = silent_readers(sock, 300)
        assert statuses.count(0) == 256
        assert statuses[256:] == [-errno.EUSERS] * 44
        os.close(wait_w)
        wait_w = None
        probe = subprocess.run([PY, "-c", "import pytrace, sys\n"
                                "try:\n    pytrace.Reader(sys.argv[1], follow=True, hub=True)\n"
                                "except OSError as e:\n    print(e.errno, e.strerror)\n", segment],
                               capture_output=True, text=True, timeout=60)
        assert probe.stdout.startswith("%d " % errno.EUSERS), probe
        assert "most readers at once" in probe.stdout and "--max-readers" in probe.stdout
    finally:
        stop.write_text("")
        if wait_w is not None:
            os.close(wait_w)
        _stop_all([silent])
        if job.poll() is None:
            job.wait(timeout=60)
        if hub is not None:
            hub.wait(timeout=60)



def test_hub_out_of_descriptors_refuses_readers(tmp_path):
    """--max-readers above what `ulimit -n` allows: a reader past the last descriptor
    waited in the listen backlog for ever, never welcomed nor refused, and the hub's
    poll() woke at once for it (an idle hub spun at 70 % of a core: bench-style figure
    from /tmp/adv/emfile.py). It is refused (EMFILE), said once and counted."""
    job, segment, wait_w, stop = start_job(tmp_path)
    hub = silent = None

    def few_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    try:
        hub = subprocess.Popen([_bin("pytrace-hub"), "--hold", "1", "--max-readers", "1000", segment],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=few_fds)
        sock = hub.stdout.readline().strip()
        assert sock.endswith(".sock"), hub.stderr.read()
        os.close(wait_w)
        wait_w = None
        silent = subprocess.Popen([PY, "-c", SILENT, sock, "100", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        ready = select.select([silent.stdout], [], [], 60)[0]
        assert ready, "readers past the hub's descriptors were neither welcomed nor refused"
        line = silent.stdout.readline()
        assert line, silent.stderr.read()
        statuses = json.loads(line)
        welcomed = statuses.count(0)
        assert 20 < welcomed < 64, statuses
        assert statuses[welcomed:] == [-errno.EMFILE] * (100 - welcomed), statuses
    finally:
        stop.write_text("")
        if wait_w is not None:
            os.close(wait_w)
        _stop_all([silent])
        if job.poll() is None:
            job.wait(timeout=60)
        if hub is not None:
            hub.kill()
            _, err = hub.communicate(timeout=60)
    assert "no file descriptor left" in err, err


READER_TILL_END = textwrap.dedent("""
    import json, sys, pytrace
    out = {"events": 0}
    r = pytrace.Reader(sys.argv[1], follow=True, hub=True)
    print("joined", flush=True)
    try:
        for m in r:
            if type(m).__name__ == "EventChunk":
                out["events"] += m.count
        out["end"] = "finished"
    except ConnectionResetError as e:
        out["end"] = "ConnectionResetError"
        out["message"] = e.strerror
    out["disconnected"] = r.disconnected
    print(json.dumps(out), flush=True)
""")


def test_a_reader_whose_hub_goes_away_says_disconnected_never_that_the_job_died(tmp_path):
    """The hub is killed while the job runs on: pytrace-top through it says
    DISCONNECTED ("disconnected from the hub"), not DIED, and pytrace.Reader raises
    ConnectionResetError saying so (it ended silently, as if the job had finished)."""
    job, segment, wait_w, stop = start_job(tmp_path)
    hub = top = rd = None
    try:
        hub, sock = start_hub(segment, "--hold", "2", "--quiet")
        rd = subprocess.Popen([PY, "-c", READER_TILL_END, segment], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        assert rd.stdout.readline().strip() == "joined", rd.stderr.read()
        top = subprocess.Popen([_bin("pytrace-top"), "--once", "--json", "--duration", "30", str(job.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.close(wait_w)
        wait_w = None
        deadline = time.monotonic() + 30
        while events_written(segment) < 200000 and time.monotonic() < deadline:
            time.sleep(0.05)
        hub.kill()
        hub.wait(timeout=30)
        out, err = top.communicate(timeout=60)
        t = json.loads(out)
        assert job.poll() is None, "the job must still run"
        assert t["state"] == "DISCONNECTED", t
        assert "disconnected from the hub" in t.get("error", ""), t
        r = json.loads(rd.communicate(timeout=60)[0].strip().splitlines()[-1])
        assert r["end"] == "ConnectionResetError" and r["disconnected"] is True, r
        assert "disconnected from the hub" in r["message"]
        assert r["events"] > 0
    finally:
        stop.write_text("")
        if wait_w is not None:
            os.close(wait_w)
        _stop_all([top, rd, hub])
        if job.poll() is None:
            job.wait(timeout=60)


FINITE_JOB = textwrap.dedent("""
    import sys
    def leaf(i):
        return i + 1
    def middle(n):
        s = 0
        for i in range(n):
            s += leaf(i)
        return s
    for r in range(int(sys.argv[1])):
        middle(20000)
        if r == int(sys.argv[1]) // 2:
            open(sys.argv[2], "w").close()
""")


def _count_stream(data):
    """(events, lost told, Frame records after a Lost, last ProducerStatus) of a raw hub
    stream after its welcome."""
    from pytrace.fb.Message import Message
    from pytrace.reader import decode, MsgType, EventKind, FLAG_SYNTHETIC
    pos, events, lost, frames_after_lost, status = 0, 0, 0, 0, None
    after_lost = False
    while pos < len(data):
        (size,) = struct.unpack_from("<I", data, pos)
        msg = data[pos:pos + 4 + size]
        assert len(msg) == 4 + size, "the stream ends inside a message"
        pos += 4 + size
        m = decode(Message.GetRootAs(msg, 4).BodyType(), msg)
        if m.type == MsgType.ProducerStatus:
            status = m
        if m.type != MsgType.EventChunk:
            continue
        for ev in m.events:
            if ev.kind == EventKind.Lost and ev.flags & FLAG_SYNTHETIC:
                lost += ev.id | (ev.aux << 32)
                after_lost = True
            elif ev.kind == EventKind.Frame and ev.flags & FLAG_SYNTHETIC:
                frames_after_lost += after_lost
            else:
                events += 1
                after_lost = False
    return events, lost, frames_after_lost, status


def test_readers_cut_by_the_budget_are_told_every_event_they_missed(tmp_path):
    """Three readers that do not read until the job is halfway, each allowed a queue as
    large as the whole budget (4 MiB): together they pass the budget, so the hub cuts
    the largest queue, throwing away what it held past the message being sent. When they
    read, each finds Lost records and a resync (the threads' Frame records), and what it
    read plus what it was told it missed is every event the job wrote: nothing the cut
    threw away is lost silently, nothing is counted twice. The third reads only after the
    job ended: it still gets its resync and the end of the stream (the job's state EXITED),
    not a close."""
    from pytrace import _job
    script = tmp_path / "job.py"
    script.write_text(FINITE_JOB)
    marker = tmp_path / "halfway"
    # policy wait (a long bound): the job never drops, whatever the load; the hub drains
    # it at its pace, since none of these readers asked for lossless
    job, segment, wait_w = _job.start_job(PY, [], {"c_calls": True, "policy": "wait",
                                                   "wait_timeout": 120.0},
                                          [str(script), "300", str(marker)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert segment
    hub = None
    socks = []
    try:
        hub, sock = start_hub(segment, "--hold", "3", "--budget-mib", "4")
        for _ in range(3):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(sock)
            s.sendall(struct.pack("<8sHHII12x", b"PTHUBHI\0", 1, 0, 0, 4096))
            w = s.recv(64, socket.MSG_WAITALL)
            assert struct.unpack_from("<i", w, 16)[0] == 0
            socks.append(s)
        os.close(wait_w)
        wait_w = None
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()
            time.sleep(0.01)
        import threading
        got = [[] for _ in socks]

        def take(s, out):
            s.settimeout(120)
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    return
                out.append(chunk)
        takers = [threading.Thread(target=take, args=(s, out)) for s, out in zip(socks, got)]
        for t in takers[:2]:
            t.start()
        assert job.wait(timeout=120) == 0
        time.sleep(1.0)                 # the job has ended: the hub has everything
        takers[2].start()               # the third reads only now: its resync comes after the end
        for t in takers:
            t.join(timeout=120)
        assert hub.wait(timeout=60) == 0
        err = hub.stderr.read()
        assert "budget" in err, err
        for i, out in enumerate(got):
            events, lost, frames, status = _count_stream(b"".join(out))
            assert status is not None and status.events_dropped == 0
            assert status.state == 3, "reader %d did not get the end of the stream" % i
            assert lost > 0, "a reader was never cut"
            if i < 2:           # read while the job ran: its threads' stacks came back
                assert frames > 0, "no resync (Frame records) after a Lost record"
            assert events + lost == status.events_written
    finally:
        if wait_w is not None:
            os.close(wait_w)
        for s in socks:
            s.close()
        _stop_all([job, hub])
