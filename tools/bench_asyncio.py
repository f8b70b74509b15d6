"""Measure how long an event loop stalls during a burst of leases; prints a Markdown table.

    python tools/bench_asyncio.py [--cycles N] [--concurrency C] [--runs R] [--root DIR] [--quick]

A ticker task sleeps 1 ms at a time and records how late each wake-up is:
the longest lateness is the longest the loop could not run anything.  Each
burst is N lease cycles, C at a time, with a rotation every 20 cycles so
that removals happen inside it:

* ``acquire_async`` / ``async with``: the library's way (worker threads);
* the same plus ``create_subprocess_exec("true")`` and its wait, and
  asyncio's own ``create_subprocess_exec`` without a lease, whose start of
  a process (fork and exec) runs on the loop;
* for comparison, ``acquire()`` / ``release()`` called on the loop itself.

Each row gives the median over R runs of the longest stall, the 99th
percentile of lateness, and cycles a second.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import benchlib

from sessiontemp import Manager

TICK = 0.001


async def measure(burst: Callable[[], Awaitable[None]]) -> tuple[float, float, float]:
    """(longest stall, p99 lateness, seconds) of the loop while *burst* runs."""
    late: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - start - TICK)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    late.clear()
    start = time.perf_counter()
    await burst()
    elapsed = time.perf_counter() - start
    done.set()
    await tick
    late.sort()
    return late[-1], late[int(len(late) * 0.99)], elapsed


def bursts(manager: Manager, cycles: int, concurrency: int
           ) -> dict[str, Callable[[], Awaitable[None]]]:
    async def spread(one: Callable[[], Awaitable[None]]) -> None:
        queue = iter(range(cycles))

        async def worker() -> None:
            for n in queue:
                await one()
                if n % 20 == 19:
                    await manager.rotate_async()

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def lease_cycle() -> None:
        async with await manager.acquire_async(label="bench"):
            pass

    async def command_cycle() -> None:
        async with await manager.acquire_async(label="bench") as lease:
            process = await lease.create_subprocess_exec("true")
            await process.wait()

    async def plain_command_cycle() -> None:
        # asyncio's own cost of starting a process, for comparison: no lease.
        process = await asyncio.create_subprocess_exec("true")
        await process.wait()

    async def blocking_cycle() -> None:
        # What the library avoids: the journal's fsync and the removal on the loop.
        with manager.acquire(label="bench"):
            pass

    async def idle() -> None:
        await asyncio.sleep(1.0)

    return {
        "idle loop, no burst (1 s)": idle,
        "`acquire_async` + `async with` (worker threads)": lambda: spread(lease_cycle),
        "the same + `create_subprocess_exec(\"true\")` + wait": lambda: spread(command_cycle),
        "plain `asyncio.create_subprocess_exec(\"true\")` + wait, no lease":
            lambda: spread(plain_command_cycle),
        "`acquire()` + `release()` called on the loop": lambda: spread(blocking_cycle),
    }


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--cycles", type=int, default=400)
        parser.add_argument("--concurrency", type=int, default=16)
        parser.add_argument("--runs", type=int, default=5)

    args = benchlib.arguments(__doc__, options)
    if args.quick:
        args.cycles, args.runs = 40, 1
    with benchlib.scratch(args.root) as scratch:
        rows = run(scratch / "root", args)
    report(rows, args)


def run(root: Path, args: argparse.Namespace) -> list[tuple[str, float, float, float, str]]:
    manager = Manager(root)
    manager.retain()
    rows = []
    try:
        for name, burst in bursts(manager, args.cycles, args.concurrency).items():
            results = [asyncio.run(measure(burst)) for _ in range(args.runs)]
            longest = statistics.median(r[0] for r in results)
            worst = max(r[0] for r in results)
            p99 = statistics.median(r[1] for r in results)
            seconds = statistics.median(r[2] for r in results)
            rate = "" if name.startswith("idle") else f"{args.cycles / seconds:,.0f}"
            rows.append((name, longest, worst, p99, rate))
    finally:
        manager.release()
        manager.close()
    return rows


def report(rows: list[tuple[str, float, float, float, str]], args: argparse.Namespace) -> None:
    print(f"{args.cycles} cycles, {args.concurrency} at a time, rotation every 20; "
          f"median of {args.runs} runs\n")
    print("| burst | longest stall (median) | longest stall (worst run) | p99 lateness "
          "| cycles/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, longest, worst, p99, rate in rows:
        print(f"| {name} | {longest * 1e3:.1f} ms | {worst * 1e3:.1f} ms | "
              f"{p99 * 1e3:.2f} ms | {rate} |")


if __name__ == "__main__":
    main()
