"""Benchmark what grows with history: opening a long journal, its checkpoint, a warm cycle.

    python tools/bench_live.py --journal /tmp/j1m.sqlite3 [--runs R]
    python tools/bench_live.py --rotations 1000 20000 [--cycles C]

With ``--journal`` (one built by ``tools/bench_replay.py``): a root holding a
copy of it is opened once (its recovery writes a checkpoint if one is due,
and adds the journal's read indexes if missing), then ``Manager`` open +
close on it is timed R times (the median: ``quick_check``, the newest
checkpoint restored, the events after it replayed, the recovery pass); and
the newest checkpoint is restored alone R times, with its size and how many
managers and generations it holds.

With ``--rotations``: for each N, one manager on a fresh root runs N cold
cycles (rotate, acquire, release: one generation made and removed each),
then C warm cycles (acquire + release on its live generation) are timed,
and the size of its state is counted.

With ``--appends N``: the cost the journal's read indexes add to an
append.  Two journals side by side, one with the indexes and one without
(dropped after open), take N single-event commits each, alternating: a
``generation.created`` (indexed) and a ``lease.acquired`` (not indexed).

Timings are medians in this one process; the machine may be shared.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sessiontemp import Manager
from sessiontemp.journal import Store, checkpoint


def median_ms(runs: int, operation: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        operation()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def open_close(root: Path) -> None:
    Manager(root).close()


def journal_figures(journal: Path, runs: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        root.mkdir(mode=0o700)
        for suffix in ("", "-wal"):
            source = journal.with_name(journal.name + suffix)
            if source.exists():
                shutil.copy(source, root / ("journal.sqlite3" + suffix))
        first = time.perf_counter()
        open_close(root)
        print(f"first open + close (may write a checkpoint, add indexes): "
              f"{(time.perf_counter() - first) * 1000:.0f} ms")
        print(f"Manager open + close, median of {runs}: "
              f"{median_ms(runs, lambda: open_close(root)):.1f} ms")
        store = Store(root / "journal.sqlite3", readonly=True)
        try:
            newest = checkpoint.restore(store)
            assert newest.checkpoint is not None, "no usable checkpoint"
            size = len(store.checkpoint_state(newest.checkpoint))
            state = newest.state
            print(f"newest checkpoint: event {newest.checkpoint} of {store.last_seq()}, "
                  f"{size / 1000:.1f} kB, {len(state.managers)} managers, "
                  f"{len(state.generations)} generations")
            print(f"restore alone, median of {runs}: "
                  f"{median_ms(runs, lambda: checkpoint.restore(store)):.2f} ms")
        finally:
            store.close()


def warm_after(rotations: int, cycles: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as scratch, Manager(Path(scratch) / "root") as manager:
        manager.retain()
        for _ in range(rotations):
            manager.rotate()
            with manager.acquire():
                pass

        def warm() -> None:
            with manager.acquire():
                pass

        warm()
        size = len(manager.state.managers) + len(manager.state.generations)
        return median_ms(cycles, warm), size


def append_costs(count: int) -> None:
    from sessiontemp.journal import testing
    from sessiontemp.journal.events import GenerationCreated, LeaseAcquired, ManagerOpened, Retained
    from sessiontemp.journal.ids import new_generation, new_lease
    from sessiontemp.journal.store.schema import INDEXES

    with tempfile.TemporaryDirectory() as scratch:
        stores = {"with indexes": Store(Path(scratch) / "a.sqlite3"),
                  "without": Store(Path(scratch) / "b.sqlite3")}
        for name, _, _ in INDEXES:
            # The store keeps its connection private; a benchmark may reach in.
            testing.connection(stores["without"]).execute(f"DROP INDEX {name}")
        m = "0" * 32
        for store in stores.values():
            store.append([ManagerOpened(m, 1), Retained(m)], time=1.0)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(count):
            for label, store in stores.items():
                for kind, event in (("generation.created", GenerationCreated(m, new_generation())),
                                    ("lease.acquired", LeaseAcquired(m, "a" * 16, new_lease()))):
                    start = time.perf_counter()
                    store.append([event], time=2.0)
                    times.setdefault((kind, label), []).append(time.perf_counter() - start)
        for store in stores.values():
            store.close()
        for (kind, label), values in sorted(times.items()):
            print(f"append {kind} ({label}), median of {count}: "
                  f"{statistics.median(values) * 1e6:.0f} us")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--journal", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rotations", type=int, nargs="*", default=[])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--appends", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run (CI): 100 and 300 rotations, 50 appends")
    args = parser.parse_args(argv)
    if args.quick:
        args.rotations, args.cycles, args.appends = [100, 300], 20, 50
    if args.appends:
        append_costs(args.appends)
    if args.journal is not None:
        journal_figures(args.journal, args.runs)
    for n in args.rotations:
        ms, size = warm_after(n, args.cycles)
        print(f"warm cycle after {n} rotations, median of {args.cycles}: {ms:.3f} ms "
              f"(state: {size} managers and generations)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
