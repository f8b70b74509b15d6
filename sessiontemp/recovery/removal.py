"""Removing a generation without ever following a link out of it.

:func:`remove` is the one routine every remover calls (a manager, a
recovery pass, for a generation the journal knows or a stray it does not),
journaling through the callable it is given:

1. :func:`seize` finds the entry under its generation or trash name and takes
   an exclusive lock on it.  The lock fails while any lease or command still
   holds its shared lock, and then nothing is touched; so does a recorded
   command that still runs (:mod:`sessiontemp._kernel.processes`), and a file system
   mounted on the generation itself.
2. The start of the removal is journaled.
3. :func:`finish` renames it to its trash name (claiming it: a crash from
   here on leaves a name the sweep recognises even without a journal), then
   empties and removes it through directory descriptors.
4. The end is journaled, unless something had to stay.

The emptying is a :mod:`sessiontemp._kernel.walk`: nothing is resolved by path,
a symlink planted inside is unlinked, never followed, a hard link is
unlinked, never truncated, and the walk never leaves the generation's file
system.  On the way the remover makes its own way through modes its owner
set (a ``chmod 555`` directory, as the Go module cache and many tarballs
leave, or a ``chmod 0`` one): the owner may change them back, through the
descriptor the walk holds, never a name.  What it still cannot remove (a
mount point, a directory of another user, an immutable file) stays, each
reported once as :class:`Blocked` with its path and the fix; everything else
goes, and the removal stays journaled as started, so the next pass (the
manager's next operation, or a recovery) finishes it once the fix is made.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Literal, TypeAlias

import attrs

from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import nodes, processes, walk
from sessiontemp._kernel.locks import try_exclusive, try_shared
from sessiontemp._kernel.nodes import Node
from sessiontemp._kernel.root import generation_name, trash_name
from sessiontemp.journal.events import Event, RemovalFinished, RemovalStarted
from sessiontemp.journal.reducer import GenerationState

__all__ = ["Blocked", "Found", "Outcome", "Result", "Target", "blocked", "finish", "remove",
           "seize"]

Outcome: TypeAlias = Literal["removed", "absent", "busy", "refused", "blocked"]
Journal: TypeAlias = Callable[[Sequence[Event]], object]

# An entry's top is opened as a path first: that needs no permission, and
# with O_NOFOLLOW | O_DIRECTORY it can only be a directory, never a link.
_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


@attrs.frozen
class Found:
    """What :func:`seize` found at a generation's names.

    ``status`` is "seized" (``fd`` holds the exclusive lock, or ``symlink``
    is set), "absent", "busy" (someone holds its lock), "refused" (not
    ours to remove; ``reason`` says why) or "blocked" (it cannot be
    removed yet: a file system is mounted on it, or its mode shuts out its
    remover; ``obstacle`` says which).  ``mode`` is the mode its owner had
    left it, when it had to be changed to lock it.
    """

    status: Literal["seized", "absent", "busy", "refused", "blocked"]
    name: str | None = None
    fd: int | None = None
    symlink: bool = False
    reason: str = ""
    held: bool = False
    obstacle: walk.Obstacle | None = None
    mode: int | None = None

    def abandon(self) -> None:
        """Give up a seized entry without removing it.

        A lock seized through the remover's own descriptor (``held``) is
        turned back into the shared lock it was, and the descriptor stays
        open: its holder keeps the generation alive as before.  A mode
        changed to lock it is put back.
        """
        if self.fd is None:
            return
        if self.mode is not None:
            os.fchmod(self.fd, self.mode)
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
    under = nodes.of(root_fd)
    for name in names:
        try:
            path_fd = os.open(name, _PATH_FLAGS, dir_fd=root_fd)
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
            return _seize_at(path_fd, name, under, identity=identity, steps=steps, held=held)
        finally:
            os.close(path_fd)
    return Found("absent")


def _seize_at(path_fd: int, name: str, under: Node, *, identity: tuple[int, int] | None,
              steps: Steps, held: int | None) -> Found:
    """Lock the directory held as *path_fd* (an O_PATH descriptor of *name*) exclusively."""
    node = nodes.of(path_fd)
    if not nodes.same_mount(node, under):
        # A file system mounted on the generation itself: what is seen
        # there is not the generation, and nothing of it may be touched.
        return Found("blocked", name=name, obstacle=walk.Obstacle((), "mount"))
    if identity is not None and node.identity != identity:
        return Found("refused", name=name,
                     reason="it was replaced by another directory since it was made")
    mode = None
    if held is not None:
        if node.identity != _identity(held):
            return Found("refused", name=name, reason="it is not the directory its manager holds")
        fd = held
    else:
        opened = _open_to_lock(path_fd, node)
        if isinstance(opened, walk.Obstacle):
            return Found("blocked", name=name, obstacle=opened)
        fd, mode = opened
    try:
        steps.before("lock", name)
        if not try_exclusive(fd):
            if mode is not None:
                os.fchmod(fd, mode)
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
    return Found("seized", name=name, fd=fd, held=held is not None, mode=mode)


def _open_to_lock(path_fd: int, node: Node) -> tuple[int, int | None] | walk.Obstacle:
    """Open the directory held as *path_fd* for a lock; with the mode to put back if changed.

    Through /proc, the kernel reaches the very inode *path_fd* holds, not
    whatever its name means now.  A directory its owner made unreadable
    (``chmod 0`` on TMPDIR itself) is given its owner's read bit for the
    open, since a lock needs a descriptor that is not O_PATH; the caller puts
    the mode back if the lock then says the generation is still in use.
    """
    proc = f"/proc/self/fd/{path_fd}"
    try:
        return walk.reopen(path_fd), None
    except PermissionError:
        if node.uid != os.geteuid():
            return walk.Obstacle((), "foreign", node.uid, errno.EACCES)
    mode = stat.S_IMODE(node.mode)
    try:
        os.chmod(proc, mode | stat.S_IRUSR)
    except PermissionError as e:
        # Immutable (chattr +i): not even its owner may change its mode.
        return walk.Obstacle((), "error", node.uid, e.errno or errno.EPERM)
    try:
        return walk.reopen(path_fd), mode
    except BaseException:
        os.chmod(proc, mode)
        raise


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _share(fd: int) -> None:
    """Hold a shared lock through *fd* again (after an exclusive one, or a failed conversion).

    Fails only if another remover took the exclusive lock meanwhile; the
    generation is then theirs to remove, and *fd* simply holds no lock.
    """
    with contextlib.suppress(OSError):
        try_shared(fd)


def finish(root_fd: int, found: Found, trash: str, *, steps: Steps) -> list[walk.Obstacle]:
    """Remove what :func:`seize` locked: claim it under *trash*, empty it, remove it.

    Returns what had to stay (each below *trash*); then *trash* stays too,
    holding only that, for the next pass.  Raises OSError when the walk
    cannot go on at all (no descriptor left, a directory moved meanwhile);
    what is left stays under the trash name for the next recovery.
    """
    assert found.status == "seized"
    assert found.name is not None
    if found.symlink:
        steps.before("unlink", found.name)
        os.unlink(found.name, dir_fd=root_fd)
        return []
    assert found.fd is not None
    try:
        if found.name != trash:
            _clear_trash_name(root_fd, trash, steps)
            steps.before("rename", f"{found.name} -> {trash}")
            os.rename(found.name, trash, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        obstacles = walk.walk(found.fd, _Remover(steps))
        if obstacles:
            return obstacles
        steps.before("rmdir", trash)
        os.rmdir(trash, dir_fd=root_fd)
        return []
    finally:
        try:
            steps.before("unlock", trash)
        finally:
            # Whatever stops this step, the descriptor (and its exclusive
            # lock) must go: a process that carries on would otherwise hold
            # it, and keep the generation "busy" for itself, until it exits.
            os.close(found.fd)


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


class _Remover:
    """The removal's part of a walk: make way through modes the owner may change, then remove."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.uid = os.geteuid()

    def enter(self, fd: int, node: Node) -> None:
        if nodes.pinned(fd):
            # Immutable or append-only: not one entry of it can go, so it
            # stays as a whole (reported once), its entries unvisited.
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        if node.uid == self.uid:
            if node.mode & 0o700 != 0o700 or node.mode & stat.S_ISVTX:
                # A mode its owner set (0555 from a module cache or a
                # tarball, 0400, sticky): the owner may change it, and must,
                # to remove what is inside.  Through the descriptor the walk
                # holds, so a symlink swapped in at its name cannot catch it.
                os.fchmod(fd, 0o700)
        elif not os.access(f"/proc/self/fd/{fd}", os.W_OK | os.X_OK,
                           effective_ids=os.access in os.supports_effective_ids):
            # Another user's, and not writable: its mode is not ours to
            # change (a chown is not tried either), so it stays as a whole.
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    def unreadable(self, fd: int, node: Node) -> bool:
        if node.uid != self.uid:
            return False
        # fd is an O_PATH descriptor, which fchmod refuses; /proc reaches
        # the same inode, never a symlink's target.
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
        return True

    def entry(self, parent: int, name: str) -> None:
        # Unlinking removes the name only, never a link's target, and never
        # truncates a hard link's other names.
        self.steps.before("unlink", name)
        os.unlink(name, dir_fd=parent)

    def leave(self, parent: int, name: str) -> None:
        self.steps.before("rmdir", name)
        os.rmdir(name, dir_fd=parent)


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
class Blocked:
    """Something a removal had to leave: its path, why, and what a person does about it."""

    path: str
    reason: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path} {self.reason}. {self.fix}"


_THEN: Final = "the next recovery, or its manager's next operation, finishes the removal"


def blocked(path: str, obstacle: walk.Obstacle) -> Blocked:
    """What *obstacle*, found at *path*, says to a person."""
    where = shlex.quote(path)
    if obstacle.kind == "mount":
        return Blocked(path, "is a mount point: another file system is mounted there, and "
                       "nothing on it was touched", f"Unmount it (umount {where}); {_THEN}")
    if obstacle.kind == "foreign":
        me = os.geteuid()
        return Blocked(
            path, f"is owned by uid {obstacle.uid}, and uid {me} may not remove what is in it",
            f"Remove it as uid {obstacle.uid} or root (rm -rf --one-file-system {where}), or "
            f"give it to uid {me} (chown -R {me} {where}); {_THEN}")
    name = errno.errorcode.get(obstacle.error, str(obstacle.error))
    reason = f"cannot be removed: {os.strerror(obstacle.error)} ({name})"
    if obstacle.error == errno.EPERM:
        fix = (f"Clear the flag that keeps it (lsattr -d {where}; as root, chattr -i -a "
               f"{where})")
    elif obstacle.error == errno.EROFS:
        fix = "Make its file system writable again (mount -o remount,rw)"
    else:
        fix = f"Give its owner write access to it (chmod u+rwx {where})"
    return Blocked(path, reason, f"{fix}; {_THEN}")


@attrs.frozen
class Result:
    """How a removal ended; ``detail`` says why for "busy", "refused" and "blocked".

    "blocked": what could be removed was, and ``blocked`` lists what stays,
    each once; the removal stays due (journaled as started when it got that
    far), and the next pass tries again.
    """

    outcome: Outcome
    detail: str = ""
    blocked: tuple[Blocked, ...] = ()

    @classmethod
    def stays(cls, where: Iterable[Blocked]) -> Result:
        entries = tuple(where)
        return cls("blocked", "; ".join(map(str, entries)), entries)


def remove(root_fd: int, target: Target, *, journal: Journal, steps: Steps,
           held: int | None = None) -> Result:
    """Journal and carry out the removal of *target*: the one removal routine.

    The journal hears of the removal after the exclusive lock is taken (so a
    busy generation leaves no trace) and before anything is renamed or
    deleted (so a crash from there on is finished by recovery).  What the
    removal has to leave is returned as "blocked"; OSError from a removal
    that cannot go on propagates.  Either way what is left stays for the
    next pass.

    *held* (see :func:`seize`) is the remover's own shared lock on the
    generation: it is closed once the removal's start is journaled, and
    until then stays the caller's, shared, whatever is returned or raised.
    """
    gid = target.generation
    root = os.path.dirname(target.path)
    found = seize(root_fd, target.names, identity=target.identity, steps=steps, held=held)
    if found.status == "busy":
        return Result("busy", "a lease or a running command holds its lock")
    if found.status == "blocked":
        assert found.name is not None
        assert found.obstacle is not None
        return Result.stays([blocked(os.path.join(root, found.name), found.obstacle)])
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
    trash = trash_name(gid)
    stays = finish(root_fd, found, trash, steps=steps)
    if stays:
        return Result.stays(blocked(os.path.join(root, trash, *o.parts), o) for o in stays)
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
