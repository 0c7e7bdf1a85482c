"""How each process of a recorded job tree ended, as pytrace-top --json tells it.

A child that ends normally reads "exited", including the ways multiprocessing ends its
workers without running exit handlers: os._exit (fork workers, and a Process whose target
is a reference to os._exit taken before tracing changed anything), and the SIGTERM with
which a parent's Pool.terminate() (a `with Pool` block's end) ends its idle workers. A
child killed by anyone else, or by SIGKILL, "died". The program sees nothing of this:
same output, same exit codes of its children, SIGTERM's handler still SIG_DFL."""

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
    roles = {}
    pool = ctx.Pool(2)                               # close + join: workers leave by os._exit
    assert sum(pool.map(square, range(100))) == 328350
    roles.update({p.pid: "close-join" for p in pool._pool})
    pool.close(); pool.join(); pool.terminate()
    with ctx.Pool(2) as idle:                        # the block's end: terminate() = SIGTERM
        workers = list(idle._pool)
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
    killed = ctx.Process(target=time.sleep, args=(60,))
    killed.start(); time.sleep(1.0); os.kill(killed.pid, signal.SIGKILL); killed.join()
    roles[killed.pid] = "sigkill %s" % killed.exitcode
    import json
    print(json.dumps({"roles": roles, "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}))
"""


def _states(rec):
    r = subprocess.run([TOP, "--file", str(rec), "--once", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return {p["pid"]: p["state"] for p in json.loads(r.stdout)["processes"]}


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
    states = _states(rec)
    for pid, role in roles.items():
        want = "died" if role.startswith("sigkill") else "exited"
        assert states.get(pid) == want, (role, pid, states)


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
    states = _states(rec)
    assert len(states) == 1 + 2 * 2, states          # the job and two workers per epoch
    assert set(states.values()) == {"exited"}, states
