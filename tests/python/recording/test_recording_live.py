"""`pytrace record` against real traced processes, and the exports of what it wrote.

The workload has a known shape; every format must show the same calls and nesting as
the reference aggregation (calltree (tests/python/support/calltree.py)) rebuilt from the recorded stream.
"""

import collections
import json
import os
import pstats
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytrace = pytest.importorskip("pytrace")
try:
    from pytrace import _pytrace  # noqa: F401
except ImportError:
    pytest.skip("the _pytrace extension is not built", allow_module_level=True)

from pytrace import recording as rec  # noqa: E402
from calltree import CallTree  # noqa: E402

from exportcheck import _check_nesting, _collapsed, check_speedscope  # noqa: E402

PY = sys.executable

WORKLOAD = textwrap.dedent("""
    import os, sys, threading, time

    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    def gen(k):
        for i in range(k):
            yield i

    def boom():
        raise KeyError("x")

    def main():
        go = os.environ.get("WORKLOAD_GO")
        if go:
            while not os.path.exists(go):
                time.sleep(0.01)
        for _ in range(3):
            fib(10)
        sum(gen(5))
        for _ in range(4):
            try:
                boom()
            except KeyError:
                pass
        t = threading.Thread(target=fib, args=(8,), name="worker")
        t.start()
        t.join()
        hold = os.environ.get("WORKLOAD_HOLD")
        if hold:
            while not os.path.exists(hold):
                time.sleep(0.01)
        sys.exit(int(os.environ.get("WORKLOAD_EXIT", "0")))

    main()
""")


def _env(**extra):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "workload.py"
    path.write_text(WORKLOAD)
    return path


def _record(tmp_path, workload, *opts, env=None, timeout=120):
    out = tmp_path / "out.pytrace"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(out), *opts, "--", PY, str(workload)],
                       capture_output=True, text=True, timeout=timeout, env=env or _env(),
                       cwd=str(tmp_path))
    return r, out


def _reference_tree(path):
    tree = CallTree(include_spans=False, frames_count_as_calls=True)
    for msg_type, data in rec.RecordingReader(path):
        tree.feed_raw(msg_type, data)
    return tree


def _key_of_label(label):
    """collapsed frame label -> calltree node key"""
    if label.endswith(")") and " (" in label:
        name, _, loc = label[:-1].rpartition(" (")
        file, _, line = loc.rpartition(":")
        return "py:%s:%s:%s" % (name, file, line)
    return "c:%s" % label


def _pstats_key(key):
    """calltree node key -> pstats key"""
    kind, rest = key.split(":", 1)
    if kind == "c":
        return ("~", 0, "<built-in method %s>" % rest)
    name, file, line = rest.split(":", 1)[0], rest.split(":", 1)[1].rsplit(":", 1)[0], rest.rsplit(":", 1)[1]
    return (file, int(line), name)


def _short(key):
    return key.split(":")[1]


def test_record_then_export_every_format(tmp_path, workload):
    r, out = _record(tmp_path, workload)
    assert r.returncode == 0, r.stderr
    assert "recording lossless (policy wait): the job waits when the ring is full" in r.stderr
    summary = [line for line in r.stderr.splitlines() if "events written" in line][-1]
    assert ", 0 events dropped, " in summary and str(out) in summary
    written = int(summary.split("pytrace record: ")[1].split(" events written")[0])
    reader = rec.RecordingReader(out)
    msgs = list(reader)
    assert reader.lossless and reader.finished_flag
    assert msgs[0][0] == 1 and msgs[-1][0] == 7
    assert sum(m.count for m in rec.RecordingReader(out).messages() if m.type == 5) == written
    assert int(summary.split(" bytes, ")[0].rsplit(" ", 1)[1]) == os.path.getsize(out)

    tree = _reference_tree(out)
    ref_paths = tree.edges()
    assert sum(v for k, v in ref_paths.items() if _short(k[-1]) == "fib") == 3 * 177 + 67

    # collapsed, weighted by calls: the same paths and counts as the reference tree
    folded = tmp_path / "c.folded"
    assert subprocess.run([PY, "-m", "pytrace", "export", str(out), "--format", "collapsed",
                           "--weight", "calls", "-o", str(folded)]).returncode == 0
    ours = {tuple(_key_of_label(lbl) for lbl in line.rsplit(" ", 1)[0].split(";")):
            int(line.rsplit(" ", 1)[1]) for line in open(folded)}
    assert ours == {k: v for k, v in ref_paths.items() if v}

    calls_by_fn = collections.Counter()
    for k, v in ref_paths.items():
        calls_by_fn[_short(k[-1])] += v
    assert calls_by_fn["gen"] == 6 and calls_by_fn["boom"] == 4

    # time-weighted collapsed parses as flamegraph.pl input
    tfold = tmp_path / "t.folded"
    subprocess.run([PY, "-m", "pytrace", "export", str(out), "-f", "collapsed", "-o", str(tfold)], check=True)
    assert sum(_collapsed(tfold).values()) > 0

    # pstats: loadable, same call counts per function (keyed by qualname, as the tree is)
    pst = tmp_path / "p.pstats"
    subprocess.run([PY, "-m", "pytrace", "export", str(out), "-f", "pstats", "--qualnames", "-o", str(pst)],
                   check=True)
    stats = pstats.Stats(str(pst)).stats
    fib = [v for k, v in stats.items() if k[2] == "fib"]
    assert len(fib) == 1 and fib[0][1] == 3 * 177 + 67 and fib[0][0] == 4   # 4 outermost calls
    calls_by_key = collections.Counter()
    for k, v in ref_paths.items():
        calls_by_key[_pstats_key(k[-1])] += v
    assert {k: v[1] for k, v in stats.items()} == {k: v for k, v in calls_by_key.items() if v}
    if subprocess.run([PY, "-c", "import gprof2dot"]).returncode == 0:
        g = subprocess.run([PY, "-m", "gprof2dot", "-f", "pstats", str(pst)], capture_output=True,
                           text=True, timeout=120)
        assert g.returncode == 0 and "digraph" in g.stdout, g.stderr

    # chrome: X events per function equal the calls, nested per thread
    tj = tmp_path / "t.json"
    subprocess.run([PY, "-m", "pytrace", "export", str(out), "-f", "chrome", "-o", str(tj)], check=True)
    doc = json.load(open(tj))
    per_tid = collections.defaultdict(list)
    xcount = collections.Counter()
    thread_names = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in ("python", "c"):
            per_tid[e["tid"]].append(e)
            xcount[e["name"]] += 1
        elif e["ph"] == "M" and e["name"] == "thread_name":
            thread_names[e["tid"]] = e["args"]["name"]
    assert xcount["fib"] == calls_by_fn["fib"] and xcount["gen"] == 6
    assert len(thread_names) == 2          # main thread and the worker, each named
    assert any(n.startswith("MainThread") for n in thread_names.values())
    for evs in per_tid.values():
        _check_nesting(evs)

    # speedscope: structure, and opens per frame equal the calls
    ss = tmp_path / "s.json"
    subprocess.run([PY, "-m", "pytrace", "export", str(out), "-f", "speedscope", "-o", str(ss)], check=True)
    opens = check_speedscope(json.load(open(ss)))
    assert opens["fib"] == calls_by_fn["fib"] and opens["gen"] == 6


def test_record_drop_policy_is_announced_and_exit_code_kept(tmp_path, workload):
    r, out = _record(tmp_path, workload, "--policy", "drop", env=_env(WORKLOAD_EXIT=3))
    assert r.returncode == 3, r.stderr
    assert "recording with drops (policy drop)" in r.stderr
    reader = rec.RecordingReader(out)
    assert len(list(reader)) > 3 and not reader.lossless


def test_follow_reads_while_the_job_runs(tmp_path, workload):
    hold = tmp_path / "hold"
    out = tmp_path / "out.pytrace"
    proc = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(out), "--", PY, str(workload)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(WORKLOAD_HOLD=hold), cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 4096) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = []
        done = threading.Event()

        def follow():
            for msg in rec.RecordingReader(out, follow=True, timeout=60, interval=0.02).messages():
                seen.append(msg)
            done.set()

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        # the job is held: the follower has the beginning and keeps waiting
        deadline = time.monotonic() + 30
        while not any(m.type == 5 for m in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None
        assert seen and seen[0].type == 1 and any(m.type == 5 for m in seen)
        assert not done.is_set()
        hold.write_text("go")
        t.join(60)
        assert done.is_set()
        proc.wait(60)
    finally:
        hold.write_text("go")
        if proc.poll() is None:
            proc.kill()
    final = list(rec.RecordingReader(out).messages())
    assert [m.type for m in seen] == [m.type for m in final]
    assert sum(m.count for m in seen if m.type == 5) == sum(m.count for m in final if m.type == 5)


def test_record_attaches_to_a_running_pid(tmp_path, workload):
    go = tmp_path / "go"
    job = subprocess.Popen([PY, "-m", "pytrace", "run", "--policy", "wait", str(workload)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=_env(WORKLOAD_GO=go), cwd=str(tmp_path))
    out = tmp_path / "pid.pytrace"
    try:
        # wait for its segment
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(n.startswith("pytrace-%d-" % job.pid) for n in os.listdir("/dev/shm")):
                break
            time.sleep(0.02)
        recorder = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(out), str(job.pid)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        go.write_text("go")
        assert job.wait(60) == 0
        _, err = recorder.communicate(timeout=60)
        assert recorder.returncode == 0, err
        assert "recording lossless (policy wait)" in err and "events written" in err
    finally:
        go.write_text("go")
        for p in (job,):
            if p.poll() is None:
                p.kill()
    tree = _reference_tree(out)
    fib_calls = sum(v for k, v in tree.edges().items() if _short(k[-1]) == "fib")
    assert fib_calls == 3 * 177 + 67


def test_record_reports_a_missing_pid(tmp_path):
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(tmp_path / "x.pytrace"),
                        "--attach-timeout", "0.2", "999999"], capture_output=True, text=True, timeout=60)
    # issue 10: a pid that is gone is named as such, at once
    assert r.returncode == 1 and "no process 999999" in r.stderr


def test_record_pid_stops_on_ctrl_c_with_a_readable_file(tmp_path, workload):
    import signal
    hold = tmp_path / "hold"
    job = subprocess.Popen([PY, "-m", "pytrace", "run", "--policy", "wait", str(workload)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=_env(WORKLOAD_HOLD=hold), cwd=str(tmp_path))
    out = tmp_path / "int.pytrace"
    recorder = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(n.startswith("pytrace-%d-" % job.pid) for n in os.listdir("/dev/shm")):
                break
            time.sleep(0.02)
        recorder = subprocess.Popen([PY, "-m", "pytrace", "record", "-o", str(out), str(job.pid)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not (out.exists() and out.stat().st_size > 4096) and time.monotonic() < deadline:
            time.sleep(0.05)
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=60)
        assert recorder.returncode == 0, err
        assert "stopped by Ctrl-C" in err and "events written" in err
        assert job.poll() is None              # the job is not affected
    finally:
        hold.write_text("go")
        job.wait(60)
        if recorder is not None and recorder.poll() is None:
            recorder.kill()
    r = rec.RecordingReader(out)
    msgs = list(r)
    assert r.finished_flag and msgs[0][0] == 1 and any(t == 5 for t, _ in msgs)


def test_the_recorder_reads_the_policy_without_importing_flatbuffers(tmp_path):
    """The recorder runs beside the job on the same cores: it learns the job's policy
    from ProcessInfo with the C parser, and imports neither the flatbuffers package nor
    what that imports where installed (numpy: 80 ms of CPU and a BLAS thread pool)."""
    out = tmp_path / "r.pytrace"
    r = subprocess.run([PY, "-X", "importtime", "-m", "pytrace", "record", "-o", str(out), "--",
                        PY, "-c", "pass"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "recording lossless (policy wait)" in r.stderr
    # the recorder's own imports (the job's go to the same stderr: it imports neither)
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert "pytrace.record" in imported or "pytrace.cli" in imported, sorted(imported)[:20]
    assert not {m for m in imported if m.split(".")[0] in ("flatbuffers", "numpy")}
    reader = rec.RecordingReader(str(out))
    assert len(list(reader)) > 3 and reader.lossless and reader.finished_flag
