"""The code `pytrace attach` and `pytrace detach` run inside another process.

This file is not imported by pytrace: the attaching process reads its text, appends one
call line with the parameters (a Python literal) and hands the result to `sys.remote_exec` (PEP 768).
The target's main thread runs it at its next eval-breaker check, in a fresh namespace.

Rules for everything here:
- It never raises into the target: every outcome, errors included, goes to the FIFO the
  attacher made and reads (in its own directory: nothing there is the target user's to
  change), never to the target's stdout or stderr.
- It imports nothing the target had not imported: it uses only modules every 3.14+
  interpreter has loaded at startup, even under -S (posix, time, _thread, and the import
  machinery through `_frozen_importlib*`), and its result is a Python literal (repr),
  so not even json is needed. The only module it adds is `pytrace._pytrace` (the
  extension, which imports os if the program had not), and detach takes it out of
  sys.modules again when attach put it there and the program did not import pytrace
  meanwhile.
- It runs nothing when it comes too late (the attacher gave up): the deadline is on
  CLOCK_MONOTONIC, which both processes read alike.
- A KeyboardInterrupt that lands in it is handed back to the program
  (_thread.interrupt_main), where it would have landed without pytrace.
"""


def _pytrace_remote(params):
    import posix
    import sys
    import time

    result = {"pid": posix.getpid(), "python": "%d.%d.%d" % sys.version_info[:3],
              "executable": sys.executable or ""}
    interrupted = False
    try:
        try:
            posix.unlink(params["script"])      # read already; nothing of it stays
        except OSError:
            pass
        if time.monotonic() > params["deadline"] or _pytrace_exists(params["cancel"]):
            result["status"] = "late"           # the attacher gave up: change nothing
        elif params["action"] == "attach":
            _pytrace_attach(params, result)
        elif params["action"] == "detach":
            _pytrace_detach(params, result)
        else:
            result["status"] = "error"
            result["error"] = "unknown action %r" % (params["action"],)
    except KeyboardInterrupt:
        interrupted = True
        result.setdefault("status", "error")
        result["error"] = "interrupted by Ctrl-C in the process"
    except BaseException as e:  # noqa: BLE001 - never into the target
        result.setdefault("status", "error")
        result["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        _pytrace_write_result(params["result"], result)
        if interrupted:
            try:
                import _thread
                _thread.interrupt_main()        # the program gets its Ctrl-C
            except BaseException:  # noqa: BLE001
                pass


def _pytrace_write_result(path, result):
    """Into the attacher's FIFO (it made it, in its own directory, and holds the reading
    end): opened for writing without blocking (no reader: the attacher gave up, and the
    answer goes nowhere), nothing created. A full pipe is waited for briefly, never long:
    this runs on the program's main thread."""
    import posix
    import time
    try:
        data = repr(result).encode()
        fd = posix.open(path, posix.O_WRONLY | posix.O_NONBLOCK | posix.O_NOFOLLOW)
        try:
            tries = 0
            while data:
                try:
                    data = data[posix.write(fd, data):]
                except BlockingIOError:
                    tries += 1
                    if tries > 100:
                        break
                    time.sleep(0.001)
        finally:
            posix.close(fd)
    except BaseException:  # noqa: BLE001 - the attacher times out and says so
        pass


def _pytrace_find_extension(params):
    """-> (path of a _pytrace built for this interpreter, where it was found) or (None, why)."""
    import sys
    boot = sys.modules.get("_frozen_importlib")
    external = sys.modules.get("_frozen_importlib_external")
    suffixes = list(external.EXTENSION_SUFFIXES)
    why = "no pytrace package on its sys.path"
    try:
        spec = boot._find_spec("pytrace", None)
    except Exception as e:  # noqa: BLE001 - a broken finder of the program's
        spec, why = None, "looking for pytrace failed: %s" % e
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in suffixes:
            path = folder.rstrip("/") + "/_pytrace" + suffix
            if _pytrace_is_file(path):
                return path, "its environment"
        why = "its pytrace (%s) has no _pytrace extension for this interpreter" % folder
    # the attacher's own, if built for this very ABI (suffixes[0] is the tagged one,
    # ".cpython-314-x86_64-linux-gnu.so"; the generic ".so" says nothing)
    fallback = params.get("fallback") or {}
    path = fallback.get("path")
    if path and suffixes and fallback.get("suffix") == suffixes[0] and path.endswith(suffixes[0]) \
            and _pytrace_is_file(path):
        return path, "the attaching pytrace"
    return None, why


def _pytrace_exists(path):
    import posix
    try:
        posix.stat(path)
        return True
    except OSError:
        return False


def _pytrace_is_file(path):
    import posix
    try:
        return (posix.stat(path).st_mode & 0o170000) == 0o100000
    except OSError:
        return False


def _pytrace_load(params, result):
    import sys
    module = sys.modules.get("pytrace._pytrace")
    if module is not None:
        result["from"] = "already loaded"
        return module, False
    path, where = _pytrace_find_extension(params)
    if path is None:
        result["status"] = "no-pytrace"
        result["error"] = where
        return None, False
    boot = sys.modules["_frozen_importlib"]
    external = sys.modules["_frozen_importlib_external"]
    loader = external.ExtensionFileLoader("pytrace._pytrace", path)
    spec = boot.ModuleSpec("pytrace._pytrace", loader, origin=path)
    try:
        module = loader.create_module(spec)
        loader.exec_module(module)
    except ImportError as e:
        result["status"] = "no-pytrace"
        result["error"] = "loading %s failed: %s" % (path, e)
        return None, False
    sys.modules["pytrace._pytrace"] = module
    result["from"] = "%s (%s)" % (where, path)
    return module, True


def _pytrace_attach(params, result):
    import sys
    module, added = _pytrace_load(params, result)
    if module is None:
        return
    if module.is_tracing():
        result["status"] = "already"
        result["segment"] = module.segment_name() or ""
        return
    try:
        try:
            # this script's own code (compiled as "<pytrace attach>"), and its C calls,
            # stay out of the picture; a _pytrace older than hide= shows them
            segment = module.start(hide=["<pytrace "], **params["options"])
        except TypeError:
            segment = module.start(**params["options"])
    except BaseException as e:  # noqa: BLE001
        if added and sys.modules.get("pytrace._pytrace") is module:
            del sys.modules["pytrace._pytrace"]
        result["status"] = "error"
        result["error"] = "starting tracing failed: %s" % e
        return
    counters = module.counters()
    if not counters.get("hook"):
        # no interpreter hook (both sys.monitoring ids taken): leave nothing behind
        module.stop()
        if hasattr(module, "release"):
            module.release()
        if added and sys.modules.get("pytrace._pytrace") is module:
            del sys.modules["pytrace._pytrace"]
        result["status"] = "no-hook"
        result["error"] = counters.get("first_error") or "no interpreter hook was free"
        return
    module._pytrace_attached = {"segment": segment, "added": added}
    result["status"] = "ok"
    result["segment"] = segment
    result["hook"] = counters.get("hook")


def _pytrace_detach(params, result):
    import sys
    module = sys.modules.get("pytrace._pytrace")
    if module is None or not module.is_tracing():
        result["status"] = "not-traced"
        return
    mine = getattr(module, "_pytrace_attached", None)
    segment = module.segment_name() or ""
    result["segment"] = segment
    if not isinstance(mine, dict) or mine.get("segment") != segment:
        result["status"] = "not-attached"     # the program traces itself: not ours to stop
        return
    counters = module.stop()
    if hasattr(module, "release"):
        module.release()
    del module._pytrace_attached
    if mine.get("added") and sys.modules.get("pytrace._pytrace") is module \
            and "pytrace" not in sys.modules:
        del sys.modules["pytrace._pytrace"]
    result["status"] = "ok"
    result["counters"] = {k: v for k, v in counters.items() if isinstance(v, (int, str))}
