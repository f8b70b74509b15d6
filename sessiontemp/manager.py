"""The manager: one logical session's private temporary directories.

Owners :meth:`~Manager.retain` and :meth:`~Manager.release` it; the last
release seals it for good.  :meth:`~Manager.rotate` retires the current
generation so the next command gets a fresh one.  :meth:`~Manager.acquire`
hands out a :class:`~sessiontemp.lease.Lease` on the current generation,
making it (0700, unpredictable name) when there is none.  A retired
generation is removed when its last lease goes.

Every step is committed to the journal before it touches the file system,
and what the manager knows is the reducer's state over the events it
appended: there is no second bookkeeping.  The write path of one operation
reads top to bottom: check the state, append (the reducer decides inside
the transaction, so nothing it would refuse is ever committed), apply,
act on the file system.  Whatever fails or interrupts an operation, the
manager's state is the journal's: an operation called from the main
thread runs with every signal handler deferred until it has finished
(:mod:`sessiontemp.shield`), and a failure between two steps leaves work
that the next operation, or the next recovery, finishes.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, TypeAlias, cast

import attrs

from journal import ids
from journal.errors import (
    ForkedCopy,
    JournalError,
    RuleViolation,
    SessionTempError,
    Unavailable,
    UnsafeRoot,
)
from journal.events import (
    KINDS,
    ArtifactKept,
    CommandStarted,
    Event,
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerOpened,
    Released,
    RemovalFinished,
    RemovalStarted,
    Retained,
    Rotated,
    SessionAdopted,
    SessionClaimed,
)
from journal.reducer import EMPTY, GenerationState, ManagerState, State, removal_due, replay
from journal.segments import DEFAULT_RETENTION, Retention
from journal.store import Pending, Store
from sessiontemp import artifacts, placement, processes, recovery, resources, sessions
from sessiontemp.handles import Handles
from sessiontemp.lease import Lease
from sessiontemp.locks import Liveness, hold_root, lock_shared, refusal
from sessiontemp.log import debugging, logger
from sessiontemp.removal import Blocked, Target, remove
from sessiontemp.root import Root, default_root, generation_name
from sessiontemp.shield import shielded
from sessiontemp.steps import StepHook, Steps

__all__ = ["DEFAULT_RESUME_WINDOW", "DEFAULT_STALE_AFTER", "DURABILITY", "Durability", "Manager"]

Durability: TypeAlias = Literal["full", "relaxed"]
DURABILITY: Final[tuple[Durability, ...]] = ("full", "relaxed")
# The events a file-system effect follows (a mkdir, a rename, the liveness
# file's unlink): synced before it in either mode.  A removal's end is
# synced in neither: lost, it leaves the removal started, which recovery
# finishes as it would have (and the rmdir it records is not synced either).
# An artifact's record is synced in both too: its caller is told the file is
# kept, and without the record a recovery would remove it as unreferenced.
_WRITE_AHEAD: Final = (GenerationCreated, RemovalStarted, ManagerClosed, ArtifactKept)

DEFAULT_STALE_AFTER: Final = recovery.DEFAULT_STALE_AFTER
DEFAULT_RESUME_WINDOW: Final = sessions.DEFAULT_RESUME_WINDOW
# The longest label the journal's schema accepts (journal.events decodes no longer text).
MAX_LABEL: Final = 4096

# Every manager of this process, so that a forked child can disarm its copies.
_MANAGERS: Final[weakref.WeakSet[Manager]] = weakref.WeakSet()


def _disarm_copies() -> None:
    # Takes no lock (see sessiontemp.forks): the child has one thread, and
    # any lock may have been held by one of the parent's at the fork.
    for manager in list(_MANAGERS):
        # One copy that cannot be disarmed must not leave the others armed.
        with contextlib.suppress(Exception):
            manager._handles.forget()


os.register_at_fork(after_in_child=_disarm_copies)


# Whether an append of one event of each kind is synced before it returns (see
# _WRITE_AHEAD), in full durability and in relaxed: looked up by the event's
# class (events are final classes), one dict lookup on every append.
_SYNCED: Final[dict[Durability, dict[type, bool]]] = {
    "full": {cls: issubclass(cls, _WRITE_AHEAD) or cls is not RemovalFinished
             for cls in KINDS.values()},
    "relaxed": {cls: issubclass(cls, _WRITE_AHEAD) for cls in KINDS.values()},
}


class Manager:
    """A session's private temporary directories, journaled under *root*.

    *root* None means the per-user root under the system temporary directory.
    Opening creates the root if needed, and any missing parent of it, each
    0700 whatever the umask (nothing wider is ever made); refuses an unsafe
    one (:class:`UnsafeRoot`) or one it cannot use (:class:`~sessiontemp.RootReadOnly`,
    :class:`~sessiontemp.RootUnusable`), opens ``root / "journal.sqlite3"``, runs recovery
    (removing what dead managers left, unknown entries older than
    *stale_after* seconds) and starts with zero owners: call :meth:`retain`.
    It is a context manager: leaving the block closes it.  Asyncio code
    opens it with ``await Manager.open_async(root, ...)`` and uses the
    ``*_async`` forms of its operations, which run in worker threads; ``async
    with manager:`` closes it through :meth:`close_async`.

    *durability* ``"full"`` (the default) makes every operation's events
    durable before it returns; ``"relaxed"`` syncs only the events that
    precede a file-system effect (a generation's creation before its mkdir,
    a removal's start before its rename, the manager's end before its lock
    file goes) and lets the others (leases, their release, owners,
    rotations) reach the disk with the next sync: a process crash loses
    none of them, a power loss may lose the last ones, which then describe
    leases and owners of processes that died with it (the documentation's
    "Commits and durability").

    *clock* gives the wall-clock time written into events and used for the
    stale sweep; *busy_timeout* bounds the wait for another process's journal
    write; *step_hook* sees every durable step before it happens (tests use
    it to inject failures and crashes); *retention* bounds the journal's
    disk use (:class:`journal.segments.Retention`: segment size, and the size
    and age of retired history kept).

    *session* names the logical session (1-64 characters of
    ``[A-Za-z0-9._-]``, not ``.`` or ``..``; ValueError otherwise): one live
    manager per name and root, a second is refused with
    :class:`SessionOwned` naming the owner's pid.  When a named session's
    manager dies, its current directory is kept for *resume_window* seconds
    (a day by default) from its journaled death; the next manager of that
    name adopts it, files and all, unless *resume* is False (then it is
    removed, as it is once the window has passed).  *workdir* is the
    directory sandboxed commands may write: a root inside it is refused
    (:class:`UnsafeRoot`), or with ``workdir_policy="warn"`` warned about.

    A forked child owns nothing of its parent's manager: its copy refuses
    every operation with :class:`~journal.errors.ForkedCopy`, and closing
    it does nothing.
    """

    def __init__(
        self,
        root: os.PathLike[str] | str | None = None,
        *,
        stale_after: float = DEFAULT_STALE_AFTER,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 30.0,
        step_hook: StepHook | None = None,
        durability: Durability = "full",
        retention: Retention = DEFAULT_RETENTION,
        session: str | None = None,
        resume: bool = True,
        resume_window: float = DEFAULT_RESUME_WINDOW,
        workdir: os.PathLike[str] | str | None = None,
        workdir_policy: placement.Policy = "refuse",
    ) -> None:
        recovery.check_stale_after(stale_after)
        self._retention = retention
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {', '.join(map(repr, DURABILITY))}, "
                             f"not {durability!r}")
        claim = None if session is None else sessions.Claim(sessions.check_name(session),
                                                             resume=bool(resume))
        window = sessions.check_window(resume_window)
        if workdir is not None and (root is None or os.fspath(root)):
            # Before anything is made: a refused root must not be created.
            placement.check(default_root() if root is None else root, workdir,
                            policy=workdir_policy)
        self.session = session
        self.resumed = False
        self.durability: Durability = durability
        # Which failures of the store's group commit this state has caught up with.
        self._epoch = 0
        self.id = ids.new_manager()
        self._clock = clock
        self._steps = Steps(step_hook)
        self._mutex = threading.RLock()
        self._state: State = EMPTY
        # This manager as the state last held it (see _track_me): the state
        # forgets it once it has ended and has nothing left to remove.
        self._ended: ManagerState | None = None
        # The generation leases were last handed out on: its name and path.
        self._named: tuple[str | None, str, str] = (None, "", "")
        self.recovery = recovery.Report(ran=False)
        # What each generation's removal had to leave, as last warned of.
        self._blocked: dict[str, frozenset[Blocked]] = {}
        with resources.translated(default_root() if root is None else os.path.abspath(root),
                                  "the manager could not be opened"):
            self._handles = shielded(
                lambda: self._open(root, stale_after, busy_timeout, claim, window),
                lambda handles: self.close(),
            )
        logger.debug("manager.opened", manager=self.id, path=str(self._handles.root.path))

    def _open(self, root: os.PathLike[str] | str | None, stale_after: float,
              busy_timeout: float, claim: sessions.Claim | None, window: float) -> Handles:
        handles = Handles(Root.open(root))
        # Set at once: whatever fails below, close_all() gives back what was had;
        # and a child forked from now on (by another thread) disarms its copies.
        self._handles = handles
        _MANAGERS.add(self)
        try:
            if claim is not None:
                # First: refused at once while another manager owns the name.
                handles.session = sessions.SessionLock.take(handles.root, claim.name)
            handles.root.check_journal()
            handles.store = Store(handles.root.journal_path, busy_timeout=busy_timeout,
                                  retention=self._retention, step_hook=self._steps.before)
            handles.store.reset_tip(self._state)
            # Checkpoints, rollover and retirement for a manager that lives long.
            handles.store.maintenance = functools.partial(
                recovery.maintain, handles.root, handles.store, clock=self._clock,
                steps=self._steps)
            self.recovery = recovery.run(
                handles.root, handles.store, stale_after=stale_after, clock=self._clock,
                steps=self._steps,
                # A claimer must know how its last owner ended: it waits for its pass.
                wait=claim is not None, claim=claim,
            )
            # Keeps an age-based cleaner (systemd-tmpfiles) out of the whole
            # root, journal and lock files included, while the manager lives.
            if not hold_root(handles.root.fd, patience=busy_timeout):
                logger.warning("root.unlocked", manager=self.id, path=str(handles.root.path),
                               reason="another process holds the root's exclusive lock")
            # The liveness lock is taken before the journal names this
            # manager, so a recovery that sees the name finds the lock.
            self._steps.before("lock", f"manager {self.id}")
            handles.liveness = Liveness(handles.root.managers_fd, self.id)
            if claim is None:
                self._append(ManagerOpened(self.id, os.getpid()))
            else:
                self._claim(claim, window)
        except BaseException:
            if handles.liveness is not None and (
                handles.store is None or handles.store.broken is None
            ):
                # Never journaled: nobody will look for the file.
                handles.liveness.unlink()
            handles.close_all()
            raise
        return handles

    def _claim(self, claim: sessions.Claim, window: float) -> None:
        """Journal this manager's birth as the owner of *claim*'s session, adopting what it can.

        What the last owner left is adopted (a resume) when the recovery
        pass kept it for this claim; its events and this manager's own fold
        from the part of the journal's state they name.
        """
        found = self.recovery.resumable
        if found is not None:
            self._state = found.seed()
            store = self._handles.store
            assert store is not None
            # The store folds this manager's appends from its own copy of the state.
            store.reset_tip(self._state)
        events: list[Event] = [ManagerOpened(self.id, os.getpid()),
                               SessionClaimed(self.id, claim.name, round(window * 1000))]
        taken = None
        if (claim.resume and found is not None and found.generation is not None
                and found.owner is not None):
            taken = self._take_over(found.generation)
            if taken is not None:
                events.append(SessionAdopted(self.id, claim.name, found.generation.id,
                                             found.owner.id))
        try:
            self._append(*events)
        except BaseException:
            if taken is not None:
                os.close(taken)
            raise
        if (taken is not None and found is not None and found.generation is not None
                and found.owner is not None):
            self._handles.generations[found.generation.id] = taken
            self.resumed = True
            logger.info("session.resumed", manager=self.id, session=claim.name,
                        generation=found.generation.id, previous=found.owner.id,
                        path=os.path.join(self.root, generation_name(found.generation.id)),
                        seq=self._state.seq)

    def _take_over(self, generation: GenerationState) -> int | None:
        """Lock the directory a dead owner left, as its new manager; None if it cannot be.

        Locked before the adoption is journaled, like a new generation: a
        remover that seized it first makes this fail, and one that comes
        after finds it held.
        """
        name = generation_name(generation.id)
        try:
            self._steps.before("lock", name)
            fd = lock_shared(self._handles.root.fd, name)
        except OSError as e:
            if not resources.gone(e):
                # No sign that it is gone (a shortage, or a lock held longer
                # than a probe's): the claim fails and nothing is discarded,
                # so that the next claim can still resume it.
                raise self._not_locked(generation.id, e, retire=False) from e
            logger.warning("session.not_resumed", manager=self.id, generation=generation.id,
                           reason=f"{name} could not be locked ({e.strerror})")
            return None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (generation.device, generation.inode):
                logger.warning("session.not_resumed", manager=self.id,
                               generation=generation.id,
                               reason=f"{name} was replaced by another directory")
                os.close(fd)
                return None
            # A usage touch: an age-based cleaner sees it in use from now on.
            os.utime(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- what the journal says -------------------------------------------------

    @property
    def root(self) -> Path:
        """The root directory this manager's journal and generations live in."""
        return self._handles.root.path

    @property
    def state(self) -> State:
        """The reducer's state over the events this manager appended.

        A named session's manager starts from the part of the journal's state
        its claim names: the session, its last owner and what that left.
        """
        return self._state

    @property
    def _me(self) -> ManagerState:
        me = self._state.managers.get(self.id, self._ended)
        assert me is not None, "a manager's state holds it from its first event on"
        return me

    @property
    def sealed(self) -> bool:
        """Whether the last owner has released the manager: it hands out no more leases."""
        return self._me.sealed

    @property
    def owners(self) -> int:
        """How many owners hold the manager (retains not yet released)."""
        return self._me.owners

    @property
    def closed(self) -> bool:
        """Whether the manager has ended: closed, or let go of its handles after a failure."""
        return self._handles.closed or self._me.ended is not None

    @property
    def current_dir(self) -> Path | None:
        """The current generation's directory, without taking a lease; None if none is made."""
        # One state, read once: no mutex, which a forked child's copy could
        # find held by a thread of its parent.
        state = self._state
        me = state.managers.get(self.id, self._ended)
        current = None if me is None else me.current
        if current is None or not state.generations[current].ready:
            return None
        return self.root / generation_name(current)

    def __repr__(self) -> str:
        me = self._me
        named = "" if self.session is None else f" session={self.session!r}"
        return (f"<Manager {self.id} at {self.root}{named} owners={me.owners} "
                f"sealed={me.sealed} closed={self.closed}>")

    # -- owners ----------------------------------------------------------------

    def retain(self) -> None:
        """Add an owner.  On a sealed manager this changes nothing: it stays sealed."""
        self._operate(lambda: self._append(Retained(self.id), wait=False))

    def release(self) -> None:
        """Drop an owner.  The last one seals the manager and retires its generation."""
        self._operate(lambda: self._append(Released(self.id), wait=False))

    def rotate(self) -> None:
        """Retire the current generation; the next acquire gets a fresh directory.

        Commands holding leases on the old one keep it until they release.
        Does nothing on a sealed manager.
        """
        self._operate(lambda: self._append(Rotated(self.id), wait=False))

    def _operate(self, change: Callable[[], Pending]) -> None:
        """Run one owner operation: nothing once closed, then settle what it changed.

        The change is waited for after settling, so that a removal it makes
        due is journaled in the same commit (its start must be durable
        before the rename, and makes the change durable with it).
        """
        self._refuse_forked()

        def operation() -> None:
            with self._mutex:
                if self.closed:
                    return
                self._keep_alive()
                pending = change()
                try:
                    self._settle()
                finally:
                    try:
                        self._wait(pending)
                    finally:
                        # Committed only now (or failed): the locks on what
                        # it did retire can go.
                        self._drop_retired()

        shielded(operation)

    # -- leases ----------------------------------------------------------------

    def acquire(self, *, label: str = "") -> Lease:
        """Lease the current generation, making it first if there is none.

        *label* says, for people reading the journal, what the lease is for
        (a command line, a test's name).  Raises :class:`Unavailable` when
        the manager is sealed, closed or has no owner, or when the directory
        cannot be made or the journal cannot record it.  Never falls back
        to any other directory.  A label longer than 4096 characters (what
        the journal's schema accepts) is refused with ValueError.
        """
        if len(label) > MAX_LABEL:
            raise ValueError(f"a lease label holds at most {MAX_LABEL} characters, not "
                             f"{len(label)}; shorten it")
        self._refuse_forked()
        return shielded(functools.partial(self._acquire, label), Lease.release)

    def _acquire(self, label: str) -> Lease:
        lease, pending = self._acquire_locked(label)
        if pending is None:
            return lease
        # A lease on a live generation: waited for without the mutex, so
        # that other threads' appends join its commit.
        try:
            self._wait(pending)
        except (JournalError, RuleViolation) as e:
            with self._mutex:
                self._handles.leases.pop(lease.id, None)
                lease._drop_lock()
            raise self._unavailable(f"the journal could not record the lease: {e}",
                                    "No directory was handed out; retry once fixed") from e
        return lease

    def _acquire_locked(self, label: str) -> tuple[Lease, Pending | None]:
        with self._mutex:
            me = self._me
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
                self._keep_alive()
                # Work a failure left (a directory half made, a removal due)
                # is finished before anything new begins.
                unfinished = self._settle()
                return self._lease(label, unfinished)
            except (JournalError, RuleViolation) as e:
                raise self._unavailable(f"the journal could not record the lease: {e}",
                                        "No directory was handed out; retry once fixed") from e

    def _lease(self, label: str, unfinished: Exception | None = None
               ) -> tuple[Lease, Pending | None]:
        """Hand out a lease; its append is left to wait for when no generation was made."""
        current = self._me.current
        if current is not None and not self._state.generations[current].ready:
            # *unfinished* says why clearing it failed just now (a full disk,
            # a busy journal): the caller's fix depends on it.
            why = "" if unfinished is None else f": {unfinished}"
            raise self._unavailable(
                f"directory {generation_name(current)} was left half made and could not be "
                f"cleared yet{why}", "Retry once the journal accepts writes again",
            ) from unfinished
        made: tuple[str, int, GenerationReady] | None = None
        if current is None:
            made = self._make_generation()
            generation = made[0]
        else:
            generation = current
        named = self._named
        if named[0] != generation:
            # Built once per generation, not per lease; a string, which
            # pathlib's interning of each name it parses never sees.
            name = generation_name(generation)
            named = self._named = (generation, name, os.path.join(self.root, name))
        name = named[1]
        lease = ids.new_lease()
        try:
            self._steps.before("lock", name)
            # Locked before the lease is journaled: a lease in the journal
            # always has its lock, and a lock taken for a lease that could
            # not be journaled is simply closed.
            fd = lock_shared(self._handles.root.fd, name)
            if made is None:
                self._check_identity(generation, fd)
            # A usage touch: an age rule (systemd-tmpfiles, the sweep of a
            # lost journal's leftovers) then measures idleness, not age.
            os.utime(fd)
        except BaseException as e:
            if made is not None:
                self._unmake(made, e)
            if isinstance(e, OSError):
                raise self._not_locked(generation, e, retire=made is None) from e
            raise
        try:
            ready = [] if made is None else [made[2]]
            pending = self._append(*ready, LeaseAcquired(self.id, generation, lease, label),
                                   wait=made is not None)
        except BaseException as e:
            os.close(fd)
            if made is not None:
                self._unmake(made, e)
            raise
        if made is not None:
            self._handles.generations[generation] = made[1]
            # Its ready event came just before the lease's, in one commit.  Paths
            # logged as strings: pathlib interns each component it parses, and
            # the interpreter's table of interned names would grow with the
            # generations' names.
            logger.info("generation.created", manager=self.id, generation=generation,
                        path=os.path.join(self.root, name), seq=self._state.seq - 1)
        held = Lease(self, generation, lease, named[2], fd, label=label)
        self._handles.leases[lease] = held
        if debugging():
            logger.debug("lease.acquired", manager=self.id, generation=generation, lease=lease,
                         seq=self._state.seq)
        return held, None if made is not None else pending

    def _unmake(self, made: tuple[str, int, GenerationReady], error: BaseException) -> None:
        """Give up a generation made for a lease that could not be handed out."""
        os.close(made[1])
        # An exception the process lives on from: clear the directory now.
        # Anything else (the process is going down) is left to recovery.
        if isinstance(error, Exception):
            self._abandon(made[0], f"could not be handed out: {error}")

    def _check_identity(self, generation: str, fd: int) -> None:
        """Refuse (ENOENT) a directory under *generation*'s name that is not the one made."""
        st = os.fstat(fd)
        known = self._state.generations[generation]
        if (st.st_dev, st.st_ino) != (known.device, known.inode):
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "it was replaced by another directory")

    def _not_locked(self, generation: str, error: OSError, *, retire: bool) -> Unavailable:
        """Why a lease's lock on *generation* could not be had.

        With *retire*, a directory gone from under its name (or replaced)
        is retired, so that the next acquire starts clean; nothing else
        says it is gone (:mod:`sessiontemp.resources`), and nothing else
        retires it.
        """
        path = os.path.join(self.root, generation_name(generation))
        if not (retire and resources.gone(error)):
            return refusal(self.root, path, error)
        self._append(Rotated(self.id))
        self._settle()
        logger.warning("generation.vanished", manager=self.id, generation=generation,
                       reason=str(error))
        return self._unavailable(f"{path} is gone ({error.strerror})",
                                 "It was retired; try again")

    def _make_generation(self) -> tuple[str, int, GenerationReady]:
        """Journal, make and lock a new generation; its ready event is left to the caller."""
        generation = ids.new_generation()
        name = generation_name(generation)
        self._append(GenerationCreated(self.id, generation))
        root_fd = self._handles.root.fd
        fd = -1
        try:
            self._steps.before("mkdir", name)
            os.mkdir(name, 0o700, dir_fd=root_fd)
            self._steps.before("lock", name)
            fd = lock_shared(root_fd, name)
            # mkdir's mode passes through the umask, which may take the
            # owner's own bits away; the directory must be exactly 0700.
            os.fchmod(fd, 0o700)
            st = os.fstat(fd)
        except BaseException as e:
            if fd >= 0:
                os.close(fd)
            if not isinstance(e, OSError):
                raise
            self._abandon(generation, f"could not be made: {e.strerror}")
            logger.warning("generation.failed", manager=self.id, generation=generation,
                           reason=str(e))
            raise self._unavailable(
                f"could not make a private directory: {e.strerror}",
                resources.fix(e) if resources.shortage(e) else
                "Free space or fix the root; no other directory will be used",
            ) from e
        return generation, fd, GenerationReady(self.id, generation, st.st_dev, st.st_ino)

    def _abandon(self, generation: str, reason: str) -> Exception | None:
        """Undo a generation that never became ready; a failure is left for later, and returned."""
        try:
            self._remove(generation, reason)
        except (OSError, SessionTempError) as e:
            logger.warning("generation.abandon_failed", manager=self.id,
                           generation=generation, reason=str(e))
            return e
        return None

    def _release_lease(self, lease: Lease) -> None:
        if self._handles.forked:
            lease._drop_copy()
            return

        def failed(e: JournalError) -> None:
            # Keep the lock: without a journaled release the directory
            # must stay; a later release() tries again, and the next
            # recovery after this manager ends sees the lease as void.
            logger.error("lease.release_failed", manager=self.id, lease=lease.id,
                         reason=str(e))

        def released() -> None:
            lease._drop_lock()
            self._handles.leases.pop(lease.id, None)
            if self._handles.closed:
                return
            if debugging():
                logger.debug("lease.released", manager=self.id, generation=lease.generation,
                             lease=lease.id, seq=self._state.seq)
            self._settle()

        def operation() -> None:
            with self._mutex:
                if not self._holds(lease):
                    lease._drop_lock()
                    return
                try:
                    pending = self._append(LeaseReleased(self.id, lease.generation, lease.id),
                                           wait=False)
                    if self._state.generations[lease.generation].retired:
                        # Its removal may follow: everything under the mutex.
                        self._wait(pending)
                        released()
                        return
                except JournalError as e:
                    failed(e)
                    return
            # A release from a live generation: waited for without the
            # mutex, so that other threads' appends join its commit; the
            # lock goes only once the release is durable.
            try:
                self._wait(pending)
            except JournalError as e:
                failed(e)
                return
            with self._mutex:
                released()

        shielded(operation)

    def _keep(self, lease: Lease, path: os.PathLike[str] | str, label: str) -> artifacts.Artifact:
        """Copy *path* from *lease*'s directory into the artifact store, and journal it."""
        artifacts.check_label(label)
        parts = artifacts.source_parts(lease.path, path)
        self._refuse_forked()

        def operation() -> artifacts.Artifact:
            with self._mutex:
                fd = lease._fd
                if not self._holds(lease) or fd is None:
                    raise Unavailable(lease.path, f"lease {lease.id} was already released",
                                      "Keep files while the lease is held")
                artifact = ids.new_artifact()
                with resources.translated(lease.path, f"{path} could not be kept"):
                    copy = artifacts.copy_in(self._handles.root, fd, parts, artifact, label,
                                             steps=self._steps)
                try:
                    self._append(ArtifactKept(self.id, artifact, label, copy.sha256, copy.size))
                except BaseException:
                    store = self._handles.store
                    if store is not None and store.broken is not None:
                        # Its record may have been committed: leave the file;
                        # if it was not, recovery finds it unreferenced.
                        copy.done()
                    else:
                        copy.discard()
                    raise
                copy.done()
                kept = artifacts.artifact_of(self.root, self._state.artifacts[artifact])
                logger.info("artifact.kept", manager=self.id, lease=lease.id,
                            path=str(kept.path), seq=self._state.seq)
                return kept

        return shielded(operation)

    def _track(self, lease: Lease, pid: int) -> bool:
        """Journal that *pid* was started on *lease*; False when it cannot be recorded."""
        if self._handles.forked:
            return False
        started = processes.start_time(pid)
        if started is None:
            return False

        def operation() -> bool:
            with self._mutex:
                if not self._holds(lease):
                    return False
                try:
                    self._append(CommandStarted(self.id, lease.generation, lease.id, pid,
                                                started))
                except JournalError as e:
                    # The lock the command inherited still protects it.
                    logger.warning("command.untracked", manager=self.id, lease=lease.id,
                                   pid=pid, reason=str(e))
                    return False
                return True

        return shielded(operation)

    # -- the end -----------------------------------------------------------------

    def close(self) -> None:
        """Seal the manager and give up its journal connection and locks.

        Generations no command holds are removed now; one still held by a
        command started with :meth:`Lease.popen` stays until that command
        exits and a later recovery removes it.  Leases not yet released
        become void: their ``release()`` does nothing.  Idempotent.

        When the end cannot be journaled (a full disk, a journal locked
        for too long), every lock is given up all the same and the
        liveness lock file is left: the next recovery then finds the
        manager dead and removes what it left.
        """
        if self._handles.forked:
            return
        shielded(self._close)

    def _close(self) -> None:
        with self._mutex:
            handles = self._handles
            if handles.closed:
                return
            journaled = self._me.ended is not None
            if not journaled:
                try:
                    self._append(ManagerClosed(self.id))
                    journaled = True
                except (JournalError, RuleViolation) as e:
                    # The journal cannot say this manager ended (a full disk,
                    # a lock held too long, a record the rules refused): it
                    # lets go of everything below as a dead process would.
                    logger.error("manager.close_failed", manager=self.id, reason=str(e))
                except BaseException:
                    # Whatever else stops it (a bug, a step hook's fault),
                    # nothing was journaled, so nothing holds this manager's
                    # locks for it any more: the caller still learns why.
                    handles.close_all()
                    raise
            for lease in list(handles.leases.values()):
                lease._drop_lock()
            handles.leases.clear()
            if journaled:
                self._settle()
            self._steps.before("unlock", f"manager {self.id}")
            # The lock file goes first: once the lock is free, a recovery
            # may take it and would otherwise race our unlink.  Only with
            # the end journaled: without it, the file is how a recovery
            # finds this manager dead.
            if journaled and handles.liveness is not None:
                handles.liveness.unlink()
            handles.close_all()
        logger.debug("manager.closed", manager=self.id)

    def __del__(self) -> None:
        # Dropped unclosed, as an unclosed file is: its locks are given up
        # as a killed process's are, so that the next recovery, in this
        # process or another, finds it dead and removes what it held.  It
        # journals nothing and unlinks nothing: a finalizer runs in any
        # thread, at any point of it, and at the interpreter's exit.
        handles: Handles | None = self.__dict__.get("_handles")
        if handles is None or handles.closed or handles.forked or sys.is_finalizing():
            return
        handles.abandon()
        warnings.warn(f"unclosed manager {self.id} on {handles.root.path}: its locks are "
                      "given up, and the next recovery removes what it held", ResourceWarning,
                      source=self, stacklevel=1)

    def __enter__(self) -> Manager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the write path ------------------------------------------------------------

    def _append(self, *events: Event, wait: bool = True) -> Pending:
        """Queue *events* for the journal's next group commit; with *wait*, until durable.

        The reducer decides first, on the state including every append
        still queued (an event it refuses raises, and nothing is queued),
        and the manager's state becomes that speculative state at once:
        the next operation builds on it.  Inside the transaction the store
        checks that the appends before committed as folded, and folds again
        otherwise.  When an append fails, the state falls back to what is
        durable (:meth:`_resync`).  Without *wait* the caller must
        :meth:`_wait` before any effect the events must precede, or before
        it returns; a caller holding ``_mutex`` may wait outside it, so that
        other threads' appends join the same commit.
        """
        if self._steps.hook is not None:
            # Only then: the detail is built for the hook alone.
            self._steps.before("journal", ",".join(e.kind for e in events))
        store = self._handles.store
        assert store is not None
        if store.epoch != self._epoch:
            self._resync(store)
        synced = _SYNCED[self.durability]
        durable = synced[type(events[0])] if len(events) == 1 else any(
            synced[type(event)] for event in events)
        try:
            pending = store.submit(events, time=self._clock(), durable=durable, fold=replay,
                                   base=self._state)
        except JournalError:
            if store.broken is not None:
                self._break(store.broken)
            raise
        self._state = pending.speculative
        self._track_me()
        if wait:
            self._wait(pending)
        return pending

    def _wait(self, pending: Pending) -> None:
        """Return once *pending* is durable; on failure, fall back to the durable state.

        Called with ``_mutex`` held, or without it (it is then taken to
        catch up with a failure).
        """
        store = self._handles.store
        assert store is not None
        try:
            store.wait(pending)
        except (JournalError, RuleViolation):
            with self._mutex:
                if store.broken is not None:
                    self._break(store.broken)
                self._resync(store)
            raise
        if store.epoch != self._epoch:
            with self._mutex:
                self._resync(store)

    def _resync(self, store: Store) -> None:
        """Catch up with the store after an append was folded again or failed.

        Once nothing of this manager's is queued, the store's folded state
        is what the journal holds.  The caller holds ``_mutex``.
        """
        store.drain()
        self._epoch = store.epoch
        self._state = cast(State, store.tip)
        self._track_me()

    def _track_me(self) -> None:
        """Remember this manager as the state last held it, or as it ended once let go of.

        The state forgets a manager once it has ended with nothing left to
        remove (see :mod:`journal.reducer`); only its own close ends it here.
        """
        me = self._state.managers.get(self.id)
        if me is not None:
            self._ended = me
        elif self._ended is not None:
            # Let go of: it ended, and the last of its generations is removed.
            self._ended = attrs.evolve(self._ended, sealed=True, current=None,
                                       generations=frozenset(),
                                       ended=self._ended.ended or "closed",
                                       ended_by=self._ended.ended_by or self.id)

    def _break(self, reason: str) -> None:
        """Stop: the journal cannot be trusted to say what this manager did.

        Every handle is let go as if the process had died, so a recovery
        finds the manager dead and finishes its work from the journal.
        """
        logger.error("manager.broken", manager=self.id, reason=reason)
        self._handles.close_all()

    def _settle(self) -> Exception | None:
        """Act on what the state now says, finishing work a failure left behind.

        Clears a current generation that was never made ready (its creation
        failed), removes every generation whose removal is due or was
        started, and drops the manager's locks on retired generations
        (:meth:`_drop_retired`).  Never raises for a failed removal: the
        next settle, or recovery, tries again.  Returns why the current
        generation could not be cleared, if it could not.
        """
        state = self._state
        me = self._me
        on = me.current
        if on is not None and len(me.generations) == 1 and me.ended is None:
            live = state.generations[on]
            held = self._handles.generations
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
            unfinished = self._abandon(me.current, "its creation did not finish")
        try:
            for generation in sorted(self._me.generations):
                current = self._state.generations[generation]
                if removal_due(current) or current.removal == "started":
                    try:
                        self._remove(generation, "retired and no lease left")
                    except (OSError, SessionTempError) as e:
                        logger.warning("generation.removal_failed", manager=self.id,
                                       generation=generation, reason=str(e))
        finally:
            self._drop_retired()
        return unfinished

    def _drop_retired(self) -> None:
        """Drop the manager's own locks on the generations whose retirement is committed.

        Only once committed: a retirement still queued may yet fail, and the
        generation is then current again, which its lock must still say on
        disk (an age-based cleaner skips only a locked directory).
        """
        store = self._handles.store
        if store is None:
            return
        committed = cast(State, store.durable_tip).generations
        for generation in list(self._handles.generations):
            known = committed.get(generation)
            if known is None or known.retired:
                self._steps.before("unlock", generation_name(generation))
                self._handles.drop_generation(generation)

    def _remove(self, generation: str, reason: str) -> None:
        target = Target.known(self._state.generations[generation], by=self.id, reason=reason,
                              root=str(self.root))
        # The manager's own lock becomes the removal's exclusive lock
        # (removal.seize): the generation keeps it until the removal's
        # start, with every event queued before it, is committed.
        held = self._handles.generations.pop(generation, None)
        try:
            result = remove(self._handles.root.fd, target, journal=lambda events: self._append(
                *events), steps=self._steps, held=held)
        finally:
            now = self._state.generations.get(generation)
            if held is not None and now is not None and now.removal is None:
                # The removal's start was not journaled: the lock is still
                # ours, shared again (remove() closes it only once it is).
                if self._handles.closed:
                    os.close(held)
                else:
                    self._handles.generations[generation] = held
        if result.outcome == "blocked":
            # Each obstacle is warned of once: every later operation tries
            # the removal again, and would otherwise repeat it.
            said = self._blocked.get(generation, frozenset())
            for entry in result.blocked:
                (logger.debug if entry in said else logger.warning)(
                    "generation.blocked", manager=self.id, generation=generation,
                    path=entry.path, seq=self._state.seq, reason=entry.reason, fix=entry.fix)
            self._blocked[generation] = frozenset(result.blocked)
            return
        self._blocked.pop(generation, None)
        log = logger.info if result.outcome in ("removed", "absent") else logger.warning
        log(f"generation.{result.outcome}", manager=self.id, generation=generation,
            path=os.path.join(self.root, generation_name(generation)), seq=self._state.seq,
            reason=result.detail or reason)

    # -- guards --------------------------------------------------------------------

    def _holds(self, lease: Lease) -> bool:
        """Whether the journal still has *lease* held by this open manager."""
        generation = self._state.generations.get(lease.generation)
        return generation is not None and lease.id in generation.leases and not self.closed

    def _keep_alive(self) -> None:
        """Put the liveness lock file back if something deleted it meanwhile."""
        liveness = self._handles.liveness
        if liveness is None or liveness.untouched():
            # One fstat of the held descriptor on every operation; the
            # lookups by name only once something touched the file.
            return
        root = self._handles.root
        try:
            if root.managers_removed():
                # The whole directory went (``rm -r``): its lock file cannot be
                # put back into a removed directory, so the directory comes first.
                root.reopen_managers()
                liveness.moved(root.managers_fd)
            if liveness.check():
                logger.warning("manager.lock_recreated", manager=self.id,
                               path=str(self._handles.root.manager_lock_path(self.id)))
        except OSError as e:
            if not resources.shortage(e):
                raise
            # Put back by the next operation: meanwhile a recovery finds no
            # lock file and leaves this manager alone, as it must.
            logger.warning("manager.lock_not_recreated", manager=self.id, reason=str(e))

    def _refuse_forked(self) -> None:
        if self._handles.forked:
            raise ForkedCopy(
                self.root, f"manager {self.id} belongs to process {self._handles.pid}; this "
                f"is a forked copy in process {os.getpid()}",
                "Open a new Manager in the child, or start children with lease.popen",
            )

    def _unavailable(self, reason: str, fix: str) -> Unavailable:
        return Unavailable(self.root, reason, fix)

    # -- asyncio ---------------------------------------------------------------------
    # Each runs its blocking work in a worker thread (sessiontemp.aio, which
    # loads asyncio: imported by the first await, never by this module).

    @classmethod
    async def open_async(cls, root: os.PathLike[str] | str | None = None,
                         **options: Any) -> Manager:
        """Open a manager, as ``Manager(root, **options)`` does, in a worker thread.

        Takes the same options; the root's creation, the journal's opening
        and the recovery pass all run off the event loop.  When the awaiting
        task is cancelled, the open under way still finishes, and the
        manager it made is let go of before the cancellation is raised:
        closed, or, when it resumed a named session, given up as a dead
        process's is, so that the session's next owner resumes it instead.
        """
        from sessiontemp import aio

        return await aio.open_manager(cls, root, options)

    async def retain_async(self) -> None:
        """:meth:`retain` in a worker thread; cancelled meanwhile, it still retains, then raises."""
        from sessiontemp import aio

        await aio.complete(self.retain)

    async def release_async(self) -> None:
        """:meth:`release` in a worker thread; cancelled meanwhile, it still releases, then raises.

        A last release removes the generation no lease holds before it returns.
        """
        from sessiontemp import aio

        await aio.complete(self.release)

    async def rotate_async(self) -> None:
        """:meth:`rotate` in a worker thread; cancelled meanwhile, it still rotates, then raises.

        The retired generation, if no lease holds it, is removed before it returns.
        """
        from sessiontemp import aio

        await aio.complete(self.rotate)

    async def close_async(self) -> None:
        """:meth:`close` in a worker thread; cancelled meanwhile, it still closes, then raises."""
        from sessiontemp import aio

        await aio.complete(self.close)

    async def __aenter__(self) -> Manager:
        """``async with manager:`` does nothing on entry (the manager is open already).

        Open it with ``async with await Manager.open_async(root) as manager:``;
        leaving the block closes it through :meth:`close_async`, even when
        the task is cancelled inside it.
        """
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close_async()

    async def acquire_async(self, *, label: str = "") -> Lease:
        """:meth:`acquire` for asyncio code: it runs in a worker thread, never on the loop.

        The lease is an async context manager (``async with lease:``
        releases it, in a worker thread too).  When the awaiting task is
        cancelled, the acquire under way still finishes and its lease is
        released before the cancellation is raised: none leaks.
        """
        from sessiontemp import aio

        return await aio.acquire(functools.partial(self.acquire, label=label))
