"""Measure the bounded journal: disk use under the retention rule, and open time.

    python tools/bench_segments.py [--events N] [--runs R] [--dir DIR]

Builds a journal of about N events (default 1,000,000) the way
``tools/bench_replay.py`` does (its ``lifetimes``: real managers' events, in
batches of 20,000, through the real :class:`sessiontemp.journal.store.Store`), with the
default :class:`sessiontemp.journal.segments.Retention`.  After each batch it does what
a recovery pass does: replays from the newest checkpoint, writes one when
due (which rolls over to a new segment once the active one is over its
size) and retires what the retention rule no longer keeps.  It reports:

* the journal's disk use (every file of it: the head, its -wal, the
  segments and theirs) at its largest during the build and at the end,
  against the budget (``history_bytes`` + what the active segment holds);
* the same journal with retired history all deleted (``history_bytes=0``):
  what is left is the checkpoint of the live state and the events since;
* the median time of a :class:`sessiontemp.Manager` open and close on the
  root, and of the same on a root with 1,000 events.

No timing is asserted anywhere; the numbers go in the closing notes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Its sibling, imported by name as when run from this directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay import BATCH
from benchlib import lifetimes

from sessiontemp import Manager
from sessiontemp.journal import checkpoint
from sessiontemp.journal.events import Event
from sessiontemp.journal.reducer import State, replay
from sessiontemp.journal.segments import DEFAULT_RETENTION, Retention
from sessiontemp.journal.store import Store


def disk(root: Path) -> int:
    """Bytes of every file of the journal under *root*."""
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("journal.sqlite3") or base.endswith(".d"):
                total += os.stat(os.path.join(base, name)).st_size
    return total


def maintain(store: Store, state: State, checkpointed: int, clock: float) -> tuple[State, int]:
    state = checkpoint.restore(store).state if state.seq < checkpointed else state
    state = replay(store.records(after=state.seq), state)
    if checkpoint.due(state, checkpointed):
        checkpoint.save(store, state)
        checkpointed = state.seq
    store.retire(now=clock)
    return state, checkpointed


def build(root: Path, count: int, retention: Retention) -> tuple[int, int, int]:
    """Build the journal; return (largest disk, events, segments kept)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    store = Store(root / "journal.sqlite3", retention=retention)
    largest = 0
    try:
        pending: list[Event] = []
        clock = time.time()
        state, checkpointed = State(), 0
        for events in lifetimes(count):
            pending += events
            if len(pending) >= BATCH:
                store.append(pending, time=clock)
                pending = []
                state, checkpointed = maintain(store, state, checkpointed, clock)
                largest = max(largest, disk(root))
        if pending:
            store.append(pending, time=clock)
        seq = store.last_seq()
        kept = len(store.segments())
    finally:
        store.close()
    return largest, seq, kept


def retire_all(root: Path) -> int:
    """Checkpoint the end, roll over, delete all retired history; return the disk left."""
    store = Store(root / "journal.sqlite3", retention=Retention(segment_bytes=0, history_bytes=0))
    try:
        start = checkpoint.restore(store)
        state = replay(store.records(after=start.state.seq), start.state)
        checkpoint.save(store, state)
        store.retire(now=time.time())
    finally:
        store.close()
    return disk(root)


def open_time(root: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        Manager(root).close()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run (CI): 25,000 events, one run")
    args = parser.parse_args()
    if args.quick:
        args.events, args.runs = 25_000, 1
    if args.dir is not None:
        run(args, args.dir)
        return
    with tempfile.TemporaryDirectory(prefix="bench-segments-") as scratch:
        run(args, Path(scratch))


def run(args: argparse.Namespace, base: Path) -> None:
    r = DEFAULT_RETENTION
    print(f"retention: segment {r.segment_bytes:,} B, history {r.history_bytes:,} B, "
          f"age {r.history_age:g} s")
    began = time.perf_counter()
    largest, seq, kept = build(base / "long", args.events, DEFAULT_RETENTION)
    print(f"built {seq:,} events in {time.perf_counter() - began:.0f} s: largest journal "
          f"{largest:,} B, at the end {disk(base / 'long'):,} B in {kept} segments")
    _small_largest, small_seq, _ = build(base / "short", 1_000, DEFAULT_RETENTION)
    print(f"built {small_seq:,} events: journal {disk(base / 'short'):,} B")
    long_open = open_time(base / "long", args.runs)
    short_open = open_time(base / "short", args.runs)
    print(f"Manager open+close, median of {args.runs}: {long_open * 1000:.1f} ms at "
          f"{seq:,} events, {short_open * 1000:.1f} ms at {small_seq:,}")
    left = retire_all(base / "long")
    print(f"all retired history deleted: {left:,} B left")
    print(f"Manager open+close after that: {open_time(base / 'long', args.runs) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
