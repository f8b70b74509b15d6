"""Starting one command and waiting for it as ``sessiontemp run`` does, whoever leased it.

Shared by the plain run (:mod:`sessiontemp.run`, a lease of its own
manager) and the session client (:mod:`sessiontemp.holder.client`, a lease handed
over by the session holder as a descriptor), so that a command behaves the
same under both: TMPDIR, TMP and TEMP on the directory, the lease's lock
inherited, the forwarded signals, the exit status a shell reports.  It
imports only the standard library's os and signal and the library's error
classes (not even typing or contextlib): the client's start-up is paid by
every command a harness runs.

Signals are handled without a race: the forwarded ones (and SIGCHLD) are
blocked before the command starts (:func:`watching`), so none is lost
between the start and the first wait, and :func:`signal.sigwaitinfo` then
takes them one at a time together with the sender's identity.

A signal is passed on only when it did not reach the command already.
The command stays in the wrapper's process group, so it reads the
terminal, stops and resumes with its job and shares the foreground with
the rest of a pipeline, and what is sent to the group (Ctrl-C, a shell's
hangup to its job, ``kill -- -PGID``, ``timeout``'s cancel, SIGKILL and
SIGSTOP too) reaches it from the kernel.  Which signals were sent to the
group a witness tells (:class:`_Witnesses`): a ``cat`` in the group with
the forwarded signals blocked, in which a signal to the group stays
pending; one sent to the wrapper alone is not, and is passed on.  The
witness is started with :func:`os.posix_spawn` and read from ``/proc``,
so it costs no import; it ends with the wrapper, even a SIGKILLed one
(its input ends).  Without ``cat`` in ``os.defpath``, a signal from the
terminal or the session's shell is taken as sent to the group, any other
as sent to the wrapper alone.
"""

from __future__ import annotations

import errno
import os
import signal

from sessiontemp.journal.errors import BadInput, CommandNotStarted, SessionTempError

# Checkers take the name as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from types import TracebackType
    from typing import Final

__all__ = ["FORWARDED", "exit_status", "not_started", "pending_stop", "start_and_wait",
           "watching"]

FORWARDED: Final = frozenset({
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH,
})
_WATCHED: Final = {*FORWARDED, signal.SIGCHLD}
# si_code of a signal the kernel itself generated, as a terminal's are (Linux).
_SI_KERNEL: Final = 0x80
# si_code of a signal a process sent with kill() (Linux).
_SI_USER: Final = 0
# How many times to yield to a signal's sender that still runs (_let_finish).
_YIELDS: Final = 100
# Python ignores these at start-up; a command expects them at their default,
# as subprocess's restore_signals gives it.
_RESTORED: Final = (signal.SIGPIPE, signal.SIGXFSZ)


def exit_status(wait_status: int) -> int:
    """The status a shell reports for a wait status: the exit code, or 128+N for signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


class watching:
    """Block the forwarded signals and SIGCHLD in a block; it gives the mask for a command.

    Blocked from the start, not only once the command runs: a thread
    started meanwhile (a manager's journal maintenance) inherits the mask,
    so the kernel cannot hand it a signal that the wait would miss.  What
    is still pending at the end was meant for the command, which is gone,
    and is dropped.  Call it from the main thread (:class:`BadInput`
    otherwise): it takes over SIGCHLD.
    """
    def __enter__(self) -> set[int]:
        try:
            # An ignored SIGCHLD would make the kernel reap the command
            # itself, and its exit status would be lost.  First: it is also
            # what refuses another thread than the main one.
            self.previous_chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except ValueError:
            raise BadInput("run_command", "was called from another thread than the main one",
                           "Call it from the main thread: it takes over SIGCHLD while it "
                           "runs") from None
        self.previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
        return self.previous_mask

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        while signal.sigtimedwait(_WATCHED, 0) is not None:
            pass
        # None: a handler set outside Python, which cannot be put back; the default is SIGCHLD's.
        signal.signal(signal.SIGCHLD,
                      signal.SIG_DFL if self.previous_chld is None else self.previous_chld)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous_mask)


def pending_stop() -> int:
    """A pending forwarded signal that would have ended this process (taken); 0 if none."""
    for signum in sorted(signal.sigpending() & (FORWARDED - {signal.SIGWINCH})):
        if signal.sigtimedwait({signum}, 0) is not None:
            return int(signum)
    return 0


def not_started(program: object, error: OSError,
                cwd: str | os.PathLike[str] | None = None) -> SessionTempError:
    """The library's error for a command that could not be started, naming it and the fix."""
    if cwd is not None and error.filename == os.fspath(cwd):
        # subprocess names the working directory when it is the one missing.
        return BadInput(cwd, f"cannot be the command's working directory ({error.strerror})",
                        "Pass an existing directory as cwd (lease.path, for one)")
    # Only on this failure path: the client's start-up does not pay for it.
    from sessiontemp._kernel import resources

    shown = os.fsdecode(program) if isinstance(program, str | bytes | os.PathLike) else \
        repr(program)
    if resources.shortage(error):
        # Out of descriptors, processes or memory: the command is fine, the process is not.
        return CommandNotStarted(shown, error.errno or 0, f"could not be started "
                                 f"({error.strerror})", resources.fix(error))
    if isinstance(error, FileNotFoundError):
        return CommandNotStarted(shown, errno.ENOENT, "command not found",
                                 "Check its name and PATH, or give its path")
    if isinstance(error, PermissionError):
        return CommandNotStarted(shown, errno.EACCES, "cannot be executed (permission "
                                 "denied)", "Check that it is an executable file, or run it "
                                 "through its interpreter")
    return CommandNotStarted(shown, error.errno or 0, f"could not be started "
                             f"({error.strerror})", "Check the command")


def start_and_wait(command: Sequence[str], env: Mapping[str, str], fds: Iterable[int],
                   mask: Iterable[int], started: Callable[[int], object]) -> int:
    """Start *command* with *env*, inheriting *fds*, and wait for it; its exit status.

    *mask* is the signal mask to start it with (the one :func:`watching`
    replaced); *started* is called with its pid as soon as it runs (to
    journal it).  A forwarded signal pending before the command starts
    (SIGWINCH aside) stops the start: the status is then 128+N, and
    *started* is not called.  Raises :class:`CommandNotStarted` when it
    cannot start.
    """
    witnesses = _Witnesses()
    try:
        # Before the command, so that a signal sent to the group while it
        # starts is seen; what came before stops the start.
        witnesses.start()
        early = pending_stop()
        if early:
            return 128 + early
        try:
            # In this process's group: a signal to the group reaches it from
            # the kernel, SIGKILL and SIGSTOP too, and it reads the terminal,
            # stops and resumes with its job, shares the foreground with the
            # rest of a pipeline.
            pid = os.posix_spawnp(
                command[0], list(command), dict(env),
                # A dup2 of a descriptor onto itself clears close-on-exec: the
                # command inherits the lease's lock, as pass_fds does.
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, fd) for fd in fds],
                setsigmask=mask, setsigdef=_RESTORED,
            )
        except OSError as e:
            raise not_started(command[0], e) from e
        started(pid)
        return _wait(pid, witnesses)
    finally:
        witnesses.close()


class _Witnesses:
    """Processes of this process's group that tell whether a signal was sent to the group.

    siginfo cannot tell a signal sent to this process from one sent to its
    group (``kill -- -PGID``).  A witness is a ``cat`` reading a pipe only
    this process writes to, started with the forwarded signals blocked (cat
    unblocks none): a signal sent to the group is made pending in every
    member within the one kill() call, so one pending in a witness went to
    the group, and the command, in the group too, has it.  A standard
    signal pending merges with its repeat, so a witness that showed one is
    replaced.  A witness ends at the end of its input when this process
    exits, even if killed.
    """

    def __init__(self) -> None:
        # (pid, the pipe's write end), oldest first.
        self._live: list[tuple[int, int]] = []
        self._program = _system_program("cat")

    def start(self) -> None:
        """Start one more witness; none when it cannot be (the caller then guesses)."""
        if self._program is None:
            return
        try:
            # Close-on-exec both: neither the command nor another witness holds them.
            read, write = os.pipe()
        except OSError:
            return  # out of descriptors: no witness this time
        try:
            pid = os.posix_spawn(
                self._program, ["cat"], {},
                file_actions=[(os.POSIX_SPAWN_DUP2, read, 0),
                              (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                              (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)],
                # Default dispositions: a signal ignored and not blocked would
                # be dropped instead of pending (one blocked never is).
                setsigmask=FORWARDED, setsigdef=FORWARDED,
            )
        except OSError:
            os.close(write)
            return
        finally:
            os.close(read)
        self._live.append((pid, write))

    def settle(self) -> None:
        """Return once every signal sent to a process group before the call is pending.

        A signal to a group is made pending in its members one by one, under
        the kernel's task-list lock; setpgid takes that lock for writing, so
        it waits for a sending in progress to end.  On a witness it always
        fails (EACCES: the witness has run a program) and changes nothing.
        """
        if self._live:
            try:  # noqa: SIM105 (contextlib costs the client's start)
                os.setpgid(self._live[-1][0], os.getpgrp())
            except OSError:
                pass

    def pending(self) -> list[frozenset[int]] | None:
        """The signals pending in each witness, oldest first; None if none can be read."""
        found = []
        for pid, write in list(self._live):
            signals = _pending_in(pid)
            if signals is None:  # killed by someone else, or cannot be read
                self._retire(pid, write)
            else:
                found.append(signals)
        if not self._live:
            self.start()
            return None
        return found

    def keep_newest(self) -> None:
        """Retire every witness but the newest."""
        for pid, write in self._live[:-1]:
            self._retire(pid, write)

    def close(self) -> None:
        for pid, write in list(self._live):
            self._retire(pid, write)

    def _retire(self, pid: int, write: int) -> None:
        self._live.remove((pid, write))
        os.close(write)
        try:  # noqa: SIM105 (contextlib costs the client's start)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:  # noqa: SIM105
            # Reaped by pid: the command is waited for by its own.
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _system_program(name: str) -> str | None:
    """The system's own *name* (in ``os.defpath``, not a PATH's), or None."""
    for directory in os.defpath.split(os.pathsep):
        path = os.path.join(directory, name)
        if directory and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _pending_in(pid: int) -> frozenset[int] | None:
    """The signals pending in process *pid* (to it or its thread); None if gone or unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fields = dict(line.split(b":", 1) for line in lines if b":" in line)
    if fields.get(b"State", b"Z").split()[:1] in ([b"Z"], [b"X"]):
        return None
    try:
        mask = int(fields[b"SigPnd"], 16) | int(fields[b"ShdPnd"], 16)
    except (KeyError, ValueError):
        return None
    # Bit N-1 stands for signal N.
    return frozenset(n for n in FORWARDED if mask >> (n - 1) & 1)


def _wait(pid: int, witnesses: _Witnesses) -> int:
    """Wait for *pid* to exit, forwarding signals; its exit status as a shell reports it."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_status(status)
        # A SIGCHLD that came before this call is pending, so an exit is
        # never missed between the waitpid above and here.  A witness's
        # exit wakes this loop too, and changes nothing.
        first = signal.sigwaitinfo(_WATCHED)
        _let_finish(first.si_pid)
        _pass_on(first, pid, witnesses)


def _pass_on(first: signal.struct_siginfo, pid: int, witnesses: _Witnesses) -> None:
    """Pass *first*, and what is pending with it, on to the command *pid* where due.

    Each kind once, as the kernel merges a pending signal with its repeat: a
    sender that signals this process and then its group (GNU timeout) has
    its two signals taken together, and the one to the group, which
    reached the command, is not passed on.  A signal found sent to the
    group spends the witnesses that show it, so a fresh one is started
    (before the old is retired: a signal sent to the group in between shows
    in the old) and what came meanwhile is taken with this batch.
    """
    taken = [first]
    done: set[int] = set()
    to_group: set[int] = set()
    while True:
        witnesses.settle()
        while (more := signal.sigtimedwait(_WATCHED, 0)) is not None:
            taken.append(more)
        pending = witnesses.pending()
        seen = frozenset().union(*pending) if pending is not None else None
        for info in taken:
            signum = info.si_signo
            if signum not in FORWARDED or signum in done:
                continue
            if _sent_to_group(info, seen):
                done.add(signum)
                to_group.add(signum)
                if _in_group(pid):
                    continue  # the command has it from the kernel
            elif info.si_pid == pid:
                continue  # the command signalled this process: sending it back would loop
            done.add(signum)
            try:  # noqa: SIM105
                os.kill(pid, signum)
            except ProcessLookupError:
                # Gone already: it has just exited, and the next waitpid says how.
                pass
        taken = []
        witnesses.keep_newest()
        if pending is None or not pending[-1] & to_group:
            return
        witnesses.start()


def _sent_to_group(info: signal.struct_siginfo, pending: frozenset[int] | None) -> bool:
    """Whether *info* was sent to this process's group, by the witnesses' *pending* signals.

    Without a witness, a guess: the kernel's for a terminal (Ctrl-C, a
    resize) and the session's shell's (a hangup to its job) are.
    """
    if pending is not None:
        return info.si_signo in pending
    return info.si_code == _SI_KERNEL or (info.si_code == _SI_USER and info.si_pid == os.getsid(0))


def _in_group(pid: int) -> bool:
    """Whether the command *pid* is still in this process's group (job control moves it out)."""
    try:
        return os.getpgid(pid) == os.getpgrp()
    except ProcessLookupError:
        return True  # it has exited: nothing to pass on


def _let_finish(sender: int) -> None:
    """Give *sender*, while it runs on, the moment to send what it sends next.

    Waking this process can take the processor from the sender between two
    of its signals (GNU timeout signals its child, then at once its group);
    yielding lets it send the second, which then merges with the first.
    Bounded: a sender that keeps running (a shell going on with its script)
    is waited for no further.
    """
    for _ in range(_YIELDS):
        if sender <= 0 or _state(sender) != "R":
            return
        os.sched_yield()


def _state(pid: int) -> str | None:
    """:func:`sessiontemp._kernel.processes.state`, read here: its imports would cost the
    client's start."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(b")") + 2:].split()[0].decode()
