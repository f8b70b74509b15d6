"""Checkpoint rows: the reducer's state at a few events, tied to their digests.

A cache of what :mod:`sessiontemp.journal.checkpoint` derives from the events, so that a
replay can start there: any row may be deleted and nothing is lost.  A row
counts only for the history whose event it names carries the digest it
records (``chained``); a segment's first row, the state at its base, is
tied to the digest that segment records for the event before it.  Writing
one may roll the active segment over (:mod:`sessiontemp.journal.store.rollover`), in
the same transaction.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..segments import Retention
from . import schema
from .link import Link
from .reading import Reader
from .rollover import CatchUp, Rollover

__all__ = ["Checkpoints"]


class Checkpoints:
    """The checkpoint rows of a :class:`~sessiontemp.journal.store.Store`'s journal, one of the
    classes the store is made of: the connection, reader and rollover are the store's."""

    _link: Link
    _reader: Reader
    _rollover: Rollover
    retention: Retention

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
        with self._link.transaction("write a checkpoint to") as conn:
            row = conn.execute("SELECT digest FROM events WHERE seq = ?", (seq,)).fetchone()
            if row is None and seq == self._link.base[0] and seq:
                row = (self._link.base[1],)
            if row is None and seq:
                # In an older segment: another process rolled over meanwhile.
                reading = self._reader.connection()
                row = reading.execute("SELECT digest FROM events WHERE seq = ?",
                                      (seq,)).fetchone()
                if row is None and seq < self._link.base[0]:
                    # Retired meanwhile, which takes a newer checkpoint than
                    # this one: there is nothing left for it to speed up.
                    return
            if row is None:
                raise ValueError(f"{self._link.path} holds no event {seq} to checkpoint")
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints (seq, digest, format, state) "
                "VALUES (?, ?, ?, ?)", (seq, row[0], format, state),
            )
            seqs = [int(s) for (s,) in conn.execute(
                "SELECT seq FROM checkpoints ORDER BY seq DESC")]
            kept = set(seqs[:keep])
            if spacing > 0:
                runs: dict[int, int] = {}
                for s in seqs:
                    runs.setdefault(s // spacing, s)
                kept.update(sorted(runs.values(), reverse=True)[:keep])
            if not self._link.active.is_head:
                # The active segment's first content: the state where its
                # history starts, which a reader needs once the segments
                # before it are retired.
                kept.add(self._link.base[0])
            doomed = [s for s in seqs if s not in kept]
            if doomed:
                marks = ",".join("?" * len(doomed))
                conn.execute(f"DELETE FROM checkpoints WHERE seq IN ({marks})",  # noqa: S608
                             doomed)
            limit: float = self.retention.segment_bytes
            if roll_over:
                limit = min(limit, self.retention.retirement_rollover_bytes)
            if not self._link.readonly and self._link.active_size() >= limit:
                self._rollover.roll_over(conn, (seq, bytes(row[0]), format, state), catch_up)

    def checkpoints(self, *, until: int | None = None, recent: bool = False
                ) -> list[tuple[int, int, bool]]:
        """``(seq, format, chained)`` of each checkpoint at or before *until*, newest first.

        ``chained`` is False when the checkpoint's digest is not that of
        event *seq* here: it was derived from another history (a journal
        moved aside and started afresh, or rows copied between files).
        A head emptied by retirement, without the table, has none.

        *recent*: only those the active segment holds from its base on,
        read from it alone (no other segment is opened), and none when
        another segment holds events after the base asked for.  No older
        segment holds a newer checkpoint than these (its events end at the
        base), so the newest usable among them is the newest usable of all;
        when none is usable, ask again without *recent*.  A journal that
        never rolled over answers as without it.
        """
        if recent and not self._link.active.is_head:
            return self._recent(until)
        sql = ("SELECT c.seq, c.format, e.digest IS c.digest FROM checkpoints c "
               "LEFT JOIN events e ON e.seq = c.seq")
        params: tuple[int, ...] = ()
        if until is not None:
            sql += " WHERE c.seq <= ?"
            params = (until,)
        # A checkpoint copied into a new segment as its first content is
        # tied to the last event of the segment before, which may be
        # retired: the base it records (and the next event's digest chains
        # from) stands in.  A lookup per checkpoint, not a join: SQLite
        # pushes the seq into each segment's primary key that way.
        spanning = sql.replace("e.digest IS c.digest", (
            "max((SELECT digest FROM events WHERE seq = c.seq) IS c.digest OR "
            "c.digest IN (SELECT digest FROM bases WHERE base = c.seq))")).replace(
            " LEFT JOIN events e ON e.seq = c.seq", "")
        spanning += " GROUP BY c.seq, c.format"

        def read(conn: sqlite3.Connection) -> list[Any]:
            if self._reader.spans(conn):
                return conn.execute(spanning + " ORDER BY c.seq DESC", params).fetchall()
            if not schema.has_table(conn, "checkpoints"):
                return []
            return conn.execute(sql + " ORDER BY c.seq DESC", params).fetchall()

        with self._link.lock:
            rows = self._reader.retrying(read)
        return [(int(seq), int(format), bool(chained)) for seq, format, chained in rows]

    def _recent(self, until: int | None) -> list[tuple[int, int, bool]]:
        """What :meth:`listing` gives with *recent*, on a journal that rolled over."""
        with self._link.lock:
            base, digest = self._link.base
            if until is not None and until < base:
                return []
            try:
                conn = self._reader.after(base)
                if self._reader.spans(conn):
                    return []
                # The checkpoint at the base (a rollover's first content) is
                # tied to the last event of the segment before: the digest
                # this one records for it stands in.
                rows = conn.execute(
                    "SELECT c.seq, c.format, e.digest IS c.digest "
                    "OR (c.seq = ? AND c.digest = ?) FROM checkpoints c "
                    "LEFT JOIN events e ON e.seq = c.seq WHERE c.seq >= ? AND c.seq <= ? "
                    "ORDER BY c.seq DESC",
                    (base, digest, base, until if until is not None else 2**63 - 1)).fetchall()
            except sqlite3.Error as e:
                raise self._link.translate(e, "read") from e
        return [(int(seq), int(format), bool(chained)) for seq, format, chained in rows]

    def checkpoint_state(self, seq: int) -> bytes:
        """The state bytes of the checkpoint at *seq*; KeyError when there is none."""
        sql = "SELECT state FROM checkpoints WHERE seq = ?"
        with self._link.lock:
            try:
                row = None
                if seq >= self._link.active.base:
                    # Where checkpoints(recent=True) found it, when it did.
                    conn = self._reader.after(self._link.active.base)
                    row = conn.execute(sql, (seq,)).fetchone()
                    if row is None and not self._reader.spans(conn):
                        row = self._reader.retrying(
                            lambda conn: conn.execute(sql, (seq,)).fetchone())
                else:
                    row = self._reader.retrying(
                        lambda conn: conn.execute(sql, (seq,)).fetchone())
            except sqlite3.Error as e:
                raise self._link.translate(e, "read") from e
        if row is None:
            raise KeyError(seq)
        return bytes(row[0])
