"""A running command's claim on its generation directory.

A lease holds shared locks on its directory (the generation's work
directory, ``ROOT/sessiontemp-gen-<id>/tmp``) and on the generation through
descriptors of its own (a :class:`Hold`).  :meth:`Lease.popen` passes them
to the child, so the locks (and with them the directory) outlive the lease,
and even the manager, for as long as the command runs.  It also journals the child's pid
and start time (:meth:`Lease.track`), the second liveness signal, for a
command that closes the descriptors it inherited.

A lease reaches its manager only through :class:`LeaseOwner` (and shows
it as an :class:`Issuer`), and the manager reaches the lease's lock only
through its :class:`Hold`: neither calls into the other's internals, and
this module imports neither the manager nor the leases' owner.  asyncio
(and :mod:`sessiontemp._guards.aio`, which imports nothing of this module) is
imported only by the async methods, so a program that never awaits a
lease never loads it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sessiontemp._guards import forks
from sessiontemp._kernel.spawn import not_started
from sessiontemp.journal.errors import (
    Unavailable,
)

if TYPE_CHECKING:
    import asyncio.subprocess

    from sessiontemp.artifacts import Artifact

__all__ = ["Hold", "Issuer", "Lease", "LeaseOwner"]

_TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")

T = TypeVar("T")


class Issuer(Protocol):
    """The manager that handed out a lease, as the lease shows it (:attr:`Lease.manager`)."""

    @property
    def id(self) -> str:
        """The manager's id."""

    @property
    def root(self) -> Path:
        """The root the manager works in."""


class LeaseOwner(Protocol):
    """What a lease asks of the manager that handed it out."""

    def release_lease(self, lease: Lease) -> None:
        """Journal *lease*'s release, then drop its lock (never raises for a failed clean-up)."""

    def track(self, lease: Lease, pid: int) -> bool:
        """Journal that *pid* was started on *lease*; False when it cannot be recorded."""

    def keep(self, lease: Lease, path: os.PathLike[str] | str, label: str) -> Artifact:
        """Copy *path* out of *lease*'s directory into the artifact store, and journal it."""

    def discard(self, artifact: Artifact) -> None:
        """Remove *artifact*, kept for a caller cancelled before it got it; a failure is logged."""


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


class Lease:
    """One command's hold on a generation; release it when the command has exited.

    Use it as a context manager, or call :meth:`release` (idempotent) yourself.
    """

    def __init__(
        self, manager: Issuer, owner: LeaseOwner, generation: str, lease: str, path: str,
        hold: Hold, *, label: str = "",
    ) -> None:
        self.manager = manager
        self._owner = owner
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
        return self._owner.track(self, pid)

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
        return self._owner.keep(self, path, label)

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
        return await aio.undoable(functools.partial(self.keep, path, label), self._owner.discard)

    def release(self) -> None:
        """Give the lease back; later calls do nothing.

        Never raises for a failed clean-up: that is logged and left to the
        next recovery.
        """
        if self._hold.fd is not None:
            self._owner.release_lease(self)

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
