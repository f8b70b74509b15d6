"""Benchmark the steady state: what a long run of warm cycles costs outside the calling thread.

    python tools/bench_steady.py [--cycles N] [--durability full|relaxed] [--root DIR] [--quick]

One manager on a fresh root retains, makes its generation, and then runs N
warm cycles (``acquire().release()`` on the live generation, two events
each) from one thread.  The process's CPU time and the calling thread's are
read before and after: their difference is what every other thread spent
meanwhile (the journal's maintenance: checkpoints, rollover, retirement,
every 20,000 events), which a steady state should keep near zero.  Printed
per cycle, with the ratio of the two (the goal is at most 1.1).  The
default scratch is the shared-memory file system where there is one, so
the fdatasyncs cost little and the CPU's share is what is left.
"""

from __future__ import annotations

import argparse
import sys
import time

import benchlib

from sessiontemp import Manager


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cycles", type=int, default=100_000)
    parser.add_argument("--durability", choices=("full", "relaxed"), default="full")


def steady(args: argparse.Namespace) -> tuple[float, float, float]:
    """Seconds of (wall, process CPU, calling thread's CPU) over the cycles."""
    root = args.root if args.root is not None else benchlib.memory_dir()
    with benchlib.scratch(root, "bench-steady-") as scratch, \
            Manager(scratch / "root", durability=args.durability) as manager:
        manager.retain()
        for _ in range(100):
            # Warm: the generation made, the code paths run once.
            manager.acquire().release()
        wall, process, thread = time.perf_counter(), time.process_time(), time.thread_time()
        for _ in range(args.cycles):
            manager.acquire().release()
        wall = time.perf_counter() - wall
        process = time.process_time() - process
        thread = time.thread_time() - thread
    return wall, process, thread


def main(argv: list[str] | None = None) -> int:
    args = benchlib.arguments(__doc__, options, argv)
    if args.quick:
        args.cycles = min(args.cycles, 2_000)
    print(f"# steady state: {args.cycles} warm cycles, durability {args.durability}\n")
    print(benchlib.environment(args.root or benchlib.memory_dir()) + "\n")
    wall, process, thread = steady(args)
    per = 1e6 / args.cycles
    print("| figure | per cycle |")
    print("|---|---|")
    print(f"| wall time | {wall * per:.1f} us |")
    print(f"| process CPU | {process * per:.1f} us |")
    print(f"| calling thread's CPU | {thread * per:.1f} us |")
    print(f"| process CPU minus the calling thread's | {(process - thread) * per:.2f} us |")
    print(f"| process CPU / thread CPU | {process / thread if thread else float('nan'):.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
