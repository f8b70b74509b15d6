"""Benchmark ``journal-inspect timeline`` on journals of many generations.

    python tools/bench_timeline.py [--generations N ...] [--runs R] [--quick]

For each N (default 10,000 and 100,000) builds a journal the way managers
write it, through the real :class:`sessiontemp.journal.store.Store`: managers one after
another, each making, leasing, rotating and removing 20 generations, one in
ten killed and its last generation removed by a recovery pass.  Then times
:func:`sessiontemp.inspect.timeline` (median of R runs in this process) and
prints a Markdown table for BENCHMARKS.md: the time, the SVG's size, the
bars drawn and the lanes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import generation_id

from sessiontemp import inspect
from sessiontemp.journal.events import (
    Event,
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    RecoveryStarted,
    Released,
    RemovalFinished,
    RemovalStarted,
    Retained,
    Rotated,
)
from sessiontemp.journal.store import Store

PER_MANAGER = 20


def manager_life(serial: int) -> list[Event]:
    m = f"{serial:032x}"
    events: list[Event] = [ManagerOpened(m, 1000 + serial % 30000), Retained(m)]
    for i in range(PER_MANAGER):
        g, lease = generation_id(serial * 1000 + i), f"{serial * 1000 + i:016x}"
        events += [GenerationCreated(m, g), GenerationReady(m, g, 2049, i),
                   LeaseAcquired(m, g, lease), LeaseReleased(m, g, lease)]
        if i < PER_MANAGER - 1 or serial % 10:
            events += [Rotated(m), RemovalStarted(g, m, "retired and no lease left"),
                       RemovalFinished(g, m, "removed")]
    if serial % 10 == 0:
        r = f"{serial:016x}"
        last = generation_id(serial * 1000 + PER_MANAGER - 1)
        events += [RecoveryStarted(r, 99), ManagerDied(m, r),
                   RemovalStarted(last, r, f"manager {m} died"),
                   RemovalFinished(last, r, "removed")]
    else:
        events += [Released(m), ManagerClosed(m)]
    return events


def build(path: Path, generations: int) -> int:
    store = Store(path)
    try:
        clock = 1_700_000_000.0
        for serial in range(generations // PER_MANAGER):
            store.append(manager_life(serial), time=clock)
            clock += 1.0
        return store.last_seq()
    finally:
        store.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--generations", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run: 1,000 generations, one run")
    args = parser.parse_args(argv)
    if args.quick:
        args.generations, args.runs = [1_000], 1
    print("| generations | managers | events | timeline (median) | SVG | bars drawn | lanes |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        for n in args.generations:
            journal = Path(scratch) / f"{n}.sqlite3"
            events = build(journal, n)
            out = Path(scratch) / f"{n}.svg"
            times = []
            result = None
            for _ in range(args.runs):
                start = time.perf_counter()
                result = inspect.timeline(journal, out)
                times.append(time.perf_counter() - start)
            assert result is not None
            lanes = sum(1 for line in result.svg.splitlines()
                        if 'class="manager' in line)
            print(f"| {result.generations:,} | {result.managers:,} | {events:,} | "
                  f"{statistics.median(times):.2f} s | {out.stat().st_size / 1e6:.2f} MB | "
                  f"{result.drawn:,}{' (grouped)' if result.grouped else ''} | {lanes} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
