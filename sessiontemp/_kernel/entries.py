"""The entries of a root: of their kind, their owner's, private to them, and errors naming them.

A directory of the layout (the root itself among them) must be ours alone:
not writable by group or others (they could rename or swap a generation
under a running command), nor readable or searchable (they could read what
the journal says: every lease's label, a command line with its secrets).
A file must be a regular file of ours.  What refuses one names its path,
the reason and the fix; what the operating system refuses is translated by
:func:`os_error` the same way.  :func:`set_mode` changes a file's mode
without ever following a link or dropping a lock.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from sessiontemp._kernel.where import default_root
from sessiontemp.journal.errors import (
    BadInput,
    RootReadOnly,
    RootUnusable,
    SessionTempError,
    UnsafeRoot,
)

__all__ = ["REMOVE", "check_entry", "check_owned_private", "check_path",
           "empty_path", "os_error", "own_root", "path_of", "set_mode", "without_others"]

REMOVE: Final = "Remove it or pass another root"


def os_error(path: os.PathLike[str] | str, error: OSError, doing: str) -> SessionTempError:
    """The library's error for *error*, raised while *doing* something to the root's *path*.

    Names the path, the operating system's reason and what to do: a bare
    OSError would name at best a file name relative to a descriptor.
    """
    code = error.errno
    why = f"cannot be {doing} ({error.strerror or error})"
    if code in (errno.EACCES, errno.EPERM):
        owner = _other_owner(path)
        if owner is not None:
            # Changing another user's modes is no fix: a root of one's own is.
            return RootReadOnly(path, f"{why}: {owner}", own_root(), code)
        return RootReadOnly(path, why, "Give yourself read and write access to it (chmod u+rwX; "
                            "chattr -i if it is immutable), or pass another root", code)
    if code == errno.EROFS:
        return RootReadOnly(path, why, "Its file system is read-only: remount it read-write, "
                            "or pass a root on a writable file system", code)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return RootUnusable(path, why, "The disk (or your quota) is full: free some space, "
                            "then try again", code)
    if code in (errno.EMFILE, errno.ENFILE):
        return RootUnusable(path, why, "Too many files are open: close some, or raise the "
                            "limit (ulimit -n), then try again", code)
    if code == errno.ELOOP:
        return UnsafeRoot(path, "is a symbolic link", REMOVE)
    if code == errno.ENOTDIR:
        return RootUnusable(path, why, "A component of the path is not a directory: pass "
                            "another root", code)
    if code == errno.ENOENT:
        parent = Path(path).parent
        if doing == "created" and os.path.isdir(parent):
            # The parent is there, yet refuses the name: a virtual file system
            # (/proc, /sys) takes no directory of ours; retrying changes nothing.
            return RootUnusable(path, f"{why}: {parent} takes no new directories (a virtual "
                                "file system, as /proc and /sys are)", "Pass a root on a "
                                f"disk's file system, such as the per-user default "
                                f"({default_root()})", code)
        return RootUnusable(path, why, "It was removed meanwhile; try again", code)
    return RootUnusable(path, why, "Check the path and its file system, then try again", code)


def _other_owner(path: os.PathLike[str] | str) -> str | None:
    """Who owns *path* (or its nearest existing ancestor), when that is another user.

    None when it is this process's user, or cannot be told.
    """
    here = Path(path)
    while True:
        try:
            st = os.lstat(here)
        except OSError:
            if here == here.parent:
                return None
            here = here.parent
            continue
        if st.st_uid == os.getuid():
            return None
        shown = "it is" if here == Path(path) else f"{here} is"
        return f"{shown} owned by {_user(st.st_uid)}, not by you (uid {os.getuid()})"


def _user(uid: int) -> str:
    """``uid 1000 (alice)``: the number, and the name where the system knows one."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def own_root() -> str:
    """The fix for a root that is not the user's own: changing its modes is none."""
    return (f"Use a root of your own: the per-user default ({default_root()}), or pass a "
            "directory you own")


def check_path(value: object, what: str, fix: str) -> None:
    """Refuse *value*, given as *what*, unless it is a path (a str or an os.PathLike).

    ``os.fspath`` would raise a bare TypeError naming neither the argument
    nor the fix.
    """
    if not isinstance(value, str | os.PathLike):
        raise BadInput(f"{what} {value!r}", f"is of type {type(value).__name__}, not a path", fix)


def empty_path(what: str, fix: str) -> BadInput:
    """The error for *what* given as an empty path, with *fix*.

    ``Path("")`` is ``.``: an empty root (what an unset ``"$ROOT"`` expands
    to) would silently make the working directory the root, and write the
    journal and the lock files there.  Never a choice to make by accident.
    """
    return BadInput(f"{what} ''", "is an empty path, which would mean the current directory",
                    fix)


def path_of(dir_fd: int, name: str) -> Path:
    """The full path of *name* under the directory *dir_fd*, for an error message.

    The kernel's own name for the descriptor's directory, which is where
    *name* really is whatever was renamed since; *name* alone if unknown.
    """
    try:
        return Path(os.readlink(f"/proc/self/fd/{dir_fd}")) / name
    except OSError:
        return Path(name)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "of an unknown kind"


def check_entry(path: Path, st: os.stat_result, *, directory: bool, private: bool = True,
                owner: int | None = None) -> None:
    """Refuse an entry of the layout that is a symlink, of the wrong kind or someone else's.

    With *private*, a directory must also be ours alone (to write, read or
    enter: :func:`check_owned_private`), and usable by us (a check that
    writes nothing).  *owner*
    is whose the entry must be (default: ours).
    """
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeRoot(path, "is a symbolic link", REMOVE)
    if directory and not stat.S_ISDIR(st.st_mode):
        raise UnsafeRoot(path, f"is not a directory ({_kind(st.st_mode)})", REMOVE)
    if not directory and not stat.S_ISREG(st.st_mode):
        raise UnsafeRoot(path, f"is not a regular file ({_kind(st.st_mode)})", REMOVE)
    if directory and private:
        check_owned_private(path, st)
    elif owner is None and st.st_uid != os.getuid():
        raise UnsafeRoot(path, f"is owned by uid {st.st_uid}, not you (uid {os.getuid()})",
                         REMOVE)
    elif owner is not None and st.st_uid != owner:
        raise UnsafeRoot(path, f"is owned by uid {st.st_uid}, not by the root's owner "
                         f"(uid {owner})", REMOVE)


def check_owned_private(path: Path, st: os.stat_result, *, root: bool = False) -> None:
    """Refuse a directory not ours alone (to write, read or enter), or one we cannot use.

    For the *root* itself, another user's is answered with its owner and
    the user's own default root: removing it is neither possible nor the fix.
    """
    uid = os.getuid()
    if st.st_uid != uid and root:
        raise UnsafeRoot(path, f"is owned by {_user(st.st_uid)}, not you (uid {uid})",
                         own_root())
    if st.st_uid != uid:
        raise UnsafeRoot(path, f"is owned by uid {st.st_uid}, not you (uid {uid})",
                         REMOVE)
    if st.st_mode & 0o022:
        raise UnsafeRoot(
            path,
            f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})",
            f"Run `chmod 700 {path}` or pass another root",
        )
    if st.st_mode & 0o055:
        # Whoever can enter the root can read a journal that was ever
        # readable (every lease's label and command line is journaled) and
        # list the generations; refused rather than changed: the directory
        # may be one of other uses (`mkdir -p` makes 0755), and its mode is
        # its owner's choice.
        raise UnsafeRoot(
            path,
            f"is readable or searchable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): they could read the journal's labels and "
            "command lines",
            f"Run `chmod 700 {path}` or pass another root (one that does not exist is made "
            "0700)",
        )
    if st.st_mode & 0o700 != 0o700:
        # Refused for root too, which the bits would not stop: the same root
        # must work, or not, whoever opens it.
        raise RootReadOnly(
            path,
            f"is not readable, writable and searchable by you (mode "
            f"{stat.S_IMODE(st.st_mode):04o})",
            f"Run `chmod 700 {path}` or pass another root", errno.EACCES,
        )


def without_others(mode: int) -> int:
    """*mode* without group and other bits, if the library marked the file (the sticky bit)."""
    return mode & ~0o077 if mode & stat.S_ISVTX else mode


def set_mode(name: str, dir_fd: int, change: Callable[[int], int]) -> None:
    """Give the regular file *name* of ours under *dir_fd* the mode ``change(mode)``.

    Through an ``O_PATH | O_NOFOLLOW`` descriptor and ``/proc/self/fd``: a
    symlink is never followed, and closing it drops no POSIX lock this
    process holds on the file (SQLite's).  Best effort: a file gone
    meanwhile, or one the file system will not change, is left as it is.
    """
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and change(mode) != mode:
            os.chmod(f"/proc/self/fd/{fd}", change(mode))
    except OSError:
        pass
    finally:
        os.close(fd)
