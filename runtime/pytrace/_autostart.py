"""Start tracing at interpreter startup in a child of `pytrace run --subprocesses`.

The sitecustomize.py that `pytrace run --subprocesses` puts first on PYTHONPATH calls
main(); the start() options come as JSON in PYTRACE_SUBPROCESS_OPTIONS. A failure to
start is reported on stderr in one line and never stops the child program.
"""

import importlib
import json
import os
import sys

ENV_OPTIONS = "PYTRACE_SUBPROCESS_OPTIONS"


def _chain_sitecustomize(hook_file):
    """Run the sitecustomize our hook shadows, if there is one further on sys.path."""
    hook_dir = os.path.dirname(os.path.abspath(hook_file))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != hook_dir]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001 - behave like site.py: report and continue
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(e).__name__, e))
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _cmdline():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return " ".join(sys.orig_argv) if hasattr(sys, "orig_argv") else None


def main(hook_file):
    _chain_sitecustomize(hook_file)
    raw = os.environ.get(ENV_OPTIONS)
    if not raw:
        return
    try:
        opts = json.loads(raw)
        if not opts.get("cmdline"):
            opts["cmdline"] = _cmdline()
        import pytrace
        if pytrace.is_tracing():
            return
        segment = pytrace.start(**opts)
    except Exception as e:  # noqa: BLE001 - the child program must run regardless
        sys.stderr.write("pytrace: child %d not traced: %s\n" % (os.getpid(), e))
        return
    import atexit
    from .cli import _announce, _stop_at_exit
    _announce(segment)
    atexit.register(_stop_at_exit)
