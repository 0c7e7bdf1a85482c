"""The browser view's figures: update latency and the server's CPU.

1. Latency: `pytrace web -- python job.py` with Debian's chromium (Playwright) on the page.
   The job waits for a go-file, writes the wall time, and starts calling a function it never
   called before; the page, watched on every animation frame, draws that function's frame
   in the flame graph (the canvas was redrawn with it). Latency = the time of that frame
   minus the job's time of the first call (time.time() in both, one machine). Repeated
   --rounds times (a new function each round).
2. Server CPU: `pytrace web --policy drop -- python job.py` where the job calls len() on two
   threads (bench/top_keepup.py's job, >= 10 M events/s here), while a client asks for
   updates four times a second, as the page does (window 10 s); prints the events the job
   produced per second, what the server read and dropped, the server's CPU (utime + stime
   from /proc, the job excluded) and the answer times.
3. Report size: `pytrace export --format html` of a `python -m json.tool` recording of a
   generated 3 MB JSON file (--report-mb; about 13 M events) and of `python -m pip list`.

Usage: python bench/web_bench.py [--rounds 5] [--seconds 10] [--skip-latency] [--skip-cpu]
       [--skip-report]
Not a test: it prints figures and asserts nothing. Needs pytrace installed for this
interpreter, and chromium + playwright for part 1.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from top_keepup import JOB as KEEPUP_JOB, proc_cpu_seconds  # noqa: E402

LATENCY_JOB = r'''
import os, sys, time

work_dir, rounds = sys.argv[1], int(sys.argv[2])

def make(name):
    # 20 ms a call, with C calls in it (events, so the frame grows as it runs): visible
    # in the flame graph of the last 5 s at once, so the latency is the pipeline's and
    # not the time a tiny function needs to add up to a pixel
    def f():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass
    f.__code__ = f.__code__.replace(co_name=name, co_qualname=name)
    return f

def idle():
    time.sleep(0.0005)

markers = [make("latency_marker_%d" % k) for k in range(rounds)]
for k in range(rounds):
    go = os.path.join(work_dir, "go%d" % k)
    while not os.path.exists(go):
        idle()
    fn = markers[k]
    t = time.time()
    fn()
    with open(os.path.join(work_dir, "t%d" % k), "w") as f:
        f.write(repr(t))
    end = time.time() + 2.0
    while time.time() < end:
        fn()
        idle()
'''


def start_web(args, url_file, **popen):
    cmd = [sys.executable, "-m", "pytrace", "web", "--url-file", url_file] + args
    proc = subprocess.Popen(cmd, **popen)
    deadline = time.monotonic() + 60
    while not os.path.exists(url_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit("pytrace web did not start: %s" % " ".join(cmd))
        time.sleep(0.05)
    with open(url_file) as f:
        return proc, cmd, f.read().strip()


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def latency_part(work, rounds):
    from playwright.sync_api import sync_playwright
    chromium = shutil.which("chromium")
    if not chromium:
        print("latency: skipped (no chromium; apt-get install chromium)")
        return
    script = os.path.join(work, "latency_job.py")
    with open(script, "w") as f:
        f.write(LATENCY_JOB)
    proc, cmd, url = start_web(["--", sys.executable, script, work, str(rounds)], os.path.join(work, "url"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(url)
            page.select_option("#window", "5")
            page.wait_for_function("() => pytrace.state.updates > 2", timeout=60000)
            for k in range(rounds):
                name = "latency_marker_%d" % k
                page.evaluate("""(name) => { window.__seen = 0;
                    (function check() { if (pytrace.width(name) > 0) window.__seen = performance.timeOrigin + performance.now();
                                        else requestAnimationFrame(check); })(); }""", name)
                open(os.path.join(work, "go%d" % k), "w").close()
                page.wait_for_function("() => window.__seen > 0", timeout=30000, polling=50)
                seen_ms = page.evaluate("window.__seen")
                with open(os.path.join(work, "t%d" % k)) as f:
                    t_job = float(f.read())
                results.append(seen_ms / 1000.0 - t_job)
            browser.close()
    finally:
        stop(proc)
    ms = [r * 1000 for r in results]
    print("Update latency (a new function called in the job -> its frame drawn on the page)")
    print("command: python -m pytrace web -- python latency_job.py (bench/web_bench.py)")
    print("page polls every 250 ms (the default --interval-ms); %d rounds" % rounds)
    print("latency ms: median %.0f, min %.0f, max %.0f  (%s)" % (statistics.median(ms), min(ms), max(ms),
                                                                ", ".join("%.0f" % x for x in ms)))


def cpu_part(work, seconds, ring_size, rate):
    script = os.path.join(work, "keepup_job.py")
    with open(script, "w") as f:
        f.write(KEEPUP_JOB)
    log = open(os.path.join(work, "web.log"), "w+")
    proc, cmd, url = start_web(["--policy", "drop", "--ring-size", str(ring_size), "--", sys.executable, script,
                                str(seconds), str(rate)], os.path.join(work, "url-cpu"), stdout=log, stderr=subprocess.STDOUT)
    base, token = url.split("?", 1)[0], url.split("token=", 1)[1]
    version, answers, times, server_ms, last = 0, 0, [], [], None
    cpu0 = proc_cpu_seconds(proc.pid) or 0.0
    t0 = time.monotonic()
    status = {}
    try:
        while True:
            t = time.monotonic()
            q = "api/update?token=%s&session=bench&version=%d&thread=0&window=10&filter=" % (token, version)
            with urllib.request.urlopen(base + q, timeout=30) as r:
                body = r.read()
            times.append((time.monotonic() - t) * 1000)
            doc = json.loads(body)
            version = doc["version"]
            server_ms.append(doc.get("server_ms", 0.0))
            answers += 1
            status = doc["status"]
            cpu = proc_cpu_seconds(proc.pid)
            if cpu is not None:
                last = (time.monotonic() - t0, cpu - cpu0, status)
            if status.get("job", "").startswith("exited") and status.get("state") in ("exited", "stopped", "dead"):
                break
            if time.monotonic() - t0 > seconds + 60:
                break
            time.sleep(max(0.0, 0.25 - (time.monotonic() - t)))
    finally:
        stop(proc)
    log.seek(0)
    wall, cpu, st = last
    job_line = re.search(r"calls=(\d+) seconds=([\d.]+)", log.read())
    produced = int(job_line.group(1)) * 2 if job_line else 0    # a len() call is CCall + CReturn
    job_seconds = float(job_line.group(2)) if job_line else seconds
    print("Server CPU at 10 M events/s (pytrace web --policy drop of a job calling len() on two threads,")
    print("a client polling for deltas 4x a second, window 10 s)")
    print("command: python -m pytrace web --policy drop --ring-size %s -- python keepup_job.py %s %s"
          % (ring_size, seconds, rate))
    print("         (the job paced to %s events/s; 0: as fast as it goes)" % ("%.3g" % rate if rate else "0"))
    if produced:
        print("job     : %.1f M events/s produced over %.2f s" % (produced / job_seconds / 1e6, job_seconds))
    print("server  : read %d events, dropped %d (%.2f%%); CPU %.2f s over %.2f s wall (%.0f%% of one core)"
          % (st["events"], st["dropped"], 100.0 * st["dropped"] / max(1, st["events"] + st["dropped"]), cpu, wall,
             100.0 * cpu / wall))
    print("answers : %d, round trip ms median %.1f, max %.1f; computed in ms median %.1f, max %.1f"
          % (answers, statistics.median(times), max(times), statistics.median(server_ms), max(server_ms)))
    print("machine : load average %.1f on %d cores at the end" % (os.getloadavg()[0], os.cpu_count()))


def report_part(work, mb):
    sys.path.insert(0, HERE)
    from recording_bench import make_json
    data = os.path.join(work, "big.json")
    make_json(data, int(mb * (1 << 20)))
    print("HTML report size (pytrace export --format html)")
    for name, argv in (("json.tool %.0f MB" % mb, [sys.executable, "-m", "json.tool", data, os.devnull]),
                       ("pip list", [sys.executable, "-m", "pip", "list"])):
        rec = os.path.join(work, "r.pytrace")
        r = subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", rec, "--"] + argv,
                           capture_output=True, text=True)
        m = re.search(r"(\d+) events written", r.stderr)
        out = os.path.join(work, "r.html")
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "pytrace", "export", rec, "--format", "html", "-o", out],
                       check=True, capture_output=True)
        took = time.monotonic() - t
        print("%-18s %10s events  recording %8.1f MB  report %6.2f MB  (export %.1f s)"
              % (name, m.group(1) if m else "?", os.path.getsize(rec) / 1e6, os.path.getsize(out) / 1e6, took))
    print("command: python -m pytrace export REC --format html -o report.html")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--ring-size", type=float, default=64, help="MiB per ring for the 10 M events/s job")
    ap.add_argument("--rate", type=float, default=10e6,
                    help="events/s the job is paced to (the issue's 10 M); 0: as fast as it goes")
    ap.add_argument("--report-mb", type=float, default=3.0, help="JSON size for the report (MB; 3 MB: ~13 M events)")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-report", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pt-webbench-")
    try:
        if not args.skip_latency:
            latency_part(work, args.rounds)
        if not args.skip_cpu:
            cpu_part(work, args.seconds, args.ring_size, args.rate)
        if not args.skip_report:
            report_part(work, args.report_mb)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
