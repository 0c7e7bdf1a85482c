"""Shared by the pytrace-top tests: the workload of known shape, finding the binary,
and a detached tmux session running the real viewer.

The workload: `work3` does three times the loop iterations of `work1`, both called from
the main thread's loop; a second thread ("side") runs `side_work` only.
"""

import os
import re
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

WORKLOAD = r'''
import sys, threading, time

def work3():
    s = 0
    for i in range(30000):
        s += i
    return s

def work1():
    s = 0
    for i in range(10000):
        s += i
    return s

def side_work():
    s = 0
    for i in range(5000):
        s += i
    time.sleep(0.001)
    return s

def side():
    while True:
        side_work()

def main(seconds):
    threading.Thread(target=side, daemon=True, name="side").start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        work3()
        work1()

main(float(sys.argv[1]))
'''


# A thread that spins and one that sleeps, each for argv[1] seconds (issue 21's CPU-time
# checks: spin_loop is CPU time, time.sleep is waiting).
SPIN_AND_SLEEP = r'''
import sys, threading, time

def spin_loop(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(20000):
            n += i
    return n

def sleeper(seconds):
    time.sleep(seconds)

seconds = float(sys.argv[1])
threads = [threading.Thread(target=spin_loop, args=(seconds,), name="spinner"),
           threading.Thread(target=sleeper, args=(seconds,), name="sleeper")]
for t in threads:
    t.start()
for t in threads:
    t.join()
'''


def find_top():
    """PYTRACE_TOP, else pytrace-top on PATH, else a build directory of this tree."""
    env = os.environ.get("PYTRACE_TOP")
    if env and os.access(env, os.X_OK):
        return env
    found = shutil.which("pytrace-top")
    if found:
        return found
    for cand in sorted(os.listdir(ROOT)):
        path = os.path.join(ROOT, cand, "viewer", "pytrace-top")
        if cand.startswith("build") and os.access(path, os.X_OK):
            return path
    return None


TOP = find_top()


def rows_by_name(doc):
    return {f["name"]: f for f in doc["functions"]}


def table_order(screen, names):
    """Line index of the first row naming each function."""
    pos = {}
    for i, line in enumerate(screen.splitlines()):
        for n in names:
            if n not in pos and re.search(r"\b%s\b" % n, line):
                pos[n] = i
    return pos


def table_names(screen):
    """The FUNCTION column of the table's rows (the lines below its column header)."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if "FUNCTION" in line and "CALLS" in line:
            start = line.index("FUNCTION")
            return [l[start:].split()[0] for l in lines[i + 1:] if len(l) > start and l[start:].strip()]
    return []


class Tmux:
    """One detached tmux session running `command` (by default pytrace-top ARGS);
    killed on close."""

    def __init__(self, args="", width=160, height=50, command=None, name="pttop"):
        self.name = "%s%d" % (name, os.getpid())
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)
        cmd = "env LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=xterm-256color " + (command or "%s %s" % (TOP, args))
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), cmd],
                       check=True)
        # the pane's process (the shell of `cmd`, or the command it became): close() waits for its end
        r = subprocess.run(["tmux", "display-message", "-p", "-t", self.name, "#{pane_pid}"],
                           capture_output=True, text=True)
        self.pane_pid = int(r.stdout) if r.stdout.strip().isdigit() else None

    def _capture(self, *flags):
        r = subprocess.run(["tmux", "capture-pane", "-p", *flags, "-t", self.name], capture_output=True, text=True)
        return r.stdout

    def _settled(self, *flags):
        """A capture that equals the one taken 30 ms after it (up to 10 tries, then the
        last): tmux shows what the terminal was sent so far, so one capture can fall between
        two parts of a frame (a new header above the old table). Between keys the viewer draws
        every DRAW_NS (333 ms, view.c), so a whole frame stays still far longer than 30 ms."""
        s = self._capture(*flags)
        for _ in range(10):
            time.sleep(0.03)
            t = self._capture(*flags)
            if t == s:
                return t
            s = t
        return s

    def screen(self):
        return self._settled()

    def screen_sgr(self):
        """The screen with its attributes: `tmux capture-pane -e` keeps the SGR escape
        sequences (bold, dim, underline, colours) that the terminal was sent."""
        return self._settled("-e")

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, predicate, timeout=20, what="screen condition"):
        deadline = time.monotonic() + timeout
        s = ""
        while time.monotonic() < deadline:
            s = self.screen()
            if predicate(s):
                return s
            time.sleep(0.2)
        raise AssertionError("timed out waiting for %s; screen:\n%s" % (what, s))

    def kill(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)

    def _pane_gone(self, timeout):
        """Whether the pane's process has ended (polled up to `timeout` s)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open("/proc/%d/stat" % self.pane_pid) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return True
            except (FileNotFoundError, ProcessLookupError):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def close(self):
        """`q`, then the session is killed if the viewer has not ended within 0.5 s; returns
        once the viewer's process is gone (its consumer lock is released with it)."""
        self.keys("q")
        if self.pane_pid is None:  # (the session had ended before its pane was asked for)
            time.sleep(0.5)
            self.kill()
            time.sleep(0.3)
            return
        self._pane_gone(0.5)
        self.kill()
        self._pane_gone(5.0)


_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def sgr_at(screen, text, plain_line=None):
    """The SGR parameters in force where `text` first starts in a `capture-pane -e`
    screen: a set of strings such as {"1", "4", "44"} (bold, underline, blue background);
    None if the text is not there. tmux sends an attribute only when it changes, so the
    state carries over from line to line. plain_line(line without escapes) -> bool: only
    the lines it accepts are searched."""
    for line, state, i in _sgr_walk(screen):
        if line.startswith(text, i) and (plain_line is None or plain_line(_SGR.sub("", line))):
            return state
    return None


def _sgr_walk(screen):
    """(line, SGR state, index) at every character of the screen."""
    state = set()
    for line in screen.splitlines():
        yield from _sgr_line(line, state)


def _sgr_line(line, state):
    i = 0
    while i < len(line):
        m = _SGR.match(line, i)
        if m:
            params = m.group(1).split(";") if m.group(1) else ["0"]
            j = 0
            while j < len(params):
                p = params[j]
                if p in ("0", ""):
                    state.clear()
                elif p in ("38", "48") and j + 1 < len(params):  # 256 colours / rgb: keep as one
                    n = 3 if params[j + 1] == "5" else 5
                    state.difference_update({s for s in state if s.startswith(p + ":")})
                    state.add(p + ":" + ":".join(params[j + 1:j + n]))
                    j += n - 1
                elif p in ("22",):
                    state -= {"1", "2"}
                elif p == "24":
                    state.discard("4")
                else:
                    if len(p) == 2 and p[0] in "349":  # a colour replaces the one of its kind
                        state.difference_update({s for s in state if len(s) == 2 and s[0] == p[0]})
                    state.add(p)
                j += 1
            i = m.end()
            continue
        yield line, set(state), i
        i += 1
