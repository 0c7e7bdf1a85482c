"""Two Aggregators' trees and tables made at once in two threads (tree() and table()
build without the GIL): each is its own, in its order, as when made alone. The core
sorts a tree's children and a table's rows with comparators whose context was one
global for the process (agg.c tree_finish, pt_agg_table), so one thread's sort read
the other's nodes (a crash) or sort key."""

import subprocess
import threading

from helpers import PY
from pytrace.profile import Profile

JOB = """
import sys
N, DEPTH = int(sys.argv[1]), int(sys.argv[2])
F = []
for i in range(N):
    exec("def f%d(d):\\n    if d:\\n        for j in K[%d]:\\n            F[j](d - 1)\\n" % (i, i))
    F.append(globals()["f%d" % i])
K = [((i * 7 + 1) % N, (i * 13 + 5) % N, (i * 3 + 2) % N) for i in range(N)]
for f in F:
    f(DEPTH)
"""


def _record(tmp_path, name, n, depth):
    job, rec = tmp_path / (name + ".py"), tmp_path / (name + ".pytrace")
    job.write_text(JOB)
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(job), str(n), str(depth)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return Profile.from_recording(str(rec))


def test_two_trees_at_once_each_its_own(tmp_path):
    big, small = _record(tmp_path, "big", 60, 4), _record(tmp_path, "small", 7, 1)
    aggs = [big.aggregator, small.aggregator]
    alone = [a.tree() for a in aggs]
    assert len(alone[0][1]) > 5000 and len(alone[1][1]) < 100, [len(t[1]) for t in alone]
    got = [[], []]

    def run(i):
        for _ in range(40 if i == 0 else 4000):
            got[i].append(aggs[i].tree())

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (0, 1):
        bad = sum(t != alone[i] for t in got[i])
        assert bad == 0, (i, bad, len(got[i]))


def test_two_tables_at_once_each_in_its_order(tmp_path):
    big, small = _record(tmp_path, "big", 60, 2), _record(tmp_path, "small", 7, 1)
    calls = [(big.aggregator, "name", False), (small.aggregator, "calls", True)]
    alone = [a.table(sort=k, descending=d) for a, k, d in calls]
    got = [[], []]

    def run(i):
        a, k, d = calls[i]
        for _ in range(400 if i == 0 else 4000):
            got[i].append(a.table(sort=k, descending=d))

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (0, 1):
        bad = sum(t != alone[i] for t in got[i])
        assert bad == 0, (i, bad, len(got[i]))
