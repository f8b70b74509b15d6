"""flock, in one place: every kernel lock the library takes or gives up goes through here.

Every lock here is a BSD ``flock`` on a descriptor the caller opened: the
kernel releases it when the last descriptor sharing its open file
description closes, so a crash can never leave a lock that lies, and a
child handed the descriptor (``pass_fds``) keeps the lock alive for as long
as it runs.  What the locks mean (a manager alive, a generation in use,
one recovery pass at a time) is :mod:`sessiontemp._kernel.liveness`'s and the
session lock's (:mod:`sessiontemp.sessions`); this module only calls
the kernel, and reads its lock table (``/proc/locks``) for messages.

Why raw ``fcntl.flock`` and not ``filelock`` (a test dependency only):
see docs/architecture.md, "Locks and filelock".

Pids and ages are never used to decide liveness: pids are reused, and a
command may legitimately run for days.
"""

from __future__ import annotations

import errno
import fcntl
import os
from time import monotonic, sleep
from typing import Final

from sessiontemp._kernel import resources
from sessiontemp.journal.errors import Unavailable

__all__ = [
    "PROBE_PATIENCE",
    "busy",
    "flock_holders",
    "hold_root",
    "hold_shared",
    "holder_of",
    "lock_exclusive",
    "refusal",
    "still_named",
    "try_exclusive",
    "try_shared",
    "unlock",
]

# How long an exclusive lock on a directory is waited out by one that wants a
# shared lock on it: a probe's lasts an instant (see liveness.lock_shared).
PROBE_PATIENCE: Final = 2.0
# The kernel's table of every lock held on the system, and how many reads
# of it at most are taken to find two in a row that agree.
_PROC_LOCKS: Final = "/proc/locks"
_PROC_LOCKS_READS: Final = 8
_BUSY: Final = (errno.EWOULDBLOCK, errno.EAGAIN)


def still_named(dir_fd: int, name: str, fd: int) -> bool:
    """Whether *name* under *dir_fd* still names the file *fd* is open on.

    A lock won on a file unlinked or replaced since it was opened guards
    nothing.  Raises FileNotFoundError when nothing has the name any more.
    """
    named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def hold_root(root_fd: int, *, patience: float) -> bool:
    """Hold a shared lock on the root directory through *root_fd*, waiting up to *patience*.

    Only an exclusive holder blocks it: an age-based cleaner in the middle
    of the root.  Returns False when it stays blocked; the manager works on
    without it.
    """
    return hold_shared(root_fd, patience=patience)


def try_exclusive(fd: int) -> bool:
    """Take an exclusive lock on *fd* if nobody else holds any lock on it."""
    return _try(fd, fcntl.LOCK_EX)


def _try(fd: int, operation: int) -> bool:
    """``flock(fd, operation)`` without waiting: False while someone else's lock is in the way."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in _BUSY:
            return False
        raise
    return True


def busy(path: os.PathLike[str] | str) -> BlockingIOError:
    """The error a lock held by someone else gives, as ``flock`` itself raises it."""
    return BlockingIOError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK), str(path))


def try_shared(fd: int) -> bool:
    """Take a shared lock on *fd* unless someone holds an exclusive one."""
    return _try(fd, fcntl.LOCK_SH)


def lock_exclusive(fd: int, *, wait: bool) -> bool:
    """Take an exclusive lock on *fd*: waiting for it when *wait*, else False while busy.

    Blocking when waiting: interrupted by a signal, the wait is resumed once
    its handler returns (PEP 475).
    """
    if not wait:
        return try_exclusive(fd)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return True


def unlock(fd: int) -> None:
    """Give up the lock of *fd*'s open file description, in every process sharing it.

    For the one lock that must not outlive its holder's use even in a
    child forked meanwhile (the recovery lock); every other lock goes only
    with its descriptor.
    """
    fcntl.flock(fd, fcntl.LOCK_UN)


def hold_shared(fd: int, *, patience: float) -> bool:
    """Hold a shared flock on the directory *fd*, waiting up to *patience* seconds.

    Only an exclusive holder blocks it: an age-based cleaner in the middle
    of that directory.  Returns False when it stays blocked.
    """
    deadline = monotonic() + patience
    while True:
        try:
            if _try(fd, fcntl.LOCK_SH):
                return True
        except OSError:
            return False
        if monotonic() >= deadline:
            return False
        sleep(0.01)


def flock_holders(st: os.stat_result) -> list[tuple[str, int]] | None:
    """Who holds a ``flock`` lock on the file *st* describes, by the kernel's lock table.

    Each holder as (``"READ"`` or ``"WRITE"``, the pid that took the lock:
    it may have exited since, while a process it handed the descriptor to
    holds the lock on).  None when ``/proc/locks`` cannot be read.  Taking
    no lock at all, it cannot make anyone else's try fail: the way to look
    at a lock that a manager may try in the same instant.  Exact for flock
    on Linux, but for the locks of processes in another pid namespace,
    which kernels before 5.14 leave out.
    """
    # The table names a file by "MAJOR:MINOR:INODE", the numbers in hex
    # (at least two digits) and the inode in decimal.
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}".encode()
    # The kernel writes the table a page at a time from a list that other
    # processes change meanwhile: one read can list an entry twice or miss
    # one.  Two reads in a row that agree are the answer.
    last: list[tuple[str, int]] | None = None
    for _ in range(_PROC_LOCKS_READS):
        try:
            with open(_PROC_LOCKS, "rb") as table:
                lines = table.read().splitlines()
        except OSError:
            return None
        holders = []
        for line in lines:
            # "7: FLOCK  ADVISORY  WRITE 1234 fe:00:2171429 0 EOF"; a process
            # waiting for the lock has "->" after the number, and holds nothing.
            fields = line.split()
            if len(fields) >= 6 and fields[1] == b"FLOCK" and fields[5] == key:
                holders.append((fields[3].decode(), int(fields[4])))
        holders.sort()
        if holders == last:
            break
        last = holders
    return holders


def holder_of(path: os.PathLike[str] | str) -> str:
    """Who holds an exclusive lock on *path*, for an error message: "process N" or so."""
    try:
        holders = flock_holders(os.stat(path, follow_symlinks=False))
    except OSError:
        holders = None
    pids = sorted({pid for mode, pid in holders or () if mode == "WRITE"})
    if not pids:
        return "another process"
    return ("process " if len(pids) == 1 else "processes ") + ", ".join(map(str, pids))


def refusal(root: os.PathLike[str] | str, path: str, error: OSError) -> Unavailable:
    """Why a lock on the directory *path* under *root* could not be had, with nothing retired."""
    if isinstance(error, BlockingIOError):
        return Unavailable(root, f"{path} is locked exclusively by {holder_of(path)}",
                           "Retry once it lets go (find it with `fuser` or in /proc/locks); "
                           "nothing was retired")
    if resources.shortage(error):
        return resources.unavailable(root, f"{path} could not be locked", error)
    return Unavailable(root, f"{path} could not be locked ({error.strerror})",
                       "Fix it and retry; nothing was retired")
