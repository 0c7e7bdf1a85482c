"""Shared by the corpus programs: start/stop tracing the way the test asked.

Environment (set by the tests):
  PYTRACE_TEST_MODE   "pytrace" (the program traces itself with pytrace.start/stop),
                      "ref" (the program runs under tests/python/support/reftracer.py), or
                      unset/"none" (plain run)
  PYTRACE_TEST_DIR    handshake directory
  PYTRACE_TEST_C_CALLS  "0" to trace without C calls
  PYTRACE_TEST_START  JSON of extra pytrace.start() options

Handshake in pytrace mode, per process (the main one and any forked child):
  <dir>/<pid>.role   {"role": ..., "roots": [...]}  (all modes)
  <dir>/<pid>.seg    {"segment": "/pytrace-..."}    written after start; the test then
                     starts a reader process on it, which creates
  <dir>/<pid>.go     once it holds the segment; only then does the program go on.
  <dir>/<pid>.counters.json   pytrace.stop()'s counters
Everything here runs outside the corpus's root functions, so its calls never enter the
trees that are compared.
"""

import gc
import json
import os
import sys
import time

MODE = os.environ.get("PYTRACE_TEST_MODE", "none")
DIR = os.environ.get("PYTRACE_TEST_DIR", "")
C_CALLS = os.environ.get("PYTRACE_TEST_C_CALLS", "1") != "0"
EXTRA = json.loads(os.environ.get("PYTRACE_TEST_START", "{}") or "{}")

if MODE == "pytrace":
    import pytrace


def _write(name, obj):
    if not DIR:
        return
    path = os.path.join(DIR, "%d.%s" % (os.getpid(), name))
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def _wait_for_reader(timeout=60.0):
    go = os.path.join(DIR, "%d.go" % os.getpid())
    deadline = time.monotonic() + timeout
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.stderr.write("harness: no reader attached within %gs\n" % timeout)
            os._exit(3)
        time.sleep(0.002)


def begin(roots, role="main"):
    """Start tracing (pytrace mode) and wait until a reader holds the segment.

    The garbage collector is off from here on: a collection runs finalizers and weakref
    callbacks wherever it happens to trigger, and the two tracers allocate differently.
    """
    gc.collect()
    gc.disable()
    _write("role", {"role": role, "roots": list(roots)})
    if MODE == "pytrace":
        options = dict(policy="wait", c_calls=C_CALLS, wait_timeout=30.0, ring_count=16,
                       chunks_per_ring=16)
        options.update(EXTRA)
        segment = pytrace.start(**options)
        _write("seg", {"segment": segment})
        _wait_for_reader()


def end():
    """Stop tracing (pytrace mode) and write the counters."""
    if MODE == "pytrace":
        counters = pytrace.stop()
        _write("counters.json", counters.__dict__)


def child_begin(roots):
    """In a forked child: announce the child's own segment and wait for its reader."""
    _write("role", {"role": "child", "roots": list(roots)})
    if MODE == "pytrace":
        _write("seg", {"segment": pytrace.segment_name()})
        _wait_for_reader()


def child_exit(code=0):
    """End a forked child: stop tracing / dump the reference tree, then os._exit."""
    if MODE == "pytrace":
        end()
    elif MODE == "ref":
        import reftracer
        reftracer.dump()
    sys.stdout.flush()
    os._exit(code)
