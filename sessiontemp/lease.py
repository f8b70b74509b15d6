"""A running command's claim on its generation directory.

A lease holds a shared lock on the directory through its own descriptor.
:meth:`Lease.popen` passes that descriptor to the child, so the lock (and
with it the directory) outlives the lease, and even the manager, for as long
as the command runs.  It also journals the child's pid and start time
(:meth:`Lease.track`), the second liveness signal, for a command that
closes the descriptors it inherited.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from journal.errors import Unavailable

if TYPE_CHECKING:
    from sessiontemp.manager import Manager

__all__ = ["Lease"]

_TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")


class Lease:
    """One command's hold on a generation; release it when the command has exited.

    Use it as a context manager, or call :meth:`release` (idempotent) yourself.
    """

    def __init__(
        self, manager: Manager, generation: str, lease: str, path: Path, fd: int, *,
        label: str = "",
    ) -> None:
        self.manager = manager
        self.generation = generation
        self.id = lease
        self.path = path
        self.label = label
        self._fd: int | None = fd
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Lease {self.id} on {self.path} ({state})>"

    @property
    def released(self) -> bool:
        """Whether the lease was given back (or voided by its manager's close)."""
        return self._fd is None

    def env(self) -> dict[str, str]:
        """The variables that point a command's temporary files at this lease's directory."""
        return dict.fromkeys(_TEMP_VARIABLES, os.fspath(self.path))

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
        env = {**base, **self.env()}
        with self._lock:
            if self._fd is None:
                raise Unavailable(self.path, f"lease {self.id} was already released",
                                  "Acquire a new lease to start a command")
            pass_fds = (*kwargs.pop("pass_fds", ()), self._fd)
            # The child shares the locked open file description, so the
            # directory stays locked until the child exits, whatever happens
            # to this process.
            child = subprocess.Popen(args, env=env, pass_fds=pass_fds, **kwargs)
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
        return self.manager._track(self, pid)

    def release(self) -> None:
        """Give the lease back; later calls do nothing.

        Never raises for a failed clean-up: that is logged and left to the
        next recovery.
        """
        if self._fd is not None:
            self.manager._release_lease(self)

    def _drop_lock(self) -> bool:
        """Close the lock descriptor; False if it was already closed.

        Callers hold the manager's lock first and this lease's second, the
        one order every path takes, so a release racing a close cannot
        deadlock.
        """
        with self._lock:
            if self._fd is None:
                return False
            os.close(self._fd)
            self._fd = None
            return True

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
