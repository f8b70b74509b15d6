"""SQLite's errors as the journal's: each code to the SessionTempError that says what to do.

Codes, never message texts, decide the class: messages change between
SQLite versions.  Every function here names the journal (or the segment
file) the error was met on, with its own fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path
from typing import Final

from .. import segments
from ..errors import (
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalFull,
    JournalReadOnly,
    RuleViolation,
    UnknownKind,
)

__all__ = ["MOVE_ASIDE", "RETRY", "corrupt", "missing", "segment_fix", "translate",
           "unopenable"]

MOVE_ASIDE: Final = "Move it aside (the manager then starts a new journal) or pass another root"
RETRY: Final = "Nothing already committed was lost; retry, and report it if it persists"


def segment_fix(journal: Path, path: Path) -> str:
    """The fix for a damaged or missing segment *path* of *journal*."""
    return (f"Restore {path} from a backup; or move {journal} and "
            f"{segments.directory(journal)} aside (the manager then starts a new journal)")


def unopenable(journal: Path, e: OSError) -> JournalError:
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


def missing(journal: Path, path: Path, following: str,
            conn: sqlite3.Connection) -> JournalCorrupt:
    """*path*, the newest segment of *journal*, is sealed, yet no newer file exists: the one
    it names (*following*) is gone.  *conn* is connected to *path*."""
    if path == journal:
        # The head names the segment after it; history retired since
        # then tells which one came last.
        with contextlib.suppress(sqlite3.Error):
            (retired,) = conn.execute("SELECT max(seq) FROM retired").fetchone()
            if retired:
                following = segments.name_of(int(retired) + 1)
    lost = segments.directory(journal) / following
    return JournalCorrupt(path, f"is sealed, but the segment that follows it, {lost}, "
                          "is missing", segment_fix(journal, lost))


def corrupt(journal: Path, error: RuleViolation) -> JournalCorrupt:
    """Name *journal* in a rule violation found while reading it."""
    if isinstance(error, UnknownKind):
        # The one violation a newer sessiontemp makes on purpose: moving
        # the journal aside would lose its history, upgrading keeps it.
        return JournalCorrupt(
            journal,
            f"event {error.seq} {error.reason}",
            "It was written by a newer sessiontemp: upgrade sessiontemp to read it "
            "(nothing in it was changed or lost)",
        )
    return JournalCorrupt(
        journal,
        f"event {error.seq} {error.reason}",
        "It was changed by something other than sessiontemp; run `journal-inspect verify` "
        "on it. Managers and recovery carry on around such a record and keep what it names",
    )


def translate(journal: Path, e: sqlite3.Error, doing: str,
              path: Path | None = None) -> JournalError:
    """*e*, met while *doing* to *journal* (or to its segment *path*), as the journal's error."""
    # sqlite_errorcode is the extended code (SQLITE_IOERR_WRITE is 778,
    # not 10): its low byte is the primary code compared below.
    extended = getattr(e, "sqlite_errorcode", None)
    code = None if extended is None else extended & 0xFF
    message = str(e)
    if path is not None and path != journal:
        # A segment file after the head: named itself, with its own fix.
        if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_CANTOPEN):
            reason = {sqlite3.SQLITE_NOTADB: "is not a SQLite database",
                      sqlite3.SQLITE_CANTOPEN: f"cannot be opened ({message})"}.get(
                          code, f"is damaged ({message})")
            return JournalCorrupt(path, reason, segment_fix(journal, path))
        error = translate(journal, e, doing)
        return type(error)(path, error.reason, error.fix)
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return JournalBusy(
            journal,
            f"could not {doing} it: another process held its write lock for too long",
            "Find the process with `fuser` on the file, or retry later; nothing already "
            "committed was lost",
        )
    if code == sqlite3.SQLITE_FULL:
        return JournalFull(
            journal,
            f"could not {doing} it: the file system is full ({message})",
            "Free space on it; nothing already committed was lost",
        )
    if extended == sqlite3.SQLITE_IOERR_SHMSIZE:
        # SQLite allocates the -shm file by writing into each of its
        # pages; a full file system fails that write, and SQLite calls
        # it a plain I/O error ("disk I/O error"), not SQLITE_FULL.
        return JournalFull(
            journal,
            f"could not {doing} it: the file system is full (its shared-memory file "
            f"{journal.name}-shm could not grow: {message})",
            "Free space on it; nothing already committed was lost",
        )
    if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN):
        return JournalReadOnly(
            journal,
            f"could not {doing} it: it or its file system does not accept writes ({message})",
            "Make it writable, or pass a root on a writable file system",
        )
    if code == sqlite3.SQLITE_NOTADB:
        return JournalCorrupt(journal, "is not a SQLite database", MOVE_ASIDE)
    if code == sqlite3.SQLITE_CORRUPT:
        return JournalCorrupt(journal, f"is damaged ({message})", MOVE_ASIDE)
    if code == sqlite3.SQLITE_IOERR and not all(
        os.access(p, os.W_OK) for p in (journal, journal.with_name(journal.name + "-wal"))
        if p.exists()
    ):
        # SQLite reports a write refused (EPERM on an immutable file,
        # EROFS after a remount) as a plain I/O error.
        return JournalReadOnly(
            journal,
            f"could not {doing} it: it or its file system does not accept writes ({message})",
            "Make it writable, or pass a root on a writable file system",
        )
    if code == sqlite3.SQLITE_IOERR:
        return JournalError(
            journal,
            f"could not {doing} it: I/O error ({message})",
            f"Check the disk holding it ({os.strerror(errno.EIO)})",
        )
    return JournalError(journal, f"could not {doing} it ({message})", RETRY)
