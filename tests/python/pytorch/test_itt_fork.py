"""A fork while another thread interns an ITT label: the ITT collector's name lock and the
symbol log's lock are taken by fork's prepare handlers in the order label_of takes them
(names, then symbols). In the other order a fork deadlocked against a torch thread
interning an op's name (the forking thread held the symbol lock and waited for the names
lock; the ITT thread held the names lock and waited for the symbol lock). No torch needed:
the job calls the collector's ITT entries through ctypes, which releases the GIL as an op
does."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_fork_while_interning_labels():
    job = os.path.join(HERE, "itt_fork_job.py")
    try:
        r = subprocess.run([sys.executable, job, "8"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError("the job hung: a fork deadlocked against the thread interning labels")
    assert r.returncode == 0, r.stderr[-3000:]
    words = r.stdout.split()
    assert words[0] == "forks" and int(words[1]) > 0, r.stdout
    assert int(words[3]) > 0, r.stdout  # the thread's tasks were recorded as spans
