"""Benchmark the manager's operations on a real root; prints Markdown tables.

    python tools/bench_manager.py [--rounds N] [--root DIR] [--extra-processes N] [--quick]

Each figure is the median over N rounds, measured in one run so that ratios
between rows are meaningful on a shared, noisy machine.  The root defaults
to a fresh directory under the system temporary directory (the disk matters:
every journal append is an fdatasync).

Two overheads of fault tolerance are measured beside them: the shield
around a main-thread operation (``sessiontemp/_guards/shield.py``: signal handlers
deferred while it runs), as a warm acquire + release from the main thread
against the same from another thread (where it runs as it is), alternating
round by round; and the
``/proc`` scan (``processes.users``) a removal runs for a generation whose
recorded commands have all exited, with the machine's process count and
with *--extra-processes* more sleeping processes started for the purpose.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import benchlib

from sessiontemp import Manager
from sessiontemp._guards.shield import shielded
from sessiontemp._kernel import processes


def median_us(rounds: int, operation: Callable[[], object]) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def run(root: Path, rounds: int) -> list[tuple[str, float]]:
    rows: list[tuple[str, float]] = []
    manager = Manager(root / "ops")
    manager.retain()
    manager.acquire().release()  # make the first generation outside the timing

    def lease_cycle() -> None:
        manager.acquire().release()

    def rotate_cycle() -> None:
        manager.rotate()
        manager.acquire().release()

    def popen_cycle() -> None:
        with manager.acquire() as lease:
            lease.popen(["true"]).wait()

    def plain_popen() -> None:
        subprocess.Popen(["true"]).wait()

    rows.append(("acquire + release, same generation (2 commits)",
                 median_us(rounds, lease_cycle)))
    rows.append(("rotate + acquire + release, new generation each time (mkdir, rmtree, 7 commits)",
                 median_us(rounds, rotate_cycle)))
    rows.append(("`true` through lease.popen, with acquire and release",
                 median_us(rounds, popen_cycle)))
    rows.append(("`true` through plain subprocess.Popen (baseline)",
                 median_us(rounds, plain_popen)))
    manager.release()
    manager.close()

    journal_events = _count(root / "ops")
    rows.append((f"Manager open + retain + close on a journal of {journal_events} events "
                 "(replays it all)",
                 median_us(max(rounds // 10, 5), lambda: _open_close(root / "ops"))))
    rows.append(("Manager open + retain + close on a fresh root",
                 median_us(max(rounds // 10, 5), lambda: _open_close(Path(tempfile.mkdtemp(
                     dir=root)) / "r"))))
    return rows


def _open_close(root: Path) -> None:
    with Manager(root) as manager:
        manager.retain()


def _count(root: Path) -> int:
    from sessiontemp.journal import Store

    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return store.last_seq()
    finally:
        store.close()


def shield_cost(root: Path, rounds: int) -> list[tuple[str, float]]:
    """Warm acquire + release from the main thread (shielded) and from another (not)."""
    manager = Manager(root / "shield")
    manager.retain()
    manager.acquire().release()
    jobs: queue.Queue[bool] = queue.Queue()
    took: queue.Queue[float] = queue.Queue()

    def other_thread() -> None:
        while jobs.get():
            took.put(median_us(1, lambda: manager.acquire().release()))

    thread = threading.Thread(target=other_thread)
    thread.start()
    main_thread, inline = [], []
    try:
        for _ in range(rounds):
            main_thread.append(median_us(1, lambda: manager.acquire().release()))
            jobs.put(True)
            inline.append(took.get())
    finally:
        jobs.put(False)
        thread.join()
        manager.release()
        manager.close()
    bare = [median_us(1, lambda: shielded(lambda: None)) for _ in range(rounds)]
    return [("acquire + release from the main thread (shielded)",
             statistics.median(main_thread)),
            ("acquire + release from another thread (run inline)", statistics.median(inline)),
            ("the shield alone: `shielded(no-op)` from the main thread",
             statistics.median(bare))]


def scan(rounds: int, extra: int) -> list[tuple[str, float]]:
    """One ``processes.users`` scan of /proc, with the machine's processes and *extra* more."""
    rows = []
    path = tempfile.mkdtemp()
    sleepers: list[subprocess.Popen[bytes]] = []
    try:
        for added in (0, extra):
            while len(sleepers) < added:
                sleepers.append(subprocess.Popen(["sleep", "600"]))
            count = sum(1 for name in os.listdir("/proc") if name.isdigit())
            rows.append((f"/proc scan (processes.users) with {count} processes",
                         median_us(rounds, lambda: processes.users(path, exclude=os.getpid()))))
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        os.rmdir(path)
    return rows


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rounds", type=int, default=500)
        parser.add_argument("--extra-processes", type=int, default=500)

    args = benchlib.arguments(__doc__, options)
    if args.quick:
        args.rounds, args.extra_processes = 20, 20
    with tempfile.TemporaryDirectory(dir=args.root) as scratch:
        rows = run(Path(scratch), args.rounds)
        overheads = shield_cost(Path(scratch), args.rounds)
    overheads += scan(max(args.rounds // 10, 20), args.extra_processes)
    print(f"Command: python tools/bench_manager.py --rounds {args.rounds} "
          f"--extra-processes {args.extra_processes}  (Python {sys.version.split()[0]})\n")
    for table in (rows, overheads):
        print("| operation | median |")
        print("| --- | --- |")
        for name, micros in table:
            print(f"| {name} | {micros / 1000:.3f} ms |")
        print()


if __name__ == "__main__":
    main()
