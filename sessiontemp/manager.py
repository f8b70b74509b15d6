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
(:mod:`sessiontemp._guards.shield`), and a failure between two steps leaves work
that the next operation, or the next recovery, finishes.

The manager is a facade that opens and wires the parts, each in a module
of its own: the write path and the state it folds
(:mod:`sessiontemp.writer`), its generations (:mod:`sessiontemp.generations`),
its leases (:mod:`sessiontemp.lease`), a named session's claim
(:mod:`sessiontemp.sessions`), a kept file (:mod:`sessiontemp.artifacts`)
and what it holds open (:mod:`sessiontemp.handles`).  They append through
the writer as a :class:`~sessiontemp.writepath.WritePath` and never import
the manager.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Unpack

from sessiontemp import sessions
from sessiontemp._guards.log import bound
from sessiontemp._guards.shield import shielded
from sessiontemp._guards.steps import StepHook, Steps
from sessiontemp._kernel import resources
from sessiontemp._kernel.liveness import LivenessLock
from sessiontemp._kernel.locks import hold_root
from sessiontemp._kernel.root import WORK_DIR, Root, check_root_path, default_root, generation_name
from sessiontemp.generations import Generations
from sessiontemp.handles import Handles, register
from sessiontemp.journal import ids
from sessiontemp.journal.durability import DURABILITY, Durability
from sessiontemp.journal.durability import check as check_durability
from sessiontemp.journal.errors import (
    JournalError,
    JournalFull,
    RuleViolation,
    Unavailable,
)
from sessiontemp.journal.events import (
    ManagerClosed,
    ManagerOpened,
    Released,
    Retained,
    Rotated,
)
from sessiontemp.journal.reducer import Fold, State
from sessiontemp.journal.segments import DEFAULT_RETENTION, Retention
from sessiontemp.journal.store import Pending, Store
from sessiontemp.lease import Lease, Leases, check_label
from sessiontemp.meter import Meter
from sessiontemp.options import ManagerOptions
from sessiontemp.recovery import passes as recovery
from sessiontemp.space import budget, placement, reserve
from sessiontemp.space.usage import Usage
from sessiontemp.writer import Writer

__all__ = ["DEFAULT_RESUME_WINDOW", "DEFAULT_STALE_AFTER", "DURABILITY", "Durability", "Manager"]

DEFAULT_STALE_AFTER: Final = recovery.DEFAULT_STALE_AFTER
DEFAULT_RESUME_WINDOW: Final = sessions.DEFAULT_RESUME_WINDOW


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
    durable before it returns, but a holder's (a lease taken or given back
    on a live generation, a command started); ``"relaxed"`` syncs only the
    events that precede a file-system effect (a generation's creation
    before its mkdir, a removal's start before its rename, the manager's
    end before its lock file goes) and an artifact's record.  The others
    reach the disk with the next sync: a process crash loses none of them,
    a power loss may lose the last ones, which then describe leases and
    owners of processes that died with it (the documentation's "Commits and
    durability").

    *clock* gives the wall-clock time written into events and used for the
    stale sweep; *busy_timeout* bounds the wait for another process's journal
    write; *step_hook* sees every durable step before it happens (tests use
    it to inject failures and crashes); *retention* bounds the journal's
    disk use (:class:`sessiontemp.journal.segments.Retention`: segment size, and the size
    and age of retired history kept).

    *session* names the logical session (1-64 characters of
    ``[A-Za-z0-9._-]``, not ``.`` or ``..``; BadInput otherwise): one live
    manager per name and root, a second is refused with
    :class:`SessionOwned` naming the owner's pid.  When a named session's
    manager dies, its current directory is kept for *resume_window* seconds
    (a day by default) from its journaled death; the next manager of that
    name adopts it, files and all, unless *resume* is False (then it is
    removed, as it is once the window has passed).  *workdir* is the
    directory sandboxed commands may write: a root inside it is refused
    (:class:`UnsafeRoot`), or with ``workdir_policy="warn"`` warned about.

    *max_bytes* and *max_inodes* budget the current directory (None: no
    budget): once a measurement finds it over, the next acquire raises
    :class:`~sessiontemp.OverBudget`; a running command is never touched.
    Acquire raises :class:`~sessiontemp.LowDisk` while the root's file
    system has less than *min_free_bytes* free (None: 1% of it, at most 1
    GiB).  The directory is measured in the background at most every
    *measure_every* seconds (``math.inf``: only by :meth:`measure`); see
    the documentation's "Space".  Negative, NaN or bool values raise
    :class:`BadInput` (a ValueError).

    A forked child owns nothing of its parent's manager: its copy refuses
    every operation with :class:`~sessiontemp.journal.errors.ForkedCopy`, and closing
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
        max_bytes: int | None = None,
        max_inodes: int | None = None,
        min_free_bytes: int | None = None,
        measure_every: float = budget.DEFAULT_MEASURE_EVERY,
    ) -> None:
        check_root_path(root)
        recovery.check_stale_after(stale_after)
        self._limits = budget.check_limits(max_bytes, max_inodes, min_free_bytes, measure_every)
        self._retention = retention
        durability = check_durability(durability)
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
        self.id = ids.new_manager()
        # Every event of this manager names it: bound once.
        self._log = bound(manager=self.id)
        self._clock = clock
        self._steps = Steps(step_hook)
        self._mutex = threading.RLock()
        self.recovery = recovery.Report(ran=False)
        with resources.translated(default_root() if root is None else os.path.abspath(root),
                                  "the manager could not be opened"):
            self._handles = shielded(
                lambda: self._open(root, stale_after, busy_timeout, claim, window),
                lambda handles: self.close(),
            )
        self._log.debug("manager.opened", path=str(self._handles.root.path))

    def _open(self, root: os.PathLike[str] | str | None, stale_after: float,
              busy_timeout: float, claim: sessions.Claim | None, window: float) -> Handles:
        handles = Handles(Root.open(root))
        # Set at once: whatever fails below, close_all() gives back what was had;
        # and a child forked from now on (by another thread) disarms its copies.
        self._handles = handles
        self._writer = writer = Writer(self.id, handles, durability=self.durability,
                                       clock=self._clock, steps=self._steps, mutex=self._mutex,
                                       log=self._log)
        self._generations = Generations(self.id, writer, handles, self._steps, self._log)
        self._meter = Meter(self.id, writer, handles, self._mutex, self._limits, self._log,
                            clock=self._clock)
        self._leases = Leases(self, writer, handles, self._generations, self._mutex,
                              self._steps, self._log, clock=self._clock, meter=self._meter)
        register(self.id, handles)
        try:
            if claim is not None:
                # First: refused at once while another manager owns the name.
                handles.session = sessions.SessionLock.take(handles.root, claim.name)
            handles.root.check_journal()
            # On a nearly full disk, opening a journal cleanly closed makes its
            # -shm (32 KiB) and -wal again: the reserve's blocks are what lets
            # them be made, as the pass below journals what frees space.
            reserve.make_room(handles.root.fd)
            handles.store = Store(handles.root.journal_path, busy_timeout=busy_timeout,
                                  retention=self._retention, step_hook=self._steps.before)
            ledger = writer.keep(handles.store)
            # Checkpoints, rollover and retirement for a manager that lives long,
            # of the journal's state as the ledger holds it.
            ledger.maintain = functools.partial(
                recovery.maintain, handles.root, handles.store, clock=self._clock,
                steps=self._steps)
            self.recovery = recovery.run(
                handles.root, handles.store, stale_after=stale_after, clock=self._clock,
                steps=self._steps,
                # A claimer must know how its last owner ended: it waits for its pass.
                wait=claim is not None, claim=claim,
                # The journal's state where the pass ends: the ledger follows it from there.
                reached=lambda state: ledger.follow(Fold(state, tolerant=True), state.seq),
            )
            # Keeps an age-based cleaner (systemd-tmpfiles) out of the whole
            # root, journal and lock files included, while the manager lives.
            if not hold_root(handles.root.fd, patience=busy_timeout):
                self._log.warning("root.unlocked", path=str(handles.root.path),
                                  reason="another process holds the root's exclusive lock")
            self._meter.opened()
            # The liveness lock is taken before the journal names this
            # manager, so a recovery that sees the name finds the lock.
            self._steps.before("lock", f"manager {self.id}")
            handles.liveness = LivenessLock(handles.root.managers_fd, self.id)
            if claim is None:
                self._writer.append(ManagerOpened(self.id, os.getpid()))
            else:
                self._claim(claim, window)
        except BaseException as e:
            full = None
            if isinstance(e, JournalFull):
                # While the root is open: how full its file system is.
                full = budget.journal_full(handles.root.path, handles.root.fd,
                                           self._limits.min_free_bytes, e)
            if handles.liveness is not None and (
                handles.store is None or handles.store.broken is None
            ):
                # Never journaled: nobody will look for the file.
                handles.liveness.unlink()
            handles.close_all()
            if full is not None:
                raise full from e
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
            self._writer.seed(found.seed())
        adopted = sessions.claim_session(self._writer, claim, window, found, manager=self.id,
                                         root=self._handles.root, steps=self._steps,
                                         log=self._log)
        if adopted is not None:
            self._handles.generations[adopted[0]] = adopted[1]
            self._handles.work[adopted[0]] = adopted[2]
            self.resumed = True

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
        return self._writer.state

    @property
    def sealed(self) -> bool:
        """Whether the last owner has released the manager: it hands out no more leases."""
        return self._writer.me.sealed

    @property
    def owners(self) -> int:
        """How many owners hold the manager (retains not yet released)."""
        return self._writer.me.owners

    @property
    def closed(self) -> bool:
        """Whether the manager has ended: closed, or let go of its handles after a failure."""
        return self._writer.closed

    @property
    def current_dir(self) -> Path | None:
        """The directory the next lease gets, without taking one; None if none is made.

        The current generation's work directory, as :attr:`Lease.path`.
        """
        # One state, read once: no mutex, which a forked child's copy could
        # find held by a thread of its parent.
        writer = self._writer
        state = writer.state
        me = writer.find_me(state)
        current = None if me is None else me.current
        if current is None or not state.generations[current].ready:
            return None
        return self.root / generation_name(current) / WORK_DIR

    def __repr__(self) -> str:
        me = self._writer.me
        named = "" if self.session is None else f" session={self.session!r}"
        return (f"<Manager {self.id} at {self.root}{named} owners={me.owners} "
                f"sealed={me.sealed} closed={self.closed}>")

    # -- owners ----------------------------------------------------------------

    def retain(self) -> None:
        """Add an owner.  On a sealed manager this changes nothing: it stays sealed."""
        self._operate(lambda: self._writer.append(Retained(self.id), wait=False))

    def release(self) -> None:
        """Drop an owner.  The last one seals the manager and retires its generation."""
        self._operate(lambda: self._writer.append(Released(self.id), wait=False))

    def rotate(self) -> None:
        """Retire the current generation; the next acquire gets a fresh directory.

        Commands holding leases on the old one keep it until they release.
        Does nothing on a sealed manager.
        """
        self._operate(lambda: self._writer.append(Rotated(self.id), wait=False))

    def _operate(self, change: Callable[[], Pending]) -> None:
        """Run one owner operation: nothing once closed, then settle what it changed.

        The change is waited for after settling, so that a removal it makes
        due is journaled in the same commit (its start must be durable
        before the rename, and makes the change durable with it).
        """
        self._handles.refuse_forked(self.id)

        def operation() -> None:
            with self._mutex:
                if self.closed:
                    return
                self._handles.keep_alive(self.id, self._log)
                # A release or rotate may make a removal due: on a full
                # disk, its records go into the reserve's blocks.
                reserve.make_room(self._handles.root.fd)
                pending = change()
                try:
                    self._generations.settle()
                finally:
                    try:
                        self._writer.wait(pending)
                    finally:
                        # Committed only now (or failed): the locks on what
                        # it did retire can go.
                        self._generations.drop_retired()

        shielded(operation)

    # -- leases ----------------------------------------------------------------

    def acquire(self, *, label: str = "") -> Lease:
        """Lease the current generation, making it first if there is none.

        *label* says, for people reading the journal, what the lease is for
        (a command line, a test's name).  Raises :class:`Unavailable` when
        the manager is sealed, closed or has no owner, or when the directory
        cannot be made or the journal cannot record it.  Never falls back
        to any other directory.  A label longer than 4096 characters (what
        the journal's schema accepts), or one that is no str, is refused with
        :class:`BadInput` (a ValueError).
        """
        check_label(label)
        self._handles.refuse_forked(self.id)
        return shielded(functools.partial(self._leases.acquire, label), Lease.release)

    def measure(self) -> Usage:
        """Measure the current directory now, journal it, and return its :class:`Usage`.

        Blocking (a walk of the whole tree), safe from any thread; zeros
        when there is no current directory yet.  Acquire's budget check
        uses it: after removing files from a directory refused as over
        budget, a call lets the next acquire through at once.
        """
        self._handles.refuse_forked(self.id)
        return self._meter.measure()

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
        meter: Meter | None = self.__dict__.get("_meter")
        if meter is not None:
            # Outside the mutex, which its last journaling may wait for.
            meter.stop()
        shielded(self._close)

    def _close(self) -> None:
        with self._mutex:
            handles = self._handles
            if handles.closed:
                return
            journaled = self._writer.me.ended is not None
            if not journaled:
                # Its end, and the removals that follow, need no free space.
                reserve.make_room(handles.root.fd)
                try:
                    self._writer.append(ManagerClosed(self.id))
                    journaled = True
                except (JournalError, RuleViolation) as e:
                    # The journal cannot say this manager ended (a full disk,
                    # a lock held too long, a record the rules refused): it
                    # lets go of everything below as a dead process would.
                    self._log.error("manager.close_failed", reason=str(e))
                except BaseException:
                    # Whatever else stops it (a bug, a step hook's fault),
                    # nothing was journaled, so nothing holds this manager's
                    # locks for it any more: the caller still learns why.
                    handles.close_all()
                    raise
            for hold in list(handles.leases.values()):
                hold.drop()
            handles.leases.clear()
            if journaled:
                self._generations.settle()
            self._steps.before("unlock", f"manager {self.id}")
            # The lock file goes first: once the lock is free, a recovery
            # may take it and would otherwise race our unlink.  Only with
            # the end journaled: without it, the file is how a recovery
            # finds this manager dead.
            if journaled and handles.liveness is not None:
                handles.liveness.unlink()
            handles.close_all()
        self._log.debug("manager.closed")

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

    # -- guards --------------------------------------------------------------------

    def _unavailable(self, reason: str, fix: str) -> Unavailable:
        return Unavailable(self.root, reason, fix)

    # -- asyncio ---------------------------------------------------------------------
    # Each runs its blocking work in a worker thread (sessiontemp._guards.aio, which
    # loads asyncio: imported by the first await, never by this module).

    @classmethod
    async def open_async(cls, root: os.PathLike[str] | str | None = None,
                         **options: Unpack[ManagerOptions]) -> Manager:
        """Open a manager, as ``Manager(root, **options)`` does, in a worker thread.

        Takes the same options; the root's creation, the journal's opening
        and the recovery pass all run off the event loop.  When the awaiting
        task is cancelled, the open under way still finishes, and the
        manager it made is let go of before the cancellation is raised:
        closed, or, when it resumed a named session, given up as a dead
        process's is, so that the session's next owner resumes it instead.
        """
        from sessiontemp._guards import aio

        return await aio.undoable(functools.partial(cls, root, **options), cls._let_go)

    def _let_go(self) -> None:
        """Undo an open whose caller, cancelled meanwhile, never got this manager."""
        if self.resumed:
            # Closing would remove the directory it adopted, files and all:
            # instead its handles go as a dead process's do, and the session's
            # next owner finds it dead and resumes that directory in its turn.
            self._handles.abandon()
        else:
            self.close()

    async def retain_async(self) -> None:
        """:meth:`retain` in a worker thread; cancelled meanwhile, it still retains, then raises."""
        from sessiontemp._guards import aio

        await aio.complete(self.retain)

    async def release_async(self) -> None:
        """:meth:`release` in a worker thread; cancelled meanwhile, it still releases, then raises.

        A last release removes the generation no lease holds before it returns.
        """
        from sessiontemp._guards import aio

        await aio.complete(self.release)

    async def rotate_async(self) -> None:
        """:meth:`rotate` in a worker thread; cancelled meanwhile, it still rotates, then raises.

        The retired generation, if no lease holds it, is removed before it returns.
        """
        from sessiontemp._guards import aio

        await aio.complete(self.rotate)

    async def measure_async(self) -> Usage:
        """:meth:`measure` in a worker thread: the walk never runs on the event loop."""
        from sessiontemp._guards import aio

        return await aio.complete(self.measure)

    async def close_async(self) -> None:
        """:meth:`close` in a worker thread; cancelled meanwhile, it still closes, then raises."""
        from sessiontemp._guards import aio

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
        from sessiontemp._guards import aio

        return await aio.acquire(functools.partial(self.acquire, label=label))
