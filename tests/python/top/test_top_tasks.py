"""pytrace-top's asyncio tasks (issue 23): `--once --json`'s `tasks` list and `tasks_summary`,
and the task mode (key A) under tmux, read from a real recording of tasks_job.py: 20 tasks
named worker-0..19, each running `worker`, which awaits the helper coroutine `nap` (one 2 ms
asyncio.sleep) 50 times and calls the plain function `tally` after each.

What must hold (viewer/core/tasks.h has the rules):
  - every worker is listed by name, done, with 51 steps (its first, and one after each sleep),
    waiting at least 50 x 2 ms = 0.1 s, all of it on a sleep, and running time above zero;
  - its logical calls are exact: `worker` 1 call (however many resumptions), `nap` 50 calls,
    `tally` 50 calls; a task's functions are sorted by total time;
  - tasks still suspended when the job ends are pending, and say what they await now
    (getter: sync Queue.get; gatherer: the tasks child-a and child-b; they: asyncio.sleep);
  - a job without tasks has an empty `tasks` list and a summary of zeros.
Task records come from the sys.monitoring adapter (3.12+) and, with C calls, the
PyEval_SetProfile adapter (3.11)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from topkit import TOP, Tmux

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "tasks_job.py")
WORKERS = ["worker-%d" % i for i in range(20)]

pytestmark = pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed")
needs_tasks = pytest.mark.skipif(sys.version_info < (3, 11),
                                 reason="task records need 3.11+ (3.11: the PyEval_SetProfile adapter)")


def _record(out, *job):
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(out), "--", PY, *job],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "0 events dropped" in r.stderr, r.stderr
    return str(out)


def _top_json(rec):
    r = subprocess.run([TOP, "--file", rec, "--once", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def tasks_rec(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("tasks") / "tasks.pytrace", JOB)


@needs_tasks
def test_json_lists_each_task_by_name_with_its_times(tasks_rec):
    doc = _top_json(tasks_rec)
    tasks = {t["name"]: t for t in doc["tasks"]}
    assert set(WORKERS) <= set(tasks), sorted(tasks)
    # the others are asyncio.run's: main (default name Task-1, the first task) and the
    # loop's shutdown tasks (BaseEventLoop.shutdown_asyncgens, ...), all done
    assert doc["tasks"][0]["coroutine"] == "main" and doc["tasks"][0]["name"] == "Task-1"
    others = [t for n, t in tasks.items() if n not in WORKERS and n != "Task-1"]
    assert all(t["coroutine"].startswith("BaseEventLoop.shutdown_") for t in others), others
    assert all(t["state"] == "done" for t in doc["tasks"])
    summary = doc["tasks_summary"]
    assert summary["seen"] == summary["kept"] == len(doc["tasks"]) and summary["folded"] == 0, summary
    assert summary["malformed"] == 0 and summary["complete"] is True, summary
    # each worker's tree: worker, nap, tally, sleep and sleep's own callees (the loop's
    # call_later, ...): some nodes per task, none folded into [other] at this size
    assert summary["tree_nodes"] >= 4 * len(WORKERS) and summary["tree_folded"] == 0, summary
    ids = [t["id"] for t in doc["tasks"]]
    assert ids == list(range(1, len(ids) + 1))  # one serial per task, in order of first sight
    for name in WORKERS:
        t = tasks[name]
        assert t["coroutine"] == "worker"
        assert t["state"] == "done"
        assert t["steps"] == 51, t["steps"]
        assert t["run_ns"] > 0
        assert t["wait_ns"] >= 100_000_000, t["wait_ns"]  # 50 sleeps of 2 ms
        assert sum(t["wait_by"].values()) == t["wait_ns"]
        assert t["wait_by"]["sleep"] == t["wait_ns"], t["wait_by"]  # it waited on nothing else
        assert t["awaits"] == []  # done: it awaits nothing now


@needs_tasks
def test_json_task_functions_are_its_logical_calls(tasks_rec):
    doc = _top_json(tasks_rec)
    tasks = {t["name"]: t for t in doc["tasks"]}
    for name in WORKERS:
        fns = tasks[name]["functions"]
        by = {f["name"]: f for f in fns}
        assert by["worker"]["calls"] == 1, by["worker"]  # one call, 51 resumptions
        assert by["nap"]["calls"] == 50, by["nap"]       # one call per await, each resumed once
        assert by["tally"]["calls"] == 50, by["tally"]
        assert by["worker"]["file"].endswith("tasks_job.py") and by["worker"]["line"] > 0
        totals = [f["total_ns"] for f in fns]
        assert totals == sorted(totals, reverse=True)      # by total time
        assert fns[0]["name"] == "worker"                  # the task's root holds all its running time
        assert by["worker"]["total_ns"] <= tasks[name]["run_ns"]
        for f in fns:
            assert 0 <= f["self_ns"] <= f["total_ns"]
    # the tasks' tables add up to the program's calls: 1000 of tally (a plain function: the
    # whole-program table agrees) and 1000 of nap (the whole-program table, as cProfile,
    # counts each resumption of a coroutine as a call: more than 1000 there)
    rows = {f["name"]: f for f in doc["functions"]}
    per_task = {}
    for t in doc["tasks"]:
        for f in t["functions"]:
            per_task[f["name"]] = per_task.get(f["name"], 0) + f["calls"]
    assert per_task["tally"] == rows["tally"]["calls"] == 1000
    assert per_task["nap"] == 1000 and per_task["worker"] == 20
    assert rows["nap"]["calls"] >= 1000
    # main's generator expression, which gather(*...) resumes 20 times within one step of
    # Task-1, is one logical call there (the whole-program table counts 21, as cProfile)
    gen = {f["name"]: f for f in tasks["Task-1"]["functions"]}["main.<locals>.<genexpr>"]
    assert gen["calls"] == 1, gen
    assert rows["main.<locals>.<genexpr>"]["calls"] == 21


@pytest.fixture(scope="module")
def pending_rec(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("pending") / "pending.pytrace", JOB, "pending")


@needs_tasks
def test_json_pending_tasks_say_what_they_await(pending_rec):
    tasks = {t["name"]: t for t in _top_json(pending_rec)["tasks"]}
    assert {"getter", "gatherer", "child-a", "child-b"} <= set(tasks), sorted(tasks)
    g = tasks["getter"]
    assert g["state"] == "pending" and g["steps"] == 1
    assert g["awaits"] == [{"kind": "sync", "name": "Queue.get"}]
    assert g["wait_by"]["sync"] == g["wait_ns"] > 0  # its wait so far, on the queue
    assert tasks["gatherer"]["awaits"] == [{"kind": "task", "name": "child-a"}, {"kind": "task", "name": "child-b"}]
    assert tasks["gatherer"]["wait_by"]["task"] == tasks["gatherer"]["wait_ns"] > 0
    for name in ("child-a", "child-b"):
        assert tasks[name]["state"] == "pending"
        assert tasks[name]["awaits"] == [{"kind": "sleep", "name": "asyncio.sleep"}]
        by = {f["name"]: f for f in tasks[name]["functions"]}
        assert by["child"]["calls"] == 1
    for t in tasks.values():
        assert sum(t["wait_by"].values()) == t["wait_ns"]


def test_json_without_tasks_has_an_empty_list(tmp_path):
    job = tmp_path / "plain.py"
    job.write_text("def f():\n    return 1\n\nfor _ in range(10):\n    f()\n")
    doc = _top_json(_record(tmp_path / "plain.pytrace", str(job)))
    assert doc["tasks"] == []
    s = doc["tasks_summary"]
    assert (s["seen"], s["kept"], s["folded"], s["malformed"]) == (0, 0, 0, 0), s


@needs_tasks
@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")
def test_task_mode_under_tmux(tasks_rec):
    t = Tmux("--file %s" % tasks_rec, name="pttasks")
    try:
        t.wait_for(lambda s: "ENDED" in s, what="the recording read to its end")
        t.keys("A")
        s = t.wait_for(lambda s: re.search(r"TASKS \(A\): \d+ seen", s) and "worker-19" in s, what="the task table")
        rows = [l for l in s.splitlines() if re.search(r"\bworker-\d+\b", l)]
        assert len(rows) == 20, s
        for l in rows:
            assert re.search(r"^\s*\d+\s+done\s+51\s", l), l  # ID, state, steps
        assert "sorted by running time" in s
        t.keys("w")
        t.wait_for(lambda s: "sorted by waiting time" in s, what="sorted by waiting time")
        # the filter keeps the tasks whose name matches; Enter shows that task's logical calls
        t.keys("/", "worker-7", "Enter")
        s = t.wait_for(lambda s: "filter: worker-7" in s and "1 shown" in s, what="the filtered task table")
        t.keys("Enter")
        s = t.wait_for(lambda s: "TASK worker-7 (#" in s and "logical calls" in s, what="worker-7's logical calls")
        assert "coroutine worker): done, 51 steps" in s, s
        assert "waited on: sleep" in s, s
        assert re.search(r"^\s*1\s.*\bworker\b", s, re.M), s
        assert re.search(r"^\s*50\s.*\bnap\b", s, re.M), s
        assert re.search(r"^\s*50\s.*\btally\b", s, re.M), s
        t.keys("Escape")
        t.wait_for(lambda s: "TASKS (A)" in s and "worker-7" in s, what="back to the task table")
        t.keys("A")
        t.wait_for(lambda s: "TASKS (A)" not in s and "FUNCTION" in s, what="out of task mode")
    finally:
        t.close()


@needs_tasks
@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")
def test_task_flame_graphs_under_tmux(tasks_rec):
    """f: the flame graph of the task under the cursor, rooted at its coroutine (its logical
    calls: worker once, nap 50 times), no other task in it; Esc back to the tasks; F: every
    task side by side, one frame per task under the root."""
    t = Tmux("--file %s" % tasks_rec, name="pttflame")

    def info(s):  # the flame's last line above the key bar: the selected frame in words
        lines = [l for l in s.splitlines() if l.strip()]
        return lines[-2] if len(lines) >= 2 else ""
    try:
        t.wait_for(lambda s: "ENDED" in s, what="the recording read to its end")
        t.keys("A")
        t.keys("/", "worker-7", "Enter")
        t.wait_for(lambda s: "filter: worker-7" in s and "1 shown" in s, what="the filtered task table")
        t.keys("f")
        s = t.wait_for(lambda s: "one task: running time" in s and info(s).startswith("task worker-7 "),
                       what="worker-7's flame graph, its frame selected")
        assert "coroutine worker, task #" in info(s), info(s)
        assert not re.search(r"\bworker-(?!7\b)\d+", s), s  # no other task's frame
        t.keys("j")
        s = t.wait_for(lambda s: re.match(r"worker\s.*tasks_job\.py:\d+\s.*\bcalls 1\b", info(s)),
                       what="worker selected: one logical call")
        t.keys("j")
        s = t.wait_for(lambda s: re.match(r"(nap|tally)\s.*\bcalls 50\b", info(s)),
                       what="nap or tally selected: 50 logical calls")
        t.keys("Escape")  # not zoomed: back to the tasks
        t.wait_for(lambda s: "TASKS (A)" in s and "worker-7" in s, what="back to the task table")
        t.keys("/", "Escape")  # the filter cleared
        t.wait_for(lambda s: "filter:" not in s and "worker-19" in s, what="the whole task table")
        t.keys("F")
        s = t.wait_for(lambda s: "every task: running time" in s and info(s).startswith("(root)"),
                       what="every task's flame graph")
        t.keys("j")  # the biggest task
        s = t.wait_for(lambda s: re.match(r"task (worker-\d+|Task-\d+) ", info(s)), what="a task's frame")
        t.keys("A")
        t.wait_for(lambda s: "TASKS (A)" in s, what="back to the task table")
    finally:
        t.close()


@needs_tasks
@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")
def test_task_mode_shows_what_pending_tasks_wait_on(pending_rec):
    t = Tmux("--file %s" % pending_rec, name="ptpending")
    try:
        t.wait_for(lambda s: "ENDED" in s, what="the recording read to its end")
        t.keys("A")

        def row(s, name):
            return [l for l in s.splitlines() if re.search(r"\s%s\s" % name, l)]
        s = t.wait_for(lambda s: "WAITING ON" in s and row(s, "getter") and row(s, "child-b"), what="the task table")
        assert re.search(r"^\s*\d+\s+pending\s+1\s.*\bgetter\b.*sync Queue\.get$", row(s, "getter")[0].rstrip()), s
        assert "task child-a, task child-b" in row(s, "gatherer")[0], s
        assert "sleep asyncio.sleep" in row(s, "child-a")[0], s
    finally:
        t.close()
