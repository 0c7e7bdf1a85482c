"""How well `pytrace merge` aligns recordings by wall clock, measured on one machine,
where the truth is known: every process of one machine shares CLOCK_MONOTONIC, so two
recordings merged by their wall-clock bases should be placed exactly as their monotonic
bases place them. The difference is the error merge leaves on one machine:

  - base: (base_realtime_ns - base_monotonic_ns) of each recording; the tracer reads
    CLOCK_REALTIME and CLOCK_MONOTONIC one after the other (shm/clock.c), so this differs
    between processes by the time between the two reads, plus any NTP slewing of the
    wall clock between the runs;
  - drift: ticks are converted with each process's own calibrated ticks_per_second (TSC),
    so an event T seconds after the base is off by T * (its relative calibration error).

    python bench/merge_alignment.py [RUNS] [SECONDS]

prints the spread of the base difference over RUNS recordings (each run sleeps SECONDS),
and the spread of their calibrated ticks_per_second as the drift it makes per second."""

import os
import statistics
import subprocess
import sys
import tempfile

JOB = """
import time, pytrace
time.sleep(%f)
pytrace.mark("end")
"""


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    from pytrace.recording import RecordingReader
    diffs, tps = [], []
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.py")
        with open(job, "w") as f:
            f.write(JOB % seconds)
        for i in range(runs):
            path = os.path.join(d, "r%d.pytrace" % i)
            subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", path, "--", sys.executable, job],
                           check=True, capture_output=True)
            with RecordingReader(path) as rr:
                info = next(m for m in rr.messages() if m.type == 1)
            diffs.append(info.base_realtime_ns - info.base_monotonic_ns)
            tps.append(info.ticks_per_second)
    spread = max(diffs) - min(diffs)
    print("runs: %d; base (realtime - monotonic): spread %d ns, stdev %.0f ns" % (
        runs, spread, statistics.pstdev(diffs)))
    rel = (max(tps) - min(tps)) / statistics.mean(tps)
    print("ticks_per_second spread between runs: %.2e relative = %.2f us per second after the base" % (
        rel, rel * 1e6))


if __name__ == "__main__":
    main()
