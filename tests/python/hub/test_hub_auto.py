"""A job started without a hub (`pytrace run`, no --hub) gets one from its first reader
that follows it: pytrace-top PID, `pytrace record PID` and pytrace.Reader(pid) start
pytrace-hub for it when no one reads it, so a second and third reader join instead of
being told "is being read by pid N". That hub lets the job go after a few seconds
without readers; a later reader starts a new one mid-stream and still gets the roots
of its picture (the stacks). Real jobs, real hubs, real readers."""

import json
import os
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import PY
from hubkit import JOB, _bin

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

# Counts what it reads of a job joined at any moment: per thread, the index of the
# first live event it got (the events written before it joined: a late joiner's
# synthetic chunk carries the next live index) plus every live event after it.
# A reader that fell behind in the hub's queue gets, per gap, a synthetic Lost record of
# the events it missed (then a resync): those count too.
ACCOUNT = textwrap.dedent("""
    from pytrace.reader import MsgType, EventFlags, EventKind
    def account(messages, state):
        for m in messages:
            if m.type == MsgType.EventChunk:
                events = list(m.iter_events())
                synthetic = m.count and all(e[4] & EventFlags.Synthetic for e in events)
                state["first"].setdefault((m.process, m.thread), m.first_event)
                if not synthetic:
                    state["live"] += m.count
                else:
                    state["live"] += sum(e[1] | (e[2] << 32) for e in events if e[3] == EventKind.Lost)
            elif m.type == MsgType.ProducerStatus:
                state["last"] = m
            yield m
""")

READER = ACCOUNT + textwrap.dedent("""
    import json, sys, pytrace
    state = {"first": {}, "live": 0, "last": None}
    with pytrace.Reader(sys.argv[1], follow=True) as r:
        via = r.via_hub
        print("joined", flush=True)
        for m in account(r, state):
            pass
    last = state["last"]
    print(json.dumps({"events": state["live"] + sum(state["first"].values()), "via_hub": via,
                      "written": last.events_written, "dropped": last.events_dropped,
                      "state": last.state}))
""")


def _account(messages):
    ns = {}
    exec(ACCOUNT, ns)
    state = {"first": {}, "live": 0, "last": None}
    for _ in ns["account"](messages, state):
        pass
    return state["live"] + sum(state["first"].values())


def _held(pid):
    from pytrace import _pytrace
    segs = [s for s in _pytrace.list_segments() if s["pid"] == pid]
    return segs[0]["consumer_pid"] if segs else None


def _wait_for(pred, what, proc=None, limit=60.0):
    """Poll until pred() (bounded: the test fails with `what`, it never asserts a time)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(what)


def start_run_job(tmp_path, rounds, n):
    """`pytrace run` (no --hub), policy wait; the program waits for a go file first."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    go = tmp_path / "go"
    job = subprocess.Popen([PY, "-m", "pytrace", "run", "--policy", "wait", "-c",
                            "import os, time, runpy, sys\n"
                            "while not os.path.exists(%r): time.sleep(0.01)\n"
                            "sys.argv = [%r, %r, %r]\n"
                            "runpy.run_path(%r, run_name='__main__')\n"
                            % (str(go), str(script), str(rounds), str(n), str(script))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from pytrace import _pytrace
    _wait_for(lambda: any(s["pid"] == job.pid for s in _pytrace.list_segments()),
              "the job did not start tracing", job)
    return job, go


def _segment_of(pid):
    from pytrace import _pytrace
    return [s for s in _pytrace.list_segments() if s["pid"] == pid]


def _header_at(head, *values):
    """Where these u64/u32 values (struct format, values) stand in a segment header: found
    by their values (shm/layout.h's order), not by an offset retyped here."""
    key = struct.pack(*values)
    at = head.find(key)
    assert at >= 0 and head.find(key, at + 1) < 0, "the header's %s" % (values,)
    return at


def _copy_sparse(src, dst):
    """Copy a segment file as tmpfs holds it: its data, not its holes (a ring is a GiB)."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        fo.truncate(size)
        off = 0
        while off < size:
            try:
                off = os.lseek(fi.fileno(), off, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fi.fileno(), off, os.SEEK_HOLE)
            fi.seek(off)
            fo.seek(off)
            while off < end:
                chunk = fi.read(min(end - off, 1 << 20))
                fo.write(chunk)
                off += len(chunk)


def test_python_auto_hub_takes_no_segment_of_another_owner(tmp_path, monkeypatch):
    """The auto-hub policy is one, in C (viewer/hub/autohub.c, what pytrace-top runs):
    a running job that no one reads gets a hub only when its segment is the user's own.
    Crafted: the job's running segment names another uid in its header (the file stays
    ours), and a newer segment of the same pid, ours, whose producer is gone, comes first
    for a HubClient (not held by a hub: ENOENT, so auto_hub goes on to its policy).
    pytrace.reader.auto_hub must not start pytrace-hub for the other owner's segment
    (its Python copy of the policy did: it never looked at the owner)."""
    from pytrace import reader
    job, go = start_run_job(tmp_path, 20, 2000)
    copy = None
    try:
        seg = _segment_of(job.pid)[0]
        path = "/dev/shm" + seg["name"]
        with open("/proc/%d/stat" % job.pid) as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])    # field 22: start time
        with open(path, "r+b") as f:
            head = f.read(4096)
            uid_at = _header_at(head, "<QQI", seg["pid"], seg["ppid"], seg["uid"]) + struct.calcsize("<QQ")
            start_at = _header_at(head, "<Q", start)
            f.seek(uid_at)
            f.write(struct.pack("<I", seg["uid"] + 4242))      # another owner
        pid_, seq, rest = seg["name"][len("/pytrace-"):].split("-", 2)
        copy = "/dev/shm/pytrace-%s-%d-%s" % (pid_, int(seq) + 1, rest)
        _copy_sparse(path, copy)
        with open(copy, "r+b") as f:
            f.seek(uid_at)
            f.write(struct.pack("<I", seg["uid"]))             # ours
            f.seek(start_at)
            f.write(struct.pack("<Q", start + 1))              # its producer is gone
        segs = _segment_of(job.pid)
        assert [s["name"] for s in segs] == [copy[len("/dev/shm"):], seg["name"]]
        assert segs[0]["valid"] and not segs[0]["alive"] and segs[0]["uid"] == seg["uid"]
        assert segs[1]["valid"] and segs[1]["alive"] and segs[1]["uid"] == seg["uid"] + 4242
        assert segs[1]["state"] == reader.ProducerState.Running and not segs[1]["consumer_pid"]

        # the real pytrace-hub, behind a script that notes each start
        started = tmp_path / "hub-starts"
        hub = tmp_path / "pytrace-hub"
        hub.write_text("#!/bin/sh\necho \"$@\" >> %s\nexec %s \"$@\"\n" % (started, _bin("pytrace-hub")))
        hub.chmod(0o755)
        monkeypatch.setattr(reader, "find_hub_binary", lambda: str(hub))
        client = reader.auto_hub(str(job.pid))
        assert client is None, "auto_hub read the job through a hub"
        assert not started.exists(), "auto_hub started pytrace-hub for a segment of another owner: %s" % (
            started.read_text())
        assert not _segment_of(job.pid)[-1]["consumer_pid"]
    finally:
        go.write_text("")                     # the job goes on (and ends) whatever happened
        if copy is not None and os.path.exists(copy):
            os.unlink(copy)
    out, err = job.communicate(timeout=180)
    assert job.returncode == 0, err


def test_the_hub_auto_hub_starts_holds_none_of_the_callers_files(tmp_path):
    """The hub a reader starts outlives the call: it must not hold the caller's files
    (an inheritable pipe whose reader waits for its end would wait for the hub's end
    too). The C policy's child closes them before exec, as Popen(close_fds=True) did."""
    from pytrace import reader
    job, go = start_run_job(tmp_path, 20, 2000)
    rfd, wfd = os.pipe()
    os.set_inheritable(wfd, True)
    client = None
    try:
        client = reader.auto_hub(str(job.pid))
        assert client is not None, "auto_hub did not start a hub for a running job no one reads"
        hub_pid = _held(job.pid)
        with open("/proc/%d/cmdline" % hub_pid, "rb") as f:
            assert b"pytrace-hub" in f.read()
        pipe = "pipe:[%d]" % os.fstat(wfd).st_ino
        fds = os.listdir("/proc/%d/fd" % hub_pid)
        held = [fd for fd in fds if os.readlink("/proc/%d/fd/%s" % (hub_pid, fd)) == pipe]
        assert held == [], "the hub holds the caller's pipe as fd %s" % held
    finally:
        if client is not None:
            client.close()
        os.close(rfd)
        os.close(wfd)
        go.write_text("")
    out, err = job.communicate(timeout=180)
    assert job.returncode == 0, err


def test_top_then_record_and_reader_join_a_run_job_through_its_own_hub(tmp_path):
    """pytrace-top follows a `pytrace run` job (no --hub): it starts the job's hub. Then
    `pytrace record PID` and a pytrace.Reader join at the same time: none is refused,
    and each accounts for every event the job wrote (the job's own final counter)."""
    job, go = start_run_job(tmp_path, 200, 20000)
    procs = []
    try:
        top = subprocess.Popen([_bin("pytrace-top"), "--once", "--json", "--duration", "600",
                                str(job.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        procs.append(top)
        hub_pid = _wait_for(lambda: _held(job.pid), "pytrace-top did not take the job", top)
        assert hub_pid != top.pid, "the segment is held by a hub, not by the view itself"
        with open("/proc/%d/cmdline" % hub_pid, "rb") as f:
            assert b"pytrace-hub" in f.read()
        rec_path = tmp_path / "out.pytrace"
        rec = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(rec_path), str(job.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(rec)
        rd = subprocess.Popen([PY, "-c", READER, str(job.pid)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        procs.append(rd)
        assert rd.stdout.readline().strip() == "joined", rd.stderr.read()
    finally:
        go.write_text("")                     # the job goes on (and ends) whatever happened
    out, err = job.communicate(timeout=180)
    assert job.returncode == 0, err

    r_out, r_err = rd.communicate(timeout=120)
    assert rd.returncode == 0, r_err
    r = json.loads(r_out.strip().splitlines()[-1])
    assert r["via_hub"] is True
    assert r["state"] == 3 and r["dropped"] == 0
    written = r["written"]
    assert written > 1_000_000
    assert r["events"] == written

    top_out, top_err = top.communicate(timeout=120)
    assert top.returncode == 0, top_err
    t = json.loads(top_out)
    assert t["state"] == "ENDED"
    assert t["events_read"] + t["events_missed_in_hub"] == written and t["events_dropped"] == 0

    rec_out, rec_err = rec.communicate(timeout=120)
    assert rec.returncode == 0, rec_err
    assert "another reader" not in rec_err and "being read by" not in rec_err
    from pytrace.recording import RecordingReader
    with RecordingReader(str(rec_path)) as rr:
        assert _account(rr.messages()) == written
    # the hub ends with the job once its readers have the end
    _wait_for(lambda: not os.path.exists("/proc/%d" % hub_pid)
              or open("/proc/%d/stat" % hub_pid).read().split(") ")[1][0] == "Z",
              "the job's hub did not end after the job")


def test_hub_releases_an_unread_job_and_a_later_reader_gets_roots(tmp_path):
    """A reader that follows a running job starts its hub; once it leaves, the hub
    releases the job (it does not drain it for nobody). A later reader starts a new hub
    mid-stream and its picture has roots: the main thread's first chunk holds the open
    frames (outer, middle) as Frame records, before live events. --no-hub still reads
    the segment directly (not through a hub)."""
    import pytrace
    from pytrace.reader import MsgType, EventKind
    job, go = start_run_job(tmp_path, 100000, 2000)     # runs until killed
    try:
        go.write_text("")
        r = pytrace.Reader(job.pid, follow=True)
        assert r.via_hub
        first_hub = _held(job.pid)
        # read until the job has called middle(): from then on outer() and middle()
        # stay open (the job was seen still in run_path's imports when a wait-policy
        # job sat on a full ring while the first hub let it go)
        for m in r:
            if m.type == MsgType.Symbol and m.name == "middle":
                break
        r.close()
        _wait_for(lambda: _held(job.pid) == 0, "the hub kept the job after its reader left", job)
        assert not os.path.exists("/proc/%d" % first_hub) or \
            open("/proc/%d/stat" % first_hub).read().split(") ")[1][0] == "Z"

        def roots(reader):
            """The open frames the reader is given (Frame records, as the producer writes
            them at a new reader's stack request), looked for in its first chunks."""
            names, frames, chunks = {}, [], 0
            for m in reader:
                if m.type == MsgType.Symbol:
                    names[m.id] = m.name
                elif m.type == MsgType.EventChunk:
                    chunks += 1
                    frames += [names.get(e[1]) for e in m.iter_events() if e[3] == EventKind.Frame]
                    if frames or chunks > 2000:
                        return frames
            return frames

        with pytrace.Reader(job.pid, follow=True) as r2:
            assert r2.via_hub and _held(job.pid) not in (0, first_hub)
            frames = roots(r2)
        assert "outer" in frames and "middle" in frames, frames
        _wait_for(lambda: _held(job.pid) == 0, "the second hub kept the job", job)

        # the same as a reader of the segment itself gets (--no-hub)
        with pytrace.Reader(job.pid, follow=True, hub=False) as r3:
            assert not r3.via_hub and _held(job.pid) == os.getpid()
            direct = roots(r3)
        assert "outer" in direct and "middle" in direct, direct
    finally:
        job.kill()
        job.wait(timeout=60)


# Holds the job's segment as a plain reader for a while, then lets it go: with
# argv[2] == "hub", under the name a hub runs as (its comm), with no socket -- what a
# hub is for a moment when it starts, and when it ends (it unlinks its socket, then
# lets the segment go).
HOLDER = textwrap.dedent("""
    import ctypes, sys, time, pytrace
    if sys.argv[2] == "hub":
        ctypes.CDLL(None).prctl(15, b"pytrace-hub", 0, 0, 0)     # PR_SET_NAME
    r = pytrace.Reader(int(sys.argv[1]), follow=True, hub=False)
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
    r.close()
""")


def _hold(pid, as_what, seconds):
    h = subprocess.Popen([PY, "-c", HOLDER, str(pid), as_what, str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert h.stdout.readline().strip() == "held"
    return h


def test_a_reader_arriving_as_a_hub_lets_the_job_go_reads_it_instead_of_failing(tmp_path):
    """CI saw `pytrace-top PID --once` fail with "is being read by pid N (pytrace-hub
    ...); stop that reader first" when it came as the hub of the test before ended (its
    socket gone, the segment not yet let go). A pytrace-hub holder with no socket is
    waited for: once it lets go, pytrace-top and pytrace.Reader read the segment
    directly. A plain reader (not a hub) is still named at once."""
    import pytrace
    top = _bin("pytrace-top")
    job, go = start_run_job(tmp_path, 100000, 2000)     # runs until killed
    try:
        go.write_text("")
        h = _hold(job.pid, "hub", 1.0)
        r = subprocess.run([top, str(job.pid), "--once", "--json"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert any(f["name"] == "leaf" for f in json.loads(r.stdout)["functions"]), r.stdout[:2000]
        h.wait(timeout=30)

        h = _hold(job.pid, "hub", 1.0)
        with pytrace.Reader(job.pid, follow=False) as rd:
            assert not rd.via_hub
            assert sum(1 for _ in rd) > 0
        h.wait(timeout=30)

        h = _hold(job.pid, "plain", 30.0)
        try:
            r = subprocess.run([top, str(job.pid), "--once", "--json"], capture_output=True, text=True, timeout=60)
            assert r.returncode == 1 and "is being read by pid %d" % h.pid in r.stderr, r.stderr
            assert h.poll() is None                  # named while it holds it, not waited for
        finally:
            h.kill()
            h.wait(timeout=30)
    finally:
        job.kill()
        job.wait(timeout=60)
