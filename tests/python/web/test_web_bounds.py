"""pytrace web within bounds, and its answers right: real servers (`pytrace web`) on
loopback, real HTTP, real chromium through playwright where the page is involved.

- the pages' sessions share one memory budget (--sessions-mib): many page loads keep
  the server's RSS within it plus a margin, and a page whose session was evicted gets
  the whole picture again, transparently;
- a bad query (a NUL in the filter) gets a one-line 400, never a traceback;
- the tab of a multi-process recording names the job (process 0), whichever process
  the page shows, and each process's status names its own pid and command;
- the dropped count is one definition: the web status line and pytrace-top (--once
  --json) on the same job through one hub say the same number with the same cause, and
  a view's own gaps in the hub are counted apart, with theirs.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import pytest

from helpers import PY
from webkit import WebServer, _page, _wait, browser, needs_browser  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

MIB = 1 << 20

# Many distinct functions called along random paths: a big tree and table, so that each
# page's session holds megabytes (the issue: 64 page loads took 2.26 GB).
MANY = textwrap.dedent("""
    import random, sys
    N = int(sys.argv[1])
    src = ["def f%d(d, r):\\n    if d <= 0: return 0\\n    return FS[r.randrange(%d)](d - 1, r) + 1\\n"
           % (i, N) for i in range(N)]
    ns = {}
    exec(compile("".join(src), "generated_module_with_a_long_file_name.py", "exec"), ns)
    FS = [ns["f%d" % i] for i in range(N)]
    ns["FS"] = FS
    r = random.Random(1)
    for _ in range(20):
        for _ in range(2000):
            FS[r.randrange(N)](3, r)
""")


def _rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _get(srv, **q):
    q.setdefault("token", srv.token)
    url = srv.base + "/api/update?" + urllib.parse.urlencode(q)
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


import urllib.parse  # noqa: E402


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("many")
    script = tmp / "many.py"
    script.write_text(MANY)
    rec = tmp / "many.pytrace"
    p = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(script), "3000"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return rec


def _whole(srv, sid, window=10):
    """The picture a fresh page of session sid gets once the file is read (window: the
    page's default view, the last 10 s)."""
    deadline = time.monotonic() + 120
    while "the recording is read" not in open(srv.log.name).read():    # all of it is fed
        assert time.monotonic() < deadline and srv.proc.poll() is None
        time.sleep(0.2)
    while True:
        code, body = _get(srv, session=sid, version=0, window=window)
        assert code == 200, body
        d = json.loads(body)
        if d["status"]["state"] in ("exited", "died") and d["rows"]:
            return d
        assert time.monotonic() < deadline, d["status"]
        time.sleep(0.3)


@pytest.mark.reading_side   # the web server's bounds and answers (conftest.py)
@needs_browser
def test_web_sessions_share_one_memory_budget_and_an_evicted_page_gets_the_whole_picture(
        many, tmp_path, browser):
    """80 page loads of a picture of ~3,000 functions (~2.5 MB a session) with
    --sessions-mib 16: the server's RSS grows by at most the budget plus a margin (it
    kept 64 sessions, whatever their size). The page opened first, in chromium, has its
    session evicted meanwhile and goes on showing every row: its next poll gets the
    whole picture (full), not a delta against what the server no longer holds."""
    srv = WebServer(tmp_path, ["--file", str(many), "--sessions-mib", "16"])
    try:
        first = _whole(srv, "probe")
        rows = len(first["rows"])
        assert rows > 2500
        errors = []
        context, page = _page(browser, errors)
        page.goto(srv.url)
        _wait(page, "pytrace.state.rows.size === %d" % rows)
        base = _rss(srv.proc.pid)
        for i in range(80):
            code, body = _get(srv, session="load%d" % i, version=0, window=10)
            assert code == 200
            assert len(json.loads(body)["rows"]) == rows
        grown = _rss(srv.proc.pid) - base
        # margin: the answers being built and the allocator's arenas a freed session leaves
        # partly used (without the budget: 305 MiB here)
        assert grown <= 16 * MIB + 64 * MIB, "RSS grew %.0f MiB for 80 sessions" % (grown / MIB)
        # the probe's session was evicted: its version is no longer the server's
        code, body = _get(srv, session="probe", version=first["version"], window=10)
        again = json.loads(body)
        assert again["full"] is True and len(again["rows"]) == rows
        # the page in chromium (evicted too) still shows every row after its next polls
        n = page.evaluate("pytrace.state.updates")
        _wait(page, "pytrace.state.updates > %d + 2 && pytrace.state.rows.size === %d" % (n, rows))
        assert errors == [], errors
        context.close()
    finally:
        log = srv.stop()
    assert "Traceback" not in log, log


@pytest.mark.reading_side   # the web server's bounds and answers (conftest.py)
def test_web_bad_filter_gets_a_one_line_400_not_a_traceback(many, tmp_path):
    srv = WebServer(tmp_path, ["--file", str(many)])
    try:
        code, body = _get(srv, session="x", version=0, window=0, filter="a\0b")
        assert code == 400 and body.count(b"\n") <= 1 and b"bad query" in body
        code, body = _get(srv, session="x", version=0, window=0, filter="f1")
        assert code == 200          # the server goes on
    finally:
        log = srv.stop()
    assert "Traceback" not in log, log


POOL = textwrap.dedent("""
    import multiprocessing as mp, os
    def work(i):
        return sum(range(3000))
    if __name__ == "__main__":
        # close and join: both workers end normally (the with block alone terminate()s
        # them, and a worker killed before it started tracing is in no recording)
        with mp.get_context("spawn").Pool(2) as p:
            p.map(work, range(20), chunksize=1)
            p.close()
            p.join()
""")


@needs_browser
def test_web_multiprocess_recording_names_each_process_and_the_tab_names_the_job(tmp_path, browser):
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    rec = tmp_path / "pool.pytrace"
    p = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(script)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    from pytrace.profile import Profile
    from pytrace.recording import RecordingReader
    prof = Profile()
    with RecordingReader(str(rec)) as r:
        prof.read(r)
    truth = {e.pid: e.command_line for e in prof.processes()}
    job_pid = prof.processes()[0].pid
    assert len(truth) >= 3
    srv = WebServer(tmp_path, ["--file", str(rec)])
    try:
        deadline = time.monotonic() + 60
        while True:
            code, body = _get(srv, session="list", version=0, window=0)
            procs = json.loads(body)["processes"]
            if len(procs) == len(truth):
                break
            assert time.monotonic() < deadline, procs
            time.sleep(0.2)
        for key, pid, _title in procs:
            st = json.loads(_get(srv, session="p%d" % pid, version=0, window=0, process=key)[1])["status"]
            assert (st["pid"], st["command"]) == (pid, truth[pid])
        errors = []
        context, page = _page(browser, errors)
        page.goto(srv.url)
        _wait(page, "!document.querySelector('#process-label').hidden && pytrace.state.status.pid")
        child_key, child_pid = [(k, pid) for k, pid, _t in procs if pid != job_pid][-1]
        page.select_option("#process", str(child_key))
        _wait(page, "pytrace.state.status.pid === %d" % child_pid)
        _wait(page, "pytrace.state.updates > 0")
        title = page.title()
        assert str(job_pid) in title and str(child_pid) not in title, title
        assert errors == [], errors
        context.close()
    finally:
        srv.stop()


DROPPY = textwrap.dedent("""
    import os, sys
    def leaf(i):
        return i + 1
    def middle(n):
        s = 0
        for i in range(n):
            s += leaf(i)
        return s
    for _ in range(int(sys.argv[1])):
        middle(20000)
""")


def test_dropped_is_one_count_with_its_cause_in_web_and_top(tmp_path):
    """A job (policy drop) whose hub holds off draining until three readers joined, so
    the job drops events; pytrace-top --once --json and pytrace web read it through that
    hub, web stopped (SIGSTOP) for a while so the hub cuts it. At the end both say the
    job's own count (its last ProducerStatus) with the same cause, and web's own gap in
    the hub is counted apart (missed_in_hub) with its cause; before, the web view added
    its gaps to the job's drops (3,139,170 against top's 622,177)."""
    from pytrace import _job
    script = tmp_path / "job.py"
    script.write_text(DROPPY)
    job, segment, wait_w = _job.start_job(PY, [], {"c_calls": True, "policy": "drop",
                                                   "chunk_bytes": 64 << 10, "chunks_per_ring": 16},
                                          [str(script), "400"], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)
    assert segment
    hub = subprocess.Popen([os.path.join(os.path.dirname(PY), "pytrace-hub"), "--hold", "3", "--queue-mib", "1",
                            "--quiet", segment], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert hub.stdout.readline().strip().endswith(".sock")
    srv = top = third = None
    try:
        srv = WebServer(tmp_path, [str(job.pid)])
        top = subprocess.Popen([os.path.join(os.path.dirname(PY), "pytrace-top"), "--once", "--json",
                                "--duration", "300", str(job.pid)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        os.close(wait_w)
        wait_w = None
        time.sleep(1.0)                 # held: the job's 1 MiB rings fill, it drops
        os.kill(srv.proc.pid, signal.SIGSTOP)
        third = subprocess.Popen([PY, "-c", "import pytrace, sys\n"
                                  "for m in pytrace.Reader(sys.argv[1], follow=True, hub=True): pass\n",
                                  segment], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(3.0)                 # web holds nothing: the hub cuts it (queue 1 MiB)
        os.kill(srv.proc.pid, signal.SIGCONT)
        assert job.wait(timeout=240) == 0
        out, err = top.communicate(timeout=120)
        t = json.loads(out)
        assert t["state"] == "ENDED", t
        deadline = time.monotonic() + 120
        while True:
            st = json.loads(_get(srv, session="s", version=0, window=0)[1])["status"]
            if st["state"] in ("exited", "died"):
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.3)
    finally:
        if wait_w is not None:
            os.close(wait_w)
        for p in (top, third):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        if srv is not None:
            os.kill(srv.proc.pid, signal.SIGCONT)
            srv.stop()
        if job.poll() is None:
            job.kill()
        job.wait()
        hub.wait(timeout=60)
    assert t["events_dropped"] > 0, "the job dropped nothing: the test shows nothing"
    assert st["dropped"] == t["events_dropped"], (st, t)
    assert st["dropped_cause"] == t["events_dropped_cause"] == "the job's rings were full (policy drop)"
    assert st["missed_in_hub"] > 0, "web was never cut by the hub"
    assert "too slowly" in st["missed_cause"]


THREADS_PAST_RINGS = textwrap.dedent("""
    import threading
    def f(i):
        return i + 1
    both = threading.Barrier(4)     # all four alive at once: one ring for the four
    def work():
        both.wait()
        s = 0
        for i in range(50000):
            s = f(s)
        both.wait()
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
""")


def test_threads_without_a_ring_are_one_count_in_web_top_export_and_profile(tmp_path):
    """A job with more threads than rings (--rings 2): the threads that ran without one
    and their events are a loss that export and pytrace-top said, and the web view and
    Profile.counters() did not (the page said "dropped 0", complete). Every view says
    the same numbers."""
    from pytrace.losses import OTHER_LOSSES, describe
    from pytrace.profile import Profile
    script = tmp_path / "job.py"
    script.write_text(THREADS_PAST_RINGS)
    rec = tmp_path / "rec.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "--rings", "2", "-o", str(rec), "--", PY, str(script)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    top = subprocess.run([os.path.join(os.path.dirname(PY), "pytrace-top"), "--file", str(rec), "--once",
                          "--json"], capture_output=True, text=True, timeout=120)
    t = json.loads(top.stdout)
    assert t["threads_untraced"] >= 2 and t["events_untraced"] > 0, t
    ex = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "-f", "pstats", "-o", str(tmp_path / "p")],
                        capture_output=True, text=True, timeout=120)
    said = describe(t, OTHER_LOSSES)
    assert ("the traced job also lost: %s" % said) in ex.stderr, (said, ex.stderr)
    c = Profile.from_recording(str(rec)).counters()
    assert (c["threads_untraced"], c["events_untraced"]) == (t["threads_untraced"], t["events_untraced"]), c
    srv = WebServer(tmp_path, ["--file", str(rec)])
    try:
        st = _whole(srv, "s", window=0)["status"]
    finally:
        srv.stop()
    assert st["other_losses"] == said, (st, said)
