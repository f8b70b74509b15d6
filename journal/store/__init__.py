"""The append-only SQLite journal that holds the events: one :class:`Store`.

One table, ``events``, ordered by a global, gap-free sequence number.  The
database itself refuses UPDATE and DELETE (triggers), so nothing written is
ever rewritten.  Each record carries a digest chained over its predecessor's,
so a changed, removed or reordered record is detected by :meth:`Store.verify`.

A second table, ``checkpoints``, holds what :mod:`sessiontemp.journal.checkpoint` derives
from the events: the reducer's state at a few sequence numbers, each tied to
the digest of its event, so that a replay can start there.  It is a cache:
any row of it may be deleted and nothing is lost.

Durability: WAL with ``synchronous=FULL`` makes every commit one fdatasync of
the -wal file, durable across power loss; :meth:`Store.append` returns only
after that commit.  (A rollback journal with FULL is not durable across power
loss, because SQLite does not sync the directory after unlinking it.)

Several processes may append at once: each commit is one write transaction
(``BEGIN IMMEDIATE``, or a single INSERT for an event committed alone), so
writers queue on SQLite's lock (with a bounded wait) and the sequence
numbers they get never interleave or repeat.

The :class:`Store` is one class, its methods written in the modules of the
package by concept: the group commit (:mod:`.commit`), the named reads
(:mod:`.queries`), the checkpoint rows (:mod:`.checkpoints`) and the kept
segments and their retirement (:mod:`.retirement`) are the classes it is
made of; its connections (:mod:`.link`, and :mod:`.reading` for the kept
history) are objects it holds.  Callers use only what this module exports.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from ..errors import JournalCorrupt, JournalError, RuleViolation
from ..events import Event, Record
from ..segments import DEFAULT_RETENTION, Retention
from . import errors, opening, registry
from .checkpoints import Checkpoints
from .commit import Ahead, GroupCommit, Keeper, Pending, Settle
from .digests import chain
from .link import Link, SegmentHook
from .queries import Queries
from .reading import Reader
from .retirement import History, Retirement, SegmentInfo
from .rollover import Rollover
from .schema import APPLICATION_ID, SCHEMA_VERSION, SEGMENTED_VERSION
from .verify import verify

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SEGMENTED_VERSION", "History", "Keeper",
           "Pending", "SegmentInfo", "Settle", "Store", "chain"]


class Store(GroupCommit, Queries, Checkpoints, Retirement):
    """An open journal file.

    ``readonly=True`` opens without taking any lock or writing anything, so
    it can inspect a journal that live managers are appending to, or a copy
    without its -wal file.  ``busy_timeout`` bounds how long an append waits
    for another process's write, in seconds.

    A read-only open falls back to ``immutable`` reading when SQLite cannot
    open the file with its locks (a copy on a read-only medium, or in a
    directory where its -shm file cannot be made); ``immutable=True`` asks
    for that at once.  Immutable reading sees only what is in the main
    file (a -wal beside it is ignored) and must not be used on a journal
    that is being written.
    """

    def __init__(
        self,
        path: os.PathLike[str] | str,
        *,
        readonly: bool = False,
        immutable: bool = False,
        busy_timeout: float = 30.0,
        retention: Retention = DEFAULT_RETENTION,
        step_hook: SegmentHook | None = None,
    ) -> None:
        # Before anything a fork could find half made (see registry.look_up).
        registry.look_up()
        # Set in a forked child's copy, which never touches the file again.
        self._forked = False
        registry.join(self)
        self.path = Path(path)
        self.retention = retention
        link = self._link = Link(self.path, readonly=readonly, immutable=immutable,
                                 busy_timeout=busy_timeout, step_hook=step_hook)
        self._reader = Reader(link)
        self._rollover = Rollover(link, self._reader)
        # How many events a long-lived writer appends between its maintenances
        # (checkpoint, rollover, retirement): its keeper's to schedule.
        self.maintenance_every = 20_000
        GroupCommit.__init__(self)
        opening.open_link(link, self)
        link.ready = True
        registry.close_abandoned()

    # -- what the store is ---------------------------------------------------

    @property
    def readonly(self) -> bool:
        """Opened without taking any lock or writing anything."""
        return self._link.readonly

    @property
    def immutable(self) -> bool:
        """Read as the file is, without any lock or -shm file (implies :attr:`readonly`)."""
        return self._link.immutable

    @property
    def broken(self) -> str | None:
        """Why nothing more is written through this store (a failed write that could not be
        undone, or a commit whose outcome could not be read back); None while it writes."""
        return self._link.broken

    @broken.setter
    def broken(self, reason: str | None) -> None:
        self._link.broken = reason

    @property
    def rollover_failed(self) -> str | None:
        """Why the last rollover could not start a new segment, for the caller to report."""
        return self._rollover.failed

    @rollover_failed.setter
    def rollover_failed(self, reason: str | None) -> None:
        self._rollover.failed = reason

    @property
    def rolled_over(self) -> bool:
        """Whether the journal has rolled over: its active segment is not the head."""
        return not self._link.active.is_head

    # -- writing (the group commit is GroupCommit's) -----------------------------

    def keep(self, keeper: Keeper) -> None:
        """Tell *keeper* (:attr:`keeper`, a :class:`journal.ledger.Ledger`) once a transaction
        what it committed or threw away: one keeper a store."""
        if self.keeper is not None and self.keeper is not keeper:
            raise ValueError(f"{self.path}: the store's appends are kept by another ledger "
                             "already; open another Store for a second one")
        self.keeper = keeper

    def append(
        self,
        events: Sequence[Event],
        *,
        time: float,
        durable: bool = True,
        ahead: Ahead | None = None,
        after: int | None = None,
    ) -> list[Record]:
        """Commit *events* as one transaction and return them as records.

        Returns only once the commit is durable.  Either all of *events* are
        committed, in order and with consecutive sequence numbers, or none is
        and the error says why.  *ahead* and *after* are :meth:`submit`'s.

        With ``durable=False`` the commit is not synced on its own: it is
        written to the -wal file (a process crash loses nothing), and made
        durable by the next durable commit (a power loss may lose it).

        A commit whose outcome SQLite leaves uncertain (an I/O error while
        committing) is read back: the records are returned if they are in
        the journal after all.  When even that cannot be told, the store
        marks itself :attr:`broken` and refuses every later write.

        Appends from several threads at once share transactions and syncs
        (see :meth:`submit`).
        """
        return self.wait(self.submit(events, time=time, durable=durable, ahead=ahead,
                                     after=after))

    def active_size(self) -> int:
        """Bytes the active segment's database holds, what is still in its -wal included.

        Not the files' sizes: a -wal file keeps the largest size it ever
        reached, however little it holds since.
        """
        return self._link.active_size()

    # -- reading -------------------------------------------------------------

    def rows(
        self, *, after: int = 0, until: int | None = None, batch: int = 20_000
    ) -> Generator[tuple[int, float, str, str, bytes], None, None]:
        """Raw ``(seq, time, kind, payload, digest)`` rows after *after* (up to *until*).

        Fetched *batch* at a time, all from one read snapshot, so a journal of
        millions of events is never held in memory at once.
        """
        return self._reader.rows(after=after, until=until, batch=batch)

    def records(
        self, *, after: int = 0, until: int | None = None, tolerant: bool = False
    ) -> Generator[Record, None, None]:
        """Decoded records after sequence number *after* (up to *until*), in order.

        Raises :class:`JournalCorrupt` at a gap in the sequence or a record
        that does not decode: nothing after such a point is trusted.  With
        *tolerant*, a gap is passed over and a record that does not decode
        comes as an :class:`~sessiontemp.journal.events.Unreadable` event, for a
        tolerant fold to refuse and hold on to what it may name.
        """
        return self._reader.records(after=after, until=until, tolerant=tolerant)

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        """Rows of a read-only SQL query, errors translated and naming the file."""
        return self._reader.query(sql, params)

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """Make every read inside the block see the journal at one moment.

        A read transaction on every kept file at once, taken again while
        another process's rollover or retirement moves the files under it
        (``JournalBusy`` if they moved at each of ``reading.TRIES``
        tries): under WAL it blocks no writer; their checkpoints only stop
        short of it until the block ends.  A block inside another reads the
        same moment.
        """
        return self._reader.snapshot()

    def last_seq(self) -> int:
        """The sequence number of the newest committed event, 0 when empty.

        Inside :meth:`snapshot`, as of the snapshot; otherwise what
        the active segment's tail says, the one place the journal's end is read.
        """
        return self._reader.last_seq()

    def release_history(self) -> None:
        """Close the connection that reads the sealed segments, if one is open.

        It holds every kept segment attached, and what SQLite and Python
        keep for each; a store that only appends needs none of it between
        the reads of older history (a recovery or maintenance pass, an
        inspection), and the next such read attaches them again.
        """
        self._reader.release()

    # Named reads for inspection: each answers one question with one query,
    # so no reader outside the store writes SQL over the payload format.

    def verify(self) -> list[str]:
        """Check SQLite's integrity, the sequence and the digest chain; return the problems."""
        return verify(self._link, self._reader)

    # -- checkpoints ---------------------------------------------------------

    # -- retirement ----------------------------------------------------------

    def forget_files(self, files: set[str]) -> None:
        """Let go of this store's connections to any of *files*, which were retired."""
        link = self._link
        with link.lock:
            if link.identity is None:
                # Closed, or a forked copy's: nothing of it is closed here.
                return
            self._reader.forget_files(files)
            if link.active.file in files:
                # Sealed and retired before this store looked again: it
                # moves on now, as its next append would.
                with contextlib.suppress(JournalError):
                    link.open_active()

    # -- closing -------------------------------------------------------------

    def close(self) -> None:
        if self._forked:
            # A parked copy (forget): its locks may be held by a parent's thread.
            return
        # Before the locks: the keeper's maintenance needs them to finish.
        keeper = self.keeper
        if keeper is not None:
            keeper.join()
        with registry.opening(), self._link.lock:
            self._close_locked()
        registry.close_abandoned()

    def _close_locked(self) -> None:
        """Close the connections; the caller holds the registry's lock and the link's."""
        link = self._link
        self._reader.drop()
        link.close_superseded()
        if link.identity is not None:
            # Leaving the registry: the store is closed from here.
            registry.closed(link.identity, self)
            link.identity = None
            link.close()

    def close_if_free(self) -> bool:
        """Close now unless a maintenance runs or the lock is held (an abandoned store's try)."""
        keeper = self.keeper
        if (keeper is not None and keeper.busy) or not self._link.lock.acquire(blocking=False):
            return False
        try:
            self._close_locked()
        finally:
            self._link.lock.release()
        return True

    def abandon(self) -> None:
        """Close a store whose owner was dropped unclosed, without waiting for any lock.

        For a garbage-collected manager's finalizer, which runs in whichever
        thread the collection happens in, at any point of it: that thread
        may hold this module's lock or this store's, and another thread
        (its maintenance) may be using the store.  So the locks are only
        tried; a store that cannot be closed now is closed by the next
        store this process opens or closes.
        """
        if self._forked or self._link.identity is None:
            return
        registry.abandon(self)

    def forget(self) -> None:
        """Let go of a connection inherited through fork() without touching the file.

        The parent still uses the same SQLite file: the child must neither
        write through the copy nor close it, not even as its interpreter
        ends: closing runs SQLite's clean-up of a last connection
        (sqlite3WalClose), which may checkpoint and delete a -wal the parent
        still uses, and which takes a mutex that a thread of the parent may
        have held at the fork, hanging the child for good.  So each copy is
        parked, with a reference that is never given back.
        """
        # No lock: this runs in a forked child's at-fork handler, where any
        # lock may have been held by a thread of the parent at the fork; and
        # the registry has already counted none of the child's connections open.
        if self._forked:
            return
        self._forked = True
        # Any attribute may be missing: the copy of a store a thread of the
        # parent was opening.  The cursor too: freeing it resets its
        # statement, under the same mutex.
        link = self.__dict__.get("_link")
        reader = self.__dict__.get("_reader")
        span = reader.parked() if reader is not None else None
        for held in ([] if link is None else link.parked()) + ([] if span is None else [span]):
            registry.park(held)
        # The parent's queue and its leader are not this process's.
        self._forget_queue()

    # -- errors --------------------------------------------------------------

    def corrupt(self, error: RuleViolation) -> JournalCorrupt:
        """Name this file in a rule violation found while reading it."""
        return errors.corrupt(self.path, error)
