"""Room kept on the root's file system for the journal to record what frees space.

Removing a directory frees space, but its removal is journaled first
(``removal.started`` before the rename), and so is a manager's close and a
recovery pass: on a file system filled to the last block, each of those
commits fails, and nothing could ever free anything.  So every root keeps
a reserve file, ``ROOT/space.reserve``, of :data:`RESERVE_BYTES` allocated
blocks; before a removal, a close or a recovery pass, :func:`make_room`
truncates it when the file system is nearly full, and the commits that
follow (SQLite's WAL pages, a checkpoint) use the blocks it gave back.
Once space is free again, :func:`refill` allocates it anew.

The file is one of the root's own (private, sticky like the journal, so an
age cleaner leaves it, and checked like them when a root is opened).  It is
shared by every manager of the root: any of them may release it, and any
refills it.

A refusal for space (:class:`~sessiontemp.LowDisk`) is journaled too, and
on a full disk it borrows from the reserve (:func:`lend`): a slice of
:data:`LOAN_BYTES` at a time, and never its last half, which stays for the
removals that free space.  Past that, a refusal is still raised, and only
logged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from typing import Final

from sessiontemp._kernel.root import FILE_MODE, RESERVE
from sessiontemp.space.disk import space_of

__all__ = ["LOAN_BYTES", "LOW", "RESERVE_BYTES", "lend", "make_room", "refill"]

# What the reserve holds: some sixty 4 KiB pages, which a few commits of a
# removal, a close and a checkpoint of a small state fit in, and no more
# than a small fraction of any file system a root is worth keeping on.
RESERVE_BYTES: Final = 256 << 10
# Below this much free space, the reserve is given back before a removal.
LOW: Final = 2 * RESERVE_BYTES
# What one refusal's record may take: its WAL frames (a few 4 KiB pages,
# with their headers) and the page a checkpoint may add to the journal.
LOAN_BYTES: Final = 32 << 10
_FLAGS: Final = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK: Final = 64 << 10


def make_room(root_fd: int) -> bool:
    """Give the reserve's blocks back if the root's file system is nearly full; True if done.

    One ``statvfs`` when there is room (the usual case); never raises: a
    reserve that cannot be released leaves the caller's commit to fail as
    it would have, and say so.
    """
    free = _free(root_fd)
    if free is None or free >= LOW:
        return False
    return _shrink(root_fd, lambda held: 0 if held else None)


def lend(root_fd: int) -> bool:
    """Room for one small record on a nearly full disk; True if it is there.

    There when :data:`LOAN_BYTES` are free already; otherwise the reserve's
    last :data:`LOAN_BYTES` are given back, unless that would leave it less
    than half of :data:`RESERVE_BYTES`.  Never raises.
    """
    free = _free(root_fd)
    if free is None:
        return False
    if free >= LOAN_BYTES:
        return True
    return _shrink(root_fd, lambda held: (
        held - LOAN_BYTES if held - LOAN_BYTES >= RESERVE_BYTES // 2 else None))


def _free(root_fd: int) -> int | None:
    """The root's free space; None when it cannot be known (the reserve is then left whole)."""
    try:
        return space_of(root_fd).free
    except OSError:
        return None


def _shrink(root_fd: int, to: Callable[[int], int | None]) -> bool:
    """Truncate the reserve to ``to(held)`` bytes (None: leave it); True if done."""
    try:
        fd = os.open(RESERVE, _FLAGS, dir_fd=root_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        size = to(min(st.st_size, st.st_blocks * 512))
        if size is None:
            return False
        # Truncating gives back the blocks past the new end, and no others.
        os.ftruncate(fd, size)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def refill(root_fd: int, floor: int) -> bool:
    """Allocate the reserve again if it is short and space allows; True if it is whole.

    Space allows when, with the reserve allocated, the free space stays
    above *floor* (the manager's ``min_free_bytes``) and :data:`LOW`: a
    refill never makes a nearly full disk refuse a command.
    """
    try:
        fd = os.open(RESERVE, _FLAGS | os.O_CREAT, FILE_MODE, dir_fd=root_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            # Made through the umask, which may have taken bits away.
            os.fchmod(fd, FILE_MODE)
        if st.st_blocks * 512 >= RESERVE_BYTES:
            return True
        if space_of(fd).free - RESERVE_BYTES < max(floor, LOW):
            return False
        _allocate(fd)
        return True
    except OSError:
        # Full meanwhile (another writer won the race): nothing half-kept.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        return False
    finally:
        os.close(fd)


def _allocate(fd: int) -> None:
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        # A file system without fallocate: zeros written are blocks allocated.
        block = b"\0" * _CHUNK
        os.lseek(fd, 0, os.SEEK_SET)
        for _ in range(RESERVE_BYTES // _CHUNK):
            os.write(fd, block)
        os.fsync(fd)
