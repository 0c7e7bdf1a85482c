"""How each process of a recorded job tree ended, and what it is, as pytrace-top --json
and the exports tell it.

A child that ends normally reads "exited", including the ways multiprocessing ends its
workers without running exit handlers: os._exit (fork workers, and a Process whose target
is a reference to os._exit taken before tracing changed anything), and the SIGTERM with
which a parent's Pool.terminate() (a `with Pool` block's end) ends its idle workers. A
child killed by anyone else, or by SIGKILL, "died". The program sees nothing of this:
same output, same exit codes of its children, SIGTERM's handler still SIG_DFL.

Each child is labelled by its role where multiprocessing knows it -- its Process name
(ForkPoolWorker-1, SpawnPoolWorker-2), "DataLoader worker N" for torch's workers -- which
it learns after its segment exists (ProcessInfo comes again with the role), and by its
command line without the interpreter's directory ("python prog.py fork"), a spawn child
by what multiprocessing runs ("python -m multiprocessing.spawn")."""

import json
import os
import subprocess
import sys

import pytest

from topkit import TOP

POOL = r"""
import multiprocessing as mp, os, signal, sys, time
def square(x): return x * x
def pid(_): time.sleep(0.05); return os.getpid()
if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    roles, names = {}, {}
    pool = ctx.Pool(2)                               # close + join: workers leave by os._exit
    assert sum(pool.map(square, range(100))) == 328350
    roles.update({p.pid: "close-join" for p in pool._pool})
    names.update({p.pid: p.name for p in pool._pool})
    pool.close(); pool.join(); pool.terminate()
    with ctx.Pool(2) as idle:                        # the block's end: terminate() = SIGTERM
        workers = list(idle._pool)
        names.update({w.pid: w.name for w in workers})
        while set(idle.map(pid, range(4), chunksize=1)) != {w.pid for w in workers}:
            pass                                     # both ran a task: both traced, both idle now
    for w in workers:
        w.join()
        # terminate() sends SIGTERM to the workers still there; one may have taken the
        # task handler's closing sentinel and left by os._exit(0) first
        roles[w.pid] = "terminated" if w.exitcode in (0, -15) else "terminated %s" % w.exitcode
    busy = ctx.Process(target=time.sleep, args=(60,))  # ended by its parent: Process.terminate()
    busy.start(); time.sleep(1.0); busy.terminate(); busy.join()
    roles[busy.pid] = "parent's terminate %s" % busy.exitcode
    ref = ctx.Process(target=os._exit, args=(0,))    # the real os._exit, taken before the fork
    ref.start(); ref.join()
    roles[ref.pid] = "os._exit %s" % ref.exitcode
    names[ref.pid] = ref.name
    names[busy.pid] = busy.name
    killed = ctx.Process(target=time.sleep, args=(60,))
    killed.start(); time.sleep(1.0); os.kill(killed.pid, signal.SIGKILL); killed.join()
    roles[killed.pid] = "sigkill %s" % killed.exitcode
    import json
    print(json.dumps({"roles": roles, "names": names,
                      "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}))
"""


def _processes(rec):
    r = subprocess.run([TOP, "--file", str(rec), "--once", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return {p["pid"]: p for p in json.loads(r.stdout)["processes"]}


def _states(rec):
    return {pid: p["state"] for pid, p in _processes(rec).items()}


def _command_label(command):
    """The command part of a process's label: the interpreter without its directory, and
    for a spawn child what multiprocessing runs."""
    argv0, _, rest = command.partition(" ")
    if " -c from multiprocessing.spawn import" in " " + rest:
        rest = "-m multiprocessing.spawn"
    return os.path.basename(argv0) + (" " + rest if rest else "")


def _exported_names(rec, tmp_path):
    """{pid: process name} in the Perfetto export (its last ProcessDescriptor, as the
    trace processor keeps it) and in the Chrome export (its last process_name)."""
    from pftrace_reader import read_trace
    out = {}
    for fmt in ("perfetto", "chrome"):
        path = tmp_path / ("out." + fmt)
        r = subprocess.run([sys.executable, "-m", "pytrace", "export", str(rec), "-f", fmt, "-o", str(path)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        if fmt == "perfetto":
            _tracks, procs, *_rest = read_trace(str(path))
            out[fmt] = {pid: name for pid, name in procs.values()}
        else:
            doc = json.load(open(path))
            events = doc["traceEvents"] if isinstance(doc, dict) else doc
            out[fmt] = {e["pid"]: e["args"]["name"].rsplit(" (pid ", 1)[0] for e in events
                        if e.get("ph") == "M" and e.get("name") == "process_name"}
    return out


def _record(tmp_path, source, *args):
    prog = tmp_path / "prog.py"
    prog.write_text(source)
    rec = tmp_path / "rec.pytrace"
    r = subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", str(rec), "--", sys.executable, str(prog),
                        *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return rec, r.stdout


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_that_end_normally_or_by_their_parents_terminate_read_exited(tmp_path, method):
    rec, out = _record(tmp_path, POOL, method)
    told = json.loads(out.strip().splitlines()[-1])
    roles = {int(pid): role for pid, role in told["roles"].items()}
    # the program saw what it sees untraced
    assert told["sigterm_default"] is True
    assert sorted(roles.values()) == sorted(["close-join"] * 2 + ["terminated"] * 2 + ["os._exit 0",
                                                                                   "parent's terminate -15",
                                                                                   "sigkill -9"])
    procs = _processes(rec)
    for pid, role in roles.items():
        want = "died" if role.startswith("sigkill") else "exited"
        assert procs[pid]["state"] == want, (role, pid, procs[pid])
        # and how: the ones their parent's SIGTERM ended say so
        if role.endswith("-15"):
            assert procs[pid]["ended_by"] == "SIGTERM from its parent", procs[pid]
        elif role in ("close-join", "os._exit 0"):
            assert procs[pid]["ended_by"] is None, procs[pid]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_each_process_is_labelled_by_its_role_and_command(tmp_path, method):
    rec, out = _record(tmp_path, POOL, method)
    names = {int(pid): name for pid, name in json.loads(out.strip().splitlines()[-1])["names"].items()}
    procs = _processes(rec)
    job = [p for p in procs.values() if p["ppid"] not in procs]
    assert len(job) == 1 and job[0]["role"] is None
    assert job[0]["label"] == "%s %s %s" % (os.path.basename(sys.executable), tmp_path / "prog.py", method)
    # every child the program started, with the name multiprocessing gave it (the SIGKILLed
    # one too: it had started), pool workers among them
    assert set(names) <= set(procs), (names, procs)
    assert sum(n.startswith("%sPoolWorker-" % method.capitalize()) for n in names.values()) == 4, names
    exported = _exported_names(rec, tmp_path)
    for pid, name in names.items():
        p = procs[pid]
        assert p["role"] == name, (pid, p)
        assert p["label"] == "%s: %s" % (name, _command_label(p["command"])), p
        if method == "spawn":
            assert p["label"].endswith(" -m multiprocessing.spawn"), p
        for fmt, shown in exported.items():
            assert shown[pid] == p["label"], (fmt, pid, shown)
    # speedscope: a profile per (process, thread), named with the process's role
    speedscope = tmp_path / "out.speedscope"
    r = subprocess.run([sys.executable, "-m", "pytrace", "export", str(rec), "-f", "speedscope", "-o",
                        str(speedscope)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    profiles = [prof["name"] for prof in json.load(open(speedscope))["profiles"]]
    for pid, name in names.items():
        assert any(n.startswith("pid %d (%s): " % (pid, name)) for n in profiles), (pid, name, profiles)


DATALOADER = r"""
import torch
from torch.utils.data import DataLoader, Dataset
class Numbers(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i): return torch.full((4,), float(i))
if __name__ == "__main__":
    for epoch in range(2):
        assert sum(int(b.sum()) for b in DataLoader(Numbers(), batch_size=8, num_workers=2)) == 4 * 2016
    print("ok")
"""


def test_dataloader_workers_at_the_end_of_each_epoch_read_exited(tmp_path):
    pytest.importorskip("torch")
    rec, out = _record(tmp_path, DATALOADER)
    assert out.strip() == "ok"
    procs = _processes(rec)
    assert len(procs) == 1 + 2 * 2, procs            # the job and two workers per epoch
    assert {p["state"] for p in procs.values()} == {"exited"}, procs
    # each worker by its index (torch.utils.data.get_worker_info().id), in both epochs
    roles = sorted(str(p["role"]) for p in procs.values())
    assert roles == ["DataLoader worker 0"] * 2 + ["DataLoader worker 1"] * 2 + ["None"], roles
    exported = _exported_names(rec, tmp_path)
    for pid, p in procs.items():
        if p["role"]:
            assert p["label"] == "%s: %s" % (p["role"], _command_label(p["command"])), p
            assert exported["perfetto"][pid] == exported["chrome"][pid] == p["label"], (pid, exported)
