"""The session holder's client: ``sessiontemp run --session NAME`` and ``sessiontemp shell``.

Every command a harness runs in a session starts a process of this, so it
is small: it imports the standard library's ``_socket``, json and signals,
the library's error classes, :mod:`sessiontemp._kernel.spawn`,
:mod:`sessiontemp._kernel.where` and :mod:`sessiontemp.cli.console`, and none of the
journal's other modules, its store, SQLite, attrs, nor even typing, pathlib,
tempfile or the socket module (each of those cost more than this module's
own work; ``tools/bench_startup.py`` measures the whole start).

It asks the holder (:mod:`sessiontemp.holder.serve`) serving the root for a
lease on the session's current directory, receives the lease's locks as
descriptors (``SCM_RIGHTS``), and starts the command exactly as ``sessiontemp
run`` does (:func:`sessiontemp._kernel.spawn.start_and_wait`) with those descriptors
inherited: the directory is held by the kernel for as long as the command
(or anything it hands the descriptors to) runs, whatever becomes of this
process or of the holder.  The connection stays open while the command
runs; its end (the client's exit or death) releases the lease.

Trust: the holder's socket lives in the root, which is the user's and 0700,
so no other user reaches it.  Before anything is sent, the root is checked
(ours, private, not a link), the socket file is checked (a socket, ours,
private), and the process listening on it must be of our uid (its
``SO_PEERCRED``): a socket planted by anyone else is refused, never used.
A socket whose holder was killed refuses connections: that is a root with
no live session, said as such.  The socket's path is reached through the
root's descriptor (``/proc/self/fd/N/holder.sock``): a root of any length
works, where an ``AF_UNIX`` path holds at most 107 bytes.
"""

from __future__ import annotations

import _socket
import json
import os
import stat
import sys

from sessiontemp._kernel.where import HOLDER_LOCK, HOLDER_SOCKET, root_text
from sessiontemp.journal.errors import (
    CommandNotStarted,
    SessionTempError,
    Unavailable,
    UnsafeRoot,
)

# Checkers take the name as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType
    from typing import Any, Final

__all__ = ["AGENT_SESSION_VARIABLE", "LOCK_NAME", "SESSION_VARIABLE", "SOCKET_NAME",
           "Connection", "NoSession", "Refused", "connect", "entry", "handles", "main",
           "run_in_session", "session_of_environment", "shell_command"]

SOCKET_NAME: Final = HOLDER_SOCKET
LOCK_NAME: Final = HOLDER_LOCK
SESSION_VARIABLE: Final = "SESSIONTEMP_SESSION"
# The agent CLI's own variable naming its session (Claude Code).
AGENT_SESSION_VARIABLE: Final = "CLAUDE_CODE_SESSION_ID"
# The largest message either side sends (a `session list` of many sessions).
MESSAGE_BYTES: Final = 1 << 20
_TEMP_VARIABLES: Final = ("TMPDIR", "TMP", "TEMP")
# Longest label given to a lease (as sessiontemp.run's): a label is for people.
_LABEL_LIMIT: Final = 1000
_PROG: Final = "sessiontemp"
# Refused for space: EX_TEMPFAIL, as `sessiontemp run` exits.
_SPACE_STATUS: Final = 75


class NoSession(Unavailable):
    """No holder serves the root, or it serves no live session of that name.

    ``session`` is the name, ``path`` the root.  The command was not started.
    """

    def __init__(self, root: os.PathLike[str] | str, session: str, reason: str) -> None:
        self.session = session
        super().__init__(root, f"no live session {session!r} ({reason})",
                         f"Start it first with `{_PROG} session start {session}"
                         f"{_root_option(root)}`")


class Refused(Unavailable):
    """The holder refused the lease: ``status`` is the exit status to report (75 for space)."""

    def __init__(self, root: os.PathLike[str] | str, reason: str, fix: str,
                 status: int) -> None:
        self.status = status
        super().__init__(root, reason, fix)


def _root_option(root: os.PathLike[str] | str) -> str:
    import shlex

    return f" --root {shlex.quote(os.fspath(root))}"


class Connection:
    """A connection to the holder serving a root, its peer checked.

    Messages are JSON objects, one per packet (``SOCK_SEQPACKET``); a reply
    may carry descriptors.
    """

    def __init__(self, sock: _socket.socket, root: str, holder_pid: int) -> None:
        self.sock = sock
        self.root = root
        self.holder_pid = holder_pid

    def send(self, message: dict[str, Any]) -> None:
        self.sock.send(json.dumps(message).encode())

    def call(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        """Send *message*; the reply and the descriptors it carried (the caller closes them).

        A holder that ends before it replies (killed, or exiting) is
        :class:`ConnectionResetError`.
        """
        self.send(message)
        # Close-on-exec from the start: a descriptor is passed on on purpose only.
        data, ancillary, _, _ = self.sock.recvmsg(
            MESSAGE_BYTES, _socket.CMSG_SPACE(4 * 4), _socket.MSG_CMSG_CLOEXEC)
        fds = [int.from_bytes(payload[i:i + 4], sys.byteorder)
               for level, kind, payload in ancillary
               if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
               for i in range(0, len(payload) - len(payload) % 4, 4)]
        if not data:
            for fd in fds:
                os.close(fd)
            raise ConnectionResetError(f"the holder of {self.root} ended before it replied")
        reply: dict[str, Any] = json.loads(data)
        return reply, fds

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def connect(root: os.PathLike[str] | str) -> Connection | None:
    """A checked connection to the holder serving *root*; None when no holder lives there.

    None for a root, or a socket, that does not exist, and for a socket
    whose holder is gone (connection refused).  Raises :class:`UnsafeRoot`
    for a root or socket that is not this user's and private, or a peer of
    another uid: such a socket is never used.
    """
    path = os.fspath(root)
    uid = os.getuid()
    try:
        # O_PATH: needs no read access; O_NOFOLLOW: never through a link.
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UnsafeRoot(path, f"cannot be used as a root ({e.strerror})",
                         "Pass the directory itself (not a link to it) as the root") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != uid or st.st_mode & 0o077:
            raise UnsafeRoot(path, f"is owned by uid {st.st_uid} with mode "
                             f"{stat.S_IMODE(st.st_mode):04o}, not this user's (uid {uid}) "
                             "and private", "Use a root of your own (0700)")
        try:
            found = os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        where = os.path.join(path, SOCKET_NAME)
        if not stat.S_ISSOCK(found.st_mode) or found.st_uid != uid or found.st_mode & 0o077:
            raise UnsafeRoot(where, f"is not a private socket of this user (uid {uid}): "
                             f"uid {found.st_uid}, mode {stat.filemode(found.st_mode)}; it "
                             "is not trusted", f"Find out who put it there, remove it, then "
                             f"start the session again (`{_PROG} session start NAME`)")
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
        try:
            sock.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
            peer = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        except (ConnectionRefusedError, FileNotFoundError):
            # A killed holder's socket: nobody listens.  The next `session
            # start` replaces it; nothing is trusted from it.
            sock.close()
            return None
        except BaseException:
            sock.close()
            raise
        pid = int.from_bytes(peer[0:4], sys.byteorder)
        peer_uid = int.from_bytes(peer[4:8], sys.byteorder)
        if peer_uid != uid:
            sock.close()
            raise UnsafeRoot(where, f"is served by process {pid} of uid {peer_uid}, not of this "
                             f"user (uid {uid}); it is not trusted", "Find out who put it "
                             "there, remove it, then start the session again "
                             f"(`{_PROG} session start NAME`)")
        return Connection(sock, path, pid)
    finally:
        os.close(fd)


def run_in_session(command: Sequence[str], *, session: str,
                   root: os.PathLike[str] | str | None = None) -> int:
    """Run *command* in live session *session*'s current directory; its exit status.

    As :func:`sessiontemp.run.run_command` runs a command, under a lease of
    the session taken from its holder; the directory stays when the command
    exits.  Raises :class:`NoSession` when no holder serves *root* (``--root``
    rule: :func:`sessiontemp._kernel.where.chosen_root`) or it has no live session
    of that name (nothing is started then), :class:`UnsafeRoot` for a root
    or socket that is not trusted, the holder's refusal
    (:class:`Unavailable`: a sealed session, a directory over its budget),
    and :class:`CommandNotStarted`.
    """
    from sessiontemp._kernel.spawn import start_and_wait, watching

    where = root_text(root)
    with watching() as mask:
        connection = connect(where)
        if connection is None:
            raise NoSession(where, session, "no session holder is running for this root")
        with connection:
            import shlex

            label = shlex.join(command)
            if len(label) > _LABEL_LIMIT:
                label = label[:_LABEL_LIMIT - 3] + "..."
            try:
                reply, fds = connection.call({"op": "lease", "session": session,
                                              "label": label})
            except (ConnectionResetError, BrokenPipeError):
                raise NoSession(where, session, "its holder ended") from None
            if not reply.get("ok"):
                for fd in fds:
                    os.close(fd)
                if reply.get("kind") == "missing":
                    raise NoSession(where, session, str(reply.get("reason")))
                raise Refused(where, str(reply.get("reason")),
                              f"{reply.get('fix')} (the command was not started)",
                              int(reply.get("status") or 2))
            try:
                path = str(reply["path"])
                env = {**os.environ, **dict.fromkeys(_TEMP_VARIABLES, path)}
                status = start_and_wait(command, env, fds, mask,
                                        lambda pid: _track(connection, pid))
            finally:
                for fd in fds:
                    os.close(fd)
            if reply.get("budgeted"):
                status = _measured(connection, status)
            return status


def _measured(connection: Connection, status: int) -> int:
    """*status*, or 75 for a command that succeeded and left the directory over its budget.

    The holder measures the directory now, before the lease goes, as
    ``sessiontemp run`` does; over the budget, that is said on stderr (the
    command was never stopped for it).  A holder gone meanwhile measures
    nothing, and the status stays the command's.
    """
    try:
        answer, fds = connection.call({"op": "ended"})
    except OSError:
        return status
    for fd in fds:
        os.close(fd)
    over = answer.get("over")
    if not over:
        return status
    _fail("run", str(over))
    return status or _SPACE_STATUS


def _track(connection: Connection, pid: int) -> None:
    """Tell the holder the command's pid (journaled with the lease), without waiting.

    A holder gone meanwhile is no reason to stop: the command holds its
    directory through the descriptor.
    """
    try:  # noqa: SIM105 (contextlib costs the client's start)
        connection.send({"op": "track", "pid": pid})
    except OSError:
        pass


def session_of_environment() -> str | None:
    """The session a ``shell`` runs in: ``$SESSIONTEMP_SESSION``, else the agent CLI's."""
    return (os.environ.get(SESSION_VARIABLE) or os.environ.get(AGENT_SESSION_VARIABLE)
            or None)


def shell_command(text: str) -> list[str]:
    """``$SHELL -c TEXT`` (``/bin/sh`` when SHELL is unset or empty)."""
    return [os.environ.get("SHELL") or "/bin/sh", "-c", text]


# -- the command line -------------------------------------------------------------


def handles(words: Sequence[str]) -> bool:
    """Whether *words* (argv after the program) is a command line :func:`main` reads itself.

    ``shell STRING`` and ``run --session NAME [--root DIR] -- CMD...``;
    anything else, help and errors included, goes to the full parser.
    """
    return _shell(words) is not None or _session_run(words) is not None


def _shell(words: Sequence[str]) -> str | None:
    if len(words) == 2 and words[0] == "shell" and words[1] not in ("-h", "--help"):
        return words[1]
    return None


def _session_run(words: Sequence[str]) -> tuple[str, str | None, list[str]] | None:
    if words[:1] != ["run"]:
        return None
    session: str | None = None
    root: str | None = None
    rest = list(words[1:])
    while rest and rest[0] != "--":
        word = rest[0]
        if "=" in word:
            option, value = word.split("=", 1)
            rest = rest[1:]
        else:
            option, value = word, (rest[1] if len(rest) > 1 else "")
            rest = rest[2:]
        if option not in ("--session", "--root") or not value or value.startswith("-"):
            return None
        if option == "--session":
            session = value
        else:
            root = value
    if session is None or len(rest) < 2 or rest[1] == "--":
        return None
    return session, root, rest[1:]


def main(words: Sequence[str]) -> int:
    """Run the command line *words* (one :func:`handles` accepts); the exit status."""
    text = _shell(words)
    if text is not None:
        where, session = "shell", session_of_environment()
        if session is None:
            return _fail(where, f"no session: set {SESSION_VARIABLE} (or run under an agent "
                         f"CLI that sets {AGENT_SESSION_VARIABLE}) to the name of a session "
                         f"started with `{_PROG} session start NAME`")
        command, root = shell_command(text), None
    else:
        found = _session_run(words)
        assert found is not None, "main is given what handles accepts"
        where, (session, root, command) = "run", found
    try:
        return run_in_session(command, session=session, root=root)
    except CommandNotStarted as e:
        return _fail(where, str(e), 127 if e.errno == 2 else 126)
    except Refused as e:
        return _fail(where, str(e), e.status)
    except SessionTempError as e:
        return _fail(where, str(e))
    except KeyboardInterrupt:
        return 130


def _fail(where: str, message: str, status: int = 2) -> int:
    from sessiontemp.cli import console

    console.say(f"{_PROG} {where}: {console.shown(message)}\n")
    return status


def entry() -> None:
    """Run the process's own command line (one :func:`handles` accepts) and exit."""
    from sessiontemp.cli import console

    console.prepare()
    console.exit_with(lambda: main(sys.argv[1:]))
