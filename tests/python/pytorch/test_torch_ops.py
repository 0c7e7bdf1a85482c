"""pytrace record --torch of a real training job: torch's operators, autograd nodes and
record_function labels arrive as spans (through pytrace's ITT collector), with the counts
torch.profiler reports for the same program, each nested under a Python call, and the
Python calls recorded exactly as without --torch."""
import json
import os
import re

import torchkit

ADDRESS = re.compile(r" at 0x[0-9a-f]+")
# torch's import builds sympy objects whose hashes are their addresses: the calls made
# under sympy (and what sympy calls) differ between two runs of the same program
NOISY_FILES = ("/sympy/",)
# random's rejection sampling draws again while a draw is out of range: how many times
# getrandbits runs is itself random (sympy's Dummy takes random.randint at import; the clean
# CI run saw getrandbits called once with --torch and twice without)
NOISY_CALLERS = (("/random.py", "_randbelow_with_getrandbits"),)


def _noisy(caller):
    return any(n in caller[0] for n in NOISY_FILES) or any(
        caller[0].endswith(f) and caller[2] == name for f, name in NOISY_CALLERS)


def test_ops_as_spans_match_torch_profiler(tmp_path):
    torchkit.need_torch()
    tmp = str(tmp_path)
    want = torchkit.profiler_counts(tmp)
    stats, err = torchkit.record(tmp, "torch", [torchkit.JOB, "plain"])
    got = torchkit.span_counts(stats)
    aten = {name: n for name, n in want.items() if name.startswith("aten::")}
    assert "aten::conv2d" in aten and len(aten) > 20, want
    wrong = {name: (n, got.get(name)) for name, n in aten.items() if got.get(name) != n}
    assert not wrong, "aten:: ops: (torch.profiler, pytrace spans) differ: %s" % wrong
    backward = {name: n for name, n in want.items() if name.endswith("Backward0")}
    assert backward and all(got.get(name) == n for name, n in backward.items()), (backward, got)
    labels = {name: n for name, n in want.items() if "#" in name}
    assert "Optimizer.step#SGD.step" in labels
    assert any(name.startswith("enumerate(DataLoader)#") for name in labels)
    assert all(got.get(name) == n for name, n in labels.items()), (labels, got)
    # every span has a caller: none is a root of the call tree, so each is nested under
    # a Python call on its thread (a span's callers are frames or spans, and what has no
    # caller is a Python frame)
    roots = [k for k, v in stats.items() if torchkit.span_name(k) is not None and not v[4]]
    assert not roots, roots[:10]
    assert "pytrace:" not in err.replace("pytrace: tracing pid", "").replace("pytrace record:", ""), err
    # --torch marks each Optimizer.step as a step: the job's 20 steps, on one thread
    top = torchkit.run([torchkit.PY, "-m", "pytrace", "top", "--file", os.path.join(tmp, "torch.pytrace"),
                        "--once", "--json"], cwd=tmp)
    steps = json.loads(top.stdout)["steps"]
    assert steps["count"] == 20 and steps["label"] == "SGD.step", steps


def _calls(stats):
    """{function: calls} of the non-span rows (pstats' ncalls), addresses taken out of
    names, without the calls made from NOISY_FILES or NOISY_CALLERS (counted per caller). A
    caller may be a span: a Python call inside an op or record_function label is that
    span's callee."""
    out = {}
    for key, value in stats.items():
        if torchkit.span_name(key) is not None or any(n in key[0] for n in NOISY_FILES):
            continue
        k = (key[0], key[1], ADDRESS.sub("", key[2]))
        calls = value[1] if not value[4] else sum(
            cv[1] for caller, cv in value[4].items() if not _noisy(caller))
        out[k] = out.get(k, 0) + calls
    return out


def test_python_calls_same_with_and_without_torch(tmp_path):
    torchkit.need_torch()
    tmp = str(tmp_path)
    # the job's directory is not the one the recordings go to: a directory that changes
    # while a program imports from it is listed again (FileFinder), one call more
    job = os.path.join(tmp, "job")
    os.mkdir(job)
    with_torch, _ = torchkit.record(tmp, "torch", [torchkit.JOB, "plain"], cwd=job)
    without, _ = torchkit.record(tmp, "plain", [torchkit.JOB, "plain"], torch=False, cwd=job)
    assert torchkit.span_counts(with_torch) and not torchkit.span_counts(without)
    a, b = _calls(with_torch), _calls(without)
    diff = sorted((k, a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k))
    assert len(a) > 5000
    assert not diff, "%d call counts differ (with --torch, without): %s" % (len(diff), diff[:20])
