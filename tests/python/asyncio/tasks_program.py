"""The asyncio program of test_task_records.py: one scenario per argv[1]."""
import asyncio
import sys
import time


async def sleeper():
    for _ in range(50):
        await asyncio.sleep(0.002)


async def child(n):
    await asyncio.sleep(0.001 * n)
    return n


async def fails():
    await asyncio.sleep(0)
    raise ValueError("failed on purpose")


async def forever():
    await asyncio.sleep(3600)


def slow_sum(n):
    # long enough that the task is waiting when it ends: a thread done before its future is
    # awaited (3.14 sets the asyncio future at once when the done callback runs in the
    # loop's thread) makes the await return at once, with no suspend to name
    time.sleep(0.05)
    return sum(range(n))


async def in_thread():
    return await asyncio.to_thread(slow_sum, 1000)


async def nester():
    import contextvars
    contextvars.copy_context().run(len, "not a step")   # Context.run from a task's own code
    asyncio.get_running_loop().call_soon(len, "a plain callback")   # Handle._run, no task
    await asyncio.sleep(0.001)
    contextvars.copy_context().run(len, "again")


async def getter(q):
    return await q.get()


async def main(scenario):
    if scenario in ("sleepers", "pytask"):
        if scenario == "pytask":
            asyncio.get_running_loop().set_task_factory(
                lambda loop, coro, **kw: asyncio.tasks._PyTask(coro, loop=loop, **kw))
        await asyncio.gather(*(asyncio.create_task(sleeper(), name="sleeper-%d" % i) for i in range(20)))
    elif scenario == "gather":
        async def gatherer():
            await asyncio.gather(*(asyncio.create_task(child(i), name="child-%d" % i) for i in range(3)))
        await asyncio.create_task(gatherer(), name="gatherer")
    elif scenario == "ends":
        f = asyncio.create_task(fails(), name="failing")
        c = asyncio.create_task(forever(), name="cancelled")
        await asyncio.sleep(0.01)
        c.cancel()
        await asyncio.gather(f, c, return_exceptions=True)
    elif scenario == "taskgroup":
        async def grouper():
            async with asyncio.TaskGroup() as tg:
                for i in range(3):
                    tg.create_task(child(i + 1), name="member-%d" % i)
        await asyncio.create_task(grouper(), name="grouper")
    elif scenario == "thread":
        await asyncio.create_task(in_thread(), name="threaded")
    elif scenario == "queue":
        q = asyncio.Queue()
        g = asyncio.create_task(getter(q), name="getter")
        await asyncio.sleep(0.01)
        q.put_nowait(1)
        await g
    elif scenario == "nested":
        await asyncio.create_task(nester(), name="nester")
    elif scenario == "rename":
        early = asyncio.create_task(child(1), name="early-old")
        early.set_name("early-new")      # before its first step: the new name
        late = asyncio.create_task(child(2), name="late-old")
        await asyncio.sleep(0)           # late's first step runs
        late.set_name("late-new")        # after it: the symbol keeps the old name
        await asyncio.gather(early, late)


asyncio.run(main(sys.argv[1]))
