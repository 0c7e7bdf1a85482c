"""Steps in the browser (issue 22): the HTML report and the live page of `pytrace web
--file` show the step summary (count, last, median, p10-p90, slowest) and, with the
"last step" button, the flame graph and table of the last complete step alone. A real
loop of 30 steps marked with pytrace.step(), recorded with `pytrace record`; the figures
on the page are compared with pytrace-top --json's (the same C aggregation) and with
the loop's shape (the last step called train_step once)."""

import json
import re
import subprocess

import pytest

from helpers import PY
from topkit import TOP
from webkit import WebServer, _page, _wait, browser, needs_browser  # noqa: F401 (browser: a fixture)

LOOP = r'''
import time
import pytrace

def work(n):
    s = 0
    for i in range(n):
        s += i
    return s

def train_step(k):
    work(2000 * (k % 4))
    time.sleep(0.001 * (1 + (k * 7) % 9))

for k in range(30):
    train_step(k)
    pytrace.step("train")
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("websteps")
    script, rec, html = d / "loop.py", d / "loop.pytrace", d / "loop.html"
    script.write_text(LOOP)
    for args in (["record", "-o", str(rec), "--", PY, str(script)],
                 ["export", "-f", "html", "-o", str(html), str(rec)]):
        r = subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
    return d, rec, html


def _top_steps(rec):
    r = subprocess.run([TOP, "--file", str(rec), "--once", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["steps"]


def test_report_embeds_the_steps(recorded):
    _d, rec, html = recorded
    text = html.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="pytrace-data">(.*?)</script>', text,
                                re.S).group(1))
    st = _top_steps(rec)
    for key in ("count", "last_ns", "median_ns", "p10_ns", "p90_ns", "max_ns", "slowest_index", "label"):
        assert data["steps"][key] == st[key], key
    assert [b[0] for b in data["steps"]["bars"]] == list(range(1, 31))
    step = data["views"]["step"]
    assert step["span_ns"] == st["last_ns"]
    names = {s[0]: s[1] for s in data["symbols"]}
    calls = {names[r[0]]: r[1] for r in step["rows"]}
    assert calls["train_step"] == 1 and calls["work"] == 1
    assert 'id="steps-section"' in text


@needs_browser
@pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed")
def test_report_and_live_page_show_the_steps(recorded, browser):  # noqa: F811
    d, rec, html = recorded
    st = _top_steps(rec)
    srv = WebServer(d, ["--file", str(rec)])
    try:
        for name, url in (("report", "file://" + str(html)), ("live", srv.url)):
            errors = []
            context, page = _page(browser, errors)
            page.goto(url)
            _wait(page, "document.querySelector('#steps-summary').textContent.includes('30 steps')")
            summary = page.evaluate("document.querySelector('#steps-summary').textContent")
            assert "slowest #%d" % st["slowest_index"] in summary, (name, summary)
            assert page.evaluate("!document.querySelector('#step').hidden")
            _wait(page, "pytrace.frames().some(f => f.name === 'train_step')")
            whole = page.evaluate("pytrace.frames().filter(f => f.name === 'train_step')"
                                  ".reduce((a, f) => a + f.calls, 0)")
            assert whole == 30, (name, whole)
            page.click("#step")
            _wait(page, "document.querySelector('#steps-summary').textContent.startsWith('SHOWING THE LAST STEP')")
            _wait(page, "pytrace.frames().filter(f => f.name === 'train_step').reduce((a, f) => a + f.calls, 0) === 1")
            root = page.evaluate("pytrace.state.span")
            assert root == st["last_ns"], (name, root, st["last_ns"])
            assert errors == [], errors
            context.close()
    finally:
        srv.stop()
