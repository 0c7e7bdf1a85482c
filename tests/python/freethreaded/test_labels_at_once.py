"""Free-threaded Python (3.14t): span/mark labels interned by threads at once.

The C label cache (module.c, py_label: _pytrace.label, called here directly since
pytrace._label puts a lock of its own in front of it) is a dict and a segment name shared by
every thread.
With the GIL its check-intern-insert ran alone; free-threaded, threads asking for the same new
name at once must still get one id, and the recording must hold one Label symbol per name (not
one per thread that raced). Skipped, with the reason, on an interpreter that has the GIL."""

import json
import subprocess
import sys
import sysconfig

import pytest

from helpers import PY

pytestmark = pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"),
    reason="free-threaded Python only (Py_GIL_DISABLED; tests/freethreaded.sh builds 3.14t); "
           "this is %s" % sys.version.split()[0])

THREADS, NAMES = 8, 300

LABELS_AT_ONCE = r'''
import json, sys, threading
from pytrace import _pytrace          # the C cache itself (pytrace._label adds its own lock)
N, NAMES = int(sys.argv[1]), int(sys.argv[2])
def worker(barrier, out, i):
    ids = []
    for k in range(NAMES):
        barrier.wait()                  # every thread asks for label k at once
        label_id = _pytrace.label("label-%d" % k)
        _pytrace.mark(label_id)         # and uses it, so every view has it
        ids.append(label_id)
    out[i] = ids
barrier = threading.Barrier(N)
out = [None] * N
threads = [threading.Thread(target=worker, args=(barrier, out, i)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(sys.argv[3], "w") as fh:
    json.dump({"ids": out, "gil": sys._is_gil_enabled()}, fh)
'''


def test_threads_interning_one_new_label_at_once_get_one_id_and_one_symbol(tmp_path):
    from pytrace import Profile
    from pytrace.reader import SymbolKind
    script = tmp_path / "labels.py"
    script.write_text(LABELS_AT_ONCE)
    rec = tmp_path / "labels.pytrace"
    res = tmp_path / "ids.json"
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", str(rec), "--", PY, str(script),
                        str(THREADS), str(NAMES), str(res)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(res.read_text())
    assert got["gil"] is False
    ids = got["ids"]
    for k in range(NAMES):
        per_thread = {ids[i][k] for i in range(THREADS)}
        assert len(per_thread) == 1 and 0 not in per_thread, (k, per_thread)
    labels = [s for s in Profile.from_recording(str(rec)).symbols().values()
              if s.kind == int(SymbolKind.Label) and s.name.startswith("label-")]
    names = sorted(s.name for s in labels)
    assert names == sorted("label-%d" % k for k in range(NAMES))


STARTS_AND_STOPS_AT_ONCE = r'''
import sys, threading
from pytrace import _pytrace          # the C entry points (pytrace.start/stop wrap them)
N, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
def busy():
    return sum(range(50))
def racer(barrier, what, results, i):
    barrier.wait()                    # every thread calls start(), or stop(), at once
    busy()
    try:
        results[i] = ("ok", what())
    except RuntimeError as e:
        results[i] = ("refused", str(e))
for r in range(ROUNDS):
    for what in (_pytrace.start, _pytrace.stop):
        barrier = threading.Barrier(N)
        results = [None] * N
        threads = [threading.Thread(target=racer, args=(barrier, what, results, i)) for i in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ok = [x for x in results if x[0] == "ok"]
        assert len(ok) == 1, (r, what.__name__, results)
        assert all(x[0] in ("ok", "refused") for x in results), results
        if what is _pytrace.stop:
            assert not ok[0][1]["first_error"], ok[0][1]
assert not _pytrace.is_tracing()
print("gil", sys._is_gil_enabled())
'''


def test_threads_calling_start_or_stop_at_once_one_wins_and_the_rest_are_refused(tmp_path):
    script = tmp_path / "race.py"
    script.write_text(STARTS_AND_STOPS_AT_ONCE)
    r = subprocess.run([PY, str(script), "8", "40"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["gil", "False"], r.stdout
