"""Mutated recordings through every reader a user runs on a file: each exporter and
pytrace-top --file --once (text and JSON). A damaged file may be refused or read up to
the damage, but no tool dies of a signal, prints a Python traceback or hangs; a Perfetto
trace written from it parses and its slices nest.

The mutations are seeded (PYTRACE_FUZZ_SEED, default 1) and bounded in number
(PYTRACE_FUZZ_MUTATIONS, default 24), so a failure reproduces."""

import os
import random
import shutil
import struct
import subprocess

import pytest

from helpers import PY
from pftrace_reader import check_nesting, read_trace

SEED = int(os.environ.get("PYTRACE_FUZZ_SEED", "1"))
COUNT = int(os.environ.get("PYTRACE_FUZZ_MUTATIONS", "24"))
HEADER = 16

JOB = """
import json, threading
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
def gen():
    yield from range(3)
def work():
    fib(10); list(gen()); json.dumps({"a": [1, 2]})
    try:
        raise ValueError
    except ValueError:
        pass
t = threading.Thread(target=work); t.start(); work(); t.join()
"""


def top_binary():
    return shutil.which("pytrace-top") or os.path.join(os.path.dirname(PY), "pytrace-top")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzzrec")
    (d / "job.py").write_text(JOB)
    out = d / "base.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(out), "--", PY, str(d / "job.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


def _messages(data):
    """(offset, size) of each size-prefixed message after the header."""
    out, off = [], HEADER
    while off + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, off)
        if off + 4 + size > len(data):
            break
        out.append((off, size))
        off += (4 + size + 7) & ~7
    return out


def mutate(data, rng):
    b = bytearray(data)
    msgs = _messages(data)
    kind = rng.randrange(7)
    if kind == 0:                                   # bit flips anywhere
        for _ in range(rng.randint(1, 16)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:                                 # truncation
        del b[rng.randrange(HEADER, len(b)):]
    elif kind == 2 and msgs:                        # a size prefix made wrong
        off, size = rng.choice(msgs)
        struct.pack_into("<I", b, off, rng.choice([0, 1, size + 8, 0x7FFFFFFF, 0xFFFFFFFF]))
    elif kind == 3 and msgs:                        # event ticks near 2^64
        off, size = rng.choice([m for m in msgs if m[1] > 200] or msgs)
        for _ in range(rng.randint(1, 8)):
            p = off + 4 + rng.randrange(max(1, size - 16)) & ~7
            struct.pack_into("<Q", b, p, (1 << 64) - 1 - rng.randrange(1 << 20))
    elif kind == 4 and msgs:                        # huge ids / counts
        off, size = rng.choice(msgs)
        for _ in range(rng.randint(1, 8)):
            p = off + 4 + (rng.randrange(max(1, size - 4)) & ~3)
            struct.pack_into("<I", b, p, rng.choice([0xFFFFFFFF, 0x80000000, 1 << 20]))
    elif kind == 5 and len(msgs) > 2:               # messages duplicated or swapped
        a, c = rng.sample(msgs, 2)
        chunk_a = bytes(b[a[0]:a[0] + 4 + a[1]])
        b[c[0]:c[0]] = chunk_a + b"\0" * ((-len(chunk_a)) % 8)
    else:                                           # random bytes spliced in
        i = rng.randrange(HEADER, len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(b)


def _run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode >= 0, "%s died of signal %d" % (what, -r.returncode)
    assert "Traceback" not in r.stderr, "%s printed a traceback:\n%s" % (what, r.stderr[-3000:])
    if r.returncode != 0:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert lines, "%s failed (exit %d) without saying why" % (what, r.returncode)
    return r


@pytest.mark.parametrize("case", range(COUNT))
def test_mutated_recording_never_kills_a_reader(recording, tmp_path, case):
    rng = random.Random(SEED * 1000003 + case)
    data = mutate(recording, rng)
    path = tmp_path / "m.pytrace"
    path.write_bytes(data)
    for fmt, ext in (("collapsed", "folded"), ("pstats", "pstats"), ("chrome", "json"),
                     ("perfetto", "pftrace"), ("speedscope", "json")):
        out = tmp_path / ("o." + ext)
        _run([PY, "-m", "pytrace", "export", str(path), "-f", fmt, "-o", str(out)],
             "export -f %s (case %d)" % (fmt, case))
        if fmt == "perfetto" and out.exists():
            # what was exported up to the damage is a valid trace whose slices nest
            for track in read_trace(out)[2].values():
                check_nesting(track)
            out.unlink()
    _run([top_binary(), "--file", str(path), "--once"], "pytrace-top --once (case %d)" % case)
    _run([top_binary(), "--file", str(path), "--once", "--json"], "pytrace-top --json (case %d)" % case)
