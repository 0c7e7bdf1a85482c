"""What the torch tests share: skip without torch, run the training job under pytrace or
torch.profiler, read a recording's pstats (the C core's export: `pytrace export -f pstats`)."""
import json
import os
import pstats
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "train_job.py")
PY = sys.executable


def need_torch():
    """Skip the calling test, saying why, where torch is not importable (CI installs
    torch 2.13.0 for Python 3.11 only)."""
    try:
        r = subprocess.run([PY, "-c", "import torch"], capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip("importing torch took over 120 s")
    if r.returncode != 0:
        pytest.skip("torch is not importable by %s (CI installs torch 2.13.0 on Python 3.11 only)" % PY)


def env(**extra):
    e = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    for key in ("INTEL_LIBITTNOTIFY64", "INTEL_ITTNOTIFY_GROUPS"):
        e.pop(key, None)
    e.update(extra)
    return e


def run(args, cwd, timeout=300, **kw):
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env(), **kw)
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (args, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def record(tmp, name, program, torch=True, cwd=None):
    """`pytrace record [--torch] -o tmp/NAME.pytrace -- python PROGRAM...` -> its pstats
    (exported by the core) and the record's stderr."""
    out = os.path.join(tmp, name + ".pytrace")
    args = [PY, "-m", "pytrace", "record", "-o", out] + (["--torch"] if torch else []) + ["--", PY] + program
    r = run(args, cwd=cwd or tmp)
    stats = os.path.join(tmp, name + ".pstats")
    run([PY, "-m", "pytrace", "export", out, "-f", "pstats", "-o", stats], cwd=tmp)
    return pstats.Stats(stats).stats, r.stderr


SPAN = re.compile(r"^<span '(.*)'>$")


def span_name(key):
    m = SPAN.match(key[2])
    return m.group(1) if m else None


def span_counts(stats):
    return {span_name(k): v[1] for k, v in stats.items() if span_name(k) is not None}


def profiler_counts(tmp, steps=20):
    out = os.path.join(tmp, "profiler.json")
    run([PY, JOB, "profile", out, str(steps)], cwd=tmp)
    with open(out) as f:
        return json.load(f)
