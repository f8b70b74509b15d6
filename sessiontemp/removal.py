"""Removing a generation without ever following a link out of it.

:func:`remove` is the one routine every remover calls (a manager, a
recovery pass, for a generation the journal knows or a stray it does not),
journaling through the callable it is given:

1. :func:`seize` finds the entry under its generation or trash name and takes
   an exclusive lock on it.  The lock fails while any lease or command still
   holds its shared lock, and then nothing is touched; so does a recorded
   command that still runs (:mod:`sessiontemp.processes`).
2. The start of the removal is journaled.
3. :func:`finish` renames it to its trash name (claiming it: a crash from
   here on leaves a name the sweep recognises even without a journal), then
   empties and removes it through directory descriptors.
4. The end is journaled.

Nothing is ever resolved by path: each directory is opened relative to its
parent's descriptor with O_NOFOLLOW, so a symlink planted inside a generation
is unlinked, never followed, and a hard link is unlinked, never truncated.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Literal, TypeAlias

import attrs

from journal.events import Event, RemovalFinished, RemovalStarted
from journal.reducer import GenerationState
from sessiontemp import processes
from sessiontemp.locks import try_exclusive
from sessiontemp.root import DIR_FLAGS as _DIR_FLAGS
from sessiontemp.root import generation_name, trash_name
from sessiontemp.steps import Steps

__all__ = ["Found", "Outcome", "Result", "Target", "finish", "remove", "seize"]

Outcome: TypeAlias = Literal["removed", "absent", "busy", "refused"]
Journal: TypeAlias = Callable[[Sequence[Event]], object]
# Descriptors a removal holds at most, whatever the depth of the tree.
_MAX_HELD: Final = 32


@attrs.frozen
class Found:
    """What :func:`seize` found at a generation's names.

    ``status`` is "seized" (``fd`` holds the exclusive lock, or ``symlink``
    is set), "absent", "busy" (someone holds its lock) or "refused" (not
    ours to remove; ``reason`` says why).
    """

    status: Literal["seized", "absent", "busy", "refused"]
    name: str | None = None
    fd: int | None = None
    symlink: bool = False
    reason: str = ""
    held: bool = False

    def abandon(self) -> None:
        """Give up a seized entry without removing it.

        A lock seized through the remover's own descriptor (``held``) is
        turned back into the shared lock it was, and the descriptor stays
        open: its holder keeps the generation alive as before.
        """
        if self.fd is None:
            return
        if self.held:
            _share(self.fd)
        else:
            os.close(self.fd)


def seize(
    root_fd: int,
    names: Iterable[str],
    *,
    identity: tuple[int, int] | None = None,
    steps: Steps,
    held: int | None = None,
) -> Found:
    """Find the first of *names* present under *root_fd* and lock it exclusively.

    *identity* is the (device, inode) recorded when the generation was made;
    a directory with another identity under that name was put there by
    someone else and is refused.

    *held* is a descriptor of the generation through which the remover
    holds a shared lock itself (a manager's own lock on its generation):
    a second descriptor could never get the exclusive lock beside it, so
    that lock is converted in place instead, and the generation is never
    without a lock of the remover's until its removal is journaled.  When
    it is busy, the shared lock is taken back at once.
    """
    for name in names:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return Found("seized", name=name, symlink=True)
            return Found("refused", name=name,
                         reason=f"it is a {_kind(st.st_mode)}, not a directory")
        try:
            st = os.fstat(fd)
            if identity is not None and (st.st_dev, st.st_ino) != identity:
                os.close(fd)
                return Found("refused", name=name,
                             reason="it was replaced by another directory since it was made")
            if held is not None:
                if (st.st_dev, st.st_ino) != _identity(held):
                    os.close(fd)
                    return Found("refused", name=name,
                                 reason="it is not the directory its manager holds")
                os.close(fd)
                fd = held
            steps.before("lock", name)
            if not try_exclusive(fd):
                if held is None:
                    os.close(fd)
                else:
                    # A failed conversion has dropped the shared lock too.
                    _share(held)
                return Found("busy", name=name)
        except BaseException:
            if fd != held:
                os.close(fd)
            raise
        return Found("seized", name=name, fd=fd, held=held is not None)
    return Found("absent")


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _share(fd: int) -> None:
    """Hold a shared lock through *fd* again (after an exclusive one, or a failed conversion).

    Fails only if another remover took the exclusive lock meanwhile; the
    generation is then theirs to remove, and *fd* simply holds no lock.
    """
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)


def finish(root_fd: int, found: Found, trash: str, *, steps: Steps) -> None:
    """Remove what :func:`seize` locked: claim it under *trash*, empty it, remove it.

    Raises OSError when something inside cannot be removed; what is left
    stays under the trash name for the next recovery.
    """
    assert found.status == "seized"
    assert found.name is not None
    if found.symlink:
        steps.before("unlink", found.name)
        os.unlink(found.name, dir_fd=root_fd)
        return
    assert found.fd is not None
    try:
        if found.name != trash:
            _clear_trash_name(root_fd, trash, steps)
            steps.before("rename", f"{found.name} -> {trash}")
            os.rename(found.name, trash, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        _empty(found.fd, steps)
        steps.before("rmdir", trash)
        os.rmdir(trash, dir_fd=root_fd)
    finally:
        try:
            steps.before("unlock", trash)
        finally:
            # Whatever stops this step, the descriptor (and its exclusive
            # lock) must go: a process that carries on would otherwise hold
            # it, and keep the generation "busy" for itself, until it exits.
            os.close(found.fd)


@attrs.define
class _Frame:
    """One directory on the walk's path: its descriptor (-1 while let go), name, identity."""

    fd: int
    name: str
    pending: list[str]
    identity: tuple[int, int]


def _clear_trash_name(root_fd: int, trash: str, steps: Steps) -> None:
    """Unlink a non-directory planted at the generation's trash name.

    rename() of a directory onto a symlink or file fails (ENOTDIR), so a
    link planted there would block the removal on every pass forever.  The
    name is ours (its prefix says so); unlinking removes the link itself,
    never what it points to.
    """
    try:
        st = os.stat(trash, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        steps.before("unlink", trash)
        os.unlink(trash, dir_fd=root_fd)


def _empty(top: int, steps: Steps) -> None:
    """Remove everything inside the directory open as *top*, without recursion.

    An explicit stack instead of recursion: a command can leave a tree
    thousands of levels deep, and Python's recursion limit would stop a
    recursive walk half-way.  Nor does the walk hold a descriptor per level,
    which would run out under a low RLIMIT_NOFILE: past _MAX_HELD levels the
    shallowest descriptors are let go, and on the way back up each parent is
    re-opened as ".." of the child still held, then checked against the
    identity it had on the way down.
    """
    st = os.fstat(top)
    stack = [_Frame(top, "", os.listdir(top), (st.st_dev, st.st_ino))]
    # Frames 1..let_go are closed (always the shallowest: they are the ones
    # given up first, and re-opened last); frame 0 is the caller's.
    let_go = 0
    try:
        while stack:
            frame = stack[-1]
            if not frame.pending:
                stack.pop()
                if not stack:
                    break
                parent = stack[-1]
                if parent.fd < 0:
                    parent.fd = _reopen_parent(frame.fd, parent)
                    let_go -= 1
                os.close(frame.fd)
                frame.fd = -1
                steps.before("rmdir", frame.name)
                os.rmdir(frame.name, dir_fd=parent.fd)
                continue
            entry = frame.pending.pop()
            child = _open_child(frame.fd, entry)
            if child is None:
                # Anything but a directory, symlinks included: unlinking
                # removes the name only, never the target's contents.
                steps.before("unlink", entry)
                os.unlink(entry, dir_fd=frame.fd)
                continue
            try:
                cst = os.fstat(child)
                stack.append(_Frame(child, entry, os.listdir(child), (cst.st_dev, cst.st_ino)))
            except BaseException:
                os.close(child)
                raise
            if len(stack) - 1 - let_go > _MAX_HELD:
                let_go += 1
                os.close(stack[let_go].fd)
                stack[let_go].fd = -1
    finally:
        for frame in stack[1:]:
            if frame.fd >= 0:
                os.close(frame.fd)


def _reopen_parent(child: int, parent: _Frame) -> int:
    """Open the parent of the directory held as *child* again, if it is still *parent*.

    ".." is resolved by the kernel from the directory held, not from a path
    that could be re-pointed; and the identity check refuses a child that
    was moved elsewhere meanwhile, whose ".." is no longer the directory it
    came from: removing it there would rmdir in a place nobody chose.
    """
    fd = os.open("..", _DIR_FLAGS, dir_fd=child)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != parent.identity:
        os.close(fd)
        raise OSError(errno.ESTALE, "a directory was moved while it was being removed; "
                      "what is left stays for the next recovery", parent.name)
    return fd


def _open_child(parent: int, name: str) -> int | None:
    """Open *name* as a directory without following links; None for a non-directory."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        if e.errno != errno.EACCES:
            raise
    # A directory its owner made unreadable (chmod 0): make it ours to read
    # again.  It is opened as a path first, without following links, and the
    # mode is changed through /proc on that very inode, so a symlink swapped
    # in meanwhile cannot redirect the chmod.
    path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC,
                      dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
    finally:
        os.close(path_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISREG, "regular file"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return word
    return "non-directory"


@attrs.frozen
class Target:
    """What to remove, and how its removal is journaled.

    ``names`` are tried in order (the generation's name, then its trash
    name); ``identity`` is the (device, inode) journaled when it was made,
    None when unknown; ``start`` is the event that journals the start of the
    removal, None when a process that then died already journaled it;
    ``commands`` are the ``"pid:started"`` keys of processes started on its
    leases; ``path`` is where those processes see it.
    """

    generation: str
    names: tuple[str, ...]
    by: str
    start: Event | None
    path: str
    identity: tuple[int, int] | None = None
    commands: frozenset[str] = frozenset()

    @classmethod
    def known(cls, generation: GenerationState, *, by: str, reason: str, root: str,
              start: Event | None = None) -> Target:
        """A generation the journal knows; *start* overrides the usual RemovalStarted."""
        gid = generation.id
        identity = (
            (generation.device, generation.inode)
            if generation.device is not None and generation.inode is not None
            else None
        )
        if start is None and generation.removal != "started":
            start = RemovalStarted(gid, by, reason)
        return cls(gid, (generation_name(gid), trash_name(gid)), by, start,
                   os.path.join(root, generation_name(gid)), identity, generation.commands)


@attrs.frozen
class Result:
    """How a removal ended; ``detail`` says why for "busy" and "refused"."""

    outcome: Outcome
    detail: str = ""


def remove(root_fd: int, target: Target, *, journal: Journal, steps: Steps,
           held: int | None = None) -> Result:
    """Journal and carry out the removal of *target*: the one removal routine.

    The journal hears of the removal after the exclusive lock is taken (so a
    busy generation leaves no trace) and before anything is renamed or
    deleted (so a crash from there on is finished by recovery).  OSError
    from the removal itself propagates; what is left stays for the next
    recovery.

    *held* (see :func:`seize`) is the remover's own shared lock on the
    generation: it is closed once the removal's start is journaled, and
    until then stays the caller's, shared, whatever is returned or raised.
    """
    gid = target.generation
    found = seize(root_fd, target.names, identity=target.identity, steps=steps, held=held)
    if found.status == "busy":
        return Result("busy", "a lease or a running command holds its lock")
    if found.status == "seized" and target.commands:
        holders = _holders(target)
        if holders:
            found.abandon()
            return Result("busy", holders)
    started = [] if target.start is None else [target.start]
    if found.status in ("absent", "refused"):
        outcome = "absent" if found.status == "absent" else f"refused: {found.reason}"
        journal([*started, RemovalFinished(gid, target.by, outcome)])
        if held is not None:
            os.close(held)
        return Result("absent") if found.status == "absent" else Result("refused", found.reason)
    try:
        if started:
            journal(started)
    except BaseException:
        found.abandon()
        raise
    finish(root_fd, found, trash_name(gid), steps=steps)
    journal([RemovalFinished(gid, target.by, "removed")])
    return Result("removed")


def _holders(target: Target) -> str:
    """Why *target* is alive without its lock (recorded commands, then /proc); "" if it is not."""
    alive = processes.running(target.commands)
    if alive:
        return "command pid " + ", ".join(map(str, alive)) + " started on it still runs"
    # The commands it ran are gone: whatever they left running in the
    # background (a daemon that closed its descriptors) still names it.
    # Said apart from a recorded command: these pids are in no journal.
    users = processes.users(target.path, exclude=os.getpid())
    if users:
        return ("pid " + ", ".join(map(str, users)) + " works in it or points TMPDIR, TMP "
                "or TEMP into it")
    return ""
