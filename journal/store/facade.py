"""The append-only SQLite file that holds the events.

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
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Generator, Iterator, Sequence
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
from .rollover import CatchUp, Rollover
from .schema import APPLICATION_ID, SCHEMA_VERSION, SEGMENTED_VERSION
from .verify import verify

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SEGMENTED_VERSION", "History", "Keeper",
           "Pending", "SegmentInfo", "Settle", "Store", "chain"]


class Store:
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
        self._queries = Queries(self.path, self._reader)
        self._rollover = Rollover(link, self._reader)
        self._checkpoints = Checkpoints(link, self._reader, self._rollover, retention)
        self._retirement = Retirement(link, self._reader, retention)
        # How many events a long-lived writer appends between its maintenances
        # (checkpoint, rollover, retirement): its keeper's to schedule.
        self.maintenance_every = 20_000
        self._commits = GroupCommit(link, self._reader.last_seq)
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

    # -- who keeps the state ---------------------------------------------------

    @property
    def keeper(self) -> Keeper | None:
        """Whoever keeps the state this store's appends fold into (a
        :class:`journal.ledger.Ledger`), told what each transaction commits."""
        return self._commits.keeper

    def keep(self, keeper: Keeper) -> None:
        """Tell *keeper* once a transaction what it committed or threw away (one keeper a store)."""
        if self._commits.keeper is not None and self._commits.keeper is not keeper:
            raise ValueError(f"{self.path}: the store's appends are kept by another ledger "
                             "already; open another Store for a second one")
        self._commits.keeper = keeper

    # -- writing -------------------------------------------------------------

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

    def submit(
        self,
        events: Sequence[Event],
        *,
        time: float,
        durable: bool = True,
        ahead: Ahead | None = None,
        after: int | None = None,
    ) -> Pending:
        """Queue *events* for the next group commit; :meth:`wait` for it to be durable.

        Group commit: whoever waits first while no commit runs leads: it
        commits, in one transaction and one sync, every append queued
        meanwhile, each in its own savepoint, so that what one append's
        ledger's fold refuses is rolled back alone.

        *ahead* is how a :class:`journal.ledger.Ledger` threads its state
        through the queue: ``ahead(records)`` runs here at once, on the
        records numbered as they will most likely be, and raises (queueing
        nothing) if it refuses them; it returns the append's
        :class:`Settle`, which the transaction asks whether that fold holds
        on the numbers the records got, and lets settle them (folding again
        where they moved, and refusing this append alone: whatever it raises
        rolls the append back and propagates, so nothing it refuses is ever
        written).  With *after*, the last event the caller folded, the settle
        is handed first every record committed after it (by other processes,
        read there, under the write lock), then the append's own.
        """
        return self._commits.submit(events, time=time, durable=durable, ahead=ahead,
                                    after=after)

    def wait(self, pending: Pending) -> list[Record]:
        """Return *pending*'s records once they are durable; raise why they are not.

        The thread that finds no commit running leads one, in its own
        thread: with nothing else queued, the append is committed right
        here, with no hand-off.  A thread that finds a commit running
        sleeps until a leader either settles its append or, its own commit
        done, wakes it to lead the next one, with everything that queued
        while the sync ran.
        """
        return self._commits.wait(pending)

    def drain(self) -> None:
        """Wait until every append queued so far has committed or failed."""
        self._commits.drain()

    def active_size(self) -> int:
        """Bytes the active segment's database holds, what is still in its -wal included.

        Not the files' sizes: a -wal file keeps the largest size it ever
        reached, however little it holds since.
        """
        return self._link.active_size()

    def rollover_due(self) -> bool:
        """Whether a retirement pass should seal the active segment at a checkpoint first.

        See :attr:`Retention.retirement_rollover_bytes`; checked again by
        :meth:`save_checkpoint` inside its transaction.
        """
        return self._retirement.rollover_due()

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

    def extent(self) -> tuple[int | None, int | None, int]:
        """``(first seq, last seq, count)`` of the events; ``(None, None, 0)`` when empty."""
        return self._queries.extent()

    def times_of(self, seqs: Collection[int]) -> dict[int, float]:
        """The time of each event in *seqs* that exists, by seq."""
        return self._queries.times_of(seqs)

    def seq_at(self, time: float) -> int:
        """The newest event written at or before *time*, 0 when none was."""
        return self._queries.seq_at(time)

    def kind_counts(self, *, excluding: Collection[str] = ()) -> dict[str, int]:
        """How many events there are of each kind stored (known to this version or not),
        leaving out *excluding*: grouping fewer rows is what makes it fast."""
        return self._queries.kind_counts(excluding=excluding)

    def generation_count(self) -> int:
        """How many distinct generations were created or found (as strays) and removed."""
        return self._queries.generation_count()

    def generation_rows(
        self, generations: Collection[str], *, until: int | None = None,
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows of the life of *generations*, in order.

        Their creation, readiness, commands, removals and reappearances: every
        record whose ``generation`` field names one of them, except leases
        (which a finished generation no longer has).  Up to *until* when
        given.  Read through an index, so its cost follows the rows found,
        not the journal's length.
        """
        return self._queries.generation_rows(generations, until=until)

    def manager_ends(self, managers: Collection[str]) -> dict[str, int]:
        """The seq of the close or death of each of *managers* the journal has ended."""
        return self._queries.manager_ends(managers)

    def rows_naming(
        self, values: Collection[str], *, after: int = 0, kinds: Collection[str] = (),
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows after *after* whose payload holds one of
        *values* as a string, in order; of *kinds* only, when given.

        A superset: a value may stand in any field, so callers decode each
        row and keep those naming it where they look.  More than 50 values
        read every row after *after*.
        """
        return self._queries.rows_naming(values, after=after, kinds=kinds)

    def rows_where(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        since_time: float | None = None,
        until_time: float | None = None,
        kinds: Collection[str] = (),
        naming: Collection[str] = (),
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows after seq *after*, in order, that are at
        most *until*, written in ``[since_time, until_time]``, of one of *kinds* and whose
        payload holds every one of *naming* as a string (a superset: decode to be sure)."""
        return self._queries.rows_where(after=after, until=until, since_time=since_time,
                                        until_time=until_time, kinds=kinds, naming=naming)

    def records_of(self, kinds: Collection[str], *, until: int | None = None
                   ) -> Iterator[Record]:
        """Decoded records of *kinds* up to *until*, in order.

        Raises :class:`JournalCorrupt` for one that does not decode.
        """
        return self._queries.records_of(kinds, until=until)

    def verify(self) -> list[str]:
        """Check SQLite's integrity, the sequence and the digest chain; return the problems."""
        return verify(self._link, self._reader)

    # -- checkpoints ---------------------------------------------------------

    def save_checkpoint(self, seq: int, format: int, state: bytes, *, keep: int,
                        spacing: int = 0, roll_over: bool = False,
                        catch_up: CatchUp | None = None) -> None:
        """Store *state*, derived from events 1 to *seq*, and keep only the newest *keep*.

        With *spacing*, older ones are kept too: the newest of each run of
        *spacing* sequence numbers (``seq // spacing``), for the newest
        *keep* runs, so that frequent checkpoints still leave some far
        enough back for a reader of the past to start near where it asks.
        One transaction: either the new row is in and the old ones beyond
        these are gone, or nothing changed.  Raises :class:`ValueError`
        when there is no event *seq*; does nothing when event *seq* was
        already retired.  When the active segment has grown past
        ``retention.segment_bytes``, the same transaction starts a new
        segment with this checkpoint as its first content and seals the old;
        *roll_over* does so from ``retention.retirement_rollover_bytes`` on.

        The new segment starts right after the journal's last event, and its
        first content must be the state there (see :func:`segments.create`):
        when events follow *seq* (appended by others since the caller
        replayed), *catch_up* folds them onto *state*, here, under the write
        lock, and its result is that first content.  Without *catch_up*, or
        when it raises, the rollover waits for a later checkpoint.
        """
        self._checkpoints.save(seq, format, state, keep=keep, spacing=spacing,
                               roll_over=roll_over, catch_up=catch_up)

    def checkpoints(self, *, until: int | None = None, recent: bool = False
                    ) -> list[tuple[int, int, bool]]:
        """``(seq, format, chained)`` of each checkpoint at or before *until*, newest first.

        ``chained`` is False when the checkpoint's digest is not that of
        event *seq* here: it was derived from another history (a journal
        moved aside and started afresh, or rows copied between files).
        A journal without the table (an older one opened read-only) has none.

        *recent*: only those the active segment holds from its base on,
        read from it alone (no other segment is opened), and none when
        another segment holds events after the base asked for.  No older
        segment holds a newer checkpoint than these (its events end at the
        base), so the newest usable among them is the newest usable of all;
        when none is usable, ask again without *recent*.  A journal that
        never rolled over answers as without it.
        """
        return self._checkpoints.listing(until=until, recent=recent)

    def checkpoint_state(self, seq: int) -> bytes:
        """The state bytes of the checkpoint at *seq*; KeyError when there is none."""
        return self._checkpoints.state(seq)

    # -- retirement ----------------------------------------------------------

    def segments(self) -> list[SegmentInfo]:
        """Every kept segment of the journal, oldest first, the active one last."""
        return self._retirement.segments()

    def history(self) -> History:
        """Where the kept history starts, and up to which event and when older was retired."""
        return self._retirement.history()

    def retire(self, *, now: float) -> list[Path]:
        """Delete the oldest retired segments beyond :attr:`retention`; return their paths.

        A sealed segment is retired once a later segment starts with the
        checkpoint of its base.  Run by one
        process at a time (recovery's lock); writers and readers of other
        segments are not disturbed.
        Each step is safe to crash after: the head records the retirement
        first, then files go oldest first, so what is kept is always one
        unbroken run of history up to the active segment.
        """
        return self._retirement.retire(now=now)

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
        keeper = self._commits.keeper
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
        keeper = self._commits.keeper
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
        commits = self.__dict__.get("_commits")
        span = reader.parked() if reader is not None else None
        for held in ([] if link is None else link.parked()) + ([] if span is None else [span]):
            registry.park(held)
        if commits is not None:
            # The parent's queue and its leader are not this process's.
            commits.forget()

    # -- errors --------------------------------------------------------------

    def corrupt(self, error: RuleViolation) -> JournalCorrupt:
        """Name this file in a rule violation found while reading it."""
        return errors.corrupt(self.path, error)
