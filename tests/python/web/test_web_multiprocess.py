"""A recording of a job that forks workers (`pytrace record` follows children by default)
holds several processes; every Python reader of it keeps them apart, as pytrace-top does
(viewer/core/aggset.h):

- pytrace.Profile lists the processes (the job first) and each one's table equals the
  pstats export of that process (`pytrace export --pid`), and the worker function's calls
  per process are the tasks the job says that process ran;
- the HTML report holds every process: its chooser lists them, and each shows its own
  calls in chromium; with --pid it holds that process alone;
- `pytrace web --file` lists the processes of the one stream, and switching shows that
  worker's calls.
"""

import json
import os
import pstats
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from helpers import PY
from webkit import WebServer, _page, _wait, browser, needs_browser  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

WORKERS = 3
TASKS = 60
PARENT_CALLS = 7

JOB = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys
    def work(i):
        s = 0
        for k in range(3000):
            s += k
        return os.getpid()
    def parent_side():
        return sum(range(100))
    if __name__ == "__main__":
        workers, tasks, parent_calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
        for _ in range(parent_calls):
            parent_side()
        with mp.get_context("fork").Pool(workers) as p:
            pids = p.map(work, range(tasks), chunksize=1)
        per = {}
        for pid in pids:
            per[pid] = per.get(pid, 0) + 1
        print(json.dumps({"job": os.getpid(), "ran": per}))
""")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """(recording, job pid, {worker pid: tasks it ran})"""
    tmp = tmp_path_factory.mktemp("pool")
    script = tmp / "job.py"
    script.write_text(JOB)
    out = tmp / "pool.pytrace"
    p = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(out), "--", PY, str(script),
                        str(WORKERS), str(TASKS), str(PARENT_CALLS)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    said = json.loads(p.stdout.strip().splitlines()[-1])
    ran = {int(k): v for k, v in said["ran"].items()}
    assert sum(ran.values()) == TASKS
    return out, said["job"], ran


def _calls_of(rows, name):
    return sum(r[1] for r in rows if r[0] == name)


def _pstats_rows(rec, pid, out):
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "-f", "pstats", "--qualnames", "--pid",
                        str(pid), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return pstats.Stats(str(out)).stats


def _key(f):
    """A Profile row named as pstats (--qualnames) names it."""
    if f.kind == 1:
        return ("~", 0, "<built-in method %s>" % f.name)
    if f.kind == 2:
        return ("~", 0, "<span '%s'>" % f.name)
    return (f.file, f.line, f.name)


def test_profile_each_process_equals_its_pstats_export(pool, tmp_path):
    from pytrace import Profile
    rec, job_pid, ran = pool
    prof = Profile.from_recording(str(rec))
    procs = prof.processes()
    pids = [p.pid for p in procs]
    assert pids[0] == job_pid and procs[0].index == 0        # the job's root first
    assert set(ran) <= set(pids[1:]), (pids, ran)
    assert len(set(pids)) == len(pids)
    # the job exits; the pool's terminate() ends its idle workers (SIGTERM from their parent: an
    # end, not a death), or they took its sentinel and left first: every one exited
    assert all(p.state == "exited" for p in procs), procs
    assert prof.counters()["processes"] == len(procs)
    for p in procs:
        rows = prof.functions(process=p.index)
        mine, merged = {}, {}
        for f in rows:
            c, pc, s, t = mine.get(_key(f), (0, 0, 0, 0))
            mine[_key(f)] = (c + f.calls, pc + f.prim_calls, s + f.self_ns, t + f.total_ns)
            merged[_key(f)] = merged.get(_key(f), 0) + 1   # functions pstats names alike
        st = _pstats_rows(rec, p.pid, tmp_path / ("%d.pstats" % p.pid))
        assert set(mine) == set(st), (p.pid, set(mine) ^ set(st))
        for key, (cc, nc, tt, ct, _callers) in st.items():
            calls, prim, self_ns, total_ns = mine[key]
            assert (calls, prim) == (nc, cc), (p.pid, key)
            # ns rounding: up to 2 ns for each function that pstats adds up under this key
            slack = 2 * merged[key]
            assert abs(self_ns - tt * 1e9) <= slack and abs(total_ns - ct * 1e9) <= slack, (p.pid, key)
        work = sum(f.calls for f in rows if f.name == "work")
        side = sum(f.calls for f in rows if f.name == "parent_side")
        assert work == ran.get(p.pid, 0), (p.pid, work, ran)
        assert side == (PARENT_CALLS if p.index == 0 else 0), (p.pid, side)
        assert prof.process(p.index)["pid"] == p.pid
        assert prof.counters(process=p.index)["events"] == p.events > 0
        # the tree and the threads are the process's own too
        assert sum(n.calls for n in prof.tree(process=p.index) if n.name == "work") == work
        assert prof.threads(process=p.index)
    with pytest.raises(IndexError):
        prof.functions(process=len(procs))
    agg = prof.aggregator      # every query of the binding refuses a process it does not hold
    for query in (agg.counters, agg.process_info, agg.threads, agg.stacks, agg.symbols):
        for bad in (len(procs), -1):
            with pytest.raises(IndexError):
                query(process=bad)


def _report_rows(page):
    return page.evaluate("""() => [...pytrace.state.rows.values()].map(r => {
        const s = pytrace.state.symbols.get(r.sym); return [s.name, r.calls]; })""")


@needs_browser
def test_html_report_holds_every_process(pool, tmp_path, browser):
    rec, job_pid, ran = pool
    html = tmp_path / "report.html"
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "--format", "html", "-o", str(html)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    errors, requests = [], []
    context, page = _page(browser, errors)
    context.set_offline(True)
    context.route("**/*", lambda route: (requests.append(route.request.url), route.abort())
                  if not route.request.url.startswith("file:") else route.continue_())
    page.goto("file://" + str(html))
    _wait(page, "window.pytrace && pytrace.state.rows.size > 0")
    assert not page.evaluate("document.querySelector('#process-label').hidden")
    options = page.evaluate("""() => [...document.querySelectorAll('#process option')].map(
        o => [o.value, o.textContent])""")
    shown_pids = [int(text.split()[1]) for _v, text in options]
    assert shown_pids[0] == job_pid and set(ran) <= set(shown_pids)
    # the job first: its own calls, none of the workers'
    rows = _report_rows(page)
    assert _calls_of(rows, "parent_side") == PARENT_CALLS and _calls_of(rows, "work") == 0
    assert "pid %d" % job_pid in page.inner_text("#title")
    for value, text in options[1:]:
        pid = int(text.split()[1])
        page.select_option("#process", value)
        _wait(page, "pytrace.state.status.pid === %d" % pid)
        rows = _report_rows(page)
        assert _calls_of(rows, "work") == ran.get(pid, 0), (pid, rows)
        assert _calls_of(rows, "parent_side") == 0
        assert "pid %d" % pid in page.inner_text("#title")
        if ran.get(pid):
            assert page.evaluate("pytrace.width('work')") > 0
    assert requests == [] and errors == [], (requests, errors)
    context.close()

    # --pid: that process alone
    one = sorted(ran)[0]
    html1 = tmp_path / "one.html"
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "--format", "html", "--pid", str(one),
                        "-o", str(html1)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "1 of %d processes (pids %d)" % (len(shown_pids), one) in r.stderr
    context, page = _page(browser, errors)
    page.goto("file://" + str(html1))
    _wait(page, "window.pytrace && pytrace.state.rows.size > 0")
    assert page.evaluate("document.querySelector('#process-label').hidden")
    assert page.evaluate("pytrace.state.status.pid") == one
    assert _calls_of(_report_rows(page), "work") == ran[one]
    assert errors == []
    context.close()
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "--format", "html", "--pid", "1",
                        "-o", str(tmp_path / "none.html")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "no process with pid 1" in r.stderr
    assert not (tmp_path / "none.html").exists()


def test_html_report_names_each_process_and_says_how_it_ended(pool, tmp_path, browser):
    """The report's process chooser names the job by its command (it said the recording's
    file name) and each process with its state, and the status line of each process says
    how it ended as pytrace-top does: the job "exited", and the workers of a `with Pool`
    "exited" too, whether its __exit__ terminated them (SIGTERM from their parent: an end, not
    a crash) or they took its sentinel first. The report said "recording" for every one."""
    from pytrace import Profile
    rec, job_pid, ran = pool
    entries = Profile.from_recording(str(rec)).processes()
    states = {e.pid: e.state for e in entries}
    # each process named as every view names it (pt_process_label): a pool worker by its
    # role (ForkPoolWorker-N), then its command without the interpreter's directory
    commands = {e.pid: e.label for e in entries}
    assert all(commands[p].startswith("ForkPoolWorker-") for p in ran), commands
    assert not commands[job_pid].startswith("/"), commands
    # the report must say what pytrace-top says (below, from the same rule)
    assert states[job_pid] == "exited" and {states[p] for p in ran} == {"exited"}, states
    html = tmp_path / "states.html"
    r = subprocess.run([PY, "-m", "pytrace", "export", str(rec), "--format", "html", "-o", str(html)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    errors = []
    context, page = _page(browser, errors)
    page.goto("file://" + str(html))
    _wait(page, "window.pytrace && pytrace.state.rows.size > 0")
    options = page.evaluate("""() => [...document.querySelectorAll('#process option')].map(
        o => [o.value, o.textContent])""")
    assert set(states) == {int(text.split()[1]) for _v, text in options}, (states, options)
    for value, text in options:
        pid = int(text.split()[1])
        assert text.startswith("pid %d  %s" % (pid, commands[pid][:20])), (text, commands[pid])
        assert text.endswith("(%s)" % states[pid]), (text, states[pid])
        page.select_option("#process", value)
        _wait(page, "pytrace.state.status.pid === %d" % pid)
        status = page.inner_text("#status").split(" \u00b7 ")
        assert status[:2] == ["recording", states[pid]], (pid, status)
    assert errors == []
    context.close()


def _api(srv, process, session):
    url = srv.base + "api/update?token=%s&session=%s&version=0&thread=0&window=0&process=%d" % (
        srv.token, session, process)
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@needs_browser
def test_web_file_lists_the_processes_of_the_stream(pool, tmp_path, browser):
    rec, job_pid, ran = pool
    srv = WebServer(tmp_path, ["--file", str(rec)])
    try:
        import time

        def picture():
            doc = _api(srv, 0, "first")
            per = {}
            for key, pid, _title in doc["processes"]:
                d = _api(srv, key, "s%d" % pid)
                syms = {s[0]: s[1] for s in d["symbols"]}
                rows = [(syms.get(r[0]), r[1]) for r in d["rows"]]
                per[pid] = (d["status"]["pid"], _calls_of(rows, "work"), _calls_of(rows, "parent_side"))
            return doc, per

        want = {pid: (pid, ran.get(pid, 0), PARENT_CALLS if pid == job_pid else 0) for pid in [job_pid] + list(ran)}
        deadline = time.monotonic() + 60
        while True:     # the feeder reads the file in the background
            doc, per = picture()
            if all(per.get(pid) == w for pid, w in want.items()):
                break
            assert time.monotonic() < deadline, (per, want)
            time.sleep(0.2)
        procs = doc["processes"]
        assert procs[0][1] == job_pid and procs[0][0] == 0 and set(ran) <= {p[1] for p in procs}
        # any other process of the job (none of its calls are the pool's work) adds nothing
        assert all(per[pid][1:] == (0, 0) for pid in per if pid not in want), per
        assert doc["status"]["processes"] == len(procs)

        errors = []
        context, page = _page(browser, errors)
        page.goto(srv.url)
        _wait(page, "pytrace.state.rows.size > 0 && !document.querySelector('#process-label').hidden")
        assert page.evaluate("document.querySelectorAll('#process option').length") == len(procs)
        worker = max(ran, key=ran.get)
        key = [k for k, pid, _t in procs if pid == worker][0]
        page.select_option("#process", str(key))
        _wait(page, "pytrace.state.status.pid === %d && pytrace.width('work') > 0" % worker)
        rows = _report_rows(page)
        assert _calls_of(rows, "work") == ran[worker] and _calls_of(rows, "parent_side") == 0
        assert "%d processes" % len(procs) in page.inner_text("#status")
        page.select_option("#process", str(procs[0][0]))
        _wait(page, "pytrace.state.status.pid === %d && [...pytrace.state.rows.values()].some("
                    "r => pytrace.state.symbols.get(r.sym).name === 'parent_side')" % job_pid)
        rows = _report_rows(page)
        assert _calls_of(rows, "work") == 0 and _calls_of(rows, "parent_side") == PARENT_CALLS
        assert errors == [], errors
        context.close()
    finally:
        srv.stop()


def test_profile_of_a_merged_stream_matches_each_process_alone_and_is_bounded(tmp_path):
    """streamgen's three processes (two give the same symbol ids to functions of other
    files): each process of the stream is what that process recorded alone gives; an
    Aggregator that may hold two processes reads two and counts the third's messages."""
    from pytrace import Profile
    from pytrace import _pytrace
    from pytrace.recording import RecordingReader
    from streamgen import PROCESSES, multi_recording
    path = tmp_path / "multi.pytrace"
    alone = multi_recording(str(path), 1)
    with RecordingReader(str(path)) as reader:
        messages = list(reader)
    order = []      # the tags in order of first sight (the stream interleaves them at random)
    for _t, data in messages:
        tag = _msg_process(data)
        if tag not in order:
            order.append(tag)
    pid_of = {tag: pid for tag, pid, _f, _c in PROCESSES}
    prof = Profile.from_recording(str(path))
    procs = prof.processes()
    assert [(p.tag, p.pid) for p in procs] == [(tag, pid_of[tag]) for tag in order]
    for p in procs:
        one = Profile.from_recording(alone[p.pid])
        assert prof.functions(process=p.index, sort="name") == one.functions(sort="name"), p.pid
        assert prof.paths(process=p.index) == one.paths(), p.pid
        assert prof.threads(process=p.index) == one.threads(), p.pid
    agg = _pytrace.Aggregator(max_processes=2)
    assert agg.feed_many(messages) == 0
    c = agg.counters()
    assert [p[2] for p in agg.processes()] == [pid_of[tag] for tag in order[:2]]
    assert c["processes"] == 2 and c["process_limit"] == 2
    third = sum(1 for _t, data in messages if _msg_process(data) == order[2])
    assert c["messages_past_process_limit"] == third > 0
    # the page's status line says so (pytrace web's status of any process of the stream)
    from pytrace.web import data as web_data
    st = web_data.status(web_data.ProcessView(agg, 1), processes=2)
    assert st["messages_past_process_limit"] == third and st["process_limit"] == 2


def _msg_process(data):
    from pytrace.reader import decode
    return decode(0, data).process
