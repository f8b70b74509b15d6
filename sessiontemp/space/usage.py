"""How much a directory holds on disk: bytes allocated and inodes, by a read-only walk.

The measurement is a :mod:`sessiontemp._kernel.walk` with a visitor that only
looks, so it keeps every rule a removal keeps: nothing is resolved by path,
a symlink is never followed (it is counted as the small file it is), and
nothing on another mount (a tmpfs or bind mount inside the directory) is
entered.  What it counts:

- bytes *allocated* (``st_blocks * 512``, what ``du`` reports), not the
  apparent size: a sparse file of 1 TiB with one block written costs one
  block, and a file system fills by allocation;
- every inode once: a file hard-linked under several names in the tree
  costs its space once, as in ``du``;
- the directory itself, as ``du -s`` counts it.

What it cannot read (a directory of mode 000 to a non-root walker,
another user's directory) is counted as the entry it is and named in
:attr:`Usage.unread`: a number that is too small must say so.  It never
changes a mode to look inside (removal does, to remove; a measurement has
no business changing anything).

Nothing under the directory stays still while it is measured: a command
deletes files, a removal empties the whole tree.  An entry gone meanwhile
is simply not counted, and a walk the kernel stops (a directory moved away
mid-walk) keeps what it counted and names that entry as unread: a
measurement never raises for what happens under it.
"""

from __future__ import annotations

import errno
import heapq
import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs

from sessiontemp._kernel import nodes, walk
from sessiontemp._kernel.nodes import Node
from sessiontemp._kernel.processes import python_child
from sessiontemp._kernel.root import DIR_FLAGS

__all__ = ["LARGEST", "Usage", "child_command", "measure_at", "measure_elsewhere", "measure_tree"]

# How many of the largest entries a measurement names.
LARGEST: Final = 3
# How many unreadable entries a measurement names at most (it counts them all).
_NAMED_UNREAD: Final = 20
_BLOCK: Final = 512
# How many entries a walk counts between two looks at whether to stop.
_STOP_EVERY: Final = 1024


@attrs.frozen
class Usage:
    """What a directory held when it was measured.

    ``bytes`` is the space allocated (hard links once), ``inodes`` the
    entries, the directory itself included (its own entry's blocks are
    in ``bytes`` too, as ``du -s`` counts them: 4 KiB for an empty
    directory on most file systems); ``largest`` its three
    largest entries, as ``(name, bytes)``, largest first, and
    ``most_inodes`` the three holding the most inodes, as ``(name,
    inodes)``, most first (a subdirectory counts itself and all under it);
    ``unread`` names, relative to ``path``, what the walk could not read
    (at most 20; ``unread_count`` counts them all), and ``mounts`` the
    file systems mounted inside it, which it did not enter.
    """

    path: Path
    bytes: int = 0
    inodes: int = 0
    unread: tuple[str, ...] = ()
    largest: tuple[tuple[str, int], ...] = ()
    mounts: tuple[str, ...] = ()
    unread_count: int = 0
    most_inodes: tuple[tuple[str, int], ...] = ()

    def describe_largest(self) -> str:
        """The largest entries, for a message: ``"a (1.0 MiB), b (12 KiB)"``, or "none"."""
        if not self.largest:
            return "none"
        return ", ".join(f"{name} ({human(size)})" for name, size in self.largest)


def human(size: int) -> str:
    """*size* bytes for people: ``"1.5 GiB"``, ``"12 KiB"``, ``"300 B"``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def measure_tree(path: str | os.PathLike[str]) -> Usage:
    """Measure the directory at *path* (never through a symlink); zeros if it is gone.

    Raises OSError only for the directory itself: not a directory, a
    symlink (ELOOP), or not readable.
    """
    target = Path(path)
    try:
        fd = os.open(target, DIR_FLAGS)
    except FileNotFoundError:
        return Usage(target)
    try:
        usage = measure_at(fd, target)
        assert usage is not None, "only a walk told to stop stops"
        return usage
    finally:
        os.close(fd)


def measure_at(fd: int, path: Path, *, stop: Callable[[], bool] | None = None) -> Usage | None:
    """Measure the directory open as *fd* (the caller's; *path* names it in the result).

    Each entry of the top is walked on its own, so that its size is known
    for :attr:`Usage.largest`; hard links are counted once across them all.
    *stop* is asked every thousand entries or so; once it says True, the
    walk ends at once and the result is None (a manager closing does not
    wait for a long walk of its background measurement).
    """
    counter = _Counter(stop)
    try:
        return _measure(fd, path, counter)
    except _Stopped:
        return None


def _measure(fd: int, path: Path, counter: _Counter) -> Usage:
    try:
        counter.directory(os.fstat(fd))
        names = os.listdir(fd)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ESTALE):
            raise
        # Removed under us: what is gone holds nothing.
        return Usage(path)
    top = nodes.of(fd)
    sizes: list[tuple[int, str]] = []
    counts: list[tuple[int, str]] = []
    unread: list[str] = []
    mounts: list[str] = []
    for name in names:
        before, inodes = counter.bytes, counter.inodes
        _measure_entry(fd, top, name, counter, unread, mounts)
        sizes.append((counter.bytes - before, name))
        counts.append((counter.inodes - inodes, name))
    # The most first; among equals, by name.
    largest = heapq.nsmallest(LARGEST, sizes, key=lambda item: (-item[0], item[1]))
    crowded = heapq.nsmallest(LARGEST, counts, key=lambda item: (-item[0], item[1]))
    return Usage(
        path, counter.bytes, counter.inodes, tuple(sorted(unread)[:_NAMED_UNREAD]),
        tuple((name, size) for size, name in largest), tuple(sorted(mounts)), len(unread),
        tuple((name, count) for count, name in crowded),
    )


# The child a walk runs in, at a low CPU priority (sessiontemp.meter says
# why 10); sessiontemp._kernel.processes.python_child says how it is started.
_CHILD: Final = (
    "os.nice(10)\n"
    "from sessiontemp.space.usage import _answer\n"
    "_answer(int(sys.argv[2]), sys.argv[3])\n"
)


def child_command(fd: int, path: Path) -> tuple[list[str], dict[str, str], str]:
    """The measuring child's command line, environment and working directory.

    It measures the directory open as *fd* (which it inherits) and prints
    the result as JSON.  It imports only the standard library, the library
    and attrs, from where this process found them, and works in ``/``.
    """
    import attr

    command, env = python_child(_CHILD, (attrs, attr), str(fd), str(path))
    return command, env, "/"


def measure_elsewhere(fd: int, path: Path,
                      started: Callable[[subprocess.Popen[bytes]], None]) -> Usage | None:
    """:func:`measure_at`, in a child process at nice 10; None if it did not finish.

    A walk in a thread of this process would take its GIL back after every
    system call, and a busy thread here would give it up each time (the
    measured cost: a fifth of a busy manager's lease cycles): in a child,
    the walk shares nothing with this process but the directory, handed
    over as the descriptor *fd*.  *started* is given the child, which it
    may kill to stop the walk.
    """
    command, env, cwd = child_command(fd, path)
    child = subprocess.Popen(
        command, pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    started(child)
    out, _ = child.communicate()
    if child.returncode != 0:
        return None
    found = json.loads(out)
    return Usage(path, found["bytes"], found["inodes"], tuple(found["unread"]),
                 tuple((name, size) for name, size in found["largest"]),
                 tuple(found["mounts"]), found["unread_count"],
                 tuple((name, count) for name, count in found["most_inodes"]))


def _answer(fd: int, path: str) -> None:
    """The child's part of :func:`measure_elsewhere`: measure, print as JSON."""
    found = measure_at(fd, Path(path))
    assert found is not None
    print(json.dumps({"bytes": found.bytes, "inodes": found.inodes,
                      "unread": list(found.unread), "largest": list(found.largest),
                      "mounts": list(found.mounts), "unread_count": found.unread_count,
                      "most_inodes": list(found.most_inodes)}))


def _measure_entry(top_fd: int, top: Node, name: str, counter: _Counter,
                   unread: list[str], mounts: list[str]) -> None:
    """Count *name* in the top, a whole subtree for a directory, into *counter*."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=top_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            counter.entry(top_fd, name)
        elif e.errno == errno.EACCES:
            counter.entry(top_fd, name)
            unread.append(name)
        elif e.errno != errno.ENOENT:
            unread.append(name)
        return
    try:
        if not nodes.same_mount(nodes.of(fd), top):
            mounts.append(name)
            return
        try:
            obstacles = walk.walk(fd, counter, typed=True)
        except OSError:
            # The kernel stopped the walk (a directory moved away under
            # it, an I/O error): what it counted stays counted.
            unread.append(name)
            return
    finally:
        os.close(fd)
    for obstacle in obstacles:
        where = "/".join((name, *obstacle.parts))
        (mounts if obstacle.kind == "mount" else unread).append(where)


class _Stopped(Exception):
    """A walk told to stop: never seen outside this module."""


class _Counter:
    """The measurement's part of a walk: count what each entry allocates, change nothing."""

    def __init__(self, stop: Callable[[], bool] | None = None) -> None:
        self.stop = stop
        self.bytes = 0
        self.inodes = 0
        # Inodes with more than one name, seen already: their space is counted once.
        self.linked: set[tuple[int, int]] = set()

    def directory(self, st: os.stat_result) -> None:
        self.count()
        self.bytes += st.st_blocks * _BLOCK

    def count(self) -> None:
        self.inodes += 1
        if self.stop is not None and self.inodes % _STOP_EVERY == 0 and self.stop():
            raise _Stopped

    def enter(self, fd: int, node: Node) -> None:
        self.directory(os.fstat(fd))

    def unreadable(self, fd: int, node: Node) -> bool:
        # Counted as the directory it is (an O_PATH descriptor can be
        # stat'ed); what it holds stays unknown, and is reported.
        self.directory(os.fstat(fd))
        return False

    def entry(self, parent: int, name: str) -> None:
        # A FileNotFoundError (gone meanwhile) is the walk's to ignore.
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in self.linked:
                return
            self.linked.add(key)
        self.count()
        self.bytes += st.st_blocks * _BLOCK

    def leave(self, parent: int, name: str) -> None:
        pass
