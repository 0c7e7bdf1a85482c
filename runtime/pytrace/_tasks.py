"""What an asyncio task waits on, for the TaskSuspend / TaskAwait records (issue 23).

Called by the runtime (runtime/_pytrace/pt_tasks.c) inside a sys.monitoring callback,
once per task step that ends, so nothing here is traced. ``suspend(task)`` returns
``(TaskState, ((AwaitKind, task_or_label), ...))``; the numbers come from the
flatc-generated module. Read only through attributes: never ``exception()`` (it would
mark a failure as retrieved) nor anything that changes the task.
"""

from types import CoroutineType as _Coroutine, GeneratorType as _Generator

from .fb.AwaitKind import AwaitKind as _AK
from .fb.TaskState import TaskState as _TS

_NONE = ()
_PENDING, _DONE, _CANCELLED, _FAILED = _TS.Pending, _TS.Done, _TS.Cancelled, _TS.Failed
_TASK, _FUTURE, _SLEEP, _IO, _THREAD, _SYNC = (_AK.Task, _AK.Future, _AK.Sleep, _AK.IO, _AK.Thread,
                                               _AK.Sync)

# asyncio coroutines (by __qualname__, in asyncio's own files) and what awaiting them is
_SYNC_PREFIXES = ("Lock.", "Event.", "Condition.", "Semaphore.", "BoundedSemaphore.",
                  "Queue.", "PriorityQueue.", "LifoQueue.", "Barrier.")
_IO_PREFIXES = ("StreamReader.", "StreamWriter.", "BaseSelectorEventLoop.sock_",
                "_SelectorSocketTransport.", "BaseEventLoop.sock_", "BaseEventLoop.create_connection",
                "BaseEventLoop.getaddrinfo")
_TASKGROUP = "TaskGroup.__aexit__"
_SLEEP_AWAIT = ((_SLEEP, "asyncio.sleep"),)

_task_types = None
_gathering = None
_code_kind = {}     # code object -> its awaits tuple, _TASKGROUP, or None (not a wait of asyncio's)
_MISS = object()


def _types():
    global _task_types, _gathering
    if _task_types is None:
        import asyncio.tasks as t
        _task_types = tuple(c for c in (getattr(t, "Task", None), getattr(t, "_PyTask", None)) if c)
        _gathering = getattr(t, "_GatheringFuture", None)
    return _task_types


def _from_future(fut):
    """What a future stands for: a task, a gather of children, a thread's result."""
    types = _types()
    if isinstance(fut, types):
        return ((_TASK, fut),)
    if _gathering is not None and isinstance(fut, _gathering):
        return tuple((_TASK, c) if isinstance(c, types) else (_FUTURE, type(c).__name__)
                     for c in fut._children)
    for cb, _ctx in getattr(fut, "_callbacks", None) or ():
        if getattr(cb, "__qualname__", "").startswith("_chain_future."):
            return ((_THREAD, "run_in_executor"),)   # wraps a concurrent.futures.Future
    return ((_FUTURE, type(fut).__name__),)


def _classify(code):
    """The awaits an asyncio coroutine's code stands for, _TASKGROUP, or None."""
    if "asyncio" not in code.co_filename:
        return None
    q = code.co_qualname
    if q in ("sleep", "__sleep0"):
        return _SLEEP_AWAIT
    if q == "to_thread":
        return ((_THREAD, q),)
    if q.startswith(_SYNC_PREFIXES):
        return ((_SYNC, q),)
    if q.startswith(_IO_PREFIXES):
        return ((_IO, q),)
    if q == _TASKGROUP:
        return _TASKGROUP
    return None


def _taskgroup(frame):
    tg = frame.f_locals.get("self") if frame is not None else None
    tasks = getattr(tg, "_tasks", None)
    if tasks:
        return tuple((_TASK, t) for t in tasks)
    return ((_FUTURE, "TaskGroup"),)


def suspend(task):
    s = task._state
    if s != "PENDING":
        if s == "CANCELLED":
            return _CANCELLED, _NONE
        return (_FAILED if task._exception is not None else _DONE), _NONE
    # the coroutine chain, outermost first: the first asyncio coroutine names the wait
    aw = task.get_coro()
    kinds = _code_kind
    while True:
        t = type(aw)
        if t is _Coroutine:
            code, nxt = aw.cr_code, aw.cr_await
        elif t is _Generator:
            code, nxt = aw.gi_code, aw.gi_yieldfrom
        else:
            break
        got = kinds.get(code, _MISS)
        if got is _MISS:
            got = kinds[code] = _classify(code)
        if got is not None:
            if got is _TASKGROUP:
                return _PENDING, _taskgroup(aw.cr_frame)
            return _PENDING, got
        aw = nxt
    waiter = task._fut_waiter
    if waiter is not None:
        return _PENDING, _from_future(waiter)
    return _PENDING, ((_FUTURE, type(aw).__name__ if aw is not None else "yield"),)
