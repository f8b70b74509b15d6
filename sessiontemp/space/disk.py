"""The root's file system: its free space, the floor kept free, and whether it is RAM.

Asked on every acquire, so each question costs one system call:
``statvfs`` for the space (a few microseconds).  The file-system type is
asked once per manager, at its open: ``/proc/self/mountinfo`` names it by
the ``major:minor`` a ``stat`` gives, so no path is matched against mount
points, which a bind mount or a symlink would fool.

The default floor, :func:`default_min_free`, is 1% of the file system,
capped at 1 GiB: a full build box's 145 GB disk keeps 1 GiB free, a 2 GiB
tmpfs keeps 20 MiB, and nothing as small as a test's file system is ever
refused outright.  It is what ``df`` users call "nearly full" and what a
command needs to fail cleanly rather than half-way.
"""

from __future__ import annotations

import os
from typing import Final

import attrs

__all__ = ["MAX_DEFAULT_FLOOR", "RAM_TYPES", "Space", "default_min_free", "is_ram", "space_of"]

# The default floor never exceeds this, however large the file system.
MAX_DEFAULT_FLOOR: Final = 1 << 30
# File systems whose pages are memory: filling them pushes the machine
# into reclaim (and, without swap, the OOM killer) rather than ENOSPC alone.
RAM_TYPES: Final = frozenset({"tmpfs", "ramfs"})


@attrs.frozen
class Space:
    """A file system's size and the space free to an unprivileged user, in bytes."""

    total: int
    free: int
    inodes_free: int


def space_of(fd: int) -> Space:
    """The space of the file system the descriptor *fd* lies on."""
    st = os.statvfs(fd)
    # f_bavail, not f_bfree: what a non-root command can still write.
    return Space(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, st.f_favail)


def default_min_free(total: int) -> int:
    """The floor kept free on a file system of *total* bytes: 1%, at most 1 GiB."""
    return min(total // 100, MAX_DEFAULT_FLOOR)


def is_ram(fd: int) -> bool:
    """Whether the file system *fd* lies on is RAM-backed (tmpfs, ramfs)."""
    return _type_of(os.fstat(fd).st_dev) in RAM_TYPES


def _type_of(device: int) -> str | None:
    """The type ``/proc/self/mountinfo`` gives the file system of *device*, or None."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                # "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
                fields = line.split()
                if len(fields) > 2 and fields[2] == wanted and " - " in line:
                    return line.split(" - ", 1)[1].split()[0]
    except OSError:
        return None
    return None
