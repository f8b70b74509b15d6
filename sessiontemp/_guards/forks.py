"""What a forked child holds of its parent: copies, let go of without waiting for anyone.

``fork()`` copies the whole process into a child that runs only the thread
that forked.  A lock that another thread of the parent held at that moment
is copied held, and nothing in the child will ever release it: a child that
waits for one hangs for good.  A hung child is worse than a crashed one: it
keeps every descriptor it inherited open, a lease's lock and a manager's
liveness lock among them, so the directories they guard can never be
removed while it hangs.

So nothing the library does in a child waits for a lock copied from its
parent.  The handler run in the child at each fork takes no lock at all: it
counts the fork (:func:`epoch`), and the copies consult the count lazily.  A
lock that a child may still need (a lease's, to let its copy of the lock
descriptor go) is a :class:`Mutex`, whose copy in a child is a new, free
lock.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

__all__ = ["Mutex", "epoch"]

# How many forks separate this process from the one that imported the
# module: 0 there, 1 in its children, 2 in theirs.  Only the child handler
# changes it, while the child has one thread.
_epoch = 0
# Serialises the replacement of a copied lock among a child's own threads;
# made anew in each child, so no thread of the parent can hold it there.
_replacing = threading.Lock()


def _forked() -> None:
    # Lock-free by design: rebinding two globals, while the child has one thread.
    global _epoch, _replacing
    _epoch += 1
    _replacing = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def epoch() -> int:
    """How many forks this process is from the one that imported the library."""
    return _epoch


class Mutex:
    """A ``threading.Lock`` whose copy in a forked child starts free.

    The parent's lock may have been held by one of its threads at the fork;
    that thread does not exist in the child, so the child gets a lock of its
    own the first time it asks.  (The thread that forked carries on in the
    child, but it never forks while holding one of these.)
    """

    __slots__ = ("_epoch", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch = _epoch

    def _own(self) -> threading.Lock:
        if self._epoch == _epoch:
            return self._lock
        with _replacing:
            if self._epoch != _epoch:
                self._lock, self._epoch = threading.Lock(), _epoch
            return self._lock

    def __enter__(self) -> bool:
        return self._own().acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()
