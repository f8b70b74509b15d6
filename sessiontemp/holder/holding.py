"""Starting a root's session holder, and asking it: what ``sessiontemp session`` calls.

:func:`start` (``session start``) makes and checks the root, starts the
holder if none answers (:func:`launch`), and asks it to make a process an
owner; :func:`request` sends ``rotate``, ``end`` and ``list`` to the one
that runs.  :func:`main` is the holder's process itself: daemonized (the
launcher's child forks and leaves, so the holder is in a session of its
own, reparented, with its standard streams on ``/dev/null`` and ``/`` as
its working directory, started isolated with ``-I``), it takes
``ROOT/holder.lock`` (another holder holding it: it leaves, that one
serves), replaces whatever socket a dead holder left, binds
``ROOT/holder.sock`` through the root's descriptor (any root length: an
``AF_UNIX`` path holds 107 bytes), says it is ready, and serves
(:class:`sessiontemp.holder.serve.Holder`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
from pathlib import Path
from typing import Any, Final

from sessiontemp import sessions as _sessions
from sessiontemp._kernel.processes import python_child
from sessiontemp._kernel.root import DIR_FLAGS, FILE_MODE, Root, check_owned_private
from sessiontemp._kernel.where import chosen_root
from sessiontemp.holder.client import LOCK_NAME, SOCKET_NAME, NoSession, connect
from sessiontemp.holder.serve import Holder
from sessiontemp.journal.errors import Unavailable
from sessiontemp.space import budget

__all__ = ["NoSession", "launch", "main", "request", "start"]

# Attempts at reaching a holder for `session start`, each starting one if none answers.
_ATTEMPTS: Final = 20


def main(argv: list[str]) -> None:
    """The holder process: ``ROOT READY_FD``; started by :func:`launch`, never by hand."""
    root, ready = Path(argv[0]), int(argv[1])
    # Daemonized: the launcher waits for this first process, which leaves at
    # once; the holder goes on in a new session with no terminal, reparented.
    if os.fork() > 0:
        os._exit(0)
    try:
        root_fd = os.open(root, DIR_FLAGS)
    except OSError:
        os._exit(1)
    try:
        check_owned_private(root, os.fstat(root_fd))
        lock = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                       FILE_MODE & 0o7777, dir_fd=root_fd)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another holder lives: its socket is the one to use.
            return
        os.fchmod(lock, FILE_MODE)
        # The lock is ours: whatever socket file is there is a dead holder's.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME, dir_fd=root_fd)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        previous = os.umask(0o077)
        try:
            listener.bind(f"/proc/self/fd/{root_fd}/{SOCKET_NAME}")
        finally:
            os.umask(previous)
        listener.listen(128)
        mine = os.stat(SOCKET_NAME, dir_fd=root_fd, follow_symlinks=False)
        os.write(ready, b"r")
        os.close(ready)
        try:
            Holder(root, listener).serve()
        finally:
            # Gone first, so that no client connects to a holder that is leaving.
            with contextlib.suppress(OSError):
                st = os.stat(SOCKET_NAME, dir_fd=root_fd, follow_symlinks=False)
                if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                    os.unlink(SOCKET_NAME, dir_fd=root_fd)
            listener.close()
            os.close(lock)
    finally:
        os.close(root_fd)


# The holder's process (sessiontemp._kernel.processes.python_child says how it is started).
_CHILD: Final = "from sessiontemp.holder.holding import main\nmain(sys.argv[2:])\n"


def launch(root: Path) -> None:
    """Start a holder for *root* (made and checked already) and wait until it listens.

    Returns also when the holder ended at once because another one holds
    the root (the caller connects to that one).
    """
    import attr
    import attrs
    import sqlite_utils
    import structlog

    read, write = os.pipe()
    try:
        command, env = python_child(_CHILD, (attrs, attr, sqlite_utils, structlog),
                                    os.fspath(root), str(write))
        child = subprocess.Popen(
            command, pass_fds=(write,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd="/", start_new_session=True, env=env)
        os.close(write)
        write = -1
        child.wait()
        # One byte once it listens; end of file if it ended (another holder lives).
        os.read(read, 1)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


def request(root: os.PathLike[str] | str | None, message: dict[str, Any], *,
            session: str) -> dict[str, Any]:
    """Send *message* to the holder of *root* (``--root`` rule); its reply.

    Raises :class:`~sessiontemp.holder.client.NoSession` when no holder serves the
    root, and the holder's refusal as :class:`Unavailable`.
    """
    where = chosen_root(root)
    connection = connect(where)
    if connection is None:
        raise NoSession(where, session, "no session holder is running for this root")
    with connection:
        try:
            reply, fds = connection.call(message)
        except (ConnectionResetError, BrokenPipeError):
            raise NoSession(where, session, "its holder ended") from None
    for fd in fds:
        os.close(fd)
    return _checked(reply, where, session)


def _checked(reply: dict[str, Any], root: Path, session: str) -> dict[str, Any]:
    if reply.get("ok"):
        return reply
    if reply.get("kind") == "missing":
        raise NoSession(root, session, str(reply.get("reason")))
    raise Unavailable(root, str(reply.get("reason")), str(reply.get("fix")))


def start(name: str, *, root: os.PathLike[str] | str | None = None, owner: int | None = None,
          resume_window: float | None = None, max_bytes: int | None = None,
          max_inodes: int | None = None, min_free_bytes: int | None = None
          ) -> dict[str, Any]:
    """Start (or join) session *name* for process *owner* (default: the caller's parent).

    Starts the root's holder if none lives (making the root, as a Manager
    does); returns the holder's reply: ``session``, ``root``, ``resumed``,
    ``holder_pid``, ``directory``.  *resume_window* (seconds) and the
    limits (as :class:`~sessiontemp.Manager` takes them) apply when this
    start opens the session.
    """
    name = _sessions.check_name(name)
    if resume_window is not None:
        _sessions.check_window(resume_window)
    limits = budget.check_limits(max_bytes, max_inodes, min_free_bytes,
                                 budget.DEFAULT_MEASURE_EVERY)
    # Absolute: the holder runs in / and the reply names the root.
    where = Path(os.path.abspath(chosen_root(root)))
    message = {"op": "start", "session": name, "owner": os.getppid() if owner is None else owner,
               "window": resume_window,
               "limits": {"max_bytes": limits.max_bytes, "max_inodes": limits.max_inodes,
                          "min_free_bytes": limits.min_free_bytes}}
    Root.open(where).close()
    for _ in range(_ATTEMPTS):
        connection = connect(where)
        if connection is None:
            launch(where)
            continue
        with connection:
            try:
                reply, fds = connection.call(message)
            except (ConnectionResetError, BrokenPipeError):
                # A holder that was leaving as this connected: the next one serves.
                continue
        for fd in fds:
            os.close(fd)
        return _checked(reply, where, name)
    raise Unavailable(where, "no session holder could be started for it",
                      "See whether the root's file system is full or read-only, and "
                      f"whether {where / SOCKET_NAME} can be made; then start the session again")

