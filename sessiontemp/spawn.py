"""Starting one command and waiting for it as ``sessiontemp run`` does, whoever leased it.

Shared by the plain run (:mod:`sessiontemp.run`, a lease of its own
manager) and the session client (:mod:`sessiontemp.client`, a lease handed
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

A signal is passed on only when it did not reach the command already,
which depends on whether the command is in the group the signal went to.
In the foreground of a terminal the command stays in the wrapper's process
group (it reads the terminal, stops and resumes with its job, shares the
foreground with the rest of a pipeline): what the kernel sends that group
(Ctrl-C, Ctrl-\\, a resize) and what the session's shell sends its job (a
hangup) has reached it already.  Anywhere else (under ``timeout``, a CI
runner, a supervisor) the command leads a process group of its own, so a
signal sent to the wrapper's group (``kill -- -PGID``, ``timeout``'s
cancel) reaches it only through the wrapper, which passes it on to the
command's group once.
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
    from typing import Any, Final

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
    from sessiontemp import resources

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
    journal it).  Raises :class:`CommandNotStarted` when it cannot start.
    """
    # In the foreground of a terminal the command shares this process's group
    # (it reads the terminal, stops and resumes with its job, shares the
    # foreground with the rest of a pipeline); anywhere else it leads a group
    # of its own, which no signal to this process's group reaches.
    shared = _in_terminal_foreground()
    # Only setpgroup's absence keeps the command in this process's group.
    group: dict[str, Any] = {} if shared else {"setpgroup": 0}
    try:
        pid = os.posix_spawnp(
            command[0], list(command), dict(env),
            # A dup2 of a descriptor onto itself clears close-on-exec: the
            # command inherits the lease's lock, as pass_fds does.
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, fd) for fd in fds],
            setsigmask=mask, setsigdef=_RESTORED,
            **group,
        )
    except OSError as e:
        raise not_started(command[0], e) from e
    started(pid)
    return _wait(pid, shared=shared)


def _in_terminal_foreground() -> bool:
    """Whether this process's group is the foreground group of its controlling terminal."""
    try:
        # O_NOCTTY: a process without a controlling terminal must not acquire one here.
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _wait(pid: int, *, shared: bool) -> int:
    """Wait for *pid* to exit, forwarding signals; its exit status as a shell reports it.

    *shared*: the command is in this process's group, else it leads its own.
    """
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_status(status)
        # A SIGCHLD that came before this call is pending, so an exit is
        # never missed between the waitpid above and here.
        # With whatever else is pending by then, each kind passed on once, as
        # the kernel merges a pending signal with its repeat: a sender that
        # signals this process and then its group (GNU timeout) has its
        # second signal merged with the first rather than passed on twice.
        batch = [signal.sigwaitinfo(_WATCHED)]
        _let_finish(batch[0].si_pid)
        while (more := signal.sigtimedwait(_WATCHED, 0)) is not None:
            batch.append(more)
        sent = set()
        for info in batch:
            if info.si_signo not in FORWARDED or info.si_signo in sent or not _forward(
                    info, pid, shared=shared):
                continue
            sent.add(info.si_signo)
            try:
                if shared:
                    os.kill(pid, info.si_signo)
                else:
                    # The command's group stands in for this process's: the
                    # command and what it started, as a signal to the group
                    # would have reached them.
                    os.killpg(pid, info.si_signo)
            except ProcessLookupError:
                # Gone already: it has just exited, and the next waitpid says how.
                pass


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
    """:func:`sessiontemp.processes.state`, read here: its imports would cost the client's start."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(b")") + 2:].split()[0].decode()


def _forward(info: signal.struct_siginfo, pid: int, *, shared: bool) -> bool:
    """Whether the signal *info* describes should go on to the command *pid*.

    Not when it reached the command already, which depends on whether the
    command is in the group the signal went to; and never back to where it
    came from.
    """
    if info.si_pid == pid:
        # The command signalled this process: sending it back would loop.
        return False
    if not shared:
        # Nothing sent to this process's group reaches the command's group;
        # a signal from that group would be sent back to its sender.
        try:
            return info.si_pid <= 0 or os.getpgid(info.si_pid) != pid
        except ProcessLookupError:
            return True  # the sender has exited
    # Sent to the whole group: by the kernel for a terminal (Ctrl-C, a
    # resize), or by the session's shell to its job (a hangup).  The command
    # has it already, unless it moved to a group of its own.  Any other
    # sender's signal is taken as sent to this process alone: one sent to
    # the group cannot be told from it (siginfo does not say).
    to_group = info.si_code == _SI_KERNEL or (
        info.si_code == _SI_USER and info.si_pid == os.getsid(0))
    if not to_group:
        return True
    try:
        return os.getpgid(pid) != os.getpgrp()
    except ProcessLookupError:
        return False
