"""Benchmark the manager's operations on a real root; prints a Markdown table.

    python tools/bench_manager.py [--rounds N] [--root DIR]

Each figure is the median over N rounds, measured in one run so that ratios
between rows are meaningful on a shared, noisy machine.  The root defaults
to a fresh directory under the system temporary directory (the disk matters:
every journal append is an fdatasync).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sessiontemp import Manager


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
    from journal import Store

    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return store.last_seq()
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--root", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.root) as scratch:
        rows = run(Path(scratch), args.rounds)
    print(f"Command: python tools/bench_manager.py --rounds {args.rounds}  "
          f"(Python {sys.version.split()[0]})\n")
    print("| operation | median |")
    print("| --- | --- |")
    for name, micros in rows:
        print(f"| {name} | {micros / 1000:.2f} ms |")


if __name__ == "__main__":
    main()
