"""What fsyncing the root directory after each directory operation would cost; prints Markdown.

    python tools/bench_dirsync.py [--rounds N] [--root DIR] [--quick]

A generation's life touches the root directory three times: mkdir (made),
rename to its trash name (claimed), rmdir (removed).  None is fsynced, so a
power loss can undo them; recovery handles what comes back instead (see the
README's "Power loss").  This measures the alternative: one ``fsync`` of
the root directory's descriptor after each of the three, against none, and
against a whole rotate + acquire + release of a Manager on the same disk
for scale.  Variants alternate round by round in one run, so the ratios
hold on a shared, noisy machine; figures are medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import benchlib

from sessiontemp import Manager
from sessiontemp._kernel.root import DIR_FLAGS


def cycle(root_fd: int, name: str, *, sync: bool) -> None:
    """Make, claim and remove one directory, fsyncing the root after each step if *sync*."""
    os.mkdir(name, 0o700, dir_fd=root_fd)
    if sync:
        os.fsync(root_fd)
    os.rename(name, name + ".trash", src_dir_fd=root_fd, dst_dir_fd=root_fd)
    if sync:
        os.fsync(root_fd)
    os.rmdir(name + ".trash", dir_fd=root_fd)
    if sync:
        os.fsync(root_fd)


def run(base: Path, rounds: int) -> list[tuple[str, float]]:
    bare = base / "bare"
    bare.mkdir()
    root_fd = os.open(bare, DIR_FLAGS)
    manager = Manager(base / "manager")
    manager.retain()
    manager.acquire().release()

    def rotate() -> None:
        manager.rotate()
        manager.acquire().release()

    variants: dict[str, Callable[[int], object]] = {
        "mkdir + rename + rmdir, no fsync (today)":
            lambda i: cycle(root_fd, f"g{i}", sync=False),
        "mkdir + rename + rmdir, fsync of the root after each (3 fsyncs)":
            lambda i: cycle(root_fd, f"s{i}", sync=True),
        "one Manager rotate + acquire + release (new generation: mkdir, rename, rmdir, "
        "7 commits), for scale": lambda i: rotate(),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for i in range(rounds):
            for name, operation in variants.items():
                start = time.perf_counter()
                operation(i)
                samples[name].append(time.perf_counter() - start)
    finally:
        os.close(root_fd)
        manager.release()
        manager.close()
    return [(name, statistics.median(times) * 1e6) for name, times in samples.items()]


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rounds", type=int, default=500)

    args = benchlib.arguments(__doc__, options)
    if args.quick:
        args.rounds = 20
    with tempfile.TemporaryDirectory(dir=args.root) as scratch:
        rows = run(Path(scratch), args.rounds)
    print(f"Command: python tools/bench_dirsync.py --rounds {args.rounds}  "
          f"(Python {sys.version.split()[0]}, root under {args.root or tempfile.gettempdir()})\n")
    print("| operation | median |")
    print("| --- | ---: |")
    for name, micros in rows:
        print(f"| {name} | {micros / 1000:.3f} ms |")


if __name__ == "__main__":
    main()
