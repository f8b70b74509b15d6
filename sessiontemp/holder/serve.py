"""The session holder: one process per root holding each live named session's Manager.

A harness that is no Python process (Node, Rust, Go, a shell script) drives
a session from the command line: ``sessiontemp session start NAME`` makes
the calling process an owner, ``sessiontemp run --session NAME -- CMD``
(:mod:`sessiontemp.holder.client`) runs each command under a lease of it, ``session
rotate`` and ``session end`` do what :meth:`Manager.rotate` and
:meth:`Manager.release` do.  Something must hold each session's
:class:`~sessiontemp.Manager` between those commands: this process.

- **One per root.**  The first ``session start`` on a root starts it
  (:mod:`sessiontemp.holder.holding`: the process, daemonized, and its launch);
  it serves every session of that root on one socket,
  ``ROOT/holder.sock``, inside the 0700 root, and ends once its sessions are
  sealed and their last leases are gone.  One process per root rather than
  per session: a harness running many sessions pays one interpreter and
  one journal connection, ``session list`` has one place to ask, and a
  client finds the socket by the root alone (the documentation's
  "Session holder" page gives the figures).
- **A Manager user like any other.**  Each session is a
  ``Manager(root, session=NAME)`` with one retain per owner; there is no
  second journal and no state the journal does not have.  Killed, the
  holder is a dead manager to the next recovery: each session's current
  directory is kept for its resume window, the next ``session start NAME``
  adopts it (files kept), and directories that running commands hold stay
  theirs.
- **Leases go to the client as descriptors.**  A lease's locks (the flocks
  that keep its generation and its directory: every descriptor of
  ``lease.pass_fds``) are sent over the socket (``SCM_RIGHTS``), so the
  command inherits the very locks ``lease.popen`` would have given it; the
  lease is released when the client's connection ends.
- **Owners are processes, watched by the kernel.**  Each owner's pid is
  opened as a pidfd, polled in the event loop: when it ends without
  ``session end``, its ownership ends as a crash's does.  The session is
  kept for its resume window (a ``session start`` meanwhile resumes it,
  files kept), then released.  No pid is ever polled, no age compared.
- **Peers are checked.**  Every connection's ``SO_PEERCRED`` must be of the
  holder's uid; any other is refused with the reason.  The socket is
  reached through the root's descriptor (``/proc/self/fd/N/holder.sock``),
  so a root of any length works (an ``AF_UNIX`` path holds 107 bytes).
  ``ROOT/holder.lock`` is held (flock) for the holder's life: a socket file
  without it is a dead holder's, and the next holder replaces it.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from sessiontemp import sessions as _sessions
from sessiontemp._guards.log import bound
from sessiontemp.holder.client import MESSAGE_BYTES
from sessiontemp.journal.errors import (
    BadInput,
    LowDisk,
    OverBudget,
    Unavailable,
)
from sessiontemp.lease import Lease
from sessiontemp.manager import DEFAULT_RESUME_WINDOW, Manager
from sessiontemp.space import budget

__all__ = ["IDLE", "SPACE_STATUS", "Holder", "Session"]

# How long a holder started for a request waits for its first session
# before it ends: a start that failed leaves no process behind.
IDLE: Final = 10.0
# Refused for space: EX_TEMPFAIL, as `sessiontemp run` exits.
SPACE_STATUS: Final = 75
_log = bound(component="holder")


def _limits_of(name: str) -> budget.Surface:
    """Where session *name*'s limits were set, as its refusals name them."""
    return budget.Surface(
        f"Rotate the session (`sessiontemp session rotate {name}`) to run the next command "
        "in a fresh directory, or remove files from this one",
        (("max_bytes", "--max-bytes"), ("max_inodes", "--max-inodes"),
         ("min_free_bytes", "--min-free-bytes")),
        after=" at `session start`; commands running in it are not touched")


class Session:
    """One live session the holder serves: its manager, its owners, its leases."""

    def __init__(self, name: str, manager: Manager, window: float,
                 limits: budget.Limits) -> None:
        self.name = name
        self.manager = manager
        self.window = window
        self.limits = limits
        # Each owner's pid and the pidfd that says when it ends.
        self.owners: dict[int, int] = {}
        self.leases: dict[socket.socket, Lease] = {}
        # Set while the last owner has died without `end`: until then (the
        # holder's clock) the session waits to be resumed, then is released.
        self.orphaned_until: float | None = None
        self.resumed = manager.resumed

    def as_json(self, holder_pid: int, now: float) -> dict[str, Any]:
        manager = self.manager
        state = manager.state
        me = state.managers.get(manager.id)
        current = None if me is None or me.current is None else state.generations.get(
            me.current)
        directory = manager.current_dir
        return {
            "session": self.name,
            "owners": [{"pid": pid} for pid in self.owners],
            "holder_pid": holder_pid,
            "directory": None if directory is None else os.fspath(directory),
            "leases": len(self.leases),
            "bytes": None if current is None else current.measured_bytes,
            "measured_at": None if current is None else current.measured_at,
            "sealed": manager.sealed,
            "resumable": self.orphaned_until is not None,
            "resumable_for": (None if self.orphaned_until is None
                              else max(0.0, self.orphaned_until - now)),
        }


class Holder:
    """The event loop serving one root's sessions on a listening socket.

    *clock* (monotonic seconds) times the resume windows of sessions whose
    owners died; *idle* is how long it waits for a first session.
    """

    def __init__(self, root: Path, listener: socket.socket, *,
                 clock: Callable[[], float] = time.monotonic, idle: float = IDLE) -> None:
        self.root = root
        self.listener = listener
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.connections: set[socket.socket] = set()
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.idle_until: float | None = clock() + idle
        self.uid = os.getuid()

    # -- the loop ---------------------------------------------------------------------

    def serve(self) -> None:
        """Serve until every session is sealed, its leases gone, and nobody is connected."""
        while self.sessions or self.connections or self._waiting():
            for key, _ in self.selector.select(self._timeout()):
                try:
                    self._event(key)
                except Exception as e:  # one failed event must not end the rest
                    # An owner's release or an expiry the journal refused (a
                    # full disk): the session stays served, and retried by
                    # the next end; the holder goes on serving the others.
                    _log.error("holder.failed", reason=str(e), error=type(e).__name__)
            try:
                self._expire()
            except Exception as e:
                _log.error("holder.failed", reason=str(e), error=type(e).__name__)
        self.selector.close()

    def _event(self, key: selectors.SelectorKey) -> None:
        if key.fileobj is self.listener:
            self._accept()
        elif isinstance(key.data, tuple):
            self._owner_ended(*key.data)
        elif key.data == "refused":
            assert isinstance(key.fileobj, socket.socket)
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
        else:
            assert isinstance(key.fileobj, socket.socket)
            self._readable(key.fileobj)

    def _waiting(self) -> bool:
        return self.idle_until is not None and self.clock() < self.idle_until

    def _timeout(self) -> float | None:
        deadlines = [s.orphaned_until for s in self.sessions.values()
                     if s.orphaned_until is not None]
        if self.idle_until is not None:
            deadlines.append(self.idle_until)
        return None if not deadlines else max(0.0, min(deadlines) - self.clock())

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, ConnectionAbortedError):
            return
        peer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid = int.from_bytes(peer[0:4], sys.byteorder)
        uid = int.from_bytes(peer[4:8], sys.byteorder)
        if uid != self.uid:
            # Unreachable through the 0700 root but for root itself; said all
            # the same, before anything else (logging included) can fail.
            self._reply(sock, _refusal(
                "refused", f"process {pid} is of uid {uid}, not of this holder's user "
                f"(uid {self.uid})", "Run sessiontemp as the user who owns the root"))
            # Closed once the peer's request is read: a socket closed with a
            # request unread resets the connection, and the peer would get
            # ECONNRESET instead of the refusal queued for it.
            self.selector.register(sock, selectors.EVENT_READ, "refused")
            _log.warning("holder.refused", pid=pid, uid=uid)
            return
        self.idle_until = None
        self.connections.add(sock)
        self.selector.register(sock, selectors.EVENT_READ, "client")

    def _readable(self, sock: socket.socket) -> None:
        try:
            data, received, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 4)
        except OSError:
            data, received = b"", []
        for stray in received:
            os.close(stray)
        if not data:
            self._disconnected(sock)
            return
        reply: dict[str, Any] | None
        fds: tuple[int, ...]
        try:
            message = json.loads(data)
            if not isinstance(message, dict):
                raise ValueError("not an object")
            reply, fds = self._handle(sock, message)
        except Exception as e:  # said to the client, which exits 2
            reply, fds = _error(e), ()
        if reply is not None and not self._reply(sock, reply, fds) and fds:
            # The client left before it got its lease: give it back now.
            self._disconnected(sock)

    def _reply(self, sock: socket.socket, reply: dict[str, Any],
               fds: tuple[int, ...] = ()) -> bool:
        data = json.dumps(reply).encode()
        try:
            if not fds:
                sock.send(data)
            else:
                socket.send_fds(sock, [data], list(fds))
        except OSError:
            return False
        return True

    def _disconnected(self, sock: socket.socket) -> None:
        if sock not in self.connections:
            return
        self.connections.discard(sock)
        self.selector.unregister(sock)
        try:
            for session in list(self.sessions.values()):
                lease = session.leases.pop(sock, None)
                if lease is not None:
                    lease.release()
                    self._settle(session)
        finally:
            sock.close()

    # -- requests ---------------------------------------------------------------------

    def _handle(self, sock: socket.socket, message: dict[str, Any]
                ) -> tuple[dict[str, Any] | None, tuple[int, ...]]:
        op = message.get("op")
        if op == "list":
            now = self.clock()
            return {"ok": True, "root": os.fspath(self.root), "holder_pid": os.getpid(),
                    "sessions": [s.as_json(os.getpid(), now) for _, s in
                                 sorted(self.sessions.items())]}, ()
        if op == "track":
            for served in self.sessions.values():
                lease = served.leases.get(sock)
                if lease is not None:
                    lease.track(int(message["pid"]))
            return None, ()
        if op == "ended":
            return self._ended(sock), ()
        name = _sessions.check_name(message.get("session"))
        if op == "start":
            return self._start(name, int(message["owner"]), message.get("window"),
                               message.get("limits") or {}), ()
        session = self.sessions.get(name)
        if session is None or session.manager.sealed:
            return _refusal("missing", "it is not started, or has ended",
                            f"Start it with `sessiontemp session start {name}`"), ()
        if op == "lease":
            if sock in session.leases:
                raise BadInput("the request", "asks for a second lease on one connection",
                               "Connect once per command")
            try:
                lease = session.manager.acquire(label=str(message.get("label", "")))
            except OverBudget as e:
                # Worded for the command line the limits were given on.
                surface = _limits_of(name)
                return {**_refusal("refused", f"{e.path} is over its budget: {e.reason}",
                                   f"{surface.remedy}, or raise the budget{surface.after}"),
                        "status": SPACE_STATUS}, ()
            except LowDisk as e:
                low = budget.low_disk(e.path, e.free_bytes, e.min_free_bytes, e.largest,
                                      _limits_of(name))
                return {**_refusal("refused", low.reason, low.fix),
                        "status": SPACE_STATUS}, ()
            session.leases[sock] = lease
            return {"ok": True, "path": os.fspath(lease.path), "lease": lease.id,
                    "generation": lease.generation,
                    "budgeted": session.limits.budgeted}, lease.pass_fds

        if op == "rotate":
            session.manager.rotate()
            return {"ok": True, "session": name, "root": os.fspath(self.root)}, ()
        if op == "end":
            self._end(session, int(message.get("owner") or 0))
            return {"ok": True, "session": name, "root": os.fspath(self.root),
                    "owners": len(session.owners), "sealed": session.manager.sealed}, ()
        raise BadInput(repr(op), "is not a request of the holder",
                       "Use start, lease, track, rotate, end or list")

    def _ended(self, sock: socket.socket) -> dict[str, Any]:
        """The command of *sock*'s lease has exited: its directory measured now, if budgeted.

        As ``sessiontemp run`` measures its directory when its command exits,
        before the lease goes; the answer's ``over`` is the over-budget line
        to say, or None.
        """
        for session in self.sessions.values():
            if sock in session.leases and session.limits.budgeted:
                usage = session.manager.measure()
                if budget.over(session.limits, usage.bytes, usage.inodes):
                    return {"ok": True, "over": str(budget.over_budget(
                        session.limits, usage, _limits_of(session.name)))}
        return {"ok": True, "over": None}

    def _start(self, name: str, owner: int, window: object,
               limits: dict[str, Any]) -> dict[str, Any]:
        try:
            # Opened first: an owner already gone is refused before anything changes.
            pidfd = os.pidfd_open(owner)
        except ProcessLookupError:
            raise BadInput(f"--owner-pid {owner}", "names no running process",
                           "Pass the pid of the process that owns the session") from None
        try:
            session = self.sessions.get(name)
            if session is not None and session.manager.sealed:
                # Ended, with commands still running in it: those keep their
                # directory (their leases' locks), and the name starts afresh.
                self._close(session)
                session = None
            if session is None:
                resume_window = (float(window) if isinstance(window, int | float)
                                 else DEFAULT_RESUME_WINDOW)
                # Relaxed: a lease, its release and an owner's change are not
                # synced one by one (the directory's own events still are);
                # a killed holder loses none of them, and a power loss only
                # the last ones, of commands that died with it.  Each command
                # then waits for no disk flush before it starts.
                given = budget.Limits(limits.get("max_bytes"), limits.get("max_inodes"),
                                      limits.get("min_free_bytes"))
                manager = Manager(self.root, session=name, resume_window=resume_window,
                                  durability="relaxed", max_bytes=given.max_bytes,
                                  max_inodes=given.max_inodes,
                                  min_free_bytes=given.min_free_bytes,
                                  measure_every=given.measure_every)
                session = Session(name, manager, resume_window, given)
                try:
                    manager.retain()
                except BaseException:
                    manager.close()
                    raise
                self.sessions[name] = session
            elif owner in session.owners:
                os.close(pidfd)
                pidfd = -1
            elif session.orphaned_until is not None:
                # The dead owner's retain passes to the new one: resumed.
                session.orphaned_until = None
                session.resumed = True
            else:
                session.manager.retain()
        except BaseException:
            if pidfd >= 0:
                os.close(pidfd)
            raise
        if pidfd >= 0:
            session.owners[owner] = pidfd
            self.selector.register(pidfd, selectors.EVENT_READ, (name, owner))
        _log.info("holder.started", session=name, owner=owner, resumed=session.resumed)
        return {"ok": True, "session": name, "root": os.fspath(self.root),
                "resumed": session.resumed, "holder_pid": os.getpid(),
                "directory": os.fspath(session.manager.current_dir or "") or None}

    def _end(self, session: Session, owner: int) -> None:
        """Release one owner: *owner* if it is one, else the oldest; the last seals it."""
        if session.owners:
            pid = owner if owner in session.owners else next(iter(session.owners))
            self._forget_owner(session, pid)
        elif session.orphaned_until is not None:
            session.orphaned_until = None
        else:
            return
        session.manager.release()
        self._settle(session)

    def _forget_owner(self, session: Session, pid: int) -> None:
        pidfd = session.owners.pop(pid)
        self.selector.unregister(pidfd)
        os.close(pidfd)

    def _owner_ended(self, name: str, pid: int) -> None:
        """Owner *pid* of session *name* ended without `end`: as a crash ends ownership."""
        session = self.sessions[name]
        self._forget_owner(session, pid)
        _log.info("holder.owner_ended", session=name, owner=pid)
        if session.owners:
            session.manager.release()
        else:
            # Kept as a dead manager's session is: for its resume window.
            session.orphaned_until = self.clock() + session.window

    def _expire(self) -> None:
        now = self.clock()
        for session in list(self.sessions.values()):
            if session.orphaned_until is not None and now >= session.orphaned_until:
                session.orphaned_until = None
                session.manager.release()
                self._settle(session)

    def _settle(self, session: Session) -> None:
        """Close a sealed session's manager once its last lease is gone."""
        if session.manager.sealed and not session.leases:
            self._close(session)

    def _close(self, session: Session) -> None:
        for pid in list(session.owners):
            self._forget_owner(session, pid)
        for lease in session.leases.values():
            lease.release()
        session.leases.clear()
        self.sessions.pop(session.name, None)
        session.manager.close()


def _refusal(kind: str, reason: str, fix: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "reason": reason, "fix": fix}


def _error(e: Exception) -> dict[str, Any]:
    if isinstance(e, Unavailable):
        return _refusal("refused", e.reason, e.fix)
    return _refusal("error", str(e), "Correct what it names, then try again")
