"""Peak memory of every reader that keeps a call tree, on a job whose call paths never repeat.

The job (issue 18, item 3): 2,000 generated functions called along random paths of depth
1-12 (what parsers, interpreters and symbolic code approach), so the calling-context tree
gets new nodes for as long as it runs. Each reader reads its own run of the job:

  top --once   pytrace-top PID --once --json --duration S
  top live     pytrace-top PID on a pseudo-terminal, flame view (Tab), for S seconds
  web          pytrace web PID, polled over loopback (/api/update) every 0.25 s for S seconds
  hub          pytrace-hub with 100 silent readers (hello, then never read) for S seconds
  html         pytrace export REC --format html of a recording of the job (pytrace record)

and prints the peak RSS of the reader (VmHWM from /proc, read just before it is stopped,
or its rusage when it exits by itself) with how much of the stream it got (events and,
where it says, calls folded into [other]). Usage:

    python bench/reader_memory.py [--seconds 15] [--tree-budget MIB] [--only top,web,...]

--tree-budget passes the option to top, web and export (a pytrace without it: leave it
out). Not a test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

JOB = r'''
import random, sys, time
N = 2000
src = "".join("def f%d(p):\n    if p:\n        F[p.pop()](p)\n" % i for i in range(N))
exec(compile(src, "generated.py", "exec"))
F = [globals()["f%d" % i] for i in range(N)]
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10
r = random.Random(1)
end = time.monotonic() + secs
while time.monotonic() < end:
    for _ in range(2000):
        p = [r.randrange(N) for _ in range(r.randint(1, 12))]
        F[p.pop()](p)
'''

BIN = os.path.dirname(sys.executable)


def tool(name):
    cand = os.path.join(BIN, name)
    return cand if os.access(cand, os.X_OK) else shutil.which(name)


def hwm_kib(pid):
    """VmHWM (peak RSS) of a live process, KiB; 0 if it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def wait_rusage(proc, timeout):
    """Wait for proc (a Popen) to exit: its peak RSS in KiB from wait4."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss
        if time.monotonic() > deadline:
            proc.kill()
            _pid, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss
        time.sleep(0.05)


def stop_peak(proc):
    """Peak RSS (KiB) of a live reader, then stop it."""
    peak = hwm_kib(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return peak


class Job:
    """The job, traced, waiting for its reader (the launcher's handshake)."""

    def __init__(self, seconds, tmp):
        from pytrace import _job
        path = os.path.join(tmp, "job.py")
        with open(path, "w") as f:
            f.write(JOB)
        opts = {"c_calls": True, "policy": "drop"}
        self.proc, self.segment, self._wait_w = _job.start_job(
            sys.executable, [], opts, [path, str(seconds)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        if not self.segment:
            raise SystemExit("the job did not start tracing")

    def go(self):
        os.close(self._wait_w)

    def end(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()


def mib(kib):
    return "%7.1f MiB" % (kib / 1024.0)


def bench_top_once(args, tmp, budget):
    job = Job(args.seconds, tmp)
    top = subprocess.Popen([tool("pytrace-top"), job.segment, "--once", "--json", "--duration",
                            str(args.seconds + 5)] + budget, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    time.sleep(0.5)
    job.go()
    out = []
    t = threading.Thread(target=lambda: out.append(top.stdout.read()))
    t.start()
    peak = wait_rusage(top, args.seconds + 60)
    t.join()
    job.end()
    try:
        d = json.loads(out[0])
        extra = "events %d, tree nodes %s, calls folded %s" % (
            d.get("events_seen", 0), d.get("tree_nodes", "?"), d.get("folded_calls", "?"))
    except (ValueError, IndexError):
        extra = "no JSON (exit %s): %s" % (top.returncode, top.stderr.read()[-200:])
    return peak, extra


def bench_top_live(args, tmp, budget):
    job = Job(args.seconds, tmp)
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", LINES="40", COLUMNS="160")
    top = subprocess.Popen([tool("pytrace-top"), job.segment] + budget, stdin=slave, stdout=slave,
                           stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    os.read(master, 65536)
                except OSError:
                    return

    t = threading.Thread(target=drain)
    t.start()
    time.sleep(1.0)
    job.go()
    os.write(master, b"\t")   # the flame view: the tree is built every refresh
    time.sleep(args.seconds)
    peak = stop_peak(top)
    stop.set()
    t.join()
    os.close(master)
    job.end()
    return peak, "flame view for %gs" % args.seconds


def bench_web(args, tmp, budget):
    job = Job(args.seconds, tmp)
    url_file = os.path.join(tmp, "web.url")
    web = subprocess.Popen([sys.executable, "-m", "pytrace", "web", job.segment, "--url-file",
                            url_file] + budget, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not os.path.exists(url_file) or not os.path.getsize(url_file):
        if time.monotonic() > deadline or web.poll() is not None:
            job.end()
            return stop_peak(web), "did not come up: %s" % web.stderr.read()[-300:]
        time.sleep(0.1)
    time.sleep(0.2)
    with open(url_file) as f:
        url = f.read().strip()
    job.go()
    polls = errors = 0
    status = {}
    u = urllib.parse.urlsplit(url)
    api = "%s://%s/api/update?%s" % (u.scheme, u.netloc, u.query)
    end = time.monotonic() + args.seconds
    page = None
    while time.monotonic() < end:
        try:
            if page is None:
                page = urllib.request.urlopen(url, timeout=10).read()
            d = json.loads(urllib.request.urlopen(api, timeout=30).read())
            status = d.get("status", status)
            polls += 1
        except Exception:  # noqa: BLE001 (a figure, not a test: count what failed)
            errors += 1
        time.sleep(0.25)
    peak = stop_peak(web)
    job.end()
    return peak, "%d polls (%d failed), events %s, calls folded %s" % (
        polls, errors, status.get("events", "?"), status.get("folded_calls", "?"))


def bench_hub(args, tmp, budget):
    from pytrace.reader import start_hub
    job = Job(args.seconds, tmp)
    hub, sock_path = start_hub(job.segment)
    silent = []
    hello = b"PTHUBHI\0" + struct.pack("<HHII", 1, 0, 0, 0) + bytes(12)
    for _ in range(100):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        s.sendall(hello)
        silent.append(s)
    job.go()
    time.sleep(args.seconds)
    peak = stop_peak(hub)
    for s in silent:
        s.close()
    job.end()
    return peak, "100 readers that said hello and never read"


def bench_html(args, tmp, budget):
    rec = os.path.join(tmp, "job.pytrace")
    job_py = os.path.join(tmp, "job.py")
    with open(job_py, "w") as f:
        f.write(JOB)
    subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", rec, "--", sys.executable, job_py,
                    str(args.seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    out = os.path.join(tmp, "job.html")
    exp = subprocess.Popen([sys.executable, "-m", "pytrace", "export", rec, "--format", "html", "-o", out]
                           + budget, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = []
    t = threading.Thread(target=lambda: err.append(exp.stderr.read().decode(errors="replace")))
    t.start()
    peak = wait_rusage(exp, 1200)
    t.join()
    said = [ln for ln in (err[0] if err else "").splitlines() if "events" in ln or "folded" in ln]
    return peak, "recording %.1f MiB, report %.1f MiB; %s" % (
        os.path.getsize(rec) / 2**20, os.path.getsize(out) / 2**20 if os.path.exists(out) else 0,
        " / ".join(s.replace("pytrace export: ", "") for s in said) or "exit %s" % exp.returncode)


BENCHES = {"top-once": bench_top_once, "top-live": bench_top_live, "web": bench_web, "hub": bench_hub,
           "html": bench_html}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15, help="how long each job runs (default 15)")
    ap.add_argument("--tree-budget", type=int, default=None, metavar="MIB",
                    help="pass --tree-budget MIB to top, web and export")
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    args = ap.parse_args()
    budget = ["--tree-budget", str(args.tree_budget)] if args.tree_budget else []
    import pytrace
    print("command: %s %s" % (sys.executable, " ".join(sys.argv)))
    print("pytrace: %s" % os.path.dirname(pytrace.__file__))
    print("job: 2000 generated functions, random paths of depth 1-12, %gs per reader" % args.seconds)
    for name in args.only.split(","):
        tmp = tempfile.mkdtemp(prefix="pytrace-reader-memory-")
        try:
            peak, extra = BENCHES[name](args, tmp, budget if name != "hub" else [])
            print("%-9s peak RSS %s  (%s)" % (name, mib(peak), extra), flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
