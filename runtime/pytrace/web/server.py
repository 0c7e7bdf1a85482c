"""The HTTP side of `pytrace web`: one page and one JSON endpoint, behind a token.

    GET /?token=T                    the page (everything inline)
    GET /api/update?token=T&session=S&version=V&thread=N&window=SECONDS&filter=TEXT[&step=1][&task=SERIAL]
                                     what changed since version V of that view (data.Live);
                                     task: the asyncio task whose functions the page shows

A request without the right token gets 403, whatever its path. The pictures come from
the C aggregation (`_pytrace.Aggregator`), fed by a background thread (Feeder) from a
`pytrace.Reader` or a recording; Python here only moves bytes and JSON.
"""

import http.server
import json
import os
import secrets
import socketserver
import sys
import threading
import time
import urllib.parse

from . import data, page


def reader_batches(reader, idle=0.002):
    """Batches of (msg_type, bytes) from a live `pytrace.Reader`, as it drains them
    (Reader.poll: one C call per batch, so the server keeps up with a job at millions of
    events per second), until the job is finished and read. Sleeps `idle` after a poll
    that found it caught up (reader.CAUGHT_UP_BYTES), as every follower does."""
    from ..reader import CAUGHT_UP_BYTES
    while True:
        try:
            batch = reader.poll()
        except BrokenPipeError:         # the producer died; everything it published was read
            return
        if batch:
            yield batch
        if reader.finished:
            return
        if not batch or sum(len(d) for _t, d in batch) < CAUGHT_UP_BYTES:
            time.sleep(idle)


class Feeder(threading.Thread):
    """Feeds the aggregator in the background from an iterable of messages ((msg_type,
    bytes), batch = how many to feed at once: a RecordingReader) or of lists of them
    (batch=0: reader_batches of a live job)."""

    def __init__(self, agg, source, batch=1, on_end=None, name="pytrace-web-feeder"):
        super().__init__(name=name, daemon=True)
        self.agg = agg
        self.source = source
        self.batch = batch
        self.on_end = on_end
        self.error = None
        self.disconnected = False       # the hub closed our stream: the job may still run
        self.done = threading.Event()
        self.stop = threading.Event()

    def run(self):
        try:
            pending = []
            for item in self.source:
                if not self.batch:              # already a batch
                    self.agg.feed_many(item)
                    if self.stop.is_set():
                        break
                    continue
                pending.append(item)
                if len(pending) >= self.batch:
                    self.agg.feed_many(pending)     # C, without the GIL
                    pending = []
                if self.stop.is_set():
                    break
            if pending:
                self.agg.feed_many(pending)
        except ConnectionResetError as e:   # the hub let go of us: not the job's end
            self.disconnected = True
            self.error = e.strerror or str(e)
        except Exception as e:  # noqa: BLE001 - shown on the page and the terminal
            self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            self.done.set()
            if self.on_end:
                self.on_end(self)


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "pytrace-web"
    sys_version = ""

    def log_message(self, fmt, *args):  # quiet: the terminal is the user's
        if self.server.app.verbose:
            super().log_message(fmt, *args)

    def _send(self, code, body, ctype, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forbidden(self):
        self._send(403, b"403 forbidden: this page needs the URL with its token, as pytrace web printed it\n",
                   "text/plain; charset=utf-8")

    def do_GET(self):  # noqa: N802 - http.server's name
        app = self.server.app
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        token = (query.get("token") or [""])[0]
        if not secrets.compare_digest(token.encode(), app.token.encode()):
            self._forbidden()
            return
        if url.path in ("/", "/index.html"):
            body, csp = page.build({"token": app.token, "interval_ms": app.interval_ms, "title": app.title},
                                   "pytrace web: " + app.title, live=True)
            self._send(200, body.encode("utf-8"), "text/html; charset=utf-8",
                       [("Content-Security-Policy", csp)])
            return
        if url.path == "/api/update":
            try:
                sid = (query.get("session") or [""])[0][:64]
                version = int((query.get("version") or ["0"])[0])
                thread = int((query.get("thread") or ["0"])[0])
                window = float((query.get("window") or ["10"])[0])
                filt = (query.get("filter") or [""])[0][:200]
                process = int((query.get("process") or ["0"])[0])
                step = (query.get("step") or ["0"])[0] == "1"    # the last complete step alone
                task = int((query.get("task") or ["-1"])[0])     # the chosen task's serial: its functions
                if not -1 <= task < 1 << 32:
                    raise ValueError
                if thread < 0 or not (window >= 0) or window > 1e9 or "\0" in filt or "\0" in sid:
                    raise ValueError
            except ValueError:
                self._send(400, b'{"error": "bad query"}', "application/json")
                return
            t0 = time.perf_counter()
            try:
                out = app.live_of(process).update(sid, version, thread, window, filt, step, task)
            except ValueError as e:     # a query the aggregation refuses: the page's fault
                self._send(400, json.dumps({"error": "bad query: %s" % e}).encode(), "application/json")
                return
            out["processes"] = app.process_list()
            out["job"] = app.job()
            out["server_ms"] = round((time.perf_counter() - t0) * 1000, 2)
            body = json.dumps(out, separators=(",", ":"), allow_nan=False).encode()
            self._send(200, body, "application/json")
            return
        self._send(404, b"404 not found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, app):
        import socket
        host = addr[0]
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.app = app
        super().__init__(addr, handler)

    def handle_error(self, request, client_address):
        # a page that went away while its answer was being sent (a closed tab, a
        # poll in flight when the browser quit) is no error of the server's
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class WebApp:
    """The server of one job (or recording): per process its view of an aggregator and the
    pages' sessions (data.Live); the first process of the first stream is the one a page
    starts on. A stream (an aggregator) may hold several processes (a hub that follows the
    job's children, a recording of a process tree): each is listed on its own."""

    def __init__(self, agg, title, host="127.0.0.1", port=0, interval_ms=250, extra_status=None, verbose=False,
                 sessions_bytes=256 << 20):
        self.title = title
        # every page's session together (data.SessionBudget): least recently used ones go
        self.sessions = data.SessionBudget(sessions_bytes)
        self.token = data.new_token()
        self.interval_ms = interval_ms
        self.verbose = verbose
        self.started = time.monotonic()
        self._extra = extra_status or (lambda: {})
        self._lock = threading.Lock()
        self.streams = []       # [key of its first process, aggregator, title]
        self.processes = {}     # key -> (title, data.Live); in the order they came
        self._keys = {}         # (stream number, process index) -> key
        self._next_key = -1     # the keys of a stream's later processes: -1, -2, ...
        self.first = None
        self.add_process(0, agg, title)
        self.httpd = _Server((host, port), _Handler, self)
        self.thread = None

    def add_process(self, key, agg, title):
        """Another stream of the job (its own aggregator); key (its pid) names its first
        process, the stream's later processes get keys of their own."""
        with self._lock:
            if self.first is None:
                self.first = key
            self.streams.append([key, agg, title])
            self._keys[(len(self.streams) - 1, 0)] = key
            self.processes[key] = (title, data.Live(data.ProcessView(agg, 0), self._status,
                                                       budget=self.sessions))

    def _scan(self):
        """[(key, pid, title)] of every process of every stream, new ones added."""
        streams = self.streams[:]
        out = []
        for n, (_key, agg, title) in enumerate(streams):
            for index, _tag, pid, _ppid, _cmd, _state, _active, _events, _role, label in agg.processes():
                with self._lock:
                    key = self._keys.get((n, index))
                    if key is None:
                        key = self._keys[(n, index)] = self._next_key
                        self._next_key -= 1
                        self.processes[key] = (label or "pid %d" % pid,
                                               data.Live(data.ProcessView(agg, index), self._status,
                                                         budget=self.sessions))
                    elif label and self.processes[key][0] != label:   # its role came later
                        self.processes[key] = (label, self.processes[key][1])
                    out.append((key, pid, title if index == 0 else self.processes[key][0]))
        return out

    def live_of(self, key):
        with self._lock:
            entry = self.processes.get(key)
        if entry is None:           # a process that came since the page's last list
            self._scan()
            with self._lock:
                entry = self.processes.get(key) or self.processes.get(self.first)
        return entry[1]

    def job(self):
        """{pid, command} of the job: the first process of the first stream (what the
        page's title names, whichever process it shows)."""
        agg = self.streams[0][1]
        p = agg.process_info(process=0)
        return {"pid": p["pid"], "command": p["command_line"] or self.title}

    def process_list(self):
        """[[key, pid, title]] in the order they came."""
        return [list(p) for p in self._scan()]

    @property
    def live(self):
        return self.live_of(self.first)

    def _status(self):
        cpu = os.times()
        d = {"server_cpu_s": round(cpu.user + cpu.system, 3),
             "server_uptime_s": round(time.monotonic() - self.started, 3),
             "processes": len(self._scan())}
        d.update(self._extra())
        return d

    @property
    def port(self):
        return self.httpd.server_address[1]

    def url(self, host=None):
        host = host or self.httpd.server_address[0]
        if ":" in host:
            host = "[%s]" % host
        return "http://%s:%d/?token=%s" % (host, self.port, self.token)

    def serve_in_background(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="pytrace-web-http", daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
