"""pytrace-top's interaction, end to end under a real tmux terminal: the thread list (T)
of a job with hundreds of ended threads, the help screen (?), the filter highlighted in
the flame graph (attributes read back with `tmux capture-pane -e`), a deep stack
scrolled, idle threads hidden, and names with bidi/format/line-separator characters
escaped on every screen and in --once output.

Jobs are real: `pytrace run` for the live one, `pytrace record` for the recordings.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from topkit import TOP, Tmux, sgr_at

PY = sys.executable


def _runs(*args):
    try:
        return subprocess.run([PY, *args], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.skipif(TOP is None, reason="pytrace-top not built/installed"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(not _runs("-m", "pytrace", "record", "--help"), reason="pytrace is not installed"),
]


def record(tmp_path, source, name, *args):
    script = os.path.join(str(tmp_path), name + ".py")
    with open(script, "w") as f:
        f.write(source)
    out = os.path.join(str(tmp_path), name + ".pytrace")
    r = subprocess.run([PY, "-m", "pytrace", "record", "-o", out, "--", PY, script, *args],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return out


# ---- the thread list -------------------------------------------------------------

MANY_THREADS = r'''
import sys, threading, time

def short_work():
    s = 0
    for i in range(200):
        s += i
    return s

def make_spin(tag):
    def spin():
        s = 0
        for i in range(3000):
            s += i
        time.sleep(0.001)
        return s
    spin.__name__ = spin.__qualname__ = "spin_" + tag
    spin.__code__ = spin.__code__.replace(co_name="spin_" + tag, co_qualname="spin_" + tag)
    return spin

def live(tag):
    spin = make_spin(tag)
    while True:
        spin()

for i in range(300):  # short threads, one after another: all of them have ended
    t = threading.Thread(target=short_work, name="short-%d" % i)
    t.start()
    t.join()
for tag in ("alpha", "beta", "gamma"):
    threading.Thread(target=live, args=(tag,), name="live-" + tag, daemon=True).start()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
'''


class LiveJob:
    def __init__(self, tmp, source, seconds):
        self.script = os.path.join(str(tmp), "many_threads.py")
        with open(self.script, "w") as f:
            f.write(source)
        self.proc = subprocess.Popen([PY, "-m", "pytrace", "run", self.script, str(seconds)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.segment = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.segment:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"into (/pytrace-\S+?);", line)
            if m:
                self.segment = m.group(1)
        assert self.segment, "the job did not announce its segment"
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        try:
            os.unlink("/dev/shm" + self.segment)
        except OSError:
            pass


def _threads_line(screen):
    return next((line for line in screen.splitlines() if "threads (cpu)" in line), "")


def _list_rows(screen):
    """The thread list's rows under its column header: [(number, state, name)]."""
    rows, seen = [], False
    for line in screen.splitlines():
        if "THREAD" in line and "OS_TID" in line and "STATE" in line:
            seen = True
            continue
        if not seen:
            continue
        m = re.match(r"\s+(\d+|all)\s+(?:(\d+)\s+(live|ended)\s+.*?\s(\d+)\s\s(\S*))?", line)
        if m and m.group(1) == "all":
            rows.append(("all", "", "(every thread)"))
        elif m and m.group(3):
            rows.append((m.group(1), m.group(3), m.group(5)))
    return rows


def test_thread_list_puts_live_threads_first_and_picks_one_among_300_ended(tmp_path):
    job = LiveJob(tmp_path, MANY_THREADS, 600)
    t = Tmux(job.proc.pid, width=150, height=40)
    try:
        t.wait_for(lambda s: "spin_alpha" in s and "spin_gamma" in s, timeout=30, what="the live threads' work")
        t.keys("T")
        s = t.wait_for(lambda s: "pick a thread" in s, what="the thread list")
        m = re.search(r"pick a thread: (\d+) live, (\d+) ended", s)
        assert m, s
        # main + 3 live; the short ones that got a ring (the rest are counted as threads without one)
        assert int(m.group(1)) == 4 and int(m.group(2)) >= 200, s
        ended = int(m.group(2))
        rows = _list_rows(s)
        assert rows[0][0] == "all"
        states = [r[1] for r in rows[1:]]
        assert states[:4] == ["live"] * 4 and set(states[4:]) == {"ended"}, rows
        assert {r[2] for r in rows[1:5]} == {"MainThread", "live-alpha", "live-beta", "live-gamma"}, rows
        shorts = [int(r[2].split("-")[1]) for r in rows[5:]]
        assert shorts == sorted(shorts, reverse=True) and len(shorts) > 10, rows  # ended ones: the latest first
        assert re.search(r"\d+ more below", s), s  # the rows do not fit: the list says it goes on
        # page down to the bottom of the list: the first thread that ended, and the list's end
        for _ in range(ended // 20 + 2):
            t.keys("NPage")
        s = t.wait_for(lambda s: "more below" not in s and len(_list_rows(s)) > 10, what="the end of the list")
        bottom = _list_rows(s)
        assert bottom[-1][1] == "ended" and int(bottom[-1][2].split("-")[1]) < shorts[-1], (bottom, shorts)
        assert "live" not in [r[1] for r in bottom]
        # pick live-beta: back to the top, then down to its row
        for _ in range(ended // 20 + 2):
            t.keys("PPage")
        t.wait_for(lambda s: "more below" in s and "live-beta" in s, what="the top of the list")
        beta = [r[2] for r in rows].index("live-beta")
        for _ in range(beta):
            t.keys("Down")
        t.keys("Enter")
        s = t.wait_for(lambda s: re.search(r"\[\d+ live-beta", _threads_line(s)) and "OWN%" in s,
                       what="live-beta shown")
        s = t.wait_for(lambda s: "spin_beta" in s and "spin_alpha" not in s, what="only live-beta's work")
        # back to all threads from the list
        t.keys("T")
        t.wait_for(lambda s: "pick a thread" in s, what="the thread list again")
        t.keys("a")
        # no thread [selected] on the threads line, every live thread's work in the table
        t.wait_for(lambda s: "[" not in _threads_line(s) and "spin_alpha" in s and "spin_beta" in s,
                   what="all threads again")
    finally:
        t.close()
        job.stop()


# ---- help, filter highlight, deep stacks: on a recording ------------------------------

FLAME_JOB = r'''
import sys, time

def hot_match():
    s = 0
    for i in range(30000):
        s += i
    return s

def cold_other():
    s = 0
    for i in range(20000):
        s += i
    return s

def deep(n):
    if n:
        return deep(n - 1)
    return bottom_leaf()

def bottom_leaf():
    s = 0
    for i in range(20000):
        s += i
    return s

end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    hot_match()
    cold_other()
    deep(int(sys.argv[2]))
'''


@pytest.fixture(scope="module")
def flame_rec(tmp_path_factory):
    return record(tmp_path_factory.mktemp("topui"), FLAME_JOB, "flame", "1.5", "0")


@pytest.fixture(scope="module")
def deep_rec(tmp_path_factory):
    return record(tmp_path_factory.mktemp("topui"), FLAME_JOB, "deep", "1.5", "80")


def test_question_mark_shows_every_key_and_any_key_closes_it(flame_rec):
    # 60 rows: the help (52 lines since the task mode) in one column, so that each heading
    # and key starts its line (fewer rows set it in two columns)
    t = Tmux("--file %s" % flame_rec, width=150, height=60)
    try:
        t.wait_for(lambda s: "hot_match" in s, what="the table")
        t.keys("?")
        s = t.wait_for(lambda s: "pytrace-top keys" in s, what="the help screen")
        for heading in ("everywhere", "table", "flame", "task mode (A)", "thread list (T)", "filter (/)"):
            assert re.search(r"^ %s\s*$" % re.escape(heading), s, re.M), (heading, s)
        for key, words in (("T", "thread list"), ("PgUp PgDn Home End", "scroll"), ("i", "idle threads"),
                           ("/", "filter"), ("o t # n f", "sort"), ("Enter", "zoom"), ("P", "process"),
                           ("c", "wall <-> CPU"), ("A", "task mode"), ("r w", "running time")):
            assert re.search(r"^   %s\s.*%s" % (re.escape(key), words), s, re.M), (key, s)
        t.keys("x")  # any key closes it, and does nothing else
        s = t.wait_for(lambda s: "pytrace-top keys" not in s, what="the help closed")
        assert "OWN%" in s and "hot_match" in s and "?:help" in s
        # in the flame view too
        t.keys("Tab")
        t.wait_for(lambda s: "flame" in s.splitlines()[0], what="the flame view")
        t.keys("?")
        t.wait_for(lambda s: "pytrace-top keys" in s, what="the help over the flame")
        t.keys("Enter")
        s = t.wait_for(lambda s: "pytrace-top keys" not in s, what="the help closed")
        assert "zoomed" not in s  # the key closed the help; it did not zoom
    finally:
        t.close()


def _in_graph(line):
    return "total" not in line  # a box of the graph, not the selected frame's line


def test_filter_highlights_matching_frames_and_dims_the_others_in_the_flame(flame_rec):
    t = Tmux("--file %s" % flame_rec, width=150, height=40)
    try:
        t.wait_for(lambda s: "hot_match" in s, what="the table")
        t.keys("Tab")
        t.wait_for(lambda s: "flame" in s.splitlines()[0] and "cold_other" in s, what="the flame graph")
        t.keys("/", "hot_m", "Enter")
        t.wait_for(lambda s: "filter: hot_m" in s and "_  (Enter" not in s, what="the filter applied")
        time.sleep(0.5)  # a redraw after the key
        screen = t.screen_sgr()
        hot, cold = sgr_at(screen, "hot_match", _in_graph), sgr_at(screen, "cold_other", _in_graph)
        assert hot is not None and cold is not None, screen
        assert {"1", "4", "44"} <= hot, (hot, screen)  # bold, underlined, on blue
        assert "2" in cold and "2" not in hot, (cold, screen)  # the others dimmed
        assert "[1 frame in view matches the filter]" in t.screen()
        # Esc clears the filter: nothing dimmed any more
        t.keys("/", "Escape")
        t.wait_for(lambda s: "filter:" not in s, what="the filter cleared")
        screen = t.screen_sgr()
        assert "2" not in sgr_at(screen, "cold_other", _in_graph), screen
        assert "4" not in sgr_at(screen, "hot_match", _in_graph), screen
    finally:
        t.close()


def test_a_deep_stack_scrolls_to_its_deepest_frames(deep_rec):
    t = Tmux("--file %s" % deep_rec, width=150, height=40)
    try:
        t.wait_for(lambda s: "bottom_leaf" in s, what="the table")
        t.keys("Tab")
        s = t.wait_for(lambda s: "flame" in s.splitlines()[0] and "deep" in s, what="the flame graph")
        m = re.search(r"(\d+) more levels below \(PgDn, End\)", s)
        assert m and int(m.group(1)) > 40, s  # 81 levels of deep(), the leaf under them
        graph = [l for l in s.splitlines()[:-2] if "bottom_leaf" in l and "total" not in l]
        assert not graph, s  # the leaf is below the screen
        t.keys("NPage", "NPage", "NPage", "NPage")
        s = t.wait_for(lambda s: "levels above (PgUp, Home)" in s and "levels below" not in s,
                       what="scrolled to the bottom")
        assert any("bottom_leaf" in l and "total" not in l for l in s.splitlines()), s
        t.keys("PPage", "PPage", "PPage", "PPage")
        s = t.wait_for(lambda s: "levels above" not in s and "levels below" in s, what="back at the top")
        # selecting down the stack scrolls the graph with the selection: <module>, its
        # biggest child (hot_match), its left neighbour deep, then 60 levels of deep
        t.keys("Down", "Down", "Left")
        t.wait_for(lambda s: s.splitlines()[-2].startswith("deep "), what="deep selected")
        t.keys(*["Down"] * 60)
        s = t.wait_for(lambda s: "levels above" in s and s.splitlines()[-2].startswith("deep "),
                       what="the graph follows the selection down")
        # the selected box (bold on green) is on screen, below the line that says what is above
        screen = t.screen_sgr()
        lines = screen.splitlines()
        above = next(i for i, l in enumerate(lines) if "levels above" in l)
        selected = [i for i, l in enumerate(lines[:-2]) if i > above and "deep" in l and
                    {"1", "42"} <= (sgr_at(l, "deep") or set())]
        assert selected, screen
    finally:
        t.close()


# ---- idle threads ------------------------------------------------------------------

IDLE_JOB = r'''
import sys, threading, time

def idle_wait():
    time.sleep(3600)

def busy_work():
    s = 0
    for i in range(20000):
        s += i
    return s

threading.Thread(target=idle_wait, name="idler", daemon=True).start()  # blocked from the start
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    busy_work()
'''


def test_i_hides_threads_that_started_no_call_in_the_window(tmp_path):
    rec = record(tmp_path, IDLE_JOB, "idle", "3")
    t = Tmux("--file %s" % rec, width=150, height=40)
    try:
        t.wait_for(lambda s: "busy_work" in s, what="the table")
        t.keys("-", "-", "-")  # a window of 1 s: the idle thread's calls were all before it
        t.wait_for(lambda s: "window 1s" in s, what="a window of 1 s")
        t.keys("Tab")
        t.wait_for(lambda s: "flame" in s.splitlines()[0] and "idle_wait" in s and "busy_work" in s,
                   what="both threads in the flame")
        t.keys("i")
        s = t.wait_for(lambda s: "idle threads hidden" in s and "idle_wait" not in s, what="the idle thread hidden")
        assert "busy_work" in s
        t.keys("i")
        t.wait_for(lambda s: "idle_wait" in s and "idle threads hidden" not in s, what="the idle thread back")
    finally:
        t.close()


# ---- names with bidi, format and line-separator characters ---------------------------------

EVIL_JOB = r'''
import sys, time

def evil():
    s = 0
    for i in range(30000):
        s += i
    return s

evil.__code__ = evil.__code__.replace(co_name="ev\u202eil\u2028x\u200b", co_qualname="ev\u202eil\u2028x\u200b",
                                      co_filename="/tmp/fi\u2029le\u202e.py")
def loop():
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        evil()

import threading
t = threading.Thread(target=loop, name="wo\u202erker\u2028")
t.start()
t.join()
'''

RAW = ("\u202e", "\u2028", "\u2029", "\u200b")
ESCAPED_NAME = "ev\\u202eil\\u2028x\\u200b"
ESCAPED_FILE = "fi\\u2029le\\u202e.py"
ESCAPED_THREAD = "wo\\u202erker\\u2028"


def test_bidi_and_separator_characters_are_escaped_in_once_output(tmp_path):
    rec = record(tmp_path, EVIL_JOB, "evil", "1")
    r = subprocess.run([TOP, "--file", rec, "--once"], capture_output=True, timeout=60)
    out = r.stdout.decode("utf-8")  # strict: invalid UTF-8 would raise
    assert r.returncode == 0, r.stderr
    assert ESCAPED_NAME in out and ESCAPED_FILE in out and ESCAPED_THREAD in out, out
    assert not any(c in out for c in RAW), out
    # JSON: the same name once parsed, and nothing raw in the text
    r = subprocess.run([TOP, "--file", rec, "--once", "--json"], capture_output=True, timeout=60)
    text = r.stdout.decode("utf-8")
    assert not any(c in text for c in RAW)
    names = [f["name"] for f in json.loads(text)["functions"]]
    assert "ev\u202eil\u2028x\u200b" in names, names


def test_bidi_and_separator_characters_are_escaped_in_the_table_and_flame(tmp_path):
    rec = record(tmp_path, EVIL_JOB, "evil", "1")
    t = Tmux("--file %s" % rec, width=160, height=40)
    try:
        s = t.wait_for(lambda s: ESCAPED_NAME in s, what="the escaped name in the table")
        assert ESCAPED_FILE in s and not any(c in s for c in RAW), s
        assert ESCAPED_THREAD in s, s  # the threads line
        t.keys("T")
        s = t.wait_for(lambda s: "pick a thread" in s, what="the thread list")
        assert ESCAPED_THREAD in s and not any(c in s for c in RAW), s
        t.keys("Escape")
        t.wait_for(lambda s: "pick a thread" not in s, what="the table again")
        t.keys("Tab")
        s = t.wait_for(lambda s: "flame" in s.splitlines()[0] and ESCAPED_NAME in s, what="the flame graph")
        assert not any(c in s for c in RAW), s
        graph = [l for l in s.splitlines() if ESCAPED_NAME in l and "total" not in l]
        assert graph, s  # a box of the graph names it, escaped
    finally:
        t.close()
