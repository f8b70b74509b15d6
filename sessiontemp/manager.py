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
reads top to bottom: check the state, append, apply, act on the file system.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from journal.errors import JournalError, SessionTempError, Unavailable, UnsafeRoot
from journal.events import (
    Event,
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerOpened,
    Released,
    Retained,
    Rotated,
)
from journal.reducer import EMPTY, ManagerState, State, apply, removal_due
from journal.store import Store
from sessiontemp import recovery
from sessiontemp.lease import Lease
from sessiontemp.locks import hold_manager, lock_shared
from sessiontemp.log import logger
from sessiontemp.removal import remove_generation
from sessiontemp.root import MANAGERS_DIR, Root, generation_name, new_generation_id
from sessiontemp.steps import StepHook, Steps

__all__ = ["Manager"]

DEFAULT_STALE_AFTER = 86400.0


class Manager:
    """A session's private temporary directories, journaled under *root*.

    *root* None means the per-user root under the system temporary directory.
    Opening creates the root (0700) if needed, refuses an unsafe one
    (:class:`UnsafeRoot`), opens ``root / "journal.sqlite3"``, runs recovery
    (removing what dead managers left, unknown entries older than
    *stale_after* seconds) and starts with zero owners: call :meth:`retain`.

    *clock* gives the wall-clock time written into events and used for the
    stale sweep; *busy_timeout* bounds the wait for another process's journal
    write; *step_hook* sees every durable step before it happens (tests use
    it to inject failures and crashes).
    """

    def __init__(
        self,
        root: os.PathLike[str] | str | None = None,
        *,
        stale_after: float = DEFAULT_STALE_AFTER,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 30.0,
        step_hook: StepHook | None = None,
    ) -> None:
        if stale_after < 0:
            raise ValueError(f"stale_after must be >= 0 seconds, not {stale_after!r}")
        self.id = uuid.uuid4().hex
        self._clock = clock
        self._steps = Steps(step_hook)
        self._mutex = threading.RLock()
        self._state: State = EMPTY
        self._closed = False
        # Operating-system handles, not lifecycle state: the manager's own
        # shared lock on each generation it keeps alive, and the open leases
        # whose descriptors close() must give up.
        self._generation_fds: dict[str, int] = {}
        self._leases: dict[str, Lease] = {}
        self._root = Root.open(root)
        try:
            self._root.check_journal()
            self._store = Store(self._root.journal_path, busy_timeout=busy_timeout)
            try:
                self.recovery = recovery.run(
                    self._root, self._store, stale_after=stale_after, clock=clock,
                    steps=self._steps, wait=False,
                )
                # The liveness lock is taken before the journal names this
                # manager, so a recovery that sees the name finds the lock.
                self._steps.before("lock", f"manager {self.id}")
                # The liveness lock file is opened by path, through the root's name.
                self._root.check_identity()
                self._liveness = hold_manager(self._root.manager_lock_path(self.id))
                try:
                    self._append(ManagerOpened(self.id, os.getpid()))
                except BaseException:
                    self._liveness.release()
                    raise
            except BaseException:
                self._store.close()
                raise
        except BaseException:
            self._root.close()
            raise
        logger.debug("manager.opened", manager=self.id, path=str(self._root.path))

    # -- what the journal says -------------------------------------------------

    @property
    def root(self) -> Path:
        """The root directory holding the journal and the generation directories."""
        return self._root.path

    @property
    def state(self) -> State:
        """The reducer's state over the events this manager appended."""
        return self._state

    @property
    def _me(self) -> ManagerState:
        return self._state.managers[self.id]

    @property
    def sealed(self) -> bool:
        """True once the last owner released: no new lease is ever handed out again."""
        return self._me.sealed

    @property
    def owners(self) -> int:
        """How many owners hold the session now (retains not yet released)."""
        return self._me.owners

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: the journal and the liveness lock are given up."""
        return self._closed

    @property
    def current_dir(self) -> Path | None:
        """The current generation's directory, without taking a lease; None if none is made."""
        with self._mutex:
            current = self._me.current
            if current is None or not self._state.generations[current].ready:
                return None
            return self._root.path / generation_name(current)

    def __repr__(self) -> str:
        me = self._me
        return (f"<Manager {self.id} at {self._root.path} owners={me.owners} "
                f"sealed={me.sealed} closed={self._closed}>")

    # -- owners ----------------------------------------------------------------

    def retain(self) -> None:
        """Add an owner.  On a sealed manager this changes nothing: it stays sealed."""
        with self._mutex:
            if self._closed:
                return
            self._append(Retained(self.id))
            self._settle()

    def release(self) -> None:
        """Drop an owner.  The last one seals the manager and retires its generation."""
        with self._mutex:
            if self._closed:
                return
            self._append(Released(self.id))
            self._settle()

    def rotate(self) -> None:
        """Retire the current generation; the next acquire gets a fresh directory.

        Commands holding leases on the old one keep it until they release.
        Does nothing on a sealed manager.
        """
        with self._mutex:
            if self._closed:
                return
            self._append(Rotated(self.id))
            self._settle()

    # -- leases ----------------------------------------------------------------

    def acquire(self) -> Lease:
        """Lease the current generation, making it first if there is none.

        Raises :class:`Unavailable` when the manager is sealed, closed or has
        no owner, or when the directory cannot be made or the journal cannot
        record it.  Never falls back to any other directory.
        """
        with self._mutex:
            if self._closed:
                raise Unavailable(f"manager {self.id} is closed; open a new Manager")
            me = self._me
            if me.sealed:
                raise Unavailable(f"manager {self.id} is sealed: its last owner released it. "
                                  "Open a new Manager for a new session")
            if me.owners == 0:
                raise Unavailable(f"manager {self.id} has no owner; call retain() first")
            try:
                # The lease hands out a path through the root's name: it must
                # still name the directory the generation is made in.
                self._root.check_identity()
            except UnsafeRoot as e:
                raise Unavailable(f"no lease: {e}") from e
            try:
                self._settle()
                return self._lease()
            except JournalError as e:
                raise Unavailable(f"the journal could not record the lease: {e}") from e

    def _lease(self) -> Lease:
        generation = self._me.current or self._make_generation()
        name = generation_name(generation)
        lease = secrets.token_hex(8)
        self._append(LeaseAcquired(self.id, generation, lease))
        try:
            self._steps.before("lock", name)
            fd = lock_shared(self._root.fd, name)
        except OSError as e:
            # The journal says leased, the directory says otherwise: take the
            # lease back and retire the generation so the next acquire starts
            # clean.
            self._append(LeaseReleased(self.id, generation, lease))
            self._append(Rotated(self.id))
            self._settle()
            logger.warning("generation.vanished", manager=self.id, generation=generation,
                           reason=str(e))
            raise Unavailable(f"{self._root.path / name} could not be locked ({e.strerror}); "
                              "it was retired, try again") from e
        held = Lease(self, generation, lease, self._root.path / name, fd)
        self._leases[lease] = held
        logger.debug("lease.acquired", manager=self.id, generation=generation, lease=lease,
                     seq=self._state.seq)
        return held

    def _make_generation(self) -> str:
        generation = new_generation_id()
        name = generation_name(generation)
        self._append(GenerationCreated(self.id, generation))
        fd = -1
        try:
            self._steps.before("mkdir", name)
            os.mkdir(name, 0o700, dir_fd=self._root.fd)
            self._steps.before("lock", name)
            fd = lock_shared(self._root.fd, name)
            # mkdir's mode passes through the umask, which may take the
            # owner's own bits away; the directory must be exactly 0700.
            os.fchmod(fd, 0o700)
            st = os.fstat(fd)
        except OSError as e:
            if fd >= 0:
                os.close(fd)
            self._abandon(generation, f"could not be made: {e.strerror}")
            logger.warning("generation.failed", manager=self.id, generation=generation,
                           reason=str(e))
            raise Unavailable(
                f"could not make a private directory in {self._root.path}: {e.strerror}. "
                "Free space or fix the root; no other directory will be used"
            ) from e
        try:
            self._append(GenerationReady(self.id, generation, st.st_dev, st.st_ino))
        except BaseException:
            os.close(fd)
            self._abandon(generation, "its creation could not be journaled")
            raise
        self._generation_fds[generation] = fd
        logger.info("generation.created", manager=self.id, generation=generation,
                    path=str(self._root.path / name), seq=self._state.seq)
        return generation

    def _abandon(self, generation: str, reason: str) -> None:
        """Undo a generation that never became ready; failures are left to recovery."""
        try:
            self._remove(generation, reason)
        except SessionTempError as e:
            logger.warning("generation.abandon_failed", manager=self.id,
                           generation=generation, reason=str(e))

    def _release_lease(self, lease: Lease) -> None:
        with self._mutex:
            if self._closed or lease.released:
                lease._drop_lock()
                return
            try:
                self._append(LeaseReleased(self.id, lease.generation, lease.id))
            except JournalError as e:
                # Keep the lock: without a journaled release the directory
                # must stay, and the next recovery sees the lease as void.
                logger.error("lease.release_failed", manager=self.id, lease=lease.id,
                             reason=str(e))
                return
            lease._drop_lock()
            del self._leases[lease.id]
            logger.debug("lease.released", manager=self.id, generation=lease.generation,
                         lease=lease.id, seq=self._state.seq)
            self._settle()

    # -- the end -----------------------------------------------------------------

    def close(self) -> None:
        """Seal the manager and give up its journal connection and locks.

        Generations no command holds are removed now; one still held by a
        command started with :meth:`Lease.popen` stays until that command
        exits and a later recovery removes it.  Leases not yet released
        become void: their ``release()`` does nothing.  Idempotent.
        """
        with self._mutex:
            if self._closed:
                return
            try:
                self._append(ManagerClosed(self.id))
            except JournalError as e:
                logger.error("manager.close_failed", manager=self.id, reason=str(e))
            for lease in self._leases.values():
                lease._drop_lock()
            self._leases.clear()
            if self._me.ended is not None:
                self._settle(finish_started=True)
            for fd in self._generation_fds.values():
                os.close(fd)
            self._generation_fds.clear()
            self._closed = True
            self._steps.before("unlock", f"manager {self.id}")
            # The lock file goes first: once the lock is free, a recovery
            # may take it and would otherwise race our unlink.
            # Relative to the descriptor: if the root's name was swapped, the
            # file to unlink is still ours, not one in the replacement.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{MANAGERS_DIR}/{self.id}.lock", dir_fd=self._root.fd)
            self._liveness.release()
            self._store.close()
            self._root.close()
        logger.debug("manager.closed", manager=self.id)

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

    def _append(self, *events: Event) -> None:
        """Commit *events* durably, then apply them to the manager's state."""
        self._steps.before("journal", ",".join(e.kind for e in events))
        records = self._store.append(events, time=self._clock())
        state = self._state
        for record in records:
            state = apply(state, record)
        self._state = state

    def _settle(self, *, finish_started: bool = False) -> None:
        """Act on what the state now says: drop locks on retired generations, remove drained ones.

        With *finish_started*, removals begun earlier and left unfinished
        (a failure) are tried again too.  Never raises for a failed removal.
        """
        generations = self._state.generations
        for generation, fd in list(self._generation_fds.items()):
            if generations[generation].retired:
                self._steps.before("unlock", generation_name(generation))
                os.close(fd)
                del self._generation_fds[generation]
        for generation in sorted(self._me.generations):
            state = generations[generation]
            if removal_due(state) or (finish_started and state.removal == "started"):
                try:
                    self._remove(generation, "retired and no lease left")
                except (OSError, SessionTempError) as e:
                    logger.warning("generation.removal_failed", manager=self.id,
                                   generation=generation, reason=str(e))

    def _remove(self, generation: str, reason: str) -> None:
        outcome = remove_generation(
            self._root.fd, self._state.generations[generation], by=self.id, reason=reason,
            append=lambda events: self._append(*events), steps=self._steps,
        )
        log = logger.info if outcome in ("removed", "absent") else logger.warning
        log(f"generation.{outcome}", manager=self.id, generation=generation,
            path=str(self._root.path / generation_name(generation)), seq=self._state.seq)

