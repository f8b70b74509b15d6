"""Locating a journal, opening it read-only, probing the kernel's locks, and words for people.

What every part of the inspector shares.  Nothing here writes: the journal
is opened read-only (immutable for a copy on a read-only medium), and the
locks are looked at in the kernel's table, never taken.  The journal is
read through the one read model, :mod:`sessiontemp.journal.history`, which
every subcommand folds through.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Literal, TypeAlias

import attrs

from sessiontemp._kernel.locks import flock_holders
from sessiontemp._kernel.root import (
    ENTRIES,
    GENERATION_PREFIX,
    JOURNAL_NAME,
    MANAGERS_DIR,
    TRASH_PREFIX,
    WORK_DIR,
    check_layout,
    default_root,
    empty_path,
    generation_id_of,
    lock_file_name,
)
from sessiontemp.journal.errors import BadInput, JournalCorrupt, JournalError
from sessiontemp.journal.history import PROGRESS_EVERY, Problem, Start
from sessiontemp.journal.store import Store

__all__ = [
    "PROGRESS_EVERY",
    "ROOT_FILES",
    "Hold",
    "Liveness",
    "Location",
    "Problem",
    "Progress",
    "as_path",
    "counted",
    "generation_of",
    "kept_history",
    "locate",
    "opened",
    "parse_moment",
    "probe_generation",
    "probe_liveness",
    "text_of",
    "when",
]

Progress: TypeAlias = Callable[[int, int], None]
"""Called with (events done, events in all) now and then during a long replay."""
Liveness: TypeAlias = Literal["live", "gone", "unknown"]
"""Whether a manager's liveness lock is held ("live"), free ("gone") or cannot be probed."""
Hold: TypeAlias = Literal["held", "free", "absent", "unknown"]
"""Whether anyone holds a generation directory's lock, or the directory is not there."""

# Entries of a root that are neither generations nor trash.
ROOT_FILES: Final = ENTRIES
# Opens of a journal replaced while it was being opened, before its answer is an error.
_REOPENS: Final = 3
_ROOT_FIX: Final = "Pass the root directory that holds journal.sqlite3 as --root DIR"
_NOT_A_JOURNAL_FIX: Final = ("Check the path: name a sessiontemp journal (a root's "
                             f"{JOURNAL_NAME}, or a copy of one), or pass its root as --root DIR")


@attrs.frozen
class Location:
    """The journal file, and its root when known (None for a bare journal file)."""

    journal: Path
    root: Path | None


def locate(journal: os.PathLike[str] | str | None = None,
           root: os.PathLike[str] | str | None = None) -> Location:
    """The journal named by its file, else by its root, else the per-user default root.

    Raises :class:`~sessiontemp.BadInput` for a root that is not a directory, and for a
    directory given as the journal file (with ``--root`` as the fix when it
    holds a journal); :class:`~sessiontemp.UnsafeRoot` for a root whose own entries
    (``managers``, ``artifacts``, the journal's files, ...) are symlinks,
    of the wrong kind or someone else's: what they lead to is not the root's.
    """
    for given, what in ((root, "the root"), (journal, "the journal")):
        if given is not None and as_path(given, what) and not os.fspath(given):
            # Path("") is the working directory: never read (or repaired) by accident.
            raise empty_path(what, "Pass a path, or None for the per-user root")
    base = None if root is None else as_path(root, "the root")
    if base is not None:
        if not os.path.lexists(base):
            raise BadInput(base, "does not exist", _ROOT_FIX)
        if not base.is_dir():
            raise BadInput(base, "is not a directory", _ROOT_FIX + (
                ", or name a journal file as PATH" if journal is None else ""))
        check_layout(base)
        if journal is None and not os.path.lexists(base / JOURNAL_NAME):
            # The user passed --root: "pass --root" is no fix, the right directory is.
            raise BadInput(base, f"holds no journal ({JOURNAL_NAME}): no Manager has made it "
                           "a root", "Check the path: pass the directory a Manager made its "
                           f"root (the per-user default is {default_root()}), or name a "
                           "journal file as PATH")
    if journal is not None:
        path = as_path(journal, "the journal")
        if path.is_dir():
            if (path / JOURNAL_NAME).exists():
                raise BadInput(path, "is a root directory, not a journal file",
                               f"Pass it as --root {path} (or name {path / JOURNAL_NAME})")
            raise BadInput(path, "is a directory, not a journal file",
                           "Name a journal file, or pass its root as --root DIR")
        return Location(path, base)
    if base is None:
        base = Path(default_root())
        if base.is_dir():
            check_layout(base)
    return Location(base / JOURNAL_NAME, base)


@contextlib.contextmanager
def opened(journal: Path, *, snapshot: bool = False) -> Iterator[Store]:
    """The journal open read-only; with *snapshot*, every read sees the same moment.

    A file that is not a journal is :class:`JournalCorrupt`; unless it is
    where a root's journal belongs, the fix is to name the right file, never
    to move this one (a README given by mistake is the user's own).
    """
    for attempt in range(_REOPENS):
        before = _identity(journal)
        try:
            store = Store(journal, readonly=True)
        except JournalCorrupt as e:
            if journal.name == JOURNAL_NAME or Path(e.path) != journal:
                raise
            raise JournalCorrupt(e.path, e.reason, _NOT_A_JOURNAL_FIX) from None
        with contextlib.ExitStack() as stack:
            stack.callback(store.close)
            if snapshot:
                try:
                    stack.enter_context(store.snapshot())
                except JournalError:
                    # Moved aside and started afresh (the way out of a refused
                    # record) since the store opened it: the new one is read.
                    if attempt + 1 < _REOPENS and _identity(journal) != before:
                        continue
                    raise
            yield store
            return


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def probe_liveness(root: Path, manager_id: str) -> Liveness:
    """Whether a manager's liveness lock is held, read from the kernel's lock table.

    Taking no lock: a recovery pass, or a named session's next owner, that
    probes the lock in the same instant must find it as it would without
    an inspector, or it would take a dead manager for a live one and the
    session would start afresh.  "unknown" when the lock file is missing
    (not made yet, or already swept), is not a regular file, or the table
    (``/proc/locks``) cannot be read.
    """
    try:
        holders = _holders(root / MANAGERS_DIR / lock_file_name(manager_id), stat.S_ISREG)
    except OSError:
        return "unknown"
    return "unknown" if holders is None else "live" if holders else "gone"


def probe_generation(root: Path, generation_id: str) -> Hold:
    """Whether a command (or anyone) holds the lock of a generation directory.

    Read from the kernel's lock table, taking no lock: an exclusive probe
    would make a manager's shared lock on it fail in the same instant (a
    named session's next owner adopting the directory, a lease on it).
    "unknown" when it is not a directory or the table cannot be read.
    """
    try:
        holders = _holders(root / (GENERATION_PREFIX + generation_id), stat.S_ISDIR)
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "unknown"
    return "unknown" if holders is None else "held" if holders else "free"


def _holders(path: Path, kind: Callable[[int], bool]) -> list[tuple[str, int]] | None:
    """Who holds a lock on *path* (not followed), by the kernel's lock table.

    None when *path* is not of *kind* or the table cannot be read; raises
    OSError when *path* cannot be read.
    """
    st = os.stat(path, follow_symlinks=False)
    return flock_holders(st) if kind(st.st_mode) else None


def parse_moment(text: str) -> int | float:
    """A sequence number (an integer) or a time (ISO 8601, or epoch seconds with a point).

    Raises :class:`~sessiontemp.BadInput` (a ValueError) for anything else.
    """
    text = text_of(text, "the moment", "Pass a sequence number or a time as a str").strip()
    if text.isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(repr(text), "is neither a sequence number nor a time", "Pass a "
                       "sequence number, or a time (ISO 8601, or epoch seconds with a decimal "
                       "point)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()


def as_path(value: object, what: str) -> Path:
    """*value*, given as *what*, as a Path; :class:`~sessiontemp.BadInput` unless it is one.

    ``Path(3)`` would raise a bare TypeError naming neither the argument
    nor the fix.
    """
    if not isinstance(value, str | os.PathLike):
        raise BadInput(f"{what} {value!r}", f"is of type {type(value).__name__}, not a path",
                       f"Pass {what} as a str or Path")
    return Path(value)


def text_of(value: object, what: str, fix: str) -> str:
    """*value*, given as *what*; :class:`~sessiontemp.BadInput` with *fix* unless it is a str."""
    if not isinstance(value, str):
        raise BadInput(f"{what} {value!r}", f"is of type {type(value).__name__}, not a str", fix)
    return value


def generation_of(target: str) -> str:
    """The generation id named by a directory path, a generation or trash name, or an id.

    A generation's work directory (a lease's path, a command's ``TMPDIR``) names its
    generation too.  Raises :class:`~sessiontemp.BadInput` for a path (it has a slash)
    whose last part is neither a generation nor a trash name, such as ``/etc``.
    """
    text_of(target, "the generation", "Pass a generation's path, name or id as a str")
    path = Path(target.rstrip("/"))
    name = path.name
    gid = generation_id_of(name)
    if gid is None and name == WORK_DIR and "/" in target:
        gid = generation_id_of(path.parent.name)
    if gid is not None:
        return gid
    if "/" in target or name in ("", ".", ".."):
        prefix = next((p for p in (GENERATION_PREFIX, TRASH_PREFIX) if name.startswith(p)), None)
        why = (f"its name does not start with {GENERATION_PREFIX}" if prefix is None else
               f"{name[len(prefix):]!r} is not a generation id: sessiontemp names each "
               "generation with 16 characters of a-z and 2-7")
        raise BadInput(target, f"is not a sessiontemp generation ({why})",
                       "Name a generation directory of the root, or a generation id "
                       "(journal-inspect events --kind generation.created lists them)")
    return name


def when(t: float) -> str:
    """A time for people: local ISO 8601, to the second."""
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def counted(n: int, one: str, many: str | None = None) -> str:
    """*n* things, in words: ``counted(1, "crash", "crashes")`` is "1 crash"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def kept_history(start: Start) -> str:
    """Where the kept history starts, in words: "the kept history, which starts at event N on DATE".

    What the state there does not hold (who did what before it, the labels
    of leases taken before it) is said with these words, never as unknown.
    """
    if start.time is not None:
        return f"the kept history, which starts at event {start.first:,} on {when(start.time)}"
    retired = start.history.retired_at
    return (f"the kept history, which starts at event {start.first:,} (none is written yet; "
            f"the history before it was retired"
            + ("" if retired is None else f" at {when(retired)}") + ")")
