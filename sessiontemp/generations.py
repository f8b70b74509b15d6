"""A manager's generations: making them, settling what is due, removing them.

One manager's directories and what it owes them, on the file system: a
generation is journaled before its mkdir, locked (shared) before any lease
on it is journaled, and removed once the state says its removal is due
(retired with no lease left) or was started.  :meth:`Generations.settle`
finishes whatever work a failure left, on every operation, so nothing
half done outlives the next one.

The state and the write path stay the manager's: a :class:`Generations`
reads the state and appends through the manager's writer (a
:class:`~sessiontemp.writepath.WritePath`), and holds its locks in the
manager's :class:`~sessiontemp.handles.Handles`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import resources
from sessiontemp._kernel.liveness import lock_shared, lock_work
from sessiontemp._kernel.locks import refusal
from sessiontemp._kernel.root import WORK_DIR, generation_name
from sessiontemp.handles import Handles
from sessiontemp.journal import ids
from sessiontemp.journal.errors import SessionTempError, Unavailable
from sessiontemp.journal.events import GenerationCreated, GenerationReady, LeaseAcquired, Rotated
from sessiontemp.journal.reducer import removal_due
from sessiontemp.journal.store import Pending
from sessiontemp.recovery.removal import Blocked, Target, remove
from sessiontemp.space import reserve
from sessiontemp.writepath import WritePath

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger

__all__ = ["Generations", "Leased", "Made"]

# A generation made for a lease: its id, the manager's own locks on it and on
# its work directory, and its ready event, left for the lease's append to
# commit with it.
Made = tuple[str, int, int, GenerationReady]


class Leased(NamedTuple):
    """A lease's locks on its generation and its work directory, taken and journaled (or queued)."""

    generation: str
    lease: str
    # The work directory's path: the leased directory.
    path: str
    fd: int
    work: int
    # The lease's append, still to be waited for (None when already durable).
    pending: Pending | None


class Generations:
    """The generations of manager *manager*: made, settled and removed on the file system."""

    def __init__(self, manager: str, writer: WritePath, handles: Handles, steps: Steps,
                 log: BoundLogger) -> None:
        self.manager = manager
        self.writer = writer
        self.handles = handles
        self.steps = steps
        self._log = log
        # The generation leases were last handed out on: its name and path.
        self._named: tuple[str | None, str, str] = (None, "", "")
        # What each generation's removal had to leave, as last warned of.
        self._blocked: dict[str, frozenset[Blocked]] = {}

    @property
    def root(self) -> Path:
        return self.handles.root.path

    def _unavailable(self, reason: str, fix: str) -> Unavailable:
        return Unavailable(self.root, reason, fix)

    def lease(self, label: str, unfinished: Exception | None = None) -> Leased:
        """Lock the current generation for a new lease, making it first if there is none.

        The lease's append is left for the caller to wait for when no
        generation was made (:attr:`Leased.pending`); a new generation's
        ready event is committed with it, and waited for here.
        *unfinished* says why a half-made current generation could not be
        cleared just now.
        """
        current = self.writer.me.current
        if current is not None and not self.writer.state.generations[current].ready:
            # *unfinished* says why clearing it failed just now (a full disk,
            # a busy journal): the caller's fix depends on it.
            why = "" if unfinished is None else f": {unfinished}"
            raise self._unavailable(
                f"directory {generation_name(current)} was left half made and could not be "
                f"cleared yet{why}", "Retry once the journal accepts writes again",
            ) from unfinished
        made: Made | None = None
        if current is None:
            made = self.make()
            generation = made[0]
        else:
            generation = current
        named = self._named
        if named[0] != generation:
            # Built once per generation, not per lease; a string, which
            # pathlib's interning of each name it parses never sees.
            name = generation_name(generation)
            named = self._named = (generation, name,
                                   os.path.join(self.root, name, WORK_DIR))
        name = named[1]
        lease = ids.new_lease()
        fd = work = -1
        try:
            self.steps.before("lock", name)
            # Locked before the lease is journaled: a lease in the journal
            # always has its locks, and a lock taken for a lease that could
            # not be journaled is simply closed.
            fd = lock_shared(self.handles.root.fd, name)
            if made is None:
                self._check_identity(generation, fd)
            self.steps.before("lock", f"{name}/{WORK_DIR}")
            work = lock_work(fd)
            # A usage touch: an age rule (systemd-tmpfiles, the sweep of a
            # lost journal's leftovers) then measures idleness, not age.
            os.utime(fd)
            os.utime(work)
        except BaseException as e:
            _close(work, fd)
            if made is not None:
                self.unmake(made, e)
            if isinstance(e, OSError):
                raise self.not_locked(generation, e, retire=made is None) from e
            raise
        try:
            ready = [] if made is None else [made[3]]
            pending = self.writer.append(
                *ready, LeaseAcquired(self.manager, generation, lease, label),
                wait=made is not None)
        except BaseException as e:
            _close(work, fd)
            if made is not None:
                self.unmake(made, e)
            raise
        if made is not None:
            self.handles.generations[generation] = made[1]
            self.handles.work[generation] = made[2]
            # Its ready event came just before the lease's, in one commit.  Paths
            # logged as strings: pathlib interns each component it parses, and
            # the interpreter's table of interned names would grow with the
            # generations' names.
            self._log.info("generation.created", generation=generation,
                           path=os.path.join(self.root, name), seq=self.writer.state.seq - 1)
        return Leased(generation, lease, named[2], fd, work,
                      None if made is not None else pending)

    def unmake(self, made: Made, error: BaseException) -> None:
        """Give up a generation made for a lease that could not be handed out."""
        _close(made[2], made[1])
        # An exception the process lives on from: clear the directory now.
        # Anything else (the process is going down) is left to recovery.
        if isinstance(error, Exception):
            self.abandon(made[0], f"could not be handed out: {error}")

    def _check_identity(self, generation: str, fd: int) -> None:
        """Refuse (ENOENT) a directory under *generation*'s name that is not the one made."""
        st = os.fstat(fd)
        known = self.writer.state.generations[generation]
        if (st.st_dev, st.st_ino) != (known.device, known.inode):
            raise FileNotFoundError(errno.ENOENT, "it was replaced by another directory")

    def not_locked(self, generation: str, error: OSError, *, retire: bool) -> Unavailable:
        """Why a lease's lock on *generation* could not be had.

        With *retire*, a directory gone from under its name (or replaced)
        is retired, so that the next acquire starts clean; nothing else
        says it is gone (:mod:`sessiontemp._kernel.resources`), and nothing else
        retires it.
        """
        path = os.path.join(self.root, generation_name(generation))
        if not (retire and resources.gone(error)):
            return refusal(self.root, path, error)
        self.writer.append(Rotated(self.manager))
        self.settle()
        self._log.warning("generation.vanished", generation=generation, reason=str(error))
        return self._unavailable(f"{path} is gone ({error.strerror})",
                                 "It was retired; try again")

    def make(self) -> Made:
        """Journal, make and lock a new generation and its work directory.

        Its ready event is left to the caller.
        """
        generation = ids.new_generation()
        name = generation_name(generation)
        self.writer.append(GenerationCreated(self.manager, generation))
        root_fd = self.handles.root.fd
        fd = work = -1
        try:
            self.steps.before("mkdir", name)
            os.mkdir(name, 0o700, dir_fd=root_fd)
            self.steps.before("lock", name)
            fd = lock_shared(root_fd, name)
            # mkdir's mode passes through the umask, which may take the
            # owner's own bits away; the directory must be exactly 0700.
            os.fchmod(fd, 0o700)
            st = os.fstat(fd)
            self.steps.before("lock", f"{name}/{WORK_DIR}")
            work = lock_work(fd)
        except BaseException as e:
            _close(work, fd)
            if not isinstance(e, OSError):
                raise
            self.abandon(generation, f"could not be made: {e.strerror}")
            self._log.warning("generation.failed", generation=generation, reason=str(e))
            raise self._unavailable(
                f"could not make a private directory: {e.strerror}",
                resources.fix(e) if resources.shortage(e) else
                "Free space or fix the root; no other directory will be used",
            ) from e
        return generation, fd, work, GenerationReady(self.manager, generation, st.st_dev,
                                                     st.st_ino)

    def abandon(self, generation: str, reason: str) -> Exception | None:
        """Undo a generation that never became ready; a failure is left for later, and returned."""
        try:
            self.remove(generation, reason)
        except (OSError, SessionTempError) as e:
            self._log.warning("generation.abandon_failed", generation=generation, reason=str(e))
            return e
        return None

    def settle(self) -> Exception | None:
        """Act on what the state now says, finishing work a failure left behind.

        Clears a current generation that was never made ready (its creation
        failed), removes every generation whose removal is due or was
        started, and drops the manager's locks on retired generations
        (:meth:`drop_retired`).  Never raises for a failed removal: the
        next settle, or recovery, tries again.  Returns why the current
        generation could not be cleared, if it could not.
        """
        state = self.writer.state
        me = self.writer.me
        on = me.current
        if on is not None and len(me.generations) == 1 and me.ended is None:
            live = state.generations[on]
            held = self.handles.generations
            if (live.ready and not live.retired and live.removal is None
                    and (not held or (len(held) == 1 and on in held))):
                # The case of every lease on a live generation: the one
                # generation is current and ready, so nothing is due, and the
                # one lock held is its own (taken once its creation was
                # committed, so it is not retired there either).
                return None
        unfinished = None
        if me.ended is None and me.current is not None and not state.generations[
            me.current
        ].ready:
            unfinished = self.abandon(me.current, "its creation did not finish")
        try:
            for generation in sorted(self.writer.me.generations):
                current = self.writer.state.generations[generation]
                if removal_due(current) or current.removal == "started":
                    try:
                        self.remove(generation, "retired and no lease left")
                    except (OSError, SessionTempError) as e:
                        self._log.warning("generation.removal_failed", generation=generation,
                                          reason=str(e))
        finally:
            self.drop_retired()
        return unfinished

    def drop_retired(self) -> None:
        """Drop the manager's own locks on the generations whose retirement is committed.

        Only once committed: a retirement still queued may yet fail, and the
        generation is then current again, which its lock must still say on
        disk (an age-based cleaner skips only a locked directory).
        """
        if self.handles.store is None:
            return
        committed = self.writer.durable.generations
        for generation in list(self.handles.generations):
            known = committed.get(generation)
            if known is None or known.retired:
                self.steps.before("unlock", generation_name(generation))
                self.handles.drop_generation(generation)

    def remove(self, generation: str, reason: str) -> None:
        """Remove *generation* (journaled start, rename, walk, journaled end); warn what it left."""
        target = Target.known(self.writer.state.generations[generation], by=self.manager,
                              reason=reason, root=str(self.root))
        # The manager's own lock becomes the removal's exclusive lock
        # (removal.seize): the generation keeps it until the removal's
        # start, with every event queued before it, is committed.
        held = self.handles.generations.pop(generation, None)
        # The work directory's lock goes with the generation's: closed once
        # the removal has started, kept with it when it could not start.
        work = self.handles.work.pop(generation, None)
        # Removing frees space, and must not need any: on a full disk the
        # reserve's blocks are what its journal records are written to.
        reserve.make_room(self.handles.root.fd)
        try:
            result = remove(self.handles.root.fd, target,
                            journal=lambda events: self.writer.append(*events),
                            steps=self.steps, held=held)
        finally:
            now = self.writer.state.generations.get(generation)
            kept = now is not None and now.removal is None
            if held is not None and kept:
                # The removal's start was not journaled: the lock is still
                # ours, shared again (remove() closes it only once it is).
                if self.handles.closed:
                    os.close(held)
                else:
                    self.handles.generations[generation] = held
            if work is not None:
                if kept and held is not None and not self.handles.closed:
                    self.handles.work[generation] = work
                else:
                    os.close(work)
        if result.outcome == "blocked":
            # Each obstacle is warned of once: every later operation tries
            # the removal again, and would otherwise repeat it.
            said = self._blocked.get(generation, frozenset())
            for entry in result.blocked:
                (self._log.debug if entry in said else self._log.warning)(
                    "generation.blocked", generation=generation, path=entry.path,
                    seq=self.writer.state.seq, reason=entry.reason, fix=entry.fix)
            self._blocked[generation] = frozenset(result.blocked)
            return
        self._blocked.pop(generation, None)
        log = self._log.info if result.outcome in ("removed", "absent") else self._log.warning
        log(f"generation.{result.outcome}", generation=generation,
            path=os.path.join(self.root, generation_name(generation)), seq=self.writer.state.seq,
            reason=result.detail or reason)



def _close(*fds: int) -> None:
    """Close each of *fds* that was opened (>= 0)."""
    for fd in fds:
        if fd >= 0:
            os.close(fd)
