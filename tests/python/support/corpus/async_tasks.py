"""asyncio: tasks run concurrently with gather, nested awaits, sleep(0) switches."""
import asyncio

import _harness


async def leaf(i):
    await asyncio.sleep(0)
    return i * 2


async def worker(n):
    total = 0
    for i in range(n):
        total += await leaf(i)
    return total


async def failing():
    await asyncio.sleep(0)
    raise KeyError("boom")


async def amain():
    results = await asyncio.gather(worker(5), worker(3), worker(4))
    try:
        await failing()
    except KeyError:
        pass
    return sum(results)


def entry():
    return asyncio.run(amain())


if __name__ == "__main__":
    loop_warmup = asyncio.run(leaf(1))   # import-time and first-use work outside the roots
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
