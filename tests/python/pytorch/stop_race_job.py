"""start(torch=True) / stop() over and over from one thread while the main thread runs
ops, some on torch's inter-op pool threads (native, outside the GIL): stop() writes the
closing records of rings whose owners may be writing an op that moment."""
import sys
import threading
import time

import pytrace

pytrace.start(torch=True)
import torch  # noqa: E402 - after start: torch reads its ITT collector at import

torch.set_num_interop_threads(2)


def branch(a):
    return torch.mm(a, a).relu()


@torch.jit.script
def both(a):
    fut = torch.jit.fork(branch, a)
    b = torch.add(a, a)
    return torch.jit.wait(fut) + b


done = threading.Event()
problems = []


def cycle():
    try:
        for _ in range(40):
            time.sleep(0.01)
            c = pytrace.stop()
            if c.first_error or c.hook_errors:
                problems.append((c.first_error, c.hook_errors))
            pytrace.start(torch=True)
            pytrace.counters()
    finally:
        done.set()


x = torch.randn(32, 32)
t = threading.Thread(target=cycle)
t.start()
n = 0
while not done.is_set():
    both(x)
    n += 1
t.join()
c = pytrace.stop()
print("rounds", n, "spans", pytrace._pytrace._itt_stats()["spans"])
if problems or c.first_error:
    sys.exit("problems: %r %r" % (problems, c.first_error))
