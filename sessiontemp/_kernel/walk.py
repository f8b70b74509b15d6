"""Walking a directory tree through descriptors, never out of it.

The rules every walk of a generation keeps, whatever it does at each entry
(:mod:`sessiontemp.recovery.removal` unlinks and removes; a walk that measures would
only look):

- Nothing is resolved by path.  Each directory is opened relative to its
  parent's descriptor with O_NOFOLLOW and O_DIRECTORY: a symlink is never
  followed, and a non-directory (a FIFO would block its opener, a device
  node could do worse) is never opened, only handed to the visitor by name.
- The walk never leaves the mount it starts on.  Each directory opened is
  compared with the top (device and mount id, :mod:`sessiontemp._kernel.nodes`)
  before anything is done in it, as ``rm --one-file-system`` and
  systemd-tmpfiles do: a tmpfs mounted inside, or a bind mount of a
  directory elsewhere (whose device may be the top's own), is reported and
  closed unlisted, so nothing under it is touched.
- No recursion, and at most :data:`MAX_HELD` descriptors whatever the
  depth: a command can leave a tree thousands of levels deep, beyond
  Python's recursion limit and a low RLIMIT_NOFILE.  Past MAX_HELD levels
  the shallowest descriptors are let go; on the way back up each parent is
  re-opened as ".." of the child still held, and checked against the
  identity it had on the way down.
- What cannot be done is an :class:`Obstacle`, and the walk goes on with
  the rest.  Permission (EACCES, EPERM), a mount point (EBUSY) and a
  read-only file system (EROFS) make obstacles; any other error (no
  descriptor left, an I/O error, a directory moved mid-walk) stops the walk
  and propagates.  A directory that refuses a change of its entries is
  reported once, as a whole, not once per entry, and whatever was reported
  below it is folded into it.  An entry gone meanwhile is simply gone.
"""

from __future__ import annotations

import errno
import os
from typing import Final, Literal, Protocol, TypeAlias

import attrs

from sessiontemp._kernel import nodes
from sessiontemp._kernel.nodes import Node
from sessiontemp._kernel.root import DIR_FLAGS

__all__ = ["MAX_HELD", "Obstacle", "ObstacleKind", "Visitor", "reopen", "walk"]

# Descriptors a walk holds at most, whatever the depth of the tree.
MAX_HELD: Final = 32

# The errors that mean "this entry stays", not "the walk cannot go on".
_STAYS: Final = frozenset({errno.EACCES, errno.EPERM, errno.EBUSY, errno.EROFS})
# The errors by which a directory refuses any change of its entries: the
# next entry would fail alike, so the directory is reported, once.
_DIRECTORY_REFUSES: Final = frozenset({errno.EACCES, errno.EROFS})

# O_NOFOLLOW would refuse the /proc link itself, which is no symlink a
# name could re-point (see reopen).
_REOPEN_FLAGS: Final = DIR_FLAGS & ~os.O_NOFOLLOW

ObstacleKind: TypeAlias = Literal["mount", "foreign", "error"]


@attrs.frozen
class Obstacle:
    """An entry the walk had to leave.

    ``parts`` are its names below the top (empty for the top itself).
    ``kind`` is "mount" (a mount point, never entered), "foreign" (a
    directory owned by ``uid``, another user, that this process may not
    change) or "error" (the operation failed with ``error``, an errno).
    """

    parts: tuple[str, ...]
    kind: ObstacleKind
    uid: int | None = None
    error: int = 0


class Visitor(Protocol):
    """What a walk does at each entry; an OSError it raises is judged by the walk."""

    def enter(self, fd: int, node: Node) -> None:
        """A directory on the walk's mount (the top as well), about to be listed."""

    def unreadable(self, fd: int, node: Node) -> bool:
        """A directory its reader may not open, held as an O_PATH *fd*; True once readable."""

    def entry(self, parent: int, name: str) -> None:
        """A non-directory *name* (symlinks included) in the directory open as *parent*."""

    def leave(self, parent: int, name: str) -> None:
        """The directory *name* in *parent*, once all it held was visited without obstacle."""


def reopen(path_fd: int) -> int:
    """Open for reading the directory the O_PATH descriptor *path_fd* holds.

    The kernel resolves ``/proc/self/fd/N`` to that very inode, never
    through a name that could have been re-pointed since it was opened.
    """
    return os.open(f"/proc/self/fd/{path_fd}", _REOPEN_FLAGS)


def walk(top: int, visitor: Visitor, *, typed: bool = False) -> list[Obstacle]:
    """Visit everything below the directory open as *top*, depth first; return what stays.

    *top* stays the caller's.  Raises OSError on anything but an obstacle;
    every descriptor the walk opened is closed, however it ends.  *typed*
    trusts the type a listing gives (``d_type``): an entry listed as a
    non-directory goes to ``visitor.entry`` without the open that would
    tell, a third of a walk's time.  Only for a visitor that copes with a
    name turned directory since (a measurement, which only looks); never
    for a removal, whose unlink of it would fail.
    """
    return _Walk(top, visitor, typed=typed).run()


@attrs.define
class _Frame:
    """One directory on the walk's path: its descriptor (-1 while let go), name, entries left."""

    fd: int
    name: str
    node: Node
    pending: list[str] = attrs.field(factory=list)
    # Names the listing typed as non-directories (a typed walk only).
    files: frozenset[str] = frozenset()
    # Something under it stays: it cannot be left (removed) itself.
    kept: bool = False


class _Walk:
    def __init__(self, top: int, visitor: Visitor, *, typed: bool = False) -> None:
        self.visitor = visitor
        self.typed = typed
        self.uid = os.geteuid()
        self.top = _Frame(top, "", nodes.of(top))
        self.stack: list[_Frame] = []
        # Frames 1..let_go are closed (always the shallowest: the first
        # given up, and the last re-opened); frame 0 is the caller's.
        self.let_go = 0
        self.obstacles: list[Obstacle] = []

    def run(self) -> list[Obstacle]:
        if not self.prepare(self.top, None):
            return self.obstacles
        self.stack.append(self.top)
        try:
            while self.stack:
                frame = self.stack[-1]
                if frame.pending:
                    self.step(frame, frame.pending.pop())
                else:
                    self.climb()
        finally:
            for frame in self.stack[1:]:
                if frame.fd >= 0:
                    os.close(frame.fd)
        return self.obstacles

    def prepare(self, frame: _Frame, name: str | None) -> bool:
        """Let the visitor enter *frame* (*name* in the directory being visited; None for
        the top) and list it; False if it stays whole."""
        try:
            self.visitor.enter(frame.fd, frame.node)
            if self.typed:
                with os.scandir(frame.fd) as listing:
                    entries = list(listing)
                frame.pending = [e.name for e in entries]
                frame.files = frozenset(e.name for e in entries
                                        if not e.is_dir(follow_symlinks=False))
            else:
                frame.pending = os.listdir(frame.fd)
        except OSError as e:
            if e.errno not in _STAYS:
                raise
            self.refused(self.parts(name), frame.node, e.errno)
            return False
        return True

    def step(self, frame: _Frame, name: str) -> None:
        """Visit *name* in *frame*: a non-directory at once, a directory by descending into it."""
        if name in frame.files:
            self.act(frame, name, self.visitor.entry)
            return
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=frame.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                self.act(frame, name, self.visitor.entry)
                return
            if e.errno == errno.ENOENT:
                return
            if e.errno != errno.EACCES:
                raise
            opened = self.open_unreadable(frame, name)
            if opened is None:
                return
            fd = opened
        pushed = False
        try:
            child = _Frame(fd, name, nodes.of(fd))
            if not nodes.same_mount(child.node, self.top.node):
                # The open landed on another file system's root: leave it
                # unlisted, and its mount point in place.
                frame.kept = True
                self.add(Obstacle(self.parts(name), "mount"))
                return
            if not self.prepare(child, name):
                frame.kept = True
                return
            self.stack.append(child)
            pushed = True
        finally:
            if not pushed:
                os.close(fd)
        if len(self.stack) - 1 - self.let_go > MAX_HELD:
            self.let_go += 1
            os.close(self.stack[self.let_go].fd)
            self.stack[self.let_go].fd = -1

    def open_unreadable(self, frame: _Frame, name: str) -> int | None:
        """Open the directory *name* its mode keeps closed, if the visitor opens its mode.

        It is held as an O_PATH descriptor first, which needs no permission
        and, with O_NOFOLLOW and O_DIRECTORY, can only be that directory:
        the visitor changes the mode of that inode, never of whatever a
        symlink swapped in meanwhile points to.
        """
        try:
            path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC,
                              dir_fd=frame.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                # Replaced by a non-directory since it failed to open.
                self.act(frame, name, self.visitor.entry)
            elif e.errno != errno.ENOENT:
                raise
            return None
        try:
            node = nodes.of(path_fd)
            if not nodes.same_mount(node, self.top.node):
                frame.kept = True
                self.add(Obstacle(self.parts(name), "mount"))
                return None
            try:
                if self.visitor.unreadable(path_fd, node):
                    return reopen(path_fd)
                error = errno.EACCES
            except OSError as e:
                if e.errno not in _STAYS:
                    raise
                error = e.errno
            frame.kept = True
            self.refused(self.parts(name), node, error)
            return None
        finally:
            os.close(path_fd)

    def climb(self) -> None:
        """Leave the directory on top of the stack, now visited, for its parent."""
        frame = self.stack.pop()
        if not self.stack:
            return  # the top: the caller's
        try:
            parent = self.stack[-1]
            if parent.fd < 0:
                parent.fd = _reopen_parent(frame.fd, parent)
                self.let_go -= 1
        finally:
            os.close(frame.fd)
            frame.fd = -1
        if frame.kept:
            parent.kept = True
        else:
            self.act(parent, frame.name, self.visitor.leave)

    def act(self, frame: _Frame, name: str, action: _Action) -> None:
        """Run *action* on *name* in *frame*, and judge how it failed, if it did."""
        try:
            action(frame.fd, name)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return  # gone meanwhile: what was to be done is done
            if e.errno not in _STAYS:
                raise
            frame.kept = True
            if e.errno in _DIRECTORY_REFUSES:
                frame.pending.clear()
                self.refused(self.parts(), frame.node, e.errno)
            elif e.errno == errno.EBUSY:
                # A file system mounted on the entry (a file can be a mount
                # point too): the kernel refuses to remove it.
                self.add(Obstacle(self.parts(name), "mount"))
            else:
                self.add(Obstacle(self.parts(name), "error", error=e.errno))

    def refused(self, parts: tuple[str, ...], node: Node, error: int) -> None:
        """A directory that stays as a whole: another user's, or one that failed with *error*."""
        if node.uid != self.uid and error == errno.EACCES:
            self.add(Obstacle(parts, "foreign", node.uid, error))
        else:
            # EPERM (an immutable directory) or EROFS: its owner cannot help.
            self.add(Obstacle(parts, "error", node.uid, error))

    def add(self, obstacle: Obstacle) -> None:
        """Record *obstacle*, folding in the ones below it: it is reported for them."""
        depth = len(obstacle.parts)
        self.obstacles = [o for o in self.obstacles if o.parts[:depth] != obstacle.parts]
        self.obstacles.append(obstacle)

    def parts(self, name: str | None = None) -> tuple[str, ...]:
        """The names from the top down to the directory being visited (and to *name* in it)."""
        names = tuple(frame.name for frame in self.stack[1:])
        return names if name is None else (*names, name)


class _Action(Protocol):
    def __call__(self, parent: int, name: str, /) -> None: ...


def _reopen_parent(child: int, parent: _Frame) -> int:
    """Open the parent of the directory held as *child* again, if it is still *parent*.

    ".." is resolved by the kernel from the directory held, not from a path
    that could be re-pointed; and the identity check refuses a child that
    was moved elsewhere meanwhile, whose ".." is no longer the directory it
    came from: acting there would change a place nobody chose.
    """
    fd = os.open("..", DIR_FLAGS, dir_fd=child)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != parent.node.identity:
        os.close(fd)
        raise OSError(errno.ESTALE, "a directory was moved while it was being walked; "
                      "what is left stays for the next pass", parent.name)
    return fd
