"""Rollover: a new segment after the last event, beginning with the state there; the old one sealed.

While holding the old segment's write lock (the transaction that wrote the
checkpoint), as :mod:`sessiontemp.journal.segments` tells in full:

1. the new file is made under a temporary name, with its schema and the
   checkpoint, closed and fsynced;
2. it is renamed to its name, and the directory is fsynced;
3. a row naming it is written into the old segment's ``sealed`` table, in
   the same write transaction, which commits.

A failure before 3 only delays the bound: the checkpoint stays written, the
segment active, and :attr:`Rollover.failed` says why for the caller to report.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time as _time
from collections.abc import Callable, Sequence
from typing import TypeAlias

from .. import segments
from ..events import Record
from . import schema
from .link import Link
from .reading import Reader, between

__all__ = ["CatchUp", "Rollover", "create_segment"]

# catch_up(records) -> the encoded state after *records*, folded onto the
# state being checkpointed (see Store.save_checkpoint).
CatchUp: TypeAlias = Callable[[list[Record]], bytes]


def create_segment(path: os.PathLike[str] | str, *, checkpoint: tuple[int, bytes, int, bytes],
                   indexes: Sequence[str] = ()) -> None:
    """Make the segment file *path* durable, holding only its schema and *checkpoint*.

    *checkpoint* is ``(seq, digest, format, state)``: the state after the
    last event before the segment's first, and that event's chain digest.
    The segment's base is that checkpoint's event, by construction: a
    reader of the history this segment starts finds the state there, once
    everything before it is retired.

    Written under a temporary name and renamed, so *path* never names a
    half-made file; created in rollback-journal mode and switched to WAL
    before it is closed, so no -wal file is left beside the temporary name.
    Raises OSError or sqlite3.Error; the caller removes the temporary file.
    """
    base, digest = int(checkpoint[0]), bytes(checkpoint[1])
    tmp = segments.temporary(path)
    segments.remove_file(tmp)
    # Made here, 0600, before SQLite opens it: SQLite would make it 0644
    # less the umask, and its -wal and -shm (a reader's too) copy the
    # file's mode.  (The root makes the head the same way.)  No connection
    # to it exists yet, so closing this descriptor drops no SQLite lock.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600))
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        # The store's read indexes are made while the file is empty.
        schema.create_file(conn, base=base, segment=True, indexes=indexes)
        conn.execute("INSERT INTO segment (base, digest) VALUES (?, ?)", (base, digest))
        conn.execute("INSERT INTO checkpoints (seq, digest, format, state) "
                     "VALUES (?, ?, ?, ?)", checkpoint)
        conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={schema.SEGMENTED_VERSION}")
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL").fetchone()
    finally:
        conn.close()
    fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # Sticky before it has its name: an age cleaner never takes a
        # segment (no connection to the file is open: closing this
        # descriptor drops no SQLite lock).
        os.fchmod(fd, 0o600 | stat.S_ISVTX)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    segments.sync_directory(segments.parent(path))


class Rollover:
    """The rollovers of one store's journal, made inside its checkpoints' transactions."""

    def __init__(self, link: Link, reader: Reader) -> None:
        self._link = link
        self._reader = reader
        # Why the last rollover could not start a new segment, for the caller to report.
        self.failed: str | None = None

    def roll_over(self, conn: sqlite3.Connection, checkpoint: tuple[int, bytes, int, bytes],
                  catch_up: CatchUp | None) -> None:
        """Start a new segment after the last event, beginning with the state there; seal this one.

        Runs inside the write transaction that wrote *checkpoint*, so no
        other writer appends between the last event read here and the seal.
        A failure leaves the checkpoint written and the segment active.
        """
        link = self._link
        seq, digest = link.tail(conn)
        if seq == link.active.base:
            # Nothing appended here yet: a new segment would bound nothing
            # (and would take this one's very name).
            return
        if checkpoint[0] != seq:
            caught_up = self._caught_up(checkpoint, (seq, digest), catch_up)
            if caught_up is None:
                return
            checkpoint = caught_up
        # Strings, not Paths: a Path would intern the new segment's name.
        folder = segments.folder(link.path)
        name = segments.name_of(seq + 1)
        path = os.path.join(folder, name)
        try:
            if not os.path.isdir(folder):
                try:
                    os.mkdir(folder, mode=0o700)
                except FileExistsError:
                    # Made meanwhile by another process's rollover.
                    if not os.path.isdir(folder):
                        raise
                segments.sync_directory(segments.parent(folder))
            link.step(f"create {name}")
            create_segment(path, checkpoint=checkpoint,
                           indexes=[sql for _, sql in schema.index_sql()])
        except (OSError, sqlite3.Error) as e:
            with contextlib.suppress(OSError):
                segments.remove_file(segments.temporary(path))
            # Only the bound is delayed: the next checkpoint tries again.
            self.failed = f"{path}: {e}"
            return
        link.step(f"seal {link.active.name}")
        if link.active.is_head:
            schema.add_segment_tables(conn)
        conn.execute("INSERT INTO sealed (next, seq, time) VALUES (?, ?, ?)",
                     (name, seq, _time.time()))
        if link.active.is_head:
            conn.execute(f"PRAGMA user_version={schema.SEGMENTED_VERSION}")

    def _caught_up(self, checkpoint: tuple[int, bytes, int, bytes], tail: tuple[int, bytes],
                   catch_up: CatchUp | None) -> tuple[int, bytes, int, bytes] | None:
        """*checkpoint* brought up to *tail* by *catch_up*; None (with why) when it cannot be.

        A new segment's base is the last event before it and its first
        content the state there: a segment that began with the state of an
        older event would leave the events in between to a segment about
        to be retired, and every reader of the history kept after that
        with no state to start from.  Read under the write lock, which the
        caller holds: nothing is appended meanwhile.
        """
        active = self._link.active
        after, _digest, format, _state = checkpoint
        seq, digest = tail
        why = f"events {after + 1} to {seq} follow the checkpoint at event {after}"
        if catch_up is None:
            self.failed = f"{active.path}: {why}, and nothing was given to fold them"
            return None
        records = between(self._reader.after(after), after, seq)
        if [r.seq for r in records] != list(range(after + 1, seq + 1)):
            self.failed = f"{active.path}: {why}, and they could not all be read"
            return None
        try:
            return seq, digest, format, catch_up(records)
        except Exception as e:  # the caller's fold: only the rollover waits
            self.failed = f"{active.path}: {why}, and folding them failed ({e})"
            return None
