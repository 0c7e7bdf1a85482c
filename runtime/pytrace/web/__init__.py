"""`pytrace web`: the live browser view of a traced job.

    pytrace web PID | SEGMENT [options]                  a job that is traced already
    pytrace web [options] [job options] -- python script.py [args...]   start it traced
    pytrace web --file REC [options]                     a recording (pytrace record -o REC)

It serves one page on 127.0.0.1 (a free port, or --port) and prints its URL with a
random token, as Jupyter does; a request without the token gets 403. --host exposes it
on another address, with a warning. The job is read with `pytrace.Reader` into pytrace's
C aggregation (pytrace.Profile) by a background thread; the page asks for what changed
four times a second: a rolling flame graph of the last seconds, the function table, the
per-thread timeline and the status line.
"""

import ipaddress
import os
import signal
import subprocess
import sys
import threading
import time

from .. import _job
from ..cmdline import JOB_OPTIONS, ArgumentParser, UsageError, run_parser, start_options

_USAGE = """pytrace web [options] PID | SEGMENT
       pytrace web [options] --file REC
       pytrace web [options] [job options] -- python script.py [args...]"""


def _say(text):
    sys.stderr.write("pytrace web: %s\n" % text)
    sys.stderr.flush()


def _parser():
    # the job options of `pytrace run` (for a program started with --), defined there once
    job = run_parser(only=set(JOB_OPTIONS))
    p = ArgumentParser(prog="pytrace web", usage=_USAGE, parents=[job],
                       description="Serve the live browser view of a traced job (or of a recording) on "
                                   "127.0.0.1, behind a URL with a random token.")
    p.add_argument("targets", nargs="*", metavar="PID",
                   help="PID or segment of a traced job; several: one page, a process chooser")
    p.add_argument("--children", action="store_true",
                   help="also show the traced descendants of the PIDs as they appear (a job run "
                        "with `pytrace run --subprocesses`)")
    p.add_argument("--file", metavar="REC", help="show a recording (pytrace record -o REC)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; anything else exposes the job's "
                        "function names to whoever has the URL)")
    p.add_argument("--window", type=float, default=600.0,
                   help="seconds of history kept for the rolling views (default 600)")
    p.add_argument("--tree-budget", type=int, default=256, metavar="MIB",
                   help="memory for each process's call tree (default 256 MiB): past it, new call "
                        "paths fold into [other] nodes, counted in the status line; the table "
                        "stays exact")
    p.add_argument("--interval-ms", type=int, default=250,
                   help="how often the page asks for updates (default 250 ms)")
    p.add_argument("--sessions-mib", type=float, default=256.0,
                   help="memory of every open page's session together (default 256 MiB); past it "
                        "the least recently used are dropped, and such a page gets the whole "
                        "picture again")
    p.add_argument("--url-file", metavar="PATH", help="also write the URL to this file (mode 0600)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.set_defaults(rings=0)
    return p


def _loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _write_url_file(path, url):
    tmp = path + ".tmp%d" % os.getpid()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(url + "\n")
    os.replace(tmp, path)


def _ppid(pid):
    from .. import _pytrace
    st = _pytrace.proc_stat(pid)
    return st["ppid"] if st else 0


def _descends(pid, roots):
    for _ in range(64):
        if pid in roots:
            return True
        if pid <= 1:
            return False
        pid = _ppid(pid)
    return False


def _pid_of(reader, target):
    from .. import _pytrace
    name = getattr(reader, "segment", None)
    for s in _pytrace.list_segments():
        if s.get("name") == name or str(s.get("pid")) == str(target):
            return s.get("pid")
    return int(target) if str(target).isdigit() else 0


class _Others:
    """The job's other processes: PIDs given after the first, and with --children the
    traced descendants of the PIDs, each read by its own Reader into its own Profile."""

    def __init__(self, app, window, tree_budget_mib=256):
        self.app = app
        self.window = window
        self.tree_budget_mib = tree_budget_mib
        self.pids = set()
        self.names = set()
        self.readers = []
        self.feeders = []
        self.done = threading.Event()

    def add(self, where, title):
        from ..profile import Profile
        from ..reader import Reader
        from .server import Feeder, reader_batches
        try:
            reader = Reader(where, follow=True)
        except OSError as e:
            return e.strerror or str(e)
        prof = Profile(window=self.window, tree_budget_mib=self.tree_budget_mib)
        feeder = Feeder(prof.aggregator, reader_batches(reader), batch=0)
        feeder.start()
        pid = _pid_of(reader, where)
        self.pids.add(pid)
        self.names.add(getattr(reader, "segment", where))
        self.readers.append(reader)
        self.feeders.append(feeder)
        self.app.add_process(pid, prof.aggregator, title)
        return None

    def watch(self, roots):
        from .. import _pytrace

        def scan():
            while not self.done.wait(0.3):
                try:
                    segments = _pytrace.list_segments()
                except OSError:
                    continue
                for s in segments:
                    name, pid = s.get("name"), s.get("pid")
                    if (not s.get("alive") or s.get("state") != 1 or name in self.names or pid in roots
                            or pid in self.pids or not _descends(pid, roots)):
                        continue
                    self.names.add(name)
                    err = self.add(name, s.get("cmdline") or name)
                    if err:
                        _say("cannot read %s (pid %d): %s" % (name, pid, err))
        threading.Thread(target=scan, name="pytrace-web-children", daemon=True).start()

    def stop(self):
        self.done.set()
        for f in self.feeders:
            f.stop.set()
        for f, r in zip(self.feeders, self.readers):
            if f.done.wait(2.0):
                try:
                    r.close()
                except Exception:  # noqa: BLE001 - best effort at exit
                    pass


def main(argv=None):
    from ..profile import Profile
    from .server import Feeder, WebApp, reader_batches
    argv = list(sys.argv[1:] if argv is None else argv)
    command = None
    if "--" in argv:
        cut = argv.index("--")
        before, command = argv[:cut], argv[cut + 1:]
    else:
        before = argv
    try:
        ns = _parser().parse_args(before)
    except UsageError as e:
        _say(str(e))
        return 2
    defaults = _parser().parse_args([])
    job_given = [o for o in ("c_calls", "torch", "include", "exclude", "policy", "ring_size")
                 if getattr(ns, o) != getattr(defaults, o)]
    if job_given and command is None:
        _say("the job options (%s) are for a program started with --: pytrace web [options] -- "
             "python script.py" % ", ".join("--" + o.replace("_", "-") for o in job_given))
        return 2
    sources = sum(x is not None and x != [] for x in (ns.targets, ns.file, command))
    if sources != 1:
        _say("give one of: a PID or segment, --file REC, or -- python script.py [args]")
        return 2
    if ns.children and not ns.targets:
        _say("--children follows the traced descendants of PIDs given: pytrace web --children PID")
        return 2
    if not 0 <= ns.port <= 65535:
        _say("--port must be 0..65535")
        return 2
    if not ns.window > 0 or ns.interval_ms < 20:
        _say("--window must be > 0 seconds and --interval-ms >= 20")
        return 2
    if not 1 <= ns.sessions_mib <= 1 << 20:
        _say("--sessions-mib must be 1..1048576")
        return 2

    try:
        prof = Profile(window=ns.window, tree_budget_mib=ns.tree_budget)
    except ValueError as e:
        _say("--window/--tree-budget: %s" % e)
        return 2
    agg = prof.aggregator
    job = reader = None
    job_state = {}
    if ns.file:
        from ..recording import RecordingReader
        try:
            rec = RecordingReader(ns.file)
        except OSError as e:
            _say("cannot read %s: %s" % (ns.file, e.strerror or e))
            return 1
        source, batch, title = rec, 256, os.path.basename(ns.file)
    else:
        from ..reader import Reader
        wait_w = None
        if command is not None:
            try:
                interp, flags, target = _job.split_command(command)
                options = start_options(ns, "web")
            except (ValueError, UsageError) as e:
                _say(str(e))
                return 2
            if not target:
                _say("give the program to run: pytrace web -- python script.py [args]")
                return 2
            try:
                job, segment, wait_w = _job.start_job(interp, flags, options, target)
            except OSError as e:
                _say("cannot start %s: %s" % (interp, e))
                return 1
            if not segment:
                os.close(wait_w)
                rc = job.wait()
                _say("the program did not start tracing (exit code %d)" % rc)
                return rc or 1
            where, title = segment, " ".join(command)
        else:
            where, title = ns.targets[0], ns.targets[0]
        try:
            reader = Reader(where, follow=True)
        except OSError as e:
            if wait_w is not None:
                os.close(wait_w)
            _say("cannot read %s: %s" % (where, e.strerror or e))
            if job is not None:
                _job.stop_job(job)
            return 1
        finally:
            if wait_w is not None:
                os.close(wait_w)      # attached (or failed): the program goes on
        source, batch = reader_batches(reader), 0

    def extra():
        d = {}
        if job is not None:
            rc = job.poll()
            d["job"] = "running" if rc is None else "exited (%d)" % rc
        if feeder.error:
            d["error"] = feeder.error
        if feeder.disconnected:         # not the job's end: its last state is unknown now
            d["state"] = "disconnected"
        return d

    try:
        app = WebApp(agg, title, host=ns.host, port=ns.port, interval_ms=ns.interval_ms,
                     extra_status=extra, verbose=ns.verbose, sessions_bytes=int(ns.sessions_mib * (1 << 20)))
    except OSError as e:
        _say("cannot listen on %s:%d: %s" % (ns.host, ns.port, e.strerror or e))
        if job is not None:
            _job.stop_job(job)
        return 1
    ended = threading.Event()
    feeder = Feeder(agg, source, batch=batch, on_end=lambda f: ended.set())
    feeder.start()
    others = _Others(app, ns.window, ns.tree_budget)
    for target in ns.targets[1:]:
        err = others.add(target, target)
        if err:
            _say("cannot read %s: %s" % (target, err))
    if ns.children:
        roots = {_pid_of(reader, ns.targets[0])} | {pid for pid in others.pids}
        others.watch(roots)
    app.serve_in_background()
    if not _loopback(ns.host):
        _say("WARNING: listening on %s, not only on this machine: anyone who gets the URL sees the "
             "job's function and file names" % ns.host)
    url = app.url("127.0.0.1" if ns.host in ("0.0.0.0", "::") else None)
    if ns.url_file:
        _write_url_file(ns.url_file, url)
    print("pytrace web: serving %s at" % title, flush=True)
    print("    " + url, flush=True)
    print("pytrace web: Ctrl-C to stop", flush=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    old_term = signal.signal(signal.SIGTERM, on_term)
    said_end = False
    code = 0
    try:
        while True:
            time.sleep(0.2)
            if ended.is_set() and not said_end:
                said_end = True
                if feeder.error:
                    _say("reading stopped: %s" % feeder.error)
                what = ("the recording is read" if ns.file else
                        "the job may still run (pytrace web PID reads it again)" if feeder.disconnected
                        else "the job's tracing ended")
                _say("%s; the page stays up until Ctrl-C" % what)
            if job is not None and job.poll() is not None and "job_said" not in job_state:
                job_state["job_said"] = True
                _say("the program exited (code %d)" % job.returncode)
    except KeyboardInterrupt:
        code = 0
    finally:
        signal.signal(signal.SIGTERM, old_term)
        feeder.stop.set()
        others.stop()
        app.close()
        if job is not None and job.poll() is None:
            note = _job.stop_job(job)
            if note:
                _say(note)
        if job is not None:
            rc = job.wait()
            code = rc if rc >= 0 else 128 - rc
        if reader is not None and feeder.done.wait(2.0):
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - closing is best effort at exit
                pass
    return code
