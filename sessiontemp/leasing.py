"""A manager's leases: handed out, given back, and what is done through them.

:class:`Leases` is the :class:`~sessiontemp.lease.LeaseOwner` of every lease
its manager hands out: a lease's release, the commands tracked on it and
the files kept from it come here, never into the manager's internals.  Each
runs under the manager's mutex and through its write path (an
:class:`~sessiontemp.writepath.Owner`); a lease's append on a live
generation is waited for outside the mutex, so that other threads' appends
join its commit.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sessiontemp import artifacts
from sessiontemp._guards.shield import shielded
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import processes
from sessiontemp.generations import Generations
from sessiontemp.handles import Handles
from sessiontemp.journal.errors import (
    BadInput,
    JournalError,
    RuleViolation,
    SessionTempError,
    Unavailable,
    UnsafeRoot,
)
from sessiontemp.journal.events import CommandStarted, LeaseReleased
from sessiontemp.journal.store import Pending
from sessiontemp.lease import Hold, Issuer, Lease
from sessiontemp.meter import Meter
from sessiontemp.recovery.cleanup import remove_artifact
from sessiontemp.space import reserve
from sessiontemp.writepath import Owner

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger

__all__ = ["MAX_LABEL", "Leases", "check_label"]

# The longest label the journal's schema accepts (its events decode no longer text).
MAX_LABEL: Final = 4096


def check_label(label: object) -> str:
    """*label* if it may label a lease; :class:`BadInput` (a ValueError) otherwise."""
    if not isinstance(label, str):
        raise BadInput(f"lease label {label!r}", f"is of type {type(label).__name__}, not a "
                       "str", "Pass text saying what the lease is for")
    if len(label) > MAX_LABEL:
        raise BadInput("the lease label", f"holds at most {MAX_LABEL} characters, not "
                       f"{len(label)}", "Shorten it")
    return label


class Leases:
    """The leases of *manager*: handed out on its current generation, each owned from here."""

    def __init__(self, manager: Issuer, owner: Owner, handles: Handles,
                 generations: Generations, mutex: threading.RLock, steps: Steps,
                 log: BoundLogger, *, clock: Callable[[], float], meter: Meter) -> None:
        # Weakly: each lease holds its manager, and a manager dropped
        # unclosed must be finalized at once, not by the cycle collector.
        self._manager = weakref.ref(manager)
        self.id = manager.id
        self._owner = owner
        self._handles = handles
        self._generations = generations
        self._mutex = mutex
        self._steps = steps
        self._log = log
        self._clock = clock
        self._meter = meter

    @property
    def root(self) -> Path:
        return self._handles.root.path

    def _unavailable(self, reason: str, fix: str) -> Unavailable:
        return Unavailable(self.root, reason, fix)

    def _broken(self) -> bool:
        """Whether the journal broke: what was appended last may or may not be committed."""
        store = self._handles.store
        return store is not None and store.broken is not None

    def acquire(self, label: str) -> Lease:
        """Hand out a lease on the current generation (see :meth:`Manager.acquire`)."""
        # Before the mutex: a budget's check may walk the directory.
        self._meter.admit()
        lease, pending = self._acquire_locked(label)
        self._meter.leased()
        if pending is None:
            return lease
        # A lease on a live generation: waited for without the mutex, so
        # that other threads' appends join its commit.
        try:
            self._owner.wait(pending)
        except (JournalError, RuleViolation) as e:
            with self._mutex:
                self._forget_hold(lease)
            raise self._unavailable(f"the journal could not record the lease: {e}",
                                    "No directory was handed out; retry once fixed") from e
        return lease

    def _acquire_locked(self, label: str) -> tuple[Lease, Pending | None]:
        with self._mutex:
            me = self._owner.me
            if self._handles.closed or me.ended is not None:
                raise self._unavailable(f"manager {self.id} is closed", "Open a new Manager")
            if me.sealed:
                raise self._unavailable(f"manager {self.id} is sealed: its last owner released "
                                        "it", "Open a new Manager for a new session")
            if me.owners == 0:
                raise self._unavailable(f"manager {self.id} has no owner", "Call retain() first")
            try:
                # The lease hands out a path through the root's name: it must
                # still name the directory the generation is made in.
                self._handles.root.check_identity()
            except UnsafeRoot as e:
                raise self._unavailable(str(e), "Open a new Manager on a safe root") from e
            try:
                self._handles.keep_alive(self.id, self._log)
                # Work a failure left (a directory half made, a removal due)
                # is finished before anything new begins.
                unfinished = self._generations.settle()
                # After the settle, whose removals may have freed space;
                # before anything of the lease is written.
                self._meter.check_disk()
                return self._lease(label, unfinished)
            except (JournalError, RuleViolation) as e:
                raise self._unavailable(f"the journal could not record the lease: {e}",
                                        "No directory was handed out; retry once fixed") from e

    def _lease(self, label: str, unfinished: Exception | None) -> tuple[Lease, Pending | None]:
        """Hand out a lease; its append is left to wait for when no generation was made."""
        leased = self._generations.lease(label, unfinished)
        hold = Hold(leased.work, leased.fd)
        manager = self._manager()
        assert manager is not None, "its caller holds it"
        lease = Lease(manager, self, leased.generation, leased.lease, leased.path, hold,
                      label=label)
        self._handles.leases[leased.lease] = hold
        self._log.debug("lease.acquired", generation=leased.generation, lease=leased.lease,
                        seq=self._owner.state.seq)
        return lease, leased.pending

    def _forget_hold(self, lease: Lease) -> None:
        """Drop *lease*'s lock, then forget it: in this order, for a fork between the two.

        A child forked after the drop finds the copy closed; one forked before
        it finds the hold still listed, and its disarm closes the copy.  The
        other order would leave, in a child forked between them, a copy no
        disarm can see, still held after the child's ``release()``.
        """
        hold = self._handles.leases.get(lease.id)
        if hold is not None:
            hold.drop()
            self._handles.leases.pop(lease.id, None)

    def release_lease(self, lease: Lease) -> None:
        """Journal *lease*'s release, then drop its lock and settle what it made due."""
        hold = self._handles.leases.get(lease.id)
        if self._handles.forked:
            if hold is not None:
                hold.drop_copy()
            return

        def failed(e: JournalError) -> None:
            # Keep the lock: without a journaled release the directory
            # must stay; a later release() tries again, and the next
            # recovery after this manager ends sees the lease as void.
            self._log.error("lease.release_failed", lease=lease.id, reason=str(e))

        def released() -> None:
            self._forget_hold(lease)
            if self._handles.closed:
                return
            self._log.debug("lease.released", generation=lease.generation, lease=lease.id,
                            seq=self._owner.state.seq)
            self._generations.settle()

        def operation() -> None:
            with self._mutex:
                if not self.holds(lease):
                    if hold is not None:
                        hold.drop()
                    return
                if self._owner.state.generations[lease.generation].retired:
                    # Its removal follows, and must not need free space.
                    reserve.make_room(self._handles.root.fd)
                try:
                    pending = self._owner.append(
                        LeaseReleased(self.id, lease.generation, lease.id), wait=False)
                    if self._owner.state.generations[lease.generation].retired:
                        # Its removal may follow: everything under the mutex.
                        self._owner.wait(pending)
                        released()
                        return
                except JournalError as e:
                    failed(e)
                    return
            # A release from a live generation: waited for without the
            # mutex, so that other threads' appends join its commit; the
            # lock goes only once the release is durable.
            try:
                self._owner.wait(pending)
            except JournalError as e:
                failed(e)
                return
            with self._mutex:
                released()

        shielded(operation)

    def keep(self, lease: Lease, path: os.PathLike[str] | str, label: str) -> artifacts.Artifact:
        """Copy *path* from *lease*'s directory into the artifact store, and journal it."""
        artifacts.check_label(label)
        parts = artifacts.source_parts(lease.path, path)
        self._handles.refuse_forked(self.id)

        def operation() -> artifacts.Artifact:
            with self._mutex:
                hold = self._handles.leases.get(lease.id)
                fd = None if hold is None else hold.fd
                if not self.holds(lease) or fd is None:
                    raise Unavailable(lease.path, f"lease {lease.id} was already released",
                                      "Keep files while the lease is held")
                return artifacts.keep(
                    self._owner, self._handles.root, fd, parts, label, manager=self.id,
                    lease=lease.id, directory=lease.path, source=path, steps=self._steps,
                    broken=self._broken, log=self._log)

        return shielded(operation)

    def discard(self, artifact: artifacts.Artifact) -> None:
        """Remove *artifact*, kept for a caller cancelled before it got it; a failure is logged."""
        try:
            remove_artifact(self.root, artifact, clock=self._clock, step_hook=self._steps.hook)
        except (OSError, SessionTempError) as e:
            # Recorded and durable, so nothing is lost: it stays in the store
            # (journal-inspect lists it) until removed by hand.
            self._log.warning("asyncio.not_undone", artifact=artifact.id,
                              path=str(artifact.path), reason=f"the artifact kept for a "
                              f"cancelled caller could not be removed: {e}")

    def track(self, lease: Lease, pid: int) -> bool:
        """Journal that *pid* was started on *lease*; False when it cannot be recorded."""
        if self._handles.forked:
            return False
        started = processes.start_time(pid)
        if started is None:
            return False

        def operation() -> bool:
            with self._mutex:
                if not self.holds(lease):
                    return False
                try:
                    self._owner.append(
                        CommandStarted(self.id, lease.generation, lease.id, pid, started))
                except JournalError as e:
                    # The lock the command inherited still protects it.
                    self._log.warning("command.untracked", lease=lease.id, pid=pid,
                                      reason=str(e))
                    return False
                return True

        return shielded(operation)

    def holds(self, lease: Lease) -> bool:
        """Whether the journal still has *lease* held by this open manager."""
        generation = self._owner.state.generations.get(lease.generation)
        return (generation is not None and lease.id in generation.leases
                and not self._owner.closed)

