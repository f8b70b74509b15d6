"""The root directory: where a journal and its generations live, and why it can be trusted.

A root is created 0700 for the current user and refused when it is a
symbolic link, someone else's, or writable by group or others: anyone who
can write to the root can rename or swap a generation under a running
command.  Once checked, the root is held open as a directory descriptor and
every create, rename, lock and removal of a generation is done relative to
that descriptor, never by re-resolving the path.

Layout::

    ROOT/journal.sqlite3            the event journal (+ -wal, -shm)
    ROOT/recovery.lock              serialises recovery passes
    ROOT/managers/<id>.lock         one liveness lock per live manager
    ROOT/sessiontemp-gen-<id>/      a generation directory
    ROOT/sessiontemp-trash-<id>/    a generation being removed
    ROOT/sessions/<name>.lock       a named session's owner lock
    ROOT/artifacts/<id>-<label>     a durable artifact
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

import attrs

from journal import ids
from journal.errors import UnsafeRoot
from sessiontemp import resources

__all__ = [
    "DIR_FLAGS",
    "GENERATION_PREFIX",
    "JOURNAL_NAME",
    "TRASH_PREFIX",
    "Root",
    "default_root",
    "generation_id_of",
    "generation_name",
    "lock_file_name",
    "new_generation_id",
    "trash_name",
]

GENERATION_PREFIX: Final = "sessiontemp-gen-"
TRASH_PREFIX: Final = "sessiontemp-trash-"
JOURNAL_NAME: Final = "journal.sqlite3"
MANAGERS_DIR: Final = "managers"
RECOVERY_LOCK: Final = "recovery.lock"

# How every directory under the root is opened: never through a symlink
# (O_NOFOLLOW), never mistaking a file for a directory, never leaked into
# a child (O_CLOEXEC), and never blocking on whatever is there (O_NONBLOCK).
DIR_FLAGS: Final = (
    os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
)


def default_root() -> Path:
    """The per-user root under the system temporary directory."""
    return Path(tempfile.gettempdir()) / f"sessiontemp-{os.getuid()}"


new_generation_id = ids.new_generation


def lock_file_name(manager: str) -> str:
    """The name of a manager's liveness lock file inside ``ROOT/managers``."""
    return f"{manager}.lock"


def generation_name(generation: str) -> str:
    return GENERATION_PREFIX + generation


def trash_name(generation: str) -> str:
    return TRASH_PREFIX + generation


def generation_id_of(name: str) -> str | None:
    """The generation id in a generation or trash name, None for any other name.

    Only a canonical id counts: ``sessiontemp-gen-anything`` was not made
    by sessiontemp, and its name must never reach the journal.
    """
    for prefix in (GENERATION_PREFIX, TRASH_PREFIX):
        if name.startswith(prefix) and ids.is_generation(name[len(prefix):]):
            return name[len(prefix):]
    return None


@attrs.define
class Root:
    """An open, checked root directory, and its ``managers`` directory, held open."""

    path: Path
    fd: int
    device: int
    inode: int
    managers_fd: int = -1

    @classmethod
    def open(cls, path: os.PathLike[str] | str | None = None) -> Root:
        """Create *path* if missing (0700), check it, and hold it open.

        Raises :class:`UnsafeRoot` naming the path, what is wrong and the fix,
        and ValueError for an empty path (which would mean the current
        directory: never a choice to make by accident).
        """
        if path is not None and not os.fspath(path):
            raise ValueError("the root is an empty path; pass a directory, or None for the "
                             f"per-user default ({default_root()})")
        root = Path(os.path.abspath(default_root() if path is None else path))
        root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(root, 0o700)
        try:
            # O_NOFOLLOW: a root pre-created as a symlink by another user
            # would otherwise send every generation to a place they chose.
            fd = os.open(root, DIR_FLAGS)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                # With O_DIRECTORY, Linux reports a symlink as ENOTDIR, not ELOOP.
                what = "is a symbolic link" if root.is_symlink() else "is not a directory"
                raise UnsafeRoot(root, what, "Remove it or pass another root") from None
            if resources.shortage(e):
                # The process is short of descriptors, not the root unsafe.
                raise resources.unavailable(root, "the root could not be opened", e) from e
            raise UnsafeRoot(root, f"cannot be opened ({e.strerror})",
                             "Fix its permissions or pass another root") from None
        st = os.fstat(fd)
        opened = cls(path=root, fd=fd, device=st.st_dev, inode=st.st_ino)
        try:
            check_owned_private(root, st)
            # The descriptor was checked, not the name: someone who swapped
            # the name between our open and now would get the journal and
            # the lock files, which are opened by path, into their directory.
            opened.check_identity()
            opened.managers_fd = opened._open_managers()
        except BaseException:
            opened.close()
            raise
        return opened

    def _open_managers(self) -> int:
        """Make ``managers`` if missing, check it, and return a descriptor holding it."""
        # The liveness lock files are opened by path through it: a
        # symlink there would put them, and the recovery's unlinks of
        # litter in it, wherever the link points.
        return self.open_private(MANAGERS_DIR)

    def open_private(self, name: str) -> int:
        """Make the directory *name* in the root if missing (0700), check it, and hold it open.

        Refused (:class:`UnsafeRoot`) when it is a symlink or something
        other than a directory, someone else's, or open to others.  Whatever
        is made and probed in it afterwards goes relative to the returned
        descriptor, never through a path.
        """
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=self.fd)
        path = self.path / name
        found = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        if not stat.S_ISDIR(found.st_mode):
            raise UnsafeRoot(path, "is not a directory (" + (
                "a symbolic link" if stat.S_ISLNK(found.st_mode) else "another kind"
            ) + ")", "Remove it or pass another root")
        check_owned_private(path, found)
        fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        if os.fstat(fd).st_ino != found.st_ino:
            os.close(fd)
            raise UnsafeRoot(path, "was replaced while it was opened",
                             "Find out who moved it; then open the root again")
        return fd

    def managers_removed(self) -> bool:
        """Whether the ``managers`` directory held open was removed (``rm -r``) since."""
        return os.fstat(self.managers_fd).st_nlink == 0

    def reopen_managers(self) -> None:
        """Make and hold ``managers`` again, after it was removed under a live manager."""
        fd = self._open_managers()
        old, self.managers_fd = self.managers_fd, fd
        os.close(old)

    def check_identity(self) -> None:
        """Refuse a root whose path no longer names the directory held open, or gone unsafe.

        Everything done through the descriptor stays in the directory that
        was checked, but SQLite and filelock take paths: if the path were
        renamed and replaced after the open, the journal and the lock files
        would be opened in the replacement (someone else's choice) while the
        generations stay in the original.  The mode and owner are re-read
        too (the path names the very inode held, so they are its own), and
        a root opened to others after it was checked is refused.  One cheap
        lstat, done before every use of the path and before each recovery
        pass acts.
        """
        try:
            # follow_symlinks=False: a symlink put in place of the root, even
            # one to the very directory we hold, would pass a following stat
            # and could be pointed elsewhere a moment later.
            named = os.stat(self.path, follow_symlinks=False)
        except OSError as e:
            raise UnsafeRoot(self.path, f"was replaced after it was opened: it is gone "
                             f"({e.strerror})",
                             "Find out who moved it; then open the root again") from None
        if (named.st_dev, named.st_ino) != (self.device, self.inode):
            raise UnsafeRoot(self.path, "was replaced after it was opened: the path now "
                             "names another " + ("symbolic link" if stat.S_ISLNK(named.st_mode)
                                                 else "entry"),
                             "Find out who moved it; then open the root again")
        # The same inode as the one held: its mode and owner are the
        # descriptor's own, with no fstat of it.
        check_owned_private(self.path, named)

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL_NAME

    def manager_lock_path(self, manager: str) -> Path:
        return self.path / MANAGERS_DIR / lock_file_name(manager)

    @property
    def recovery_lock_path(self) -> Path:
        return self.path / RECOVERY_LOCK

    def check_journal(self) -> None:
        """Refuse a journal that is a symlink: SQLite would follow it out of the root.

        The root's identity is checked first: SQLite opens the journal by
        path, through the root's name.
        """
        self.check_identity()
        # SQLite follows a symlink at any of its three files: the -wal and
        # -shm are written to as much as the journal itself; the segment
        # directory holds the journal's later files.
        for name in (JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm",
                     f"{JOURNAL_NAME}.d"):
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeRoot(self.path / name, "is a symbolic link",
                                 "Remove it or pass another root")
            if st.st_uid != os.getuid():
                raise UnsafeRoot(self.path / name, f"is owned by uid {st.st_uid}, not you "
                                 f"(uid {os.getuid()})", "Remove it or pass another root")

    def close(self) -> None:
        """Close both descriptors (in a forked child too: it closes only its copies)."""
        for name in ("managers_fd", "fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)


def check_owned_private(path: Path, st: os.stat_result) -> None:
    """Refuse a directory that is not ours alone to write."""
    uid = os.getuid()
    if st.st_uid != uid:
        raise UnsafeRoot(path, f"is owned by uid {st.st_uid}, not you (uid {uid})",
                         "Remove it or pass another root")
    if st.st_mode & 0o022:
        raise UnsafeRoot(
            path,
            f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})",
            f"Run `chmod 700 {path}` or pass another root",
        )
