"""The connection a store writes through: to the active segment, moved on past every rollover.

The one place that knows which file is being appended to: it lists the kept
segments, tells the active one by the seals, connects to it, and moves the
connection on when a rollover (or a retirement) sealed the file it was on.
Every write transaction goes through :meth:`Link.transaction` or
:meth:`Link.begin`, which read the seal inside the transaction: a rollover
seals a segment in a write transaction of its own, so either the writer sees
the seal or the rollover waits for it to end.  Whatever fails, the
connection is left outside any transaction, reconnecting if need be, or the
link is marked :attr:`~Link.broken`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from .. import segments, sticky
from ..errors import JournalCorrupt, JournalError
from ..segments import Segment
from . import errors, schema, sealed
from .digests import GENESIS

__all__ = ["Link", "SegmentHook"]

SegmentHook = Callable[[Literal["segment"], str], None]


class Link:
    """The connection to a journal's active segment, and the lock that serialises its use.

    One connection shared by the threads of one store; its statements are
    serialised by :attr:`lock` because a sqlite3 connection is not re-entrant.
    """

    def __init__(self, path: Path, *, readonly: bool, immutable: bool, busy_timeout: float,
                 step_hook: SegmentHook | None) -> None:
        self.path = path
        # immutable: read the file as it is, without any lock or -shm file;
        # only for a copy that nothing else writes.  Implies readonly.
        self.readonly = readonly or immutable
        self.immutable = immutable
        self.busy_timeout = busy_timeout
        self._step_hook = step_hook
        self.lock = threading.Lock()
        # The segment the connection is on: the head until a rollover.
        self.active = Segment(self.path, 0)
        # (seq, digest) of the event before the active segment's first.
        self.base: tuple[int, bytes] = (0, GENESIS)
        self.active_id: tuple[int, int] | None = None
        # The head's (device, inode) while open; None once closed or parked.
        self.identity: tuple[int, int] | None = None
        # Set once open: from then on every write transaction checks for a seal.
        self.ready = False
        # Set when a failed transaction could not be undone, or a commit's
        # outcome could not be read back: nothing more is written through
        # this link, so nothing can be written on a false premise.
        self.broken: str | None = None
        # Reads streaming rows, by connection; connections left for newer
        # ones while a read streamed from them, closed when it ends.
        self.streams: dict[sqlite3.Connection, int] = {}
        self.superseded: list[sqlite3.Connection] = []
        self.synced = True
        # The write path's statements run through one cursor (:meth:`run`):
        # conn.execute makes a cursor per call, and the connection keeps a
        # reference to each until it has made 200 more (tens of kB a store
        # carries up and down).  Only statements run to their end go through
        # it: a SELECT left part read would hold its read snapshot open
        # until the cursor's next statement.
        self.writing: sqlite3.Cursor | None = None
        self.conn: sqlite3.Connection = None  # type: ignore[assignment]  # set by connect()

    # -- errors and steps ----------------------------------------------------

    def translate(self, e: sqlite3.Error, doing: str, path: Path | None = None) -> JournalError:
        return errors.translate(self.path, e, doing, path)

    def segment_fix(self, path: Path) -> str:
        return errors.segment_fix(self.path, path)

    def step(self, detail: str) -> None:
        if self._step_hook is not None:
            self._step_hook("segment", detail)

    def refuse_if_broken(self, doing: str) -> None:
        if self.broken is not None:
            raise JournalError(self.path, f"could not {doing} it: {self.broken}",
                               "Close the manager and open a new one")

    # -- connecting ----------------------------------------------------------

    def check_files(self, file: os.PathLike[str] | str) -> None:
        """Refuse a journal file whose name, -wal or -shm is a symlink (or, to write, not ours).

        Every file is checked the same way before SQLite opens it by name:
        the head, the segment being written and each sealed one.
        """
        segments.check_files(file, writer=not self.readonly)

    def connect_head(self) -> sqlite3.Connection:
        """A new connection to the head, as this link opens it."""
        self.check_files(self.path)
        try:
            if self.readonly:
                # Quoted as bytes: a path that is not UTF-8 keeps its own bytes.
                uri = "file:" + quote(os.fsencode(os.path.abspath(self.path)))
                conn = None
                if not self.immutable:
                    conn = sqlite3.connect(
                        uri + "?mode=ro", uri=True, isolation_level=None,
                        check_same_thread=False,
                    )
                    try:
                        # Opening is lazy: the first read finds out whether
                        # the locks and the -shm file could be had.
                        conn.execute("PRAGMA schema_version").fetchone()
                    except sqlite3.OperationalError as e:
                        if getattr(e, "sqlite_errorcode", None) in (
                            sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT
                        ):
                            raise
                        conn.close()
                        conn = None
                        self.immutable = True
                if conn is None:
                    conn = sqlite3.connect(
                        uri + "?mode=ro&immutable=1", uri=True, isolation_level=None,
                        check_same_thread=False,
                    )
            else:
                # isolation_level=None: no implicit transactions; every write
                # below opens its own BEGIN IMMEDIATE.
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False,
                    timeout=self.busy_timeout,
                )
        except sqlite3.Error as e:
            raise self.translate(e, "open") from e
        return conn

    def connect_segment(self, file: os.PathLike[str] | str) -> sqlite3.Connection:
        """A connection to an existing segment file, never creating one.

        Takes the segment's path as listed (a string); only an error makes
        a Path of it, which is how errors name the file.
        """
        self.check_files(file)
        mode = "ro&immutable=1" if self.immutable else "ro" if self.readonly else "rw"
        uri = "file:" + quote(os.fsencode(os.path.abspath(file))) + "?mode=" + mode
        try:
            # Raises at once for a file gone (mode=rw opens it here).
            conn = sqlite3.connect(uri, uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=self.busy_timeout)
        except sqlite3.Error as e:
            raise self.translate(e, "open", Path(file)) from e
        try:
            (app_id,) = conn.execute("PRAGMA application_id").fetchone()
            # Its first read made the -wal and -shm, of a file perhaps retired since.
            segments.tidy(file)
            if int(app_id) != schema.APPLICATION_ID:
                path = Path(file)
                raise JournalCorrupt(path, "is not a segment of a sessiontemp journal",
                                     self.segment_fix(path))
            if not self.readonly:
                conn.execute("PRAGMA synchronous=FULL")
            if not self.immutable:
                # Read by now, so SQLite has made its -wal and -shm.
                sticky.mark_database(file)
        except sqlite3.Error as e:
            conn.close()
            raise self.translate(e, "open", Path(file)) from e
        except BaseException:
            conn.close()
            raise
        return conn

    def connect_reader(self) -> sqlite3.Connection | None:
        """A read-only connection of its own to the active segment; None when none can be had.

        For a read too long to finish under :attr:`lock`: a read left open on
        :attr:`conn` would hold a WAL snapshot there, and an append through
        :attr:`conn` once another process committed fails at once
        (SQLITE_BUSY_SNAPSHOT, or SQLITE_BUSY without its busy handler).
        None when the process is short of descriptors (or anything else
        keeps the file from opening): the caller then reads on :attr:`conn`.
        """
        file = self.active.file
        try:
            self.check_files(file)
            uri = "file:" + quote(os.fsencode(os.path.abspath(file))) + "?mode=ro"
            return sqlite3.connect(uri, uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=self.busy_timeout)
        except (sqlite3.Error, JournalError, OSError):
            return None

    def quick_check(self, conn: sqlite3.Connection, path: os.PathLike[str] | str) -> None:
        """Refuse to write to a damaged file, before the first write.

        SQLite reads only the pages a query touches, so a damaged free list
        or a page referenced twice goes unnoticed until an append allocates
        a page, and that append may then overwrite committed events.  The
        quick check reads every page once: about 12 ms per 100,000 events
        (5 MB) here, against some 400 ms to replay them.  Only the active
        segment is checked, so the cost is bounded by the segment size.
        """
        problems = [line for (line,) in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            detail = " ".join(" ".join(problems).split())
            where = Path(path)
            raise JournalCorrupt(where, f"is damaged (SQLite's quick_check: {detail[:300]})",
                                 errors.MOVE_ASIDE if where == self.path
                                 else self.segment_fix(where))

    def let_go(self, conn: sqlite3.Connection) -> None:
        """Close *conn*, left for a newer one, once no read streams from it (holding lock).

        A segment left behind is soon retired, and its file deleted: a
        connection kept to it holds the deleted file's blocks (its -wal and
        -shm too) until the connection goes, which without a close is
        whenever the garbage collector runs (a connection is in a reference
        cycle with its statement cache).  A read still streaming rows from
        it closes it when it ends (:meth:`stream_ended`).
        """
        if self.streams.get(conn):
            self.superseded.append(conn)
            return
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def stream_started(self, conn: sqlite3.Connection) -> None:
        """A read streams rows from *conn* until :meth:`stream_ended` (holding lock)."""
        self.streams[conn] = self.streams.get(conn, 0) + 1

    def stream_ended(self, conn: sqlite3.Connection) -> None:
        """A read streaming from *conn* ended: close it if it was left meanwhile (holding lock)."""
        left = self.streams.pop(conn, 1) - 1
        if left:
            self.streams[conn] = left
        elif conn in self.superseded:
            self.superseded.remove(conn)
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    # -- segments ------------------------------------------------------------

    def seal(self) -> str | None:
        """What :meth:`sealed_next` says of the connection's segment."""
        return self.sealed_next(self.conn)

    def sealed_next(self, conn: sqlite3.Connection) -> str | None:
        """The name of the segment that took over from *conn*'s, None while it is active."""
        sql = "SELECT next FROM sealed LIMIT 1"
        try:
            # Every row read: a statement run to its end leaves no snapshot open.
            rows = (self.run(sql) if conn is self.conn else conn.execute(sql)).fetchall()
        except sqlite3.OperationalError as e:
            # A development version's head, about to be refused (see
            # opening.prepare): never sealed.
            if "no such table" in str(e):
                return None
            raise
        return str(rows[0][0]) if rows else None

    def is_sealed(self, segment: Segment) -> bool:
        if segment.file == self.active.file:
            return self.sealed_next(self.conn) is not None
        try:
            st = os.stat(segment.file)
        except FileNotFoundError:
            # Listed, then gone: another process retired it meanwhile, and
            # only a sealed segment is ever retired.
            return True
        except OSError:
            st = None
        # A seal is never taken back: a file seen sealed (by any store of
        # this process) is not connected to again (one connection less per
        # open, and per read of the segment list).
        if st is not None and sealed.known(self.path, segment, sealed.identity(st)) is not None:
            return True
        try:
            conn = self.connect_segment(segment.file)
        except JournalError:
            if not os.path.exists(segment.file):
                return True
            raise
        try:
            found = self.sealed_next(conn) is not None
        except sqlite3.Error as e:
            raise self.translate(e, "read", segment.path) from e
        finally:
            conn.close()
        if found and st is not None:
            sealed.remember(self.path, segment, sealed.identity(st), None)
        return found

    def resolve(self, *, remove: bool = True) -> list[Segment]:
        """Every kept segment, oldest first, the active one last.

        The newest file is active when the one before it is sealed; when
        that one is not, the newest was left by a rollover that crashed
        before its seal.  A writer removes it, under the write lock of the
        segment before (which a live rollover holds throughout); a reader
        leaves it and reads past it.
        """
        # The directory the later segments are opened through, each listing.
        segments.check_directory(self.path, writer=not self.readonly)
        found = segments.listed(self.path)
        sealed.forget_unlisted(self.path, found)
        while len(found) > 1 and not self.is_sealed(found[-2]):
            if remove and not self.readonly:
                self._remove_orphan(found[-2], found[-1])
            found.pop()
        return found

    def _remove_orphan(self, before: Segment, orphan: Segment) -> None:
        conn = self.conn if before.file == self.active.file else self.connect_segment(
            before.file)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self.sealed_next(conn) is None:
                    segments.remove_file(orphan.file)
                    for tmp in segments.temporaries(self.path):
                        segments.remove_file(tmp)
            finally:
                conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            raise self.translate(e, "open", before.path) from e
        finally:
            if conn is not self.conn:
                conn.close()

    def open_active(self) -> None:
        """Move the connection from the head to the active segment, if that is another."""
        active = self.resolve()[-1]
        while True:
            try:
                self._connect_newest(active)
                break
            except JournalError:
                # Another process may have rolled over past the segment listed
                # as newest, and retired it, between the listing and the look
                # inside it: the seal then names a file already gone, or the
                # file goes while SQLite opens it and its -wal (an I/O error).
                # A stale listing shows in a new one; the same one means it
                # is damage.
                newest = self.resolve()[-1]
                if newest.file == active.file:
                    raise
                active = newest
        if not self.readonly and segments.temporaries(self.path):
            # Left by a rollover that crashed before its rename; one that is
            # running holds this write lock while its file exists.
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    if self.sealed_next(self.conn) is None:
                        for tmp in segments.temporaries(self.path):
                            segments.remove_file(tmp)
                finally:
                    self.conn.execute("ROLLBACK")
            except sqlite3.Error as e:
                raise self.translate(e, "open", self.active.path) from e

    def _connect_newest(self, active: Segment) -> None:
        if active.file != self.active.file:
            self._connect_active(active)
            return
        try:
            following = self.sealed_next(self.conn)
        except sqlite3.Error as e:
            raise self.translate(e, "open", active.path) from e
        if following is not None:
            raise errors.missing(self.path, active.path, following, self.conn)
        if self.active_id is None:
            self.active_id = self.identity

    def _connect_active(self, active: Segment) -> None:
        try:
            # Before the connect: after it, the file may be sealed and retired. A
            # name never comes back, so this is the file connected to (or none is).
            st = os.stat(active.file)
        except FileNotFoundError:  # retired since the listing: open_active lists again
            raise JournalCorrupt(active.path, "is missing", self.segment_fix(active.path)) from None
        conn = self.connect_segment(active.file)
        try:
            base = conn.execute("SELECT base, digest FROM segment").fetchone()
            following = self.sealed_next(conn)
            if following is not None:
                raise errors.missing(self.path, active.path, following, self.conn)
            if base is None or int(base[0]) != active.base:
                raise JournalCorrupt(active.path, "does not say where its events start",
                                     self.segment_fix(active.path))
            self.base = (int(base[0]), bytes(base[1]))
            if not self.readonly:
                self.quick_check(conn, active.file)
        except sqlite3.Error as e:
            conn.close()
            raise self.translate(e, "open", active.path) from e
        except BaseException:
            conn.close()
            raise
        with contextlib.suppress(sqlite3.Error):
            # The segment left behind is sealed: only read from now on.  Pages
            # of it still in its -wal would make every process that first
            # opens it rebuild the WAL's index from them (about a millisecond
            # a MB, on every open that reads across segments); moved into the
            # database file, they are read directly.  Best effort, and not
            # waiting for readers: what is left stays readable through the -wal.
            self.conn.execute("PRAGMA busy_timeout = 0")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        old = self.conn
        self.conn = conn
        self.writing = None
        self.let_go(old)
        # A segment's connection starts fully synchronous.
        self.synced = True
        self.active = active
        self.active_id = (st.st_dev, st.st_ino)

    # -- transactions --------------------------------------------------------

    def begin(self, durable: bool = True) -> None:
        """BEGIN IMMEDIATE on the active segment, moving on past any rollover made meanwhile.

        *durable* False commits without a sync of its own (SQLite's
        ``synchronous`` is set per connection, between transactions, so it is
        set again on the connection of a segment moved on to).

        The seal is read inside the transaction: a rollover seals a segment
        in a write transaction of its own, so either this one sees the seal
        or the rollover waits for it to end.
        """
        while True:
            self.synchronous(durable)
            try:
                self.run("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                if not self.ready or self.still_there():
                    raise
                # Retired and removed since this process last wrote.
                self.open_active()
                continue
            if not self.ready or self.seal() is None:
                return
            self.conn.execute("ROLLBACK")
            self.open_active()

    def synchronous(self, durable: bool) -> None:
        """Make the connection's next commit synced or not (only outside a transaction)."""
        if durable != self.synced:
            self.run(schema.SYNCHRONOUS[durable])
            self.synced = durable

    def run(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        """Run *sql* on the connection; the caller reads any rows it gives to their end."""
        cursor = self.writing
        if cursor is None or cursor.connection is not self.conn:
            cursor = self.writing = self.conn.cursor()
        try:
            return cursor.execute(sql, params)
        except BaseException:
            # An error's traceback keeps its frames' locals: this cursor's
            # statement would keep the connection (its files, and a retired
            # segment's blocks) open past its close for as long as the error
            # is kept, by the caller or in sys.last_exc.
            del cursor
            raise

    def still_there(self) -> bool:
        try:
            st = os.stat(self.active.file)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.active_id

    def tail(self, conn: sqlite3.Connection) -> tuple[int, bytes]:
        """The seq and digest of the last event, or of the one before the segment's first."""
        row = conn.execute("SELECT seq, digest FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        return self.base if row is None else (int(row[0]), bytes(row[1]))

    @contextlib.contextmanager
    def transaction(self, doing: str, *, durable: bool = True
                    ) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises.

        *durable* False commits without a sync of its own (SQLite's
        ``synchronous`` is set per connection, between transactions): the
        frames reach the -wal file, which the next durable commit syncs
        whole, so what is durable is always a prefix of what was committed.

        Whatever fails, the connection is left outside any transaction: a
        ROLLBACK that fails, or leaves one open (SQLite keeps it after some
        I/O errors), closes the connection and opens a new one.  Otherwise
        the connection would keep the journal's write lock, and every other
        writer would wait for it in vain.
        """
        with self.lock:
            self.refuse_if_broken(doing)
            try:
                self.begin(durable)
                try:
                    yield self.conn
                    self.conn.execute("COMMIT")
                except BaseException:
                    self.abort()
                    raise
            except sqlite3.Error as e:
                raise self.translate(e, doing) from e

    def abort(self) -> None:
        """End the open transaction, if any, whatever it takes (the caller holds lock)."""
        if not self.conn.in_transaction:
            return
        with contextlib.suppress(sqlite3.Error):
            self.conn.execute("ROLLBACK")
        if self.conn.in_transaction:
            self._reconnect()

    def _reconnect(self) -> None:
        # As in close(): the cursor goes first, or the connection outlives its close.
        self.writing = None
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()
        try:
            if self.active.is_head:
                self.conn = self.connect_head()
            else:
                self.conn = self.connect_segment(self.active.file)
            self.conn.execute("PRAGMA synchronous=FULL")
            self.synced = True
            sticky.mark_database(self.active.file)
        except (sqlite3.Error, JournalError) as e:
            self.broken = f"its connection could not be reopened after a failed write ({e})"

    def active_size(self) -> int:
        """Bytes the active segment's database holds, what is still in its -wal included.

        Not the files' sizes: a -wal file keeps the largest size it ever
        reached, however little it holds since (the caller holds lock).
        """
        (pages,) = self.conn.execute("PRAGMA page_count").fetchone()
        (size,) = self.conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(size)

    def close_superseded(self) -> None:
        """Close the connections left for newer ones (the caller holds lock)."""
        for conn in self.superseded:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self.superseded = []

    def close(self) -> None:
        """Close the connection (the caller holds lock)."""
        # The write path's cursor first: a statement it still holds
        # (one a busy journal failed) would keep the closed
        # connection's files and locks open for as long as it lives.
        self.writing = None
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    def parked(self) -> list[object]:
        """In a forked child: what the copy holds of SQLite, let go of without a close."""
        held: list[object] = [
            c for c in (self.conn, self.writing, *self.superseded) if c is not None]
        self.identity = None
        self.writing = None
        self.superseded = []
        self.broken = "this is a forked copy of another process's journal connection"
        return held
