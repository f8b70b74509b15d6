"""A lease: one command's claim on its generation directory, and the manager's leases.

A :class:`Lease` holds shared locks on its directory (the generation's work
directory, ``ROOT/sessiontemp-gen-<id>/tmp``) and on the generation through
descriptors of its own (a :class:`~sessiontemp.handles.Hold`).  :meth:`Lease.popen`
passes them to the child, so the locks (and with them the directory) outlive
the lease, and even the manager, for as long as the command runs.  It also
journals the child's pid and start time (:meth:`Lease.track`), the second
liveness signal, for a command that closes the descriptors it inherited.

:class:`Leases` hands out a manager's leases and answers for them: a lease's
release, the commands tracked on it and the files kept from it come there,
never into the manager's internals.  Each runs under the manager's mutex and
through its writer (a :class:`~sessiontemp.writepath.WritePath`); a lease's
append on a live generation is waited for outside the mutex, so that other
threads' appends join its commit.  A lease shows its manager as an
:class:`Issuer`, and reaches its lock only through its hold, which the
manager's handles list, so that a close or a fork lets go of it with the rest.
asyncio (and :mod:`sessiontemp._guards.aio`, which imports nothing of this
module) is imported only by the async methods, so a program that never awaits
a lease never loads it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol

from sessiontemp import artifacts
from sessiontemp._guards.shield import shielded
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import processes
from sessiontemp._kernel.spawn import not_started
from sessiontemp.artifacts import Artifact
from sessiontemp.generations import Generations
from sessiontemp.handles import Handles, Hold
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
from sessiontemp.meter import Meter
from sessiontemp.recovery.cleanup import remove_artifact
from sessiontemp.space import reserve
from sessiontemp.writepath import WritePath

if TYPE_CHECKING:
    import asyncio.subprocess

    from sessiontemp._guards.log import BoundLogger

__all__ = ["MAX_LABEL", "Issuer", "Lease", "Leases", "check_label"]

_TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")

class Issuer(Protocol):
    """The manager that handed out a lease, as the lease shows it (:attr:`Lease.manager`)."""

    @property
    def id(self) -> str:
        """The manager's id."""

    @property
    def root(self) -> Path:
        """The root the manager works in."""


class Lease:
    """One command's hold on a generation; release it when the command has exited.

    Use it as a context manager, or call :meth:`release` (idempotent) yourself.
    """

    def __init__(
        self, manager: Issuer, owner: Leases, generation: str, lease: str, path: str,
        hold: Hold, *, label: str = "",
    ) -> None:
        self.manager = manager
        self._leases = owner
        self.generation = generation
        self.id = lease
        # A string until asked for as a Path: pathlib interns every component
        # it parses, and a manager that never reads it should not grow the
        # interpreter's table of interned names with each generation's.
        self._path = path
        self.label = label
        self._hold = hold

    @functools.cached_property
    def path(self) -> Path:
        """The leased directory: its generation's work directory, ``GENERATION/tmp``.

        One level below the generation's own directory, so that an age
        cleaner's line naming the generation meets its lock before any file
        (see the systemd-tmpfiles how-to).
        """
        return Path(self._path)

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Lease {self.id} on {self._path} ({state})>"

    @property
    def released(self) -> bool:
        """Whether the lease was given back (or voided by its manager's close)."""
        return self._hold.fd is None

    def env(self) -> dict[str, str]:
        """The variables that point a command's temporary files at this lease's directory.

        Raises :class:`Unavailable` once the lease is released, as
        :attr:`pass_fds` and :meth:`popen` do: a command started on a
        released lease's directory is protected by nothing, and the
        directory may go under it.
        """
        if self._hold.fd is None:
            raise self._gone()
        return dict.fromkeys(_TEMP_VARIABLES, self._path)

    def _gone(self) -> Unavailable:
        return Unavailable(self.path, f"lease {self.id} ({self.label or 'unlabelled'}) was "
                           "already released",
                           "Acquire a new lease (manager.acquire()) to start a command")

    def popen(
        self, args: str | Sequence[str | os.PathLike[str]], **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start *args* with :meth:`env` applied and this lease's lock inherited.

        Takes the keyword arguments of :class:`subprocess.Popen`; ``env``, if
        given, replaces ``os.environ`` as the base the temporary variables are
        set on, and ``pass_fds`` is extended, not replaced.  The child is
        tracked (:meth:`track`), so its directory stays while it runs even
        if it closes the descriptors it inherited.
        """
        given: Mapping[str, str] | None = kwargs.pop("env", None)
        base = os.environ if given is None else given
        env = {**base, **dict.fromkeys(_TEMP_VARIABLES, self._path)}
        extra = tuple(kwargs.pop("pass_fds", ()))
        # The child shares the locked open file descriptions, so the
        # directory stays locked until the child exits, whatever happens
        # to this process.
        try:
            child = self._hold.run(lambda fds: subprocess.Popen(
                args, env=env, pass_fds=(*extra, *fds), **kwargs))
        except OSError as e:
            program = args if isinstance(args, str | bytes | os.PathLike) else (
                kwargs.get("executable") or (args[0] if args else ""))
            raise not_started(program, e, kwargs.get("cwd")) from e
        if child is None:
            raise self._gone()
        self.track(child.pid)
        return child

    def track(self, pid: int) -> bool:
        """Journal that process *pid* uses this lease's directory.

        Its directory is then not removed while that process runs (matched
        by pid and start time, so a reused pid does not count), even after
        the lease is released and even if the process closed the lock
        descriptor it inherited.  Returns False when it could not be
        recorded: the process is already gone, the lease was released, or
        the journal refused the write (logged); the lock still protects a
        child that kept the descriptor.
        """
        return self._leases.track(self, pid)

    async def track_async(self, pid: int) -> bool:
        """:meth:`track` in a worker thread: its journal commit never runs on the event loop."""
        from sessiontemp._guards import aio

        return await aio.complete(functools.partial(self.track, pid))

    def keep(self, path: os.PathLike[str] | str, label: str) -> Artifact:
        """Copy the file at *path* out of this lease's directory into the root's artifact store.

        *path* is relative to :attr:`path` or absolute under it; *label*
        (1-80 characters of ``[A-Za-z0-9._-]``, starting with a letter or a
        digit) becomes part of the file's name.  The copy is a new file of
        mode 1600 (0600 with the sticky bit, which keeps age cleaners off it),
        fsynced with its directory before its SHA-256 and size are
        journaled; it outlives every rotation, release and close, and goes
        only by :func:`sessiontemp.remove_artifact`.  Refused with
        :class:`BadInput` unless *path* is a regular file with one link of
        at most 16 MiB (``sessiontemp.artifacts.MAX_BYTES``), reached without
        following a symlink, and for a bad label or a file that does not
        exist (naming its whole path); with
        :class:`Unavailable` once the lease is released.
        """
        return self._leases.keep(self, path, label)

    async def keep_async(self, path: os.PathLike[str] | str, label: str) -> Artifact:
        """:meth:`keep` in a worker thread: the copy, its fsyncs and its record run off the loop.

        When the awaiting task is cancelled, the copy under way still
        finishes and the artifact it made is removed (journaled, as by
        :func:`sessiontemp.remove_artifact`) before the cancellation is
        raised: a cancelled caller leaves no artifact behind.
        """
        from sessiontemp._guards import aio

        # The artifact a cancelled caller never got is removed, journaled as
        # any removal is: a file nobody knows of would otherwise stay for good.
        return await aio.undoable(functools.partial(self.keep, path, label), self._leases.discard)

    def release(self) -> None:
        """Give the lease back; later calls do nothing.

        Never raises for a failed clean-up: that is logged and left to the
        next recovery.
        """
        if self._hold.fd is not None:
            self._leases.release_lease(self)

    async def release_async(self) -> None:
        """:meth:`release` in a worker thread; cancelled meanwhile, it still releases, then raises.

        A release appends to the journal and may remove the directory, so
        it never runs on the event loop; ``async with lease:`` ends with it.
        """
        from sessiontemp._guards import aio

        await aio.complete(self.release)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # -- any way of starting a command ------------------------------------------------

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors a command must inherit to be protected as :meth:`popen`'s is.

        Hand them to any process-starting API: ``subprocess.Popen(cmd,
        env=lease.env(), pass_fds=lease.pass_fds)``, ``subprocess.run``, or
        ``os.posix_spawn`` with a ``POSIX_SPAWN_DUP2`` of each onto itself.
        The directory is protected while the command, or anything it hands
        them to, keeps them open.  Raises :class:`Unavailable` once
        the lease is released: the number may by then name another file.
        """
        fds = self._hold.fds
        if fds is None:
            raise self._gone()
        return fds

    async def create_subprocess_exec(
        self, program: str | bytes | os.PathLike[str], *args: str | bytes | os.PathLike[str],
        **kwargs: Any,
    ) -> asyncio.subprocess.Process:
        """:func:`asyncio.create_subprocess_exec`, with :meth:`env` applied and the lock inherited.

        ``env`` and ``pass_fds`` are treated as by :meth:`popen`, and the
        child is tracked (:meth:`track`, in a worker thread).  Cancelled
        while tracking, it kills and reaps the child before the cancellation
        goes on, as asyncio does when cancelled while starting one.
        """
        # Here, not at the module's import: a program that never awaits pays nothing for asyncio.
        import asyncio

        from sessiontemp._guards import aio

        given: Mapping[str, str] | None = kwargs.pop("env", None)
        base = os.environ if given is None else given
        env = {**base, **dict.fromkeys(_TEMP_VARIABLES, self._path)}
        # The locks cannot be held across the await, so the child gets
        # duplicates: the same open file descriptions, hence the same locks,
        # which a release racing the start in another thread cannot close
        # under it nor let another file take its number.
        fds = self._hold.dup()
        if fds is None:
            raise self._gone()
        try:
            pass_fds = (*kwargs.pop("pass_fds", ()), *fds)
            process = await asyncio.create_subprocess_exec(
                program, *args, env=env, pass_fds=pass_fds, **kwargs
            )
        except OSError as e:
            raise not_started(program, e, kwargs.get("cwd")) from e
        finally:
            for fd in fds:
                os.close(fd)
        try:
            await aio.complete(functools.partial(self.track, process.pid))
        except BaseException:
            # The caller never gets the process: it must not run on unsupervised.
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        return process

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Seen through to the end even when the task is cancelled, so the
        # lease is given back before the cancellation goes on.
        await self.release_async()


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
    """The leases of *manager*: handed out on its current generation, each answered for here."""

    def __init__(self, manager: Issuer, writer: WritePath, handles: Handles,
                 generations: Generations, mutex: threading.RLock, steps: Steps,
                 log: BoundLogger, *, clock: Callable[[], float], meter: Meter) -> None:
        # Weakly: each lease holds its manager, and a manager dropped
        # unclosed must be finalized at once, not by the cycle collector.
        self._manager = weakref.ref(manager)
        self.id = manager.id
        self._writer = writer
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
            self._writer.wait(pending)
        except (JournalError, RuleViolation) as e:
            with self._mutex:
                self._forget_hold(lease)
            raise self._unavailable(f"the journal could not record the lease: {e}",
                                    "No directory was handed out; retry once fixed") from e
        return lease

    def _acquire_locked(self, label: str) -> tuple[Lease, Pending | None]:
        with self._mutex:
            me = self._writer.me
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
                        seq=self._writer.state.seq)
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
                            seq=self._writer.state.seq)
            self._generations.settle()

        def operation() -> None:
            with self._mutex:
                if not self.holds(lease):
                    if hold is not None:
                        hold.drop()
                    return
                if self._writer.state.generations[lease.generation].retired:
                    # Its removal follows, and must not need free space.
                    reserve.make_room(self._handles.root.fd)
                try:
                    pending = self._writer.append(
                        LeaseReleased(self.id, lease.generation, lease.id), wait=False)
                    if self._writer.state.generations[lease.generation].retired:
                        # Its removal may follow: everything under the mutex.
                        self._writer.wait(pending)
                        released()
                        return
                except JournalError as e:
                    failed(e)
                    return
            # A release from a live generation: waited for without the
            # mutex, so that other threads' appends join its commit; the
            # lock goes only once the release is durable.
            try:
                self._writer.wait(pending)
            except JournalError as e:
                failed(e)
                return
            with self._mutex:
                released()

        shielded(operation)

    def keep(self, lease: Lease, path: os.PathLike[str] | str, label: str) -> Artifact:
        """Copy *path* from *lease*'s directory into the artifact store, and journal it."""
        artifacts.check_label(label)
        parts = artifacts.source_parts(lease.path, path)
        self._handles.refuse_forked(self.id)

        def operation() -> Artifact:
            with self._mutex:
                hold = self._handles.leases.get(lease.id)
                fd = None if hold is None else hold.fd
                if not self.holds(lease) or fd is None:
                    raise Unavailable(lease.path, f"lease {lease.id} was already released",
                                      "Keep files while the lease is held")
                return artifacts.keep(
                    self._writer, self._handles.root, fd, parts, label, manager=self.id,
                    lease=lease.id, directory=lease.path, source=path, steps=self._steps,
                    broken=self._broken, log=self._log)

        return shielded(operation)

    def discard(self, artifact: Artifact) -> None:
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
                    self._writer.append(
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
        generation = self._writer.state.generations.get(lease.generation)
        return (generation is not None and lease.id in generation.leases
                and not self._writer.closed)

