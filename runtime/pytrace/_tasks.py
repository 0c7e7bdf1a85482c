"""What an asyncio task waits on, for the TaskSuspend / TaskAwait records (issue 23).

Called by the runtime (runtime/_pytrace/pt_tasks.c) inside a sys.monitoring callback,
once per task step that ends, so nothing here is traced. ``suspend(task)`` returns
``(TaskState, ((AwaitKind, task_or_label), ...))``; the numbers come from the
flatc-generated module. Read only through attributes: never ``exception()`` (it would
mark a failure as retrieved) nor anything that changes the task.
"""

from .fb.AwaitKind import AwaitKind as _AK
from .fb.TaskState import TaskState as _TS

_NONE = ()

# asyncio coroutines (by __qualname__, in asyncio's own files) and what awaiting them is
_SYNC_PREFIXES = ("Lock.", "Event.", "Condition.", "Semaphore.", "BoundedSemaphore.",
                  "Queue.", "PriorityQueue.", "LifoQueue.", "Barrier.")
_IO_PREFIXES = ("StreamReader.", "StreamWriter.", "BaseSelectorEventLoop.sock_",
                "_SelectorSocketTransport.", "BaseEventLoop.sock_", "BaseEventLoop.create_connection",
                "BaseEventLoop.getaddrinfo")
_THREAD_NAMES = ("to_thread",)


def _state(task):
    s = task._state
    if s == "PENDING":
        return _TS.Pending
    if s == "CANCELLED":
        return _TS.Cancelled
    return _TS.Failed if task._exception is not None else _TS.Done


def _is_task(o):
    return hasattr(o, "get_coro") and hasattr(o, "_fut_waiter")


def _from_future(fut):
    """What a future stands for: a task, a gather of children, a thread's result."""
    if fut is None:
        return None
    if _is_task(fut):
        return ((_AK.Task, fut),)
    children = getattr(fut, "_children", None)
    if children is not None:                   # gather's _GatheringFuture
        return tuple((_AK.Task, c) if _is_task(c) else (_AK.Future, type(c).__name__)
                     for c in children)
    for cb, _ctx in getattr(fut, "_callbacks", None) or ():
        if getattr(cb, "__qualname__", "").startswith("_chain_future."):
            return ((_AK.Thread, "run_in_executor"),)   # wraps a concurrent.futures.Future
    return None


def _classify(code, frame):
    """(AwaitKind, label) for an asyncio coroutine's code, or None."""
    q = code.co_qualname
    if q in ("sleep", "__sleep0"):
        return ((_AK.Sleep, "asyncio.sleep"),)
    if q in _THREAD_NAMES:
        return ((_AK.Thread, q),)
    if q.startswith(_SYNC_PREFIXES):
        return ((_AK.Sync, q),)
    if q.startswith(_IO_PREFIXES):
        return ((_AK.IO, q),)
    if q == "TaskGroup.__aexit__" and frame is not None:
        tg = frame.f_locals.get("self")
        tasks = getattr(tg, "_tasks", None)
        if tasks:
            return tuple((_AK.Task, t) for t in tasks)
        return ((_AK.Future, "TaskGroup"),)
    return None


def suspend(task):
    state = _state(task)
    if state != _TS.Pending:
        return state, _NONE
    waiter = task._fut_waiter
    found = _from_future(waiter)
    if found and found[0][0] != _AK.Thread:
        return state, found
    # the coroutine chain, outermost first: the first asyncio coroutine names the wait
    aw = task.get_coro()
    while aw is not None:
        code = getattr(aw, "cr_code", None) or getattr(aw, "gi_code", None)
        if code is None:
            break
        if "asyncio" in code.co_filename:
            got = _classify(code, getattr(aw, "cr_frame", None) or getattr(aw, "gi_frame", None))
            if got:
                return state, got
        aw = getattr(aw, "cr_await", None) if hasattr(aw, "cr_await") else getattr(aw, "gi_yieldfrom", None)
    if found:
        return state, found
    if waiter is not None:
        return state, ((_AK.Future, type(waiter).__name__),)
    if aw is not None:
        return state, ((_AK.Future, type(aw).__name__),)
    return state, ((_AK.Future, "yield"),)
