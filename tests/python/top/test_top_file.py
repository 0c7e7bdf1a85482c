"""End-to-end tests of `pytrace-top --file`: a recording of a known workload (`work3`
does three times the loop iterations of `work1`, both on the main thread; a second
thread runs `side_work`) shown headless (`--once [--json]`) and under tmux, plus damaged
recordings (truncated, flipped, not a recording) and a recording read while it is
still being written.

The recording is made with `pytrace record` when it is installed; otherwise the test
writes it itself from a live segment (`pytrace._pytrace.Reader(...).poll()` bytes) in the
recording format: 16-byte header "PYTRREC\\0", u16 major 1, u16 minor 0, u32 flags;
then each size-prefixed message padded with zeros to a multiple of 8.

Needs: the package installed (`pip install /work/main`, which puts pytrace-top on
PATH) or PYTRACE_TOP pointing at a built binary; tmux for the interactive tests. No test
asserts a duration; own-time ratios are checked with a tolerance.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time

import pytest

from topkit import TOP, WORKLOAD, Tmux, rows_by_name, table_names, table_order

PY = sys.executable

HEADER = struct.Struct("<8sHHI")
MAGIC = b"PYTRREC\x00"


def _runs(*args):
    try:
        return subprocess.run([PY, *args], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


HAVE_PYTRACE = _runs("-c", "import pytrace, pytrace.cli, pytrace._pytrace")
HAVE_RECORD = HAVE_PYTRACE and _runs("-m", "pytrace", "record", "--help")
HAVE_TMUX = shutil.which("tmux") is not None


pytestmark = [
    pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed (pip install /work/main)"),
    pytest.mark.skipif(not HAVE_PYTRACE, reason="the pytrace package is not installed"),
]
needs_tmux = pytest.mark.skipif(not HAVE_TMUX, reason="tmux is not installed")


# ---- making recordings ---------------------------------------------------------------

def _record_with_cli(script, out, seconds):
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", out, "--", PY, script, str(seconds)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def _record_by_hand(script, out, seconds):
    """The recording format written here from the reader's own message bytes."""
    from pytrace import _pytrace
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", "--policy", "wait", script, str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    segment = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not segment:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"into (/pytrace-\S+?);", line)
        if m:
            segment = m.group(1)
    assert segment, "the traced workload did not announce its segment"
    reader = _pytrace.Reader(segment)
    try:
        with open(out, "wb") as f:
            f.write(HEADER.pack(MAGIC, 1, 0, 1))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                for _msg_type, data in reader.poll(0):
                    f.write(data)
                    f.write(b"\0" * (-len(data) & 7))
                if reader.finished:
                    break
                time.sleep(0.005)
    finally:
        reader.close()
        proc.wait(timeout=60)
        try:
            os.unlink("/dev/shm" + segment)
        except OSError:
            pass


def make_recording(tmp, seconds):
    script = os.path.join(str(tmp), "workload_file.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    out = os.path.join(str(tmp), "workload.pytrace")
    if HAVE_RECORD:
        _record_with_cli(script, out, seconds)
    else:
        _record_by_hand(script, out, seconds)
    return out


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return make_recording(tmp_path_factory.mktemp("topfile"), 2)


def message_offsets(data):
    """[(offset, size-prefixed length)] of every message in a sound recording."""
    out = []
    off = HEADER.size
    while off + 4 <= len(data):
        size = struct.unpack_from("<I", data, off)[0]
        out.append((off, 4 + size))
        off += (4 + size + 7) & ~7
    assert off == len(data), "the recording under test is not sound"
    return out


FLAG_FINISHED = 0x2


def _with_flags(data, set_bits, clear_bits):
    magic, major, minor, flags = HEADER.unpack_from(data, 0)
    return HEADER.pack(magic, major, minor, (flags | set_bits) & ~clear_bits) + bytes(data[HEADER.size:])


def _unfinished(data):
    return _with_flags(data, 0, FLAG_FINISHED)


def _finished(data):
    return _with_flags(data, FLAG_FINISHED, 0)


def run_top(path, *args, timeout=120):
    return subprocess.run([TOP, "--file", str(path), "--once", *args], capture_output=True, text=True,
                          timeout=timeout)


def once_json(path, *args):
    r = run_top(path, "--json", *args)
    return r, json.loads(r.stdout)




# ---- headless ----------------------------------------------------------------------

def test_once_json_shows_functions_and_3_to_1_own_time(recording):
    r, doc = once_json(recording)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert doc["state"] == "ENDED"
    assert doc["recording_ended"] is True
    assert "error" not in doc and doc["error_offset"] == -1
    assert doc["bytes_read"] == os.path.getsize(recording)
    rows = rows_by_name(doc)
    for name in ("work3", "work1", "side_work", "main"):
        assert name in rows, sorted(rows)
    w3, w1 = rows["work3"], rows["work1"]
    assert w3["calls"] > 10 and w1["calls"] > 10
    assert abs(w3["calls"] - w1["calls"]) <= 1
    ratio = w3["self_ns"] / w1["self_ns"]
    assert 2.2 < ratio < 4.0, ratio
    assert w3["file"].endswith("workload_file.py")
    assert doc["events_read"] > 0 and doc["events_read"] == doc["events_seen"]
    assert len(doc["threads"]) >= 2
    assert all(t["ended"] for t in doc["threads"])


def test_once_text_table_says_ENDED(recording):
    r = run_top(recording, "--limit", "5")
    assert r.returncode == 0, r.stderr
    assert "[ENDED]" in r.stdout
    assert re.search(r"work3\s+\S*workload_file\.py:\d+", r.stdout), r.stdout


def test_a_recording_has_no_cpu_figures(recording):
    """CPU use comes from the kernel while a job runs; a recording has none, and says so
    rather than inventing one."""
    r, doc = once_json(recording)
    assert r.returncode == 0, r.stderr
    assert doc["cpu_pct"] is None and doc["cpu_seconds"] is None and doc["cpu_basis"] is None, doc
    assert doc["threads"] and all(t["cpu_pct"] is None and t["cpu_seconds"] is None for t in doc["threads"])
    text = run_top(recording, "--limit", "3").stdout.splitlines()
    assert text[0].endswith("cpu n/a (a recording has no CPU figures)"), text[0]
    assert [line.split()[2] for line in text[2:2 + len(doc["threads"])]] == ["n/a"] * len(doc["threads"]), text


def test_thread_filter_on_a_recording(recording):
    _, doc = once_json(recording)
    seen = []
    for t in doc["threads"]:
        _, d = once_json(recording, "--thread", str(t["thread"]))
        seen.append(set(rows_by_name(d)))
    assert any("work3" in s and "side_work" not in s for s in seen), seen
    assert any("side_work" in s and "work3" not in s for s in seen), seen


def test_window_is_relative_to_the_recordings_last_tick(recording):
    # The recording ended well over a second ago; a 1 s window still shows its last second.
    _, whole = once_json(recording)
    _, last = once_json(recording, "--window", "1")
    rows = rows_by_name(last)
    assert "work3" in rows and "work1" in rows, sorted(rows)
    assert rows["work3"]["self_ns"] < rows_by_name(whole)["work3"]["self_ns"]


def _one_line_error(r, offset):
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "byte offset %d" % offset in lines[0], lines[0]
    return lines[0]


def test_truncated_recording_shows_what_was_read_and_the_offset(recording, tmp_path):
    data = open(recording, "rb").read()
    msgs = message_offsets(data)
    _, full = once_json(recording)
    # cut inside a message in the second half
    k = len(msgs) * 2 // 3
    off, length = msgs[k]
    cut = os.path.join(str(tmp_path), "cut.pytrace")
    with open(cut, "wb") as f:
        f.write(data[:off + length // 2])
    r, doc = once_json(cut)
    line = _one_line_error(r, off)
    assert "truncated" in line
    assert doc["error_offset"] == off
    assert doc["messages_read"] == k
    assert doc["state"] == "DAMAGED"
    assert 0 < doc["events_read"] < full["events_read"]
    assert "work3" in rows_by_name(doc)


def test_truncated_at_a_message_boundary_is_an_incomplete_recording(recording, tmp_path):
    data = open(recording, "rb").read()
    msgs = message_offsets(data)
    off, _ = msgs[len(msgs) // 2]
    cut = os.path.join(str(tmp_path), "boundary.pytrace")
    with open(cut, "wb") as f:
        f.write(_unfinished(data[:off]))  # the writer was killed: no FINISHED flag, no end
    r, doc = once_json(cut)
    assert r.returncode == 0, r.stderr
    assert doc["recording_ended"] is False
    assert doc["state"] == "INCOMPLETE"
    assert doc["messages_read"] == len(msgs) // 2
    assert "work3" in rows_by_name(doc)


def test_finished_flag_after_a_torn_tail_is_truncation(recording, tmp_path):
    data = open(recording, "rb").read()
    msgs = message_offsets(data)
    off, length = msgs[len(msgs) // 2]
    cut = os.path.join(str(tmp_path), "torn.pytrace")
    with open(cut, "wb") as f:
        f.write(_finished(data[:off + 5]))
    r, doc = once_json(cut)
    assert "truncated" in _one_line_error(r, off)
    assert doc["recording_ended"] is False


def test_flipped_identifier_is_reported_at_its_message(recording, tmp_path):
    data = bytearray(open(recording, "rb").read())
    msgs = message_offsets(bytes(data))
    k = len(msgs) // 3
    off, _ = msgs[k]
    data[off + 8] ^= 0xFF  # "PYTR" -> not a pytrace message
    bad = os.path.join(str(tmp_path), "flipped.pytrace")
    with open(bad, "wb") as f:
        f.write(data)
    r, doc = once_json(bad)
    line = _one_line_error(r, off)
    assert "verification" in line
    assert doc["messages_read"] == k
    assert doc["error_offset"] == off


def test_every_flipped_byte_of_a_small_prefix_never_crashes(recording, tmp_path):
    data = open(recording, "rb").read()
    msgs = message_offsets(data)
    end = msgs[min(12, len(msgs) - 1)][0]
    bad = os.path.join(str(tmp_path), "flip.pytrace")
    for at in range(0, end, 3):
        d = bytearray(data[:end])
        d[at] ^= 0xA5
        with open(bad, "wb") as f:
            f.write(d)
        r = run_top(bad, "--json")
        assert r.returncode in (0, 1), (at, r.returncode, r.stderr)  # never a signal
        json.loads(r.stdout)


def test_not_a_recording(tmp_path):
    bad = os.path.join(str(tmp_path), "notes.txt")
    with open(bad, "w") as f:
        f.write("these are not the bytes you are looking for\n")
    r, doc = once_json(bad)
    line = _one_line_error(r, 0)
    assert "not a pytrace recording" in line
    assert doc["functions"] == []

    newer = os.path.join(str(tmp_path), "v3.pytrace")
    with open(newer, "wb") as f:
        f.write(HEADER.pack(MAGIC, 3, 0, 0))  # a major this pytrace does not know
    r = run_top(newer)
    assert "unsupported recording format" in _one_line_error(r, 8)

    r = run_top(os.path.join(str(tmp_path), "missing.pytrace"))
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "missing.pytrace" in r.stderr


def _write_slowly(src, dst, pieces, pause):
    """Write src to dst in pieces cut at odd places (inside headers and messages)."""
    data = _unfinished(open(src, "rb").read())
    step = max(1, len(data) // pieces)
    with open(dst, "r+b") as f:
        pos = 0
        while pos < len(data):
            n = step + 13 if pos else 7  # the first piece ends inside the file header
            f.write(data[pos:pos + n])
            f.flush()
            pos += n
            time.sleep(pause)
        f.seek(0)  # closed normally: the writer sets FINISHED last
        f.write(_finished(data)[:HEADER.size])


@pytest.mark.parametrize("follow", [True, False], ids=["follow", "growing"])
def test_file_being_written_is_read_to_its_end(recording, tmp_path, follow):
    _, full = once_json(recording)
    dst = os.path.join(str(tmp_path), "growing.pytrace")
    open(dst, "wb").close()
    writer = threading.Thread(target=_write_slowly, args=(recording, dst, 12, 0.1))
    writer.start()
    try:
        r, doc = once_json(dst, *(["--follow"] if follow else []))
    finally:
        writer.join()
    assert r.returncode == 0, r.stderr
    assert doc["state"] == "ENDED"
    assert doc["events_read"] == full["events_read"]
    assert rows_by_name(doc)["work3"]["calls"] == rows_by_name(full)["work3"]["calls"]


# ---- interactive ---------------------------------------------------------------------

@needs_tmux
def test_interactive_views_of_a_recording(recording):
    t = Tmux("--file %s" % recording)
    try:
        s = t.wait_for(lambda s: "work3" in s and "work1" in s, what="the table")
        head = s.splitlines()[0]
        assert "ENDED" in head and "file" in head and "table" in head
        assert "cpu n/a" in head      # a recording has no CPU figures
        assert "recording ended" in s
        pos = table_order(s, ["work3", "work1"])
        assert pos["work3"] < pos["work1"]  # own time, descending
        t.keys("/", "work", "Enter")  # the table is long: keep work1/work3 on screen
        # main() is no row of the table (the header's command line may hold "main": a venv's path)
        t.wait_for(lambda s: "filter: work" in s and "work3" in s and "main" not in table_names(s),
                   what="filtered to work*")
        t.keys("n")
        t.wait_for(lambda s: "sort name" in s and table_order(s, ["work3", "work1"]).get("work1", 99) <
                   table_order(s, ["work3", "work1"]).get("work3", 0), what="sorted by name")
        t.keys("o")
        t.wait_for(lambda s: "sort own" in s, what="sorted by own time")
        t.keys("/", "Escape")
        t.wait_for(lambda s: "filter:" not in s, what="filter cleared")
        # flame view: the window is the recording's last seconds, not the wall clock's
        t.keys("Tab")
        t.wait_for(lambda s: "flame" in s.splitlines()[0] and "OWN%" not in s and "work3" in s,
                   what="work3 in the flame view")
        for _ in range(6):
            t.keys("-")
        s = t.wait_for(lambda s: "window 1s" in s.splitlines()[0], what="a 1 s window")
        t.wait_for(lambda s: "work3" in s and "no time in the window" not in s, what="work3 in the last second")
        t.keys("Down", "Down", "Enter")
        t.wait_for(lambda s: "zoomed" in s, what="zoomed flame")
        t.keys("BSpace", "BSpace")
        t.wait_for(lambda s: "zoomed" not in s, what="zoomed out")
        t.keys("Tab")
        t.wait_for(lambda s: "OWN%" in s, what="back to the table")
        # threads and filter
        screens = []
        for row in (1, 2):  # the thread list (T): "all threads", then each (ended) thread
            t.keys("T")
            t.wait_for(lambda s: "pick a thread" in s, what="the thread list")
            t.keys("PPage", *["Down"] * row, "Enter")  # PgUp: the top row
            t.wait_for(lambda s: re.search(r"thread \d+", s.splitlines()[0]), what="one thread selected")
            time.sleep(0.5)
            screens.append(t.screen())
        assert any("work3" in s and "side_work" not in s for s in screens), screens
        assert any("side_work" in s and "work3" not in s for s in screens), screens
        t.keys("T", "a")
        t.wait_for(lambda s: "all threads" in s.splitlines()[0], what="all threads")
        t.keys("/", "work3", "Enter")
        s = t.wait_for(lambda s: "filter: work3" in s and "work1" not in s, what="filtered table")
        assert "work3" in s
    finally:
        t.close()


@needs_tmux
def test_interactive_damaged_recording_shows_the_offset(recording, tmp_path):
    data = open(recording, "rb").read()
    msgs = message_offsets(data)
    off, length = msgs[len(msgs) * 2 // 3]
    cut = os.path.join(str(tmp_path), "cut.pytrace")
    with open(cut, "wb") as f:
        f.write(data[:off + length - 1])
    t = Tmux("--file %s" % cut)
    try:
        # the header (with the offset) and the table are drawn apart: a capture can land between
        s = t.wait_for(lambda s: "byte offset %d" % off in s and "work3" in s,
                       what="the damage offset and what was read before it")
        assert "work3" in s  # what was read before the damage is shown
        assert "DAMAGED" in s.splitlines()[0]
    finally:
        t.close()
