"""Liveness from the kernel: the lock files and directory locks that say who is still alive.

Each is a ``flock`` taken through :mod:`sessiontemp._kernel.locks`, released by the
kernel when its holder dies, so a crash can never leave a lock that lies:

* a manager's liveness lock, an exclusive lock on ``ROOT/managers/<id>.lock``
  held for the manager's lifetime (:class:`LivenessLock`), and taken by a
  recovery pass only once its manager is gone (:func:`take_liveness`);
* a shared lock on a generation directory itself, held by its manager and
  by every lease (:func:`lock_shared`), and one on its work directory, the
  one its commands get (:func:`lock_work`), held by the same.  A lease's
  lock descriptors are passed to the command it runs, so the locks live
  until the command exits even if the manager dies first.  The
  generation's lock is the one that says it is in use (a remover takes it
  exclusively); the work directory's only keeps age cleaners out;
* a shared lock on the root directory, held by every live manager
  (:func:`sessiontemp._kernel.locks.hold_root`), and on each of the root's own
  directories, held by every open root (:class:`sessiontemp._kernel.root.Root`);
* the exclusive ``ROOT/recovery.lock`` of the one recovery pass running
  (:class:`RecoveryLock`).

Every file and directory here is opened relative to a descriptor the root
holds, never by path (see :mod:`sessiontemp._kernel.locks` for why ``filelock``,
which locks by path, is not used).

systemd-tmpfiles probes every subdirectory it would age-clean with
``flock(LOCK_EX | LOCK_NB)`` and skips the whole subtree of one it cannot
lock: the root's lock keeps the root safe from a line on its parent while
any manager lives, the directories' locks keep the lock files, artifacts
and segments safe from a line on the root itself, and a generation's lock
keeps the generation safe while any command uses it.  It never probes the
directory its line names nor a plain file: the root's plain files carry the
sticky bit instead (:data:`sessiontemp._kernel.root.FILE_MODE`), and a command's
files are one level below the generation, in its locked work directory, so
that a line naming the generation (or a glob over the root) meets a lock
before any of them.

A lock is only ever given up by closing its descriptor, never by
``LOCK_UN``: a forked child shares the open file description, and an
unlock through its copy would free the parent's lock behind its back.
"""

from __future__ import annotations

import contextlib
import os
import stat
from time import monotonic, sleep
from typing import Final

from sessiontemp._kernel import locks
from sessiontemp._kernel.locks import PROBE_PATIENCE, still_named
from sessiontemp._kernel.root import (
    DIR_FLAGS,
    FILE_MODE,
    WORK_DIR,
    Root,
    check_entry,
    lock_file_name,
    os_error,
    path_of,
)

__all__ = [
    "LivenessLock",
    "RecoveryLock",
    "is_locked",
    "lock_shared",
    "lock_work",
    "take_liveness",
]

_FILE_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


class LivenessLock:
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
            # A new file nobody else can have opened yet: busy is impossible,
            # and raised if it ever happens.
            if not locks.try_exclusive(fd):
                raise locks.busy(path_of(managers_fd, self.name))
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
        spare = f".{self.name}.{os.urandom(4).hex()}"
        fd = os.open(spare, _FILE_FLAGS | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=self._dir)
        try:
            os.fchmod(fd, FILE_MODE)
            # O_EXCL made it: nobody else has it open.
            if not locks.try_exclusive(fd):
                raise locks.busy(path_of(self._dir, spare))
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


def take_liveness(managers_fd: int, manager: str) -> int | None:
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
        if not locks.try_exclusive(fd):
            os.close(fd)
            return None
        # Opened, then deleted and put back by its manager (LivenessLock.check),
        # which let go of the old file only once it held the new one: the
        # lock won is that of a file no longer named.  Look again by name.
        try:
            if still_named(managers_fd, name, fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


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
            fd = os.open(path.name, _FILE_FLAGS | os.O_CREAT | os.O_NONBLOCK, FILE_MODE,
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
                locked = locks.lock_exclusive(fd, wait=wait)
            except OSError as e:
                raise os_error(path, e, "locked") from None
            if not locked:
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
                locks.unlock(fd)
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
            if locks.try_shared(fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if monotonic() >= deadline:
            raise locks.busy(path_of(dir_fd, name))
        sleep(0.005)


def lock_work(generation_fd: int) -> int:
    """Hold a shared lock on the work directory (``WORK_DIR``) of a generation, made if missing.

    *generation_fd* is the generation's own descriptor, locked by the
    caller, so no remover can take the generation meanwhile.  The work
    directory is made (0700) when it is missing: in a generation an
    earlier version made, or one an age cleaner emptied while nothing held
    it.  A generation removed from under *generation_fd* gives
    FileNotFoundError, as its own lock would.
    """
    made = False
    for _ in range(3):
        try:
            fd = lock_shared(generation_fd, WORK_DIR)
        except FileNotFoundError:
            # Missing, or removed between its mkdir and the lock (an age
            # cleaner with age 0 takes an empty directory nobody holds).
            try:
                os.mkdir(WORK_DIR, 0o700, dir_fd=generation_fd)
                made = True
            except FileExistsError:
                pass
            continue
        if made:
            try:
                # mkdir's mode passes through the umask.
                os.fchmod(fd, 0o700)
            except BaseException:
                os.close(fd)
                raise
        return fd
    return lock_shared(generation_fd, WORK_DIR)


def is_locked(dir_fd: int, name: str) -> bool:
    """Whether anyone holds a lock on the directory *name* (probing, then letting go)."""
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        return not locks.try_exclusive(fd)
    finally:
        os.close(fd)


