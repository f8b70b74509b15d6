"""Benchmark reading a long journal: ``journal-inspect summary`` and a full replay.

    python tools/bench_replay.py [--events N] [--runs R] [--journal PATH]

Builds (once; reused when PATH already holds one) a journal of about N events
(default 1,000,000) the way real managers write it: through the real
:class:`journal.store.Store`, in large batches, with managers that open, retain,
lease, rotate, remove, release and close, some that die and are recovered, and
a few still live at the end.  Then it times, as the median of R runs in this
one process (the machine may be shared and noisy):

* ``summary``: :func:`sessiontemp.inspect.summary` (SQL aggregates, no full replay);
* ``replay``: decode every record and fold the reducer over it, from a fresh
  read-only open to the final state;
* ``decode``: reading and decoding alone, without the reducer;
* ``state``: :func:`sessiontemp.inspect.state_at` at the end, the replay
  ``state``, ``explain`` and ``fsck`` do;
* ``verify``: :func:`sessiontemp.inspect.verify`, the full check (reported, no target).

Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from journal.events import (
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
from journal.reducer import replay
from journal.store import Store
from sessiontemp import inspect

BATCH = 20_000


def lifetimes(count: int) -> Iterator[list[Event]]:
    """The events of one manager's life after another, each a list, until *count* events."""
    n = 0
    serial = 0
    while n < count:
        serial += 1
        m = f"{serial:032x}"
        pid = 1000 + serial % 30000
        events: list[Event] = [ManagerOpened(m, pid), Retained(m)]
        generation_serial = 0
        for round_ in range(20):
            generation_serial += 1
            g = f"g{serial:09d}{generation_serial:06d}"
            events += [GenerationCreated(m, g), GenerationReady(m, g, 2049, 10_000 + round_)]
            for k in range(3):
                lease_a, lease_b = f"{g}a{k}", f"{g}b{k}"
                events += [
                    LeaseAcquired(m, g, lease_a), LeaseAcquired(m, g, lease_b),
                    LeaseReleased(m, g, lease_a), LeaseReleased(m, g, lease_b),
                ]
            events += [
                Rotated(m),
                RemovalStarted(g, m, "retired and no lease left"),
                RemovalFinished(g, m, "removed"),
            ]
        if serial % 10 == 0:
            # Killed: a recovery pass finds it dead and removes its generation.
            g = f"g{serial:09d}{generation_serial + 1:06d}"
            r = f"r{serial:015x}"
            events += [GenerationCreated(m, g), GenerationReady(m, g, 2049, 99),
                       LeaseAcquired(m, g, g + "x"),
                       RecoveryStarted(r, pid + 1), ManagerDied(m, r),
                       RemovalStarted(g, r, f"manager {m} (pid {pid}) died"),
                       RemovalFinished(g, r, "removed")]
        else:
            events += [Released(m), ManagerClosed(m)]
        n += len(events)
        yield events


def build(path: Path, count: int) -> None:
    store = Store(path)
    try:
        pending: list[Event] = []
        clock = 1_700_000_000.0
        for events in lifetimes(count):
            pending += events
            if len(pending) >= BATCH:
                store.append(pending, time=clock)
                clock += 1.0
                pending = []
        # A few managers still live at the end, one with a lease held.
        live: list[Event] = [ManagerOpened("f" * 32, 4242), Retained("f" * 32),
                GenerationCreated("f" * 32, "glive"), GenerationReady("f" * 32, "glive", 1, 2),
                LeaseAcquired("f" * 32, "glive", "held")]
        store.append([*pending, *live], time=clock)
    finally:
        store.close()


def full_replay(path: Path) -> int:
    store = Store(path, readonly=True)
    try:
        return replay(store.records()).seq
    finally:
        store.close()


def decode_only(path: Path) -> int:
    store = Store(path, readonly=True)
    try:
        n = 0
        for _ in store.records():
            n += 1
        return n
    finally:
        store.close()


def median_s(runs: int, operation: Callable[[], object]) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--journal", type=Path, default=None,
                        help="where to build (or reuse) the journal; default: a temporary file")
    parser.add_argument("--skip-verify", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        path = args.journal or Path(scratch) / "journal.sqlite3"
        if not path.exists():
            start = time.perf_counter()
            build(path, args.events)
            print(f"built {path} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        events = Store(path, readonly=True).last_seq()
        size = path.stat().st_size
        rows = [
            ("summary", median_s(args.runs, lambda: inspect.summary(path))),
            ("decode (read + decode every record)", median_s(args.runs, lambda: decode_only(path))),
            ("replay (read + decode + reduce)", median_s(args.runs, lambda: full_replay(path))),
            ("state (journal-inspect's full replay)",
             median_s(args.runs, lambda: inspect.state_at(path))),
        ]
        if not args.skip_verify:
            rows.append(("verify (integrity, digests, rules)",
                         median_s(max(1, args.runs // 2), lambda: inspect.verify(path))))
        print(f"journal: {events:,} events, {size / 1e6:.1f} MB; median of {args.runs} runs\n")
        print("| operation | median | events/s |")
        print("| --- | ---: | ---: |")
        for name, seconds in rows:
            print(f"| {name} | {seconds * 1000:.0f} ms | {events / seconds / 1e6:.2f} M |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
