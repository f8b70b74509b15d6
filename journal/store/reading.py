"""Reading the kept history as one table, however many segment files hold it.

While there is only the head, reads go through the link's own connection;
once segments exist, through a connection that attaches every kept segment
and shows them as one ``events``, one ``checkpoints`` and one ``bases``
view, so every query reads the kept history as if it were one table.  That
spanning connection is built again whenever the segment directory, the head
or the kept segments changed, and only when a read needs more than the
active segment (see :meth:`Reader.after`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Generator, Iterable, Iterator
from typing import Any
from urllib.parse import quote

from journal import segments
from journal.errors import JournalCorrupt, RuleViolation
from journal.events import Event, Record, Unreadable, decode
from journal.segments import MAX_KEPT, Segment
from journal.store import errors
from journal.store.link import Link

__all__ = ["Reader"]


class Reader:
    """The reads of one store: its spanning connection, and rows streamed from one snapshot."""

    def __init__(self, link: Link) -> None:
        self._link = link
        # The reading connection over every kept segment, and what it was built for.
        self._span: sqlite3.Connection | None = None
        self._span_key: object = None
        self._span_schema = 0
        # The schema name each kept segment (by its file) is attached under there.
        self._attached: dict[str, str] = {}

    @property
    def spanning(self) -> bool:
        """Whether the connection over the kept segments is open."""
        return self._span is not None

    @property
    def in_snapshot(self) -> bool:
        """Whether a :meth:`snapshot` is open on the spanning connection."""
        return self._span is not None and self._span.in_transaction

    def attached(self, conn: sqlite3.Connection) -> dict[str, str]:
        """The schema each kept segment is attached under in *conn*, if it is the span."""
        return self._attached if conn is self._span else {}

    def connection(self) -> sqlite3.Connection:
        """The connection every read goes through (the caller holds the link's lock)."""
        link = self._link
        folder = segments.folder(link.path)
        try:
            stamps = (os.stat(folder).st_mtime_ns, os.stat(link.path).st_mtime_ns)
        except FileNotFoundError:
            if self._span is not None:
                self.drop()
            return link.conn
        if self._span is not None and self._span.in_transaction:
            # Inside a snapshot: it reads the files as they were when it began.
            return self._span
        # The kept segments are part of the key: a rollover renames its new
        # file into the directory before it seals the old one, so a span
        # built in between leaves the new file out (unsealed predecessor),
        # and nothing in the directory or the head changes when the seal
        # commits.  Cheap: a listing, and seals seen are remembered.
        kept = link.resolve(remove=False)[-MAX_KEPT:]
        key: object = (stamps, tuple(segment.file for segment in kept))
        if self._span is None or key != self._span_key or self._stale():
            old, self._span = self._span, None
            if old is not None:
                link.let_go(old)
            self._span = self.span(kept)
            self._span_key = key
        return self._span

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
            self._attached = {}

    def forget_files(self, files: set[str]) -> None:
        """Let go of the span if it has any of *files* (retired) attached (holding the lock)."""
        span = self._span
        if span is not None and not span.in_transaction and (files & self._attached.keys()):
            self._span = None
            self._span_key = None
            self._attached = {}
            self._link.let_go(span)

    def span(self, kept: list[Segment], *, again: bool = True) -> sqlite3.Connection:
        """A new connection that attaches every segment of *kept* and shows them as one."""
        link = self._link
        conn = sqlite3.connect("file::memory:", uri=True, isolation_level=None,
                               check_same_thread=False, timeout=link.busy_timeout)
        try:
            mode = "ro&immutable=1" if link.immutable else "ro"
            events, checkpoints, bases = [], [], []
            for i, segment in enumerate(kept):
                if not os.path.exists(segment.file) and again and segment is not kept[-1]:
                    # Retired by another process since the listing: list again.
                    conn.close()
                    return self.span(link.resolve(remove=False)[-MAX_KEPT:], again=False)
                if not os.path.exists(segment.file):
                    raise JournalCorrupt(segment.path, "is missing", link.segment_fix(
                        segment.path))
                link.check_files(segment.file)
                uri = "file:" + quote(os.fsencode(os.path.abspath(segment.file))) + "?mode=" + mode
                conn.execute(f"ATTACH DATABASE ? AS s{i}", (uri,))
                tables = {name for (name,) in conn.execute(
                    f"SELECT name FROM s{i}.sqlite_master WHERE type = 'table'")}  # noqa: S608
                if "events" in tables:
                    # Only schema names made here go into the SQL, never input.
                    events.append(
                        f"SELECT seq, time, kind, payload, digest FROM s{i}.events")  # noqa: S608
                if "checkpoints" in tables:
                    checkpoints.append(
                        f"SELECT seq, digest, format, state FROM s{i}.checkpoints")  # noqa: S608
                if "segment" in tables:
                    bases.append(f"SELECT base, digest FROM s{i}.segment")  # noqa: S608
            # Empty views keep their column names: a retired head has no
            # events, and a journal that never rolled over no bases.
            conn.execute("CREATE TEMP VIEW events AS " + (
                " UNION ALL ".join(events) or "SELECT NULL AS seq, NULL AS time, NULL AS kind, "
                "NULL AS payload, NULL AS digest WHERE 0"))
            conn.execute("CREATE TEMP VIEW checkpoints AS " + (
                " UNION ALL ".join(checkpoints) or "SELECT NULL AS seq, NULL AS digest, "
                "NULL AS format, NULL AS state WHERE 0"))
            conn.execute("CREATE TEMP VIEW bases AS " + (
                " UNION ALL ".join(bases) or "SELECT NULL AS base, NULL AS digest WHERE 0"))
            (self._span_schema,) = conn.execute("PRAGMA s0.schema_version").fetchone()
            self._attached = {segment.file: f"s{i}" for i, segment in enumerate(kept)}
        except sqlite3.Error as e:
            conn.close()
            raise link.translate(e, "read") from e
        except BaseException:
            conn.close()
            raise
        return conn

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
                conn = self.connection() if after is None else self.after(after)
                cursor = conn.execute(sql, params)
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
            try:
                return self.connection().execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise link.translate(e, "read") from e

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Make every read inside the block see the journal at one moment.

        See ``Store.snapshot``.
        """
        link = self._link
        with link.lock:
            conn = self.connection()
            try:
                conn.execute("BEGIN")
            except sqlite3.Error as e:
                raise link.translate(e, "read") from e
        try:
            yield
        finally:
            with link.lock, contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    def last_seq(self) -> int:
        """The newest committed event, 0 when empty (inside :meth:`snapshot`, as of it)."""
        link = self._link
        with link.lock:
            span = self._span
            if span is not None and span.in_transaction:
                try:
                    return self._span_last(span)
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
            if self._span is not None and not self._span.in_transaction:
                self.drop()

    def parked(self) -> sqlite3.Connection | None:
        """In a forked child: the span, let go of without being closed (see Store.forget)."""
        span, self._span = self._span, None
        return span


