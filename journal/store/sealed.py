"""What this process remembers of sealed segment files, shared by every store it opens.

What this process has read of segment files that were sealed, by journal
(its head's path), then by segment (its base: its file name within the
journal): the file's (device, inode, size, mtime) when it was found sealed,
and once read, what it holds.  A sealed segment is never written again, so
whether it is sealed and what it holds (its events, seal and checkpoints)
stay as read for as long as the file does.  Shared by every store of the
process: each Manager open is a store of its own, and without it would
connect to every kept segment again.  The file's size and mtime are
compared so that a file replaced (never done to a segment, but a journal
can be moved aside) is read afresh.  Each listing of a journal's segments
drops what it no longer lists, so that what is remembered is what is kept,
not every segment the journal ever had.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Final, TypeAlias

from ..segments import Segment

__all__ = ["Facts", "Identity", "after_fork", "forget_all", "forget_unlisted", "identity",
           "known", "remember", "remembered", "vacuumed", "was_vacuumed"]

Identity: TypeAlias = tuple[int, int, int, int]
# (first, last, sealed, covered, has_events, based) of a segment: see SegmentInfo.
Facts: TypeAlias = tuple[int | None, int | None, float | None, int | None, bool, bool]
_Known: TypeAlias = tuple[Identity, Facts | None]
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
# vacuum a killed retirement leaves undone (see Retirement.retire).
_VACUUMED: Final[dict[Path, Identity]] = {}
# Not Final: made anew in a forked child (see after_fork).
_LOCK = threading.Lock()
# Bounds the caches of a process that opens many journals.
_MAX: Final = 4096


def after_fork() -> None:
    """In a forked child: the lock anew (a thread of the parent may have held it)."""
    global _LOCK
    _LOCK = threading.Lock()


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _pack(identity: Identity, facts: Facts | None) -> bytes | None:
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


def known(journal: Path, segment: Segment, identity: Identity) -> _Known | None:
    """What is remembered of *segment* of *journal*, if its file is still the one read."""
    record = _KNOWN.get(journal, {}).get(segment.base)
    if record is None:
        return None
    found = _unpack(record)
    return found if found[0] == identity else None


def remember(journal: Path, segment: Segment, identity: Identity,
             facts: Facts | None) -> None:
    """Remember *segment* of *journal* as sealed, with *facts* if they were read."""
    record = _pack(identity, facts)
    with _LOCK:
        entries = _KNOWN.get(journal)
        if entries is None:
            if len(_KNOWN) >= _MAX:
                # Only a cost: whatever was forgotten is read again.
                _KNOWN.clear()
            entries = _KNOWN[journal] = {}
        previous = entries.get(segment.base)
        if facts is None and previous is not None and _unpack(previous)[0] == identity:
            # Found sealed again: what was read of it stays.
            return
        if record is None:
            # Only a cost, as above.
            entries.pop(segment.base, None)
        else:
            entries[segment.base] = record


def forget_unlisted(journal: Path, listed: list[Segment]) -> None:
    """Drop what is remembered of *journal*'s segment files that *listed* no longer has."""
    with _LOCK:
        entries = _KNOWN.get(journal)
        if entries is None:
            return
        bases = {segment.base for segment in listed}
        if not entries.keys() <= bases:
            _KNOWN[journal] = {base: k for base, k in entries.items() if base in bases}


def was_vacuumed(journal: Path, identity: Identity | None) -> bool:
    """Whether *journal*'s head, as *identity*, was found with no free page left."""
    return identity is not None and _VACUUMED.get(journal) == identity


def vacuumed(journal: Path, identity: Identity) -> None:
    """Remember *journal*'s head, as *identity*, as having no free page left."""
    with _LOCK:
        if len(_VACUUMED) >= _MAX:
            _VACUUMED.clear()
        _VACUUMED[journal] = identity


def remembered(journal: Path) -> dict[int, bool]:
    """By base, each segment of *journal* remembered as sealed, and whether its facts were read."""
    return {base: _unpack(record)[1] is not None
            for base, record in _KNOWN.get(journal, {}).items()}


def forget_all() -> None:
    """Forget every segment remembered (only a cost: each is read again)."""
    with _LOCK:
        _KNOWN.clear()
