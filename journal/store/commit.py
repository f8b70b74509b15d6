"""Group commit: appends queued by many threads, committed in one transaction and one sync.

The seam is two calls: :meth:`GroupCommit.submit` queues an append, and
:meth:`GroupCommit.wait` returns its records once they are durable.  The
thread that waits first while no commit runs leads: it commits, in one
transaction and one sync, every append queued meanwhile, each in its own
savepoint, so that what one append's fold refuses is rolled back alone.  An
event committed alone, which nothing can refuse once written, is one INSERT
in SQLite's autocommit (the warm path of a lease).

The commit holds no folded state.  An append may come with a
:class:`Settle` (its ledger's, :mod:`journal.ledger`): the commit numbers
its records ahead under the queue's lock, asks it inside the transaction
whether its fold ahead :meth:`~Settle.holds` on the numbers it got, lets it
:meth:`~Settle.settle` (and refuse) there, and tells the store's
:class:`Keeper` once what was committed or thrown away.  What the commit
does own is the journal's tail as this store last committed it, and so the
next sequence number an append is numbered ahead with: the one source of both.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from ..errors import JournalError
from ..events import Event, Record, encode
from . import schema
from .digests import chain
from .errors import RETRY
from .link import Link
from .reading import Reader, between

__all__ = ["GroupCommit", "Keeper", "Pending", "Settle"]


class Settle(Protocol):
    """One append's fold ahead, as the commit sees it (a :class:`journal.ledger.Ledger`'s)."""

    def holds(self, first: int) -> bool:
        """Whether the fold ahead stands if the records are numbered from *first*, on what
        committed before them: :meth:`settle` then cannot refuse them."""

    def settle(self, records: list[Record]) -> None:
        """Inside the transaction, in commit order: take *records* as committed, folding
        them again where :meth:`holds` said no; raise to refuse them (rolled back alone).

        For an append queued with *after*, *records* starts with every record
        committed after that event (by other processes, read under the write lock).
        """


class Keeper(Protocol):
    """Whoever keeps the state the appends fold into, as the store sees it: told once a batch.

    The one call up out of a commit (besides :class:`Settle`), and a
    thread of the keeper's that the store waits for before it closes.
    """

    def committed(self, records: list[Record]) -> None:
        """Every record one transaction committed, in order (the leader's thread)."""

    def failed(self) -> None:
        """A transaction failed: what was settled in it is thrown away."""

    @property
    def busy(self) -> bool:
        """Whether a thread of the keeper's (its maintenance) still uses the store."""

    def join(self) -> None:
        """Wait for that thread, unless this is it."""


# ahead(records) -> the append's Settle: the records numbered ahead, folded
# under the queue's lock (see GroupCommit.submit); raises to queue nothing.
Ahead = Callable[[list[Record]], Settle]


# How long a leader of a synced commit waits at most for the threads the last
# commit held to queue again (see GroupCommit._gather).
GATHER_SECONDS = 400e-6


class _StaleTail(Exception):
    """Another writer appended after the last event this store knew of."""


class Pending:
    """One append waiting in the queue for a group commit, and then its outcome."""

    __slots__ = ("after", "done", "durable", "error", "events", "guess", "guessed",
                 "records", "rows", "settle", "time", "waiter", "waiting")

    def __init__(self, events: list[Event], rows: list[tuple[str, str]], time: float,
                 durable: bool, after: int | None = None) -> None:
        self.events = events
        self.rows = rows
        self.time = time
        self.durable = durable
        # The last event the settle has seen: the records committed between
        # it and this append are handed to it before the append's own.
        self.after = after
        self.settle: Settle | None = None
        # The records as folded ahead, on the sequence numbers guessed:
        # committed as they are when the guess holds.
        self.guess: list[Record] | None = None
        self.guessed = 0
        self.records: list[Record] | None = None
        self.error: BaseException | None = None
        self.done = False
        # A follower sleeps on a lock of its own, held until a leader
        # releases it: one wake-up for the one thread concerned, where a
        # shared condition would wake every waiting thread at each commit.
        self.waiter: threading.Lock | None = None
        self.waiting = False


def _wake(pending: Pending) -> None:
    """Wake the thread waiting on *pending* (the caller holds the queue's lock)."""
    pending.waiting = False
    waiter = pending.waiter
    # Unlocked already when a wake-up is still unclaimed (its thread was
    # interrupted before it slept): that one will do.
    if waiter is not None and waiter.locked():
        waiter.release()


class GroupCommit:
    """The queue of a :class:`~sessiontemp.journal.store.Store`'s appends, and the one place
    events are written: one of the classes the store is made of (the connection is its)."""

    _link: Link
    _reader: Reader

    def __init__(self) -> None:
        # Told what each transaction committed or threw away (see Keeper).
        self.keeper: Keeper | None = None
        # (seq, digest) of the last event this store committed: the next
        # batch starts there without reading it, and the sequence trigger
        # (or the primary key) refuses its first row if another process
        # appended meanwhile; the batch then reads the tail and runs again.
        self._known_tail: tuple[int, bytes] | None = None
        # Appends queued for the next leader.
        self._queued = threading.Lock()
        self._queue: list[Pending] = []
        self._leading = False
        # Threads in drain(), waiting for the running commit to end.
        self._idle: list[threading.Lock] = []
        # Appends the last commit held plus those queued while it ran: about
        # how many threads append at once (1 for a lone thread).
        self._width = 1
        # Released by submit once the queue holds _width appends, while a
        # leader waits for that (see _gather).
        self._gathering: threading.Lock | None = None
        # The number the next append queued is numbered ahead from (None:
        # read the tail first).
        self._next_seq: int | None = None

    def _sleeping(self) -> int:
        """How many queued appends sleep behind a running commit."""
        with self._queued:
            return len([p for p in self._queue if p.waiting])

    def _forget_queue(self) -> None:
        """In a forked child: the parent's queue and its leader are not this process's."""
        self._queued = threading.Lock()
        self._queue = []
        self._leading = False
        self._idle = []
        self._width = 1
        self._gathering = None

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
        events = list(events)
        # One event is what nearly every append holds.
        rows = [encode(events[0])] if len(events) == 1 else [encode(e) for e in events]
        # The digest covers the time as SQLite gives it back: a float, and
        # never -0.0, which a REAL column returns as 0.0.
        time = float(time) + 0.0
        pending = Pending(events, rows, time, durable, after)
        with self._queued:
            if ahead is not None:
                if self._next_seq is None:
                    self._next_seq = self._reader.last_seq() + 1
                first = self._next_seq
                guess = [Record(first, time, events[0])] if len(events) == 1 else [
                    Record(first + i, time, e) for i, e in enumerate(events)]
                pending.settle = ahead(guess)
                pending.guess = guess
                pending.guessed = first
            self._queue.append(pending)
            if self._next_seq is not None:
                self._next_seq += len(events)
            full = self._gathering
            if full is not None and len(self._queue) >= self._width:
                self._gathering = None
                full.release()
        return pending

    def wait(self, pending: Pending) -> list[Record]:
        """Return *pending*'s records once they are durable; raise why they are not.

        The thread that finds no commit running leads one, in its own
        thread: with nothing else queued, the append is committed right
        here, with no hand-off.  A thread that finds a commit running
        sleeps until a leader either settles its append or, its own commit
        done, wakes it to lead the next one, with everything that queued
        while the sync ran.
        """
        return self._wait(pending, own=True)

    def _wait(self, pending: Pending, *, own: bool) -> list[Record]:
        """:meth:`wait`; *own* False for a thread that did not queue *pending* (a drain).

        Only the thread that queued an append sleeps on its waiter: a second
        one there (a drain waiting for the last append queued) would share
        the one wake-up a leader gives it, and one of the two would sleep
        for good.  Any other sleeps until the running commit ends.
        """
        queued = self._queued
        while True:
            with queued:
                if pending.done:
                    break
                if self._leading and not own:
                    waiter = threading.Lock()
                    waiter.acquire()
                    self._idle.append(waiter)
                    lead = False
                elif self._leading:
                    if pending.waiter is None:
                        pending.waiter = threading.Lock()
                        pending.waiter.acquire()
                    waiter = pending.waiter
                    pending.waiting = True
                    lead = False
                else:
                    self._leading = lead = True
                    gather = self._width > 1 and pending.durable
                    if not gather:
                        batch, self._queue = self._queue, []
            if not lead:
                # Released by a leader (see _wake); a wake-up that finds
                # nothing to do just goes round again.
                waiter.acquire()
                continue
            if gather:
                try:
                    self._gather()
                except BaseException:
                    # Interrupted before it took anything: what is queued
                    # (its own append too) goes to the next leader.
                    self._hand_over([])
                    raise
                with queued:
                    batch, self._queue = self._queue, []
            try:
                self.commit_batch(batch, pending)
            finally:
                self._hand_over(batch)
            if pending.done:
                # Settled by the batch it just led (done is set in this thread).
                break
        if pending.error is not None:
            raise pending.error
        assert pending.records is not None
        return pending.records

    def _gather(self) -> None:
        """Before a synced commit, give the threads the last commit held time to queue again.

        A leader that commits at once gets only the appends queued while
        the commit before ran, about half the threads: the others were in
        that commit, and are still on their way back with its records.
        Waiting until the queue holds as many appends as the last commit
        and its queue did (:meth:`submit` wakes the leader then), or at most
        :data:`GATHER_SECONDS` (a fraction of a sync), shares one sync among
        nearly all of them.  The leader sleeps meanwhile, leaving the CPU to
        the threads on their way.  Only when more than one thread appended
        lately: a lone thread never waits.
        """
        full = threading.Lock()
        full.acquire()
        with self._queued:
            if len(self._queue) >= self._width:
                return
            self._gathering = full
        try:
            full.acquire(timeout=GATHER_SECONDS)
        finally:
            with self._queued:
                self._gathering = None

    def _hand_over(self, batch: list[Pending]) -> None:
        """End a leader's turn: settle *batch*'s followers, and wake the next leader."""
        with self._queued:
            self._leading = False
            if batch:
                self._width = len(batch) + len(self._queue)
            for p in batch:
                p.done = True
                if p.waiting:
                    _wake(p)
            for p in self._queue:
                if p.waiting:
                    _wake(p)
                    break
            idle, self._idle = self._idle, []
            for waiter in idle:
                waiter.release()

    def drain(self) -> None:
        """Wait until every append queued so far has committed or failed."""
        with self._queued:
            last = self._queue[-1] if self._queue else None
        if last is not None:
            with contextlib.suppress(Exception):
                self._wait(last, own=False)
        while True:
            with self._queued:
                if not self._leading:
                    return
                waiter = threading.Lock()
                waiter.acquire()
                self._idle.append(waiter)
            waiter.acquire()

    def commit_batch(self, batch: list[Pending], own: Pending) -> None:
        """Commit *batch* in one transaction, settling each pending append's outcome.

        The one place events are written: one transaction, one sync at most.
        """
        link = self._link
        tail = self._known_tail
        if len(batch) == 1 and tail is not None and link.ready:
            p = batch[0]
            if len(p.rows) == 1 and (p.settle is None or p.settle.holds(tail[0] + 1)):
                try:
                    if self._write_alone(p, tail):
                        return
                except _StaleTail:
                    tail = None
        try:
            self._write_batch(batch, own, tail)
        except _StaleTail:
            self._write_batch(batch, own, None)

    def _write_alone(self, p: Pending, tail: tuple[int, bytes]) -> bool:
        """Commit *p*, one event that nothing can refuse once written, as one INSERT.

        The warm path of every lease: a transaction of its own (SQLite's
        autocommit), with the seal checked in the statement, so it writes
        nothing into a sealed file; False then, with nothing written, for
        :meth:`_write_batch` to move on to the active segment.  Every file
        of a journal has a ``sealed`` table (see opening), so either the
        INSERT sees the seal or the rollover waits for it (a head retired
        since has no events table any more, but still its seal).  Raises _StaleTail, with
        nothing written, when *tail* is not the last event.
        """
        link = self._link
        kind, payload = p.rows[0]
        seq = tail[0] + 1
        digest = chain(tail[1], seq, p.time, kind, payload)
        committing = False
        try:
            with link.lock:
                link.refuse_if_broken("append to")
                conn = link.conn
                try:
                    if p.durable != link.synced:
                        link.synchronous(p.durable)
                    # From here on the statement commits, and may fail after that.
                    committing = True
                    try:
                        cursor = link.run(schema.INSERT_UNSEALED,
                                             (seq, p.time, kind, payload, digest))
                    except sqlite3.IntegrityError:
                        raise _StaleTail from None
                    except sqlite3.OperationalError:
                        if link.sealed_next(conn) is None:
                            raise
                        written = False
                    else:
                        written = cursor.rowcount == 1
                except sqlite3.Error as e:
                    raise link.translate(e, "append to") from e
        except _StaleTail:
            raise
        except BaseException as e:
            # Once the INSERT was tried, what failed may have come after the
            # record was durable: the journal is asked which it was.
            if not committing or not self._landed(seq, digest):
                self._failed([p], p, e)
                return True
            if not isinstance(e, Exception):
                # Committed, then interrupted: the record stands, and the
                # interruption still reaches the caller of this thread.
                p.error = e
        else:
            if not written:
                return False
        guess = p.guess
        records = p.records = guess if guess is not None else [Record(seq, p.time, p.events[0])]
        self._known_tail = (seq, digest)
        if p.settle is not None:
            # It holds (checked before the INSERT): nothing is left to refuse.
            p.settle.settle(records)
        if self.keeper is not None:
            self.keeper.committed(records)
        if guess is None:
            with self._queued:
                # Queued appends guessed their numbers from the last batch's;
                # the next ones start from what this one committed.
                self._next_seq = seq + 1 + sum(len(q.events) for q in self._queue)
        return True

    def _write_batch(self, batch: list[Pending], own: Pending,
                     tail: tuple[int, bytes] | None) -> None:
        """:meth:`commit_batch` after *tail*, the last event known here (None: read it).

        Raises _StaleTail, with nothing written, when *tail* is not the last.
        The transaction is :meth:`Link.transaction`'s, written out: this is the
        one path every append takes.
        """
        link = self._link
        alone = len(batch) == 1
        last: tuple[int, bytes] | None = None
        # Whether every append got the numbers it guessed, so that those
        # queued since guessed right too.
        exact = True
        seq = 0
        try:
            with link.lock:
                link.refuse_if_broken("append to")
                try:
                    try:
                        # Inside: an interruption right after BEGIN must not
                        # leave the transaction (and the write lock) open.
                        link.begin(any(p.durable for p in batch))
                        conn = link.conn
                        seq, digest = link.tail(conn) if tail is None else tail
                        for p in batch:
                            mark = (seq, digest)
                            guessed = p.guessed == seq + 1
                            settle = p.settle
                            # Folded ahead on what was committed before it:
                            # nothing is left that could refuse it.
                            reuse = settle is None or settle.holds(seq + 1)
                            # A savepoint only where something may yet refuse
                            # this append alone: its fold run again.
                            undo = not alone and not reuse
                            if undo:
                                conn.execute("SAVEPOINT one_append")
                            for kind, payload in p.rows:
                                seq += 1
                                digest = chain(digest, seq, p.time, kind, payload)
                                try:
                                    link.run(schema.INSERT, (seq, p.time, kind, payload, digest))
                                except sqlite3.IntegrityError:
                                    if tail is None or seq != tail[0] + 1:
                                        raise
                                    raise _StaleTail from None
                            if p.guess is not None and guessed:
                                records = p.guess
                            else:
                                exact = False
                                records = [Record(mark[0] + 1 + i, p.time, event)
                                           for i, event in enumerate(p.events)]
                            if settle is not None and not reuse:
                                try:
                                    settle.settle(records if p.after is None else
                                                  [*self._between(conn, p.after, mark[0]),
                                                   *records])
                                except Exception as e:
                                    if alone:
                                        raise
                                    conn.execute("ROLLBACK TO one_append")
                                    conn.execute("RELEASE one_append")
                                    seq, digest = mark
                                    p.error = e
                                    exact = False
                                    continue
                            elif settle is not None:
                                settle.settle(records)
                            if undo:
                                conn.execute("RELEASE one_append")
                            p.records = records
                        # From here on only COMMIT is left, whose failure may
                        # or may not have made the records durable.
                        last = (seq, digest)
                        link.run("COMMIT")
                    except BaseException:
                        link.abort()
                        raise
                except sqlite3.Error as e:
                    raise link.translate(e, "append to") from e
        except _StaleTail:
            raise
        except BaseException as e:
            # Once COMMIT was tried, what failed may have come after the
            # records were durable (an I/O error reported by the commit, a
            # Ctrl-C right after it): the journal is asked which it was.
            if last is None or not self._landed(*last):
                self._failed(batch, own, e)
                return
            if not isinstance(e, Exception):
                # Committed, then interrupted: the records stand, and the
                # interruption still reaches the caller of this thread.
                own.error = e
        self._known_tail = last
        if last is not None and self.keeper is not None:
            self.keeper.committed([r for p in batch if p.records is not None
                                   for r in p.records])
        if not exact or tail is None:
            with self._queued:
                # Queued appends guessed their numbers from the last batch's;
                # the next ones start from what this one committed.
                self._next_seq = (last[0] if last else seq) + 1 + sum(
                    len(p.events) for p in self._queue)

    def _between(self, conn: sqlite3.Connection, after: int, until: int) -> list[Record]:
        """What others committed after *after* (up to *until*), read under the write lock."""
        records = between(conn, after, until)
        if [r.seq for r in records] != list(range(after + 1, until + 1)):
            # Only a rollover moves events out of the active segment, and
            # only a holder of the recovery lock rolls over: a fold this
            # far behind is read again from the whole journal.
            raise JournalError(self._link.path, f"events {after + 1} to {until} followed what "
                               "an append was decided on, and could not all be read while "
                               "appending it", RETRY)
        return records

    def _failed(self, batch: list[Pending], own: Pending, error: BaseException) -> None:
        """Fail every append of *batch* not refused already, and forget what was folded."""
        link = self._link
        self._known_tail = None
        if self.keeper is not None:
            self.keeper.failed()
        with self._queued:
            self._next_seq = None
        for p in batch:
            p.records = None
            if p.error is None:
                # What interrupted the committing thread (a Ctrl-C) is its own.
                p.error = error if p is own or isinstance(error, Exception) else JournalError(
                    link.path, "could not append to it: the thread committing it was "
                    "interrupted", RETRY)

    def _committed(self, seq: int, digest: bytes) -> bool:
        """Whether event *seq* with *digest* is in the journal, after a failed COMMIT."""
        link = self._link
        with link.lock:
            try:
                row = link.conn.execute(
                    "SELECT digest FROM events WHERE seq = ?", (seq,)
                ).fetchone()
            except sqlite3.Error as e:
                link.broken = f"whether event {seq} was committed could not be read back ({e})"
                raise link.translate(e, "read") from e
        return row is not None and bytes(row[0]) == digest

    def _landed(self, seq: int, digest: bytes) -> bool:
        """:meth:`_committed`, False when even that cannot be told (the link is then broken)."""
        try:
            return self._committed(seq, digest)
        except JournalError:
            return False
