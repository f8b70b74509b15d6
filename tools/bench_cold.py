"""A cold cycle against mkdtemp + rmtree + two bare commits, interleaved; commits per operation.

    python tools/bench_cold.py [--rounds N] [--root DIR] [--quick]

A cold cycle is what one command costs when every command gets a fresh
directory: ``rotate()`` (the previous generation, now without a lease, is
retired and removed), ``acquire()`` (a new generation is made), one small
file written into it, ``release()``.  Its baseline does the same without
sessiontemp: ``tempfile.mkdtemp``, the same file written, ``shutil.rmtree``,
and the two commits the write-ahead rule cannot avoid (the generation's
creation before its mkdir, the removal's start before its rename) as bare
single-row SQLite commits (WAL, ``synchronous=FULL``).  In the default,
full durability, ``rotate()``, ``acquire()`` and ``release()`` are each
durable when they return, so a durable cold cycle cannot make fewer than
three synced commits: the baseline with a third bare commit is that
mode's own floor, timed beside it.  All of these, and the cold cycle in
the relaxed durability mode when the Manager has one, alternate round by
round in one loop; figures are medians over N rounds.  The commits are
counted afterwards, on managers of their own, so that the statement trace
that counts them is not timed.

Then it counts, for each operation of the API, the journal's commits
(durable: with an fdatasync; relaxed: without; from SQLite's statement
trace) and the events it wrote.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import benchlib

from journal import ids
from journal.events import GenerationCreated, RemovalStarted, encode
from sessiontemp import Lease, Manager

BASELINE = "mkdtemp + write one file + rmtree + two bare commits: the baseline"
DURABLE_FLOOR = ("the baseline and a third bare commit: the least a durable cold cycle "
                 "can cost")
GOAL = 1.2


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=500)


def write_one(path: Path) -> None:
    (path / "out.txt").write_bytes(b"x" * 100)


def cold_cycle(manager: Manager) -> None:
    manager.rotate()
    with manager.acquire() as lease:
        write_one(lease.path)


def per_operation(counter: benchlib.CommitCounter, root: Path, kwargs: dict[str, object]
                  ) -> list[tuple[str, int, int, int]]:
    """(operation, durable commits, relaxed commits, events) for each operation, once."""
    rows: list[tuple[str, int, int, int]] = []
    durable, relaxed = counter.counts()
    manager = Manager(root, **kwargs)  # type: ignore[arg-type]
    after = counter.counts()
    rows.append(("open (fresh root: recovery, manager opened)", after[0] - durable,
                 after[1] - relaxed, manager.state.seq))
    leases: list[Lease] = []

    def measure(name: str, operation: Callable[[], object]) -> None:
        rows.append((name, *benchlib.count(counter, manager, operation)))

    measure("retain", manager.retain)
    measure("acquire, no generation yet (cold: creation, mkdir, ready, lease)",
            lambda: leases.append(manager.acquire()))
    measure("acquire on the live generation (warm)", lambda: leases.append(manager.acquire()))
    measure("release a lease, generation stays live", lambda: leases.pop().release())
    measure("rotate with a lease held (generation retired, kept)", manager.rotate)
    measure("release the last lease of a retired generation (its removal)",
            lambda: leases.pop().release())
    manager.acquire().release()
    measure("rotate, no lease held (retired and removed)", manager.rotate)
    cold_cycle(manager)  # from here on, every cycle's rotate has a generation to remove
    measure("cold cycle: rotate + acquire + write + release", lambda: cold_cycle(manager))
    measure("release the last owner (sealed)", manager.release)
    measure("close (its generations removed, manager closed)", manager.close)
    return rows


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    rounds = 30 if args.quick else args.rounds
    modes = benchlib.durability_modes()
    m, g = ids.new_manager(), ids.new_generation()
    rows = [encode(GenerationCreated(m, g)), encode(RemovalStarted(g, m, "retired"))]
    with benchlib.scratch(args.root) as scratch:
        floor = benchlib.BareCommits(scratch / "floor.sqlite3", rows)
        bare_dirs = scratch / "bare"
        bare_dirs.mkdir()

        def baseline(extra: int = 0) -> None:
            floor.commit()
            path = Path(tempfile.mkdtemp(dir=bare_dirs))
            write_one(path)
            floor.commit()
            shutil.rmtree(path)
            for _ in range(extra):
                floor.commit()

        managers: dict[str, Manager] = {}
        try:
            variants: dict[str, Callable[[], object]] = {
                BASELINE: baseline, DURABLE_FLOOR: functools.partial(baseline, 1)}
            for mode, kwargs in modes:
                manager = managers[mode] = Manager(scratch / mode, **kwargs)
                manager.retain()
                variants[f"cold cycle, {mode}"] = functools.partial(cold_cycle, manager)
            samples = benchlib.interleave(variants, rounds)
        finally:
            for manager in managers.values():
                manager.release()
                manager.close()
            floor.close()
        # Counted after the timing, on managers of their own: the statement
        # trace that counts commits calls into Python on every statement.
        counts: dict[str, list[tuple[str, int, int, int]]] = {}
        with benchlib.CommitCounter() as counter:
            for mode, kwargs in modes:
                counts[mode] = per_operation(counter, scratch / f"{mode}-count", kwargs)
    print(f"Command: python tools/bench_cold.py --rounds {rounds}"
          f"{' --quick' if args.quick else ''}\n{benchlib.environment(args.root)}\n")
    base = benchlib.median_ms(samples[BASELINE])
    table = []
    for name, times in samples.items():
        ms = benchlib.median_ms(times)
        durable = name.endswith("durable")
        table.append((name, f"{ms:.3f} ms", f"{ms / base:.2f}x",
                      f"<= {GOAL}x" if durable else "",
                      benchlib.verdict(ms / base, GOAL) if durable else ""))
    benchlib.table(("operation", "median", "x baseline", "goal", ""), table, numeric=(1, 2))
    for mode, operation_rows in counts.items():
        print(f"Commits per operation, {mode} mode:\n")
        benchlib.table(("operation", "durable commits", "relaxed commits", "events"),
                       operation_rows, numeric=(1, 2, 3))
    if len(modes) == 1:
        print(benchlib.RELAXED_ABSENT)


if __name__ == "__main__":
    main()
