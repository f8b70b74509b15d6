"""What the benchmarks in tools/ share: options, interleaved timing, the commit floor, tables.

Every benchmark takes ``--quick`` (a small smoke run: CI runs it, without
timing assertions) and ``--root DIR`` (where its scratch directory goes;
default: the system temporary directory), writes only inside a scratch
directory it removes, and prints Markdown tables.  Figures that are compared
are measured in one loop, round by round (:func:`interleave`), so that the
ratios hold on a shared, noisy machine even when the absolute figures drift.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sessiontemp import Manager
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
    encode,
)

# -- options and places ----------------------------------------------------------------


def arguments(doc: str | None, add: Callable[[argparse.ArgumentParser], None] | None = None,
              argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: ``--quick``, ``--root`` and whatever *add* puts in."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run (seconds): the same code paths, few rounds")
    parser.add_argument("--root", type=Path, default=None,
                        help="where the scratch directory goes (the disk matters: every "
                             "durable commit is an fdatasync); default: the system temp dir")
    if add is not None:
        add(parser)
    return parser.parse_args(argv)


@contextlib.contextmanager
def scratch(root: Path | None, prefix: str = "bench-") -> Iterator[Path]:
    """A fresh directory under *root*, removed with everything in it at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=root) as path:
        yield Path(path)


def memory_dir() -> Path | None:
    """The shared-memory file system when writable: fsync is free there, leaving the CPU's share."""
    shm = Path("/dev/shm")  # noqa: S108 - the scratch goes in a fresh private directory under it  # noqa: S108 - scratch space goes in a fresh directory under it
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def environment(root: Path | None) -> str:
    """One line naming what the figures were taken on, with the load at the time."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python "
            f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, "
            f"load average {load}; scratch under {root or tempfile.gettempdir()}")


def durability_modes() -> list[tuple[str, dict[str, Any]]]:
    """``("durable", {})``, and ``("relaxed", {"durability": "relaxed"})`` if Manager has it."""
    modes: list[tuple[str, dict[str, Any]]] = [("durable", {})]
    if "durability" in inspect.signature(Manager).parameters:
        modes.append(("relaxed", {"durability": "relaxed"}))
    return modes


RELAXED_ABSENT = ("(no relaxed durability mode: `Manager` takes no `durability` parameter "
                  "in this version; its rows are skipped)")


# -- timing ----------------------------------------------------------------------------


def timed(operation: Callable[[], object]) -> float:
    """Seconds *operation* took, once."""
    start = time.perf_counter()
    operation()
    return time.perf_counter() - start


def interleave(variants: Mapping[str, Callable[[], object]], rounds: int, *,
               warmup: int = 3) -> dict[str, list[float]]:
    """Seconds per call of each variant, calling each once per round in turn.

    Interleaving is what makes the ratios meaningful: a burst of load from
    another process hits every variant of a round alike.  A variant that
    returns a float reports its own seconds (work timed in another thread,
    :meth:`Worker.run`) in place of the time the call took.
    """
    for _ in range(warmup):
        for operation in variants.values():
            operation()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, operation in variants.items():
            start = time.perf_counter()
            result = operation()
            took = time.perf_counter() - start
            samples[name].append(result if isinstance(result, float) else took)
    return samples


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e3


class Worker:
    """One long-lived thread that runs what it is handed and times it there.

    A Manager operation called from the main thread runs with its signal
    handlers deferred (``sessiontemp/_guards/shield.py``); from any other thread it
    runs as it is.  Handing work to this thread measures that plain path.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._job: Callable[[], object] | None = None
        self._ready = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._took = 0.0
        self._clock: Callable[[], float] = time.perf_counter
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._ready.acquire()
            job = self._job
            if job is None:
                return
            try:
                start = self._clock()
                job()
                self._took = self._clock() - start
            except BaseException as e:  # handed back to the caller
                self._error = e
            self._done.release()

    def run(self, job: Callable[[], object],
            clock: Callable[[], float] = time.perf_counter) -> float:
        """Run *job* in the thread; return the seconds it took there, by *clock*.

        ``clock=time.thread_time``: the CPU time the thread spent on it.
        """
        with self._lock:
            self._clock = clock
            self._job = job
            self._ready.release()
            self._done.acquire()
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            return self._took

    def close(self) -> None:
        with self._lock:
            self._job = None
            self._ready.release()
        self._thread.join()


# -- the floor: bare single-row commits -----------------------------------------------


class BareCommits:
    """A bare SQLite file in WAL with ``synchronous=FULL``: one row, one commit, one fdatasync.

    The rows have the journal's columns and sizes (seq, time, kind, payload,
    a 32-byte digest) and nothing else: no trigger, no read of the previous
    row, no reducer.  Two of its commits are the floor of a warm lease cycle,
    whose acquire and release must each be durable before it returns.  With
    *synchronous* ``"NORMAL"`` a commit makes no sync (the relaxed mode's
    floor: what SQLite and the kernel cost an event in CPU).
    """

    def __init__(self, path: Path, rows: Sequence[tuple[str, str]],
                 synchronous: str = "FULL") -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"PRAGMA synchronous={synchronous}")
        self._conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, time REAL NOT NULL, "
                           "kind TEXT NOT NULL, payload TEXT NOT NULL, digest BLOB NOT NULL)")
        self._rows = list(rows)
        self._next = 0
        self.digest = os.urandom(32)

    def commit(self) -> None:
        """Commit the next row of the cycle, alone."""
        kind, payload = self._rows[self._next % len(self._rows)]
        self._next += 1
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute("INSERT INTO events (time, kind, payload, digest) VALUES (?, ?, ?, ?)",
                           (time.time(), kind, payload, self.digest))
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


def lease_cycle_rows() -> list[tuple[str, str]]:
    """The (kind, payload) rows of a warm lease cycle, with ids of real lengths."""
    from sessiontemp.journal import ids

    m, g, lease = ids.new_manager(), ids.new_generation(), ids.new_lease()
    return [encode(LeaseAcquired(m, g, lease)), encode(LeaseReleased(m, g, lease))]


# -- counting commits ------------------------------------------------------------------


class CommitCounter:
    """Counts the commits of every SQLite connection opened while it is active.

    A commit is a COMMIT, or a write statement run outside any transaction.

    It wraps ``sqlite3.connect`` and follows each connection's statements
    (``set_trace_callback``), so it sees whatever connections the journal
    opens, however it is laid out.  A commit counts as durable when the
    connection's last ``PRAGMA synchronous`` was FULL or EXTRA (or never
    set: the default is FULL), and as relaxed otherwise.
    """

    def __init__(self) -> None:
        self.durable = 0
        self.relaxed = 0
        self._lock = threading.Lock()
        self._connect: Callable[..., sqlite3.Connection] | None = None

    def __enter__(self) -> CommitCounter:
        self._connect = real = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = real(*args, **kwargs)
            level = ["FULL"]
            last = [""]

            def trace(statement: str) -> None:
                words = statement.strip().upper().replace("=", " ").replace(";", " ").split()
                # A write outside BEGIN is its own transaction (the journal
                # commits an event alone so); the trace repeats a statement
                # once per trigger it fires, with the same text.
                alone = (words[:1] in (["INSERT"], ["UPDATE"], ["DELETE"])
                         and not conn.in_transaction and statement != last[0])
                last[0] = statement
                if words[:2] == ["PRAGMA", "SYNCHRONOUS"] and len(words) > 2:
                    level[0] = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}.get(
                        words[2], words[2])
                elif words[:1] in (["COMMIT"], ["END"]) or alone:
                    with self._lock:
                        if level[0] in ("FULL", "EXTRA"):
                            self.durable += 1
                        else:
                            self.relaxed += 1

            conn.set_trace_callback(trace)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._connect is not None
        sqlite3.connect = self._connect  # type: ignore[assignment]

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.durable, self.relaxed


class CommitTally:
    """Counts the group commits of this process while active, and those that carried a sync.

    It wraps :meth:`sessiontemp.journal.store.commit.GroupCommit.commit_batch`, the one
    place events are written (one transaction, one sync at most), with a
    few integer additions per commit: cheap enough to stay on while timing,
    unlike :class:`CommitCounter`'s statement trace.  A commit carried a
    sync when any append it held was durable.
    """

    def __init__(self) -> None:
        self.commits = 0
        self.synced = 0
        self.synced_events = 0
        self._lock = threading.Lock()
        self._real: Callable[..., None] | None = None

    def __enter__(self) -> CommitTally:
        from sessiontemp.journal.store import commit

        self._real = real = commit.GroupCommit.commit_batch
        tally = self

        def counted(group: commit.GroupCommit, batch: list[commit.Pending],
                    own: commit.Pending) -> None:
            real(group, batch, own)
            with tally._lock:
                tally.commits += 1
                if any(p.durable for p in batch):
                    tally.synced += 1
                    tally.synced_events += sum(len(p.events) for p in batch
                                               if p.error is None)

        commit.GroupCommit.commit_batch = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        from sessiontemp.journal.store import commit

        assert self._real is not None
        commit.GroupCommit.commit_batch = self._real  # type: ignore[method-assign]

    def counts(self) -> tuple[int, int, int]:
        """(commits, commits that carried a sync, events those held)."""
        with self._lock:
            return self.commits, self.synced, self.synced_events


def lease_cycle(manager: Manager) -> None:
    """A warm lease cycle: a lease on the live generation, taken and given back."""
    manager.acquire().release()


def harness_command(manager: Manager) -> None:
    """A harness command: a lease, ``true`` run in its directory and waited for, then released."""
    lease = manager.acquire()
    try:
        lease.popen(["true"]).wait()
    finally:
        lease.release()


def count(counter: CommitCounter, manager: Manager, operation: Callable[[], object]
          ) -> tuple[int, int, int]:
    """(durable commits, relaxed commits, events) that *operation* made."""
    durable, relaxed = counter.counts()
    seq = manager.state.seq
    operation()
    after_durable, after_relaxed = counter.counts()
    return after_durable - durable, after_relaxed - relaxed, manager.state.seq - seq


def count_on_fresh(root: Path, kwargs: Mapping[str, object],
                   operation: Callable[[Manager], object]) -> tuple[int, int, int]:
    """:func:`count` of *operation* on a manager of its own at *root*, warmed by one call.

    Counting traces every statement of the connections opened meanwhile;
    a timed loop is kept out of it by counting on a manager made for it.
    """
    with CommitCounter() as counter:
        manager = Manager(root, **kwargs)  # type: ignore[arg-type]
        try:
            manager.retain()
            operation(manager)
            return count(counter, manager, functools.partial(operation, manager))
        finally:
            manager.release()
            manager.close()


# -- history ---------------------------------------------------------------------------

_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"


def generation_id(n: int) -> str:
    """A canonical generation id (16 characters of lower-case base32) numbered *n*."""
    return "".join(_BASE32[(n >> (5 * i)) & 31] for i in reversed(range(16)))


def lifetimes(count: int) -> Iterator[list[Event]]:
    """The events of one manager's life after another, each a list, until *count* events.

    Managers open, retain, make a generation, take and give back leases,
    rotate and remove it, 20 times over, then release and close; every tenth
    is killed instead and found dead and cleaned up by a recovery pass.
    """
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
            g = generation_id(serial * 1000 + generation_serial)
            events += [GenerationCreated(m, g), GenerationReady(m, g, 2049, 10_000 + round_)]
            for k in range(3):
                lease_a = f"{serial:08x}{generation_serial:04x}{k:02x}0a"
                lease_b = f"{serial:08x}{generation_serial:04x}{k:02x}0b"
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
            g = generation_id(serial * 1000 + generation_serial + 1)
            r = f"{serial:016x}"
            events += [GenerationCreated(m, g), GenerationReady(m, g, 2049, 99),
                       LeaseAcquired(m, g, f"{serial:016x}"),
                       RecoveryStarted(r, pid + 1), ManagerDied(m, r),
                       RemovalStarted(g, r, f"manager {m} (pid {pid}) died"),
                       RemovalFinished(g, r, "removed")]
        else:
            events += [Released(m), ManagerClosed(m)]
        n += len(events)
        yield events


def root_bytes(root: Path) -> int:
    """Bytes of the root's own files (journal, its -wal and -shm, any segments, locks).

    Generation and trash directories are the sessions' data, not the
    journal's, and are left out.
    """
    from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX

    total = 0
    for entry in os.scandir(root):
        if entry.name.startswith((GENERATION_PREFIX, TRASH_PREFIX)):
            continue
        if entry.is_dir(follow_symlinks=False):
            total += sum(os.path.getsize(os.path.join(d, f))
                         for d, _, files in os.walk(entry.path) for f in files)
        elif entry.is_file(follow_symlinks=False):
            total += entry.stat(follow_symlinks=False).st_size
    return total


# -- output ----------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
          numeric: Sequence[int] = ()) -> None:
    """Print a Markdown table; the columns numbered in *numeric* are right-aligned."""
    print("| " + " | ".join(headers) + " |")
    print("| " + " | ".join("---:" if i in numeric else "---" for i in range(len(headers)))
          + " |")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print()
    sys.stdout.flush()


def verdict(value: float, goal: float, *, at_most: bool = True) -> str:
    """"met" or "not met" for *value* against *goal*."""
    return "**met**" if (value <= goal if at_most else value >= goal) else "not met"
