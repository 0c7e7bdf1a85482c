"""The hub's memory with N readers that say hello and never read.

A busy job (policy drop: it never waits) is served by pytrace-hub to N silent readers
(one client process holding N connections, each with a 4 KiB receive buffer, that
never reads) for --seconds. Prints the hub's peak RSS (VmHWM from /proc), how many
readers were welcomed and refused, and the events the job wrote meanwhile. The hub runs
under an address-space limit (--as-mib, default 4096) so that a hub without a budget
cannot take the machine's memory: its figure is then "at least" that limit's worth.

Usage: python bench/hub_silent_readers.py [--readers 100] [--seconds 6] [--hub BIN]
                                          [-- hub options, e.g. --budget-mib 64]
Not a test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

JOB = textwrap.dedent("""
    import os, sys
    def leaf(i):
        return i + 1
    def middle(n):
        s = 0
        for i in range(n):
            s += leaf(i)
        return s
    while not os.path.exists(sys.argv[1]):
        middle(2000)
""")

SILENT = textwrap.dedent("""
    import json, socket, struct, sys, time
    path, n = sys.argv[1], int(sys.argv[2])
    hello = struct.pack("<8sHHII12x", b"PTHUBHI\\0", 1, 0, 0, 0)
    conns, statuses = [], []
    for i in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.connect(path)
            s.sendall(hello)
            w = s.recv(64, socket.MSG_WAITALL)
            statuses.append(struct.unpack_from("<i", w, 16)[0] if len(w) == 64 else None)
        except OSError as e:
            statuses.append("connect: %s" % e.strerror)
        conns.append(s)
    print(json.dumps(statuses), flush=True)
    while True:
        time.sleep(3600)
""")


def vm(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main():
    argv = sys.argv[1:]
    hub_opts = []
    if "--" in argv:
        cut = argv.index("--")
        argv, hub_opts = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser()
    ap.add_argument("--readers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--hub", default=shutil.which("pytrace-hub") or
                    os.path.join(os.path.dirname(sys.executable), "pytrace-hub"))
    ap.add_argument("--as-mib", type=int, default=4096)
    a = ap.parse_args(argv)
    from pytrace import _job, _pytrace
    tmp = tempfile.mkdtemp(prefix="pytrace-bench-silent-")
    script, stop = os.path.join(tmp, "job.py"), os.path.join(tmp, "stop")
    with open(script, "w") as f:
        f.write(JOB)
    job, segment, wait_w = _job.start_job(sys.executable, [], {"c_calls": True, "policy": "drop"},
                                          [script, stop], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
    limit = a.as_mib << 20

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    hub = subprocess.Popen([a.hub, "--hold", "1", "--quiet", *hub_opts, segment], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, preexec_fn=cap)
    sock = hub.stdout.readline().strip()
    silent = subprocess.Popen([sys.executable, "-c", SILENT, sock, str(a.readers)], stdout=subprocess.PIPE,
                              text=True)
    statuses = json.loads(silent.stdout.readline())
    os.close(wait_w)
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.seconds and hub.poll() is None:
        time.sleep(0.1)
    peak = vm(hub.pid, "VmHWM")
    written = next((s.get("events_written", 0) for s in _pytrace.list_segments()
                    if s["name"].lstrip("/") == segment.lstrip("/")), 0)
    alive = hub.poll() is None
    open(stop, "w").close()
    silent.kill()
    silent.wait()
    job.wait(timeout=60)
    try:
        hub.wait(timeout=30)
    except subprocess.TimeoutExpired:
        hub.kill()
        hub.wait()
    err = hub.stderr.read()
    ok = sum(1 for s in statuses if s == 0)
    print("hub %s %s: %d silent readers (%d welcomed, %d refused), %.0f s, job wrote %d events" % (
        a.hub, " ".join(hub_opts), a.readers, ok, a.readers - ok, a.seconds, written))
    print("  hub peak RSS %.0f MiB%s (address-space limit %d MiB)" % (
        peak / (1 << 20), "" if alive else " (the hub had exited: %s)" % err.strip().splitlines()[-1:],
        a.as_mib))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
