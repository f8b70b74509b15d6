"""The sticky bit on the journal's files: what keeps an age-based cleaner off them.

systemd-tmpfiles' age clean never removes a regular file whose mode has
``S_ISVTX`` set (the XDG_RUNTIME_DIR convention); for a regular file the bit
means nothing else on Linux.  Without it, a ``d ROOT - - - AGE`` line would
take the journal, its -wal (committed events not yet checkpointed) and its
segments from a root that no process holds, and only their age would stop it.

SQLite makes its files itself, with the database's permission bits but
never this one, and deletes the -wal and -shm when its last connection
closes, so every writer marks a database's files once its connection has
read (which is when SQLite makes them).  The bit is set through an
``O_PATH`` descriptor and ``/proc/self/fd``: closing any other descriptor of
a database file would drop every POSIX lock this process's connections
hold on it, and closing an ``O_PATH`` one drops none.
"""

from __future__ import annotations

import os
import stat
from typing import Final

__all__ = ["SIDE_FILES", "mark", "mark_database"]

# The files SQLite keeps beside a database in WAL mode.
SIDE_FILES: Final = ("-wal", "-shm")


def mark(path: os.PathLike[str] | str) -> None:
    """Set the sticky bit on *path* if it is a regular file of ours that lacks it.

    Best effort: anything else at the name (a symlink is never followed),
    a file gone meanwhile, or a file system that refuses the change leaves
    it as it is, costing only the cleaner's protection.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                and not st.st_mode & stat.S_ISVTX):
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | stat.S_ISVTX)
    except OSError:
        pass
    finally:
        os.close(fd)


def mark_database(path: os.PathLike[str] | str) -> None:
    """Mark the database *path* and the -wal and -shm beside it (those that exist)."""
    name = os.fspath(path)
    mark(name)
    for suffix in SIDE_FILES:
        mark(name + suffix)
