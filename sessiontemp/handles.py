"""The operating-system handles a manager holds, in one place.

Not lifecycle state (that is the reducer's, over the journal) but what the
kernel gives the process: the root's descriptors (one of them carrying the
root's shared lock), the liveness lock, the manager's own shared locks on
each generation it keeps alive and on its work directory, the leases' lock
descriptors (each lease's :class:`Hold`, by lease id), the journal's SQLite
connection.  :meth:`Handles.close_all` lets go of all of them the way the
kernel does when a process dies, which serves an orderly close, a manager
that can no longer write its journal, a forked child's copies, and the
tests' simulated kill alike.

Every manager's handles are registered here by its id (:func:`register`):
a forked child disarms the copies of them all, and the test suite and the
benchmarks look a manager's up (:func:`of`) instead of reaching into it.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar

import attrs

from sessiontemp._guards import forks
from sessiontemp._kernel import resources
from sessiontemp._kernel.liveness import LivenessLock
from sessiontemp._kernel.root import Root
from sessiontemp.journal.errors import ForkedCopy
from sessiontemp.journal.store import Store
from sessiontemp.sessions import SessionLock

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger

__all__ = ["Handles", "Hold", "of", "register"]

T = TypeVar("T")


class Hold:
    """A lease's lock descriptors: the shared flocks that keep its directory alive.

    The first is the leased directory's own (the generation's work
    directory, which age cleaners probe), the second the generation's (the
    one a remover must win); both are passed to commands.  Its mutex is a
    :class:`forks.Mutex`: a forked child dropping its copies must not wait
    for a lock that a thread of its parent held at the fork (one starting a
    command with popen, say).  Whoever holds the manager's mutex takes it
    first and this one second, the one order every path takes, so a
    release racing a close cannot deadlock.
    """

    __slots__ = ("_fds", "_mutex")

    def __init__(self, *fds: int) -> None:
        self._fds: tuple[int, ...] | None = fds
        self._mutex = forks.Mutex()

    @property
    def fd(self) -> int | None:
        """The leased directory's descriptor, None once dropped (read without the mutex)."""
        fds = self._fds
        return None if fds is None else fds[0]

    @property
    def fds(self) -> tuple[int, ...] | None:
        """Every descriptor, None once dropped (read without the mutex: a snapshot)."""
        return self._fds

    def dup(self) -> tuple[int, ...] | None:
        """Duplicates of the descriptors (the same locks), or None once dropped."""
        with self._mutex:
            if self._fds is None:
                return None
            copies: list[int] = []
            try:
                for fd in self._fds:
                    copies.append(os.dup(fd))
            except BaseException:
                for fd in copies:
                    os.close(fd)
                raise
            return tuple(copies)

    def run(self, start: Callable[[tuple[int, ...]], T]) -> T | None:
        """Call *start* with the descriptors, which no drop closes meanwhile; None once dropped."""
        with self._mutex:
            if self._fds is None:
                return None
            return start(self._fds)

    def drop(self) -> bool:
        """Close the descriptors; False if they were already closed."""
        with self._mutex:
            fds, self._fds = self._fds, None
            if fds is None:
                return False
            _close_all(fds)
            return True

    def drop_copy(self) -> None:
        """In a forked child: close this process's copies of the descriptors.

        The parent may have been closing its own at the fork, so a copy
        may be closed already.
        """
        with self._mutex:
            fds, self._fds = self._fds, None
        for fd in fds or ():
            with contextlib.suppress(OSError):
                os.close(fd)


def _close_all(fds: tuple[int, ...]) -> None:
    """Close every one of *fds*, even when closing one fails; the first failure is raised."""
    failed: OSError | None = None
    for fd in fds:
        try:
            os.close(fd)
        except OSError as e:
            failed = failed or e
    if failed is not None:
        raise failed


@attrs.define
class Handles:
    """What one manager holds open.  ``closed`` once let go; ``forked`` in a child's copy."""

    root: Root
    store: Store | None = None
    liveness: LivenessLock | None = None
    session: SessionLock | None = None
    generations: dict[str, int] = attrs.field(factory=dict)
    # The manager's own lock on each of those generations' work directory.
    work: dict[str, int] = attrs.field(factory=dict)
    leases: dict[str, Hold] = attrs.field(factory=dict)
    pid: int = attrs.field(factory=os.getpid)
    closed: bool = False

    @property
    def forked(self) -> bool:
        """Whether these are a forked child's copies of its parent's handles."""
        return self.pid != os.getpid()

    def keep_alive(self, manager: str, log: BoundLogger) -> None:
        """Put manager *manager*'s liveness lock file back if something deleted it meanwhile."""
        liveness = self.liveness
        if liveness is None or liveness.untouched():
            # One fstat of the held descriptor on every operation; the
            # lookups by name only once something touched the file.
            return
        root = self.root
        try:
            if root.managers_removed():
                # The whole directory went (``rm -r``): its lock file cannot be
                # put back into a removed directory, so the directory comes first.
                root.reopen_managers()
                liveness.moved(root.managers_fd)
            if liveness.check():
                log.warning("manager.lock_recreated",
                            path=str(self.root.manager_lock_path(manager)))
        except OSError as e:
            if not resources.shortage(e):
                raise
            # Put back by the next operation: meanwhile a recovery finds no
            # lock file and leaves this manager alone, as it must.
            log.warning("manager.lock_not_recreated", reason=str(e))

    def refuse_forked(self, manager: str) -> None:
        """Raise :class:`ForkedCopy` in a forked child: the copy owns nothing of its parent's."""
        if self.forked:
            raise ForkedCopy(
                self.root.path, f"manager {manager} belongs to process {self.pid}; this "
                f"is a forked copy in process {os.getpid()}",
                "Open a new Manager in the child, or start children with lease.popen",
            )

    def drop_generation(self, generation: str) -> None:
        self.drop_work(generation)
        fd = self.generations.pop(generation, None)
        if fd is not None:
            os.close(fd)

    def drop_work(self, generation: str) -> None:
        fd = self.work.pop(generation, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        """Close every descriptor and the connection, unlinking and journaling nothing.

        What a SIGKILL does: every lock is freed by the kernel, so recovery
        can tell the manager is gone, and nothing on disk changes.
        """
        if self.closed:
            return
        self.closed = True
        for hold in list(self.leases.values()):
            hold.drop()
        self.leases.clear()
        for generation in list(self.generations):
            self.drop_generation(generation)
        if self.liveness is not None:
            self.liveness.close()
        # After the liveness lock: a successor claiming the session then
        # finds this manager gone, and can resume what it leaves.
        if self.session is not None:
            self.session.close()
        if self.store is not None:
            self.store.close()
        self.root.close()

    def abandon(self) -> None:
        """Let go of everything, as :meth:`close_all` does, for a manager dropped unclosed.

        Run by its finalizer, in whatever thread the garbage collector runs
        in: every descriptor is closed at once (nothing can be using them:
        the manager, and with it each of its leases, is unreachable), and
        the journal connection is closed as soon as no thread holds its
        locks (:meth:`Store.abandon`).
        """
        self.closed = True
        for hold in list(self.leases.values()):
            hold.drop_copy()
        self.leases.clear()
        for generation in list(self.generations):
            self.drop_generation(generation)
        if self.liveness is not None:
            self.liveness.close()
        if self.session is not None:
            self.session.close()
        self.root.close()
        if self.store is not None:
            self.store.abandon()

    def forget(self) -> None:
        """In a forked child: close the copies that would keep the parent looking alive.

        The child owns nothing: it journals nothing, unlinks nothing, and
        never unlocks (an unlock through a shared open file description
        would free the parent's lock).  The leases' lock copies stay open,
        so a child working in a leased directory keeps it alive, as a
        command started by ``lease.popen`` does, until it exits.  The SQLite
        connection is parked, never closed (see :meth:`Store.forget`).
        """
        # Whatever is still recorded, even once marked closed: a thread of the
        # parent may have been half-way through close_all() at the fork.
        self.closed = True
        # Each copy on its own: that thread may have closed one, which the
        # child then finds closed already.
        for generation in list(self.generations):
            with contextlib.suppress(OSError):
                self.drop_generation(generation)
        closes = [self.root.close]
        if self.liveness is not None:
            closes.append(self.liveness.close)
        if self.session is not None:
            # The child must not keep the session owned after its parent dies.
            closes.append(self.session.close)
        for close in closes:
            with contextlib.suppress(OSError):
                close()
        if self.store is not None:
            self.store.forget()


# Held weakly: a manager's handles live as long as it does, and not a moment
# longer for being registered.
_REGISTERED: Final[weakref.WeakValueDictionary[str, Handles]] = weakref.WeakValueDictionary()


def register(manager: str, handles: Handles) -> None:
    """Register *handles* as manager *manager*'s: from now on a forked child disarms its copies."""
    _REGISTERED[manager] = handles


def of(manager: str) -> Handles:
    """What manager *manager* of this process holds open (KeyError once it is gone)."""
    return _REGISTERED[manager]


def _disarm_copies() -> None:
    # Takes no lock (see sessiontemp._guards.forks): the child has one thread, and
    # any lock may have been held by one of the parent's at the fork.
    for handles in list(_REGISTERED.values()):
        # One copy that cannot be disarmed must not leave the others armed.
        with contextlib.suppress(Exception):
            handles.forget()


os.register_at_fork(after_in_child=_disarm_copies)
