"""The asyncio job of test_top_tasks.py. No argument: 20 named tasks, each awaiting a 2 ms
sleep 50 times through a helper coroutine (nap) and calling a plain function (tally) after
each sleep. "pending": tasks that still wait when the job ends (os._exit while they are
suspended): getter on a Queue.get, gatherer on a gather of child-a and child-b, which sleep."""
import asyncio
import os
import sys

TASKS, SLEEPS = 20, 50


def tally(n):
    return sum(range(n))


async def nap():
    await asyncio.sleep(0.002)


async def worker():
    for i in range(SLEEPS):
        await nap()
        tally(100 + i)


async def main():
    await asyncio.gather(*(asyncio.create_task(worker(), name="worker-%d" % i) for i in range(TASKS)))


async def getter(q):
    return await q.get()


async def child():
    await asyncio.sleep(3600)


async def gatherer():
    await asyncio.gather(asyncio.create_task(child(), name="child-a"), asyncio.create_task(child(), name="child-b"))


async def pending():
    q = asyncio.Queue()
    asyncio.create_task(getter(q), name="getter")
    asyncio.create_task(gatherer(), name="gatherer")
    await asyncio.sleep(0.05)
    os._exit(0)  # the tasks above are still suspended: the recording ends with them pending


asyncio.run(pending() if sys.argv[1:] == ["pending"] else main())
