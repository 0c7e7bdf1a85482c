"""Ops on threads that never ran Python (torch's inter-op pool) get a ring of their own,
named from the OS and said to be native, with their ops as spans."""
import os
import re

import torchkit

HERE = os.path.dirname(os.path.abspath(__file__))


def test_native_pool_thread_ops(tmp_path):
    torchkit.need_torch()
    tmp = str(tmp_path)
    prog = os.path.join(HERE, "forked_ops.py")
    out = os.path.join(tmp, "forked.pytrace")
    torchkit.run([torchkit.PY, "-m", "pytrace", "record", "--torch", "-o", out, "--", torchkit.PY, prog], cwd=tmp)
    collapsed = os.path.join(tmp, "forked.txt")
    # the native threads' stacks start with their spans: three levels hold them
    torchkit.run([torchkit.PY, "-m", "pytrace", "export", out, "-f", "collapsed", "--per-thread",
                  "--weight", "calls", "--max-depth", "3", "-o", collapsed], cwd=tmp)
    native = {}
    with open(collapsed) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            m = re.match(r"thread (.*) \(tid \d+\)$", frames[0])
            assert m, line
            if m.group(1).endswith("(native)"):
                native.setdefault(m.group(1), {})[";".join(frames[1:])] = int(count)
    assert native, "no native thread in the recording"
    assert all(name.startswith("PTThreadPool") for name in native), native
    calls = {}
    for stacks in native.values():
        for stack, n in stacks.items():
            calls[stack] = calls.get(stack, 0) + n
    # the forked function and its ops, nested, on the pool threads; torch may run a fork
    # whose task has not started yet on the thread that waits for it (the main thread)
    assert calls.get("<forked function>;aten::mm", 0) > 0, calls
    assert calls.get("<forked function>;aten::mm") == calls.get("<forked function>;aten::relu"), calls
    # all 10, on whichever thread: counted by the core's pstats
    stats = os.path.join(tmp, "forked.pstats")
    torchkit.run([torchkit.PY, "-m", "pytrace", "export", out, "-f", "pstats", "-o", stats], cwd=tmp)
    import pstats
    spans = torchkit.span_counts(pstats.Stats(stats).stats)
    assert spans.get("<forked function>") == 10 and spans.get("aten::mm") == 10, spans


def test_stop_while_native_threads_write(tmp_path):
    """stop() and counters() take each ring's writer flag: 40 stop/start rounds while
    pool threads write ops end cleanly (no error, no hang, spans recorded)."""
    torchkit.need_torch()
    prog = os.path.join(HERE, "stop_race_job.py")
    r = torchkit.run([torchkit.PY, prog], cwd=str(tmp_path), timeout=240)
    words = r.stdout.split()
    assert words[0] == "rounds" and int(words[1]) > 0 and int(words[3]) > 0, r.stdout
