"""Retirement: which segments are kept, what each holds, and deleting the oldest beyond budget.

A sealed segment is retired once a later segment starts with the checkpoint
of its base; retired ones are kept as read-only history while
:class:`~sessiontemp.journal.segments.Retention` allows, then deleted oldest first (the
head is emptied, never unlinked).  Each step is safe to crash after: the
head records the retirement first, then files go oldest first, so what is
kept is always one unbroken run of history up to the active segment.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import attrs

from .. import segments
from ..errors import JournalError, JournalReadOnly
from ..segments import MAX_KEPT, Retention, Segment
from . import registry
from . import sealed as seals
from .link import Link
from .reading import Reader

__all__ = ["History", "Retirement", "SegmentInfo"]


def _text(path: os.PathLike[str] | str) -> str:
    # os.fspath itself would do, but attrs asks a converter for its signature,
    # and a C function's is parsed from text with the tokenize module's
    # regular expressions: about 3 ms at every import of this module.
    return os.fspath(path)


@attrs.frozen
class SegmentInfo(segments.Filed):
    """One kept segment: its file, the events it holds, whether sealed and what covers it.

    ``first`` is None for a segment with no events yet (or the head once
    retired); ``last`` is then its base.  ``sealed`` is when a newer
    segment took over; ``covered`` the seq of its newest checkpoint.
    ``based``: it holds the checkpoint of its base, tied to the digest it
    records for it (a rollover's first content): history may be retired up
    to it, since a reader of what is kept then finds the state where that
    starts.  Never true of the head, whose base is the empty journal.
    """

    # Kept as a string: see journal.segments.Segment.
    file: str = attrs.field(converter=_text)
    base: int
    first: int | None
    last: int
    sealed: float | None
    covered: int | None
    bytes: int
    has_events: bool
    based: bool = False


@attrs.frozen
class History:
    """Where the kept history starts, and what was retired before it.

    ``first`` and ``first_time``: the oldest kept event (None when there
    is none); ``retired_until``: the last event retired (0: nothing was);
    ``retired_at``: when the last retirement happened.
    """

    first: int | None
    first_time: float | None
    retired_until: int
    retired_at: float | None


class Retirement:
    """The kept segments of a :class:`~sessiontemp.journal.store.Store`'s journal, and their
    retirement: one of the classes the store is made of (the connection and reader are its)."""

    _link: Link
    _reader: Reader
    retention: Retention

    def rollover_due(self) -> bool:
        """Whether a retirement pass should seal the active segment at a checkpoint first.

        See :attr:`Retention.retirement_rollover_bytes`; checked again by
        :meth:`save_checkpoint` inside its transaction.
        """
        if self._link.readonly:
            return False
        with self._link.lock:
            try:
                return self._link.active_size() >= self.retention.retirement_rollover_bytes
            except sqlite3.Error as e:
                raise self._link.translate(e, "read") from e

    def segments(self) -> list[SegmentInfo]:
        """Every kept segment of the journal, oldest first, the active one last."""
        with self._link.lock:
            # Under the lock: telling which segments are sealed reads through
            # the store's own connection, which an append in another thread
            # (a maintenance runs beside its manager) may be using.
            return self._segments()

    def _segments(self, *, again: bool = True) -> list[SegmentInfo]:
        """:meth:`segments` (holding the lock); *again*: list again once if a listed file went."""
        found: list[SegmentInfo] = []
        kept = self._link.resolve(remove=False)
        # What a sealed segment holds never changes: read once by this
        # process, it is not read again (every open's retirement pass
        # asks), and no segment is attached for it.
        known: dict[str, seals.Facts] = {}
        identities: dict[str, seals.Identity] = {}
        for segment in kept:
            if segment.file == self._link.active.file:
                continue
            with contextlib.suppress(OSError):
                seen = identities[segment.file] = seals.identity(os.stat(segment.file))
                remembered = seals.known(self._link.path, segment, seen)
                if remembered is not None and remembered[1] is not None:
                    known[segment.file] = remembered[1]
        span: sqlite3.Connection | None = None
        unknown = [segment for segment in kept
                   if segment.file not in known and segment.file != self._link.active.file]
        if len(unknown) > 2:
            # The reading connection has the kept segments attached already:
            # asked there, a segment costs a few lookups, not a connection.
            # For one or two (a head not yet retired, a segment just
            # sealed) a connection of their own costs less than attaching all.
            span = self._reader.connection()
        attached = self._reader.attached(span) if span is not None else {}
        for segment in kept:
            facts = known.get(segment.file)
            if facts is None:
                try:
                    facts = self._segment_facts(segment, span, attached)
                except JournalError:
                    if (not again or segment.file == self._link.active.file
                            or os.path.exists(segment.file)):
                        raise
                    # Retired by another process since the listing: list again.
                    return self._segments(again=False)
                identity = identities.get(segment.file)
                if identity is not None and self._final(segment, facts):
                    seals.remember(self._link.path, segment, identity, facts)
            first, last, sealed, covered, has_events, based = facts
            found.append(SegmentInfo(
                segment.file, segment.base, first,
                segment.base if last is None else last, sealed, covered,
                segments.size_of(segment.file), has_events, based))
        return found

    def _final(self, segment: Segment, facts: seals.Facts) -> bool:
        """Whether *facts*, read from *segment*, hold for as long as its file does.

        Those of a segment found sealed before the rest was read: nothing is
        written to it after its seal.  The head is the exception: retirement
        drops its tables in place, so only a head already retired qualifies.
        """
        _first, _last, sealed, _covered, has_events, _based = facts
        return (segment.file != self._link.active.file and sealed is not None
                and (not segment.is_head or not has_events))

    def _segment_facts(
        self, segment: Segment, span: sqlite3.Connection | None, attached: dict[str, str]
    ) -> seals.Facts:
        """What *segment* holds, read from it (the caller holds the link's lock)."""
        schema = attached.get(segment.file)
        if segment.file == self._link.active.file:
            conn, schema = self._link.conn, "main"
        elif schema is not None and span is not None:
            conn = span
        else:
            conn, schema = self._link.connect_segment(segment.file), "main"
        try:
            # Only schema names made here go into the SQL, never input.
            tables = {n for (n,) in conn.execute(
                f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}  # noqa: S608
            # The seal first: what is read after a seal was seen is final.
            sealed = conn.execute(
                f"SELECT seq, time FROM {schema}.sealed"  # noqa: S608
            ).fetchone() if "sealed" in tables else None
            first = last = None
            if "events" in tables:
                # Two subqueries: SQLite looks up a lone min() or max()
                # in the key's b-tree, but scans the table for both at once.
                first, last = conn.execute(
                    f"SELECT (SELECT min(seq) FROM {schema}.events), "  # noqa: S608
                    f"(SELECT max(seq) FROM {schema}.events)").fetchone()
            covered = conn.execute(
                f"SELECT max(seq) FROM {schema}.checkpoints"  # noqa: S608
            ).fetchone()[0] if "checkpoints" in tables else None
            based = bool("checkpoints" in tables and "segment" in tables and conn.execute(
                f"SELECT count(*) FROM {schema}.checkpoints c, {schema}.segment s "  # noqa: S608
                "WHERE c.seq = s.base AND c.digest = s.digest").fetchone()[0])
        except sqlite3.Error as e:
            raise self._link.translate(e, "read", segment.path) from e
        finally:
            if conn is not self._link.conn and conn is not span:
                conn.close()
        return (None if first is None else int(first), None if last is None else int(last),
                None if sealed is None else float(sealed[1]),
                None if covered is None else int(covered), "events" in tables, based)

    def history(self) -> History:
        """Where the kept history starts, and up to which event and when older was retired."""
        def read(conn: sqlite3.Connection) -> tuple[Any, Any, Any]:
            first, first_time = conn.execute(
                "SELECT seq, time FROM events ORDER BY seq LIMIT 1").fetchone() or (None, None)
            retired = (None, None)
            if self._reader.spans(conn):
                with contextlib.suppress(sqlite3.OperationalError):
                    retired = conn.execute(
                        "SELECT max(seq), max(time) FROM s0.retired").fetchone()
            return first, first_time, retired

        with self._link.lock:
            first, first_time, retired = self._reader.retrying(read)
        return History(None if first is None else int(first),
                       None if first_time is None else float(first_time),
                       int(retired[0] or 0), None if retired[1] is None else float(retired[1]))

    def retire(self, *, now: float) -> list[Path]:
        """Delete the oldest retired segments beyond :attr:`retention`; return their paths.

        A sealed segment is retired once a later segment starts with the
        checkpoint of its base.  Run by one
        process at a time (recovery's lock); writers and readers of other
        segments are not disturbed.
        Each step is safe to crash after: the head records the retirement
        first, then files go oldest first, so what is kept is always one
        unbroken run of history up to the active segment.

        What SQLite left beside segments retired earlier (:func:`segments.litter`) is
        removed first.
        """
        if self._link.readonly:
            raise JournalReadOnly(self._link.path, "cannot retire history through a read-only "
                                  "store", "Open the journal for writing")
        for left in segments.litter(self._link.path):
            # A -wal or -shm a reader made beside a segment retired under it,
            # and could not remove (killed first): nobody's, and never read.
            segments.tidy(left.rsplit("-", 1)[0])
        kept = self.segments()
        if not kept[0].has_events:
            # A pass killed between dropping the head's tables and its vacuum
            # left their pages in the file: finish it.
            self._vacuum_head(only_if_free=True)
        cut = self._retirement_cut(kept, now)
        if cut is None:
            return []
        doomed = [segment for segment in kept[:cut + 1] if segment.has_events]
        if not doomed:
            return []
        # Where the kept history will start: the next segment's base, whose
        # checkpoint that segment holds.
        upto = kept[cut + 1].base
        self._link.step(f"record retirement up to event {upto}")
        self._write_head(("INSERT INTO retired (seq, time) VALUES (?, ?)", (upto, now)))
        removed = []
        try:
            for segment in doomed:
                self._link.step(f"retire {segment.name}")
                if segment.base == 0:
                    self._retire_head()
                else:
                    segments.remove_file(segment.file)
                removed.append(segment)
            segments.sync_directory(segments.folder(self._link.path))
        finally:
            self._let_go_of_retired({s.file for s in removed if s.base})
        return [s.path for s in removed]

    def _let_go_of_retired(self, files: set[str]) -> None:
        """Every store of this process closes its connections to the deleted *files*.

        Each would otherwise hold the deleted files' blocks until its next
        look (a store in another process does it then: an append finds the
        seal, a read lists the segments again).
        """
        if not files:
            return
        for peer in registry.peers(self._link.identity):
            peer.forget_files(files)

    def _retirement_cut(self, kept: list[SegmentInfo], now: float) -> int | None:
        """The index of the newest of *kept* to retire (all older with it), or None.

        History may end only where a kept segment starts with the
        checkpoint of its base (:attr:`SegmentInfo.based`): every reader of
        what is kept (a replay, ``verify``, ``state --at``, ``explain``,
        the timeline) then finds the state where it starts.  So only the
        segments before the newest such one are retired at all, and a cut
        the budget would make elsewhere moves up to the next such boundary
        (only a journal written before rollovers were made at a checkpoint
        of their base has segments without one).  Within that, the newest
        are kept as history while their total is at most
        ``history_bytes``, each is younger than ``history_age``, and at
        most :data:`MAX_KEPT` files are listed (the head is never unlinked,
        only emptied).
        """
        anchors = [i for i in range(1, len(kept)) if kept[i].based]
        if not anchors:
            return None
        retired_bytes = 0
        cut = None
        # Newest first: whatever is kept is the newest run.
        for i in range(anchors[-1] - 1, -1, -1):
            segment = kept[i]
            if not segment.has_events:
                continue
            retired_bytes += segment.bytes
            too_old = segment.sealed is not None and now - segment.sealed > (
                self.retention.history_age)
            listed = len(kept) - i + (1 if i else 0)
            if retired_bytes > self.retention.history_bytes or too_old or listed > MAX_KEPT:
                cut = i
                break
        if cut is None:
            return None
        while not kept[cut + 1].based:
            cut += 1
        return cut

    def _write_head(self, *statements: tuple[str, tuple[object, ...]],
                    fresh: bool = False) -> None:
        """Run *statements* in one write transaction on the head (*fresh*: its own connection)."""
        link = self._link
        conn = link.conn if link.active.is_head and not fresh else link.connect_head()
        try:
            with self._link.lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for sql, params in statements:
                        conn.execute(sql, params)
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as e:
            raise self._link.translate(e, "retire history in") from e
        finally:
            if conn is not self._link.conn:
                conn.close()

    def _retire_head(self) -> None:
        """Drop the head's events and checkpoints; it keeps only how to find the rest."""
        self._write_head(("DROP TABLE IF EXISTS events", ()),
                         ("DROP TABLE IF EXISTS checkpoints", ()), fresh=True)
        self._vacuum_head(only_if_free=False)

    def _vacuum_head(self, *, only_if_free: bool) -> None:
        """VACUUM the head, whose tables are dropped; if *only_if_free*, only when pages are free.

        Free pages are what a vacuum cut short (a kill) left behind.
        """
        try:
            identity = seals.identity(os.stat(self._link.path))
        except OSError:
            identity = None
        if only_if_free and seals.was_vacuumed(self._link.path, identity):
            return
        conn = self._link.connect_head()
        try:
            with self._link.lock:
                if only_if_free and not conn.execute("PRAGMA freelist_count").fetchone()[0]:
                    if identity is not None:
                        seals.vacuumed(self._link.path, identity)
                    return
                self._link.step(f"vacuum {self._link.path.name}")
                conn.execute("VACUUM")
                # Not waiting for readers: a TRUNCATE checkpoint waits (for the
                # busy timeout, holding the recovery lock) until no reader
                # reads an older snapshot, and a journal-inspect run pins one
                # for as long as it reads.  What it cannot copy back now stays
                # readable in the -wal, for a later checkpoint.
                conn.execute("PRAGMA busy_timeout = 0")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as e:
            raise self._link.translate(e, "retire history in") from e
        finally:
            conn.close()
