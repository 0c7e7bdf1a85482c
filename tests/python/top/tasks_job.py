"""The asyncio job of test_top_tasks.py: 20 named tasks, each awaiting a 2 ms sleep 50 times
through a helper coroutine (nap) and calling a plain function (tally) after each sleep."""
import asyncio

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


asyncio.run(main())
