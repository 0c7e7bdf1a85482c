"""Steps (issue 22): a Mark with the Step flag ends a step of the program's loop.

A real loop of 30 steps of different lengths marks each step with pytrace.step(); it is
recorded with `pytrace record`, and the program times each step itself
(time.perf_counter() right after each pytrace.step()). Then:
  - pytrace-top --once --json: the `steps` object agrees with the program's own timing;
  - --last-step: the table is the last step alone;
  - the Perfetto export holds the 30 step instants and a Steps track of 30 slices whose
    durations are the same figures; chrome's step instants carry their numbers;
  - (the HTML report and the web view: tests/python/web/test_web_steps.py);
  - pytrace-top under tmux shows the steps line, and the key s the last step alone;
  - a real torch loop with SGD, its Optimizer.step marked by install_optimizer_steps()
    (skipped without torch), and a GAN's two optimizers: one step per iteration.

What the marks measure: a step runs from the previous Step mark to this one, both
written inside pytrace.step(); the program's interval runs from the perf_counter()
after one step() to the perf_counter() after the next. The two intervals are the same
but for the few microseconds between the mark and the perf_counter() call, which are
shifted by the same amount at both ends. So each step's two durations agree to well
under 0.5 ms (the tolerance below, also covering a scheduler hiccup inside one call).
The first step is the exception: pytrace's starts at the thread's first traced event
(the program's start under `pytrace record`), the program's at its loop, so it is
longer in pytrace; the median and p90 are compared by rank with that one value
allowed to differ.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from topkit import TOP, Tmux

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))

TOL_NS = 500_000  # see the module's docstring

LOOP = r'''
import json, sys, time
import pytrace

def work(n):
    s = 0
    for i in range(n):
        s += i
    return s

def train_step(k):
    work(2000 * (k % 4))
    time.sleep(0.001 * (1 + (k * 7) % 9))

def main(out):
    durations = []
    t0 = time.perf_counter()
    for k in range(30):
        train_step(k)
        pytrace.step("train")
        t1 = time.perf_counter()
        durations.append(t1 - t0)
        t0 = t1
    with open(out, "w") as f:
        json.dump(durations, f)

main(sys.argv[1])
'''

pytestmark = pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed")


def _run(*args, timeout=180):
    r = subprocess.run([PY, *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    d = tmp_path_factory.mktemp("steps")
    script, rec, durs = d / "loop.py", d / "loop.pytrace", d / "durations.json"
    script.write_text(LOOP)
    _run("-m", "pytrace", "record", "-o", str(rec), "--", PY, str(script), str(durs))
    program = [round(x * 1e9) for x in json.loads(durs.read_text())]
    assert len(program) == 30
    return d, str(rec), program


def _top_json(rec, *extra):
    r = subprocess.run([TOP, "--file", rec, "--once", "--json", *extra], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _nearest_rank(values, p):
    s = sorted(values)
    k = max(1, -(-int(p * 1000) * len(s) // 1000))  # ceil(p * n)
    return s[k - 1]


def test_top_json_steps_agree_with_the_program(loop):
    _d, rec, program = loop
    st = _top_json(rec)["steps"]
    assert st["count"] == 30 and st["last_index"] == 30
    assert st["label"] == "train"
    assert st["kept"] == 30 and st["folded"] == 0
    assert st["thread"] == 1 and st["threads"] == 1
    # the last step is the same interval as the program's last
    assert abs(st["last_ns"] - program[-1]) < TOL_NS, (st["last_ns"], program[-1])
    # median and p90 by rank: only step 1 may differ (it is longer in pytrace)
    for key, p in (("median_ns", 0.5), ("p90_ns", 0.9), ("p10_ns", 0.1)):
        low = _nearest_rank(program, p)
        high = _nearest_rank(program[1:] + [max(program) * 100], p)  # step 1 as the largest
        assert low - TOL_NS < st[key] < high + TOL_NS, (key, st[key], low, high)
    assert st["max_ns"] >= max(program[1:]) - TOL_NS
    assert st["min_ns"] <= min(program) + TOL_NS
    assert abs(st["last_end_ns"] - st["last_start_ns"] - st["last_ns"]) <= 1  # each rounded from ticks
    assert st["total_ns"] >= sum(program[1:]) - 29 * TOL_NS


def test_top_last_step_table_is_the_last_step_alone(loop):
    _d, rec, program = loop
    doc = _top_json(rec, "--last-step")
    assert doc["steps"]["functions_are_last_step"] is True
    rows = {f["name"]: f for f in doc["functions"]}
    # the last step called train_step once, work once and time.sleep once
    assert rows["train_step"]["calls"] == 1
    assert rows["work"]["calls"] == 1
    assert rows["time.sleep"]["calls"] == 1
    # and its time is the step's: train_step is inside it, <module> spans it
    assert rows["<module>"]["total_ns"] == doc["steps"]["last_ns"] or \
        rows["main"]["total_ns"] == doc["steps"]["last_ns"]
    assert rows["train_step"]["total_ns"] <= doc["steps"]["last_ns"]
    whole = {f["name"]: f for f in _top_json(rec)["functions"]}
    assert whole["train_step"]["calls"] == 30


def test_perfetto_export_has_the_steps(loop):
    d, rec, program = loop
    import pftrace_reader as pr
    out = d / "loop.pftrace"
    _run("-m", "pytrace", "export", "-f", "perfetto", "-o", str(out), rec)
    tracks, _procs, slices, instants, _n, _b = pr.read_trace(str(out))
    thread = [u for u, t in tracks.items() if t[2] == "MainThread"]
    assert len(thread) == 1
    marks = [i for i in instants[thread[0]] if i[0] == "train"]
    assert len(marks) == 30
    steps = [u for u, t in tracks.items() if t[2] == "Steps"]
    assert len(steps) == 1
    parents, _ = pr.track_parents(str(out))
    assert parents[steps[0]] == thread[0]
    sl = slices[steps[0]]
    assert [s[0] for s in sl] == ["step %d" % k for k in range(1, 31)]
    assert [s[4] for s in sl] == [m[1] for m in marks]  # each step ends at its mark
    st = _top_json(rec)["steps"]
    durs = [s[4] - s[3] for s in sl]
    # the same interval: Perfetto's is the difference of two timestamps, each rounded to
    # the ns from the clock's ticks; top's is the difference in ticks, rounded once
    assert abs(durs[-1] - st["last_ns"]) <= 1, (durs[-1], st["last_ns"])
    slowest = max(range(30), key=lambda k: durs[k])
    assert abs(durs[slowest] - st["max_ns"]) <= 1 and slowest + 1 == st["slowest_index"], (durs, st)
    for k in range(1, 30):
        assert abs(durs[k] - program[k]) < TOL_NS, (k + 1, durs[k], program[k])


def test_chrome_export_numbers_the_steps(loop):
    d, rec, _program = loop
    out = d / "loop.json"
    _run("-m", "pytrace", "export", "-f", "chrome", "-o", str(out), rec)
    ev = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "step"]
    assert [e["args"]["step"] for e in ev] == list(range(1, 31))
    assert all(e["ph"] == "i" and e["name"] == "train" for e in ev)


@pytest.mark.skipif(not __import__("shutil").which("tmux"), reason="tmux is not installed")
def test_top_step_mode_under_tmux(loop):
    _d, rec, _program = loop
    t = Tmux("--file %s" % rec, name="ptsteps")
    try:
        s = t.wait_for(lambda s: "steps (s): 30 on thread 1 [train]" in s, what="the steps line")
        assert "STEP MODE" not in s
        # the table filtered to `work`: in the whole run's table its row can be below the
        # screen, under the imports (on 3.15 on a loaded machine, marshal.loads took 133 ms)
        t.keys("/", "work", "Enter")
        t.wait_for(lambda s: "filter: work" in s, what="the filter")

        def work_rows(s):
            return [l for l in s.splitlines() if re.search(r"\s\d+\s+work\s", l)]
        # A capture can fall between two parts of one frame (tmux shows what the terminal was
        # sent so far: the new header above the old table), so each state is waited for whole,
        # header and row together; a screen that never reaches it fails with that screen.
        def shows(s, step_mode, calls):
            rows = work_rows(s)
            return (("STEP MODE: the last step alone" in s) == step_mode and bool(rows)
                    and re.search(r"\s%d\s+work\b" % calls, rows[0]) is not None)
        t.keys("s")
        s = t.wait_for(lambda s: shows(s, True, 1), what="step mode: one call of work in the last step")
        assert "last step" in s.splitlines()[0]
        t.keys("s")
        s = t.wait_for(lambda s: shows(s, False, 30) and "STEP MODE" not in s,
                       what="step mode off: the whole run's 30 calls of work")
    finally:
        t.close()


def test_step_without_tracing_is_a_no_op():
    r = _run("-c", "import pytrace\npytrace.step()\npytrace.step('x')\n"
                   "try:\n    pytrace.step(3)\nexcept TypeError as e:\n    print('TypeError', e)\n")
    assert r.stdout.startswith("TypeError pytrace.step: name must be a str")


TORCH_LOOP = r'''
import sys, time
import torch
import pytrace
from pytrace._steps import install_optimizer_steps

assert install_optimizer_steps()
torch.manual_seed(0)
gan = sys.argv[1] == "gan"
g = torch.nn.Linear(8, 8)
d = torch.nn.Linear(8, 1)
opt_g = torch.optim.SGD(g.parameters(), lr=0.01)
opt_d = torch.optim.Adam(d.parameters(), lr=0.01)
x = torch.randn(16, 8)
for it in range(12):
    loss = d(g(x)).pow(2).mean()
    opt_g.zero_grad()
    opt_d.zero_grad()
    loss.backward()
    r = opt_g.step()
    assert r is None
    if gan:
        opt_d.step()
print("loss %.6f" % float(d(g(x)).pow(2).mean()))
'''

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except Exception:  # noqa: BLE001
    HAVE_TORCH = False


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed for this Python")
@pytest.mark.parametrize("mode", ["sgd", "gan"])
def test_torch_optimizer_steps(tmp_path, mode):
    script, rec = tmp_path / "torch_loop.py", tmp_path / "torch.pytrace"
    script.write_text(TORCH_LOOP)
    plain = subprocess.run([PY, str(script), mode], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    traced = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(script), mode],
                            capture_output=True, text=True, timeout=300)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout  # the hook changes nothing
    st = _top_json(str(rec))["steps"]
    # one step per iteration: the first optimizer to step (SGD), not the GAN's second one
    assert st["count"] == 12, st
    assert st["label"] == "SGD.step"
    whole = {f["name"] for f in _top_json(str(rec))["functions"]}
    assert "_post_hook" not in whole  # the hook is pytrace's own: not traced (HIDDEN_FILES)
    doc = _top_json(str(rec), "--last-step")
    rows = {f["name"]: f for f in doc["functions"]}
    assert rows["SGD.step"]["calls"] == 1, sorted(rows)  # the last step ran the optimizer once
    if mode == "gan":
        assert rows["Adam.step"]["calls"] == 1
