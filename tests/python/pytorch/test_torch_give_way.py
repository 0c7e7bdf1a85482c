"""The program's own torch.profiler while pytrace records torch's ops: pytrace turns its
instrumentation off first and says so once; the profiler reports what it reports
without pytrace; Python calls stay traced."""
import json
import os

import torchkit

HERE = os.path.dirname(os.path.abspath(__file__))


def test_program_profiler_gets_its_own_results(tmp_path):
    torchkit.need_torch()
    tmp = str(tmp_path)
    prog = os.path.join(HERE, "give_way_job.py")
    alone = os.path.join(tmp, "alone.json")
    torchkit.run([torchkit.PY, prog, alone], cwd=HERE)
    traced = os.path.join(tmp, "traced.json")
    out = os.path.join(tmp, "traced.pytrace")
    r = torchkit.run([torchkit.PY, "-m", "pytrace", "record", "--torch", "-o", out, "--",
                      torchkit.PY, prog, traced], cwd=HERE)
    with open(alone) as f:
        want = json.load(f)
    with open(traced) as f:
        got = json.load(f)
    assert "aten::conv2d" in want
    assert got == want
    said = [line for line in r.stderr.splitlines() if "torch's profiler" in line]
    assert said == ["pytrace: the program started torch's profiler: pytrace stops recording torch's "
                    "ops (Python calls are still traced)"], r.stderr
    stats = os.path.join(tmp, "traced.pstats")
    torchkit.run([torchkit.PY, "-m", "pytrace", "export", out, "-f", "pstats", "-o", stats], cwd=tmp)
    import pstats
    rows = pstats.Stats(stats).stats
    assert torchkit.span_counts(rows) == {}, torchkit.span_counts(rows)
    steps = [v[1] for k, v in rows.items() if k[2] == "train_step" and k[0].endswith("train_job.py")]
    assert steps == [10]
