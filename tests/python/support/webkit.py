"""Shared by the browser tests (web/, and the web checks of export/ and reader/): Debian's
chromium driven by Playwright, and `pytrace web` run in the background."""

import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from helpers import PY

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.sync_api import sync_playwright
except ImportError:         # pragma: no cover - CI installs it (.ci/install.sh)
    sync_playwright = None

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or sync_playwright is None,
    reason="needs Debian's chromium (apt-get install chromium) and playwright (pip install playwright)")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or sync_playwright is None:
        pytest.skip("needs Debian's chromium and playwright")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class WebServer:
    """`pytrace web ARGS` in the background; .url once it serves."""

    def __init__(self, tmp_path, args, timeout=60, env=None):
        self.url_file = str(tmp_path / ("url-%d.txt" % time.monotonic_ns()))
        self.log = open(str(tmp_path / "web.log"), "w")
        self.proc = subprocess.Popen([PY, "-m", "pytrace", "web", "--url-file", self.url_file] + list(args),
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.url_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("pytrace web did not serve: %s" % open(self.log.name).read())
            time.sleep(0.05)
        with open(self.url_file) as f:
            self.url = f.read().strip()
        self.base = self.url.split("?", 1)[0]
        self.token = self.url.split("token=", 1)[1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        log = open(self.log.name).read()
        # a job that Ctrl-C did not end (the demo with a 30 s switch interval holds the GIL
        # past the 5 s grace) is ended by SIGTERM and leaves its segment: remove it
        m = re.search(r"tracing pid \d+ into /(pytrace-[\w-]+);", log)
        if m and "before its tracing could finish" in log:
            try:
                os.unlink(os.path.join("/dev/shm", m.group(1)))
            except FileNotFoundError:
                pass
        return log


def _page(browser, errors, **ctx):
    context = browser.new_context(viewport={"width": 1300, "height": 900}, **ctx)
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append("pageerror: %s" % e))
    page.on("console", lambda m: errors.append("console %s: %s" % (m.type, m.text)) if m.type == "error" else None)
    page.on("dialog", lambda d: (errors.append("dialog: %s" % d.message), d.dismiss()))
    return context, page


def _wait(page, expr, timeout=60000):
    # a function, not an expression: the page's Content-Security-Policy forbids eval
    if not expr.lstrip().startswith("()"):
        expr = "() => (%s)" % expr
    page.wait_for_function(expr, timeout=timeout, polling=100)
