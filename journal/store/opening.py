"""Opening a journal's head: refusing what is not ours, then creating its schema.

An open checks the file before SQLite sees it (SQLite takes a short file for
an empty database and would write its schema over it), refuses a newer or a
foreign schema, and a journal from before its schema version was settled
(one lacking a table or index every journal of that version has), checks the
active segment for damage before anything is written to it, switches to WAL,
and makes the whole schema of a new journal in one transaction.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from time import monotonic, sleep
from typing import Protocol

from .. import segments, sticky
from ..errors import (
    JournalCorrupt,
    JournalError,
    JournalReadOnly,
    JournalVersionError,
    UnsafeRoot,
)
from . import registry, schema
from .errors import MOVE_ASIDE, unopenable
from .link import Link

__all__ = ["check_header", "open_link", "prepare"]


def check_header(link: Link) -> None:
    """Refuse a head that is not a journal file of ours (the caller holds registry.opening)."""
    path = link.path
    try:
        # Not following: a symbolic link is refused as unsafe just below.
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISLNK(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise JournalCorrupt(path, "is a directory", MOVE_ASIDE)
        if not stat.S_ISREG(st.st_mode):
            raise JournalCorrupt(path, "is not a regular file", MOVE_ASIDE)
    link.check_files(path)
    segments.check_directory(path, writer=not link.readonly)
    if st is None:
        if link.readonly:
            raise JournalError(
                path, "does not exist", "Check the path, or pass --root for a root"
            ) from None
        return
    if not link.readonly:
        _check_writable(link)
    if st.st_size == 0 or registry.is_open((st.st_dev, st.st_ino)):
        return
    # SQLite takes a short file for an empty database and would write
    # its schema over it, so the header is checked here first.  This
    # process has no connection to the file yet (checked above, under
    # the registry's lock): closing a descriptor of it would otherwise drop
    # every POSIX lock the process holds on it, including a live
    # connection's read lock, and another process would then checkpoint and
    # delete a -wal still in use.
    try:
        head = _read_header(path)
    except PermissionError as e:
        raise JournalReadOnly(
            path, f"cannot be read ({e.strerror})", "Fix its permissions and try again"
        ) from None
    if head != schema.SQLITE_MAGIC:
        raise JournalCorrupt(path, "is not a SQLite database", MOVE_ASIDE)


def _read_header(path: os.PathLike[str] | str) -> bytes | None:
    """The first bytes of the head, read through a descriptor that cannot block; None if it is
    not a regular file (any more: it was looked at by its name a moment before)."""
    # O_NONBLOCK: a FIFO put at the name since makes the open return at once
    # (a blocking open would wait for a writer for ever); O_NOFOLLOW: a link
    # put there since is not followed.  The kind is then checked on what was
    # opened, not on the name.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, len(schema.SQLITE_MAGIC))
    finally:
        os.close(fd)


class _Opened(registry.Member, Protocol):
    def close(self) -> None: ...


def open_link(link: Link, member: _Opened) -> None:
    """Connect *link* to its journal's head, check or make its schema, then move to the active
    segment; *member* is the store it is for, closed again if any of it fails."""
    try:
        with registry.opening():
            check_header(link)
            link.conn = link.connect_head()
            try:
                prepare(link)
                if not link.immutable:
                    # Read by now, so SQLite has made its -wal and -shm (a
                    # reader too, where it may write beside the journal).
                    sticky.mark_database(link.path)
                st = os.stat(link.path)
            except BaseException:
                link.conn.close()
                raise
            link.identity = (st.st_dev, st.st_ino)
            registry.opened(link.identity, member)
        try:
            link.open_active()
            if not link.active.is_head:
                _refuse_unsettled(link, active=True)
        except BaseException:
            member.close()
            raise
    except OSError as e:
        if isinstance(e, JournalError | UnsafeRoot):
            raise
        # Met opening or listing the journal's files (no descriptor left,
        # a directory that cannot be read): never a bare OSError.
        raise unopenable(link.path, e) from e


def _check_writable(link: Link) -> None:
    """Refuse, on open, a journal that could be read but never appended to.

    On a read-only file system SQLite may still open the file, read-only,
    and the first append (or the recovery lock beside it) fails later
    with a less useful error.  access() needs no descriptor (closing one
    would drop this process's SQLite locks on the file, see above) and,
    unlike the mode bits, it reports an immutable file or a read-only
    mount to root as well.  The directory must take the -wal file.
    """
    path = link.path
    for target in (path, path.parent):
        if not os.access(target, os.W_OK):
            raise JournalReadOnly(
                path,
                f"cannot be written: {'it' if target == path else 'its directory'} "
                "or its file system does not accept writes (read-only mount, chattr +i, "
                "or permissions)",
                "Make it writable, or pass a root on a writable file system",
            )


def prepare(link: Link) -> None:
    """Check the schema of the head *link* just connected to, and make or complete it."""
    conn = link.conn
    try:
        app_id, version, tables = schema.header(conn)
        if version > schema.SEGMENTED_VERSION:
            raise JournalVersionError(
                link.path,
                f"has schema version {version}, newer than the {schema.SEGMENTED_VERSION} "
                "this version of sessiontemp reads",
                "Upgrade sessiontemp, or pass another root",
            )
        if version and app_id != schema.APPLICATION_ID:
            raise JournalCorrupt(link.path, "is a SQLite database of another program",
                                 MOVE_ASIDE)
        if version == 0 and link.readonly:
            raise JournalCorrupt(link.path, "holds no sessiontemp journal", MOVE_ASIDE)
        if version == 0 and tables:
            raise JournalCorrupt(link.path, "is a SQLite database of another program",
                                 MOVE_ASIDE)
        # A sealed head is never written again (a retired one has no events
        # left): the segment being written is checked instead (open_link).
        sealed = bool(version) and link.sealed_next(conn) is not None
        if version and not sealed:
            _refuse_unsettled(link, active=False)
        if link.readonly:
            return
        if version and not sealed:
            # Only the active segment is checked: sealed ones are never
            # written again, and the history they hold is not read here.
            link.quick_check(conn, link.path)
        # Only now, with the file known to be empty or ours: WAL mode
        # rewrites the header.
        _enter_wal(link)
        conn.execute("PRAGMA synchronous=FULL")
        if version == 0:
            _create_schema(link)
    except sqlite3.Error as e:
        raise link.translate(e, "open") from e


def _enter_wal(link: Link) -> None:
    # Several processes opening a new journal at once conflict while one
    # of them writes the first header: SQLite reports that as busy at
    # once, without waiting through its busy handler, so the wait is here.
    deadline = monotonic() + link.busy_timeout
    while True:
        try:
            (mode,) = link.conn.execute("PRAGMA journal_mode=WAL").fetchone()
            break
        except sqlite3.OperationalError as e:
            code = getattr(e, "sqlite_errorcode", 0) & 0xFF
            if code != sqlite3.SQLITE_BUSY or monotonic() >= deadline:
                raise
        sleep(0.005)
    if str(mode).lower() != "wal":
        raise JournalError(
            link.path, f"cannot be switched to write-ahead logging (SQLite kept {mode!r})",
            "Pass a root on a local file system that supports shared memory (not NFS)",
        )


def _refuse_unsettled(link: Link, *, active: bool) -> None:
    """Refuse the file being written (the head, or the *active* segment link is connected to)
    when it lacks what its schema version has.

    Development versions of sessiontemp, before the format was released as
    schema version 1, made journals without the checkpoints table, the read
    indexes (or with them on a ``kind IN`` condition) or the ``sealed``
    table; they are not migrated: the version says what a journal holds.
    """
    conn = link.conn
    missing = [*(() if schema.has_table(conn, "checkpoints") else ("checkpoints",)),
               *schema.missing_indexes(conn)]
    if missing:
        raise JournalVersionError(
            # The segment's path made only here: making one interns its name.
            link.active.path if active else link.path,
            f"was written by a development version of sessiontemp, before its schema "
            f"version was settled (it lacks {', '.join(sorted(missing))} as this version "
            "makes them), and is not migrated",
            f"Move {link.path}, its -wal and -shm files and {segments.folder(link.path)} "
            "aside (the manager then starts a new journal), or pass another root",
        )


def _create_schema(link: Link) -> None:
    # Two processes may open a new root at once: the schema is created
    # inside one immediate transaction, and the loser finds it done.
    with link.transaction("open") as conn:
        _app_id, version, _tables = schema.header(conn)
        if version == 0:
            # The segment tables come with the first rollover, but for
            # an empty `sealed`: with it, an append alone checks the seal
            # inside its own INSERT (see GroupCommit._write_alone).  All in
            # this transaction: a journal of this version has them all.
            schema.create_file(conn, base=0, segment=False)
            schema.add_indexes(conn)
            conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={schema.SCHEMA_VERSION}")
