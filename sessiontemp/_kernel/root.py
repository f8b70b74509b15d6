"""The root directory: where a journal and its generations live, and why it can be trusted.

A root is created 0700 for the current user (with any missing parent,
0700 too) and refused when it is a symbolic link, someone else's, or open
to group or others: anyone who can write to the root can rename or swap a
generation under a running command, and anyone who can enter it can read
what the journal says (labels, command lines).  Every file the library
makes in it is 0600 and every directory 0700, whatever the umask
(:meth:`Root.check_journal` for the journal's, which SQLite makes).  Once checked, the root is
held open as a directory descriptor and every create, rename, lock and
removal of a generation is done relative to that descriptor, never by
re-resolving the path.  Only a manager creates a root: a recovery, a
removal or an inspection given a path that does not exist, or a directory
that holds nothing of a root's (no journal, no entry of the layout), says
so (:class:`~sessiontemp.NoSuchRoot`) and writes nothing.

Layout::

    ROOT/journal.sqlite3            the event journal (+ -wal, -shm)
    ROOT/journal.sqlite3.d/         its later segments
    ROOT/recovery.lock              serialises recovery passes
    ROOT/managers/<id>.lock         one liveness lock per live manager
    ROOT/sessiontemp-gen-<id>/      a generation directory
    ROOT/sessiontemp-trash-<id>/    a generation being removed
    ROOT/sessions/<name>.lock       a named session's owner lock
    ROOT/artifacts/<id>-<label>     a durable artifact
    ROOT/holder.sock                the session holder's socket (sessiontemp.holder.serve)
    ROOT/holder.lock                held by the live session holder

Every entry of the layout but the generations is checked on open (never a
symlink, of the kind it must be, ours), so that a planted one is refused
with its path, the reason and the fix, not met later as a bare OSError.

An age-based cleaner (systemd-tmpfiles) configured on the root or on its
parent must never take the root's own files.  tmpfiles skips a directory
whose BSD flock it cannot take, but only a subdirectory of the one its line
names, and it never probes plain files; it does skip a regular file with
the sticky bit set (the XDG_RUNTIME_DIR convention; the bit means nothing
else for a regular file on Linux).  So every file the library makes in the
root carries the bit (:data:`FILE_MODE`; the journal's, which SQLite makes,
are marked by :mod:`sessiontemp.journal.sticky`), which protects them when no process
holds the root, and every open :class:`Root` holds a shared flock on each
directory of the layout (``managers``, ``sessions``, ``artifacts``,
``journal.sqlite3.d``), so that a cleaner skips them whole while the root
is in use.  Generations carry their own locks.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

import attrs

from sessiontemp._kernel import resources
from sessiontemp._kernel.entries import (
    check_entry,
    check_owned_private,
    check_path,
    empty_path,
    os_error,
    path_of,
    set_mode,
    without_others,
)
from sessiontemp._kernel.locks import hold_shared
from sessiontemp._kernel.where import HOLDER_LOCK, HOLDER_SOCKET, default_root
from sessiontemp.journal import ids
from sessiontemp.journal.errors import NoSuchRoot, SessionTempError, UnsafeRoot

__all__ = [
    "ARTIFACTS_DIR",
    "DIRECTORIES",
    "DIR_FLAGS",
    "ENTRIES",
    "FILES",
    "FILE_MODE",
    "GENERATION_PREFIX",
    "JOURNAL_NAME",
    "MANAGERS_DIR",
    "RECOVERY_LOCK",
    "RESERVE",
    "SEGMENTS_DIR",
    "SESSIONS_DIR",
    "TRASH_PREFIX",
    "WORK_DIR",
    "Root",
    "check_entry",
    "check_layout",
    "check_owned_private",
    "check_path",
    "check_root_path",
    "default_root",
    "empty_path",
    "generation_id_of",
    "generation_name",
    "lock_file_name",
    "manager_of_lock_file",
    "new_generation_id",
    "os_error",
    "path_of",
    "session_lock_name",
    "trash_name",
]

GENERATION_PREFIX: Final = "sessiontemp-gen-"
TRASH_PREFIX: Final = "sessiontemp-trash-"
JOURNAL_NAME: Final = "journal.sqlite3"
SEGMENTS_DIR: Final = JOURNAL_NAME + ".d"
MANAGERS_DIR: Final = "managers"
SESSIONS_DIR: Final = "sessions"
ARTIFACTS_DIR: Final = "artifacts"
RECOVERY_LOCK: Final = "recovery.lock"
# The directory a generation's commands get (a lease's path, their TMPDIR),
# its one entry: locked one level below the locked generation, so that an
# age cleaner's line naming the generation, or a glob over the root's
# entries, meets a lock before any file a command made (systemd-tmpfiles
# never probes the directory its line names, only those it descends into).
WORK_DIR: Final = "tmp"
# Blocks kept allocated for the journal to record removals on a full disk
# (sessiontemp.space.reserve).
RESERVE: Final = "space.reserve"
# The root's own directories and plain files, as the library makes them.
DIRECTORIES: Final = (MANAGERS_DIR, SESSIONS_DIR, ARTIFACTS_DIR, SEGMENTS_DIR)
FILES: Final = (JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm", RECOVERY_LOCK,
                 RESERVE, HOLDER_LOCK)
_JOURNAL_ENTRIES: Final = (*FILES[:3], SEGMENTS_DIR)
# Every name of the root's own (generations and trash aside), with the
# rollback journal SQLite may leave beside an old-format journal.
ENTRIES: Final = frozenset({*FILES, f"{JOURNAL_NAME}-journal", *DIRECTORIES, HOLDER_SOCKET})
_LOCK_SUFFIX: Final = ".lock"

# The mode of every plain file the library makes in the root: private, and
# sticky, so that systemd-tmpfiles' age clean never removes it (it skips
# such files, and the bit has no other meaning for a regular file).
FILE_MODE: Final = 0o600 | stat.S_ISVTX

# How every directory under the root is opened: never through a symlink
# (O_NOFOLLOW), never mistaking a file for a directory, never leaked into
# a child (O_CLOEXEC), and never blocking on whatever is there (O_NONBLOCK).
DIR_FLAGS: Final = (
    os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
)
# How long an open waits for an age cleaner that holds one of the root's
# directories exclusively (it does so only while it cleans it) before it
# works on without that directory's lock: its files are sticky all the same.
_HOLD_PATIENCE: Final = 5.0


new_generation_id = ids.new_generation


def lock_file_name(manager: str) -> str:
    """The name of a manager's liveness lock file inside ``ROOT/managers``."""
    return manager + _LOCK_SUFFIX


def session_lock_name(name: str) -> str:
    """The name of a session's owner lock file inside ``ROOT/sessions``."""
    return name + _LOCK_SUFFIX


def manager_of_lock_file(name: str) -> str | None:
    """The manager a name in ``ROOT/managers`` belongs to, None if the library never gives it.

    ``<id>.lock``, or ``.<id>.lock.<hex>``: the spare a lock file is made
    under before it is renamed into place (``LivenessLock.check`` in
    :mod:`sessiontemp._kernel.liveness`).
    """
    if name.startswith("."):
        stem, dot, tag = name[1:].rpartition(".")
        if not dot or not tag or any(c not in "0123456789abcdef" for c in tag):
            return None
        name = stem
    manager = name.removesuffix(_LOCK_SUFFIX)
    return manager if manager != name and ids.MANAGER.fullmatch(manager) else None


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


def check_layout(root: os.PathLike[str] | str) -> None:
    """Refuse, by path and writing nothing, a root whose layout entries were tampered with.

    For the inspector, which reads a root without opening it as a
    :class:`Root`: a symlink at ``managers`` or ``artifacts`` would make it
    probe and list another directory as the root's own.  An entry must be
    the root's owner's, not the reader's: an administrator may read a
    user's root after an incident.
    """
    base = Path(root)
    try:
        owner = os.lstat(base).st_uid
    except OSError as e:
        raise os_error(base, e, "examined") from None
    for name in (*DIRECTORIES, *FILES):
        path = base / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise os_error(path, e, "examined") from None
        check_entry(path, st, directory=name in DIRECTORIES, private=False, owner=owner)


def check_root_path(root: object) -> None:
    """Refuse a root given as anything but a path or None (:class:`BadInput`, with the fix)."""
    if root is not None:
        check_path(root, "the root", "Pass a directory as a str or Path, or None for the "
                   f"per-user default ({default_root()})")


def _make(root: Path) -> None:
    """Make *root* and every missing parent, each 0700: nothing wider is ever created."""
    missing = []
    here = root
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        _make_private(directory, None, directory)


def _make_private(name: os.PathLike[str] | str, dir_fd: int | None, path: Path) -> bool:
    """Make the directory *name* (under *dir_fd*) exactly 0700, whatever the umask.

    Returns False when something is there already (left for the caller's
    checks).  The mode is set through an ``O_PATH`` descriptor, which needs
    no access to the directory and never follows a link put in its place.
    """
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        return False
    except OSError as e:
        raise os_error(path, e, "created") from None
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return True
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError as e:
        raise os_error(path, e, "made private") from None
    finally:
        os.close(fd)
    return True


@attrs.define
class Root:
    """An open, checked root directory, and its ``managers`` directory, held open.

    ``dir_locks`` maps each directory of the layout that exists to a
    descriptor holding a shared flock on it, for as long as the root is open.
    """

    path: Path
    fd: int
    device: int
    inode: int
    managers_fd: int = -1
    dir_locks: dict[str, int] = attrs.field(factory=dict)

    @classmethod
    def open(cls, path: os.PathLike[str] | str | None = None, *, create: bool = True) -> Root:
        """Check *path*, creating it (0700, missing parents too) when *create*; hold it open.

        Raises :class:`UnsafeRoot` naming the path, what is wrong and the fix;
        :class:`~sessiontemp.NoSuchRoot` when *create* is False and *path* does not
        exist or was never a root (nothing is written to it then);
        :class:`~sessiontemp.RootReadOnly` or :class:`~sessiontemp.RootUnusable` when the
        operating system refuses what is needed; :class:`~sessiontemp.BadInput` (a
        ValueError) for an empty path (:func:`empty_path`).
        """
        check_root_path(path)
        if path is not None and not os.fspath(path):
            raise empty_path("the root", "Pass a directory, or None for the per-user default "
                             f"({default_root()})")
        root = Path(os.path.abspath(default_root() if path is None else path))
        if create:
            _make(root)
        try:
            # O_NOFOLLOW: a root pre-created as a symlink by another user
            # would otherwise send every generation to a place they chose.
            fd = os.open(root, DIR_FLAGS)
        except FileNotFoundError:
            raise NoSuchRoot(root, "does not exist", f"Check the path{_default_hint(root)}: "
                             "only a Manager creates a root, recovery and removal never do",
                             errno.ENOENT) from None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                # With O_DIRECTORY, Linux reports a symlink as ENOTDIR, not ELOOP.
                # Not sessiontemp's to move or remove: the fix is the path.
                if root.is_symlink():
                    raise UnsafeRoot(root, "is a symbolic link", "Pass the directory itself "
                                     "(not a link to it) as the root, or another root") from None
                raise UnsafeRoot(root, "is not a directory", "Pass the path of a directory as "
                                 "the root (or of one to make)") from None
            if resources.shortage(e):
                # The process is short of descriptors, not the root unsafe.
                raise resources.unavailable(root, "the root could not be opened", e) from e
            raise os_error(root, e, "opened") from None
        st = os.fstat(fd)
        opened = cls(path=root, fd=fd, device=st.st_dev, inode=st.st_ino)
        try:
            if not create:
                # First, before any check that could refuse it and anything
                # made in it: a directory that was never a root is not made
                # one (a mistyped --root ~), and whether it would be a safe
                # root is not the question then.
                opened._require_root()
            check_owned_private(root, st, root=True)
            # The descriptor was checked, not the name: someone who swapped
            # the name between our open and now would get the journal and
            # the lock files, which are opened by path, into their directory.
            opened.check_identity()
            opened.check_entries()
            opened.managers_fd = opened._open_managers()
            opened.hold_existing()
        except BaseException:
            opened.close()
            raise
        return opened

    def _require_root(self) -> None:
        """Raise :class:`NoSuchRoot` unless the directory held is a root, writing nothing.

        A root holds its journal, or (the journal deleted or moved aside,
        which a recovery starts afresh) any other entry of the layout: a
        directory holding none of them was never made a root.
        """
        try:
            names = os.listdir(self.fd)
        except OSError as e:
            raise os_error(self.path, e, "listed") from None
        # The prefixes are the library's: a directory that holds
        # sessiontemp-gen-* entries is a root whatever their ids.
        if any(name in ENTRIES or name.startswith((GENERATION_PREFIX, TRASH_PREFIX))
               for name in names):
            return
        raise NoSuchRoot(self.path, f"holds no sessiontemp journal ({JOURNAL_NAME}) and nothing "
                         "else of a root's", f"Check the path{_default_hint(self.path)}: only "
                         "a Manager makes a root, recovery and removal never do, and nothing "
                         "was written to it", errno.ENOENT)

    def check_entries(self, names: tuple[str, ...] = (*DIRECTORIES, *FILES)) -> None:
        """Refuse the root if one of the layout's entries *names* is not what the library made."""
        for name in names:
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise os_error(self.path / name, e, "examined") from None
            check_entry(self.path / name, st, directory=name in DIRECTORIES)

    def _open_managers(self) -> int:
        """Make ``managers`` if missing, check it, and return a descriptor holding it."""
        # The liveness lock files are opened by path through it: a
        # symlink there would put them, and the recovery's unlinks of
        # litter in it, wherever the link points.
        return self.open_private(MANAGERS_DIR)

    def open_private(self, name: str, *, create: bool = True) -> int:
        """Make the directory *name* in the root if missing (0700), check it, and hold it open.

        Refused (:class:`UnsafeRoot`) when it is a symlink or something
        other than a directory, someone else's, or open to others.  Whatever
        is made and probed in it afterwards goes relative to the returned
        descriptor, never through a path.  The directory's shared flock is
        held from now on (see :attr:`dir_locks`).  With *create* False, a
        missing directory raises FileNotFoundError.
        """
        path = self.path / name
        if create:
            _make_private(name, self.fd, path)
        try:
            found = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            check_entry(path, found, directory=True)
            fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            if not create:
                raise
            raise UnsafeRoot(path, "was removed while it was opened",
                             "Find out who removed it; then open the root again") from None
        except OSError as e:
            if isinstance(e, SessionTempError):
                raise
            raise os_error(path, e, "opened") from None
        try:
            if os.fstat(fd).st_ino != found.st_ino:
                raise UnsafeRoot(path, "was replaced while it was opened",
                                 "Find out who moved it; then open the root again")
            self._hold(name, fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _hold(self, name: str, fd: int) -> None:
        """Hold the shared flock of the root's directory *name*, open as *fd*.

        Through a descriptor of its own, kept until :meth:`close`: an age
        cleaner on the root skips a directory it cannot lock.  A directory
        made again after a removal is held anew.
        """
        mine = os.fstat(fd)
        old = self.dir_locks.get(name)
        if old is not None:
            st = os.fstat(old)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino) and st.st_nlink:
                return
        try:
            hold = os.open(".", DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            raise os_error(self.path / name, e, "opened") from None
        try:
            hold_shared(hold, patience=_HOLD_PATIENCE)
        except BaseException:
            os.close(hold)
            raise
        self.dir_locks[name] = hold
        if old is not None:
            os.close(old)

    def hold_existing(self) -> None:
        """Hold every directory of the layout that exists (one a pass made since, too)."""
        for name in DIRECTORIES:
            if name in self.dir_locks and os.fstat(self.dir_locks[name]).st_nlink:
                continue
            try:
                fd = self.open_private(name, create=False)
            except FileNotFoundError:
                continue
            os.close(fd)

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
        was checked, but SQLite takes paths: if the path were renamed and
        replaced after the open, the journal would be opened in the
        replacement (someone else's choice) while the generations stay in
        the original.  The mode and owner are re-read too (the path names
        the very inode held, so they are its own), and a root opened to
        others after it was checked is refused.  One cheap lstat, done
        before every use of the path and before each recovery pass acts.
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
        check_owned_private(self.path, named, root=True)

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
        path, through the root's name.  SQLite follows a symlink at any of
        its three files (the -wal and -shm are written to as much as the
        journal itself), and the segment directory holds the journal's
        later files.  Then the journal's files are made private: the head
        made if missing, group and other bits taken off the others.
        """
        self.check_identity()
        self.check_entries(_JOURNAL_ENTRIES)
        # A root (Root.open refuses any other directory when it may not
        # create one) whose journal is missing is about to get one.
        self._make_journal()
        self._private_journal()

    def _make_journal(self) -> None:
        """Make the journal's head, empty and 0600 (with the sticky bit), unless it exists.

        SQLite makes a new database 0644 less the umask (0644 under umask
        0), and gives its -wal and -shm the database's own permission bits:
        a head made here first, private, keeps all three private whatever
        the umask (the store makes each later segment 0600 the same way).
        An empty file is an empty database to SQLite, as the file it would
        make is until its first write.  mknod, not open: closing a
        descriptor of the journal would drop the POSIX locks this process's
        connections hold on it (:mod:`sessiontemp.journal.sticky`); the mode
        is then set exactly through an ``O_PATH`` descriptor, which drops none.
        """
        try:
            os.mknod(JOURNAL_NAME, stat.S_IFREG | 0o600, dir_fd=self.fd)
        except FileExistsError:
            return
        except OSError as e:
            raise os_error(self.journal_path, e, "created") from None
        set_mode(JOURNAL_NAME, self.fd, lambda mode: FILE_MODE)

    def _private_journal(self) -> None:
        """Take the group and other bits off the journal's files that have them.

        Files an earlier version made 0644 (the -wal and -shm SQLite makes
        next copy the head's mode).  Only files the library has marked as
        its own (the sticky bit, :mod:`sessiontemp.journal.sticky`): a file
        of someone else's put at the journal's name is refused by the store
        and left exactly as it was.  Best effort: the root itself is ours
        alone (checked), so these bits give nobody a way in.
        """
        for suffix in ("", "-wal", "-shm"):
            set_mode(JOURNAL_NAME + suffix, self.fd, without_others)
        try:
            segments = os.open(SEGMENTS_DIR, DIR_FLAGS, dir_fd=self.fd)
        except OSError:
            return
        try:
            for name in os.listdir(segments):
                set_mode(name, segments, without_others)
        except OSError:
            pass
        finally:
            os.close(segments)

    def close(self) -> None:
        """Close every descriptor (in a forked child too: it closes only its copies).

        The directories' flocks go with the last descriptor of each, in
        whichever process that is: a forked child that keeps its copies
        only keeps a cleaner out a little longer.
        """
        dir_locks, self.dir_locks = self.dir_locks, {}
        for fd in dir_locks.values():
            os.close(fd)
        for name in ("managers_fd", "fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)


def _default_hint(root: Path) -> str:
    default = default_root()
    return f" (the default root is {default})" if root != default else ""
