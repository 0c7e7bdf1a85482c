"""The golden check for moving code: every output of every command that reads a
recording, written to a folder, so that a tree before and after a change can be
compared byte for byte (`diff -r`).

    python tests/golden.py record RECDIR          # once: recordings of the corpus programs
    python tests/golden.py outputs RECDIR OUTDIR  # with the build to check
    diff -r OUT_BEFORE OUT_AFTER

`record` runs the corpus programs (tests/python/support/corpus, untraced by themselves) under
`pytrace record`, merges two of the recordings and copies the format-1.0 fixture; the
recordings are then fixed input. `outputs` runs, on each: every export format (and their
options), pytrace-top --file --once (text and JSON, each sort, a window, a thread, each
process) and pytrace.Profile (functions, tree, paths, timeline, stacks, counters, of each
process). What it prints on stderr is kept too (warnings are outputs). Needs the package
installed (pytrace, pytrace-top on PATH).
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "python", "support", "corpus")
FIXTURE = os.path.join(HERE, "python", "recording", "fixtures", "format-1.0.pytrace")
PROGRAMS = ["threads", "recursion", "deep_recursion", "generators", "exceptions", "ccalls", "forking",
            "spans", "async_tasks", "cprofile_keys"]

EXPORTS = [
    ("perfetto", []), ("perfetto", ["--uncompressed"]), ("chrome", []), ("speedscope", []),
    ("collapsed", []), ("collapsed", ["--weight", "calls", "--per-thread", "--max-depth", "3"]), ("pstats", []), ("pstats", ["--qualnames"]), ("html", []),
    ("chrome", ["--min-duration", "5us"]), ("chrome", ["--from", "1ms", "--to", "20ms"]),
    ("speedscope", ["--min-duration", "2us"]), ("perfetto", ["--uncompressed", "--min-duration", "2us"]),
    ("html", ["--tree-budget", "1"]),
]
TOPS = [[], ["--json"], ["--json", "--sort", "total"], ["--json", "--sort", "calls"], ["--sort", "prim"],
        ["--sort", "name"], ["--sort", "file"], ["--json", "--thread", "1"], ["--json", "--window", "0.01"],
        ["--limit", "5"], ["--json", "--tree-budget", "1"]]


# Call paths that rarely repeat (what a parser or symbolic code makes): its tree passes
# a 1 MiB budget, so the outputs with --tree-budget 1 show [other] nodes.
PATHS = """
import random
random.seed(7)
N = 600
src = []
for i in range(N):
    src.append("def f%d(d, r):\\n    if d > 0:\\n        FS[r.randrange(N)](d - 1, r)\\n" % i)
exec("".join(src))
FS = [globals()["f%d" % i] for i in range(N)]
r = random.Random(3)
for _ in range(6000):
    FS[r.randrange(N)](r.randrange(1, 9), r)
"""


def record(recdir):
    os.makedirs(recdir, exist_ok=True)
    env = dict(os.environ, PYTRACE_TEST_MODE="none")
    env.pop("PYTRACE_TEST_DIR", None)
    for name in PROGRAMS:
        out = os.path.join(recdir, name + ".pytrace")
        subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", out, "--", sys.executable,
                        os.path.join(CORPUS, name + ".py")], env=env, check=True, cwd=CORPUS,
                       stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pytrace", "record", "-o", os.path.join(recdir, "paths.pytrace"), "--",
                    sys.executable, "-c", PATHS], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pytrace", "merge", "-o", os.path.join(recdir, "merged.pytrace"),
                    os.path.join(recdir, "threads.pytrace"), os.path.join(recdir, "forking.pytrace")],
                   check=True)
    shutil.copy(FIXTURE, os.path.join(recdir, "format-1.0.pytrace"))


def _run(argv, out, stdout_file=None):
    r = subprocess.run(argv, capture_output=True, cwd=os.path.dirname(out))
    with open(out + ".stderr", "wb") as f:
        f.write(b"exit %d\n" % r.returncode + r.stderr)
    if stdout_file is None:
        with open(out, "wb") as f:
            f.write(r.stdout)
    elif out.endswith(".html") and os.path.exists(out):
        # the report's Content-Security-Policy nonce is new in every page: not compared
        import re
        with open(out, "rb") as f:
            data = f.read()
        nonces = set(re.findall(rb"'nonce-([A-Za-z0-9_-]+)'", data))
        for n in nonces:
            data = data.replace(n, b"NONCE")
        with open(out, "wb") as f:
            f.write(data)


def _profile(rec, out):
    import pytrace
    prof = pytrace.Profile.from_recording(rec)
    doc = {"processes": [list(p) for p in prof.processes()]}
    for p in prof.processes():
        i = p.index

        def node(n):
            return {k: (v if k != "children" else [node(c) for c in v]) for k, v in n.items()} \
                if isinstance(n, dict) else repr(n)
        doc[i] = {
            "counters": prof.counters(process=i),
            "threads": [repr(t) for t in prof.threads(process=i)],
            "functions": [list(f) for f in prof.functions(process=i)],
            "functions_total": [list(f) for f in prof.functions(sort="total", process=i)],
            "functions_thread1": [list(f) for f in prof.functions(thread=1, process=i)],
            "tree": repr(prof.tree(process=i)),
            "paths": repr(prof.paths(process=i)),
            "timeline": repr(prof.timeline(process=i)),
            "stacks": repr(prof.stacks(process=i)),
            "span_ns": prof.span_ns(process=i),
        }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True, default=repr)


def outputs(recdir, outdir):
    os.makedirs(outdir, exist_ok=True)
    top = shutil.which("pytrace-top")
    for rec in sorted(os.listdir(recdir)):
        if not rec.endswith(".pytrace"):
            continue
        path = os.path.abspath(os.path.join(recdir, rec))
        base = os.path.join(outdir, rec[:-len(".pytrace")])
        for n, (fmt, opts) in enumerate(EXPORTS):
            out = "%s.export%02d.%s" % (base, n, fmt)
            _run([sys.executable, "-m", "pytrace", "export", path, "--format", fmt, "-o", os.path.basename(out)] + opts,
                 out, stdout_file=out)
        for n, opts in enumerate(TOPS):
            _run([top, "--file", path, "--once"] + opts, "%s.top%02d" % (base, n))
        for pid in _pids(path):
            _run([top, "--file", path, "--once", "--json", "--pid", str(pid)], "%s.top-pid%d" % (base, pid))
        try:
            _profile(path, base + ".profile.json")
        except Exception as e:            # an error is an output too
            with open(base + ".profile.json", "w") as f:
                f.write("error: %r\n" % (e,))


def _pids(path):
    import pytrace
    try:
        return sorted({p.pid for p in pytrace.Profile.from_recording(path).processes()})
    except Exception:
        return []


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "record":
        record(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "outputs":
        outputs(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
