"""Running corpus programs traced (with live reader processes) and under the reference
tracer, and comparing their call trees."""

import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = HERE              # tests/python/support: what a child process needs on sys.path
CORPUS = os.path.join(HERE, "corpus")
PY = sys.executable


def expected_hook(c_calls):
    """The interpreter hook pytrace runs on for this Python and c_calls setting."""
    if sys.version_info >= (3, 12):
        return "sys.monitoring"
    if sys.version_info >= (3, 11) and not c_calls:
        return "frame evaluation (PEP 523)"
    return "PyEval_SetProfile"


def corpus(name):
    return os.path.join(CORPUS, name + ".py")


def _env(mode, tmp, c_calls=True, start=None, extra=None):
    env = dict(os.environ)
    env.update(PYTRACE_TEST_MODE=mode, PYTRACE_TEST_DIR=str(tmp),
               PYTRACE_TEST_C_CALLS="1" if c_calls else "0",
               PYTRACE_TEST_START=json.dumps(start or {}))
    env.update(extra or {})
    return env


def spawn_drain(segment, out, go=None, max_seconds=120):
    args = [PY, os.path.join(HERE, "drain.py"), segment, out]
    if go:
        args.append(go)
    args += ["--max-seconds", str(max_seconds)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _load(path):
    with open(path) as f:
        return json.load(f)


class Run:
    """What one run of a corpus program left behind, per process."""

    def __init__(self, tmp, returncode, stdout, stderr):
        self.tmp = tmp
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.procs = {}   # pid -> {"role":..., "roots":..., "trace"/"ref"/"counters": ...}
        for role_file in glob.glob(os.path.join(str(tmp), "*.role")):
            pid = int(os.path.basename(role_file).split(".")[0])
            info = _load(role_file)
            for suffix, key in ((".trace.json", "trace"), (".ref.json", "ref"),
                                (".counters.json", "counters"), (".drain.err", "drain_err")):
                path = os.path.join(str(tmp), "%d%s" % (pid, suffix))
                if os.path.exists(path):
                    if suffix.endswith(".json"):
                        info[key] = _load(path)
                    else:
                        with open(path) as f:
                            info[key] = f.read()
            self.procs[pid] = info

    def by_role(self, role):
        found = [p for p in self.procs.values() if p["role"] == role]
        assert len(found) == 1, "expected one %r process, got %d (stderr: %s)" % (
            role, len(found), self.stderr[-2000:])
        return found[0]


def _kill_group(proc):
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def run_traced(name, tmp, c_calls=True, start=None, timeout=45):
    """Run corpus program `name` tracing itself; a drain.py reader process per segment
    (the main one and any fork child) reads live. Returns a Run."""
    tmp = str(tmp)
    # own session: a hung fork child can be killed with its parent
    proc = subprocess.Popen([PY, corpus(name)], env=_env("pytrace", tmp, c_calls, start),
                            cwd=CORPUS, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    drains = {}
    deadline = time.monotonic() + timeout

    def scan():
        for seg_file in glob.glob(os.path.join(tmp, "*.seg")):
            pid = int(os.path.basename(seg_file).split(".")[0])
            if pid not in drains:
                segment = _load(seg_file)["segment"]
                drains[pid] = spawn_drain(segment, os.path.join(tmp, "%d.trace.json" % pid),
                                          os.path.join(tmp, "%d.go" % pid))

    while proc.poll() is None and time.monotonic() < deadline:
        scan()
        time.sleep(0.005)
    scan()
    try:
        # the pipes close when the last process of the program (a fork child too) exits
        stdout, stderr = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        stderr += "\n[test harness: killed after %ds]" % timeout
    for pid, d in drains.items():
        try:
            _, err = d.communicate(timeout=max(5, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            d.kill()
            _, err = d.communicate()
        if err or d.returncode:
            with open(os.path.join(tmp, "%d.drain.err" % pid), "w") as f:
                f.write("rc=%s\n%s" % (d.returncode, err))
    return Run(tmp, proc.returncode, stdout, stderr)


def run_ref(name, tmp, c_calls=True, timeout=90, setprofile=False):
    """Run corpus program `name` under the pure-Python reference tracer (on 3.12+ with
    sys.monitoring, or sys.setprofile if asked)."""
    tmp = str(tmp)
    args = [PY, os.path.join(HERE, "reftracer.py"), "--out", os.path.join(tmp, "{pid}.ref.json")]
    if not c_calls:
        args.append("--no-c-calls")
    if setprofile:
        args.append("--setprofile")
    args.append(corpus(name))
    proc = subprocess.run(args, env=_env("ref", tmp, c_calls), cwd=CORPUS,
                          capture_output=True, text=True, timeout=timeout)
    return Run(tmp, proc.returncode, proc.stdout, proc.stderr)


# ---- tree comparison --------------------------------------------------------

def qualname_of(key):
    """'py:<qualname>:<file>:<line>' -> qualname; other keys unchanged."""
    if key.startswith("py:"):
        return key[3:].split(":", 1)[0]
    return key


def normalize(key):
    """C functions are compared by their own name: tracers qualify them differently
    ('dict.get', 'builtins.len', 'get')."""
    if key.startswith("c:"):
        return "c:" + key[2:].rsplit(".", 1)[-1]
    return key


def rooted_edges(tree_json, roots):
    """{relative path: calls} below the outermost nodes named by `roots`, over all
    threads, with zero-call paths (frames already running) left out."""
    from calltree import edges_below
    roots = set(roots)
    out = {}
    for rows in tree_json["threads"].values():
        for path, calls in edges_below(rows, lambda k: qualname_of(k) in roots).items():
            path = tuple(normalize(k) for k in path)
            out[path] = out.get(path, 0) + calls
    return {p: c for p, c in out.items() if c}


def short(path):
    return " > ".join(qualname_of(k) for k in path)


def diff_edges(got, want, limit=25, names=("pytrace", "reference")):
    """Human-readable differences (empty list when equal)."""
    lines = []
    for path in sorted(set(got) | set(want), key=lambda p: (len(p), p)):
        g, w = got.get(path, 0), want.get(path, 0)
        if g != w:
            lines.append("%s: %s %d, %s %d" % (short(path), names[0], g, names[1], w))
    if len(lines) > limit:
        lines = lines[:limit] + ["... %d more" % (len(lines) - limit)]
    return lines
