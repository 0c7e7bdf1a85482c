"""A recorder that is killed, or whose disk fills, loses nothing without saying so.

- kill -9 of `pytrace record PID` mid-run: the ring advances only past what the recorder
  wrote, so a second recorder continues where the file of the first ends: together they
  hold every event the job wrote (an event may be in both, never in neither). It used to
  lose up to 0.1 s of events read but not written, with no marker.
- a full disk: one line saying so (file, cause, how much), the file readable up to the last
  whole message and itself saying what it lacks (every reader shows it), the job runs on
  (not held back, not killed) and record exits with the job's own code, or 3 if it is 0.
"""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
import urllib.request

import pytest

import pytrace
from helpers import PY, SUPPORT
from pytrace.recording import FLAG_LOSSLESS, RecordingError, RecordingReader
from topkit import TOP

pytestmark = pytest.mark.reading_side   # the reading programs' bounds (conftest.py)

JOB = textwrap.dedent("""
    import sys, time
    def f(i):
        return i + 1
    end = time.time() + float(sys.argv[1])
    n = 0
    while time.time() < end:
        for i in range(2000):
            n = f(n)
        time.sleep(0.0005)
    print("job done", flush=True)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
""")


def _chunks(path, killed=False):
    """{thread: [(first_event, count)]} and {thread: events_written from ThreadEnd}.

    killed: the file of a recorder killed by SIGKILL. The kernel may cut its last write
    short (a large write to a file stops at a fatal signal), so the file may end inside
    a message: that tail, and only that, is allowed, and the reader must say so."""
    ranges, written = {}, {}
    with RecordingReader(str(path)) as r:
        try:
            for m in r.messages():
                name = type(m).__name__
                if name == "EventChunk":
                    ranges.setdefault(m.thread, []).append((m.first_event, m.count))
                elif name == "ThreadEnd":
                    written[m.thread] = m.events_written
        except RecordingError as e:
            if not killed:
                raise
            assert "truncated" in e.reason or "inside a size prefix" in e.reason, e
            assert "never closed by its writer" in e.reason, e
            assert os.path.getsize(path) - e.offset < (1 << 20) + (64 << 10), e
    return ranges, written


def _covered(ranges):
    """Merge (first, count) ranges; return the list of [start, end) intervals."""
    out = []
    for first, count in sorted(ranges):
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], first + count)
        else:
            out.append([first, first + count])
    return out


def test_killed_recorder_leaves_no_gap(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", "--policy", "wait", str(job), "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "tracing pid" in proc.stderr.readline()
        first = tmp_path / "first.pytrace"
        # --no-hub: the recorder reads the segment itself, the path whose ring advances only
        # past what it wrote (through a hub, what the hub queued for a killed reader is its)
        rec1 = subprocess.Popen([PY, "-m", "pytrace", "record", "--no-hub", "-o", str(first), str(proc.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and (not first.exists() or first.stat().st_size < 200_000):
            time.sleep(0.01)
        rec1.send_signal(signal.SIGKILL)
        rec1.wait()
        second = tmp_path / "second.pytrace"
        rec2 = subprocess.run([PY, "-m", "pytrace", "record", "--no-hub", "-o", str(second), str(proc.pid)],
                              capture_output=True, text=True, timeout=120)
        assert rec2.returncode == 0, rec2.stderr
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r1, _ = _chunks(first, killed=True)
    r2, written = _chunks(second)
    main = max(written, key=lambda t: written[t])
    total = written[main]
    assert r1.get(main), "the first recorder wrote nothing of the main thread"
    covered = _covered(r1.get(main, []) + r2.get(main, []))
    assert covered == [[0, total]], "events missing from both files: %s of %d" % (covered[:4], total)


def _web_status(tmp_path, rec, events):
    """`pytrace web --file rec`: the status its page shows (api/update)."""
    url_file = tmp_path / "web-url.txt"
    log = tmp_path / "web.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([PY, "-m", "pytrace", "web", "--url-file", str(url_file), "--file", str(rec)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not url_file.exists() or not url_file.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        url = url_file.read_text().strip()
        base, token = url.split("?", 1)[0], url.split("token=", 1)[1]
        while True:                      # until the page has the whole file (fed in the background)
            with urllib.request.urlopen(base + "api/update?token=%s&session=a&version=0&thread=0&window=0"
                                        % token, timeout=30) as r:
                status = json.loads(r.read())["status"]
            if status["events"] >= events or time.monotonic() > deadline:
                return status
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to mount a small tmpfs")
@pytest.mark.parametrize("job_code", [7, 0])
def test_disk_full_during_record(tmp_path, job_code):
    """A disk that fills during `record -- job`: the file itself records what it lacks
    (INCOMPLETE, not lossless, the counts in its loss slot) and every reader says so;
    record says it in one line naming the file, the cause and the count, and exits with
    the job's own code, or 3 (incomplete) when the job's is 0."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "out.pytrace"
    # 256 KiB: the job's compressed recording takes about 2 MB (its plain one 120 MB)
    inner = ("mount -t tmpfs -o size=256k tmpfs %s && %s -m pytrace record -o %s -- %s %s 3 %d; rc=$?; "
             "cp %s %s/kept.pytrace; exit $rc") % (disk, PY, out, PY, job, job_code, out, tmp_path)
    r = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == (job_code or 3), (r.returncode, r.stderr)  # the job's own, else 3
    assert "job done" in r.stdout                             # it ran to its end
    assert "Traceback" not in r.stderr, r.stderr
    summary = [l for l in r.stderr.splitlines() if "No space left on device" in l]
    assert len(summary) == 1, r.stderr
    m = re.search(r"%s is incomplete: No space left on device \(disk full\); (\d+) events in (\d+) "
                  r"messages were read and not written" % re.escape(str(out)), summary[0])
    assert m, summary[0]
    said_events, said_messages = int(m.group(1)), int(m.group(2))
    assert said_events > 0 and said_messages > 0
    kept = tmp_path / "kept.pytrace"
    ranges, _ = _chunks(kept)                                 # reads without damage
    written = sum(c for rs in ranges.values() for _, c in rs)
    assert written > 0

    # the file: flags and the loss slot
    with RecordingReader(str(kept)) as rec:
        statuses = [m for m in rec.messages() if type(m).__name__ == "ProducerStatus"]
        assert rec.finished_flag and rec.incomplete and not rec.lossless
        assert not rec.flags & FLAG_LOSSLESS
        assert rec.unrecorded() == {"events": said_events, "messages": said_messages, "errno": errno.ENOSPC}
    assert statuses[-1].unrecorded_events == said_events          # the reader's trailer
    assert statuses[-1].unrecorded_errno == errno.ENOSPC

    # every reader shows it: export, pytrace-top --file, web --file, Profile
    ex = subprocess.run([PY, "-m", "pytrace", "export", str(kept), "-o", str(tmp_path / "p.txt"),
                         "-f", "collapsed"], capture_output=True, text=True, timeout=120)
    assert ex.returncode == 0, ex.stderr
    assert ("%s is incomplete: No space left on device (disk full); %d events in %d messages"
            % (kept, said_events, said_messages)) in ex.stderr, ex.stderr
    top = subprocess.run([TOP, "--file", str(kept), "--once", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert top.returncode == 0, top.stderr
    assert json.loads(top.stdout)["unrecorded_events"] == said_events
    top_text = subprocess.run([TOP, "--file", str(kept), "--once"], capture_output=True, text=True,
                              timeout=120)
    assert "events not recorded (disk full) %d" % said_events in top_text.stdout, top_text.stdout
    web = _web_status(tmp_path, kept, written)
    assert web["events"] == written and web["unrecorded"] == said_events, web
    with pytest.warns(RuntimeWarning, match="incomplete: No space left on device"):
        prof = pytrace.Profile.from_recording(str(kept))
    assert prof.counters()["unrecorded_events"] == said_events


# A recording whose writer ran out of room (RLIMIT_FSIZE stands in for a full disk: EFBIG)
# after its first messages; the rest of its events are counted in the loss slot.
_FULL_WRITER = """
import resource, sys
sys.path.insert(0, sys.argv[2])
import fbbuild as fb
from pytrace.recording import RecordingWriter
w = RecordingWriter(sys.argv[1], lossless=True, compress=False, loss_slot=True)
for t, m in [fb.process_info(4242), fb.symbol(1, 0, "f", "job.py", 1), fb.thread_start(1),
             fb.chunk(1, 0, [(1, 1, 0, 0, 0), (2, 1, 0, 1, 0)])]:
    w.append(m, t)
w.flush()
resource.setrlimit(resource.RLIMIT_FSIZE, (w.stats()["committed"], resource.RLIM_INFINITY))
for i in range(20):
    events = [(k * 10, 1, 0, kind, 0) for k in range(i * 100, i * 100 + 100) for kind in (0, 1)]
    try:
        w.append(fb.chunk(1, 2 + i * 200, events)[1], 5)
    except OSError:
        pass
try:
    w.close()
except OSError:
    pass
"""


@pytest.mark.parametrize("err", [0xFFFFFFFF, 0x80000000, 0])
def test_a_crafted_loss_slot_is_said_in_one_line_with_its_counts(tmp_path, err):
    """The loss slot of an INCOMPLETE recording is the file's word: an errno no system has
    (2**32-1, 2**31: os.strerror raised OverflowError, and export and Profile.from_recording
    died with a traceback, exporting nothing), or none with counts (export said nothing
    while Profile warned): every reader says the same counts, in one line, and keeps what
    the file holds."""
    import struct
    import warnings
    from pytrace.profile import Profile
    rec = tmp_path / "rec.ptrace"
    r = subprocess.run([PY, "-c", _FULL_WRITER, str(rec), SUPPORT],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with RecordingReader(str(rec)) as reader:
        for _ in reader.raw():
            pass
        lost = reader.unrecorded()
    assert lost == {"events": 4000, "messages": 20, "errno": errno.EFBIG}, lost
    data = bytearray(rec.read_bytes())
    slot = struct.pack("<QQI", lost["events"], lost["messages"], lost["errno"])
    at = data.find(slot)
    assert at > 0 and data.find(slot, at + 1) < 0
    data[at + 16:at + 20] = struct.pack("<I", err)
    rec.write_bytes(bytes(data))
    said = "%d events in %d messages were read and not written" % (lost["events"], lost["messages"])

    r = subprocess.run([PY, "-m", "pytrace", "export", "-f", "pstats", "-o", str(tmp_path / "out.pstats"),
                        str(rec)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "out.pstats").stat().st_size > 0
    lines = [line for line in r.stderr.splitlines() if "is incomplete" in line]
    assert len(lines) == 1 and said in lines[0], r.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = Profile.from_recording(str(rec))
    assert [str(w.message) for w in caught if said in str(w.message)], [str(w.message) for w in caught]
    assert prof.counters()["unrecorded_events"] == lost["events"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to mount a small tmpfs")
def test_disk_full_at_the_first_flush(tmp_path):
    """A disk with 8 KiB left: the recorder's first batch does not fit. The loss slot went
    out with that batch and was cut with it: a 16-byte file, INCOMPLETE with no count (every
    reader said 0 events lost, record said 600,000). The file holds the count record says."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "out.pytrace"
    inner = ("mount -t tmpfs -o size=8k tmpfs %s && %s -m pytrace record -o %s -- %s %s 1; rc=$?; "
             "cp %s %s/kept.pytrace; exit $rc") % (disk, PY, out, PY, job, out, tmp_path)
    r = subprocess.run(["unshare", "-m", "sh", "-c", inner], capture_output=True, text=True, timeout=300)
    assert r.returncode == 3 and "job done" in r.stdout, (r.returncode, r.stderr)
    m = re.search(r"is incomplete: No space left on device \(disk full\); (\d+) events in (\d+) messages",
                  r.stderr)
    assert m and int(m.group(1)) > 0, r.stderr
    kept = tmp_path / "kept.pytrace"
    with RecordingReader(str(kept)) as rec:
        for _ in rec.raw():
            pass
        assert rec.incomplete
        assert rec.unrecorded() == {"events": int(m.group(1)), "messages": int(m.group(2)),
                                    "errno": errno.ENOSPC}
    ex = subprocess.run([PY, "-m", "pytrace", "export", str(kept), "-o", str(tmp_path / "p.txt"),
                         "-f", "collapsed"], capture_output=True, text=True, timeout=120)
    assert "%s events in %s messages" % (m.group(1), m.group(2)) in ex.stderr, ex.stderr
