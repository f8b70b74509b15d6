"""Durable events/s of lease cycles from 1-16 threads on one manager, and 4 processes; Markdown.

    python tools/bench_threads.py [--seconds S] [--rounds R] [--root DIR] [--quick]

Each run of one width starts T threads together (a barrier) that each do
warm lease cycles (``acquire().release()`` on the manager's live generation:
two journal events) for S seconds on one shared Manager; its figure is the
events the journal gained over the seconds elapsed.  The process row starts
4 processes (spawned before the timing) that each open their own Manager on
the same root and do the same.  Every round runs every width in turn; the
table gives medians over R rounds, and each width's ratio to one thread is
the median of the per-round ratios.  Every mode the Manager has (durable;
relaxed if present) gets its own table.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from multiprocessing.synchronize import Barrier as ProcessBarrier
from pathlib import Path
from typing import Any

import benchlib

from sessiontemp import Manager

WIDTHS = (1, 2, 4, 8, 16)
PROCESSES = 4
ONE = "1 thread, one manager"


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)


def threads(manager: Manager, width: int, seconds: float) -> float:
    """Events per second that *width* threads cycling for *seconds* add to the journal."""
    barrier = threading.Barrier(width + 1)
    stop = threading.Event()

    def cycles() -> None:
        barrier.wait()
        while not stop.is_set():
            manager.acquire().release()

    pool = [threading.Thread(target=cycles) for _ in range(width)]
    for thread in pool:
        thread.start()
    start_seq = manager.state.seq
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - start
    # Other threads' events land in the journal; this manager folds all of its own.
    return (manager.state.seq - start_seq) / elapsed


def process_worker(root: str, kwargs: dict[str, Any], seconds: float,
                   barrier: ProcessBarrier, results: Any) -> None:
    with Manager(root, **kwargs) as manager:
        manager.retain()
        manager.acquire().release()
        barrier.wait()
        events = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            manager.acquire().release()
            events += 2
        manager.release()
    results.put(events)


def processes(root: Path, kwargs: dict[str, Any], seconds: float) -> float:
    """Events per second of 4 processes cycling on one root, each with its own Manager."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES + 1)
    results = context.Queue()
    pool = [context.Process(target=process_worker,
                            args=(str(root), kwargs, seconds, barrier, results))
            for _ in range(PROCESSES)]
    for process in pool:
        process.start()
    barrier.wait()
    start = time.perf_counter()
    total: int = sum(results.get() for _ in pool)
    elapsed = time.perf_counter() - start
    for process in pool:
        process.join()
    return total / elapsed


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    seconds, rounds = (0.3, 1) if args.quick else (args.seconds, args.rounds)
    print(f"Command: python tools/bench_threads.py --seconds {seconds} --rounds {rounds}"
          f"{' --quick' if args.quick else ''}\n{benchlib.environment(args.root)}\n")
    modes = benchlib.durability_modes()
    with benchlib.scratch(args.root) as scratch:
        rates: dict[str, dict[str, list[float]]] = {mode: {} for mode, _ in modes}
        managers: dict[str, Manager] = {}
        try:
            for mode, kwargs in modes:
                manager = managers[mode] = Manager(scratch / mode, **kwargs)
                manager.retain()
                manager.acquire().release()
            # The modes take turns within each round, so that the ceiling
            # below compares rates the disk gave at the same time.
            for _ in range(rounds):
                for mode, kwargs in modes:
                    for width in WIDTHS:
                        name = f"{width} thread{'s' if width > 1 else ''}, one manager"
                        rates[mode].setdefault(name, []).append(
                            threads(managers[mode], width, seconds))
                    rates[mode].setdefault(f"{PROCESSES} processes, a manager each, one root",
                                           []).append(processes(scratch / mode, kwargs, seconds))
        finally:
            for manager in managers.values():
                manager.release()
                manager.close()
    for mode, _ in modes:
        single = rates[mode][ONE]
        rows = []
        for name, values in rates[mode].items():
            ratio = statistics.median(v / s for v, s in zip(values, single, strict=True))
            goal = "**>= 5x**" if name.startswith("8 threads") and mode == "durable" else ""
            met = benchlib.verdict(ratio, 5.0, at_most=False) if goal else ""
            rows.append((name, f"{statistics.median(values):,.0f}", f"{ratio:.2f}x", goal, met))
        if mode == "durable" and "relaxed" in rates:
            # An event's Python work holds the GIL whichever thread runs it, so
            # durable appends from any number of threads go little past the
            # rate of one thread that never waits for a sync (only SQLite's
            # own work, outside the GIL, can overlap).
            ceiling = statistics.median(
                r / s for r, s in zip(rates["relaxed"][ONE], single, strict=True))
            rows.append(("relaxed one thread (no sync: about the CPU's ceiling)", "",
                         f"{ceiling:.2f}x", "", ""))
        print(f"{mode}: events/s, median of {rounds} rounds of {seconds} s\n")
        benchlib.table(("lease cycles from", "events/s", "x one thread", "goal", ""), rows,
                       numeric=(1, 2))
    if len(modes) == 1:
        print(benchlib.RELAXED_ABSENT)


if __name__ == "__main__":
    main()
