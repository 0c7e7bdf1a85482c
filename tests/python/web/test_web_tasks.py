"""asyncio tasks in the browser (issue 23): the HTML report and the live page of `pytrace
web --file` have a task chooser; the chosen task shows its state, steps, running and
waiting time (by what it awaited) and its logical calls. A real recording of
tests/python/top/tasks_job.py (20 named tasks, each awaiting a 2 ms sleep 50 times through
nap() and calling tally() after each); the figures on the page are compared with
pytrace-top --json's (the same C aggregation, viewer/core/tasks.h)."""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import PY
from pytrace.web.page import embed_json
from topkit import TOP
from webkit import WebServer, _page, _wait, browser, needs_browser  # noqa: F401 (browser: a fixture)

needs_tasks = pytest.mark.skipif(sys.version_info < (3, 11),
                                reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")

JOB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "top", "tasks_job.py")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("webtasks")
    rec, html = d / "tasks.pytrace", d / "tasks.html"
    for args in (["record", "-o", str(rec), "--", PY, JOB],
                 ["export", "-f", "html", "-o", str(html), str(rec)]):
        r = subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
    return d, rec, html


def _top_tasks(rec):
    r = subprocess.run([TOP, "--file", str(rec), "--once", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return {t["name"]: t for t in json.loads(r.stdout)["tasks"]}


@needs_tasks
@pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed")
def test_report_embeds_the_tasks(recorded):
    """The report's data holds every task with pytrace-top's figures and its logical calls."""
    _d, rec, html = recorded
    text = html.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="pytrace-data">(.*?)</script>', text,
                                re.S).group(1))
    top = _top_tasks(rec)
    tasks = {t[1]: t for t in data["tasks"]["list"]}
    workers = ["worker-%d" % i for i in range(20)]
    assert set(workers) <= set(tasks)
    assert data["tasks"]["seen"] == len(top) and data["tasks"]["folded"] == 0
    names = {s[0]: s[1] for s in data["symbols"]}
    for w in workers:
        serial, name, coro, state, steps, run_ns, wait_ns, wait_by, awaits, fns, fn_count, tree = tasks[w]
        assert fn_count == len(fns) == len(top[w]["functions"])
        t = top[w]
        assert (serial, coro, state, steps, run_ns, wait_ns) == (t["id"], t["coroutine"], t["state"], t["steps"],
                                                                 t["run_ns"], t["wait_ns"]), w
        assert state == "done" and steps == 51 and run_ns > 0 and wait_ns >= 100_000_000
        assert wait_by == {"sleep": wait_ns}
        calls = {names[f[0]]: f[1] for f in fns}
        assert (calls["worker"], calls["nap"], calls["tally"]) == (1, 50, 50), (w, calls)
        assert fns[0][3] == max(f[3] for f in fns)   # by total time
        # its flame graph (the report holds those of the tasks with the most running time):
        # root, the task, its coroutine, its logical calls; paths, not functions
        assert tree[0][1] == -1 and tree[1][1] == 0 and names[tree[1][0]] == w, tree[:2]
        kids = {names[n[0]]: (i, n) for i, n in enumerate(tree) if n[1] == 1}
        wi, wn = kids["worker"]
        assert wn[2] == 1, wn
        above = {names[n[0]]: n for n in tree if n[1] == wi}
        assert above["nap"][2] == 50 and above["tally"][2] == 50, above
        assert 0 < tree[1][4] <= run_ns


@needs_tasks
@needs_browser
@pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed")
def test_report_and_live_page_choose_a_task(recorded, browser):  # noqa: F811
    d, rec, html = recorded
    top = _top_tasks(rec)
    srv = WebServer(d, ["--file", str(rec)])
    try:
        for name, url in (("report", "file://" + str(html)), ("live", srv.url)):
            errors = []
            context, page = _page(browser, errors)
            page.goto(url)
            _wait(page, "document.querySelector('#tasks-summary').textContent.includes('%d tasks seen')" % len(top))
            assert page.evaluate("!document.querySelector('#tasks-section').hidden")
            options = page.evaluate("[...document.querySelectorAll('#task-choice option')].map(o => o.textContent)")
            assert sum(o.startswith("worker-") for o in options) == 20, (name, options)
            page.select_option("#task-choice", str(top["worker-7"]["id"]))
            _wait(page, "document.querySelector('#task-detail').textContent.startsWith('worker-7 ')")
            detail = page.evaluate("document.querySelector('#task-detail').textContent")
            assert "done" in detail and "51 steps" in detail and "sleep" in detail, (name, detail)
            # a live page is sent the chosen task's functions with its next update
            _wait(page, "document.querySelectorAll('#task-fns tbody tr').length >= 3")
            note = page.evaluate("document.querySelector('#task-note').textContent")
            assert note == "(%d functions)" % len(top["worker-7"]["functions"]), (name, note)
            rows = page.evaluate("[...document.querySelectorAll('#task-fns tbody tr')]"
                                 ".map(tr => [...tr.children].map(td => td.textContent))")
            calls = {r[3]: int(r[0]) for r in rows}
            assert (calls["worker"], calls["nap"], calls["tally"]) == (1, 50, 50), (name, rows)
            # its own flame graph: the task at the bottom, full width, its calls above it
            _wait(page, "window.pytrace.taskFrames().some(f => f.name === 'nap')")
            frames = page.evaluate("window.pytrace.taskFrames()")
            by = {}
            for f in frames:
                by.setdefault(f["name"], []).append(f)
            assert len(by["worker-7"]) == 1 and not any(re.match(r"worker-(?!7$)\d+$", n) for n in by), (name, list(by))
            task = by["worker-7"][0]
            assert task["w"] == max(f["w"] for f in frames) and task["y"] < by["worker"][0]["y"], (name, task)
            assert [f["calls"] for f in by["worker"]] == [1] and [f["calls"] for f in by["nap"]] == [50], (name, by)
            # a click zooms on a frame: it is drawn full width
            nap = by["nap"][0]
            box = page.evaluate("(() => { const r = document.querySelector('#task-flame').getBoundingClientRect();"
                                " return [r.left, r.top]; })()")
            page.mouse.click(box[0] + nap["x"] + nap["w"] / 2, box[1] + nap["y"] + 5)
            _wait(page, "window.pytrace.taskFrames().some(f => f.name === 'nap' && f.w >= "
                        "Math.max(...window.pytrace.taskFrames().map(g => g.w)) - 1)")
            assert errors == [], errors
            context.close()
    finally:
        srv.stop()


@needs_tasks
@needs_browser
def test_task_zoom_stays_with_its_task(recorded, browser, tmp_path):  # noqa: F811
    """A zoom in a task's flame graph belongs to that task of that process: in a report of
    two processes whose tasks have the same serials (each process numbers its own), the
    other process's task is drawn unzoomed, as the program's flame graph is on a process
    change. (The task graph's node keys are indexes: one of another tree names some other
    frame.)"""
    d, rec, html = recorded
    text = html.read_text()
    m = re.search(r'<script type="application/json" id="pytrace-data">(.*?)</script>', text, re.S)
    data = json.loads(m.group(1))
    one = {k: v for k, v in data.items() if k != "report"}
    data.update(processes=[[0, 1, "job (exited)"], [1, 2, "child (exited)"]],
                procs={"0": one, "1": json.loads(json.dumps(one))}, first_process=0)
    two = tmp_path / "two.html"
    two.write_text(text[:m.start(1)] + embed_json(data) + text[m.end(1):])
    top = _top_tasks(rec)
    errors = []
    context, page = _page(browser, errors)
    page.goto("file://" + str(two))
    _wait(page, "document.querySelector('#tasks-summary').textContent.includes('%d tasks seen')" % len(top))
    page.select_option("#task-choice", str(top["worker-7"]["id"]))
    _wait(page, "window.pytrace.taskFrames().some(f => f.name === 'nap')")
    nap = [f for f in page.evaluate("window.pytrace.taskFrames()") if f["name"] == "nap"][0]
    box = page.evaluate("(() => { const r = document.querySelector('#task-flame').getBoundingClientRect();"
                        " return [r.left, r.top]; })()")
    page.mouse.click(box[0] + nap["x"] + nap["w"] / 2, box[1] + nap["y"] + 5)
    zoomed = ("window.pytrace.taskFrames().some(f => f.name === 'nap' && f.w >= "
              "Math.max(...window.pytrace.taskFrames().map(g => g.w)) - 1)")
    _wait(page, zoomed)
    page.select_option("#process", "1")
    _wait(page, "document.querySelector('#task-detail').textContent.startsWith('worker-7 ')")
    _wait(page, "window.pytrace.taskFrames().some(f => f.name === 'nap')")
    assert not page.evaluate(zoomed), page.evaluate("window.pytrace.taskFrames()")
    page.select_option("#process", "0")   # and back: its own task, unzoomed too
    _wait(page, "window.pytrace.taskFrames().some(f => f.name === 'nap')")
    assert not page.evaluate(zoomed)
    assert errors == [], errors
    context.close()


def test_no_task_section_without_tasks(tmp_path):
    """A job without asyncio: no tasks in the report's data, the section stays hidden."""
    job = tmp_path / "plain.py"
    job.write_text("def f():\n    return 1\n\nfor _ in range(10):\n    f()\n")
    rec, html = tmp_path / "p.pytrace", tmp_path / "p.html"
    for args in (["record", "-o", str(rec), "--", PY, str(job)], ["export", "-f", "html", "-o", str(html), str(rec)]):
        r = subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
    data = json.loads(re.search(r'<script type="application/json" id="pytrace-data">(.*?)</script>',
                                html.read_text(), re.S).group(1))
    assert data["tasks"] is None
