"""Liveness from the kernel: the locks that say who is still alive.

Two kinds, both released by the kernel when their holder dies, so a crash
can never leave a lock that lies:

* a manager's liveness lock, a ``filelock.FileLock`` on
  ``ROOT/managers/<id>.lock``, held for the manager's lifetime;
* a shared ``flock`` on a generation directory itself, held by its manager
  and by every lease.  A lease's lock descriptor is passed to the command it
  runs, so the lock lives until the command exits even if the manager dies
  first.  systemd-tmpfiles probes the same lock and skips a held directory.

Pids and ages are never used to decide liveness: pids are reused, and a
command may legitimately run for days.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Final

import filelock

__all__ = ["hold_manager", "lock_shared", "probe_manager", "try_exclusive"]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _manager_lock(path: Path) -> filelock.FileLock:
    # thread_local=False: the lock belongs to the manager, not to whichever
    # thread opened it.  fallback_to_soft=False: a marker file says nothing
    # about liveness after a crash, so a file system without flock must fail.
    return filelock.FileLock(path, timeout=0, thread_local=False, fallback_to_soft=False)


def hold_manager(path: Path) -> filelock.FileLock:
    """Take the liveness lock of a new manager; it is never contended."""
    lock = _manager_lock(path)
    lock.acquire()
    return lock


def probe_manager(path: Path) -> filelock.FileLock | None:
    """Take a manager's liveness lock if its holder is gone.

    Returns the held lock (the manager is dead; release it when done), or
    None while the manager lives.
    """
    lock = _manager_lock(path)
    try:
        lock.acquire()
    except filelock.Timeout:
        return None
    return lock


def lock_shared(dir_fd: int, name: str) -> int:
    """Open the directory *name* under *dir_fd* and hold a shared lock on it.

    Returns the descriptor that carries the lock; closing it (in every
    process that shares it) releases the lock.
    """
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        # Non-blocking: only a remover holds it exclusively, and a generation
        # being removed must not be handed out.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def try_exclusive(fd: int) -> bool:
    """Take an exclusive lock on *fd* if nobody else holds any lock on it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def is_locked(dir_fd: int, name: str) -> bool:
    """Whether anyone holds a lock on the directory *name* (probing, then letting go)."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        return not try_exclusive(fd)
    finally:
        os.close(fd)
