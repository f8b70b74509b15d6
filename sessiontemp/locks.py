"""Liveness from the kernel: the locks that say who is still alive.

All ``flock`` locks, released by the kernel when their holder dies, so a
crash can never leave a lock that lies:

* a manager's liveness lock, an exclusive lock on ``ROOT/managers/<id>.lock``
  held for the manager's lifetime (:class:`Liveness`);
* a shared lock on a generation directory itself, held by its manager and
  by every lease.  A lease's lock descriptor is passed to the command it
  runs, so the lock lives until the command exits even if the manager dies
  first;
* a shared lock on the root directory, held by every live manager
  (:func:`hold_root`), and on each of the root's own directories, held by
  every open root (:class:`sessiontemp.root.Root`);
* the exclusive ``ROOT/recovery.lock`` of the one recovery pass running
  (:class:`RecoveryLock`).

systemd-tmpfiles probes every subdirectory it would age-clean with
``flock(LOCK_EX | LOCK_NB)`` and skips the whole subtree of one it cannot
lock: the root's lock keeps the root safe from a line on its parent while
any manager lives, the directories' locks keep the lock files, artifacts
and segments safe from a line on the root itself, and a generation's lock
keeps the generation safe while any command uses it.  It never probes the
directory its line names nor a plain file: the root's plain files carry the
sticky bit instead (:data:`sessiontemp.root.FILE_MODE`).

A lock is only ever given up by closing its descriptor, never by
``LOCK_UN``: a forked child shares the open file description, and an
unlock through its copy would free the parent's lock behind its back.

Pids and ages are never used to decide liveness: pids are reused, and a
command may legitimately run for days.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from time import monotonic, sleep
from typing import Final

from journal.errors import Unavailable
from sessiontemp import resources
from sessiontemp.root import (
    DIR_FLAGS,
    FILE_MODE,
    RECOVERY_LOCK,
    Root,
    check_entry,
    hold_shared,
    lock_file_name,
    os_error,
    path_of,
)

__all__ = [
    "PROBE_PATIENCE",
    "Liveness",
    "RecoveryLock",
    "flock_holders",
    "hold_root",
    "holder_of",
    "is_locked",
    "lock_shared",
    "probe_liveness",
    "refusal",
    "try_exclusive",
]

_FILE_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
# How long an exclusive lock on a directory is waited out by one that wants a
# shared lock on it: a probe's lasts an instant (see lock_shared).
PROBE_PATIENCE: Final = 2.0
# The kernel's table of every lock held on the system.
_PROC_LOCKS: Final = "/proc/locks"


class Liveness:
    """A manager's liveness lock file, created and held under ``ROOT/managers``.

    Everything is relative to the held ``managers`` descriptor, never by
    path.  If the file is deleted while the manager lives (by hand, or by
    an age-based cleaner), :meth:`check` notices and puts a new, already
    locked one in its place.
    """

    def __init__(self, managers_fd: int, manager: str) -> None:
        self._dir = managers_fd
        self.name = lock_file_name(manager)
        # A new manager's file: no recovery looks for it until the journal
        # names the manager, which happens only after this.  Sticky: an age
        # cleaner must never take a live manager's lock file, however old.
        try:
            fd = os.open(self.name, _FILE_FLAGS | os.O_CREAT, FILE_MODE, dir_fd=managers_fd)
        except OSError as e:
            raise os_error(path_of(managers_fd, self.name), e, "created") from None
        try:
            # Exactly FILE_MODE whatever the umask: a probe must be able to open it.
            os.fchmod(fd, FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._changed = os.fstat(fd).st_ctime_ns
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def untouched(self) -> bool:
        """Whether the lock file surely still stands where it was put: one fstat.

        Deleting the file (alone, or with its directory) or renaming
        another over it leaves the inode held here with no link; renaming
        or linking it elsewhere changes its ctime.  False means only "look
        by name" (:meth:`check`), never that it is gone.
        """
        st = os.fstat(self.fd)
        return st.st_nlink > 0 and st.st_ctime_ns == self._changed

    def check(self) -> bool:
        """Put the lock file back if it is gone or replaced; True when it had to."""
        mine = os.fstat(self.fd)
        try:
            named = os.stat(self.name, dir_fd=self._dir, follow_symlinks=False)
            if (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino):
                self._changed = mine.st_ctime_ns
                return False
        except FileNotFoundError:
            pass
        # Made and locked under another name, then renamed into place: a
        # recovery that probes the name must never find it unlocked.
        spare = f".{self.name}.{secrets.token_hex(4)}"
        fd = os.open(spare, _FILE_FLAGS | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=self._dir)
        try:
            os.fchmod(fd, FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(spare, self.name, src_dir_fd=self._dir, dst_dir_fd=self._dir)
            changed = os.fstat(fd).st_ctime_ns
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(spare, dir_fd=self._dir)
            raise
        old, self.fd, self._changed = self.fd, fd, changed
        os.close(old)
        return True

    def moved(self, managers_fd: int) -> None:
        """Use *managers_fd* from now on: ``managers`` was made again after a removal.

        The next :meth:`check` finds no file there and puts a locked one in.
        """
        self._dir = managers_fd

    def unlink(self) -> None:
        """Remove the lock file (only once the manager's end is journaled)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name, dir_fd=self._dir)

    def close(self) -> None:
        """Give the lock up: the kernel frees it with the last descriptor."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def probe_liveness(managers_fd: int, manager: str) -> int | None:
    """Take a manager's liveness lock if its holder is gone.

    Returns the descriptor holding the lock (the manager is dead or has
    finished closing; close it when done), or None while the manager lives.
    Raises FileNotFoundError when there is no lock file: opening it would
    create one and always win its lock, declaring dead a manager that may
    well be alive; and UnsafeRoot when something else stands at its name.
    """
    name = lock_file_name(manager)
    while True:
        # O_NONBLOCK: a FIFO planted at the name must not hang the probe.
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=managers_fd)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise os_error(path_of(managers_fd, name), e, "opened") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                check_entry(path_of(managers_fd, name), st, directory=False)
        except BaseException:
            os.close(fd)
            raise
        if not try_exclusive(fd):
            os.close(fd)
            return None
        # Opened, then deleted and put back by its manager (Liveness.check),
        # which let go of the old file only once it held the new one: the
        # lock won is that of a file no longer named.  Look again by name.
        try:
            if still_named(managers_fd, name, fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


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


class RecoveryLock:
    """``ROOT/recovery.lock`` held exclusively: one recovery pass at a time per root.

    Opened relative to the root's descriptor, never by path, and never
    through a symlink (``O_NOFOLLOW``): a link planted at the name would
    otherwise have the lock file made, or truncated, wherever it points.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pid = os.getpid()

    @classmethod
    def take(cls, root: Root, *, wait: bool) -> RecoveryLock | None:
        """Lock the root's recovery lock, waiting for another pass when *wait*; None if busy.

        Raises :class:`UnsafeRoot` when something other than our own
        regular file stands at the name, and :class:`~sessiontemp.RootUnusable` (or
        :class:`~sessiontemp.RootReadOnly`) when it cannot be made or opened.
        """
        path = root.recovery_lock_path
        try:
            # O_NONBLOCK: never hang on a FIFO planted at the name.
            fd = os.open(RECOVERY_LOCK, _FILE_FLAGS | os.O_CREAT | os.O_NONBLOCK, FILE_MODE,
                         dir_fd=root.fd)
        except OSError as e:
            raise os_error(path, e, "opened") from None
        try:
            st = os.fstat(fd)
            check_entry(path, st, directory=False)
            if stat.S_IMODE(st.st_mode) != FILE_MODE:
                # Made by an earlier version (not sticky), or under a umask.
                os.fchmod(fd, FILE_MODE)
            try:
                # Blocking when waiting: interrupted by a signal, the wait is
                # resumed once its handler returns (PEP 475).
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise os_error(path, e, "locked") from None
                os.close(fd)
                return None
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return cls(fd)

    def release(self) -> None:
        """Let the next pass run.

        The one lock here given up by an unlock before the close: a child
        forked meanwhile (by another thread) shares the open file
        description, and would otherwise keep every other pass waiting until
        it exits.  A forked child's copy only closes: the lock is not its own.
        """
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        try:
            if self._pid == os.getpid():
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def lock_shared(dir_fd: int, name: str, *, patience: float = PROBE_PATIENCE) -> int:
    """Open the directory *name* under *dir_fd* and hold a shared lock on it.

    Returns the descriptor that carries the lock; closing it (in every
    process that shares it) releases the lock.  An exclusive lock held on
    it is waited out for up to *patience* seconds, the name opened afresh
    each time; still held then, BlockingIOError.
    """
    deadline = monotonic() + patience
    while True:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        try:
            # Non-blocking: a generation being removed must not be handed out.
            # Its remover holds the exclusive lock until the name is gone, so
            # the next open by name fails (ENOENT); a probe (systemd-tmpfiles,
            # an older journal-inspect) lets go within moments, and a single
            # try that met one would take a live directory for a lost one.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
            if monotonic() >= deadline:
                raise
        except BaseException:
            os.close(fd)
            raise
        sleep(0.005)


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
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        return not try_exclusive(fd)
    finally:
        os.close(fd)


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
