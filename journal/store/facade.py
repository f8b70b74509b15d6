"""The append-only SQLite file that holds the events.

One table, ``events``, ordered by a global, gap-free sequence number.  The
database itself refuses UPDATE and DELETE (triggers), so nothing written is
ever rewritten.  Each record carries a digest chained over its predecessor's,
so a changed, removed or reordered record is detected by :meth:`Store.verify`.

A second table, ``checkpoints``, holds what :mod:`journal.checkpoint` derives
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
import ctypes
import errno
import gc
import hashlib
import json
import os
import sqlite3
import stat
import struct
import threading
import time as _time
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from pathlib import Path
from time import monotonic, sleep
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import quote

import attrs

from journal import segments, sticky
from journal.errors import (
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalFull,
    JournalReadOnly,
    JournalVersionError,
    RuleViolation,
    UnknownKind,
    UnsafeRoot,
)
from journal.events import Event, Record, Unreadable, decode, encode
from journal.segments import DEFAULT_RETENTION, MAX_KEPT, SEGMENT_SQL, Retention, Segment

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SEGMENTED_VERSION", "History", "Pending",
           "SegmentInfo", "Store"]

SCHEMA_VERSION: Final = 1
# A journal that has rolled over to a second segment: a sessiontemp that
# does not know segments would append to the sealed first file, so it must
# refuse the journal instead.
SEGMENTED_VERSION: Final = 2
# "STMP": marks the file as a sessiontemp journal in SQLite's header.
APPLICATION_ID: Final = 0x53544D50
_GENESIS: Final = bytes(16)
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_blake2b: Final = hashlib.blake2b
# The kinds of the records that tell a generation's life apart from its
# leases, and of those that open and end a manager: what the two expression
# indexes below cover.  Partial indexes: a lease's acquire and release (most
# of the journal) are not indexed, so they cost an append nothing more.
_GENERATION_LIFE: Final = ("generation.created", "generation.ready", "command.started",
                           "removal.started", "removal.finished", "generation.reappeared")
_MANAGER_LIFE: Final = ("manager.opened", "manager.closed", "manager.dead")
# Name, indexed expression, and the kinds it covers.  A query uses one only
# when its WHERE holds the very same expression and kind condition.
_INDEXES: Final = (
    ("events_by_generation", "json_extract(payload, '$.generation')", _GENERATION_LIFE),
    ("events_by_manager", "json_extract(payload, '$.manager')", _MANAGER_LIFE),
)
# Ids per query: well below SQLite's limit on host parameters.
_IDS_PER_QUERY: Final = 500
_INSERT: Final = "INSERT INTO events (seq, time, kind, payload, digest) VALUES (?, ?, ?, ?, ?)"
# An append alone: its own transaction (SQLite's autocommit), with the seal
# checked in the statement, so it writes nothing into a sealed file.
_INSERT_UNSEALED: Final = ("INSERT INTO events (seq, time, kind, payload, digest) "
                           "SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM sealed)")
_SEALED_TABLE: Final = next(sql for sql in SEGMENT_SQL if " sealed " in sql)
_MOVE_ASIDE: Final = "Move it aside (the manager then starts a new journal) or pass another root"
_RETRY: Final = "Nothing already committed was lost; retry, and report it if it persists"
SegmentHook = Callable[[Literal["segment"], str], None]


# The journal files this process has connections to, by (device, inode).
_OPEN: Final[Counter[tuple[int, int]]] = Counter()
# Not Final: made anew in a forked child, like _SEALED_LOCK (see _forked).
_OPEN_LOCK = threading.Lock()
# The open stores of this process, by their journal's (device, inode): a
# segment one of them retires is let go of by all the others at once (see
# Store.retire), not only at their next look.
_PEERS: Final[dict[tuple[int, int], weakref.WeakSet[Store]]] = {}
# Connections inherited through fork(), kept referenced so that they are
# never closed (see Store.forget).
_FORKED: Final[list[sqlite3.Connection | sqlite3.Cursor]] = []
# Every store of this process, so that a forked child parks the copy of each,
# a manager's or not (a recovery pass's in another thread, one half opened).
_STORES: Final[weakref.WeakSet[Store]] = weakref.WeakSet()
# Looked up now, not in a forked child (where a lookup could wait for the
# dynamic loader's lock): a child takes a reference to each connection it
# parks that nothing ever gives back, so that not even its interpreter's
# end frees it (see Store.forget).
_NEVER_FREED: Final = ctypes.pythonapi.Py_IncRef
_NEVER_FREED.argtypes = [ctypes.py_object]
_NEVER_FREED.restype = None
# Stores their owner dropped unclosed, waiting to be closed (see Store.abandon).
_ABANDONED: Final[list[Store]] = []
# What this process has read of segment files that were sealed, by journal
# (its head's path), then by segment (its base: its file name within the
# journal): the file's (device, inode, size, mtime) when it was found sealed,
# and once read, what it holds.  A sealed segment is never written again, so
# whether it is sealed and what it holds (its events, seal and checkpoints)
# stay as read for as long as the file does.  Shared by every store of the
# process: each Manager open is a store of its own, and without it would
# connect to every kept segment again.  The file's size and mtime are
# compared so that a file replaced (never done to a segment, but a journal
# can be moved aside) is read afresh.  Each listing of a journal's segments
# drops what it no longer lists, so that what is remembered is what is kept,
# not every segment the journal ever had.
_Identity: TypeAlias = tuple[int, int, int, int]
# (first, last, sealed, covered, has_events, based) of a segment: see SegmentInfo.
_Facts: TypeAlias = tuple[int | None, int | None, float | None, int | None, bool, bool]
_Known: TypeAlias = tuple[_Identity, _Facts | None]
# A process keeps an entry for each kept segment of each journal it opened
# for as long as it runs, and a long-lived manager sees its journal's kept
# segments go from one to MAX_KEPT: an entry is keyed by the segment's base,
# not its path, and packed into one bytes object (about 100 bytes, where the
# tuples of ints and a float it holds took some 450, and the Paths more).
_KNOWN: Final[dict[Path, dict[int, bytes]]] = {}
# The identity's four numbers, the three seqs of the facts, the time sealed,
# then flags: facts read, has events, and which of the facts are None.
_RECORD: Final = struct.Struct("=QQqqqqqdB")
_READ, _HAS_EVENTS, _NO_FIRST, _NO_LAST, _NO_SEALED, _NO_COVERED, _BASED = (
    1 << i for i in range(7))
# Retired heads found with no free page left, by journal: one only ever has
# rows added (to its retired table) from then on, so it never needs the
# vacuum a killed retirement leaves undone (see Store.retire).
_VACUUMED: Final[dict[Path, _Identity]] = {}
_SEALED_LOCK = threading.Lock()
# Bounds the caches of a process that opens many journals.
_SEALED_MAX: Final = 4096


def _forked() -> None:
    """In a forked child: this module's locks anew, and no connection counted as open.

    A thread of the parent may have held either lock at the fork, and no
    thread of the child would ever release its copy.  Every connection the
    child inherited is the parent's: it is parked (Store.forget), never used
    nor freed.  Rebinding, clearing and parking take no lock while the child
    has one thread.
    """
    global _OPEN_LOCK, _SEALED_LOCK
    _OPEN_LOCK = threading.Lock()
    _SEALED_LOCK = threading.Lock()
    _OPEN.clear()
    _PEERS.clear()
    # Abandoned ones too: the parent's to close.
    for store in list(_STORES):
        store.forget()
    _ABANDONED.clear()
    if _STORES or _FORKED:
        # Nor is any other SQLite object the parent left to the garbage
        # collector (a closed store's connection and statements, which
        # sqlite3 keeps in a reference cycle): freeing one in the child
        # (sqlite3_finalize, sqlite3_close) takes SQLite's mutexes, which a
        # thread of the parent may have held at the fork.  What existed at
        # the fork is left out of the child's collections; what the child
        # makes is collected as usual.
        gc.freeze()


os.register_at_fork(after_in_child=_forked)


def _close_abandoned() -> None:
    """Close every abandoned store (Store.abandon) whose locks are free now; never waits."""
    if not _ABANDONED or not _OPEN_LOCK.acquire(blocking=False):
        return
    try:
        for store in list(_ABANDONED):
            running = store._maintenance_thread
            if running is not None and running.is_alive():
                continue
            if not store._lock.acquire(blocking=False):
                continue
            try:
                store._close_locked()
            finally:
                store._lock.release()
            _ABANDONED.remove(store)
    finally:
        _OPEN_LOCK.release()


def _identity(st: os.stat_result) -> _Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _pack(identity: _Identity, facts: _Facts | None) -> bytes | None:
    """*identity* and *facts* as one :data:`_RECORD`; None if a number does not fit in it."""
    first, last, sealed, covered, has_events, based = facts or (
        None, None, None, None, False, False)
    flags = ((_READ if facts is not None else 0) | (_HAS_EVENTS if has_events else 0)
             | (_BASED if based else 0)
             | (_NO_FIRST if first is None else 0) | (_NO_LAST if last is None else 0)
             | (_NO_SEALED if sealed is None else 0) | (_NO_COVERED if covered is None else 0))
    try:
        return _RECORD.pack(*identity, first or 0, last or 0, covered or 0, sealed or 0.0, flags)
    except struct.error:
        return None


def _unpack(record: bytes) -> _Known:
    dev, ino, size, mtime, first, last, covered, sealed, flags = _RECORD.unpack(record)
    facts = None if not flags & _READ else (
        None if flags & _NO_FIRST else first, None if flags & _NO_LAST else last,
        None if flags & _NO_SEALED else sealed, None if flags & _NO_COVERED else covered,
        bool(flags & _HAS_EVENTS), bool(flags & _BASED))
    return (dev, ino, size, mtime), facts


def _known(journal: Path, segment: Segment, identity: _Identity) -> _Known | None:
    """What is remembered of *segment* of *journal*, if its file is still the one read."""
    record = _KNOWN.get(journal, {}).get(segment.base)
    if record is None:
        return None
    known = _unpack(record)
    return known if known[0] == identity else None


def _remember(journal: Path, segment: Segment, identity: _Identity,
              facts: _Facts | None) -> None:
    """Remember *segment* of *journal* as sealed, with *facts* if they were read."""
    record = _pack(identity, facts)
    with _SEALED_LOCK:
        entries = _KNOWN.get(journal)
        if entries is None:
            if len(_KNOWN) >= _SEALED_MAX:
                # Only a cost: whatever was forgotten is read again.
                _KNOWN.clear()
            entries = _KNOWN[journal] = {}
        known = entries.get(segment.base)
        if facts is None and known is not None and _unpack(known)[0] == identity:
            # Found sealed again: what was read of it stays.
            return
        if record is None:
            # Only a cost, as above.
            entries.pop(segment.base, None)
        else:
            entries[segment.base] = record


def _forget_unlisted(journal: Path, listed: list[Segment]) -> None:
    """Drop what is remembered of *journal*'s segment files that *listed* no longer has."""
    with _SEALED_LOCK:
        known = _KNOWN.get(journal)
        if known is None:
            return
        bases = {segment.base for segment in listed}
        if not known.keys() <= bases:
            _KNOWN[journal] = {base: k for base, k in known.items() if base in bases}


_SYNCHRONOUS: Final = {True: "PRAGMA synchronous=FULL", False: "PRAGMA synchronous=NORMAL"}


def _unopenable(journal: Path, e: OSError) -> JournalError:
    """The journal's error for an OSError met while opening *journal*'s files."""
    where = Path(os.fsdecode(e.filename)) if e.filename else journal
    why = f"{where} cannot be opened ({e.strerror or e})"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return JournalReadOnly(journal, why, "Make it readable and writable, or pass a root "
                               "on a writable file system")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return JournalFull(journal, why, "Free space on it; nothing already committed was lost")
    if e.errno in (errno.EMFILE, errno.ENFILE):
        return JournalError(journal, why, "Too many files are open: close some, or raise the "
                            "limit (ulimit -n), then try again")
    return JournalError(journal, why, "Check the file system holding it, then try again")


def _any_kind(kinds: Sequence[str]) -> str:
    """``(kind = ... OR ...)`` over fixed kind names: the indexes' condition.

    Not ``kind IN (...)``: SQLite evaluates an index's condition on every
    INSERT, and builds a temporary table for an IN list of more than two
    values each time, which cost every append a third of its INSERT.
    """
    return "(" + " OR ".join(f"kind = '{kind}'" for kind in kinds) + ")"


def _index_sql() -> list[tuple[str, str]]:
    """``(name, CREATE INDEX ...)`` for each read index (fixed names and kinds: nothing to bind)."""
    return [(name, f"CREATE INDEX IF NOT EXISTS {name} ON events ({expression}) "
                   f"WHERE {_any_kind(kinds)}") for name, expression, kinds in _INDEXES]


# fold(records, base) -> the state after *records* (see Store.submit).
Fold: TypeAlias = Callable[[list[Record], Any], Any]
# catch_up(records) -> the encoded state after *records*, folded onto the
# state being checkpointed (see Store.save_checkpoint).
CatchUp: TypeAlias = Callable[[list[Record]], bytes]


class _StaleTail(Exception):
    """Another writer appended after the last event this store knew of."""


class Pending:
    """One append waiting in the queue for a group commit, and then its outcome."""

    __slots__ = ("base", "decide", "done", "durable", "error", "events", "fold", "guess",
                 "guessed", "records", "rows", "speculative", "time", "waiter", "waiting")

    def __init__(self, events: list[Event], rows: list[tuple[str, str]], time: float,
                 decide: Callable[[list[Record]], object] | None, durable: bool,
                 fold: Fold | None, base: object) -> None:
        self.events = events
        self.rows = rows
        self.time = time
        self.decide = decide
        self.durable = durable
        self.fold = fold
        self.base = base
        self.speculative: Any = None
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


def chain(previous: bytes, seq: int, time: float, kind: str, payload: str) -> bytes:
    """The digest of one record, linking it to the digest of the one before."""
    return _blake2b(previous + f"{seq}\x1f{time!r}\x1f{kind}\x1f{payload}".encode(),
                    digest_size=16).digest()


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
    file: str = attrs.field(converter=os.fspath)
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
        # Set in a forked child's copy, which never touches the file again.
        self._forked = False
        _STORES.add(self)
        self.path = Path(path)
        self.retention = retention
        self._step_hook = step_hook
        # The segment the connection is on: the head until a rollover.
        self._active = Segment(self.path, 0)
        self._base: tuple[int, bytes] = (0, _GENESIS)
        # (seq, digest) of the last event this store committed: the next
        # batch starts there without reading it, and the sequence trigger
        # (or the primary key) refuses its first row if another process
        # appended meanwhile; the batch then reads the tail and runs again.
        self._known_tail: tuple[int, bytes] | None = None
        self._active_id: tuple[int, int] | None = None
        # Set once open: from then on every write transaction checks for a seal.
        self._ready = False
        # Reads streaming rows, by connection; connections left for newer
        # ones while a read streamed from them, closed when it ends.
        self._streams: dict[sqlite3.Connection, int] = {}
        self._superseded: list[sqlite3.Connection] = []
        # The reading connection over every kept segment, and what it was built for.
        self._span: sqlite3.Connection | None = None
        self._span_key: object = None
        self._span_schema = 0
        # The schema name each kept segment (by its file) is attached under there.
        self._span_attached: dict[str, str] = {}
        # Whether the connection's segment has a sealed table; if not, the
        # schema cookie it was last looked for at.
        self._seal_table = False
        self._seal_schema = -1
        # Called with the last seq after each append when maintenance is due
        # (see :meth:`maintenance_due`); set by whoever can write checkpoints.
        self.maintenance: Callable[[int], None] | None = None
        self.maintenance_every = 20_000
        self._maintenance_thread: threading.Thread | None = None
        self._maintained = 0
        # Why the last rollover could not start a new segment, for the caller to report.
        self.rollover_failed: str | None = None
        # immutable: read the file as it is, without any lock or -shm file;
        # only for a copy that nothing else writes.  Implies readonly.
        self.readonly = readonly or immutable
        self.immutable = immutable
        # One connection shared by the threads of one manager; appends are
        # serialised here because a sqlite3 connection is not re-entrant.
        self._lock = threading.Lock()
        self._busy_timeout = busy_timeout
        self._identity: tuple[int, int] | None = None
        # Set when a failed transaction could not be undone, or a commit's
        # outcome could not be read back: nothing more is written through
        # this store, so nothing can be written on a false premise.
        self.broken: str | None = None
        # Group commit (see submit): appends queued for the next leader.
        self._queued = threading.Lock()
        self._queue: list[Pending] = []
        self._leading = False
        # Threads in drain(), waiting for the running commit to end.
        self._idle: list[threading.Lock] = []
        self._next_seq: int | None = None
        self._synced = True
        # The write path's statements run through one cursor (:meth:`_run`):
        # conn.execute makes a cursor per call, and the connection keeps a
        # reference to each until it has made 200 more (tens of kB a manager
        # carries up and down).  Only statements run to their end go through
        # it: a SELECT left part read would hold its read snapshot open
        # until the cursor's next statement.
        self._writing: sqlite3.Cursor | None = None
        self.tip: object = None
        self.durable_tip: object = None
        # Counts the times a folded state had to be worked out again, or
        # was thrown away: a caller holding a speculative state rereads tip.
        self.epoch = 0
        try:
            with _OPEN_LOCK:
                self._check_header()
                self._conn = self._connect(busy_timeout)
                try:
                    self._prepare()
                    if not self.immutable:
                        # Read by now, so SQLite has made its -wal and -shm (a
                        # reader too, where it may write beside the journal).
                        sticky.mark_database(self.path)
                    st = os.stat(self.path)
                except BaseException:
                    self._conn.close()
                    raise
                self._identity = (st.st_dev, st.st_ino)
                _OPEN[self._identity] += 1
                _PEERS.setdefault(self._identity, weakref.WeakSet()).add(self)
            try:
                self._open_active()
                if not self.readonly and not self._active.is_head:
                    # A segment made before rollovers carried them: recovery's
                    # lookups of the few names it finds on disk read by index.
                    self._ensure_indexes()
            except BaseException:
                self.close()
                raise
        except OSError as e:
            if isinstance(e, JournalError | UnsafeRoot):
                raise
            # Met opening or listing the journal's files (no descriptor left,
            # a directory that cannot be read): never a bare OSError.
            raise _unopenable(self.path, e) from e
        self._ready = True
        _close_abandoned()

    # -- opening -------------------------------------------------------------

    def _check_header(self) -> None:
        self._check_files(self.path)
        segments.check_directory(self.path, writer=not self.readonly)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self.readonly:
                raise JournalError(
                    self.path, "does not exist", "Check the path, or pass --root for a root"
                ) from None
            return
        if stat.S_ISDIR(st.st_mode):
            raise JournalCorrupt(self.path, "is a directory", _MOVE_ASIDE)
        if not stat.S_ISREG(st.st_mode):
            raise JournalCorrupt(self.path, "is not a regular file", _MOVE_ASIDE)
        if not self.readonly:
            self._check_writable()
        if st.st_size == 0 or _OPEN[(st.st_dev, st.st_ino)]:
            return
        # SQLite takes a short file for an empty database and would write
        # its schema over it, so the header is checked here first.  This
        # process has no connection to the file yet (checked above, under
        # _OPEN_LOCK): closing a descriptor of it would otherwise drop every
        # POSIX lock the process holds on it, including a live connection's
        # read lock, and another process would then checkpoint and delete a
        # -wal still in use.
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except PermissionError as e:
            raise JournalReadOnly(
                self.path, f"cannot be read ({e.strerror})", "Fix its permissions and try again"
            ) from None
        if head != _SQLITE_MAGIC:
            raise JournalCorrupt(self.path, "is not a SQLite database", _MOVE_ASIDE)

    def _check_writable(self) -> None:
        """Refuse, on open, a journal that could be read but never appended to.

        On a read-only file system SQLite may still open the file, read-only,
        and the first append (or the recovery lock beside it) fails later
        with a less useful error.  access() needs no descriptor (closing one
        would drop this process's SQLite locks on the file, see below) and,
        unlike the mode bits, it reports an immutable file or a read-only
        mount to root as well.  The directory must take the -wal file.
        """
        for target in (self.path, self.path.parent):
            if not os.access(target, os.W_OK):
                raise JournalReadOnly(
                    self.path,
                    f"cannot be written: {'it' if target == self.path else 'its directory'} "
                    "or its file system does not accept writes (read-only mount, chattr +i, "
                    "or permissions)",
                    "Make it writable, or pass a root on a writable file system",
                )

    def _check_files(self, file: os.PathLike[str] | str) -> None:
        """Refuse a journal file whose name, -wal or -shm is a symlink (or, to write, not ours).

        Every file is checked the same way before SQLite opens it by name:
        the head, the segment being written and each sealed one.
        """
        segments.check_files(file, writer=not self.readonly)

    def _connect(self, busy_timeout: float) -> sqlite3.Connection:
        self._check_files(self.path)
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
                    timeout=busy_timeout,
                )
        except sqlite3.Error as e:
            raise self._translate(e, "open") from e
        return conn

    def _prepare(self) -> None:
        try:
            app_id, version, tables = self._header()
            if version > SEGMENTED_VERSION:
                raise JournalVersionError(
                    self.path,
                    f"has schema version {version}, newer than the {SEGMENTED_VERSION} this "
                    "version of sessiontemp reads",
                    "Upgrade sessiontemp, or pass another root",
                )
            if version and app_id != APPLICATION_ID:
                raise JournalCorrupt(self.path, "is a SQLite database of another program",
                                     _MOVE_ASIDE)
            if self.readonly:
                if version == 0:
                    raise JournalCorrupt(self.path, "holds no sessiontemp journal", _MOVE_ASIDE)
                return
            if version == 0 and tables:
                raise JournalCorrupt(self.path, "is a SQLite database of another program",
                                     _MOVE_ASIDE)
            sealed = bool(version) and self._sealed_next(self._conn) is not None
            if version and not sealed:
                # Only the active segment is checked: sealed ones are never
                # written again, and the history they hold is not read here.
                self._quick_check()
            # Only now, with the file known to be empty or ours: WAL mode
            # rewrites the header.
            self._enter_wal()
            self._conn.execute("PRAGMA synchronous=FULL")
            if version == 0:
                self._create_schema()
            elif not sealed and not self._has_checkpoints():
                # A journal written before checkpoints existed: the table is
                # added, the events stay exactly as they are.
                with self._transaction("open"):
                    if not self._has_checkpoints():
                        self._create_checkpoints()
            if not sealed:
                # A sealed head is never written again (a retired one has no
                # events left): the segment being written gets them instead.
                self._ensure_indexes()
        except sqlite3.Error as e:
            raise self._translate(e, "open") from e

    def _enter_wal(self) -> None:
        # Several processes opening a new journal at once conflict while one
        # of them writes the first header: SQLite reports that as busy at
        # once, without waiting through its busy handler, so the wait is here.
        deadline = monotonic() + self._busy_timeout
        while True:
            try:
                (mode,) = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
                break
            except sqlite3.OperationalError as e:
                code = getattr(e, "sqlite_errorcode", 0) & 0xFF
                if code != sqlite3.SQLITE_BUSY or monotonic() >= deadline:
                    raise
            sleep(0.005)
        if str(mode).lower() != "wal":
            raise JournalError(
                self.path, f"cannot be switched to write-ahead logging (SQLite kept {mode!r})",
                "Pass a root on a local file system that supports shared memory (not NFS)",
            )

    def _quick_check(self, path: os.PathLike[str] | str | None = None) -> None:
        """Refuse to write to a damaged file, before the first write.

        SQLite reads only the pages a query touches, so a damaged free list
        or a page referenced twice goes unnoticed until an append allocates
        a page, and that append may then overwrite committed events.  The
        quick check reads every page once: about 12 ms per 100,000 events
        (5 MB) here, against some 400 ms to replay them.  Only the active
        segment is checked, so the cost is bounded by the segment size.
        """
        problems = [line for (line,) in self._conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            detail = " ".join(" ".join(problems).split())
            where = self.path if path is None else Path(path)
            raise JournalCorrupt(where, f"is damaged (SQLite's quick_check: {detail[:300]})",
                                 _MOVE_ASIDE if where == self.path else self._segment_fix(where))

    def _header(self) -> tuple[int, int, bool]:
        """The application id, the schema version and whether any table exists.

        Read at one moment: another process may be creating the schema, and
        tables seen without the version it commits with them would look like
        another program's database.
        """
        own = not self._conn.in_transaction
        if own:
            self._conn.execute("BEGIN")
        try:
            app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            tables = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            if own and self._conn.in_transaction:
                self._conn.execute("COMMIT")
        return int(app_id), int(version), bool(tables)

    def _has_checkpoints(self) -> bool:
        return bool(self._conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'"
        ).fetchone()[0])

    def _missing_indexes(self, *, active: bool) -> list[str]:
        """The read tables and indexes the file lacks (see :meth:`_ensure_indexes`)."""
        present = dict(self._conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'table')").fetchall())
        missing = [name for name, _, kinds in _INDEXES if name not in present or (
            active and not str(present[name]).endswith(_any_kind(kinds)))]
        if active and "sealed" not in present:
            missing.append("sealed")
        return missing

    def _ensure_indexes(self, *, active: bool = True) -> None:
        """Add the read indexes a journal lacks (one written before they existed).

        Checked first without a write lock, so an open that finds them pays
        nothing; added in one transaction, once, by whichever open gets there
        first.  The first open of a long journal builds them from all its
        rows (about a second per million events); every append after that
        updates them.  On an *active* file (one still appended to) an index
        with the condition of older journals (``kind IN``, which costs every
        append) is built again with today's (readers use either), and an
        empty ``sealed`` table is added where there is none: with it, an
        append alone checks the seal inside its own INSERT (see
        :meth:`_write_alone`).  Only speed is at stake: a file that cannot
        take them now (a full disk) is read by a scan and appended to as
        before, and the next open tries again.
        """
        if not self._missing_indexes(active=active):
            return
        with contextlib.suppress(JournalError), self._transaction("open"):
            missing = set(self._missing_indexes(active=active))
            for name, sql in _index_sql():
                if name in missing:
                    # An index of the older condition goes first.
                    self._conn.execute(f"DROP INDEX IF EXISTS {name}")
                    self._conn.execute(sql)
            if "sealed" in missing:
                # After the indexes: a new file's first pages stay as they were.
                self._conn.execute(_SEALED_TABLE)

    def _create_checkpoints(self) -> None:
        # digest: the chain digest of event seq, which ties the row to one
        # history; a journal whose event seq differs ignores it.
        self._conn.execute(
            "CREATE TABLE checkpoints (seq INTEGER PRIMARY KEY, digest BLOB NOT NULL, "
            "format INTEGER NOT NULL, state BLOB NOT NULL)"
        )

    def _create_schema(self) -> None:
        # Two processes may open a new root at once: the schema is created
        # inside one immediate transaction, and the loser finds it done.
        with self._transaction("open"):
            _app_id, version, _tables = self._header()
            if version == 0:
                # Imported here, where a journal is created: every other
                # process (one opening an existing root, `sessiontemp run`,
                # journal-inspect) is spared a quarter of the package's import.
                import sqlite_utils

                db = sqlite_utils.Database(self._conn)
                db.table("events").create(
                    {"seq": int, "time": float, "kind": str, "payload": str, "digest": bytes},
                    pk="seq",
                    not_null={"time", "kind", "payload", "digest"},
                )
                for action in ("UPDATE", "DELETE"):
                    self._conn.execute(
                        f"CREATE TRIGGER events_no_{action.lower()} BEFORE {action} ON events "
                        "BEGIN SELECT RAISE(ABORT, 'sessiontemp events are append-only'); END"
                    )
                # REPLACE deletes without firing DELETE triggers, and a
                # hand-made seq could leave a gap: the next event must be
                # exactly the one after the last.
                self._conn.execute(
                    "CREATE TRIGGER events_in_sequence BEFORE INSERT ON events "
                    "WHEN NEW.seq IS NOT (SELECT coalesce(max(seq), 0) + 1 FROM events) "
                    "BEGIN SELECT RAISE(ABORT, 'sessiontemp events are append-only, each one right "
                    "after the last'); END"
                )
                # The segment tables come with the first rollover, but for
                # an empty `sealed`, added with the indexes (see
                # _ensure_indexes).
                self._create_checkpoints()
                self._conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- segments ------------------------------------------------------------

    def _seal(self) -> str | None:
        """What :meth:`_sealed_next` says of the connection's segment, cheaply.

        The head of a journal that never rolled over has no ``sealed``
        table; one can only appear with a change of its schema, so until
        then a look at the schema cookie (in the header page) does.
        """
        if not self._seal_table:
            (version,) = self._conn.execute("PRAGMA schema_version").fetchone()
            if version == self._seal_schema:
                return None
            self._seal_schema = int(version)
            self._seal_table = bool(self._conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sealed'"
            ).fetchone()[0])
            if not self._seal_table:
                return None
        return self._sealed_next(self._conn)

    def _sealed_next(self, conn: sqlite3.Connection) -> str | None:
        """The name of the segment that took over from *conn*'s, None while it is active."""
        sql = "SELECT next FROM sealed LIMIT 1"
        try:
            # Every row read: a statement run to its end leaves no snapshot open.
            rows = (self._run(sql) if conn is self._conn else conn.execute(sql)).fetchall()
        except sqlite3.OperationalError as e:
            # A journal from before segments, opened read-only: never sealed.
            if "no such table" in str(e):
                return None
            raise
        return str(rows[0][0]) if rows else None

    def _segment_fix(self, path: Path) -> str:
        return (f"Restore {path} from a backup; or move {self.path} and "
                f"{segments.directory(self.path)} aside (the manager then starts a new journal)")

    def _step(self, detail: str) -> None:
        if self._step_hook is not None:
            self._step_hook("segment", detail)

    def _connect_segment(self, file: os.PathLike[str] | str) -> sqlite3.Connection:
        """A connection to an existing segment file, never creating one.

        Takes the segment's path as listed (a string); only an error makes
        a Path of it, which is how errors name the file.
        """
        self._check_files(file)
        mode = "ro&immutable=1" if self.immutable else "ro" if self.readonly else "rw"
        uri = "file:" + quote(os.fsencode(os.path.abspath(file))) + "?mode=" + mode
        try:
            # Raises at once for a file gone (mode=rw opens it here).
            conn = sqlite3.connect(uri, uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=self._busy_timeout)
        except sqlite3.Error as e:
            raise self._translate(e, "open", Path(file)) from e
        try:
            (app_id,) = conn.execute("PRAGMA application_id").fetchone()
            if int(app_id) != APPLICATION_ID:
                path = Path(file)
                raise JournalCorrupt(path, "is not a segment of a sessiontemp journal",
                                     self._segment_fix(path))
            if not self.readonly:
                conn.execute("PRAGMA synchronous=FULL")
            if not self.immutable:
                # Read by now, so SQLite has made its -wal and -shm.
                sticky.mark_database(file)
        except sqlite3.Error as e:
            conn.close()
            raise self._translate(e, "open", Path(file)) from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _is_sealed(self, segment: Segment) -> bool:
        if segment.file == self._active.file:
            return self._sealed_next(self._conn) is not None
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
        if st is not None and _known(self.path, segment, _identity(st)) is not None:
            return True
        try:
            conn = self._connect_segment(segment.file)
        except JournalError:
            if not os.path.exists(segment.file):
                return True
            raise
        try:
            sealed = self._sealed_next(conn) is not None
        except sqlite3.Error as e:
            raise self._translate(e, "read", segment.path) from e
        finally:
            conn.close()
        if sealed and st is not None:
            _remember(self.path, segment, _identity(st), None)
        return sealed

    def _resolve(self, *, remove: bool = True) -> list[Segment]:
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
        _forget_unlisted(self.path, found)
        while len(found) > 1 and not self._is_sealed(found[-2]):
            if remove and not self.readonly:
                self._remove_orphan(found[-2], found[-1])
            found.pop()
        return found

    def _remove_orphan(self, before: Segment, orphan: Segment) -> None:
        conn = self._conn if before.file == self._active.file else self._connect_segment(
            before.file)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._sealed_next(conn) is None:
                    segments.remove_file(orphan.file)
                    for tmp in segments.temporaries(self.path):
                        segments.remove_file(tmp)
            finally:
                conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            raise self._translate(e, "open", before.path) from e
        finally:
            if conn is not self._conn:
                conn.close()

    def _open_active(self) -> None:
        """Move the connection from the head to the active segment, if that is another."""
        active = self._resolve()[-1]
        while True:
            try:
                self._connect_newest(active)
                break
            except JournalCorrupt:
                # Another process may have rolled over past the segment listed
                # as newest, and retired it, between the listing and the look
                # inside it: the seal then names a file already gone.  A stale
                # listing shows in a new one; the same one means it is damage.
                newest = self._resolve()[-1]
                if newest.file == active.file:
                    raise
                active = newest
        if not self.readonly and segments.temporaries(self.path):
            # Left by a rollover that crashed before its rename; one that is
            # running holds this write lock while its file exists.
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if self._sealed_next(self._conn) is None:
                        for tmp in segments.temporaries(self.path):
                            segments.remove_file(tmp)
                finally:
                    self._conn.execute("ROLLBACK")
            except sqlite3.Error as e:
                raise self._translate(e, "open", self._active.path) from e

    def _missing(self, path: Path, following: str) -> JournalCorrupt:
        """The newest segment is sealed, yet no newer file exists: the one it names is gone."""
        if path == self.path:
            # The head names the segment after it; history retired since
            # then tells which one came last.
            with contextlib.suppress(sqlite3.Error):
                (retired,) = self._conn.execute("SELECT max(seq) FROM retired").fetchone()
                if retired:
                    following = segments.name_of(int(retired) + 1)
        lost = segments.directory(self.path) / following
        return JournalCorrupt(path, f"is sealed, but the segment that follows it, {lost}, "
                              "is missing", self._segment_fix(lost))

    def _connect_newest(self, active: Segment) -> None:
        if active.file != self._active.file:
            self._connect_active(active)
            return
        try:
            following = self._sealed_next(self._conn)
        except sqlite3.Error as e:
            raise self._translate(e, "open", active.path) from e
        if following is not None:
            raise self._missing(active.path, following)
        if self._active_id is None:
            self._active_id = self._identity

    def _connect_active(self, active: Segment) -> None:
        conn = self._connect_segment(active.file)
        try:
            base = conn.execute("SELECT base, digest FROM segment").fetchone()
            following = self._sealed_next(conn)
            if following is not None:
                raise self._missing(active.path, following)
            if base is None or int(base[0]) != active.base:
                raise JournalCorrupt(active.path, "does not say where its events start",
                                     self._segment_fix(active.path))
            self._base = (int(base[0]), bytes(base[1]))
            st = os.stat(active.file)
            if not self.readonly:
                old, self._conn = self._conn, conn
                try:
                    self._quick_check(active.file)
                finally:
                    self._conn = old
        except sqlite3.Error as e:
            conn.close()
            raise self._translate(e, "open", active.path) from e
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
            self._conn.execute("PRAGMA busy_timeout = 0")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        old = self._conn
        self._conn = conn
        self._writing = None
        self._let_go(old)
        # A segment's connection starts fully synchronous.
        self._synced = True
        self._active = active
        self._active_id = (st.st_dev, st.st_ino)
        self._seal_table = True

    def _begin(self, durable: bool = True) -> None:
        """BEGIN IMMEDIATE on the active segment, moving on past any rollover made meanwhile.

        *durable* False commits without a sync of its own (SQLite's
        ``synchronous`` is set per connection, between transactions, so it is
        set again on the connection of a segment moved on to).

        The seal is read inside the transaction: a rollover seals a segment
        in a write transaction of its own, so either this one sees the seal
        or the rollover waits for it to end.
        """
        while True:
            self._synchronous(durable)
            try:
                self._run("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                if not self._ready or self._still_there():
                    raise
                # Retired and removed since this process last wrote.
                self._open_active()
                continue
            if not self._ready or self._seal() is None:
                return
            self._conn.execute("ROLLBACK")
            self._open_active()

    def _synchronous(self, durable: bool) -> None:
        """Make the connection's next commit synced or not (only outside a transaction)."""
        if durable != self._synced:
            self._run(_SYNCHRONOUS[durable])
            self._synced = durable

    def _run(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        """Run *sql* on the store's connection; the caller reads any rows it gives to their end."""
        cursor = self._writing
        if cursor is None or cursor.connection is not self._conn:
            cursor = self._writing = self._conn.cursor()
        try:
            return cursor.execute(sql, params)
        except BaseException:
            # An error's traceback keeps its frames' locals: this cursor's
            # statement would keep the connection (its files, and a retired
            # segment's blocks) open past its close for as long as the error
            # is kept, by the caller or in sys.last_exc.
            del cursor
            raise

    def _still_there(self) -> bool:
        try:
            st = os.stat(self._active.file)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._active_id

    def _tail(self, conn: sqlite3.Connection) -> tuple[int, bytes]:
        """The seq and digest of the last event, or of the one before the segment's first."""
        row = conn.execute("SELECT seq, digest FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        return self._base if row is None else (int(row[0]), bytes(row[1]))

    def _roll_over(self, conn: sqlite3.Connection, checkpoint: tuple[int, bytes, int, bytes],
                   catch_up: CatchUp | None) -> None:
        """Start a new segment after the last event, beginning with the state there; seal this one.

        Runs inside the write transaction that wrote *checkpoint*, so no
        other writer appends between the last event read here and the seal.
        A failure leaves the checkpoint written and the segment active.
        """
        seq, digest = self._tail(conn)
        if seq == self._active.base:
            # Nothing appended here yet: a new segment would bound nothing
            # (and would take this one's very name).
            return
        if checkpoint[0] != seq:
            caught_up = self._caught_up(checkpoint, (seq, digest), catch_up)
            if caught_up is None:
                return
            checkpoint = caught_up
        # Strings, not Paths: a Path would intern the new segment's name.
        folder = segments.folder(self.path)
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
            self._step(f"create {name}")
            segments.create(path, checkpoint=checkpoint,
                            application_id=APPLICATION_ID, version=SEGMENTED_VERSION,
                            indexes=[sql for _, sql in _index_sql()])
        except (OSError, sqlite3.Error) as e:
            with contextlib.suppress(OSError):
                segments.remove_file(segments.temporary(path))
            # Only the bound is delayed: the next checkpoint tries again.
            self.rollover_failed = f"{path}: {e}"
            return
        self._step(f"seal {self._active.name}")
        if self._active.is_head:
            for sql in SEGMENT_SQL:
                conn.execute(sql)
        conn.execute("INSERT INTO sealed (next, seq, time) VALUES (?, ?, ?)",
                     (name, seq, _time.time()))
        if self._active.is_head:
            conn.execute(f"PRAGMA user_version={SEGMENTED_VERSION}")

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
        after, _digest, format, _state = checkpoint
        seq, digest = tail
        why = f"events {after + 1} to {seq} follow the checkpoint at event {after}"
        if catch_up is None:
            self.rollover_failed = f"{self._active.path}: {why}, and nothing was given to fold them"
            return None
        rows = self._reading_after(after).execute(
            "SELECT seq, time, kind, payload FROM events WHERE seq > ? AND seq <= ? ORDER BY seq",
            (after, seq)).fetchall()
        records = []
        for number, time, kind, payload in rows:
            event: Event
            try:
                event = decode(int(number), kind, payload)
            except RuleViolation as e:
                # Refused by the caller's tolerant fold, as a replay does.
                event = Unreadable(kind, payload, e.reason)
            records.append(Record(int(number), float(time), event))
        if [r.seq for r in records] != list(range(after + 1, seq + 1)):
            self.rollover_failed = f"{self._active.path}: {why}, and they could not all be read"
            return None
        try:
            return seq, digest, format, catch_up(records)
        except Exception as e:  # the caller's fold: only the rollover waits
            self.rollover_failed = f"{self._active.path}: {why}, and folding them failed ({e})"
            return None

    def active_size(self) -> int:
        """Bytes the active segment's database holds, what is still in its -wal included.

        Not the files' sizes: a -wal file keeps the largest size it ever
        reached, however little it holds since (the caller holds _lock).
        """
        (pages,) = self._conn.execute("PRAGMA page_count").fetchone()
        (size,) = self._conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(size)

    def rollover_due(self) -> bool:
        """Whether a retirement pass should seal the active segment at a checkpoint first.

        See :attr:`Retention.retirement_rollover_bytes`; checked again by
        :meth:`save_checkpoint` inside its transaction.
        """
        if self.readonly:
            return False
        with self._lock:
            try:
                return self.active_size() >= self.retention.retirement_rollover_bytes
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e

    # -- writing -------------------------------------------------------------

    def append(
        self,
        events: Sequence[Event],
        *,
        time: float,
        decide: Callable[[list[Record]], object] | None = None,
        durable: bool = True,
    ) -> list[Record]:
        """Commit *events* as one transaction and return them as records.

        Returns only once the commit is durable.  Either all of *events* are
        committed, in order and with consecutive sequence numbers, or none is
        and the error says why.  *decide*, when given, sees the records with
        their final sequence numbers inside the transaction, before the
        commit: whatever it raises (a rule the records break) rolls the
        transaction back and propagates, so nothing it refuses is ever written.

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
        return self.wait(self.submit(events, time=time, decide=decide, durable=durable))

    def submit(
        self,
        events: Sequence[Event],
        *,
        time: float,
        decide: Callable[[list[Record]], object] | None = None,
        durable: bool = True,
        fold: Fold | None = None,
        base: object = None,
    ) -> Pending:
        """Queue *events* for the next group commit; :meth:`wait` for it to be durable.

        Group commit: whoever waits first while no commit runs leads: it
        commits, in one transaction and one sync, every append queued
        meanwhile, each in its own savepoint, so that what one append's
        *decide* or *fold* refuses is rolled back alone.

        *fold*, with *base*, threads a caller's state through the queue:
        ``fold(records, base)`` runs here at once, on the sequence numbers
        the records will most likely get, and raises (queueing nothing) if
        it refuses them; its result is :attr:`Pending.speculative`, which
        the caller may build its next append on.  Inside the transaction
        the result is reused when the records got those numbers and
        *base* is what the appends before committed; otherwise *fold*
        runs again on what they did commit, and its refusal fails this
        append alone.  :attr:`tip` is the state after the last append
        folded; a failed transaction puts it back to :attr:`durable_tip`.
        """
        events = list(events)
        # One event is what nearly every append holds.
        rows = [encode(events[0])] if len(events) == 1 else [encode(e) for e in events]
        # The digest covers the time as SQLite gives it back: a float, and
        # never -0.0, which a REAL column returns as 0.0.
        time = float(time) + 0.0
        pending = Pending(events, rows, time, decide, durable, fold, base)
        with self._queued:
            if fold is not None:
                if self._next_seq is None:
                    self._next_seq = self.last_seq() + 1
                first = self._next_seq
                guess = [Record(first, time, events[0])] if len(events) == 1 else [
                    Record(first + i, time, e) for i, e in enumerate(events)]
                pending.speculative = fold(guess, base)
                pending.guess = guess
                pending.guessed = first
            self._queue.append(pending)
            if self._next_seq is not None:
                self._next_seq += len(events)
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
                    batch, self._queue = self._queue, []
            if not lead:
                # Released by a leader (see _wake); a wake-up that finds
                # nothing to do just goes round again.
                waiter.acquire()
                continue
            try:
                self._commit_batch(batch, pending)
            finally:
                self._hand_over(batch)
            if pending.done:
                # Settled by the batch it just led (done is set in this thread).
                break
        if pending.error is not None:
            raise pending.error
        assert pending.records is not None
        return pending.records

    def _hand_over(self, batch: list[Pending]) -> None:
        """End a leader's turn: settle *batch*'s followers, and wake the next leader."""
        with self._queued:
            self._leading = False
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

    def _commit_batch(self, batch: list[Pending], own: Pending) -> None:
        """Commit *batch* in one transaction, settling each pending append's outcome.

        The one place events are written: one transaction, one sync at most.
        """
        tail = self._known_tail
        if len(batch) == 1 and tail is not None and self._seal_table and self._ready:
            p = batch[0]
            if len(p.rows) == 1 and p.decide is None and (p.fold is None or (
                    p.guessed == tail[0] + 1 and p.base is self.tip)):
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
        :meth:`_write_batch` to move on to the active segment.  Only on a
        file known to have a ``sealed`` table, so either the INSERT sees
        the seal or the rollover waits for it (a head retired since has no
        events table any more, but still its seal).  Raises _StaleTail, with
        nothing written, when *tail* is not the last event.
        """
        kind, payload = p.rows[0]
        seq = tail[0] + 1
        digest = chain(tail[1], seq, p.time, kind, payload)
        committing = False
        try:
            with self._lock:
                if self.broken is not None:
                    raise JournalError(self.path, f"could not append to it: {self.broken}",
                                       "Close the manager and open a new one")
                conn = self._conn
                try:
                    if p.durable != self._synced:
                        self._synchronous(p.durable)
                    # From here on the statement commits, and may fail after that.
                    committing = True
                    try:
                        cursor = self._run(_INSERT_UNSEALED,
                                             (seq, p.time, kind, payload, digest))
                    except sqlite3.IntegrityError:
                        raise _StaleTail from None
                    except sqlite3.OperationalError:
                        if self._sealed_next(conn) is None:
                            raise
                        written = False
                    else:
                        written = cursor.rowcount == 1
                except sqlite3.Error as e:
                    raise self._translate(e, "append to") from e
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
        p.records = guess if guess is not None else [Record(seq, p.time, p.events[0])]
        self._known_tail = (seq, digest)
        if p.fold is not None:
            self.tip = self.durable_tip = p.speculative
        else:
            self.durable_tip = self.tip
        if self.maintenance is not None:
            self._maintain_if_due(seq)
        if guess is None:
            with self._queued:
                # Queued appends guessed their numbers from the last batch's;
                # the next ones start from what this one committed.
                self._next_seq = seq + 1 + sum(len(q.events) for q in self._queue)
        return True

    def _write_batch(self, batch: list[Pending], own: Pending,
                     tail: tuple[int, bytes] | None) -> None:
        """:meth:`_commit_batch` after *tail*, the last event known here (None: read it).

        Raises _StaleTail, with nothing written, when *tail* is not the last.
        The transaction is :meth:`_transaction`'s, written out: this is the
        one path every append takes.
        """
        alone = len(batch) == 1
        tip = self.tip
        last: tuple[int, bytes] | None = None
        # Whether every append got the numbers it guessed, so that those
        # queued since guessed right too.
        exact = True
        seq = 0
        try:
            with self._lock:
                if self.broken is not None:
                    raise JournalError(self.path, f"could not append to it: {self.broken}",
                                       "Close the manager and open a new one")
                try:
                    try:
                        # Inside: an interruption right after BEGIN must not
                        # leave the transaction (and the write lock) open.
                        self._begin(any(p.durable for p in batch))
                        conn = self._conn
                        seq, digest = self._tail(conn) if tail is None else tail
                        for p in batch:
                            mark = (seq, digest)
                            guessed = p.guessed == seq + 1
                            fold = p.fold
                            # Folded ahead on what was committed before it:
                            # nothing is left that could refuse it.
                            reuse = fold is None or (guessed and p.base is tip)
                            # A savepoint only where something may yet refuse
                            # this append alone: its decide, or its fold run again.
                            undo = not alone and (p.decide is not None or not reuse)
                            if undo:
                                conn.execute("SAVEPOINT one_append")
                            for kind, payload in p.rows:
                                seq += 1
                                digest = chain(digest, seq, p.time, kind, payload)
                                try:
                                    self._run(_INSERT, (seq, p.time, kind, payload, digest))
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
                            folded = p.speculative
                            if not reuse or p.decide is not None:
                                try:
                                    if not reuse:
                                        assert fold is not None
                                        self.epoch += 1
                                        folded = fold(records, tip)
                                    if p.decide is not None:
                                        p.decide(records)
                                except Exception as e:
                                    if alone:
                                        raise
                                    conn.execute("ROLLBACK TO one_append")
                                    conn.execute("RELEASE one_append")
                                    seq, digest = mark
                                    p.error = e
                                    exact = False
                                    continue
                            if undo:
                                conn.execute("RELEASE one_append")
                            if fold is not None:
                                tip = folded
                            p.records = records
                        # From here on only COMMIT is left, whose failure may
                        # or may not have made the records durable.
                        last = (seq, digest)
                        self._run("COMMIT")
                    except BaseException:
                        self._abort()
                        raise
                except sqlite3.Error as e:
                    raise self._translate(e, "append to") from e
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
        self.tip = self.durable_tip = tip
        if last is not None and self.maintenance is not None:
            self._maintain_if_due(last[0])
        if not exact or tail is None:
            with self._queued:
                # Queued appends guessed their numbers from the last batch's;
                # the next ones start from what this one committed.
                self._next_seq = (last[0] if last else seq) + 1 + sum(
                    len(p.events) for p in self._queue)

    def _failed(self, batch: list[Pending], own: Pending, error: BaseException) -> None:
        """Fail every append of *batch* not refused already, and forget what was folded."""
        self._known_tail = None
        self.tip = self.durable_tip
        self.epoch += 1
        with self._queued:
            self._next_seq = None
        for p in batch:
            p.records = None
            if p.error is None:
                # What interrupted the committing thread (a Ctrl-C) is its own.
                p.error = error if p is own or isinstance(error, Exception) else JournalError(
                    self.path, "could not append to it: the thread committing it was "
                    "interrupted", _RETRY)

    def reset_tip(self, state: object) -> None:
        """Start the folded state over at *state* (nothing may be queued)."""
        self.tip = self.durable_tip = state

    def _maintain_if_due(self, seq: int) -> None:
        """Run :attr:`maintenance` once every ``every`` events, outside any transaction.

        The one check on the append path: an integer comparison.  A manager
        that lives for millions of events so still writes checkpoints, rolls
        over and retires history, which otherwise happen only at an open.
        """
        if self.maintenance is None:
            return
        if not self._maintained:
            self._maintained = seq
        elif seq - self._maintained >= self.maintenance_every:
            self._maintained = seq
            # In a thread of its own: the append has committed and must
            # return as such, whatever the maintenance meets (a signal, a
            # full disk); and every step of it is safe to stop anywhere.
            running = self._maintenance_thread
            if running is not None and running.is_alive():
                return
            self._maintenance_thread = threading.Thread(
                target=self._maintain, args=(self.maintenance, seq), daemon=True,
                name="sessiontemp-journal-maintenance")
            self._maintenance_thread.start()

    def _maintain(self, maintenance: Callable[[int], None], seq: int) -> None:
        """Run *maintenance* in its thread, then let go of the thread.

        A finished thread still referenced keeps its locks and conditions
        (some 1.5 kB) for as long as the store lives.
        """
        try:
            maintenance(seq)
        finally:
            # Only this thread's own: a newer one is started only once this
            # one is no longer alive, which is after this line.
            if self._maintenance_thread is threading.current_thread():
                self._maintenance_thread = None

    def _landed(self, seq: int, digest: bytes) -> bool:
        """:meth:`_committed`, False when even that cannot be told (the store is then broken)."""
        try:
            return self._committed(seq, digest)
        except JournalError:
            return False

    def _committed(self, seq: int, digest: bytes) -> bool:
        """Whether event *seq* with *digest* is in the journal, after a failed COMMIT."""
        with self._lock:
            try:
                row = self._conn.execute(
                    "SELECT digest FROM events WHERE seq = ?", (seq,)
                ).fetchone()
            except sqlite3.Error as e:
                self._break(f"whether event {seq} was committed could not be read back ({e})")
                raise self._translate(e, "read") from e
        return row is not None and bytes(row[0]) == digest

    @contextlib.contextmanager
    def _transaction(self, doing: str, *, durable: bool = True
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
        with self._lock:
            if self.broken is not None:
                raise JournalError(self.path, f"could not {doing} it: {self.broken}",
                                   "Close the manager and open a new one")
            try:
                self._begin(durable)
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._abort()
                    raise
            except sqlite3.Error as e:
                raise self._translate(e, doing) from e

    def _abort(self) -> None:
        """End the open transaction, if any, whatever it takes (the caller holds _lock)."""
        if not self._conn.in_transaction:
            return
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")
        if self._conn.in_transaction:
            self._reconnect()

    def _reconnect(self) -> None:
        # As in close(): the cursor goes first, or the connection outlives its close.
        self._writing = None
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        try:
            if self._active.is_head:
                self._conn = self._connect(self._busy_timeout)
            else:
                self._conn = self._connect_segment(self._active.file)
            self._conn.execute("PRAGMA synchronous=FULL")
            self._synced = True
            sticky.mark_database(self._active.file)
        except (sqlite3.Error, JournalError) as e:
            self._break(f"its connection could not be reopened after a failed write ({e})")

    def _break(self, reason: str) -> None:
        self.broken = reason

    # -- reading -------------------------------------------------------------

    def _reading(self) -> sqlite3.Connection:
        """The connection every read goes through (the caller holds _lock).

        The one place that knows the journal may be several files: while
        there is only the head, it is the store's own connection; once
        segments exist, a connection that attaches every kept segment and
        shows them as one ``events`` and one ``checkpoints`` view, so every
        query reads the kept history as if it were one table.  It is built
        again whenever the segment directory, the head or the kept segments
        changed, and only when a read needs more than the active segment
        (see :meth:`_reading_after`).
        """
        folder = segments.folder(self.path)
        try:
            stamps = (os.stat(folder).st_mtime_ns, os.stat(self.path).st_mtime_ns)
        except FileNotFoundError:
            if self._span is not None:
                self._drop_span()
            return self._conn
        if self._span is not None and self._span.in_transaction:
            # Inside a snapshot: it reads the files as they were when it began.
            return self._span
        # The kept segments are part of the key: a rollover renames its new
        # file into the directory before it seals the old one, so a span
        # built in between leaves the new file out (unsealed predecessor),
        # and nothing in the directory or the head changes when the seal
        # commits.  Cheap: a listing, and seals seen are remembered.
        kept = self._resolve(remove=False)[-MAX_KEPT:]
        key: object = (stamps, tuple(segment.file for segment in kept))
        if self._span is None or key != self._span_key or self._span_stale():
            old, self._span = self._span, None
            if old is not None:
                self._let_go(old)
            self._span = self._spanning(kept)
            self._span_key = key
        return self._span

    def _let_go(self, conn: sqlite3.Connection) -> None:
        """Close *conn*, left for a newer one, once no read streams from it (holding _lock).

        A segment left behind is soon retired, and its file deleted: a
        connection kept to it holds the deleted file's blocks (its -wal and
        -shm too) until the connection goes, which without a close is
        whenever the garbage collector runs (a connection is in a reference
        cycle with its statement cache).  A read still streaming rows from
        it (:meth:`_stream`) closes it when it ends.
        """
        if self._streams.get(conn):
            self._superseded.append(conn)
            return
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _reading_after(self, after: int) -> sqlite3.Connection:
        """A connection that holds every event after *after* (the caller holds _lock).

        The store's own connection when its segment, the active one, holds
        them all: it is not sealed and its events start at or before the
        one after *after*.  That is all an open's recovery reads (the newest
        checkpoint and the events after it), so an open attaches no sealed
        segment for it; anything older goes through :meth:`_reading`.  Not
        sealed when looked at: a seal committed after that only stops the
        read where the segment ends, as a read made just before the seal.
        """
        # A journal that never rolled over reads its head as it always did.
        if (not self._active.is_head and after >= self._active.base
                and not (self._span is not None and self._span.in_transaction)):
            try:
                if self._seal() is None:
                    return self._conn
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e
        return self._reading()

    def _span_stale(self) -> bool:
        # A retirement drops the head's tables; the head's mtime changes
        # only once its -wal is checkpointed, so the schema is asked too.
        assert self._span is not None
        try:
            (version,) = self._span.execute("PRAGMA s0.schema_version").fetchone()
        except sqlite3.Error:
            return True
        return bool(version != self._span_schema)

    def _drop_span(self) -> None:
        if self._span is not None:
            with contextlib.suppress(sqlite3.Error):
                self._span.close()
            self._span = None
            # Nor what was attached to it: the paths of segments perhaps long gone.
            self._span_key = None
            self._span_attached = {}

    def _spanning(self, kept: list[Segment], *, again: bool = True) -> sqlite3.Connection:
        conn = sqlite3.connect("file::memory:", uri=True, isolation_level=None,
                               check_same_thread=False, timeout=self._busy_timeout)
        try:
            mode = "ro&immutable=1" if self.immutable else "ro"
            events, checkpoints, bases = [], [], []
            for i, segment in enumerate(kept):
                if not os.path.exists(segment.file) and again and segment is not kept[-1]:
                    # Retired by another process since the listing: list again.
                    conn.close()
                    return self._spanning(self._resolve(remove=False)[-MAX_KEPT:], again=False)
                if not os.path.exists(segment.file):
                    raise JournalCorrupt(segment.path, "is missing", self._segment_fix(
                        segment.path))
                self._check_files(segment.file)
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
            self._span_attached = {segment.file: f"s{i}" for i, segment in enumerate(kept)}
        except sqlite3.Error as e:
            conn.close()
            raise self._translate(e, "read") from e
        except BaseException:
            conn.close()
            raise
        return conn

    def rows(
        self, *, after: int = 0, until: int | None = None, batch: int = 20_000
    ) -> Generator[tuple[int, float, str, str, bytes], None, None]:
        """Raw ``(seq, time, kind, payload, digest)`` rows after *after* (up to *until*).

        Fetched *batch* at a time, all from one read snapshot, so a journal of
        millions of events is never held in memory at once.
        """
        sql = "SELECT seq, time, kind, payload, digest FROM events WHERE seq > ?"
        params: tuple[int, ...] = (after,)
        if until is not None:
            sql += " AND seq <= ?"
            params = (after, until)
        yield from self._stream(sql + " ORDER BY seq", params, batch, after=after)

    def records(
        self, *, after: int = 0, until: int | None = None, tolerant: bool = False
    ) -> Generator[Record, None, None]:
        """Decoded records after sequence number *after* (up to *until*), in order.

        Raises :class:`JournalCorrupt` at a gap in the sequence or a record
        that does not decode: nothing after such a point is trusted.  With
        *tolerant*, a gap is passed over and a record that does not decode
        comes as an :class:`~journal.events.Unreadable` event, for a
        tolerant fold to refuse and hold on to what it may name.
        """
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
                        raise self.corrupt(e) from e
                    event = Unreadable(kind, payload, e.reason)
                expected = seq + 1
                yield Record(seq, time, event)
        finally:
            rows.close()

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        """Rows of a read-only SQL query, errors translated and naming the file."""
        with self._lock:
            try:
                return self._reading().execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e

    # Named reads for inspection: each answers one question with one query,
    # so no reader outside this module writes SQL over the payload format.

    def extent(self) -> tuple[int | None, int | None, int]:
        """``(first seq, last seq, count)`` of the events; ``(None, None, 0)`` when empty."""
        ((first, last, count),) = self.query("SELECT min(seq), max(seq), count(*) FROM events")
        return first, last, int(count)

    def times_of(self, seqs: Collection[int]) -> dict[int, float]:
        """The time of each event in *seqs* that exists, by seq."""
        wanted = sorted(set(seqs))
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        return dict(self.query(
            f"SELECT seq, time FROM events WHERE seq IN ({marks})",  # noqa: S608 (placeholders)
            tuple(wanted)))

    def seq_at(self, time: float) -> int:
        """The newest event written at or before *time*, 0 when none was."""
        ((found,),) = self.query("SELECT max(seq) FROM events WHERE time <= ?", (time,))
        return int(found or 0)

    def kind_counts(self, *, excluding: Collection[str] = ()) -> dict[str, int]:
        """How many events there are of each kind stored (known to this version or not),
        leaving out *excluding*: grouping fewer rows is what makes it fast."""
        marks = ",".join("?" * len(excluding))
        return {kind: int(n) for kind, n in self.query(
            f"SELECT kind, count(*) FROM events WHERE kind NOT IN ({marks}) "  # noqa: S608
            "GROUP BY kind", tuple(excluding))}

    def open_managers(self) -> list[tuple[int, str]]:
        """``(seq, id)`` of each ``manager.opened`` whose manager has no close or death."""
        return [(int(seq), str(m)) for seq, m in self.query(
            "SELECT seq, json_extract(payload, '$.manager') FROM events "
            "WHERE kind = 'manager.opened' AND json_extract(payload, '$.manager') NOT IN "
            "(SELECT json_extract(payload, '$.manager') FROM events "
            "WHERE kind IN ('manager.closed', 'manager.dead')) ORDER BY seq")]

    def generation_count(self) -> int:
        """How many distinct generations were created or found (as strays) and removed."""
        ((n,),) = self.query(
            "SELECT count(DISTINCT json_extract(payload, '$.generation')) FROM events "
            "WHERE kind IN ('generation.created', 'removal.started')")
        return int(n)

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
        yield from self._by_id(0, generations, until)

    def manager_ends(self, managers: Collection[str]) -> dict[str, int]:
        """The seq of the close or death of each of *managers* the journal has ended."""
        ends: dict[str, int] = {}
        for seq, _when, kind, payload in self._by_id(1, managers, None):
            if kind != "manager.opened":
                try:
                    ended = json.loads(payload)["manager"]
                except (ValueError, TypeError, KeyError):
                    continue
                ends.setdefault(str(ended), int(seq))
        return ends

    def _by_id(self, index: int, ids: Collection[str], until: int | None
               ) -> Iterator[tuple[int, float, str, str]]:
        """Rows whose indexed field (of ``_INDEXES[index]``) is one of *ids*, in order."""
        _name, expression, kinds = _INDEXES[index]
        wanted = sorted(set(ids))
        chunks = [wanted[i:i + _IDS_PER_QUERY] for i in range(0, len(wanted), _IDS_PER_QUERY)]
        rows: list[tuple[int, float, str, str]] = []
        for chunk in chunks:
            # The expression and kind condition exactly as the index has
            # them, so that SQLite uses it (it reads the ORs as an IN list,
            # so an older journal's `kind IN` index serves too); every id
            # is a parameter.
            clauses = [f"{expression} IN ({','.join('?' * len(chunk))})", _any_kind(kinds)]
            params: list[object] = list(chunk)
            if until is not None:
                clauses.append("seq <= ?")
                params.append(until)
            rows.extend(self._select(clauses, params))
        if len(chunks) > 1:
            rows.sort()
        yield from rows

    def rows_naming(
        self, values: Collection[str], *, after: int = 0, kinds: Collection[str] = (),
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows after *after* whose payload holds one of
        *values* as a string, in order; of *kinds* only, when given.

        A superset: a value may stand in any field, so callers decode each
        row and keep those naming it where they look.  More than 50 values
        read every row after *after*.
        """
        clauses = ["seq > ?"]
        params: list[object] = [after]
        if kinds:
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})")
            params += list(kinds)
        if len(values) <= 50:
            # instr() on the JSON string form finds the few candidate rows in C.
            clauses.append("(" + " OR ".join(["instr(payload, ?) > 0"] * len(values)) + ")")
            params += [json.dumps(v) for v in values]
        yield from self._select(clauses, params)

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
        clauses = ["seq > ?"]
        params: list[object] = [after]
        for clause, value in (("seq <= ?", until), ("time >= ?", since_time),
                              ("time <= ?", until_time)):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        if kinds:
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})")
            params += list(kinds)
        for name in naming:
            clauses.append("instr(payload, ?) > 0")
            params.append(json.dumps(name))
        yield from self._select(clauses, params)

    def _select(self, clauses: list[str], params: list[object], batch: int = 20_000
                ) -> Iterator[tuple[int, float, str, str]]:
        # Only fixed clauses with placeholders are joined: every value is a parameter.
        sql = ("SELECT seq, time, kind, payload FROM events WHERE "  # noqa: S608
               + " AND ".join(clauses) + " ORDER BY seq")
        return self._stream(sql, tuple(params), batch)

    def _stream(
        self, sql: str, params: tuple[object, ...], batch: int, *, after: int | None = None
    ) -> Generator[Any, None, None]:
        """Rows of *sql*, fetched *batch* at a time from one read snapshot, errors translated.

        *after*: *sql* reads only events after this one (see :meth:`_reading_after`).
        """
        with self._lock:
            try:
                conn = self._reading() if after is None else self._reading_after(after)
                cursor = conn.execute(sql, params)
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e
            # Until the last row: a connection left for a newer one meanwhile
            # (a rollover, a retirement) is closed only then.
            self._streams[conn] = self._streams.get(conn, 0) + 1
        try:
            while True:
                with self._lock:
                    try:
                        chunk = cursor.fetchmany(batch)
                    except sqlite3.Error as e:
                        raise self._translate(e, "read") from e
                if not chunk:
                    return
                yield from chunk
        finally:
            # A generator closed late (collected after the store failed or
            # closed) must not print "Exception ignored" on its way out.
            with contextlib.suppress(sqlite3.Error):
                cursor.close()
            with self._lock:
                left = self._streams.pop(conn, 1) - 1
                if left:
                    self._streams[conn] = left
                elif conn in self._superseded:
                    self._superseded.remove(conn)
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()

    def records_of(self, kinds: Collection[str], *, until: int | None = None
                   ) -> Iterator[Record]:
        """Decoded records of *kinds* up to *until*, in order.

        Raises :class:`JournalCorrupt` for one that does not decode.
        """
        for seq, time, kind, payload in self.rows_where(until=until, kinds=kinds):
            try:
                yield Record(seq, time, decode(seq, kind, payload))
            except RuleViolation as e:
                raise self.corrupt(e) from e

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Make every read inside the block see the journal at one moment.

        A read transaction: under WAL it blocks no writer; their checkpoints
        only stop short of it until the block ends.
        """
        with self._lock:
            conn = self._reading()
            try:
                conn.execute("BEGIN")
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e
        try:
            yield
        finally:
            with self._lock, contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

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
        with self._transaction("write a checkpoint to") as conn:
            row = conn.execute("SELECT digest FROM events WHERE seq = ?", (seq,)).fetchone()
            if row is None and seq == self._base[0] and seq:
                row = (self._base[1],)
            if row is None and seq:
                # In an older segment: another process rolled over meanwhile.
                reading = self._reading()
                row = reading.execute("SELECT digest FROM events WHERE seq = ?",
                                      (seq,)).fetchone()
                if row is None and seq < self._base[0]:
                    # Retired meanwhile, which takes a newer checkpoint than
                    # this one: there is nothing left for it to speed up.
                    return
            if row is None:
                raise ValueError(f"{self.path} holds no event {seq} to checkpoint")
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
            if not self._active.is_head:
                # The active segment's first content: the state where its
                # history starts, which a reader needs once the segments
                # before it are retired.
                kept.add(self._base[0])
            doomed = [s for s in seqs if s not in kept]
            if doomed:
                marks = ",".join("?" * len(doomed))
                conn.execute(f"DELETE FROM checkpoints WHERE seq IN ({marks})",  # noqa: S608
                             doomed)
            limit: float = self.retention.segment_bytes
            if roll_over:
                limit = min(limit, self.retention.retirement_rollover_bytes)
            if not self.readonly and self.active_size() >= limit:
                self._roll_over(conn, (seq, bytes(row[0]), format, state), catch_up)

    @property
    def rolled_over(self) -> bool:
        """Whether the journal has rolled over: its active segment is not the head."""
        return not self._active.is_head

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
        if recent and self.rolled_over:
            return self._recent_checkpoints(until)
        sql = ("SELECT c.seq, c.format, e.digest IS c.digest FROM checkpoints c "
               "LEFT JOIN events e ON e.seq = c.seq")
        params: tuple[int, ...] = ()
        if until is not None:
            sql += " WHERE c.seq <= ?"
            params = (until,)
        with self._lock:
            try:
                conn = self._reading()
                if conn is not self._conn:
                    # A checkpoint copied into a new segment as its first
                    # content is tied to the last event of the segment
                    # before, which may be retired: the base it records
                    # (and the next event's digest chains from) stands in.
                    # A lookup per checkpoint, not a join: SQLite pushes
                    # the seq into each segment's primary key that way.
                    sql = sql.replace("e.digest IS c.digest", (
                        "max((SELECT digest FROM events WHERE seq = c.seq) IS c.digest OR "
                        "c.digest IN (SELECT digest FROM bases WHERE base = c.seq))")).replace(
                        " LEFT JOIN events e ON e.seq = c.seq", "")
                    sql += " GROUP BY c.seq, c.format"
                elif not self._has_checkpoints():
                    return []
                rows = conn.execute(sql + " ORDER BY c.seq DESC", params).fetchall()
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e
        return [(int(seq), int(format), bool(chained)) for seq, format, chained in rows]

    def _recent_checkpoints(self, until: int | None) -> list[tuple[int, int, bool]]:
        """What :meth:`checkpoints` gives with *recent*, on a journal that rolled over."""
        with self._lock:
            base, digest = self._base
            if until is not None and until < base:
                return []
            try:
                conn = self._reading_after(base)
                if conn is not self._conn:
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
                raise self._translate(e, "read") from e
        return [(int(seq), int(format), bool(chained)) for seq, format, chained in rows]

    def checkpoint_state(self, seq: int) -> bytes:
        """The state bytes of the checkpoint at *seq*; KeyError when there is none."""
        sql = "SELECT state FROM checkpoints WHERE seq = ?"
        with self._lock:
            try:
                row = None
                if seq >= self._active.base:
                    # Where checkpoints(recent=True) found it, when it did.
                    conn = self._reading_after(self._active.base)
                    row = conn.execute(sql, (seq,)).fetchone()
                    if row is None and conn is self._conn:
                        conn = self._reading()
                        row = conn.execute(sql, (seq,)).fetchone()
                else:
                    row = self._reading().execute(sql, (seq,)).fetchone()
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e
        if row is None:
            raise KeyError(seq)
        return bytes(row[0])

    def last_seq(self) -> int:
        """The sequence number of the newest committed event, 0 when empty.

        Inside :meth:`snapshot`, as of the snapshot; otherwise what
        :meth:`_active_tail` says, the one place the journal's end is read.
        """
        with self._lock:
            span = self._span
            if span is not None and span.in_transaction:
                try:
                    return self._span_last(span)
                except sqlite3.Error as e:
                    raise self._translate(e, "read") from e
            return self._active_tail()[0]

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

    def _active_tail(self) -> tuple[int, bytes]:
        """``(seq, digest)`` of the journal's last event: where the next one goes (holding _lock).

        Read from the active segment alone, as an append's transaction
        reads it (:meth:`_tail`): its last event, or while it has none yet
        the base it records, the last event of the segment before.  Never
        from a view across segments: once the segments before an empty one
        are retired, such a view holds no event at all and would say 0.
        The seal is read in the same snapshot: a segment sealed (or
        retired) since this store last wrote is left for the active one
        first, as :meth:`_begin` does.  What is read may be overtaken by
        another process's append the moment after; an append checks again
        inside its transaction.
        """
        while True:
            conn = self._conn
            own = not conn.in_transaction
            try:
                if own:
                    # One read snapshot for the seal and the tail: a
                    # retirement drops a retired head's events in a
                    # transaction of its own, after its seal.
                    conn.execute("BEGIN")
                try:
                    if not self._ready or self._seal() is None:
                        return self._tail(conn)
                finally:
                    if own and conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as e:
                if not self._ready or self._still_there():
                    raise self._translate(e, "read") from e
            # Sealed, or retired and removed, since this store last looked.
            self._open_active()

    def verify(self) -> list[str]:
        """Check SQLite's integrity, the sequence and the digest chain; return the problems."""
        problems: list[str] = []
        with self._lock:
            try:
                conn = self._reading()
                if conn is self._conn:
                    files = [("main", self.path)]
                else:
                    files = [(f"s{i}", segment.path) for i, segment in
                             enumerate(self._resolve(remove=False)[-MAX_KEPT:])]
                for schema, path in files:
                    for (line,) in conn.execute(f"PRAGMA {schema}.integrity_check"):
                        if line != "ok":
                            problems.append(f"integrity: {line}" if schema == "main"
                                            else f"integrity of {path}: {line}")
                bases: dict[int, bytes] = {}
                if conn is not self._conn:
                    bases = {int(b): bytes(d) for b, d in conn.execute(
                        "SELECT base, digest FROM bases")}
                    for b, d in conn.execute("SELECT e.seq, e.digest FROM events e "
                                             "JOIN bases ON bases.base = e.seq"):
                        if bytes(d) != bases[int(b)]:
                            problems.append(f"event {b}: the segment after it records another "
                                            "digest for it")
                first = conn.execute("SELECT min(seq) FROM events").fetchone()[0]
            except sqlite3.Error as e:
                if problems:
                    # The damage is found and named; what it hides cannot be read.
                    return [*problems, f"reading stopped at the damage: {e}"]
                raise self._translate(e, "read") from e
        try:
            return self._verify_chain(problems, first, bases)
        except JournalCorrupt as e:
            if not problems:
                raise
            return [*problems, f"reading stopped at the damage: {e.reason}"]

    def _verify_chain(self, problems: list[str], first: int | None,
                      bases: dict[int, bytes]) -> list[str]:
        """Check the sequence and the digest chain of every kept event, after *problems*."""
        expected_seq, digest = 1, _GENESIS
        if first is not None and first > 1 and bases:
            # History before the first kept segment was retired: the chain
            # starts from the digest that segment records for its base.
            expected_seq = int(first)
            if first - 1 in bases:
                digest = bases[first - 1]
            else:
                problems.append(f"sequence: events before {first} are missing, and no segment "
                                "says where they were retired")
        for seq, time, kind, payload, stored in self.rows(after=expected_seq - 1):
            if seq != expected_seq:
                problems.append(f"sequence: expected event {expected_seq}, found {seq}")
            digest = chain(digest, seq, time, kind, payload)
            if stored != digest:
                problems.append(f"event {seq}: digest does not match its predecessors")
                digest = stored
            expected_seq = seq + 1
        return problems

    # -- retirement ----------------------------------------------------------

    def segments(self) -> list[SegmentInfo]:
        """Every kept segment of the journal, oldest first, the active one last."""
        with self._lock:
            # Under the lock: telling which segments are sealed reads through
            # the store's own connection, which an append in another thread
            # (a maintenance runs beside its manager) may be using.
            return self._segments()

    def _segments(self, *, again: bool = True) -> list[SegmentInfo]:
        """:meth:`segments`, under _lock; *again*: list again once if a listed file went."""
        found: list[SegmentInfo] = []
        kept = self._resolve(remove=False)
        # What a sealed segment holds never changes: read once by this
        # process, it is not read again (every open's retirement pass
        # asks), and no segment is attached for it.
        known: dict[str, _Facts] = {}
        identities: dict[str, _Identity] = {}
        for segment in kept:
            if segment.file == self._active.file:
                continue
            with contextlib.suppress(OSError):
                seen = identities[segment.file] = _identity(os.stat(segment.file))
                remembered = _known(self.path, segment, seen)
                if remembered is not None and remembered[1] is not None:
                    known[segment.file] = remembered[1]
        span: sqlite3.Connection | None = None
        unknown = [segment for segment in kept
                   if segment.file not in known and segment.file != self._active.file]
        if len(unknown) > 2:
            # The reading connection has the kept segments attached already:
            # asked there, a segment costs a few lookups, not a connection.
            # For one or two (a head not yet retired, a segment just
            # sealed) a connection of their own costs less than attaching all.
            span = self._reading()
        attached = self._span_attached if span is not None and span is not self._conn else {}
        for segment in kept:
            facts = known.get(segment.file)
            if facts is None:
                try:
                    facts = self._segment_facts(segment, span, attached)
                except JournalError:
                    if (not again or segment.file == self._active.file
                            or os.path.exists(segment.file)):
                        raise
                    # Retired by another process since the listing: list again.
                    return self._segments(again=False)
                identity = identities.get(segment.file)
                if identity is not None and self._final(segment, facts):
                    _remember(self.path, segment, identity, facts)
            first, last, sealed, covered, has_events, based = facts
            found.append(SegmentInfo(
                segment.file, segment.base, first,
                segment.base if last is None else last, sealed, covered,
                segments.size_of(segment.file), has_events, based))
        return found

    def _final(self, segment: Segment, facts: _Facts) -> bool:
        """Whether *facts*, read from *segment*, hold for as long as its file does.

        Those of a segment found sealed before the rest was read: nothing is
        written to it after its seal.  The head is the exception: retirement
        drops its tables in place, so only a head already retired qualifies.
        """
        _first, _last, sealed, _covered, has_events, _based = facts
        return (segment.file != self._active.file and sealed is not None
                and (not segment.is_head or not has_events))

    def _segment_facts(
        self, segment: Segment, span: sqlite3.Connection | None, attached: dict[str, str]
    ) -> _Facts:
        """What *segment* holds, read from it (the caller holds _lock)."""
        schema = attached.get(segment.file)
        if segment.file == self._active.file:
            conn, schema = self._conn, "main"
        elif schema is not None and span is not None:
            conn = span
        else:
            conn, schema = self._connect_segment(segment.file), "main"
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
            raise self._translate(e, "read", segment.path) from e
        finally:
            if conn is not self._conn and conn is not span:
                conn.close()
        return (None if first is None else int(first), None if last is None else int(last),
                None if sealed is None else float(sealed[1]),
                None if covered is None else int(covered), "events" in tables, based)

    def history(self) -> History:
        """Where the kept history starts, and up to which event and when older was retired."""
        with self._lock:
            try:
                conn = self._reading()
                first, first_time = conn.execute(
                    "SELECT seq, time FROM events ORDER BY seq LIMIT 1").fetchone() or (None, None)
                retired = (None, None)
                if conn is not self._conn:
                    with contextlib.suppress(sqlite3.OperationalError):
                        retired = conn.execute(
                            "SELECT max(seq), max(time) FROM s0.retired").fetchone()
            except sqlite3.Error as e:
                raise self._translate(e, "read") from e
        return History(None if first is None else int(first),
                       None if first_time is None else float(first_time),
                       int(retired[0] or 0), None if retired[1] is None else float(retired[1]))

    def retire(self, *, now: float) -> list[Path]:
        """Delete the oldest retired segments beyond :attr:`retention`; return their paths.

        A sealed segment is retired once a later segment starts with the
        checkpoint of its base (see :meth:`_retirement_cut`).  Run by one
        process at a time (recovery's lock); writers and readers of other
        segments are not disturbed.
        Each step is safe to crash after: the head records the retirement
        first, then files go oldest first, so what is kept is always one
        unbroken run of history up to the active segment.
        """
        if self.readonly:
            raise JournalReadOnly(self.path, "cannot retire history through a read-only store",
                                  "Open the journal for writing")
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
        self._step(f"record retirement up to event {upto}")
        self._write_head(("INSERT INTO retired (seq, time) VALUES (?, ?)", (upto, now)))
        removed = []
        try:
            for segment in doomed:
                self._step(f"retire {segment.name}")
                if segment.base == 0:
                    self._retire_head()
                else:
                    segments.remove_file(segment.file)
                removed.append(segment)
            segments.sync_directory(segments.folder(self.path))
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
        with _OPEN_LOCK:
            peers = list(_PEERS.get(self._identity or (-1, -1), ()))
        for peer in peers:
            peer._forget_files(files)

    def _forget_files(self, files: set[str]) -> None:
        """Let go of this store's connections to any of *files*, which were retired."""
        with self._lock:
            if self._identity is None:
                # Closed, or a forked copy's: nothing of it is closed here.
                return
            span = self._span
            if span is not None and not span.in_transaction and (
                    files & self._span_attached.keys()):
                self._span = None
                self._span_key = None
                self._span_attached = {}
                self._let_go(span)
            if self._active.file in files:
                # Sealed and retired before this store looked again: it
                # moves on now, as its next append would.
                with contextlib.suppress(JournalError):
                    self._open_active()

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
        conn = self._conn if self._active.is_head and not fresh else self._connect(
            self._busy_timeout)
        try:
            with self._lock:
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
            raise self._translate(e, "retire history in") from e
        finally:
            if conn is not self._conn:
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
            identity = _identity(os.stat(self.path))
        except OSError:
            identity = None
        if only_if_free and identity is not None and _VACUUMED.get(self.path) == identity:
            return
        conn = self._connect(self._busy_timeout)
        try:
            with self._lock:
                if only_if_free and not conn.execute("PRAGMA freelist_count").fetchone()[0]:
                    if identity is not None:
                        with _SEALED_LOCK:
                            if len(_VACUUMED) >= _SEALED_MAX:
                                _VACUUMED.clear()
                            _VACUUMED[self.path] = identity
                    return
                self._step(f"vacuum {self.path.name}")
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as e:
            raise self._translate(e, "retire history in") from e
        finally:
            conn.close()

    def release_history(self) -> None:
        """Close the connection that reads the sealed segments, if one is open.

        It holds every kept segment attached, and what SQLite and Python
        keep for each; a store that only appends needs none of it between
        the reads of older history (a recovery or maintenance pass, an
        inspection), and the next such read attaches them again.
        """
        with self._lock:
            if self._span is not None and not self._span.in_transaction:
                self._drop_span()

    def close(self) -> None:
        if self._forked:
            # A parked copy (forget): its locks may be held by a parent's thread.
            return
        running = self._maintenance_thread
        if running is not None and running is not threading.current_thread():
            # Before the locks: the maintenance needs them to finish.
            running.join()
        with _OPEN_LOCK, self._lock:
            self._close_locked()
        _close_abandoned()

    def _close_locked(self) -> None:
        """Close the connections; the caller holds _OPEN_LOCK and this store's lock."""
        self._drop_span()
        for conn in self._superseded:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._superseded = []
        if self._identity is not None:
            _OPEN[self._identity] -= 1
            self._discard_peer()
            # The write path's cursor first: a statement it still holds
            # (one a busy journal failed) would keep the closed
            # connection's files and locks open for as long as it lives.
            self._writing = None
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()

    def abandon(self) -> None:
        """Close a store whose owner was dropped unclosed, without waiting for any lock.

        For a garbage-collected manager's finalizer, which runs in whichever
        thread the collection happens in, at any point of it: that thread
        may hold this module's lock or this store's, and another thread
        (its maintenance) may be using the store.  So the locks are only
        tried; a store that cannot be closed now is closed by the next
        store this process opens or closes.
        """
        if self._forked or self._identity is None:
            return
        _ABANDONED.append(self)
        _close_abandoned()

    def _discard_peer(self) -> None:
        """Leave :data:`_PEERS` (the caller holds _OPEN_LOCK); the store is closed from here."""
        assert self._identity is not None
        peers = _PEERS.get(self._identity)
        if peers is not None:
            peers.discard(self)
            if not peers:
                del _PEERS[self._identity]
        self._identity = None

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
        # _forked() has already counted none of the child's connections open.
        if self._forked:
            return
        self._forked = True
        self._identity = None
        # Any attribute may be missing: the copy of a store a thread of the
        # parent was opening.  The cursor too: freeing it resets its
        # statement, under the same mutex.
        for name in ("_conn", "_span", "_writing"):
            held = self.__dict__.get(name)
            if held is not None:
                _FORKED.append(held)
                _NEVER_FREED(held)
        for held in self.__dict__.get("_superseded", ()):
            _FORKED.append(held)
            _NEVER_FREED(held)
        self._span = None
        self._writing = None
        self._superseded = []
        self.broken = "this is a forked copy of another process's journal connection"
        # The parent's queue and its leader are not this process's.
        self._queued = threading.Lock()
        self._queue = []
        self._leading = False
        self._idle = []

    # -- errors --------------------------------------------------------------

    def corrupt(self, error: RuleViolation) -> JournalCorrupt:
        """Name this file in a rule violation found while reading it."""
        if isinstance(error, UnknownKind):
            # The one violation a newer sessiontemp makes on purpose: moving
            # the journal aside would lose its history, upgrading keeps it.
            return JournalCorrupt(
                self.path,
                f"event {error.seq} {error.reason}",
                "It was written by a newer sessiontemp: upgrade sessiontemp to read it "
                "(nothing in it was changed or lost)",
            )
        return JournalCorrupt(
            self.path,
            f"event {error.seq} {error.reason}",
            "It was changed by something other than sessiontemp; run `journal-inspect verify` "
            "on it. Managers and recovery carry on around such a record and keep what it names",
        )

    def _translate(self, e: sqlite3.Error, doing: str, path: Path | None = None) -> JournalError:
        # sqlite_errorcode is the extended code (SQLITE_IOERR_WRITE is 778,
        # not 10): its low byte is the primary code compared below.  Codes,
        # never message texts, decide the class: messages change between
        # SQLite versions.
        extended = getattr(e, "sqlite_errorcode", None)
        code = None if extended is None else extended & 0xFF
        message = str(e)
        if path is not None and path != self.path:
            # A segment file after the head: named itself, with its own fix.
            if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_CANTOPEN):
                reason = {sqlite3.SQLITE_NOTADB: "is not a SQLite database",
                          sqlite3.SQLITE_CANTOPEN: f"cannot be opened ({message})"}.get(
                              code, f"is damaged ({message})")
                return JournalCorrupt(path, reason, self._segment_fix(path))
            error = self._translate(e, doing)
            return type(error)(path, error.reason, error.fix)
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return JournalBusy(
                self.path,
                f"could not {doing} it: another process held its write lock for too long",
                "Find the process with `fuser` on the file, or retry later; nothing already "
                "committed was lost",
            )
        if code == sqlite3.SQLITE_FULL:
            return JournalFull(
                self.path,
                f"could not {doing} it: the file system is full ({message})",
                "Free space on it; nothing already committed was lost",
            )
        if extended == sqlite3.SQLITE_IOERR_SHMSIZE:
            # SQLite allocates the -shm file by writing into each of its
            # pages; a full file system fails that write, and SQLite calls
            # it a plain I/O error ("disk I/O error"), not SQLITE_FULL.
            return JournalFull(
                self.path,
                f"could not {doing} it: the file system is full (its shared-memory file "
                f"{self.path.name}-shm could not grow: {message})",
                "Free space on it; nothing already committed was lost",
            )
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN):
            return JournalReadOnly(
                self.path,
                f"could not {doing} it: it or its file system does not accept writes ({message})",
                "Make it writable, or pass a root on a writable file system",
            )
        if code == sqlite3.SQLITE_NOTADB:
            return JournalCorrupt(self.path, "is not a SQLite database", _MOVE_ASIDE)
        if code == sqlite3.SQLITE_CORRUPT:
            return JournalCorrupt(self.path, f"is damaged ({message})", _MOVE_ASIDE)
        if code == sqlite3.SQLITE_IOERR and not all(
            os.access(p, os.W_OK) for p in (self.path, self.path.with_name(self.path.name + "-wal"))
            if p.exists()
        ):
            # SQLite reports a write refused (EPERM on an immutable file,
            # EROFS after a remount) as a plain I/O error.
            return JournalReadOnly(
                self.path,
                f"could not {doing} it: it or its file system does not accept writes ({message})",
                "Make it writable, or pass a root on a writable file system",
            )
        if code == sqlite3.SQLITE_IOERR:
            return JournalError(
                self.path,
                f"could not {doing} it: I/O error ({message})",
                f"Check the disk holding it ({os.strerror(errno.EIO)})",
            )
        return JournalError(self.path, f"could not {doing} it ({message})", _RETRY)

