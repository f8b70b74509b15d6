"""Segments: the journal as a chain of append-only SQLite files, so old history can be retired.

The journal's first file is the path users know, ``ROOT/journal.sqlite3``
(the *head*).  When a checkpoint is written and the file being appended to
(the *active* segment) is larger than :attr:`Retention.segment_bytes`, the
writer starts a new segment in the directory beside it,
``ROOT/journal.sqlite3.d/``, named after the first sequence number it will
hold (``00000000000000040001.sqlite3``).  Its first content is the
checkpoint, and its schema carries the last sequence number and digest of
the segment before, so the digest chain runs on across the boundary.

A rollover, while holding the old segment's write lock:

1. the new file is made under a temporary name (``.NAME.tmp``), with its
   schema and the checkpoint, closed and fsynced;
2. it is renamed to its name, and the directory is fsynced;
3. a row naming it is written into the old segment's ``sealed`` table, in
   the same write transaction, which commits.

A crash before 3 leaves a new file that no seal names: the next writer to
open the journal removes it (under the same write lock, so never one that
a live rollover is making).  After 3, every writer that still holds a
connection to the old segment finds the seal inside its own ``BEGIN
IMMEDIATE`` transaction, before it writes anything, and moves on to the
active segment: that is how every process learns of a rollover.

The active segment is found from the file names: the newest segment is
active when the one before it is sealed (or already retired).

A sealed segment is *retired* once a checkpoint in a later segment covers
its last event: nothing a replay needs is left in it.  Retired segments
are kept as read-only history while :class:`Retention` allows (their total
size and age, oldest deleted first, so what is kept is always one unbroken
run of history up to now); the head is retired by dropping its tables
(its ``sealed`` and ``retired`` tables stay: it is how the journal is
found) and vacuuming it, any other segment by unlinking its file.  Before
any of that, the head's ``retired`` table records up to which event and
when, which is what ``journal-inspect`` reports as where history starts.

The active segment's events are history too once a checkpoint covers them,
but they leave only with their segment: a retirement pass that finds the
active segment past :attr:`Retention.retirement_rollover_bytes` first
rolls it over at a checkpoint of its own state (the same three steps), so
that a budget smaller than a segment is kept, not just the sealed part.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Final

import attrs

from .errors import BadInput, UnsafeRoot

__all__ = [
    "DEFAULT_RETENTION",
    "MAX_KEPT",
    "ROLL_FLOOR",
    "Filed",
    "Retention",
    "Segment",
    "check_directory",
    "check_files",
    "directory",
    "folder",
    "listed",
    "litter",
    "name_of",
    "remove_file",
    "sync_directory",
    "tidy",
]

# SQLite attaches at most 10 databases to one connection (SQLITE_MAX_ATTACHED
# as built here), and a reader attaches every kept segment: the active one,
# the sealed ones not yet covered and the retired ones kept as history.
MAX_KEPT: Final = 10
_MIB: Final = 1 << 20
# A retirement pass rolls over no active segment smaller than this, however
# small the retention: a rollover costs a new file and three syncs, and a
# root opened often (every Manager open runs a pass) would pay them each time.
ROLL_FLOOR: Final = 256 << 10
_NAME: Final = re.compile(r"^(\d{20})\.sqlite3$")
# What SQLite keeps beside a segment's file, named after it.
_SIDE: Final = re.compile(r"^(\d{20}\.sqlite3)-(?:wal|shm|journal)$")
_SUFFIXES: Final = ("", "-wal", "-shm", "-journal")


@attrs.frozen
class Retention:
    """How large segments grow, and how much retired history is kept.

    ``segment_bytes``: a checkpoint written while the active segment is at
    least this large starts a new segment.  ``history_bytes`` and
    ``history_age`` (seconds since a segment was sealed): retired segments
    are kept as read-only history while their total size is at most the
    one and each is younger than the other; the oldest beyond either are
    deleted.  Whatever the budget, at most ``MAX_KEPT`` segments are kept.
    """

    # An open's quick_check reads the whole active segment (1 to 2 ms a MB),
    # so its size is what an open pays beyond a fresh root's; eight retired
    # segments of history plus the active one stay within MAX_KEPT.
    segment_bytes: int = 2 * _MIB
    history_bytes: int = 16 * _MIB
    history_age: float = 30 * 86400.0

    @property
    def retirement_rollover_bytes(self) -> int | float:
        """From this size on, a retirement pass rolls the active segment over.

        The events of the active segment that its checkpoint covers are
        history like the rest, but a segment leaves only whole and only once
        sealed: a pass that finds it larger than the history budget keeps
        (or past ``segment_bytes``, where a checkpoint would roll it over)
        seals it at a checkpoint of its own, so that it can be retired.
        Never below ``ROLL_FLOOR`` (256 KiB).
        """
        return max(ROLL_FLOOR, min(self.segment_bytes, self.history_bytes))

    def __attrs_post_init__(self) -> None:
        for name in ("segment_bytes", "history_bytes", "history_age"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value >= 0:
                raise BadInput(f"Retention.{name}", f"must be a number >= 0, not {value!r}",
                               "Pass a number of bytes or seconds")


DEFAULT_RETENTION: Final = Retention()


def _text(path: os.PathLike[str] | str) -> str:
    return os.fspath(path)


class Filed:
    """A file kept by its path as a string: the Path, and its name, made when asked."""

    __slots__ = ()
    file: str

    @property
    def path(self) -> Path:
        return Path(self.file)

    @property
    def name(self) -> str:
        return os.path.basename(self.file)


@attrs.frozen
class Segment(Filed):
    """One file of the journal: its path and the seq of the event before its first (0: head).

    The path is kept as the string it was listed as: a :class:`Path` parses
    it and interns its name in the interpreter's table of interned strings,
    and the segments are listed again on every read across them and every
    retirement pass, each time with the names of new ones.  :attr:`path`
    makes the Path when asked.
    """

    file: str = attrs.field(converter=_text)
    base: int

    @property
    def is_head(self) -> bool:
        return self.base == 0


def directory(journal: Path) -> Path:
    """Where the segments after the head live: beside the head, named after it."""
    return Path(folder(journal))


def folder(journal: os.PathLike[str] | str) -> str:
    """:func:`directory` as a string, made without parsing a path."""
    # A Path's string has no trailing separator, so this names what
    # journal.with_name(journal.name + ".d") does.
    return os.fspath(journal) + ".d"


def name_of(first: int) -> str:
    """The file name of the segment whose first event is *first*."""
    return f"{first:020d}.sqlite3"


def listed(journal: Path) -> list[Segment]:
    """The head and every segment file beside it, oldest first (none removed or checked).

    Anything at a segment's name that is not a regular file (a directory, a
    FIFO, a socket, a symbolic link) is refused with :class:`UnsafeRoot`
    naming it, by readers and writers alike: the journal never made it, a
    reader would skip it while a writer tripped over it, and SQLite opening a
    FIFO by its name would wait for a writer to it for ever.  The kind comes
    with the listing (``d_type``), at no cost of its own.
    """
    found = [Segment(journal, 0)]
    where = folder(journal)
    try:
        entries = os.scandir(where)
    except (FileNotFoundError, NotADirectoryError):
        return found
    with entries:
        for entry in entries:
            match = _NAME.match(entry.name)
            if match is not None and int(match.group(1)) > 0:
                if not entry.is_file(follow_symlinks=False):
                    _check_entry(entry.path, writer=False, kind=stat.S_IFREG)
                found.append(Segment(entry.path, int(match.group(1)) - 1))
    found[1:] = sorted(found[1:], key=lambda s: s.base)
    return found


def temporaries(journal: Path) -> list[str]:
    """Half-made segments a crashed rollover left, by their temporary names."""
    where = folder(journal)
    try:
        names = os.listdir(where)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(where, n) for n in names if n.startswith(".") and n.endswith(".tmp")]


def litter(journal: Path) -> list[str]:
    """What SQLite left beside segment files that are gone: each -wal, -shm or -journal.

    A retirement unlinks a segment's file before its -wal and -shm, and a
    reader that opened the file just before (its descriptor keeps the
    deleted file readable) makes a new -wal and -shm at its first read,
    which a read-only connection never deletes.  A segment's name never
    comes back once its file is gone (each is named after its first event),
    so such a file is nobody's: :func:`tidy` removes it.
    """
    where = folder(journal)
    try:
        names = set(os.listdir(where))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        match = _SIDE.match(name)
        if match is not None and match.group(1) not in names:
            found.append(os.path.join(where, name))
    return sorted(found)


def tidy(path: os.PathLike[str] | str) -> list[str]:
    """If the segment file *path* is gone, remove what SQLite left beside it; return that.

    Never for the head (it is never unlinked, only emptied).  A file that
    cannot be removed (another user's root, read by an administrator) is
    left, for the next writer and ``fsck`` to find.
    """
    name = os.fspath(path)
    removed: list[str] = []
    # By its name: never the head, whose -wal may hold committed events of a
    # head moved aside while it was open.
    if _NAME.match(os.path.basename(name)) is None or os.path.lexists(name):
        return removed
    for suffix in _SUFFIXES[1:]:
        with contextlib.suppress(OSError):
            os.unlink(name + suffix)
            removed.append(name + suffix)
    return removed


def temporary(path: os.PathLike[str] | str) -> str:
    """The name *path* is made under before it is renamed to its own (``.NAME.tmp``)."""
    head, name = os.path.split(os.fspath(path))
    return os.path.join(head, f".{name}.tmp")


# SQLite opens a database by its name, following a symlink there: a link at
# a segment's name would have the journal read, and written, wherever it
# points.  SQLite keeps two files beside each: what it writes to them is
# the journal as much as the file itself.
_SIDE_FILES: Final = ("", "-wal", "-shm")
_LINK_FIX: Final = "Remove it or pass another root"


def check_files(path: os.PathLike[str] | str, *, writer: bool) -> None:
    """Refuse a journal file (the head or any segment) whose file, -wal or -shm is unsafe.

    A symbolic link at any of the three names is refused (:class:`UnsafeRoot`,
    naming it), and so is anything at the file's own name but a regular file,
    and a FIFO, a socket or a device at its -wal or -shm: SQLite opens each by
    its name, and a FIFO would hold that open, or its first read (and every
    caller with it), until something wrote to it.  A directory at the -wal or
    -shm is SQLite's own to refuse (it cannot open one, and a reader then
    reads the file as it is).  A *writer* also refuses one owned by another
    user, which it would write to on their behalf.  A name that does not
    exist is fine.
    """
    name = os.fspath(path)
    _check_entry(name, writer=writer, kind=stat.S_IFREG)
    for suffix in _SIDE_FILES[1:]:
        _check_entry(f"{name}{suffix}", writer=writer, kind=stat.S_IFREG,
                     or_kind=stat.S_IFDIR)


def check_directory(journal: os.PathLike[str] | str, *, writer: bool) -> None:
    """Refuse the segment directory beside *journal* when it is unsafe, as :func:`check_files`."""
    _check_entry(folder(journal), writer=writer, kind=stat.S_IFDIR)


_KINDS: Final = ((stat.S_IFDIR, "a directory"), (stat.S_IFREG, "a regular file"),
                 (stat.S_IFIFO, "a FIFO"), (stat.S_IFSOCK, "a socket"),
                 (stat.S_IFCHR, "a device"), (stat.S_IFBLK, "a device"))


def _check_entry(name: str, *, writer: bool, kind: int, or_kind: int | None = None) -> None:
    try:
        # Not following, and not opening: the link itself is what must not be
        # there, and an open of a FIFO would block.  The kind is checked here,
        # by the name SQLite opens next; SQLite takes no descriptor of ours,
        # and an O_PATH one would tell no more than this does.
        st = os.lstat(name)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeRoot(name, "is a symbolic link", _LINK_FIX)
    if stat.S_IFMT(st.st_mode) not in (kind, or_kind):
        wanted = "a directory" if kind == stat.S_IFDIR else "a regular file"
        found = dict(_KINDS).get(stat.S_IFMT(st.st_mode), "of an unknown kind")
        raise UnsafeRoot(name, f"is not {wanted} ({found})", _LINK_FIX)
    uid = os.getuid()
    if writer and st.st_uid != uid:
        raise UnsafeRoot(name, f"is owned by uid {st.st_uid}, not you (uid {uid})", _LINK_FIX)


def parent(path: os.PathLike[str] | str) -> str:
    """The directory *path* is in, as Path.parent names it (``.`` for a bare name)."""
    return os.path.dirname(os.fspath(path)) or os.curdir


def sync_directory(path: os.PathLike[str] | str) -> None:
    """fsync a directory, so a rename or unlink in it survives a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_file(path: os.PathLike[str] | str) -> None:
    """Unlink a segment file and whatever SQLite keeps beside it; absent ones are fine.

    The main file goes first: a -wal left without it is litter, never
    mistaken for a segment.
    """
    for suffix in _SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def size_of(path: os.PathLike[str] | str) -> int:
    """Bytes on disk of a segment file with its -wal (0 when gone)."""
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(f"{path}{suffix}").st_size
    return total
