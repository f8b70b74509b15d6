"""Where a warm lease cycle's time goes beyond its two commits: cProfile; prints Markdown.

    python tools/profile_cycle.py [--cycles N] [--root DIR] [--quick]

Times N warm cycles (``acquire().release()`` on a live generation, in the
relaxed durability unless ``--durability full``, called
from a non-main thread so that they run inline, in the thread the profiler
watches) against N pairs of bare single-row commits (the floor: NORMAL, or FULL), alternating,
without the profiler; then runs N more cycles under ``cProfile`` and prints
the functions with the most time of their own, per cycle, and the same time
grouped by where the code lives.  The profiler roughly doubles the cost of
Python code (not of the fsync), so read its figures as shares.  The time in
``sqlite3`` calls includes the commits' fdatasync.  Last, N cycles from the
main thread under the profiler too: the Python calls a cycle makes there
and inline, whose difference is the shield's (``sessiontemp/_guards/shield.py``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sqlite3
import time
from collections import defaultdict
from typing import Any

import benchlib

from sessiontemp import Manager


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--spin", type=int, default=0, metavar="N",
                        help="only run N warm cycles (from the main thread, or with "
                             "--inline from another) and exit, for a sampling profiler "
                             "outside: py-spy record --native -- python "
                             "tools/profile_cycle.py --spin 30000")
    parser.add_argument("--inline", action="store_true",
                        help="with --spin: from another thread")
    parser.add_argument("--durability", choices=("relaxed", "full"), default="relaxed",
                        help="the manager's durability; relaxed (default) leaves the CPU "
                             "alone, full adds each commit's fdatasync to SQLite's share")


def where(filename: str, function: str) -> str:
    """The group a profiled function belongs to."""
    if filename == "~":
        if "sqlite3" in function:
            return "sqlite3 (C: statements, commits and their fdatasync)"
        if "lock" in function.lower() or "acquire" in function or "release" in function:
            return "locks (C)"
        return "other built-ins (C)"
    for part in ("journal", "sessiontemp"):
        if f"{os.sep}{part}{os.sep}" in filename:
            return f"{part}/{os.path.basename(filename)}"
    for part in ("attr", "structlog", "json", "threading", "logging", "concurrent"):
        if f"{os.sep}{part}" in filename:
            return part
    return "other Python"


def short(key: tuple[str, int, str]) -> str:
    filename, line, function = key
    if filename == "~":
        return function
    parts = filename.split(os.sep)
    return f"{'/'.join(parts[-2:])}:{line} {function}"


def spin(args: argparse.Namespace) -> None:
    """Run warm cycles and nothing else, for a profiler that samples from outside."""
    with benchlib.scratch(args.root) as scratch:
        manager = Manager(scratch / "root", durability=args.durability)
        try:
            manager.retain()

            def cycles() -> None:
                for _ in range(args.spin):
                    manager.acquire().release()

            if args.inline:
                worker = benchlib.Worker()
                took = worker.run(cycles, clock=time.thread_time)
                worker.close()
            else:
                start = time.thread_time()
                cycles()
                took = time.thread_time() - start
        finally:
            manager.release()
            manager.close()
    print(f"{args.spin} warm cycles ({args.durability}, "
          f"{'another thread' if args.inline else 'main thread'}): "
          f"{took / args.spin / 2 * 1e6:.1f} us of the thread's CPU per event")


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    if args.spin:
        spin(args)
        return
    cycles = 50 if args.quick else args.cycles
    profile = cProfile.Profile()
    main_thread = cProfile.Profile()
    with benchlib.scratch(args.root) as scratch:
        floor = benchlib.BareCommits(scratch / "floor.sqlite3", benchlib.lease_cycle_rows(),
                                     synchronous="NORMAL" if args.durability == "relaxed"
                                     else "FULL")
        worker = benchlib.Worker()
        manager = Manager(scratch / "root", durability=args.durability)
        try:
            manager.retain()
            manager.acquire().release()

            def cycle() -> None:
                manager.acquire().release()

            def two_commits() -> None:
                floor.commit()
                floor.commit()

            samples = benchlib.interleave(
                {"cycle": lambda: worker.run(cycle), "floor": lambda: worker.run(two_commits)},
                cycles)

            def profiled() -> None:
                for _ in range(cycles):
                    cycle()

            worker.run(lambda: profile.runcall(profiled))
            main_thread.runcall(profiled)
        finally:
            manager.release()
            manager.close()
            worker.close()
            floor.close()
    cycle_ms, floor_ms = (benchlib.median_ms(samples[k]) for k in ("cycle", "floor"))
    stats: dict[tuple[str, int, str], Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    main_stats: dict[tuple[str, int, str], Any] = pstats.Stats(  # type: ignore[attr-defined]
        main_thread).stats
    total = sum(own for _, _, own, _, _ in stats.values())
    print(f"Command: python tools/profile_cycle.py --cycles {cycles} --durability "
          f"{args.durability}{' --quick' if args.quick else ''}\n"
          f"{benchlib.environment(args.root)}\n")
    benchlib.table(("without the profiler (medians, alternating)", "per cycle"),
                   [("warm cycle, inline", f"{cycle_ms * 1e3:.0f} us"),
                    ("two bare commits (the floor)", f"{floor_ms * 1e3:.0f} us"),
                    ("beyond the floor", f"{(cycle_ms - floor_ms) * 1e3:.0f} us")],
                   numeric=(1,))
    groups: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, own, _, _) in stats.items():
        groups[where(filename, function)] += own
    print(f"Under cProfile: {total / cycles * 1e6:.0f} us per cycle in all "
          f"(SQLite {sqlite3.sqlite_version})\n")
    benchlib.table(("where (own time)", "us per cycle", "share"),
                   [(name, f"{own / cycles * 1e6:.1f}", f"{own / total:.0%}")
                    for name, own in sorted(groups.items(), key=lambda kv: -kv[1])],
                   numeric=(1, 2))
    calls = {name: sum(n for _, n, _, _, _ in table.values()) / cycles
             for name, table in (("inline", stats), ("main thread", main_stats))}
    benchlib.table(("Python calls per warm cycle (cProfile)", "calls"),
                   [("from another thread (inline)", f"{calls['inline']:.0f}"),
                    ("from the main thread (the shield around both operations)",
                     f"{calls['main thread']:.0f}")], numeric=(1,))
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:args.top]
    benchlib.table(("function (own time)", "calls per cycle", "us per cycle", "share"),
                   [(f"`{short(key)}`", f"{calls / cycles:.1f}", f"{own / cycles * 1e6:.1f}",
                     f"{own / total:.0%}") for key, (_, calls, own, _, _) in top],
                   numeric=(1, 2, 3))


if __name__ == "__main__":
    main()
