"""Per-step time of a small PyTorch training job: untraced, under torch.profiler
(with_stack=True), under pytrace, under pytrace --torch; and the cost per op of pytrace's
ITT collector.

    python3.11 bench/torch_step.py [--rounds N] [--steps N] [--ops N]

The job is tests/python/pytorch/train_job.py's (a small CNN, SGD, a DataLoader over an
in-memory dataset, batch 8 of 16x16 images: small, so that Python's share shows). Each
mode runs in a fresh process, the modes interleaved round after round; the child times
each training step (perf_counter around train_step, after 5 warm-up steps) and the
figure is the median over all rounds. pytrace modes run under `pytrace record` (a reader
drains the rings to a file, policy wait: lossless), so what a step costs includes
keeping up with the recorder.

Per op: torch.add of two 4-element tensors in a loop, ns per call: untraced, under
pytrace (Python and C calls only), under pytrace --torch with the collector switched off
(torch's ITT instrumentation calls it, it returns at once), and on (each op a SpanBegin
and a SpanEnd in the ring), each a process of its own; then, in one process, the
collector off and on in turns (less noise): the difference is what the collector costs.
Needs torch (python3.11 here). Prints figures; asserts nothing.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_DIR = os.path.join(HERE, "..", "tests", "python", "pytorch")

CHILD = r'''
import json, os, sys, time
sys.path.insert(0, %(job_dir)r)
mode, out, steps, ops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import torch
if os.environ.get("BENCH_COLLECTOR_OFF"):
    sys.modules["pytrace._pytrace"]._itt_set(False)
import train_job
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
torch.set_num_threads(1)

def job(steps):
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 7 * 7, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn((steps + 5) * 8, 1, 16, 16),
                         torch.randint(0, 10, ((steps + 5) * 8,)))
    times = []
    for i, (x, y) in enumerate(DataLoader(data, batch_size=8)):
        t0 = time.perf_counter()
        train_job.train_step(model, opt, x, y)
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return times

def add_loop(n):
    a = torch.ones(4); b = torch.ones(4)
    add = torch.add
    t0 = time.perf_counter()
    for _ in range(n):
        add(a, b)
    return (time.perf_counter() - t0) / n * 1e9

result = {}
if mode == "profiler":
    with torch.profiler.profile(with_stack=True):
        result["steps"] = job(steps)
elif mode == "ops":
    add_loop(1000)
    result["ns_per_op"] = add_loop(ops)
elif mode == "collector":
    # the collector off and on in turns, in this one process: what it costs per op
    ext = sys.modules["pytrace._pytrace"]
    off, on = [], []
    for _ in range(10):
        ext._itt_set(False)
        off.append(add_loop(ops // 10))
        ext._itt_set(True)
        on.append(add_loop(ops // 10))
    result["off"], result["on"] = off, on
else:
    result["steps"] = job(steps)
with open(out, "w") as f:
    json.dump(result, f)
'''


def run_child(tmp, kind, child_mode, steps, ops, env_extra=None):
    script = os.path.join(tmp, "child.py")
    out = os.path.join(tmp, "out.json")
    args = [sys.executable, script, child_mode, out, str(steps), str(ops)]
    if kind in ("pytrace", "pytrace --torch"):
        rec = os.path.join(tmp, "rec.pytrace")
        args = ([sys.executable, "-m", "pytrace", "record", "-o", rec]
                + (["--torch"] if kind.endswith("--torch") else []) + ["--"] + args)
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    if r.returncode != 0:
        sys.exit("bench/torch_step.py: %s failed:\n%s" % (" ".join(args), r.stderr[-2000:]))
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ops", type=int, default=200000)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("bench/torch_step.py needs torch (pip install torch==2.13.0 on Python 3.11)")
    step_modes = [("untraced", "plain"), ("torch.profiler(with_stack=True)", "profiler"),
                  ("pytrace", "plain"), ("pytrace --torch", "plain")]
    op_modes = [("untraced", "untraced", None), ("pytrace", "pytrace", None),
                ("pytrace --torch, collector off", "pytrace --torch", {"BENCH_COLLECTOR_OFF": "1"}),
                ("pytrace --torch", "pytrace --torch", None)]
    steps = {name: [] for name, _ in step_modes}
    per_op = {name: [] for name, _, _ in op_modes}
    collector = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="pt-torch-bench-") as tmp:
        with open(os.path.join(tmp, "child.py"), "w") as f:
            f.write(CHILD % {"job_dir": os.path.abspath(JOB_DIR)})
        for _ in range(args.rounds):
            for name, child_mode in step_modes:
                kind = name if name.startswith("pytrace") else "untraced"
                steps[name] += run_child(tmp, kind, child_mode, args.steps, args.ops)["steps"]
            for name, kind, extra in op_modes:
                per_op[name].append(run_child(tmp, kind, "ops", args.steps, args.ops, extra)["ns_per_op"])
            r = run_child(tmp, "pytrace --torch", "collector", args.steps, args.ops)
            collector["off"] += r["off"]
            collector["on"] += r["on"]
    print("per-step time, median of %d steps (%d rounds x %d), %s, torch %s:"
          % (args.rounds * args.steps, args.rounds, args.steps, sys.version.split()[0], torch.__version__))
    base = statistics.median(steps["untraced"])
    for name, _ in step_modes:
        med = statistics.median(steps[name])
        print("  %-34s %8.1f us  (x%.2f)" % (name, med * 1e6, med / base))
    print("torch.add of 4-element tensors, ns per call (median of %d rounds x %d calls):"
          % (args.rounds, args.ops))
    for name, _, _ in op_modes:
        print("  %-34s %8.0f ns" % (name, statistics.median(per_op[name])))
    on, off = statistics.median(collector["on"]), statistics.median(collector["off"])
    print("  in one process under pytrace --torch, the collector off and on in turns (%d x %d calls "
          "each): %.0f / %.0f ns: the collector's own cost per op (a SpanBegin and a SpanEnd): %.0f ns"
          % (len(collector["on"]), args.ops // 10, off, on, on - off))


if __name__ == "__main__":
    main()
