"""The hub with three readers on a job of >= 10 M events/s.

The job is bench/top_keepup.py's (two threads calling len() in a tight loop), started
with the launcher's handshake and policy drop (the job never waits: what the hub does
not drain in time is dropped and counted by the job). pytrace-hub (--hold 3) serves it
to three readers at once: `pytrace-top --once --json`, `pytrace record PID` and a
pytrace.Reader that counts events. Prints the events the job produced per second, what
the job dropped (0 = the hub kept up), what each reader read and missed (a reader
slower than the job misses events, is told so by Lost records and resyncs; the job is
not slowed), and the hub's own CPU (utime + stime from /proc, sampled until it exits).

Usage: python bench/hub_bench.py [--seconds 10] [--ring-size MiB] [--queue-mib M]
Not a test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from top_keepup import JOB, proc_cpu_seconds  # noqa: E402

READER = textwrap.dedent("""
    import json, sys, pytrace
    from pytrace.reader import MsgType, EventKind, FLAG_SYNTHETIC
    n = lost = 0
    r = pytrace.Reader(sys.argv[1], follow=True)
    print("joined", flush=True)
    for t, data in r.raw():
        if t == MsgType.EventChunk:
            from pytrace.reader import decode
            c = decode(t, data)
            n += c.count
            if c.count and c.count < 64:      # a resync chunk: Lost + Frame records
                for e in c.events:
                    if e.kind == EventKind.Lost and e.flags & FLAG_SYNTHETIC:
                        lost += e.id | (e.aux << 32)
                        n -= 1
                    elif e.kind == EventKind.Frame and e.flags & FLAG_SYNTHETIC:
                        n -= 1
    print(json.dumps({"events": n, "missed": lost}))
""")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--ring-size", type=float, default=64, help="MiB per ring (default 64)")
    ap.add_argument("--queue-mib", type=float, default=256, help="each reader's queue in the hub")
    args = ap.parse_args()
    from pytrace import _job
    hub_bin = shutil.which("pytrace-hub") or os.path.join(os.path.dirname(sys.executable), "pytrace-hub")
    top_bin = shutil.which("pytrace-top") or os.path.join(os.path.dirname(sys.executable), "pytrace-top")
    tmp = tempfile.mkdtemp(prefix="pytrace-hub-bench-")
    job_py = os.path.join(tmp, "job.py")
    with open(job_py, "w") as f:
        f.write(JOB)
    chunks = max(2, int(args.ring_size * (1 << 20)) // (64 << 10))
    chunks = 1 << (chunks.bit_length() - 1)
    opts = {"c_calls": True, "policy": "drop", "chunk_bytes": 64 << 10, "chunks_per_ring": chunks}
    job, segment, wait_w = _job.start_job(sys.executable, [], opts, [job_py, str(args.seconds)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hub_cmd = [hub_bin, "--hold", "3", "--queue-mib", str(args.queue_mib), "--quiet", segment]
    hub = subprocess.Popen(hub_cmd, stdout=subprocess.PIPE, text=True)
    hub.stdout.readline()
    top = subprocess.Popen([top_bin, "--once", "--json", "--duration", "100000", segment],
                           stdout=subprocess.PIPE, text=True)
    rec_out = os.path.join(tmp, "out.pytrace")
    rec = subprocess.Popen([sys.executable, "-m", "pytrace", "record", "-o", rec_out, str(job.pid)],
                           stderr=subprocess.PIPE, text=True)
    rd = subprocess.Popen([sys.executable, "-c", READER, segment], stdout=subprocess.PIPE, text=True)
    rd.stdout.readline()
    os.close(wait_w)
    hub_cpu = 0.0
    while hub.poll() is None:
        c = proc_cpu_seconds(hub.pid)
        if c is not None:
            hub_cpu = c
        time.sleep(0.05)
    job_err = job.stderr.read().decode(errors="replace")
    job.wait()
    t = json.loads(top.communicate()[0])
    rec_err = rec.communicate()[1]
    r = json.loads(rd.communicate()[0].strip().splitlines()[-1])
    m = re.search(r"calls=(\d+) seconds=([\d.]+)", job_err)
    from pytrace.recording import RecordingReader
    with RecordingReader(rec_out) as rr:
        status = [msg for msg in rr.messages() if type(msg).__name__ == "ProducerStatus"][-1]
    written, dropped = status.events_written, status.events_dropped
    seconds = float(m.group(2)) if m else args.seconds
    print("command: %s %s" % (sys.executable, " ".join(sys.argv)))
    print("hub:     %s" % " ".join(hub_cmd))
    print("job:     %.1f M events/s produced (%d written + %d dropped by the job in %.1f s)"
          % ((written + dropped) / seconds / 1e6, written, dropped, seconds))
    print("hub CPU: %.2f s = %.0f%% of one core over the job's %.1f s"
          % (hub_cpu, 100 * hub_cpu / seconds, seconds))
    rm = re.search(r"(\d+) events written, (\d+) events dropped", rec_err)
    rmiss = re.search(r"(\d+) more events are not in the recording", rec_err)
    print("readers: events read, missed in the hub's queue (told by Lost records), the job's drops as it says them")
    print("  pytrace-top --once --json  %d read, %d missed, %d dropped by the job"
          % (t["events_read"], t.get("events_missed_in_hub", 0), t["events_dropped"]))
    if rm:
        print("  pytrace record PID         %s read, %s missed, %s dropped by the job"
              % (rm.group(1), rmiss.group(1) if rmiss else 0, rm.group(2)))
    else:
        print("  pytrace record PID         (no summary: %s)" % rec_err.strip()[-200:])
    print("  pytrace.Reader             %d read, %d missed" % (r["events"], r["missed"]))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
