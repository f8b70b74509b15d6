"""Benchmark measuring a directory: walks of 10k, 100k and 1M files, and a busy manager's share.

    python tools/bench_usage.py [--sizes 10000 100000 1000000] [--window 100] [--root DIR]
    python tools/bench_usage.py --quick

For each size, a tree of that many empty files (a thousand to a directory)
is made once, then measured by ``sessiontemp.space.usage.measure_tree`` and by
``du -s`` (the C baseline), interleaved round by round; the medians are
per tree and per file.

Then the share: a manager whose current directory holds the largest tree
(moved in by a rename) runs lease cycles (acquire, release) in the main
thread for a window with the default ``measure_every`` (30 s), then as
long without background measurement (``measure_every=inf``).  The window
is ``--window`` seconds, or by default one period of the schedule from
the first lease: the interval, one walk, and the wait after it (the
interval plus 20 times the walk's time, for a walk of more than 1.6 s).
The table gives the CPU time of the measuring thread (from
``/proc/self/task/TID/stat``) and of the walks' child processes
(``RUSAGE_CHILDREN``) as a share of the window, the cycles per
second with and without it, and the bound the schedule promises (a walk
of *d* seconds is followed by at least ``max(measure_every, 19 d)`` of
waiting: at most 5%).  ``--quick``: small trees, a 1 s interval, 3 s
windows.
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchlib import arguments, environment, scratch, table

from sessiontemp import Manager
from sessiontemp.meter import SHARE
from sessiontemp.space.usage import measure_tree

PER_DIRECTORY = 1000


def make_tree(top: Path, files: int) -> None:
    """*files* empty files under *top*, a thousand to a directory."""
    for n in range(files):
        if n % PER_DIRECTORY == 0:
            directory = top / f"d{n // PER_DIRECTORY}"
            directory.mkdir(parents=True)
        os.mknod(directory / f"f{n}")


def du(top: Path) -> None:
    subprocess.run(["du", "-s", str(top)], capture_output=True, check=True)


def cost(top: Path, rounds: int) -> tuple[float, float]:
    """Median seconds of a measurement and of ``du -s`` of *top*, interleaved."""
    ours, theirs = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        measure_tree(top)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        du(top)
        theirs.append(time.perf_counter() - start)
    return statistics.median(ours), statistics.median(theirs)


def cpu_seconds(native_id: int) -> float:
    """The CPU time (user + system) thread *native_id* of this process has used."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy(root: Path, tree: Path, every: float, window: float) -> tuple[float, float, int]:
    """Lease cycles for *window* s on a manager measuring every *every* s, *tree* inside.

    Returns (cycles per second, the measuring thread's CPU seconds, walks journaled).
    """
    journaled = [0]

    def count(kind: str, detail: str) -> None:
        # Counted as they are journaled: the kept history is retired under
        # a busy manager's events long before the window ends, so a count
        # read back from it afterwards finds none.
        if kind == "journal" and "generation.measured" in detail:
            journaled[0] += 1

    with Manager(root, measure_every=every, durability="relaxed", step_hook=count) as manager:
        manager.retain()
        with manager.acquire() as lease:
            inside = lease.path / "tree"
            tree.rename(inside)
        before = journaled[0]
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cycles = 0
        start = time.monotonic()
        while time.monotonic() - start < window:
            with manager.acquire() as lease:
                cycles += 1
                if cycles % 500 == 0:
                    # The directory changes, so each periodic walk is journaled.
                    (lease.path / f"n{cycles}").write_bytes(b"")
        elapsed = time.monotonic() - start
        threads = [t for t in threading.enumerate()
                   if t.name.startswith("sessiontemp-measure") and t.native_id is not None]
        spent = sum(cpu_seconds(t.native_id) for t in threads if t.native_id is not None)
        # The walks run in child processes (sessiontemp.space.usage.measure_elsewhere).
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent += (done.ru_utime - children.ru_utime) + (done.ru_stime - children.ru_stime)
        walks = journaled[0] - before
        inside.rename(tree)
        manager.rotate()
    return cycles / elapsed, spent, walks


def main() -> int:
    def add(parser: object) -> None:
        parser.add_argument("--sizes", type=int, nargs="+",  # type: ignore[attr-defined]
                            default=[10_000, 100_000, 1_000_000])
        parser.add_argument("--window", type=float, default=None,  # type: ignore[attr-defined]
                            help="seconds of each busy run (default: two walks' worth)")

    args = arguments(__doc__, add)
    sizes = [1_000, 10_000] if args.quick else args.sizes
    every = 1.0 if args.quick else 30.0

    print(f"# Measuring a directory\n\n{environment(args.root)}\n")
    with scratch(args.root, "bench-usage-") as place:
        rows = []
        walk_of: dict[int, float] = {}
        for size in sizes:
            top = place / f"tree-{size}"
            start = time.perf_counter()
            make_tree(top, size)
            made = time.perf_counter() - start
            rounds = 3 if size >= 1_000_000 else 5
            ours, theirs = cost(top, rounds)
            walk_of[size] = ours
            rows.append((f"{size:,}", f"{made:.1f}", f"{ours * 1e3:,.0f}",
                         f"{ours / size * 1e6:.1f}", f"{theirs * 1e3:,.0f}",
                         f"{ours / theirs:.1f}"))
            if size != max(sizes):
                subprocess.run(["rm", "-rf", str(top)], check=True)
        table(["files", "made in s", "measure ms", "us/file", "du -s ms", "ratio"], rows,
              numeric=range(6))
        largest = max(sizes)
        d = walk_of[largest]
        bound = d / (d + max(every, d * (1 - SHARE) / SHARE))
        window = 3.0 if args.quick else args.window or every + d + max(
            every, d * (1 - SHARE) / SHARE)
        tree = place / f"tree-{largest}"
        on, cpu, walks = busy(place / "root-on", tree, every, window)
        off, _, _ = busy(place / "root-off", tree, math.inf, window)
        table(["tree", "interval s", "window s", "walks", "measuring CPU share",
               "cycles/s measuring", "cycles/s not", "bound"],
              [(f"{largest:,} files", f"{every:g}", f"{window:g}", f"{walks:g}",
                f"{cpu / window:.1%}", f"{on:,.0f}", f"{off:,.0f}", f"{bound:.1%}")],
              numeric=range(1, 8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
