"""Recording size and the recorder's keep-up rate.

1. Size: records the bench workloads with `pytrace record` (bench/overhead_child.py
   call-heavy and mixed, and `python -m json.tool` on a generated 3 MB JSON file) and
   prints bytes per event of the file (format 2.0, chunks compressed) and of the same
   messages stored plain (format 1.0, what recordings took before compression).
2. Keep-up: a job whose two threads call len() in a tight loop (bench/top_keepup.py's
   job: >= 10 M events/s here) recorded with `pytrace record --policy drop`; prints the
   events the job produced per second, how many it dropped (0 = the recorder kept up),
   and the recorder's own CPU (utime + stime from /proc, sampled until it exits).

Usage: python bench/recording_bench.py [--seconds 10] [--ring-size MiB] [--skip-size]
       [--skip-keepup] [--keep DIR]
Not a test: it prints figures and asserts nothing. Needs pytrace installed for this
interpreter.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from top_keepup import JOB as KEEPUP_JOB, proc_cpu_seconds  # noqa: E402


def make_json(path, target_bytes=3 << 20):
    rnd = random.Random(1)
    items, size = [], 0
    i = 0
    while size < target_bytes:
        item = {"id": i, "name": "item%d" % i, "tags": ["a", "b", str(i % 7)], "v": rnd.random(),
                "nested": {"x": i, "y": [1, 2, 3]}}
        size += len(json.dumps(item)) + 2
        items.append(item)
        i += 1
    with open(path, "w") as f:
        json.dump(items, f)


def record(out, argv):
    cmd = [sys.executable, "-m", "pytrace", "record", "-o", out, "--"] + argv
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("pytrace record failed: %s" % r.stderr.strip())
    return cmd, r.stderr


def sizes(path):
    """(events, file bytes, bytes the same messages take stored plain, compressed chunks)."""
    from pytrace import recording
    r = recording.RecordingReader(path)
    plain = recording.HEADER_BYTES
    events = 0
    for msg_type, data in r:
        plain += (len(data) + 7) & ~7
        if msg_type == 5:
            events += (len(data) - 72) // 16
    return events, os.path.getsize(path), plain, r.compressed_chunks


def size_part(work):
    data = os.path.join(work, "data3m.json")
    make_json(data)
    workloads = []
    for name in ("call-heavy", "mixed"):
        script = os.path.join(work, "run_%s.py" % name)
        with open(script, "w") as f:
            f.write("import sys; sys.path.insert(0, %r)\nimport overhead_child as o\no.WORKLOADS[%r]()\n"
                    % (HERE, name))
        workloads.append((name, [sys.executable, script], "overhead_child.py %s" % name))
    workloads.append(("json.tool 3MB", [sys.executable, "-m", "json.tool", data, os.devnull],
                      "python -m json.tool (%d-byte file)" % os.path.getsize(data)))
    print("Recording size (pytrace record, format 2.0 vs the same messages stored plain, 1.0)")
    print("%-15s %12s %14s %14s %9s %9s %7s" % ("workload", "events", "plain bytes", "file bytes",
                                               "plain B/ev", "file B/ev", "ratio"))
    for name, argv, what in workloads:
        out = os.path.join(work, re.sub(r"\W+", "_", name) + ".pytrace")
        record(out, argv)
        events, size, plain, chunks = sizes(out)
        print("%-15s %12d %14d %14d %9.2f %9.3f %6.1fx" % (name, events, plain, size, plain / events,
                                                            size / events, plain / size))
        os.unlink(out)
    print("command: python -m pytrace record -o OUT -- python <workload>")


def keepup_part(work, seconds, ring_size):
    script = os.path.join(work, "keepup_job.py")
    with open(script, "w") as f:
        f.write(KEEPUP_JOB)
    out = os.path.join(work, "keepup.pytrace")
    cmd = [sys.executable, "-m", "pytrace", "record", "--policy", "drop", "--ring-size", str(ring_size),
           "-o", out, "--", sys.executable, script, str(seconds)]
    t0 = time.monotonic()
    rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu = 0.0
    while rec.poll() is None:
        c = proc_cpu_seconds(rec.pid)
        if c is not None:
            cpu = c
        time.sleep(0.1)
    wall = time.monotonic() - t0
    err = rec.stderr.read()
    m = re.search(r"(\d+) events written, (\d+) events dropped, (\d+) bytes", err)
    j = re.search(r"calls=(\d+) seconds=([\d.]+)", err)
    if not m or not j:
        sys.exit("unexpected output of pytrace record:\n" + err)
    written, dropped, size = int(m.group(1)), int(m.group(2)), int(m.group(3))
    job_seconds = float(j.group(2)) or seconds
    produced = written + dropped
    print("Keep-up (pytrace record --policy drop of a job calling len() on two threads)")
    print("command: %s" % " ".join(cmd))
    print("job     : %.1f M events/s produced over %.2f s (%d events)" % (produced / job_seconds / 1e6,
                                                                         job_seconds, produced))
    print("recorder: %d events written, %d dropped (%.4f%%), %.3f bytes/event in the file"
          % (written, dropped, 100.0 * dropped / produced if produced else 0.0,
             size / written if written else 0.0))
    print("recorder: CPU %.2f s (utime+stime, last /proc sample) over %.2f s wall (%.0f%% of one core), "
          "%.1f M events/s per CPU second" % (cpu, wall, 100.0 * cpu / wall if wall else 0.0,
                                              written / cpu / 1e6 if cpu else 0.0))
    os.unlink(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10, help="keep-up job duration")
    ap.add_argument("--ring-size", type=float, default=64, help="MiB per ring for the keep-up job")
    ap.add_argument("--skip-size", action="store_true")
    ap.add_argument("--skip-keepup", action="store_true")
    ap.add_argument("--keep", default=None, help="work in this directory and keep it")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="pt-recbench-")
    os.makedirs(work, exist_ok=True)
    try:
        if not args.skip_size:
            size_part(work)
        if not args.skip_keepup:
            keepup_part(work, args.seconds, args.ring_size)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
