"""Exports of hostile or extreme recordings stay linear in time and bounded in memory:
1 M returns without calls under a 5,000-deep stack (each used to scan the whole stack:
minutes), and a 6,000-deep recursion exported to collapsed stacks (the exporter cached
every whole path: memory quadratic in the depth, 7.3 GB at 60,000)."""

import os
import struct
import subprocess
import time

import pytest

from helpers import PY
import synthetic as syn
from pytrace.reader import EventKind
from pytrace.recording import RecordingWriter

CALL, RETURN = int(EventKind.Call), int(EventKind.Return)
CHUNK = 10_000
_EV = struct.Struct("<QIHBB")


def _write(path, thread_events, symbols):
    """A recording of one thread: ProcessInfo, Symbols, ThreadStart, EventChunks of
    CHUNK events (packed into a template chunk: building each event through the
    FlatBuffers builder would take minutes), ThreadEnd, ProducerStatus(exited)."""
    template = syn.event_chunk(1, [(0, 0, 0, 0, 0)] * CHUNK)
    head = len(template) - 16 * CHUNK
    with RecordingWriter(path, lossless=True) as w:
        w.append(syn.process_info(pid=4242))
        for sid, name in symbols:
            w.append(syn.symbol(sid, name))
        w.append(syn.thread_start(1))
        n = 0
        for i in range(0, len(thread_events), CHUNK):
            part = thread_events[i:i + CHUNK]
            if len(part) < CHUNK:
                w.append(syn.event_chunk(1, part, first_event=i))
            else:
                buf = bytearray(template)
                buf[head:] = b"".join(_EV.pack(*e) for e in part)
                w.append(bytes(buf))
            n += len(part)
        last = thread_events[-1][0] if thread_events else 0
        w.append(syn.thread_end(1, last + 1, events_written=n))
        w.append(syn.producer_status(state=3, events_written=n))


def _export(path, fmt, out, timeout):
    t0 = time.monotonic()
    try:
        r = subprocess.run([PY, "-m", "pytrace", "export", str(path), "-f", fmt, "-o", str(out)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("export -f %s did not finish in %d s" % (fmt, timeout)) from None
    assert r.returncode == 0, r.stderr
    return time.monotonic() - t0, r.stderr


@pytest.fixture(scope="module")
def unmatched_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("bounds") / "unmatched.pytrace"
    depth = 5_000
    events = [(t, 1 + t % 50, 0, CALL, 0) for t in range(depth)]
    events += [(depth + t, 100 + t % 1000, 0, RETURN, 0) for t in range(1_000_000)]
    symbols = [(i, "f%d" % i) for i in range(1, 51)] + [(i, "g%d" % i) for i in range(100, 1100)]
    _write(path, events, symbols)
    return path


@pytest.mark.parametrize("fmt", ["collapsed", "pstats", "speedscope", "chrome", "perfetto"])
def test_unmatched_returns_are_linear(unmatched_recording, tmp_path, fmt):
    """1 M returns of functions never called, under a 5,000-deep stack: every exporter
    finishes (each return used to scan the 5,000 frames: 5e9 steps)."""
    # about 1 s each here; the stack scans took over 100 s
    seconds, err = _export(unmatched_recording, fmt, tmp_path / ("out." + fmt), timeout=30)
    print("%s: %.1f s" % (fmt, seconds))


def _peak_rss_mib(cmd, timeout):
    """The child's peak RSS, from VmHWM in /proc (the high-water mark of its own address
    space since exec; rusage's maxrss would also count what the forking test process
    held)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    hwm_kib = 0
    while proc.poll() is None:
        try:
            with open("/proc/%d/status" % proc.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm_kib = max(hwm_kib, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError("%s did not finish in %d s" % (cmd, timeout))
        time.sleep(0.02)
    assert proc.returncode == 0, proc.stderr.read().decode()
    return hwm_kib / 1024


def test_deep_recursion_collapsed_memory_is_bounded(tmp_path):
    """A 6,000-deep recursion has 6,000 distinct stacks, each with self time: the
    collapsed export writes 6,000 lines (the format's own size, quadratic in the depth:
    380 MB here) while its memory stays bounded (it cached every whole path, as much
    again as the output)."""
    path = tmp_path / "deep.pytrace"
    depth = 6_000
    events = [(2 * t, 1, 0, CALL, 0) for t in range(depth)]
    events += [(2 * depth + 2 * t, 1, 0, RETURN, 0) for t in range(depth)]
    _write(path, events, [(1, "recurse")])
    out = tmp_path / "deep.folded"
    # whole stacks, as asked for (by default they are cut at 256 frames: test_export_limits.py)
    rss = _peak_rss_mib([PY, "-m", "pytrace", "export", str(path), "-f", "collapsed", "-o", str(out),
                         "--max-depth", "0", "--max-size", "0"], timeout=600)
    lines = 0
    with open(out) as f:
        for _ in f:
            lines += 1
    assert lines == depth
    print("peak RSS %.0f MiB, output %.0f MiB" % (rss, out.stat().st_size / 2**20))
    assert rss < 150, "collapsed export of a 6,000-deep recursion peaked at %.0f MiB" % rss
