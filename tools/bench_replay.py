"""Benchmark reading a long journal: ``journal-inspect summary`` and a full replay.

    python tools/bench_replay.py [--events N] [--runs R] [--journal PATH] [--quick]

Builds (once; reused when PATH already holds one) a journal of about N events
(default 1,000,000) the way real managers write it: through the real
:class:`sessiontemp.journal.store.Store`, in large batches, with managers that open, retain,
lease, rotate, remove, release and close, some that die and are recovered, and
a few still live at the end.  After each batch it writes a checkpoint when one
is due, as the recovery pass of each Manager open does.  Then it times, as the
median of R runs in this one process (the machine may be shared and noisy):

* ``summary``: :func:`sessiontemp.inspect.summary` (SQL aggregates, no full replay);
* ``replay``: the state at the end, from a fresh read-only open: the newest
  checkpoint restored, the events after it folded (what a Manager open's
  recovery, ``journal-inspect state`` and ``fsck`` do);
* the same at the worst point for the checkpoints: just before the next one
  falls due, so the most events after a checkpoint;
* ``explain``: :func:`sessiontemp.inspect.explain` of the generation live at
  the end and of the first one, removed long before;
* ``restore``: decoding the newest checkpoint alone;
* ``replay from event 1``: decode every record and fold the reducer over it,
  ignoring checkpoints (what ``verify`` does);
* ``decode``: reading and decoding alone, without the reducer;
* ``verify``: :func:`sessiontemp.inspect.verify`, the full check (reported, no target);
* ``save``: encoding and writing one checkpoint of the final state;
* ``open``: a :class:`sessiontemp.Manager` opened and closed on a root
  holding a copy of the journal.

Prints a Markdown table for BENCHMARKS.md.
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

from benchlib import lifetimes

from sessiontemp import Manager, inspect
from sessiontemp.journal import checkpoint, segments
from sessiontemp.journal.events import (
    Event,
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    ManagerOpened,
    Retained,
)
from sessiontemp.journal.reducer import State, replay
from sessiontemp.journal.store import Store

BATCH = 20_000


def build(path: Path, count: int) -> None:
    store = Store(path)
    try:
        pending: list[Event] = []
        clock = 1_700_000_000.0
        state = State()
        checkpointed = 0
        for events in lifetimes(count):
            pending += events
            if len(pending) >= BATCH:
                store.append(pending, time=clock)
                clock += 1.0
                pending = []
                # What the recovery pass of a Manager open here would do.
                state = replay(store.records(after=state.seq), state)
                if checkpoint.due(state, checkpointed):
                    checkpoint.save(store, state)
                    checkpointed = state.seq
        # A few managers still live at the end, one with a lease held.
        m, g = "f" * 32, "livelivelivelive"
        live: list[Event] = [ManagerOpened(m, 4242), Retained(m), GenerationCreated(m, g),
                             GenerationReady(m, g, 1, 2), LeaseAcquired(m, g, "f" * 16)]
        store.append([*pending, *live], time=clock)
    finally:
        store.close()


def full_replay(path: Path) -> int:
    store = Store(path, readonly=True)
    try:
        return replay(store.records()).seq
    finally:
        store.close()


def replay_from_checkpoint(path: Path, until: int | None = None) -> int:
    store = Store(path, readonly=True)
    try:
        start = checkpoint.restore(store, until=until).state
        return replay(store.records(after=start.seq, until=until), start).seq
    finally:
        store.close()


def restore_only(path: Path) -> int:
    store = Store(path, readonly=True)
    try:
        return checkpoint.restore(store).state.seq
    finally:
        store.close()


def worst_point(path: Path) -> tuple[int, int]:
    """The seq with the most events after the checkpoint it starts from, and that many."""
    store = Store(path, readonly=True)
    try:
        marks = [seq for seq, _, _ in store.checkpoints()]
        last = store.last_seq()
    finally:
        store.close()
    if len(marks) < 2:
        return last, last - (marks[0] if marks else 0)
    # Just before the newest was written, the one before it was the newest.
    return marks[0] - 1, marks[0] - 1 - marks[1]


def open_manager(root: Path) -> None:
    Manager(root).close()


def save_once(path: Path, state: State) -> None:
    store = Store(path)
    try:
        checkpoint.save(store, state)
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
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run: 25,000 events, one run of each")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.runs = 25_000, 1
    with tempfile.TemporaryDirectory() as scratch:
        path = args.journal or Path(scratch) / "journal.sqlite3"
        if not path.exists():
            start = time.perf_counter()
            build(path, args.events)
            print(f"built {path} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        reader = Store(path, readonly=True)
        events = reader.last_seq()
        marks = [seq for seq, _, _ in reader.checkpoints()]
        reader.close()
        worst, worst_tail = worst_point(path)
        size = path.stat().st_size
        rows = [
            ("summary", events, median_s(args.runs, lambda: inspect.summary(path))),
            (f"replay to the end (checkpoint at {marks[0] if marks else 0:,}, "
             f"{events - (marks[0] if marks else 0):,} events after it)", events,
             median_s(args.runs, lambda: replay_from_checkpoint(path))),
            (f"replay to {worst:,}, the worst point ({worst_tail:,} events after "
             "the checkpoint)", worst,
             median_s(args.runs, lambda: replay_from_checkpoint(path, worst))),
            ("`journal-inspect state` (inspect.state_at)", events,
             median_s(args.runs, lambda: inspect.state_at(path))),
            ("`journal-inspect explain` of the live generation made at the end", 0,
             median_s(args.runs, lambda: inspect.explain(path, "livelivelivelive"))),
            ("`journal-inspect explain` of the first generation (removed early on)", 0,
             median_s(args.runs, lambda: inspect.explain(path, f"g{1:09d}{1:06d}"))),
            ("restore the newest checkpoint alone", events,
             median_s(args.runs, lambda: restore_only(path))),
            ("replay from event 1, ignoring checkpoints", events,
             median_s(args.runs, lambda: full_replay(path))),
            ("read + decode every record", events,
             median_s(args.runs, lambda: decode_only(path))),
        ]
        if not args.skip_verify:
            rows.append(("verify (integrity, digests, rules, checkpoints)", events,
                         median_s(max(1, args.runs // 2), lambda: inspect.verify(path))))
        final = inspect.state_at(path).state
        with tempfile.TemporaryDirectory() as spare:
            # A root holding a copy of this journal, its segments included:
            # checkpoints are written into the copy, then the recovery pass
            # of each open restores the newest and replays the rest.
            root = Path(spare) / "root"
            root.mkdir(mode=0o700)
            copy = root / "journal.sqlite3"
            shutil.copyfile(path, copy)
            if segments.directory(path).is_dir():
                shutil.copytree(segments.directory(path), segments.directory(copy))
            rows.append(("write one checkpoint of the final state", 0,
                         median_s(args.runs, lambda: save_once(copy, final))))
            rows.append(("Manager open + close on a root holding this journal", events,
                         median_s(args.runs, lambda: open_manager(root))))
        print(f"journal: {events:,} events, {size / 1e6:.1f} MB, checkpoints at "
              f"{', '.join(f'{m:,}' for m in marks) or 'none'}; median of {args.runs} runs\n")
        print("| operation | median | events/s |")
        print("| --- | ---: | ---: |")
        for name, count, seconds in rows:
            rate = f"{count / seconds / 1e6:.2f} M" if count else ""
            print(f"| {name} | {seconds * 1000:.0f} ms | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
