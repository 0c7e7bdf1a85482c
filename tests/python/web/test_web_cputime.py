"""The browser view shows CPU time beside wall time, waiting apart, and time nobody saw as
<not observed> (issue 21), in the HTML report (`pytrace export --format html`, opened from
disk) and in the live page of `pytrace web --file`: real chromium through playwright,
recordings with CpuTime records (support/cpustream.py).

spin_and_wait: `spin` is on a CPU all its 2 s, `wait` 1% of its 3 s. with_gap: `spin`
runs 3 s of which 1 s is a Lost gap (4242 events lost).
"""

import subprocess

import pytest

import cpustream
from helpers import PY
from topkit import SPIN_AND_SLEEP
from webkit import WebServer, _page, _wait, browser, needs_browser  # noqa: F401 (browser: a fixture)

# needs a quiet core for its spinning thread (tests/run_all.sh runs it alone)
pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpuweb")
    sw, gap = d / "sw.pytrace", d / "gap.pytrace"
    cpustream.spin_and_wait(str(sw))
    cpustream.with_gap(str(gap))
    out = {"sw": sw, "gap": gap}
    for name in ("sw", "gap"):
        html = d / (name + ".html")
        r = subprocess.run([PY, "-m", "pytrace", "export", str(out[name]), "--format", "html", "-o", str(html)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out[name + "_html"] = html
    return out


def _row_cells(page, name):
    """The table row of function `name`, as {column key: text}."""
    return page.evaluate("""(name) => {
        const keys = [...document.querySelectorAll('#table th')].map(th => th.dataset.key);
        for (const tr of document.querySelectorAll('#table tbody tr')) {
            const cells = [...tr.cells].map(td => td.textContent);
            if (cells[keys.indexOf('name')] === name) {
                const out = {};
                keys.forEach((k, i) => { out[k] = cells[i]; });
                return out;
            }
        }
        return null; }""", name)


def _order(page):
    return page.evaluate("""() => {
        const i = [...document.querySelectorAll('#table th')].findIndex(th => th.dataset.key === 'name');
        return [...document.querySelectorAll('#table tbody tr')].map(tr => tr.cells[i].textContent); }""")


def _visible(page, selector):
    return page.evaluate("(s) => { const e = document.querySelector(s); return !!e && e.offsetParent !== null; }",
                         selector)


def _check_cpu_switch(page):
    """Wall mode: widths by wall time, the waiting frames coloured apart, WAIT% shown;
    the switch clicked: widths and table by CPU time, waiting hidden."""
    width = page.evaluate("pytrace.frames()[0].w")
    assert page.inner_text("#time") == "time: wall"
    spin_w, wait_w = page.evaluate("pytrace.width('spin')"), page.evaluate("pytrace.width('wait')")
    # wall: 2 s and 3 s of 5
    assert spin_w == pytest.approx(width * 2 / 5, rel=0.02) and wait_w == pytest.approx(width * 3 / 5, rel=0.02)
    frames = {f["name"]: f for f in page.evaluate("pytrace.frames()")}
    assert frames["wait"]["waiting"] and frames["main_wait"]["waiting"]
    assert not frames["spin"]["waiting"] and not frames["main_spin"]["waiting"]
    assert _visible(page, "#table th[data-key=wait_pct]")
    assert float(_row_cells(page, "wait")["wait_pct"]) == pytest.approx(99.0, abs=0.2)
    assert float(_row_cells(page, "spin")["wait_pct"]) == 0.0
    assert _order(page).index("wait") < _order(page).index("spin")
    page.click("#time")
    _wait(page, "document.getElementById('time').textContent === 'time: CPU, waiting hidden'")
    spin_w, wait_w = page.evaluate("pytrace.width('spin')"), page.evaluate("pytrace.width('wait')")
    # CPU: spin's 2 s and wait's 30 ms of 2.03 s; the waiting function is ~0 wide
    assert wait_w < width * 0.02, wait_w
    assert spin_w == pytest.approx(width * 2 / 2.03, rel=0.01)
    assert not any(f["waiting"] for f in page.evaluate("pytrace.frames()"))
    spin, wait = _row_cells(page, "spin"), _row_cells(page, "wait")
    assert spin["self_cpu"] == "2.000 s" and wait["self_cpu"] == "30.0 ms"
    # the percentages are of the observed wall time (5 s of the two threads' ... span 3 s)
    assert float(spin["self_pct"]) == pytest.approx(100 * 2 / 3, abs=0.1)
    assert float(wait["self_pct"]) == pytest.approx(1.0, abs=0.1)
    assert not _visible(page, "#table th[data-key=wait_pct]") and not _visible(page, "#table th[data-key=self]")
    order = _order(page)
    assert order.index("spin") < order.index("wait"), order
    page.click("#time")
    _wait(page, "document.getElementById('time').textContent === 'time: wall'")
    assert page.evaluate("pytrace.width('wait')") == pytest.approx(width * 3 / 5, rel=0.02)


@needs_browser
def test_report_switch_to_cpu_hides_waiting(recs, browser):
    errors = []
    context, page = _page(browser, errors)
    context.set_offline(True)
    page.goto("file://" + str(recs["sw_html"]))
    _wait(page, "window.pytrace && pytrace.state.rows.size > 0")
    _check_cpu_switch(page)
    assert not _visible(page, "#not-observed")
    assert errors == []
    context.close()


@needs_browser
def test_report_shows_not_observed_apart(recs, browser):
    errors = []
    context, page = _page(browser, errors)
    context.set_offline(True)
    page.goto("file://" + str(recs["gap_html"]))
    _wait(page, "window.pytrace && pytrace.state.rows.size > 0")
    assert _visible(page, "#not-observed")
    text = page.inner_text("#not-observed")
    assert "<not observed>" in text and "4242 events lost" in text and "1.000 s" in text, text
    spin = _row_cells(page, "spin")
    assert spin["self"] == "2.000 s" and float(spin["self_pct"]) == pytest.approx(100.0)   # of observed time
    assert page.evaluate("pytrace.state.span") == 2_000_000_000
    assert errors == []
    context.close()


@needs_browser
def test_live_page_switch_to_cpu(recs, browser, tmp_path):
    srv = WebServer(tmp_path, ["--file", str(recs["sw"])])
    errors = []
    context, page = _page(browser, errors)
    try:
        page.goto(srv.url)
        page.select_option("#window", "0")   # the whole run
        # state.version is -1 from the change of view until the first answer for the whole
        # run is applied: before it the page still holds the 10 s window's answer (whose CPU
        # parts are the timeline's, in units of 1/32767 of a slice: wait read 30.2 ms there)
        _wait(page, "window.pytrace && pytrace.state.version > 0 && pytrace.width('spin') > 0 && "
                    "pytrace.width('wait') > 0 && pytrace.state.status.state === 'exited'")
        _check_cpu_switch(page)
        assert errors == []
    finally:
        context.close()
        srv.stop()


@needs_browser
def test_report_cpu_view_of_a_real_job(tmp_path, browser):
    """Issue 21's check on a real job (needs the tracer's CpuTime records): a thread that
    spins for 3 s and one that sleeps for 3 s, recorded, exported to HTML; in the report's
    CPU view spin_loop's CPU time is at least 0.6 of its wall time, time.sleep's at most
    0.1 of it."""
    src = tmp_path / "job.py"
    src.write_text(SPIN_AND_SLEEP)
    rec, html = tmp_path / "job.pytrace", tmp_path / "job.html"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(src), "3"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "--format", "html", "-o", str(html)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    errors = []
    context, page = _page(browser, errors)
    context.set_offline(True)
    page.goto("file://" + str(html))
    _wait(page, "window.pytrace && pytrace.state.rows.size > 0")
    page.click("#time")
    _wait(page, "document.getElementById('time').textContent === 'time: CPU, waiting hidden'")
    rows = {x["name"]: x for x in page.evaluate("""() => [...pytrace.state.rows.values()].map(r => ({
        name: pytrace.state.symbols.get(r.sym).name, self: r.self, cself: r.cself }))""")}
    spin, nap = rows["spin_loop"], rows["sleep"] if "sleep" in rows else rows["time.sleep"]
    assert spin["self"] > 1e9 and nap["self"] > 1e9, (spin, nap)
    assert spin["cself"] >= 0.6 * spin["self"], spin
    assert nap["cself"] <= 0.1 * nap["self"], nap
    # what the CPU view draws: the sleeping function ~0 wide, the spinning one most of it
    width = page.evaluate("pytrace.frames()[0].w")
    assert page.evaluate("pytrace.width('spin_loop')") >= 0.5 * width
    assert page.evaluate("pytrace.width('%s')" % ("sleep" if "sleep" in rows else "time.sleep")) <= 0.1 * width
    assert errors == []
    context.close()
