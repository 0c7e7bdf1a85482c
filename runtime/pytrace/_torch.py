"""PyTorch's operators as spans: the Python side of `--torch` / start(torch=True).

The collector is C (runtime/_pytrace/pt_itt.c): torch's ittnotify loads the library
that INTEL_LIBITTNOTIFY64 names, on its first ITT task, and reads INTEL_ITTNOTIFY_GROUPS
to know which entries to take from it. So this module
  - names the _pytrace extension there (and the "structure" group) before the program
    imports torch: torch creates its ITT domain at import, and only while a collector is
    named (prepare_environment());
  - turns torch's ITT instrumentation on (the profiler state emit_itt() sets: every op,
    autograd node and record_function label is an ITT task) on the thread that imports
    torch, as soon as it has been imported: at once if it is, else from a one-shot
    import hook that leaves the module as it would be (enable());
  - gives way to the program's own profiler: torch.profiler.profile,
    torch.autograd.profiler.profile / emit_itt / emit_nvtx (whose start goes through
    torch.autograd.profiler's _prepare_profiler / _enable_profiler) and the legacy
    profiler first turn pytrace's instrumentation off, said once on stderr; Python
    calls stay traced.

This file is hidden from the picture (HIDDEN_FILES): its frames and the C calls made
from it produce no events, so a program's Python calls are recorded alike with and
without --torch. It imports nothing at load but sys and os; the launcher loads it by
path, without the pytrace package.

The ops recorded are those of the threads whose profiler state holds the ITT callbacks:
the thread that imported torch, and the threads torch runs work on for it (autograd,
the inter-op pool of torch.jit.fork / at::launch), which inherit that state; a fork()
child traced by pytrace inherits it as well (its ops go into its own segment), and a
traced spawn child turns it on itself (the torch option travels with the others).
Other Python threads of the program keep their own (empty) state: their ops are not
recorded.
"""

import os
import sys

LIB_VAR = "INTEL_LIBITTNOTIFY64"
GROUPS_VAR = "INTEL_ITTNOTIFY_GROUPS"
GROUPS = "structure"      # domains, string handles, tasks (ittnotify_static.h)

_state = {"ext": None, "thread": None, "enabled": False, "gave_way": False, "hook": None,
          "env": None, "env_old": None, "env_saved": False,
          "patched": [], "said": set()}


def _say_once(key, text):
    if key in _state["said"]:
        return
    _state["said"].add(key)
    try:
        stream = sys.__stderr__ or sys.stderr
        if stream is not None:
            stream.write("pytrace: %s\n" % text)
            stream.flush()
    except Exception:  # noqa: BLE001 - never fail the program for a note
        pass


def _extension_path(ext):
    path = getattr(ext, "__file__", None)
    if not path:
        spec = getattr(ext, "__spec__", None)
        path = getattr(spec, "origin", None)
    return os.path.abspath(path) if path else None


def prepare_environment(ext):
    """What torch's ittnotify must find in the environment to load the collector (the
    extension's path, and the "structure" group), kept for _env_set(); and the
    Optimizer.step hook's module, loaded now (before tracing: its loading is not the
    program's). -> None, or why ops cannot be recorded (one line).

    The variables are in the environment only while torch's module is imported (the
    import hook's _env_set() and _after_torch()'s _env_restore()): torch creates its ITT
    domain at import, which is when ittnotify reads them; before and after, the program
    and the children it starts see the environment they see untraced."""
    _steps(ext)
    path = _extension_path(ext)
    if path is None:
        return "cannot find the _pytrace extension's file to name it to torch's ittnotify"
    current = os.environ.get(LIB_VAR)
    if current and os.path.abspath(current) != path:
        return ("%s names another ITT collector (%s): torch's ops are not recorded; unset it "
                "to record them with pytrace" % (LIB_VAR, current))
    groups = os.environ.get(GROUPS_VAR)
    if not groups:
        groups = GROUPS
    elif GROUPS not in groups.replace(";", ",").replace(" ", ",").split(","):
        groups = groups + "," + GROUPS
    _state["env"] = {LIB_VAR: path, GROUPS_VAR: groups}
    _state["env_old"] = {LIB_VAR: current, GROUPS_VAR: os.environ.get(GROUPS_VAR)}
    return None


def _env_set():
    """The collector's variables into the process's environment (C's environ, where
    ittnotify's getenv reads them: os.putenv, a C call; os.environ, the program's
    mapping, is left as it is, and touching it would run Python code while tracing)."""
    env = _state.get("env")
    if not env or _state.get("env_saved"):
        return
    _state["env_saved"] = True
    for k, v in env.items():
        os.putenv(k, v)


def _env_restore():
    """The values prepare_environment() found, back into C's environ."""
    if not _state.get("env_saved"):
        return
    _state["env_saved"] = False
    for k, v in _state["env_old"].items():
        if v is None:
            os.unsetenv(k)
        else:
            os.putenv(k, v)


def enable(ext, why):
    """start(torch=True), after tracing started (`why`: what prepare_environment(),
    called before it, said): instrument torch now if it is imported, else when it is."""
    _state["ext"] = ext
    if why is not None:
        _say_once("env", why)
        return
    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "__spec__", None), "_initializing", False) is False \
            and hasattr(torch, "autograd"):
        _env_set()  # for the probe, should it be what loads the collector
        try:
            _instrument(torch)
        finally:
            _env_restore()
    elif _state["hook"] is None and not _install_hook():
        _say_once("hook", "torch's ops are not recorded: no PathFinder in sys.meta_path to "
                  "see torch's import through; import torch before pytrace.start(torch=True)")


def disable():
    """stop(): turn torch's ITT instrumentation off again (on the thread that turned it
    on; elsewhere only the collector stops)."""
    ext = _state["ext"]
    if ext is not None:
        ext._itt_set(False)
        steps = getattr(ext, "_steps_glue", None)
        if steps is not None:
            steps.uninstall_optimizer_steps()
    _remove_hook()
    _env_restore()
    _turn_off_here()
    _unpatch()


def _turn_off_here():
    import threading
    torch = sys.modules.get("torch")
    if not _state["enabled"] or torch is None or _state["thread"] != threading.get_ident():
        return
    _state["enabled"] = False
    try:
        torch.autograd._disable_profiler()
    except Exception:  # noqa: BLE001 - its state is gone already
        pass


class _ImportHook:
    """Stands in sys.meta_path for the finder that finds torch (PathFinder), until torch
    is imported: every import goes to that finder as it would (the same calls, the
    same import-lock rounds of importlib's loop); torch's spec gets a loader whose
    exec_module is pytrace's C helper (no frame of ours on the stack while torch's
    module runs), which puts torch's own loader back, runs the module, then turns
    torch's ITT instrumentation on."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        spec = self.finder.find_spec(name, path, target)
        if name != "torch" or spec is None or _state["hook"] is not self:
            return spec
        _remove_hook()
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _Loader(loader)
        _env_set()  # until torch's module ran (_after_torch)
        return spec

    def __getattr__(self, name):
        return getattr(self.finder, name)


class _Loader:
    def __init__(self, loader):
        # loaded at startup (site): importing it here would put its import in the picture
        functools = sys.modules.get("functools") or __import__("functools")
        self.loader = loader
        self.exec_module = functools.partial(_state["ext"]._exec_then, loader, _after_torch)

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def __getattr__(self, name):
        return getattr(self.loader, name)


def _after_torch(module):
    """After torch's module ran (None: it failed): the environment back, then torch's
    ITT instrumentation on (its probe loads the collector if nothing did yet, which
    reads the variables: they are still set then)."""
    try:
        if module is not None:
            _instrument(module)
    except Exception as e:  # noqa: BLE001 - the program's import must not fail for us
        _say_once("instrument", "torch's ops are not recorded: %s" % e)
    finally:
        _env_restore()


def _install_hook():
    """In place of the meta path finder that finds top-level modules on sys.path."""
    path_finder = sys.modules["_frozen_importlib_external"].PathFinder
    for i, finder in enumerate(sys.meta_path):
        if finder is path_finder:
            hook = _ImportHook(finder)
            _state["hook"] = hook
            sys.meta_path[i] = hook
            return True
    return False


def _remove_hook():
    hook = _state["hook"]
    _state["hook"] = None
    if hook is None:
        return
    for i, finder in enumerate(sys.meta_path):
        if finder is hook:
            sys.meta_path[i] = hook.finder
            return


def _probe(torch, ext):
    """Does torch's ittnotify call the collector? One ITT task, recorded nowhere (the
    collector is off); it also makes ittnotify load it, if it has not yet."""
    before = ext._itt_stats()["seen"]
    itt = torch._C._itt
    itt.rangePush("pytrace")
    itt.rangePop()
    return ext._itt_stats()["seen"] > before


def _instrument(torch):
    import threading
    ext = _state["ext"]
    if ext is None or _state["gave_way"]:
        return
    if _state["enabled"]:
        ext._itt_set(True)   # a new session (start() after stop() from another thread)
        return
    ext._itt_set(False)
    try:
        loaded = _probe(torch, ext)
    except Exception as e:  # noqa: BLE001 - a torch without ITT
        _say_once("itt", "torch's ops are not recorded: this torch has no ITT (%s)" % e)
        return
    if not loaded:
        _say_once("itt", "torch's ops are not recorded: torch was imported before pytrace named its "
                  "collector (%s); start pytrace before importing torch (pytrace run --torch)" % LIB_VAR)
        return
    autograd = torch.autograd
    if autograd._profiler_enabled():
        _say_once("give-way", "the program's own torch profiler is on: pytrace does not record "
                  "torch's ops (Python calls are still traced)")
        _state["gave_way"] = True
        return
    config = autograd.ProfilerConfig(autograd.ProfilerState.ITT, False, False, False, False, False,
                                     torch._C._profiler._ExperimentalConfig())
    autograd._enable_profiler(config, set())
    _state["enabled"] = True
    _state["thread"] = threading.get_ident()
    _patch(torch)
    ext._itt_set(True)
    _steps(ext).install_optimizer_steps(ext)  # each Optimizer.step ends a step


def _steps(ext):
    """pytrace/_steps.py (the Optimizer.step hook), loaded by path as this module is,
    kept out of sys.modules, held by the extension (prepare_environment() loads it,
    before tracing starts)."""
    steps = getattr(ext, "_steps_glue", None)
    if steps is None:
        name = "pytrace._steps"
        # this module's own path: its spec's origin (the launcher's spec has no __file__)
        path = os.path.join(os.path.dirname(__spec__.origin), "_steps.py")
        loader = sys.modules["_frozen_importlib_external"].SourceFileLoader(name, path)
        bootstrap = sys.modules["_frozen_importlib"]
        steps = bootstrap.module_from_spec(bootstrap.spec_from_loader(name, loader, origin=path))
        loader.exec_module(steps)
        ext._steps_glue = steps
    return steps


def _patch(torch):
    """The program's profiler starts through these module globals: each gives way first."""
    targets = [("torch.autograd.profiler", ("_prepare_profiler", "_enable_profiler")),
               ("torch.autograd.profiler_legacy", ("_enable_profiler_legacy",))]
    for modname, names in targets:
        module = sys.modules.get(modname)     # imported by torch's own __init__
        if module is None:
            continue
        for name in names:
            original = getattr(module, name, None)
            if original is None:
                continue
            setattr(module, name, _giving_way(original))
            _state["patched"].append((module, name, original))


def _unpatch():
    for module, name, original in _state["patched"]:
        setattr(module, name, original)
    _state["patched"] = []


def _giving_way(original):
    def start_profiler(*args, **kwargs):
        _give_way()
        return original(*args, **kwargs)
    start_profiler.__wrapped__ = original
    return start_profiler


def _give_way():
    ext = _state["ext"]
    if _state["gave_way"]:
        return
    _state["gave_way"] = True
    if ext is not None:
        ext._itt_set(False)
    _turn_off_here()
    _unpatch()
    _say_once("give-way", "the program started torch's profiler: pytrace stops recording torch's "
              "ops (Python calls are still traced)")
