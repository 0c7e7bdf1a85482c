"""A stream of several processes (a job's process tree, a merged recording; every
message tagged with Message.process): each process keeps its own threads, symbols and
clock, so exporting one process with --pid gives exactly what that process alone gives
(pytrace-top, pstats and collapsed agree on it), exporting all of them gives the sum, and
the timeline formats put each process on its own track with its real pid.

The streams are built with streamgen.multi_recording: three random processes whose
messages are interleaved, two of which give the same symbol ids to functions of
different files, each also written alone (untagged) for comparison."""

import collections
import json
import subprocess

import pytest

from pftrace_reader import read_trace, slice_counts, track_parents
from streamgen import PROCESSES, multi_recording
from topkit import TOP

PIDS = [pid for _tag, pid, _file, _clock in PROCESSES]


def _export(path, fmt, out, *extra):
    from pytrace.export import main as export_main
    assert export_main([str(path), "-f", fmt, "-o", str(out), *extra]) == 0
    return out


def _key(name, file, line):
    return (name, file, line) if line > 0 else name


def _top(path, *extra, doc=None):
    r = subprocess.run([TOP, "--file", str(path), "--once", "--json", *extra], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    if doc is not None:
        doc.update(d)
    rows = collections.defaultdict(lambda: [0, 0, 0, 0])
    for f in d["functions"]:
        if f["calls"] or f["self_ns"] or f["total_ns"]:
            row = rows[_key(f["name"], f["file"], f["line"])]
            for i, field in enumerate(("calls", "prim_calls", "self_ns", "total_ns")):
                row[i] += f[field]
    return {k: tuple(v) for k, v in rows.items()}


def _pstats(path, out, *extra):
    import pstats
    _export(path, "pstats", out, "--qualnames", *extra)
    rows = {}
    for (file, line, name), (cc, nc, tt, ct, _callers) in pstats.Stats(str(out)).stats.items():
        if name.startswith("<span '"):
            key = name[len("<span '"):-2]
        elif file == "~":
            key = name[len("<built-in method "):-1]
        else:
            key = _key(name, file, line)
        rows[key] = (nc, cc, round(tt * 1e9), round(ct * 1e9))
    return rows


def _label(frame):
    name, sep, where = frame.rpartition(" (")
    if sep and where.endswith(")") and ":" in where:
        file, _, line = where[:-1].rpartition(":")
        if line.isdigit() and int(line) > 0:
            return (name, file, int(line))
    return frame


def _collapsed(path, tmp, *extra):
    """calls, primitive calls, self and total ns per function, from the folded stacks."""
    ns = _export(path, "collapsed", tmp / "n.folded", *extra)
    calls = _export(path, "collapsed", tmp / "c.folded", "--weight", "calls", *extra)
    rows = collections.defaultdict(lambda: [0, 0, 0, 0])

    def stacks(p):
        for line in open(p, encoding="utf-8"):
            stack, _, w = line.rstrip("\n").rpartition(" ")
            yield [_label(f) for f in stack.split(";")], int(w)

    for frames, w in stacks(calls):
        rows[frames[-1]][0] += w
        if frames[-1] not in frames[:-1]:
            rows[frames[-1]][1] += w
    unobserved = 0
    for frames, w in stacks(ns):
        if "<not observed>" in frames:      # time inside gaps: in no function, one line for all
            assert frames == ["<not observed>"], frames
            unobserved += 1
            continue
        rows[frames[-1]][2] += w
        for f in set(frames):
            rows[f][3] += w
    assert unobserved <= 1, "every process's and thread's time nobody saw is one stack"
    return {k: tuple(v) for k, v in rows.items() if any(v)}


def _add(tables):
    total = collections.defaultdict(lambda: [0, 0, 0, 0])
    for t in tables:
        for k, v in t.items():
            for i in range(4):
                total[k][i] += v[i]
    return {k: tuple(v) for k, v in total.items()}


@pytest.mark.parametrize("seed", range(4))
def test_each_process_exports_as_it_would_alone_and_all_add_up(seed, tmp_path):
    path = tmp_path / "job.pytrace"
    alone = multi_recording(str(path), seed)
    per_process, seen = {}, {}
    for pid in PIDS:
        top = _top(path, "--pid", str(pid))          # pytrace-top on that process of the stream
        assert top
        one = {}
        assert _top(alone[pid], doc=one) == top, pid  # = the process recorded alone, untagged
        seen[pid] = (one["events_seen"], one["events_dropped"], len(one["threads"]))
        ps = _pstats(path, tmp_path / "p.pstats", "--pid", str(pid))
        co = _collapsed(path, tmp_path, "--pid", str(pid))
        assert ps == top, pid
        assert co == top, pid
        per_process[pid] = top
    # worker.py's functions (process 2) use the same ids as gen.py's: they stay apart
    assert any(isinstance(k, tuple) and k[1] == "worker.py" for k in per_process[4102])
    assert not any(isinstance(k, tuple) and k[1] == "worker.py" for k in per_process[4101])
    everything = _add(per_process.values())
    doc = {}
    assert _top(path, doc=doc) == everything     # pytrace-top without --pid adds them up
    assert doc["process"] is None
    # its counts are every process's, added up; its threads, every process's
    assert doc["events_seen"] == sum(v[0] for v in seen.values())
    assert doc["events_dropped"] == sum(v[1] for v in seen.values())
    assert len(doc["threads"]) == sum(v[2] for v in seen.values())
    assert {t["process"] for t in doc["threads"]} == {tag for tag, *_ in PROCESSES}
    assert sorted((p["process"], p["pid"]) for p in doc["processes"]) == \
        sorted((tag, pid) for tag, pid, _f, _c in PROCESSES)
    assert _pstats(path, tmp_path / "all.pstats") == everything
    assert _collapsed(path, tmp_path) == everything
    two = _add([per_process[4101], per_process[4103]])
    assert _pstats(path, tmp_path / "two.pstats", "--pid", "4101", "--pid", "4103") == two


def test_unknown_pid_is_one_line_and_no_output(tmp_path, capsys):
    from pytrace.export import main as export_main
    path = tmp_path / "job.pytrace"
    multi_recording(str(path), 7)
    out = tmp_path / "x.pstats"
    assert export_main([str(path), "-f", "pstats", "--pid", "999", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no process with pid 999" in err and "pid 4101" in err and "pid 4102" in err
    assert not out.exists()


def _chrome_calls(path):
    doc = json.load(open(path))
    calls = collections.Counter()
    names, thread_pids = {}, collections.defaultdict(set)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            calls[e["pid"]] += 1
        elif e["ph"] == "M" and e["name"] == "process_name":
            assert e["pid"] not in names, "one process_name per process"
            names[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            thread_pids[e["pid"]].add(e["tid"])
    return calls, names, thread_pids


def test_chrome_has_a_track_per_process_with_its_pid(tmp_path):
    path = tmp_path / "job.pytrace"
    alone = multi_recording(str(path), 3)
    calls, names, threads = _chrome_calls(_export(path, "chrome", tmp_path / "all.json"))
    assert set(names) == set(PIDS)
    for tag, pid, _file, _clock in PROCESSES:
        assert names[pid] == "python job.py --rank %d (pid %d)" % (tag, pid)
        one, one_names, one_threads = _chrome_calls(_export(alone[pid], "chrome", tmp_path / "one.json"))
        assert calls[pid] == one[pid] > 0
        assert threads[pid] == one_threads[pid] == {1, 2, 3}


def test_perfetto_has_a_track_per_process_with_its_pid(tmp_path):
    path = tmp_path / "job.pytrace"
    alone = multi_recording(str(path), 4)
    out = _export(path, "perfetto", tmp_path / "all.pftrace")
    tracks, processes, slices, _instants, _n, _b = read_trace(out)
    parents, process_tracks = track_parents(out)
    assert sorted(pid for pid, _name in processes.values()) == sorted(PIDS)
    for uuid, (pid, tid, _name) in tracks.items():
        assert process_tracks[parents[uuid]] == pid     # the thread hangs under its process
    for pid in PIDS:
        one = _export(alone[pid], "perfetto", tmp_path / "one.pftrace")
        _t, _p, one_slices, *_ = read_trace(one)
        mine = {u: s for u, s in slices.items() if tracks[u][0] == pid}
        assert len(mine) == 3
        assert slice_counts(mine) == slice_counts(one_slices)


def test_speedscope_has_a_profile_per_process_and_thread(tmp_path):
    path = tmp_path / "job.pytrace"
    multi_recording(str(path), 5)
    doc = json.load(open(_export(path, "speedscope", tmp_path / "s.speedscope.json")))
    names = sorted(p["name"] for p in doc["profiles"])
    assert names == sorted("pid %d: T%d (tid %d)" % (pid, n, 5000 + n) for pid in PIDS for n in (1, 2, 3))


def test_top_cycles_processes_with_P_and_shows_each_ones_state(tmp_path):
    """pytrace-top on a stream of several processes: a processes line with each one's pid
    and state (exited: each sent its final status), the shown one [marked]; P moves to the
    next, whose functions (worker.py's for pid 4102) replace the table."""
    from topkit import Tmux
    path = tmp_path / "job.pytrace"
    multi_recording(str(path), 2)
    t = Tmux("--file %s" % path, width=220)

    def shown(screen):
        """The [marked] pid, once the whole screen is drawn for it (status line, key line)."""
        lines = screen.splitlines()
        line = next((ln for ln in lines if "processes (P):" in ln), None)
        if line is None or "[" not in line or not lines or "P:process" not in lines[-1]:
            return None
        pid = line.split("[", 1)[1].split()[0]
        return pid if ("pid %s " % pid) in lines[0] and "ENDED" in lines[0] else None

    try:
        s = t.wait_for(lambda s: shown(s) is not None, what="the processes line")
        line = next(ln for ln in s.splitlines() if "processes (P):" in ln)
        for pid in PIDS:
            assert "%d exited n/a" % pid in line, line
        seen = [shown(s)]
        for _ in range(len(PIDS) - 1):
            t.keys("P")
            s = t.wait_for(lambda s, prev=seen[-1]: shown(s) not in (None, prev), what="the next process")
            seen.append(shown(s))
            s = t.wait_for(lambda s, pid=seen[-1]: shown(s) == pid and (("worker.py" in s) == (pid == "4102")),
                           what="its table")
        assert sorted(int(p) for p in seen) == sorted(PIDS)
    finally:
        t.close()


def test_top_once_text_of_several_processes(tmp_path):
    path = tmp_path / "job.pytrace"
    multi_recording(str(path), 6)
    r = subprocess.run([TOP, "--file", str(path), "--once"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("processes 3  [ENDED]") and "threads 9" in lines[0], lines[0]
    assert lines[1].startswith("processes 3:") and "the table adds them up" in lines[1]
    for pid in PIDS:
        assert "pid %d exited" % pid in lines[1]
        assert sum("(pid %d)" % pid in ln for ln in lines) == 3      # its threads, marked with it
    r = subprocess.run([TOP, "--file", str(path), "--once", "--pid", "4102"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pid 4102  [ENDED]") and "threads 3" in r.stdout.splitlines()[0]
    assert "shown: pid 4102" in r.stdout and "worker.py" in r.stdout
    r = subprocess.run([TOP, "--file", str(path), "--once", "--pid", "1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pytrace-top: no process with pid 1 in the stream (its processes:")
    assert all("pid %d" % pid in err[0] for pid in PIDS)
