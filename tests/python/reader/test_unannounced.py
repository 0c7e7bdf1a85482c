"""An event that names a symbol id never announced is damage (issue 18, item 8).

By the stream's contract (DESIGN.md, "Symbols") every id an event names was announced by a
Symbol message before it. A recording with a Frame record of id 0xFFFFFFFF and a Call (and
Return) of an id no Symbol named is read by every reader: each keeps everything (the calls
are shown as <unknown #id>) and says, in one line, how many events named such ids. A real
job read live says 0.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import PY
from pytrace.export import FORMATS
import synthetic as syn
from pytrace.reader import EventKind
from pytrace.recording import RecordingWriter

BIN = os.path.dirname(PY)
TOP = os.path.join(BIN, "pytrace-top")
CALL, RETURN, FRAME = int(EventKind.Call), int(EventKind.Return), int(EventKind.Frame)
ALL_ONES = 0xFFFFFFFF
NEVER = 9          # an id no Symbol message names
DAMAGED = 4        # the Frame of ALL_ONES, the Call and Return of NEVER, the Return of ALL_ONES
LINE = "%d events name symbols never announced (damage): shown as <unknown #id>" % DAMAGED


@pytest.fixture
def recording(tmp_path):
    """main (1) is reported by a Frame record, a frame of id 0xFFFFFFFF above it; f (2) is
    called, then id 9 (never announced), and everything returns."""
    rec = str(tmp_path / "unannounced.pytrace")
    with RecordingWriter(rec, lossless=True) as w:
        w.append(syn.process_info(pid=4344))
        w.append(syn.symbol(1, "main"))
        w.append(syn.symbol(2, "f"))
        w.append(syn.thread_start(1))
        w.append(syn.event_chunk(1, [(1000, 1, 0, FRAME, 0), (1000, ALL_ONES, 1, FRAME, 0),
                                     (2000, 2, 0, CALL, 0), (5000, 2, 0, RETURN, 0),
                                     (5000, NEVER, 0, CALL, 0), (5500, NEVER, 0, RETURN, 0),
                                     (6000, ALL_ONES, 0, RETURN, 0), (7000, 1, 0, RETURN, 0)]))
        w.append(syn.thread_end(1, 7000, events_written=8))
        w.append(syn.producer_status(state=3, events_written=8))
    return rec


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_says_the_unannounced_events_in_one_line(recording, tmp_path, fmt):
    """Every format writes its output (everything kept) and says the count once."""
    out = str(tmp_path / ("out." + fmt))
    r = subprocess.run([PY, "-m", "pytrace", "export", recording, "--format", fmt, "-o", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    said = [line for line in r.stderr.splitlines() if "never announced" in line]
    assert said == ["pytrace export: " + LINE], r.stderr
    assert os.path.getsize(out) > 0
    if fmt == "collapsed":
        with open(out) as f:
            text = f.read()
        assert "<unknown #9>" in text and "<unknown #4294967295>" in text and "f" in text, text


def test_export_api_counts_them(recording, tmp_path):
    from pytrace.export import export
    res = export(recording, "collapsed", str(tmp_path / "o.folded"))
    res = res[0] if isinstance(res, tuple) else res
    assert res.unannounced == DAMAGED
    assert res.events == 8


def _page_data(path):
    with open(path, encoding="utf-8") as f:
        page = f.read()
    m = re.search(r'<script type="application/json" id="pytrace-data">(.*?)</script>', page, re.S)
    assert m, "no data in the page"
    return json.loads(m.group(1))


def test_html_report_status_shows_the_damage(recording, tmp_path):
    """The report's status (what the page's status line shows, as damage) holds the count,
    and the calls are all in its table."""
    out = str(tmp_path / "r.html")
    r = subprocess.run([PY, "-m", "pytrace", "export", recording, "--format", "html", "-o", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = _page_data(out)
    assert data["status"]["unannounced"] == DAMAGED, data["status"]
    for part in data.get("procs", {}).values():
        assert part["status"]["unannounced"] == DAMAGED


def test_html_report_in_chromium_says_the_damage(recording, tmp_path):
    """In a real browser the report's status line says the count, marked bad."""
    import webkit
    if webkit.CHROMIUM is None or webkit.sync_playwright is None:
        pytest.skip("needs Debian's chromium and playwright")
    out = tmp_path / "r.html"
    r = subprocess.run([PY, "-m", "pytrace", "export", recording, "--format", "html", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with webkit.sync_playwright() as p:
        b = p.chromium.launch(executable_path=webkit.CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            errors = []
            _context, page = webkit._page(b, errors)
            page.goto("file://" + str(out))
            webkit._wait(page, "window.pytrace && pytrace.state.rows.size > 0")
            status = page.inner_text("#status")
            assert ("DAMAGE: %d events name symbols never announced: shown as <unknown #id>" % DAMAGED
                    in status), status
            assert page.evaluate("document.getElementById('status').classList.contains('bad')")
            assert not errors, errors
        finally:
            b.close()


def test_top_file_once_json_and_text(recording):
    assert os.path.exists(TOP), TOP
    r = subprocess.run([TOP, "--file", recording, "--once", "--json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["unannounced_events"] == DAMAGED, doc
    calls = {f["name"]: f["calls"] for f in doc["functions"]}
    assert calls == {"main": 1, "<unknown #4294967295>": 1, "f": 1, "<unknown #9>": 1}
    t = subprocess.run([TOP, "--file", recording, "--once"], capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr
    assert [line for line in t.stdout.splitlines() if "never announced" in line] == [
        "damage: %d events name symbols never announced: shown as <unknown #id>" % DAMAGED]


def test_profile_counts_them(recording):
    from pytrace.profile import Profile
    prof = Profile.from_recording(recording)
    assert prof.counters()["unannounced"] == DAMAGED
    names = {f.name: f.calls for f in prof.functions()}
    assert names["<unknown #9>"] == 1 and names["f"] == 1


def test_healthy_recording_counts_none(tmp_path):
    """Ids announced before use (and id 0, the producer's "unknown") count nothing."""
    rec = str(tmp_path / "ok.pytrace")
    with RecordingWriter(rec, lossless=True) as w:
        w.append(syn.process_info(pid=4345))
        w.append(syn.symbol(1, "main"))
        w.append(syn.thread_start(1))
        w.append(syn.event_chunk(1, [(1000, 1, 0, CALL, 0), (1500, 0, 0, CALL, 0),
                                     (1600, 0, 0, RETURN, 0), (2000, 1, 0, RETURN, 0)]))
        w.append(syn.thread_end(1, 2000, events_written=4))
    r = subprocess.run([TOP, "--file", rec, "--once", "--json"], capture_output=True, text=True, timeout=60)
    assert json.loads(r.stdout)["unannounced_events"] == 0
    e = subprocess.run([PY, "-m", "pytrace", "export", rec, "-f", "collapsed", "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert e.returncode == 0 and "never announced" not in e.stderr, e.stderr


LIVE_JOB = textwrap.dedent("""
    import os, sys, time
    go = sys.argv[1]
    while not os.path.exists(go):           # the reader joins while the job runs
        time.sleep(0.01)
    ns = {}
    total = 0
    for i in range(3000):                   # new functions (new symbols) all along
        exec(compile("def g%d(x):\\n    return x + 1\\n" % i, "gen%d.py" % i, "exec"), ns)
        for _ in range(20):
            total = ns["g%d" % i](total)
        if i % 500 == 0:
            time.sleep(0.05)
    print("total", total)
""")


def test_live_job_read_by_top_counts_none(tmp_path):
    """A real job read live (pytrace-top joins after it started, and its symbols keep
    coming while it is read) names only announced ids: 0."""
    script = tmp_path / "job.py"
    script.write_text(LIVE_JOB)
    go = tmp_path / "go"
    job = subprocess.Popen([PY, "-m", "pytrace", "run", str(script), str(go)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = job.stderr.readline()
        assert "tracing pid %d" % job.pid in line, line
        time.sleep(0.2)
        top = subprocess.Popen([TOP, "--once", "--json", "--duration", "600", str(job.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        go.write_text("")
        out, err = job.communicate(timeout=120)
        t_out, t_err = top.communicate(timeout=120)
    finally:
        for p in (job,):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert job.returncode == 0, err
    assert out == "total %d\n" % (3000 * 20)
    assert top.returncode == 0, t_err
    t = json.loads(t_out)
    assert t["state"] == "ENDED" and t["events_read"] > 3000 * 20 * 2, t
    assert t["unannounced_events"] == 0, t
    assert not any(f["name"].startswith("<unknown") for f in t["functions"]), t["functions"][:5]


def test_top_header_says_the_damage(recording):
    """The interactive pytrace-top (a real terminal under tmux) says it under its header."""
    from topkit import Tmux
    t = Tmux("--file %s" % recording, width=200, height=14, name="ptbadid")
    try:
        screen = t.wait_for(lambda s: "ENDED" in s, what="the recording's last picture")
    finally:
        t.close()
    assert ("DAMAGE: %d events name symbols never announced: shown as <unknown #id>" % DAMAGED
            in screen), screen


def test_ids_are_per_process(tmp_path):
    """Ids are per process: process 1 calling id 2, which only process 0 announced, is
    damage in process 1 (2 events: its Call and Return); process 0's own calls are not."""
    rec = str(tmp_path / "two.pytrace")
    with RecordingWriter(rec, lossless=True) as w:
        w.append(syn.process_info(pid=4346))
        w.append(syn.symbol(1, "main"))
        w.append(syn.symbol(2, "f"))
        w.append(syn.process_info(pid=4347, process=1))
        w.append(syn.symbol(1, "child_main", process=1))
        w.append(syn.thread_start(1))
        w.append(syn.thread_start(1, process=1))
        w.append(syn.event_chunk(1, [(1000, 1, 0, CALL, 0), (1100, 2, 0, CALL, 0), (1200, 2, 0, RETURN, 0),
                                     (1300, 1, 0, RETURN, 0)]))
        w.append(syn.event_chunk(1, [(1000, 1, 0, CALL, 0), (1100, 2, 0, CALL, 0), (1200, 2, 0, RETURN, 0),
                                     (1300, 1, 0, RETURN, 0)], process=1))
        w.append(syn.thread_end(1, 1300, events_written=4))
        w.append(syn.thread_end(1, 1300, events_written=4, process=1))
    for fmt in ("collapsed", "perfetto"):
        e = subprocess.run([PY, "-m", "pytrace", "export", rec, "-f", fmt, "-o", str(tmp_path / ("o." + fmt))],
                           capture_output=True, text=True, timeout=60)
        assert e.returncode == 0, e.stderr
        assert ("pytrace export: 2 events name symbols never announced (damage): shown as <unknown #id>"
                in e.stderr.splitlines()), e.stderr
    from pytrace.profile import Profile
    prof = Profile.from_recording(rec)
    by_pid = {p.pid: prof.counters(process=p.index)["unannounced"] for p in prof.processes()}
    assert by_pid == {4346: 0, 4347: 2}, by_pid
    r = subprocess.run([TOP, "--file", rec, "--once", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["unannounced_events"] == 2
