"""Named sessions: one live owner per name, told by a kernel lock.

``Manager(root, session="chat-42")`` names the logical session it serves, so
that a process that restarts (a notebook kernel, a REPL, an agent's server)
can find the directory its previous incarnation was using.  Two managers
serving one session at once would hand out one directory under two sets of
rules, so the name is guarded by an exclusive ``flock`` on
``ROOT/sessions/<name>.lock``, taken without waiting and held for the
manager's lifetime.  The kernel releases it when its holder dies, so a crash
never leaves a session owned by nobody alive.

The lock file is made with the sticky bit (mode 1600) and its directory is
share-locked while the root is open: an age-based cleaner never takes it,
which would let a second owner in beside a live one.

The owner writes its pid into the lock file for one purpose: to name it in
the error a second owner gets.  The pid is never used to decide whether the
owner lives (pids are reused); the lock alone says that.

When an owner dies, the journal keeps its current generation for the
session (:func:`sessiontemp.journal.reducer.kept_for_resume`) for a resume window
measured from its journaled death.  The next owner adopts it when it asks to
resume within the window; otherwise, or once the window has passed, a
recovery pass discards it (``session.discarded``) and removes it as any
orphan.  Only a holder of the session's lock discards it: the claimer
deciding not to resume, or a pass that takes the free lock for an instant,
so that a discard never races an adoption.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from typing import TYPE_CHECKING, Final

import attrs

from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import resources
from sessiontemp._kernel.liveness import lock_shared, lock_work
from sessiontemp._kernel.locks import refusal, still_named, try_exclusive
from sessiontemp._kernel.root import (
    FILE_MODE,
    SESSIONS_DIR,
    WORK_DIR,
    Root,
    check_entry,
    generation_name,
    os_error,
    path_of,
    session_lock_name,
)
from sessiontemp.journal import ids
from sessiontemp.journal.errors import BadInput, SessionOwned
from sessiontemp.journal.events import Event, ManagerOpened, SessionAdopted, SessionClaimed
from sessiontemp.journal.reducer import (
    GenerationState,
    ManagerState,
    SessionState,
    State,
    kept_for_resume,
)
from sessiontemp.writepath import WritePath

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger


__all__ = [
    "DEFAULT_RESUME_WINDOW",
    "SESSIONS_DIR",
    "Claim",
    "Resumable",
    "SessionLock",
    "check_name",
    "check_window",
    "claim_session",
    "expired",
    "lock_name",
    "resumable",
    "try_lock",
]

# How long a dead owner's directory waits for its session to be resumed
# (seconds, from its journaled death): a day, like the stale sweep, so a
# restart the next morning still finds yesterday's files.
DEFAULT_RESUME_WINDOW: Final = 86400.0
_FILE_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# The pid and a newline; anything longer in the file was not written by us.
_PID_BYTES: Final = 32


def check_name(name: object) -> str:
    """Return *name* if it is a valid session name; BadInput naming the rule otherwise."""
    if not isinstance(name, str) or not ids.SESSION.fullmatch(name):
        raise BadInput(
            f"session name {name!r}", "is not valid: a name is 1 to 64 characters of A-Z, "
            "a-z, 0-9, '.', '_' and '-', and is neither '.' nor '..'", "Choose another"
        )
    return name


def check_window(window: float) -> float:
    """Refuse a resume window that is not a finite number of seconds >= 0."""
    if not (isinstance(window, int | float) and not isinstance(window, bool)
            and math.isfinite(window) and window >= 0):
        raise BadInput("resume_window", f"must be a finite number of seconds >= 0, not "
                       f"{window!r}", "Pass a number of seconds, such as 86400 for a day")
    return float(window)


@attrs.frozen
class Claim:
    """What a manager about to claim session *name* asks of its recovery pass.

    With *resume* False the pass discards what the last owner left (*why*
    says so in the journal); with True it keeps it for the adoption, unless
    the window has passed.
    """

    name: str
    resume: bool
    why: str = "a new owner started the session afresh (resume=False)"


@attrs.frozen
class Resumable:
    """What a session's dead owner left, as the pass that kept it saw it.

    The claimer adopts ``generation`` from ``owner``; ``session`` is the
    session as it stood.  Everything here is fixed while the claimer holds
    the session's lock: only a lock holder discards, and nobody removes a
    kept generation.
    """

    session: SessionState
    owner: ManagerState | None
    generation: GenerationState | None

    def seed(self) -> State:
        """The part of the journal's state a claimer's own state must start from."""
        generations = {} if self.generation is None else {self.generation.id: self.generation}
        managers = {} if self.owner is None else {self.owner.id: self.owner}
        return State(managers=managers, generations=generations,
                     sessions={self.session.name: self.session})


def resumable(state: State, name: str) -> Resumable | None:
    """Session *name* as *state* has it, with the generation kept for it if any."""
    session = state.sessions.get(name)
    if session is None:
        return None
    kept = None if session.kept is None else state.generations.get(session.kept)
    if kept is not None and kept_for_resume(state, kept) is None:
        kept = None
    # The owner may be gone from the state: ended, with nothing left of it.
    return Resumable(session, state.managers.get(session.owner), kept)


def expired(session: SessionState, now: float) -> bool:
    """Whether the resume window of what *session*'s dead owner left has passed at *now*."""
    return session.kept_at is not None and now - session.kept_at >= session.window


# The name of a session's owner lock file inside ``ROOT/sessions``.
lock_name = session_lock_name


class SessionLock:
    """The owner lock of one named session, held until :meth:`close`.

    :meth:`take` refuses with :class:`SessionOwned` while another process
    holds it.  Like every lock here it is given up only by closing its
    descriptor, never by ``LOCK_UN``: a forked child shares the open file
    description, and an unlock through its copy would free the parent's.
    """

    def __init__(self, name: str, fd: int, sessions_fd: int) -> None:
        self.name = name
        self.fd = fd
        self._sessions_fd = sessions_fd

    @classmethod
    def take(cls, root: Root, name: str) -> SessionLock:
        """Lock session *name* under *root* for this process, or raise :class:`SessionOwned`."""
        check_name(name)
        sessions_fd = root.open_private(SESSIONS_DIR)
        try:
            fd = _lock(sessions_fd, name)
            if fd is None:
                raise SessionOwned(
                    root.path, name, _owner_pid(sessions_fd, name),
                    "Close that session's manager first, or use another session name",
                )
        except BaseException:
            os.close(sessions_fd)
            raise
        try:
            # For the error message of whoever comes next, nothing more: a
            # full disk that refuses these few bytes costs only that message.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            os.close(sessions_fd)
            raise
        return cls(name, fd, sessions_fd)

    def unlink(self) -> None:
        """Remove the lock file while holding it (the session is being removed).

        A process that opened the old file meanwhile finds, once it holds
        the lock, that the name no longer leads to it, and starts over.
        """
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_name(self.name), dir_fd=self._sessions_fd)

    def close(self) -> None:
        """Give the session up: the kernel frees the lock with the last descriptor.

        The file stays: unlinking it would let a newcomer lock a fresh file
        while a forked child still holds the old one.
        """
        for attribute in ("fd", "_sessions_fd"):
            fd = getattr(self, attribute)
            if fd >= 0:
                setattr(self, attribute, -1)
                os.close(fd)


def _lock(sessions_fd: int, name: str) -> int | None:
    """Open (creating) and lock session *name*'s file; None while someone else holds it.

    Raises :class:`UnsafeRoot` when something other than our own regular
    file stands at its name (a symlink is never followed: ``O_NOFOLLOW``),
    and :class:`~sessiontemp.RootUnusable` when it cannot be made.
    """
    while True:
        try:
            fd = os.open(lock_name(name), _FILE_FLAGS | os.O_CREAT, FILE_MODE,
                         dir_fd=sessions_fd)
        except OSError as e:
            raise os_error(path_of(sessions_fd, lock_name(name)), e, "opened") from None
        try:
            st = os.fstat(fd)
            check_entry(path_of(sessions_fd, lock_name(name)), st, directory=False)
            if stat.S_IMODE(st.st_mode) != FILE_MODE:
                # Made by an earlier version (not sticky), or under a umask.
                os.fchmod(fd, FILE_MODE)
            try:
                locked = try_exclusive(fd)
            except OSError as e:
                raise os_error(path_of(sessions_fd, lock_name(name)), e, "locked") from None
            if not locked:
                os.close(fd)
                return None
            # A remover unlinks the file while holding its lock.
            if still_named(sessions_fd, lock_name(name), fd):
                return fd
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def try_lock(root: Root, name: str) -> SessionLock | None:
    """Lock session *name* for an instant's work if nobody owns it; None otherwise.

    For a recovery pass discarding what an owner left once its window has
    passed: holding the lock, no claimer can be adopting it meanwhile.
    """
    try:
        sessions_fd = root.open_private(SESSIONS_DIR, create=False)
    except FileNotFoundError:
        return None
    try:
        fd = _lock(sessions_fd, name)
    except BaseException:
        os.close(sessions_fd)
        raise
    if fd is None:
        os.close(sessions_fd)
        return None
    return SessionLock(name, fd, sessions_fd)


def _owner_pid(sessions_fd: int, name: str) -> int | None:
    """The pid the owner of session *name* wrote into its lock file, if it can be read."""
    try:
        fd = os.open(lock_name(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                     | os.O_NONBLOCK, dir_fd=sessions_fd)
    except OSError:
        return None
    try:
        return _read_pid(fd)
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    """The pid the owner wrote into its lock file, None if there is none to read."""
    with contextlib.suppress(OSError):
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


# -- the claim: a manager's birth as a session's owner ----------------------------------


def claim_session(writer: WritePath, claim: Claim, window: float, found: Resumable | None, *,
          manager: str, root: Root, steps: Steps, log: BoundLogger,
          ) -> tuple[str, int, int] | None:
    """Journal *manager*'s birth as the owner of *claim*'s session, adopting what it can.

    What the last owner left (*found*, as the recovery pass kept it for
    this claim) is adopted when the claim asks to resume and its directory
    can be locked.  Returns the adopted generation with the manager's own
    locks on it and on its work directory, None when nothing was adopted.
    """
    events: list[Event] = [ManagerOpened(manager, os.getpid()),
                           SessionClaimed(manager, claim.name, round(window * 1000))]
    adopted = None
    if (claim.resume and found is not None and found.generation is not None
            and found.owner is not None):
        taken = _take_over(found.generation, root=root, steps=steps, log=log)
        if taken is not None:
            adopted = found.generation.id, *taken
            events.append(SessionAdopted(manager, claim.name, found.generation.id,
                                         found.owner.id))
    try:
        writer.append(*events)
    except BaseException:
        if adopted is not None:
            os.close(adopted[2])
            os.close(adopted[1])
        raise
    if adopted is not None and found is not None and found.owner is not None:
        log.info("session.resumed", session=claim.name, generation=adopted[0],
                 previous=found.owner.id,
                 path=os.path.join(root.path, generation_name(adopted[0])), seq=writer.state.seq)
    return adopted


def _take_over(generation: GenerationState, *, root: Root, steps: Steps,
               log: BoundLogger) -> tuple[int, int] | None:
    """Lock the directory a dead owner left and its work directory, as its new manager.

    None if it cannot be.

    Locked before the adoption is journaled, like a new generation: a
    remover that seized it first makes this fail, and one that comes
    after finds it held.
    """
    name = generation_name(generation.id)
    try:
        steps.before("lock", name)
        fd = lock_shared(root.fd, name)
    except OSError as e:
        if not resources.gone(e):
            # No sign that it is gone (a shortage, or a lock held longer
            # than a probe's): the claim fails and nothing is discarded,
            # so that the next claim can still resume it.
            raise refusal(root.path, os.path.join(root.path, name), e) from e
        log.warning("session.not_resumed", generation=generation.id,
                    reason=f"{name} could not be locked ({e.strerror})")
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (generation.device, generation.inode):
            log.warning("session.not_resumed", generation=generation.id,
                        reason=f"{name} was replaced by another directory")
            os.close(fd)
            return None
    except BaseException:
        os.close(fd)
        raise
    try:
        # Made again if an age cleaner took it while nothing held it (or
        # an earlier version made the generation without one).
        steps.before("lock", f"{name}/{WORK_DIR}")
        work = lock_work(fd)
    except BaseException as e:
        os.close(fd)
        if not isinstance(e, OSError):
            raise
        path = os.path.join(root.path, name, WORK_DIR)
        if not resources.gone(e):
            raise refusal(root.path, path, e) from e
        log.warning("session.not_resumed", generation=generation.id,
                    reason=f"{path} could not be locked ({e.strerror})")
        return None
    try:
        # A usage touch: an age-based cleaner sees it in use from now on.
        os.utime(fd)
        os.utime(work)
    except BaseException:
        os.close(work)
        os.close(fd)
        raise
    return fd, work
