"""The stores of this process: which journal files it has open, and what a fork leaves.

Process-wide, as SQLite's locks are: a descriptor of a journal file closed by
any part of a process drops every POSIX lock the process holds on it, so an
open must know whether another store of the process has it open already; a
segment one store retires is let go of by all the others at once; and a
forked child parks each store it inherited, never using nor freeing what
the parent still uses.  The stores are known here only through
:class:`Member`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from . import sealed

__all__ = ["Member", "abandon", "close_abandoned", "closed", "is_open", "join", "look_up",
           "opened", "opening", "park", "peers"]


class Member(Protocol):
    """What this module asks of a store."""

    def forget(self) -> None:
        """In a forked child: park the copy, touching nothing of the file."""

    def close_if_free(self) -> bool:
        """Close now if nothing holds the store (the caller holds :func:`opening`'s lock)."""

    def forget_files(self, files: set[str]) -> None:
        """Let go of any connection to *files*, which another store retired."""


# The journal files this process has connections to, by (device, inode).
_OPEN: Final[Counter[tuple[int, int]]] = Counter()
# Not Final: made anew in a forked child (see _forked).
_OPEN_LOCK = threading.Lock()
# The open stores of this process, by their journal's (device, inode): a
# segment one of them retires is let go of by all the others at once (see
# Retirement.retire), not only at their next look.
_PEERS: Final[dict[tuple[int, int], weakref.WeakSet[Member]]] = {}
# Connections inherited through fork(), kept referenced so that they are
# never closed (see Store.forget).
_FORKED: Final[list[object]] = []
# Every store of this process, so that a forked child parks the copy of each,
# a manager's or not (a recovery pass's in another thread, one half opened).
_STORES: Final[weakref.WeakSet[Member]] = weakref.WeakSet()
# Stores their owner dropped unclosed, waiting to be closed (see Store.abandon).
_ABANDONED: Final[list[Member]] = []
# Looked up at the first open, never in a forked child (where a lookup could
# wait for the dynamic loader's lock; a child of a process that opened no
# store has nothing to park): a child takes a reference to each connection
# it parks that nothing ever gives back, so that not even its interpreter's
# end frees it (see Store.forget).  Not at import: ctypes is not needed by
# whoever only imports the journal (and a 3.12 subinterpreter refuses it).
_never_freed: Callable[[object], None] | None = None


def look_up() -> None:
    """Look up what parking needs, before any fork could need it (at a store's open)."""
    global _never_freed
    if _never_freed is None:
        import ctypes

        incref = ctypes.pythonapi.Py_IncRef
        incref.argtypes = [ctypes.py_object]
        incref.restype = None
        _never_freed = incref


def _forked() -> None:
    """In a forked child: the locks anew, and no connection counted as open.

    A thread of the parent may have held either lock at the fork, and no
    thread of the child would ever release its copy.  Every connection the
    child inherited is the parent's: it is parked (Store.forget), never used
    nor freed.  Rebinding, clearing and parking take no lock while the child
    has one thread.
    """
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()
    sealed.after_fork()
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


@contextlib.contextmanager
def opening() -> Iterator[None]:
    """Hold the lock under which stores open and close (the current one: a child makes its own)."""
    with _OPEN_LOCK:
        yield


def join(store: Member) -> None:
    """Count *store* among this process's, from its first line: a fork may come at any point."""
    _STORES.add(store)


def is_open(key: tuple[int, int]) -> bool:
    """Whether a store of this process has the file *key* open (under :func:`opening`)."""
    return bool(_OPEN[key])


def opened(key: tuple[int, int], store: Member) -> None:
    """*store* has the journal *key* open (under :func:`opening`)."""
    _OPEN[key] += 1
    _PEERS.setdefault(key, weakref.WeakSet()).add(store)


def closed(key: tuple[int, int], store: Member) -> None:
    """*store* closed the journal *key* (under :func:`opening`)."""
    _OPEN[key] -= 1
    members = _PEERS.get(key)
    if members is not None:
        members.discard(store)
        if not members:
            del _PEERS[key]


def peers(key: tuple[int, int] | None) -> list[Member]:
    """The open stores of the journal *key*."""
    if key is None:
        return []
    with _OPEN_LOCK:
        return list(_PEERS.get(key, ()))


def park(held: object) -> None:
    """Keep *held*, a forked child's copy of a connection, from ever being freed."""
    # No lock: this runs in a forked child's at-fork handler.
    _FORKED.append(held)
    if _never_freed is not None:
        _never_freed(held)


def abandon(store: Member) -> None:
    """Close *store* as soon as nothing holds it (see Store.abandon)."""
    _ABANDONED.append(store)
    close_abandoned()


def close_abandoned() -> None:
    """Close every abandoned store whose locks are free now; never waits."""
    if not _ABANDONED or not _OPEN_LOCK.acquire(blocking=False):
        return
    try:
        for store in list(_ABANDONED):
            if store.close_if_free():
                _ABANDONED.remove(store)
    finally:
        _OPEN_LOCK.release()
