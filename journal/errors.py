"""The one error tree of the project.

Every error the library raises derives from :class:`SessionTempError` and
from the builtin it is nearest to, so callers can catch either.  Each keeps
its context as attributes and says in its message what to do next.

It lives in :mod:`journal` because both packages raise it and ``journal``
must not import ``sessiontemp``; ``sessiontemp`` re-exports all of it.
"""

from __future__ import annotations

import os

__all__ = [
    "BadInput",
    "CheckpointInvalid",
    "CommandNotStarted",
    "ForkedCopy",
    "HistoryRetired",
    "JournalBusy",
    "JournalCorrupt",
    "JournalError",
    "JournalFull",
    "JournalReadOnly",
    "JournalVersionError",
    "LowDisk",
    "NoSuchRoot",
    "OverBudget",
    "PackageUnreadable",
    "RootReadOnly",
    "RootUnusable",
    "RuleViolation",
    "SessionOwned",
    "SessionTempError",
    "Unavailable",
    "UnknownKind",
    "UnsafeRoot",
    "Unsupported",
]


class SessionTempError(Exception):
    """Base of every error raised by sessiontemp."""


class UnsafeRoot(SessionTempError, PermissionError):
    """The root directory cannot be trusted: a symlink, someone else's, or open to others."""

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        self.fix = fix
        super().__init__(f"{self.path} {reason}. {fix}")


class RootUnusable(SessionTempError, OSError):
    """The operating system refuses what the root needs: to make, open, read or write an entry.

    Not a question of trust (that is :class:`UnsafeRoot`) but of means: a
    full disk, too many open files, a component of the path that is a file.
    ``errno`` is the operating system's reason, ``path`` the entry refused.
    """

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str,
                 code: int | None = None) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        self.fix = fix
        super().__init__(f"{self.path} {reason}. {fix}")
        # As any OSError carries them (no filename: the message names the path).
        self.errno = code
        self.strerror = None if code is None else os.strerror(code)

    def __str__(self) -> str:
        # OSError's own would print "[Errno N] strerror" instead of the message.
        return f"{self.path} {self.reason}. {self.fix}"


class RootReadOnly(RootUnusable, PermissionError):
    """The root, or an entry of it, cannot be written: its mode, a read-only file system."""


class NoSuchRoot(RootUnusable, FileNotFoundError):
    """The root does not exist, and the call that was given it never creates one.

    Only a :class:`~sessiontemp.Manager` (and ``sessiontemp run``) creates a
    root: a recovery, a removal or an inspection of a mistyped path must not
    leave a new root behind.
    """


class Unavailable(SessionTempError, RuntimeError):
    """No private directory can be handed out; the caller must not run the command.

    Never fall back to the public temporary directory on this error: that is
    exactly the leak and the exposure this library exists to prevent.
    """

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        self.fix = fix
        super().__init__(f"no private directory in {self.path}: {reason}. {fix}")


class ForkedCopy(Unavailable):
    """A forked child used its copy of its parent's manager or lease.

    A child owns nothing its parent opened: journaling, unlocking or removing
    through that copy would act on the parent's behalf behind its back.
    """


class OverBudget(Unavailable):
    """The session's directory was measured over its budget: no new command may start in it.

    ``path`` is the directory, ``bytes`` and ``inodes`` what its last
    measurement found, ``max_bytes`` and ``max_inodes`` the budget (None
    where none is set), ``largest`` its largest entries as ``(name,
    bytes)``.  A command already running in it is never touched.
    """

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str, *, bytes: int,
                 inodes: int, max_bytes: int | None, max_inodes: int | None,
                 largest: tuple[tuple[str, int], ...] = ()) -> None:
        self.bytes = bytes
        self.inodes = inodes
        self.max_bytes = max_bytes
        self.max_inodes = max_inodes
        self.largest = largest
        super().__init__(path, reason, fix)
        RuntimeError.__init__(self, f"{self.path} is over its budget: {reason}. {fix}")


class LowDisk(Unavailable):
    """The root's file system has less free space than the manager keeps free.

    ``path`` is the root, ``free_bytes`` the space free to this user,
    ``min_free_bytes`` the floor, ``largest`` the largest directories under
    the root as last measured, as ``(path, bytes)``.  Refused before a
    command starts, so that none dies of a full disk half-way through.
    """

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str, *,
                 free_bytes: int, min_free_bytes: int,
                 largest: tuple[tuple[str, int], ...] = ()) -> None:
        self.free_bytes = free_bytes
        self.min_free_bytes = min_free_bytes
        self.largest = largest
        super().__init__(path, reason, fix)


class SessionOwned(SessionTempError, RuntimeError):
    """A named session already has a live owner: one manager per name at a time.

    The owner is known to be alive by the kernel lock it holds, never by its
    pid; ``pid`` is what it wrote beside the lock when it took it, for
    people to find it (None when it could not be read).
    """

    def __init__(self, path: os.PathLike[str] | str, session: str, pid: int | None,
                 fix: str) -> None:
        self.path = os.fspath(path)
        self.session = session
        self.pid = pid
        self.fix = fix
        who = "another process" if pid is None else f"process {pid}"
        super().__init__(f"session {session!r} in {self.path} is owned by {who}, which "
                         f"still holds its lock. {fix}")


class JournalError(SessionTempError, OSError):
    """The journal cannot be opened, read or appended to."""

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        self.fix = fix
        super().__init__(f"journal {self.path}: {reason}. {fix}")


class JournalCorrupt(JournalError):
    """The file is not a sessiontemp journal, or its contents are damaged."""


class JournalVersionError(JournalError):
    """The journal was written by a newer version of sessiontemp, or by a development one from
    before its schema version was settled."""


class JournalBusy(JournalError, TimeoutError):
    """Another process held the journal's write lock for longer than the wait allows."""


class JournalReadOnly(JournalError, PermissionError):
    """The journal or its file system does not accept writes."""


class JournalFull(JournalError):
    """The file system holding the journal is full."""


class HistoryRetired(SessionTempError, LookupError):
    """A moment before where the journal's kept history starts: retention retired it.

    ``seq`` is the event asked about, ``retired_until`` the last event
    retired: the state is known right after it and every later event, never
    before (a reader never answers with another moment's state).
    ``journal-inspect`` exits 1 with its message.
    """

    def __init__(self, path: os.PathLike[str] | str, seq: int, retired_until: int) -> None:
        self.path = os.fspath(path)
        self.seq = seq
        self.retired_until = retired_until
        super().__init__(
            f"journal {self.path}: history before event {retired_until + 1:,} was retired, so "
            f"the state right after event {seq:,} is no longer known. Ask for event "
            f"{retired_until:,} or later (the retention rule: the documentation's journal "
            "page, \"Bounded journal\")")


class RuleViolation(SessionTempError, ValueError):
    """An event breaks the lifecycle rules, so the journal holding it cannot be trusted.

    The reducer raises it without knowing where the event came from; code that
    reads a journal re-raises it as :class:`JournalCorrupt` naming the file.
    """

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        self.reason = reason
        super().__init__(f"event {seq} {reason}")


class UnknownKind(RuleViolation):
    """An event of a kind this version does not know: written by a newer sessiontemp.

    The one rule violation a correct writer makes on purpose; its fix is an
    upgrade, not a repair.
    """


class CheckpointInvalid(SessionTempError, ValueError):
    """A stored checkpoint cannot be used: damaged, of another format, or malformed.

    Never fatal: a replay skips the checkpoint and starts from an older one,
    or from the first event, so nothing but time is lost.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class BadInput(SessionTempError, ValueError):
    """An argument names something that cannot be what it was given as.

    Raised by :mod:`sessiontemp.inspect` for a root that is not a directory,
    a directory given where a journal file belongs, a path that is no
    generation, and the like; ``journal-inspect`` exits 2 with its message.
    """

    def __init__(self, what: os.PathLike[str] | str, reason: str, fix: str) -> None:
        self.what = os.fspath(what)
        self.reason = reason
        self.fix = fix
        super().__init__(f"{self.what}: {reason}. {fix}")


class Unsupported(SessionTempError, ImportError):
    """This platform lacks a kernel facility sessiontemp relies on (it runs on Linux only)."""

    def __init__(self, missing: str) -> None:
        self.missing = missing
        super().__init__(
            f"sessiontemp is not supported on this platform ({missing}): it needs Linux, for "
            "flock on directories, O_PATH and /proc/self/fd. Run it on Linux (a container or "
            "WSL2 will do)"
        )


class PackageUnreadable(SessionTempError, ImportError):
    """A module sessiontemp needs cannot be imported: its files cannot be read by this process.

    Typically after a privilege drop (``setuid``) in a process that had not
    yet imported them: the library's own modules, or Python's (``fcntl``),
    live where the new user may not read.  Not the platform's fault, so
    never :class:`Unsupported`.  ``path`` is what cannot be read (as
    ImportError's own ``path``), ``reason`` why, ``fix`` what to do.
    """

    def __init__(self, path: os.PathLike[str] | str, reason: str, fix: str,
                 module: str | None = None) -> None:
        self.reason = reason
        self.fix = fix
        super().__init__(f"{os.fspath(path)} {reason}. {fix}", name=module,
                         path=os.fspath(path))


class CommandNotStarted(SessionTempError, OSError):
    """A command could not be started: not found, or not executable.

    ``errno`` is the operating system's reason (``ENOENT`` when the command
    was not found, ``EACCES`` when it cannot be executed).
    """

    def __init__(self, command: str, code: int, reason: str, fix: str) -> None:
        self.command = command
        self.reason = reason
        self.fix = fix
        super().__init__(f"{command}: {reason}. {fix}")
        self.errno = code
