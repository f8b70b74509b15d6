"""Named sessions: one live owner per name, told by a kernel lock.

``Manager(root, session="chat-42")`` names the logical session it serves, so
that a process that restarts (a notebook kernel, a REPL, an agent's server)
can find the directory its previous incarnation was using.  Two managers
serving one session at once would hand out one directory under two sets of
rules, so the name is guarded by an exclusive ``flock`` on
``ROOT/sessions/<name>.lock``, taken without waiting and held for the
manager's lifetime.  The kernel releases it when its holder dies, so a crash
never leaves a session owned by nobody alive.

The owner writes its pid into the lock file for one purpose: to name it in
the error a second owner gets.  The pid is never used to decide whether the
owner lives (pids are reused); the lock alone says that.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import Final

from journal import ids
from journal.errors import SessionOwned
from sessiontemp.root import Root

__all__ = ["SESSIONS_DIR", "SessionLock", "check_name", "lock_name"]

SESSIONS_DIR: Final = "sessions"
_FILE_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# The pid and a newline; anything longer in the file was not written by us.
_PID_BYTES: Final = 32


def check_name(name: object) -> str:
    """Return *name* if it is a valid session name; ValueError naming the rule otherwise."""
    if not isinstance(name, str) or not ids.SESSION.fullmatch(name):
        raise ValueError(
            f"session name {name!r} is not valid: a name is 1 to 64 characters of A-Z, a-z, "
            "0-9, '.', '_' and '-', and is neither '.' nor '..'; choose another"
        )
    return name


def lock_name(name: str) -> str:
    """The name of a session's owner lock file inside ``ROOT/sessions``."""
    return f"{name}.lock"


class SessionLock:
    """The owner lock of one named session, held until :meth:`close`.

    :meth:`take` refuses with :class:`SessionOwned` while another process
    holds it.  Like every lock here it is given up only by closing its
    descriptor, never by ``LOCK_UN``: a forked child shares the open file
    description, and an unlock through its copy would free the parent's.
    """

    def __init__(self, name: str, fd: int, sessions_fd: int) -> None:
        self.name = name
        self.fd = fd
        self._sessions_fd = sessions_fd

    @classmethod
    def take(cls, root: Root, name: str) -> SessionLock:
        """Lock session *name* under *root* for this process, or raise :class:`SessionOwned`."""
        check_name(name)
        sessions_fd = root.open_private(SESSIONS_DIR)
        try:
            fd = os.open(lock_name(name), _FILE_FLAGS | os.O_CREAT, 0o600, dir_fd=sessions_fd)
        except BaseException:
            os.close(sessions_fd)
            raise
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                raise SessionOwned(
                    root.path, name, _read_pid(fd),
                    "Close that session's manager first, or use another session name",
                ) from None
            # For the error message of whoever comes next, nothing more.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            os.close(sessions_fd)
            raise
        return cls(name, fd, sessions_fd)

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def close(self) -> None:
        """Give the session up: the kernel frees the lock with the last descriptor.

        The file stays: unlinking it would let a newcomer lock a fresh file
        while a forked child still holds the old one.
        """
        for attribute in ("fd", "_sessions_fd"):
            fd = getattr(self, attribute)
            if fd >= 0:
                setattr(self, attribute, -1)
                os.close(fd)


def _read_pid(fd: int) -> int | None:
    """The pid the owner wrote into its lock file, None if there is none to read."""
    with contextlib.suppress(OSError):
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None
