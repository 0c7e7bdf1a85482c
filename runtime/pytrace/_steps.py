"""Optimizer.step as the step of a training loop (issue 22).

install_optimizer_steps() registers torch's global optimizer step post hook
(torch.optim.optimizer.register_optimizer_step_post_hook): after an
Optimizer.step call returns its work, the hook writes a Step mark
(pytrace.step) labelled by the optimizer's class ("SGD.step") on the thread
that called it. The hook returns None and never raises, so the program runs
as it would without it.

Several optimizers (a GAN's generator and discriminator, one optimizer per
parameter group...): one iteration of the loop calls several Optimizer.step.
A step is one iteration, so only the steps of ONE optimizer are marked: the
first that steps in this process. When that optimizer is garbage-collected (a
new optimizer for a new phase of training), the next one to step takes its
place. A program that wants another boundary calls pytrace.step() itself.

uninstall_optimizer_steps() removes the hook (pytrace.stop() and the --torch glue's
disable() call it).

This file is one of pytrace's hidden files (_launch.HIDDEN_FILES): the hook's frames
are not traced, so the program's call counts are the same with the hook as without it.
It imports nothing of pytrace: the --torch glue (_torch.py), which the launcher loads
by path without the package, loads it the same way, and the hook writes through the
extension itself (its label() and step(), as pytrace.step() does).
"""

import sys
import threading
import weakref

_lock = threading.Lock()
_ext = None         # the _pytrace extension the hook writes through
_handle = None      # torch's RemovableHandle of our hook
_primary = None     # weakref to the optimizer whose steps are marked
_labels = {}        # optimizer class -> "Name.step"


def _post_hook(optimizer, args, kwargs):
    global _primary
    try:
        ext = _ext
        if ext is None or not ext.is_tracing():
            return None
        primary = _primary() if _primary is not None else None
        if primary is None:
            _primary = weakref.ref(optimizer)
            primary = optimizer
        if primary is not optimizer:
            return None
        cls = type(optimizer)
        label = _labels.get(cls)
        if label is None:
            label = _labels[cls] = "%s.step" % cls.__name__
        ext.step(ext.label(label))  # label(): the segment's id, cached by the extension
    except Exception:  # noqa: BLE001 - the tracer never changes the program
        pass
    return None


class _Key:
    """Our hook's key in torch's table of global post hooks: not an int, so that no
    handle id of torch's is taken (RemovableHandle counts them)."""


_KEY = _Key()


def install_optimizer_steps(ext=None):
    """Mark each Optimizer.step of the program's (first) optimizer as the end of a step.
    `ext`: the _pytrace extension (default: pytrace's). Returns True when the hook is
    installed (now or before), False when torch is missing or has no global optimizer
    step hook.

    The hook goes straight into torch's table of global post hooks (what
    register_optimizer_step_post_hook fills), so that no Python code of torch runs for
    it: the --torch glue installs it while tracing, and torch's register function and
    RemovableHandle would be calls the program never made. A torch without that table
    gets the public function."""
    global _handle, _ext
    if ext is None:
        from pytrace import _pytrace as ext
    with _lock:
        _ext = ext
        if _handle is not None:
            return True
        optimizer = sys.modules.get("torch.optim.optimizer")
        table = getattr(optimizer, "_global_optimizer_post_hooks", None)
        if isinstance(table, dict):
            table[_KEY] = _post_hook
            _handle = table
            return True
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except Exception:  # noqa: BLE001 - no torch, or a torch without the hook
            return False
        _handle = register_optimizer_step_post_hook(_post_hook)
        return True


def uninstall_optimizer_steps():
    """Remove the hook (nothing if it is not installed); the next install starts afresh."""
    global _handle, _primary
    with _lock:
        handle, _handle, _primary = _handle, None, None
    try:
        if isinstance(handle, dict):
            handle.pop(_KEY, None)
        elif handle is not None:
            handle.remove()
    except Exception:  # noqa: BLE001
        pass
