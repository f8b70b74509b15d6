"""A warm lease cycle against the two-commit floor, interleaved in one loop; prints Markdown.

    python tools/bench_floor.py [--rounds N] [--root DIR] [--quick]

A warm lease cycle is ``manager.acquire().release()`` on a live generation:
the acquire and the release must each be durable before the call returns,
so its floor is two bare single-row SQLite commits (WAL, ``synchronous=FULL``,
rows of the same size, no trigger or read: :class:`benchlib.BareCommits`)
on the same disk.  Each round runs, in turn: the floor; the cycle from the
main thread (inside the shield, which defers signal handlers around each
operation, as an ordinary caller gets it); the cycle from another thread
(run as it is, no shield); and, when the Manager has a relaxed
durability mode, the same two in that mode, and a relaxed cycle timed
right after another one (its code and data still in the CPU's caches,
where every other cycle follows the floor's syncs or another manager's
work: the difference is what a cold cache costs).  Ratios
are of the medians over N rounds, all from the one loop.

It also counts the commits of one cycle in each mode (durable: with an
fdatasync; relaxed: without), from SQLite's own statement trace.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import benchlib

from sessiontemp import Manager

FLOOR = "two bare single-row commits (WAL, synchronous=FULL): the floor"
GOALS = {"durable": 1.15, "relaxed": 0.2}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=1000)


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    rounds = 30 if args.quick else args.rounds
    modes = benchlib.durability_modes()
    with benchlib.scratch(args.root) as scratch:
        floor = benchlib.BareCommits(scratch / "floor.sqlite3", benchlib.lease_cycle_rows())
        worker = benchlib.Worker()
        managers: dict[str, Manager] = {}
        try:
            for mode, kwargs in modes:
                manager = Manager(scratch / mode, **kwargs)
                managers[mode] = manager
                manager.retain()
                manager.acquire().release()  # the live generation, made outside the timing

            def two_commits() -> None:
                floor.commit()
                floor.commit()

            variants: dict[str, Callable[[], object]] = {FLOOR: two_commits}
            for mode, manager in managers.items():
                cycle = functools.partial(benchlib.lease_cycle, manager)

                def inline(cycle: Callable[[], None] = cycle) -> float:
                    return worker.run(cycle)

                def second(cycle: Callable[[], None] = cycle) -> float:
                    cycle()
                    start = time.perf_counter()
                    cycle()
                    return time.perf_counter() - start

                variants[f"warm cycle, {mode}, from the main thread"] = cycle
                variants[f"warm cycle, {mode}, from another thread (inline)"] = inline
                if mode == "relaxed":
                    # No sync to wait for: what is left is CPU, and the caches'.
                    variants[f"warm cycle, {mode}, main thread, the second of two in a row"] = (
                        second)
            samples = benchlib.interleave(variants, rounds)
        finally:
            for manager in managers.values():
                manager.release()
                manager.close()
            worker.close()
            floor.close()
        # Counted apart, on managers of their own: the statement trace that
        # counts commits calls into Python on every statement, which the
        # timed loop above must not pay.
        commits = {mode: benchlib.count_on_fresh(scratch / f"{mode}-count", kwargs,
                                                 benchlib.lease_cycle)
                   for mode, kwargs in modes}
    base = benchlib.median_ms(samples[FLOOR])
    print(f"Command: python tools/bench_floor.py --rounds {rounds}"
          f"{' --quick' if args.quick else ''}\n{benchlib.environment(args.root)}\n")
    rows = []
    for name, times in samples.items():
        ms = benchlib.median_ms(times)
        judged = next((m for m in GOALS if f", {m}, from the main" in name), None)
        goal = f"<= {GOALS[judged]}x" if judged is not None else ""
        met = benchlib.verdict(ms / base, GOALS[judged]) if judged is not None else ""
        rows.append((name, f"{ms:.3f} ms", f"{ms / base:.2f}x", goal, met))
    benchlib.table(("operation", "median", "x floor", "goal", ""), rows, numeric=(1, 2))
    benchlib.table(("one warm cycle", "durable commits", "relaxed commits", "events"),
                   [(mode, *counts) for mode, counts in commits.items()], numeric=(1, 2, 3))
    if len(modes) == 1:
        print(benchlib.RELAXED_ABSENT)


if __name__ == "__main__":
    main()
