"""What history costs: open + recovery, a warm cycle, memory and journal disk; prints Markdown.

    python tools/bench_history.py [--events N] [--rotations R] [--memory-at M] [--part P] [--quick]

Three measurements, each against the same with little history:

* **open + recovery**: ``Manager(root)`` (recovery included; the close is
  not timed) on a root with N events of history (default 1,000,000) and on
  one with 1,000, alternating round by round.  Each root is built as
  ``tools/bench_replay.py`` builds its journal (:func:`benchlib.lifetimes`:
  managers that open, retain, lease, rotate, remove, release and close, one
  in ten killed and recovered), appended in batches of 20,000 events through
  the real ``Store``; after every fifth batch a real process opens a
  Manager, takes a lease and exits without closing (a crash), and after
  every batch a real recovery pass runs (``sessiontemp.recover``: it finds
  that process dead, removes its directory, and writes checkpoints and
  retires history as the library does).  Then 5 live sessions are opened in this process, each
  retained, rotated once and holding a lease, and stay open throughout.
* **journal disk** of those roots: every file of the root but the sessions'
  directories (journal, -wal, -shm, any segments, lock files).
* **a warm cycle after R rotations** (default 100,000) of one manager against
  one after 100, alternating; and the **manager's memory** (``tracemalloc``,
  traced from before the manager opened, after a garbage collection) after
  M rotations (``--memory-at``, default 1,000) and after R, and after R/2
  (whether the second half of the history adds anything).  A rotation
  here is ``rotate()`` + ``acquire()`` + ``release()``: a generation made
  and removed.  These two roots go to
  /dev/shm when it is writable (fsync is free there, so the build is
  quicker and what is compared is the CPU's share, which is what grows with
  history).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import pathlib
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import benchlib

from sessiontemp import Lease, Manager, handles, recover
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.journal import testing
from sessiontemp.journal.events import Event
from sessiontemp.journal.store import Store

BATCH = 20_000
LIVE = 5
CRASH_EVERY = 5  # batches between real crashes
SMALL_HISTORY = 1_000
FEW_ROTATIONS = 100

CRASH = """
import os, sys
from sessiontemp import Manager
manager = Manager(sys.argv[1])
manager.retain()
manager.acquire()
os._exit(0)
"""


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rotations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20, help="opens timed on each root")
    parser.add_argument("--cycles", type=int, default=500, help="warm cycles timed on each")
    parser.add_argument("--memory-at", type=int, default=1_000,
                        help="rotations at which the first memory figure is taken")
    parser.add_argument("--part", choices=("all", "history", "rotations"), default="all",
                        help="run only the built histories (open, disk) or only the rotations "
                             "(warm cycle, memory); two processes can run the parts at once")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build(root: Path, events: int) -> list[tuple[Manager, Lease]]:
    """A root with about *events* of history and LIVE live sessions (returned, open)."""
    Manager(root).close()  # the root and its journal, as the library makes them
    pending: list[Event] = []
    clock = time.time() - events / BATCH
    store = Store(root / JOURNAL_NAME)
    batches = 0
    try:
        for lives in benchlib.lifetimes(events):
            pending += lives
            if len(pending) >= BATCH:
                store.append(pending, time=clock)
                clock += 1.0
                pending = []
                batches += 1
                if batches % CRASH_EVERY == 0:
                    subprocess.run([sys.executable, "-c", CRASH, str(root)], check=True)
                recover(root)
                progress(f"  {root.name}: {store.last_seq():,} events")
        if pending:
            store.append(pending, time=clock)
    finally:
        store.close()
    subprocess.run([sys.executable, "-c", CRASH, str(root)], check=True)
    recover(root)
    live = []
    for _ in range(LIVE):
        manager = Manager(root)
        manager.retain()
        manager.acquire().release()
        manager.rotate()
        live.append((manager, manager.acquire(label="live session")))
    return live


def close(live: list[tuple[Manager, Lease]]) -> None:
    for manager, lease in live:
        lease.release()
        manager.release()
        manager.close()


def rotations(manager: Manager, count: int) -> None:
    for _ in range(count):
        manager.rotate()
        manager.acquire().release()


def settled(manager: Manager) -> None:
    """Wait for the journal maintenance *manager*'s appends may have started (a thread).

    A checkpoint being written holds a batch of records read from the
    journal: memory of the moment, not of the manager.
    """
    store = handles.of(manager.id).store
    running = None if store is None else testing.maintenance_thread(store)
    if running is not None:
        running.join()


def traced() -> tuple[int, int]:
    """Traced bytes: in all, and without what was allocated in pathlib.

    pathlib interns every path component it parses (``sys.intern``), and the
    interpreter's table of interned strings, one block shared by the whole
    process, doubles now and then as new names (a generation's) come in: a
    step of about 1 MB.  The manager parses no generation's name into a Path
    (a lease's ``path`` is made when read), so the two should agree; the
    second says whether something else still does.
    """
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    total = sum(trace.size for trace in snapshot.traces)
    in_pathlib = snapshot.filter_traces([tracemalloc.Filter(True, pathlib.__file__)])
    return total, total - sum(trace.size for trace in in_pathlib.traces)


def retention() -> tuple[Any, Any] | None:
    """The default retention and one that keeps no retired history, if the journal has one."""
    if "retention" not in inspect.signature(recover).parameters:
        return None
    segments = importlib.import_module("sessiontemp.journal.segments")
    return (segments.DEFAULT_RETENTION,
            segments.Retention(segment_bytes=0, history_bytes=0, history_age=0))


def history(args: argparse.Namespace, scratch: Path) -> None:
    big, small = scratch / "history-big", scratch / "history-small"
    progress(f"building {args.events:,} events of history (and {SMALL_HISTORY:,})")
    start = time.perf_counter()
    live = build(big, args.events) + build(small, SMALL_HISTORY)
    built = time.perf_counter() - start
    rules = retention()
    try:
        sizes = {root: benchlib.root_bytes(root) for root in (big, small)}
        seqs = {}
        for root in (big, small):
            with Manager(root) as manager:
                seqs[root] = manager.state.seq

        def open_(root: Path) -> float:
            started = time.perf_counter()
            manager = Manager(root)
            took = time.perf_counter() - started
            manager.close()
            return took

        samples = benchlib.interleave({"big": lambda: open_(big), "small": lambda: open_(small)},
                                      args.rounds, warmup=1)
        retired = {}
        if rules is not None:
            keep_none: dict[str, Any] = {"retention": rules[1]}
            for root in (big, small):
                recover(root, **keep_none)
                retired[root] = benchlib.root_bytes(root)
    finally:
        close(live)
    big_ms, small_ms = (benchlib.median_ms(samples[k]) for k in ("big", "small"))
    print(f"Histories built in {built:.0f} s; {LIVE} live sessions on each root, "
          f"opens alternating, median of {args.rounds}\n")
    benchlib.table(
        ("root", "events of history", "open + recovery", "goal", ""),
        [(f"{args.events:,} events", f"{seqs[big]:,}", f"{big_ms:.1f} ms",
          "<= 100 ms", benchlib.verdict(big_ms, 100.0)),
         (f"{SMALL_HISTORY:,} events", f"{seqs[small]:,}", f"{small_ms:.1f} ms", "", ""),
         ("ratio", "", f"{big_ms / small_ms:.2f}x", "<= 2x",
          benchlib.verdict(big_ms / small_ms, 2.0))],
        numeric=(1, 2))
    if rules is None:
        print("Journal disk (no retention rule in this version: nothing is ever retired)\n")
        benchlib.table(("root", "journal disk"),
                       [(f"{seqs[root]:,} events", f"{sizes[root] / 1e6:.2f} MB")
                        for root in (big, small)], numeric=(1,))
        return
    default = rules[0]
    budget = default.history_bytes + 2 * default.segment_bytes
    print(f"Journal disk, with the default retention ({default}) and after one more "
          "recovery pass keeping no retired history (Retention(0, 0, 0)); the bound taken "
          "for the default is its history budget plus two segments\n")
    benchlib.table(
        ("root", "default retention", "goal", "", "no retired history kept", "goal", ""),
        [(f"{seqs[root]:,} events", f"{sizes[root] / 1e6:.2f} MB",
          f"<= {budget / 1e6:.1f} MB", benchlib.verdict(sizes[root], budget),
          f"{retired[root] / 1e6:.2f} MB", "< 1 MB", benchlib.verdict(retired[root], 1e6))
         for root in (big, small)],
        numeric=(1, 4))


def rotated(args: argparse.Namespace, scratch: Path) -> None:
    fast = benchlib.memory_dir()
    with benchlib.scratch(fast, prefix="bench-history-") as place:
        progress(f"{args.rotations:,} rotations of one manager, traced by tracemalloc")
        # What the first manager of a process sets up once (imports, caches, the
        # worker thread) is not the memory of one manager: it is done before tracing.
        with Manager(place / "warm-up") as warm_up:
            warm_up.retain()
            rotations(warm_up, 3)
            warm_up.release()
        tracemalloc.start()
        base = traced()
        many = Manager(place / "many")
        many.retain()
        rotations(many, min(args.memory_at, args.rotations))
        settled(many)
        memory_small = [now - then for now, then in zip(traced(), base, strict=True)]
        start = time.perf_counter()
        done = min(args.memory_at, args.rotations)
        half = max(done, args.rotations // 2)
        memory_half = memory_small
        while done < args.rotations:
            step = min(10_000, (half if done < half else args.rotations) - done)
            rotations(many, step)
            done += step
            progress(f"  {done:,} rotations ({time.perf_counter() - start:.0f} s)")
            if done == half:
                settled(many)
                memory_half = [now - then for now, then in zip(traced(), base, strict=True)]
        settled(many)
        memory_big = [now - then for now, then in zip(traced(), base, strict=True)]
        tracemalloc.stop()
        few = Manager(place / "few")
        few.retain()
        rotations(few, FEW_ROTATIONS)
        try:
            samples = benchlib.interleave(
                {"many": lambda: many.acquire().release(),
                 "few": lambda: few.acquire().release()}, args.cycles, warmup=5)
        finally:
            for manager in (many, few):
                manager.release()
                manager.close()
    many_ms, few_ms = (benchlib.median_ms(samples[k]) for k in ("many", "few"))
    print(f"One manager rotated {args.rotations:,} times against one rotated {FEW_ROTATIONS}, "
          f"warm cycles alternating, median of {args.cycles}; roots under {fast or scratch}\n")
    benchlib.table(
        ("measure", f"after {FEW_ROTATIONS} / {args.memory_at:,} rotations",
         f"after {args.rotations:,}", "ratio", "goal", ""),
        [("warm cycle (acquire + release)", f"{few_ms:.3f} ms", f"{many_ms:.3f} ms",
          f"{many_ms / few_ms:.2f}x", "within 10 %",
          benchlib.verdict(abs(many_ms / few_ms - 1), 0.10)),
         *[(f"manager memory (tracemalloc){what}", f"{small / 1e3:,.0f} kB",
            f"{big / 1e3:,.0f} kB", f"{big / small:.2f}x", "within 10 %",
            benchlib.verdict(abs(big / small - 1), 0.10))
           for what, small, big in zip(("", ", without pathlib's interned names"),
                                       memory_small, memory_big, strict=True)]],
        numeric=(1, 2, 3))
    # The first figure is taken before anything that happens once in a
    # manager's life (its first rollover, its first maintenance pass), the
    # second after; the second half of the rotations says whether anything
    # still grows with history once those are behind it.
    print(f"The same memory after {half:,} rotations: {memory_half[0] / 1e3:,.1f} kB; after "
          f"{args.rotations:,}: {memory_big[0] / 1e3:,.1f} kB "
          f"({memory_big[0] / memory_half[0]:.2f}x over the second half).\n")


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    if args.quick:
        args.events, args.rotations, args.rounds, args.cycles = 21_000, 400, 3, 30
        args.memory_at = 100
    quick = " --quick" if args.quick else ""
    print(f"Command: python tools/bench_history.py --events {args.events} --rotations "
          f"{args.rotations} --rounds {args.rounds} --cycles {args.cycles} --memory-at "
          f"{args.memory_at} --part {args.part}{quick}\n"
          f"{benchlib.environment(args.root)}\n")
    with benchlib.scratch(args.root) as scratch:
        if args.part in ("all", "history"):
            history(args, scratch)
        if args.part in ("all", "rotations"):
            rotated(args, scratch)


if __name__ == "__main__":
    main()
