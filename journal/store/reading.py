"""Reading the kept history as one table, however many segment files hold it.

While there is only the head, reads go through the link's own connection;
once segments exist, through a connection that attaches every kept segment
and shows them as one ``events``, one ``checkpoints`` and one ``bases``
view, so every query reads the kept history as if it were one table.  That
spanning connection is built again whenever the segment directory, the head
or the kept segments changed, and only when a read needs more than the
active segment (see :meth:`Reader.after`).

Another process may roll the journal over, retire segments or drop the
head's tables between any two steps of a read: a snapshot
(:meth:`Reader.snapshot`) pins every attached file at once and checks that
nothing moved while it did, and a single read that fails while the kept
segments moved is read again (see :data:`TRIES`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Final, TypeAlias, TypeVar

from .. import segments
from ..errors import (
    JournalBusy,
    JournalError,
    RuleViolation,
    SessionTempError,
)
from ..events import Event, Record, Unreadable, decode
from ..segments import MAX_KEPT, Segment
from . import errors
from .link import Link
from .spanning import attach, table_names

__all__ = ["TRIES", "Layout", "Reader", "between"]

T = TypeVar("T")

# How often a read is tried while another process moves the kept segments
# under it.  Each try that fails saw the segment files move (a rollover's
# new file, a retirement's deletion, the head's tables dropped) between
# its listing and its read: what it read is no evidence about the journal,
# and a try takes milliseconds, so a neighbour would have to roll over or
# retire more than once per try, twenty times running, to exhaust it.
# Then the read is refused as busy (retry), never answered from a view
# that mixes two layouts; a read that fails while nothing moved is the
# journal's own error, at the first try.
TRIES: Final = 20

# (head, segment directory, the kept segments): what a span was built for.
# Every file is named after the event it starts at, so a name never comes
# back once retired; only a journal started afresh reuses names, and the
# head's and the directory's inodes tell that.
Layout: TypeAlias = tuple[tuple[int, int] | None, tuple[int, int] | None, tuple[str, ...]]


def between(conn: sqlite3.Connection, after: int, until: int) -> list[Record]:
    """The records *conn* holds after *after* up to *until*, in order; gaps left to the caller.

    One that does not decode comes as :class:`Unreadable`, for a tolerant fold to refuse.
    """
    rows = conn.execute(
        "SELECT seq, time, kind, payload FROM events WHERE seq > ? AND seq <= ? ORDER BY seq",
        (after, until)).fetchall() if after < until else []
    records = []
    for number, time, kind, payload in rows:
        event: Event
        try:
            event = decode(int(number), kind, payload)
        except RuleViolation as e:
            event = Unreadable(kind, payload, e.reason)
        records.append(Record(int(number), float(time), event))
    return records


class Reader:
    """The reads of one store: its spanning connection, and rows streamed from one snapshot."""

    def __init__(self, link: Link) -> None:
        self._link = link
        # The reading connection over every kept segment, and what it was built for.
        self._span: sqlite3.Connection | None = None
        self._span_key: object = None
        self._span_schema = 0
        # The schema name each kept segment (by its file) is attached under there,
        # the tables each schema had when the span's views were made over them,
        # and the layout of the files it was built for.
        self._attached: dict[str, str] = {}
        self._tables: tuple[frozenset[str], ...] = ()
        self._layout: Layout | None = None
        # The connection a snapshot reads through until it ends.
        self._pinned: sqlite3.Connection | None = None

    @property
    def spanning(self) -> bool:
        """Whether the connection over the kept segments is open."""
        return self._span is not None

    @property
    def in_snapshot(self) -> bool:
        """Whether a :meth:`snapshot` is open."""
        return self._pinned is not None

    def attached(self, conn: sqlite3.Connection) -> dict[str, str]:
        """The schema each kept segment is attached under in *conn*, if it is the span."""
        return self._attached if conn is self._span else {}

    def spans(self, conn: sqlite3.Connection) -> bool:
        """Whether *conn* is the connection over every kept segment (not one file's)."""
        return conn is self._span

    def connection(self) -> sqlite3.Connection:
        """The connection every read goes through (the caller holds the link's lock)."""
        if self._pinned is not None:
            # Inside a snapshot: it reads the files as they were when it began,
            # whatever has moved since (even the directory gone).
            return self._pinned
        link = self._link
        folder = segments.folder(link.path)
        try:
            there, head = os.stat(folder), os.stat(link.path)
        except FileNotFoundError:
            if self._span is not None:
                self.drop()
            return link.conn
        # The kept segments are part of the key: a rollover renames its new
        # file into the directory before it seals the old one, so a span
        # built in between leaves the new file out (unsealed predecessor),
        # and nothing in the directory or the head changes when the seal
        # commits.  Cheap: a listing, and seals seen are remembered.
        kept = link.resolve(remove=False)[-MAX_KEPT:]
        key: object = ((there.st_mtime_ns, head.st_mtime_ns),
                       tuple(segment.file for segment in kept))
        if self._span is None or key != self._span_key or self._stale():
            self._leave_span()
            self._span = self.span(kept)
            self._span_key = key
            self._layout = ((head.st_dev, head.st_ino), (there.st_dev, there.st_ino),
                            tuple(segment.file for segment in kept))
        return self._span

    def layout(self) -> Layout:
        """The files a span would be built for now (the caller holds the link's lock)."""
        link = self._link
        try:
            head: tuple[int, int] | None = _identity(os.stat(link.path))
        except OSError:
            head = None
        try:
            there: tuple[int, int] | None = _identity(os.stat(segments.folder(link.path)))
        except OSError:
            there = None
        if there is None:
            return head, None, ()
        try:
            kept = link.resolve(remove=False)[-MAX_KEPT:]
        except OSError:
            # Whatever refuses the listing now, the layout is not the one read.
            return head, there, ("?",)
        return head, there, tuple(segment.file for segment in kept)

    def _moved(self, conn: sqlite3.Connection) -> bool:
        """Whether the files *conn* reads are no longer what would be read now (holding lock)."""
        if conn is self._span:
            return self._layout != self.layout()
        # The link's own connection: read while the journal had no segment
        # directory; a rollover since has made one.
        head, there, _ = self.layout()
        return there is not None or head != self._link.identity

    def _leave_span(self) -> None:
        """Let go of the span for a newer one (holding lock); a read from it ends first."""
        old, self._span = self._span, None
        self._span_key = None
        self._layout = None
        if old is not None:
            self._link.let_go(old)

    def retrying(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """*read* on :meth:`connection`, tried again while the kept segments move under it.

        The caller holds the link's lock.  Outside a snapshot each statement
        pins the files it reads when it starts; a span made for a listing
        another process has changed since (a file deleted, the head's tables
        dropped) fails there, and is made again for the new listing.  A
        failure is the journal's own once two tries in a row failed on the
        same layout (a span that could not be made, the first time).
        Inside a snapshot nothing is tried again: its files are pinned.
        """
        seen: Layout | None = None
        for _ in range(TRIES):
            conn = None
            try:
                conn = self.connection()
                return read(conn)
            except (sqlite3.Error, OSError) as e:
                if self._pinned is not None:
                    raise self._translated(e) from e
                if seen is None and conn is not None:
                    seen = self._layout if conn is self._span else self._bare()
                now = self.layout()
                if now == seen:
                    raise self._translated(e) from e
                seen = now
                # Made for a listing that moved: made again at the next try.
                self._leave_span()
        raise self._busy()

    def _bare(self) -> Layout:
        """The layout the link's own connection reads: the head alone."""
        return self._link.identity, None, ()

    def _translated(self, e: sqlite3.Error | OSError) -> OSError:
        """*e* as the journal's error: a SessionTempError as it is, the others named and fixed."""
        if isinstance(e, sqlite3.Error):
            return self._link.translate(e, "read")
        if isinstance(e, SessionTempError):
            return e
        # A listing refused (no descriptor left): never a bare OSError.
        return errors.unopenable(self._link.path, e)

    def _replaced(self) -> JournalError:
        return JournalError(self._link.path, "could not read it: it was moved aside and a new "
                            "journal was started at its name while it was being read",
                            "Read it again: the new journal is read then")

    def _busy(self) -> JournalBusy:
        return JournalBusy(self._link.path, f"could not read it: its segments were rolled over "
                           f"or retired by another process at each of {TRIES} tries",
                           "Retry; nothing already committed was lost")

    def after(self, after: int) -> sqlite3.Connection:
        """A connection that holds every event after *after* (the caller holds the link's lock).

        The link's own connection when its segment, the active one, holds
        them all: it is not sealed and its events start at or before the
        one after *after*.  That is all an open's recovery reads (the newest
        checkpoint and the events after it), so an open attaches no sealed
        segment for it; anything older goes through :meth:`connection`.  Not
        sealed when looked at: a seal committed after that only stops the
        read where the segment ends, as a read made just before the seal.
        """
        link = self._link
        # A journal that never rolled over reads its head as it always did.
        if not link.active.is_head and after >= link.active.base and not self.in_snapshot:
            try:
                if link.seal() is None:
                    return link.conn
            except sqlite3.Error as e:
                raise link.translate(e, "read") from e
        return self.connection()

    def _stale(self) -> bool:
        # A retirement drops the head's tables; the head's mtime changes
        # only once its -wal is checkpointed, so the schema is asked too.
        assert self._span is not None
        try:
            (version,) = self._span.execute("PRAGMA s0.schema_version").fetchone()
        except sqlite3.Error:
            return True
        return bool(version != self._span_schema)

    def drop(self) -> None:
        """Close the spanning connection, if open (the caller holds the link's lock)."""
        if self._span is not None:
            with contextlib.suppress(sqlite3.Error):
                self._span.close()
            self._span = None
            # Nor what was attached to it: the paths of segments perhaps long gone.
            self._span_key = None
            self._layout = None
            self._attached = {}
            self._tables = ()

    def forget_files(self, files: set[str]) -> None:
        """Let go of the span if it has any of *files* (retired) attached (holding the lock)."""
        span = self._span
        if span is not None and span is not self._pinned and (files & self._attached.keys()):
            self._leave_span()

    def span(self, kept: list[Segment], *, again: bool = True) -> sqlite3.Connection:
        """A new connection that attaches every segment of *kept* and shows them as one."""
        made = attach(self._link, kept, again=again)
        self._span_schema, self._attached, self._tables = made.schema, made.attached, made.tables
        return made.conn

    def stream(
        self, sql: str, params: tuple[object, ...], batch: int, *, after: int | None = None
    ) -> Generator[Any, None, None]:
        """Rows of *sql*, fetched *batch* at a time from one read snapshot, errors translated.

        *after*: *sql* reads only events after this one (see :meth:`after`).

        On the connection this store's appends go through, no read is left
        open once the lock is let go: the snapshot it held would fail the
        next append there at once after another process's commit
        (SQLITE_BUSY_SNAPSHOT).  A read that ends within its first *batch*
        rows is read whole under the lock; a longer one starts again on a
        read-only connection of its own (:meth:`Link.connect_reader`), or,
        when none can be had (a process short of descriptors), is read whole
        under the lock.
        """
        link = self._link
        whole: Iterable[Any] | None = None
        with link.lock:
            try:
                alone = None if after is None else self.after(after)
                if alone is not None and not self.spans(alone):
                    # The active segment alone: the link's own connection.
                    conn, cursor = alone, alone.execute(sql, params)
                else:
                    # Across segments: as any read of them, tried again if they move.
                    conn, cursor = self.retrying(lambda conn: (conn, conn.execute(sql, params)))
                if conn is link.conn and not link.readonly:
                    chunk = cursor.fetchmany(batch)
                    if len(chunk) == batch:
                        whole = self._alone(sql, params, batch)
                        if whole is None:
                            # No connection of its own: the rest under the lock too.
                            chunk += cursor.fetchall()
                    cursor.close()
                    if whole is None:
                        whole = chunk
                else:
                    # Until the last row: a connection left for a newer one
                    # meanwhile (a rollover, a retirement) is closed only then.
                    link.stream_started(conn)
            except sqlite3.Error as e:
                raise link.translate(e, "read") from e
        if whole is not None:
            yield from whole
            return
        try:
            while True:
                with link.lock:
                    try:
                        chunk = cursor.fetchmany(batch)
                    except sqlite3.Error as e:
                        raise link.translate(e, "read") from e
                if not chunk:
                    return
                yield from chunk
        finally:
            # A generator closed late (collected after the store failed or
            # closed) must not print "Exception ignored" on its way out.
            with contextlib.suppress(sqlite3.Error):
                cursor.close()
            with link.lock:
                link.stream_ended(conn)

    def _alone(self, sql: str, params: tuple[object, ...], batch: int
               ) -> Generator[Any, None, None] | None:
        """*sql*'s rows streamed from a read-only connection of its own; None if none opens.

        Its first rows are read here (the caller holds the lock), so that a
        connection that opens but cannot read (its -wal, -shm or a page
        refused for want of a descriptor) gives None too.
        """
        own = self._link.connect_reader()
        if own is None:
            return None
        try:
            cursor = own.execute(sql, params)
            first = cursor.fetchmany(batch)
        except sqlite3.Error:
            own.close()
            return None
        # Its first read made the -wal and -shm of a file perhaps retired since.
        segments.tidy(self._link.active.file)
        return self._drain_own(own, cursor, first, batch)

    def _drain_own(self, own: sqlite3.Connection, cursor: sqlite3.Cursor, first: list[Any],
                   batch: int) -> Generator[Any, None, None]:
        """The rows of a read on a connection of its own, closed once they are all read."""
        try:
            chunk = first
            while chunk:
                yield from chunk
                try:
                    chunk = cursor.fetchmany(batch)
                except sqlite3.Error as e:
                    raise self._link.translate(e, "read") from e
        finally:
            with contextlib.suppress(sqlite3.Error):
                cursor.close()
                own.close()

    def rows(
        self, *, after: int = 0, until: int | None = None, batch: int = 20_000
    ) -> Generator[tuple[int, float, str, str, bytes], None, None]:
        """Raw ``(seq, time, kind, payload, digest)`` rows after *after* (up to *until*)."""
        sql = "SELECT seq, time, kind, payload, digest FROM events WHERE seq > ?"
        params: tuple[int, ...] = (after,)
        if until is not None:
            sql += " AND seq <= ?"
            params = (after, until)
        yield from self.stream(sql + " ORDER BY seq", params, batch, after=after)

    def records(
        self, *, after: int = 0, until: int | None = None, tolerant: bool = False
    ) -> Generator[Record, None, None]:
        """Decoded records after *after* (up to *until*): see ``Store.records``."""
        expected = after + 1
        rows = self.rows(after=after, until=until)
        try:
            for seq, time, kind, payload, _ in rows:
                event: Event
                try:
                    if seq != expected and not tolerant:
                        raise RuleViolation(seq, f"follows event {expected - 1}: a gap")
                    event = decode(seq, kind, payload)
                except RuleViolation as e:
                    if not tolerant:
                        raise errors.corrupt(self._link.path, e) from e
                    event = Unreadable(kind, payload, e.reason)
                expected = seq + 1
                yield Record(seq, time, event)
        finally:
            rows.close()

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        """Rows of a read-only SQL query, errors translated and naming the file."""
        link = self._link
        with link.lock:
            return self.retrying(lambda conn: conn.execute(sql, params).fetchall())

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Make every read inside the block see the journal at one moment.

        See ``Store.snapshot``.  Within one already open, a block of its own
        reads the same moment.
        """
        link = self._link
        with link.lock:
            outer = self._pinned is None
            if outer:
                conn = self._pinned = self._pin()
                # A connection left for a newer one meanwhile (a segment this
                # process retired or moved on from) is closed only at the end.
                link.stream_started(conn)
        if not outer:
            yield
            return
        try:
            yield
        finally:
            with link.lock:
                self._pinned = None
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("COMMIT")
                link.stream_ended(conn)

    def _pin(self) -> sqlite3.Connection:
        """A read transaction on every file a read needs, all of one layout (holding lock).

        Why not pin and hope: SQLite starts a read transaction on each
        attached file only when a statement first reads it, so a snapshot
        whose reads came as they were asked would read the head as of one
        moment and a later segment as of another, with another process's
        rollover or retirement in between: a retirement recorded in the head
        with the segment holding its checkpoint left out of the span, or
        the head's tables gone under views made over them.  So every file
        is read at once, inside one transaction, and then the layout is
        listed again: if no file was renamed in or deleted, no seal
        committed and no table of the views dropped from the first
        listing to the last read, the files pinned are one layout, and
        what it shows is the journal as it was at some moment of that
        span (sealed segments never change; the head may have recorded a
        retirement whose files are still kept, which a crash leaves too).
        Otherwise the transaction ends and the next try lists anew.  Never
        a lock: a reader makes no writer wait (a WAL read transaction only
        keeps checkpoints from going past it), and retirement need not
        know of it (a file deleted under a pinned read stays readable
        through its open descriptors).
        """
        seen: Layout | None = None
        for _ in range(TRIES):
            conn = None
            try:
                conn = self.connection()
                if conn is not self._span and not self._link.readonly:
                    # A writer's own connection stays free for its appends:
                    # the head alone, attached to a connection of its own.
                    self._leave_span()
                    conn = self._span = self.span([Segment(self._link.path, 0)])
                    self._layout = self._bare()
                spanning = conn is self._span
                layout = self._layout if spanning else self._bare()
                conn.execute("BEGIN")
                if spanning:
                    tables = tuple(table_names(conn, f"s{i}") for i in range(len(self._tables)))
                else:
                    tables = ()
                    conn.execute("PRAGMA main.schema_version").fetchone()
                if tables == (self._tables if spanning else ()) and self.layout() == layout:
                    return conn
                conn.execute("ROLLBACK")
                seen = None
            except (sqlite3.Error, OSError) as e:
                if conn is not None and conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if seen is None and conn is not None:
                    seen = self._layout if conn is self._span else self._bare()
                now = self.layout()
                if now == seen:
                    raise self._translated(e) from e
                seen = now
            if self.layout()[0] != self._link.identity:
                # Not this store's journal any more: no try would pin it.
                raise self._replaced()
            # Made for a layout that moved: made again at the next try.
            self._leave_span()
        raise self._busy()

    def last_seq(self) -> int:
        """The newest committed event, 0 when empty (inside :meth:`snapshot`, as of it)."""
        link = self._link
        with link.lock:
            pinned = self._pinned
            if pinned is not None:
                try:
                    if self.spans(pinned):
                        return self._span_last(pinned)
                    # The head alone, as it was pinned (never moved on from here).
                    return link.tail(pinned)[0]
                except sqlite3.Error as e:
                    raise link.translate(e, "read") from e
            return self._active_tail()[0]

    def _active_tail(self) -> tuple[int, bytes]:
        """``(seq, digest)`` of the journal's last event: where the next one goes (holding lock).

        Read from the active segment alone, as an append's transaction
        reads it (:meth:`Link.tail`): its last event, or while it has none yet
        the base it records, the last event of the segment before.  Never
        from a view across segments: once the segments before an empty one
        are retired, such a view holds no event at all and would say 0.
        The seal is read in the same snapshot: a segment sealed (or
        retired) since this store last wrote is left for the active one
        first, as :meth:`Link.begin` does.  What is read may be overtaken by
        another process's append the moment after; an append checks again
        inside its transaction.
        """
        link = self._link
        while True:
            conn = link.conn
            own = not conn.in_transaction
            try:
                if own:
                    # One read snapshot for the seal and the tail: a
                    # retirement drops a retired head's events in a
                    # transaction of its own, after its seal.
                    conn.execute("BEGIN")
                try:
                    if not link.ready or link.seal() is None:
                        return link.tail(conn)
                finally:
                    if own and conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as e:
                if not link.ready or link.still_there():
                    raise link.translate(e, "read") from e
            # Sealed, or retired and removed, since this store last looked.
            link.open_active()

    def _span_last(self, span: sqlite3.Connection) -> int:
        """The last event a spanning reader sees: its newest row, else the newest base."""
        # Not max(seq): over the view of several segments SQLite answers an
        # aggregate by reading every row of every segment, while an ORDER BY
        # on the key merges their last rows.
        row = span.execute("SELECT seq FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        if row is None:
            # Every kept event is retired and the newest segment has none
            # yet: the event before its first is the last.
            row = span.execute("SELECT max(base) FROM bases").fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def release(self) -> None:
        """Close the spanning connection unless a snapshot reads through it."""
        with self._link.lock:
            if self._span is not None and self._span is not self._pinned:
                self.drop()

    def parked(self) -> sqlite3.Connection | None:
        """In a forked child: the span, let go of without being closed (see Store.forget)."""
        span, self._span = self._span, None
        self._pinned = None
        return span


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino
