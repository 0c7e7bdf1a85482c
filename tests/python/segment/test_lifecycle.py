"""Readers and jobs come and go: a job exiting under a reader, a reader killed under a
job, a second reader refused while one holds the segment."""

import errno
import os
import re
import subprocess
import time

import pytest

import pytrace
from helpers import CORPUS, PY, corpus, spawn_drain

ANNOUNCE = re.compile(r"^pytrace: tracing pid (\d+) into (\S+); attach with: pytrace-top (\d+)$")


def start_job(*args, options=()):
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", *options, *args], cwd=CORPUS,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline().rstrip("\n")
    m = ANNOUNCE.match(line)
    assert m, "unexpected first stderr line %r (rc=%s)" % (line, proc.poll())
    assert int(m.group(1)) == proc.pid == int(m.group(3))
    return proc, m.group(2)


def wait_file(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "%s never appeared" % path
        time.sleep(0.005)


def load(path):
    import json
    with open(path) as f:
        return json.load(f)


def test_reader_gets_every_event_of_a_job_that_exits(tmp_path):
    go, out = str(tmp_path / "go"), str(tmp_path / "out.json")
    job, segment = start_job(corpus("busy"), go, "--threads", "3",
                             options=("--policy", "wait"))
    drain = spawn_drain(segment, out, go)
    stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == 0, stderr
    assert stdout == "done\n"
    assert "pytrace: tracing" not in stderr          # announced once, on the first line
    _, err = drain.communicate(timeout=60)
    assert drain.returncode == 0, err
    seen = load(out)
    assert seen["finished"], seen["error"]
    assert seen["states"] and seen["states"][-1] == 3            # EXITED, and it came last
    # the producer's own count, from the last ProducerStatus (EXITED)
    status = seen["status"]
    assert status["events_dropped"] == 0 and status["hook_errors"] == 0
    assert seen["events_read"] == status["events_written"] > 20000
    assert sum(w for _, w, _ in seen["thread_ends"]) <= seen["events_read"]
    assert seen["stats"]["events_read"] == seen["events_read"]
    assert seen["gaps"] == 0 and seen["tree"]["lost"] == 0
    ended = {t for t, _, _ in seen["thread_ends"]}
    assert len({t for t, _ in seen["thread_starts"]}) >= 3
    assert ended  # worker threads ended while the reader was attached


def _take_over(tmp_path, job_args=(), options=(), while_first=None):
    """Run corpus/busy.py traced; a first reader drains it for a while and is killed, then
    a second reader attaches and reads to the end. while_first(segment) runs while the
    first one holds the segment. Returns (job stdout, what the second reader saw)."""
    go1, go2 = str(tmp_path / "go1"), str(tmp_path / "go2")
    out1, out2 = str(tmp_path / "out1.json"), str(tmp_path / "out2.json")
    job, segment = start_job(corpus("busy"), go1, go2, *job_args, options=options)
    try:
        first = spawn_drain(segment, out1, go1)
        wait_file(go1)
        time.sleep(0.3)
        if while_first:
            while_first(segment)
        first.kill()
        first.wait(timeout=10)
        time.sleep(0.2)
        assert job.poll() is None, "the job died with its reader"
        second = spawn_drain(segment, out2, go2)
        stdout, stderr = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    return stdout, load(out2)


def test_killed_reader_leaves_the_job_alone_and_a_new_reader_reads_on(tmp_path):
    def one_reader_at_a_time(segment):
        with pytest.raises(OSError) as busy:
            pytrace.Reader(segment)
        assert busy.value.errno == errno.EBUSY

    stdout, seen = _take_over(tmp_path, while_first=one_reader_at_a_time)
    assert stdout == "done\n"
    assert seen["events_read"] > 0
    assert seen["finished"] and seen["states"][-1] == 3
    assert seen["error"] in ("", None)


def _paths(tree):
    """Qualname paths of every node with calls, over all threads."""
    from helpers import qualname_of
    found = {}
    for rows in tree["threads"].values():
        for i, (parent, key, calls) in enumerate(rows):
            names, j = [], i
            while j > 0:
                names.append(qualname_of(rows[j][1]))
                j = rows[j][0]
            path = " > ".join(reversed(names))
            found[path] = found.get(path, 0) + calls
    return found


def test_reader_that_starts_mid_stream_gets_the_stack(tmp_path):
    """A reader that takes over from one that read the beginning asks the producer for
    each live thread's stack: Frame records come soon after its position, so the frames
    opened before it (main, here) are the roots of what it sees, not missing."""
    # a ring that does not fill while no reader is attached: no gap, so no Lost record
    # and no stack after one -- the Frame records below answer the request alone
    _, seen = _take_over(tmp_path, job_args=("--linger", "1.0"),
                         options=("--no-c-calls", "--ring-size", "64"))
    assert seen["finished"] and seen["error"] in ("", None)
    assert seen["kinds"].get("12", 0) == 0 and seen["tree"]["lost"] == 0, "the ring dropped"
    assert seen["kinds"].get("13", 0) > 0, "no Frame records in the second reader's stream"
    paths = _paths(seen["tree"])
    assert any(p.endswith("main > phase") and calls > 0 for p, calls in paths.items()), \
        sorted(paths)[:20]


def test_reader_refuses_what_is_not_a_segment():
    with pytest.raises(OSError) as e:
        pytrace.Reader("/pytrace-999999999-0")
    assert e.value.errno == errno.ENOENT
    assert "\n" not in str(e.value)
