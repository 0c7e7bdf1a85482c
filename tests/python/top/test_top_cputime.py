"""pytrace-top shows CPU time beside wall time, waiting apart, and time nobody saw as
<not observed> (issue 21): recordings with CpuTime records (support/cpustream.py) read by
`pytrace-top --once --json` and by the live view under tmux.

spin_and_wait: `spin` is on a CPU all its 2 s, `wait` 1% of its 3 s. with_gap: `spin`
runs 3 s of which 1 s is a Lost gap (4242 events lost).
"""

import json
import shutil
import subprocess

import pytest

import cpustream
from topkit import TOP, Tmux, rows_by_name, sgr_at, table_order

pytestmark = pytest.mark.skipif(TOP is None, reason="pytrace-top not built")


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpurec")
    sw, gap = str(d / "sw.pytrace"), str(d / "gap.pytrace")
    cpustream.spin_and_wait(sw)
    cpustream.with_gap(gap)
    return {"sw": sw, "gap": gap}


def once_json(path, *args):
    r = subprocess.run([TOP, "--once", "--json", "--file", path, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_json_rows_have_cpu_beside_wall(recs):
    doc = once_json(recs["sw"])
    assert doc["time"] == "wall"
    rows = rows_by_name(doc)
    spin, wait = rows["spin"], rows["wait"]
    assert spin["self_ns"] == 2_000_000_000 and wait["self_ns"] == 3_000_000_000
    # the spinner was on a CPU all the time, the waiter 1% of it
    assert spin["self_cpu_ns"] == spin["self_ns"]
    assert spin["total_cpu_ns"] == spin["total_ns"]
    assert wait["self_cpu_ns"] == pytest.approx(0.01 * wait["self_ns"], rel=0.02)
    assert rows["main_wait"]["total_cpu_ns"] == wait["self_cpu_ns"] and rows["main_wait"]["self_cpu_ns"] == 0
    # every existing field is still there
    for key in ("name", "file", "line", "calls", "prim_calls", "self_ns", "total_ns", "self_wall_pct",
                "total_wall_pct"):
        assert key in spin
    assert doc["not_observed"] == {"ns": 0, "cpu_ns": 0, "lost_events": 0}
    # wall order: the waiter first (3 s against 2 s)
    names = [f["name"] for f in doc["functions"]]
    assert names.index("wait") < names.index("spin")


def test_time_cpu_orders_by_cpu(recs):
    doc = once_json(recs["sw"], "--time", "cpu")
    assert doc["time"] == "cpu"
    names = [f["name"] for f in doc["functions"]]
    assert names.index("spin") < names.index("wait"), names
    rows = rows_by_name(doc)
    # CPU percentages are of the same base (observed wall time)
    assert rows["spin"]["self_cpu_pct"] == pytest.approx(100.0 * 2 / 3, abs=0.1)
    assert rows["wait"]["self_cpu_pct"] == pytest.approx(1.0, abs=0.1)
    r = subprocess.run([TOP, "--once", "--time", "cpu", "--file", recs["sw"]], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "time: CPU, waiting hidden" in r.stdout and "WAIT%" not in r.stdout
    pos = table_order(r.stdout, ["spin", "wait"])
    assert pos["spin"] < pos["wait"], r.stdout
    r = subprocess.run([TOP, "--once", "--time", "nope", "--file", recs["sw"]], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "--time needs wall or cpu" in r.stderr


def test_text_shows_waiting_share(recs):
    r = subprocess.run([TOP, "--once", "--file", recs["sw"]], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "time: wall" in r.stdout
    lines = {l.split()[-2]: l.split() for l in r.stdout.splitlines() if l.rstrip().endswith(".py:10")
             or l.rstrip().endswith(".py:30")}
    # OWN%WALL TOT%WALL WAIT% ...: spin never waits, wait waits 99% of its own time
    assert float(lines["spin"][2]) == 0.0
    assert float(lines["wait"][2]) == pytest.approx(99.0, abs=0.2)


def test_gap_is_not_observed_and_not_in_percentages(recs):
    doc = once_json(recs["gap"])
    assert doc["not_observed"]["ns"] == 1_000_000_000
    assert doc["not_observed"]["lost_events"] == cpustream.LOST_EVENTS
    rows = rows_by_name(doc)
    # the gap is in no row: spin ran 2 s that were seen (not 3)
    assert rows["spin"]["self_ns"] == 2_000_000_000
    assert sum(f["self_ns"] for f in doc["functions"]) == 2_000_000_000
    assert all(f["name"] != "<not observed>" for f in doc["functions"])
    # percentages are of observed time
    assert doc["span_ns"] == 2_000_000_000
    assert rows["spin"]["self_wall_pct"] == pytest.approx(100.0)
    r = subprocess.run([TOP, "--once", "--file", recs["gap"]], capture_output=True, text=True, timeout=60)
    last = r.stdout.rstrip().splitlines()[-1]
    assert "<not observed>" in last and "1.00s" in last and "4242 events lost" in last, r.stdout


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


@needs_tmux
def test_key_c_switches_header_and_order(recs):
    t = Tmux("--file %s" % recs["sw"], name="ptcpuv")
    try:
        s = t.wait_for(lambda s: "time: wall" in s and "spin" in s and "wait" in s, what="the wall table")
        assert "WAIT%" in s and "OWN%WALL" in s
        pos = table_order(s, ["spin", "wait"])
        assert pos["wait"] < pos["spin"], s
        t.keys("c")
        s = t.wait_for(lambda s: "time: CPU, waiting hidden" in s, what="the CPU header")
        s = t.wait_for(lambda s: "OWN%CPU" in s, what="the CPU columns")
        assert "WAIT%" not in s
        pos = table_order(s, ["spin", "wait"])
        assert pos["spin"] < pos["wait"], s
        t.keys("c")
        t.wait_for(lambda s: "time: wall" in s and "OWN%WALL" in s, what="back to wall time")
    finally:
        t.close()


@needs_tmux
def test_flame_colours_waiting_frames(recs):
    t = Tmux("--file %s" % recs["sw"], name="ptcpuf")
    try:
        t.wait_for(lambda s: "time: wall" in s and "spin" in s, what="the table")
        t.keys("Tab")
        t.wait_for(lambda s: "main_wait" in s and "main_spin" in s, what="the flame graph")
        s = t.screen_sgr()
        # a frame that mostly waits: white on blue (44); one on a CPU: not
        assert "44" in (sgr_at(s, "main_wait") or set()), s
        assert "44" not in (sgr_at(s, "main_spin") or set()), s
        t.keys("?")
        t.wait_for(lambda s: "white on blue" in s, what="the help screen's colour line")
    finally:
        t.close()


@needs_tmux
def test_not_observed_row_in_live_table(recs):
    t = Tmux("--file %s" % recs["gap"], name="ptcpug")
    try:
        s = t.wait_for(lambda s: "<not observed>" in s, what="the <not observed> row")
        line = [l for l in s.splitlines() if "<not observed>" in l][0]
        assert "4242 events lost" in line and "1.00s" in line, s
        spin = [l for l in s.splitlines() if " spin " in l][0]
        assert spin.split()[0] == "100.0", s     # of observed time
    finally:
        t.close()
