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
takes them one at a time together with the sender's identity.  That
identity decides whether to forward: a signal the kernel sent to the whole
foreground process group (Ctrl-C, Ctrl-\\, a terminal resize or hangup) has
already reached the command, and forwarding it again would deliver it twice.
"""

from __future__ import annotations

import errno
import os
import signal

from sessiontemp.journal.errors import BadInput, CommandNotStarted

# Checkers take the name as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from types import TracebackType
    from typing import Final

__all__ = ["FORWARDED", "exit_status", "pending_stop", "start_and_wait", "watching"]

FORWARDED: Final = frozenset({
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH,
})
_WATCHED: Final = {*FORWARDED, signal.SIGCHLD}
# si_code of a signal the kernel itself generated, as a terminal's are (Linux).
_SI_KERNEL: Final = 0x80
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


def start_and_wait(command: Sequence[str], env: Mapping[str, str], fds: Iterable[int],
                   mask: Iterable[int], started: Callable[[int], object]) -> int:
    """Start *command* with *env*, inheriting *fds*, and wait for it; its exit status.

    *mask* is the signal mask to start it with (the one :func:`watching`
    replaced); *started* is called with its pid as soon as it runs (to
    journal it).  Raises :class:`CommandNotStarted` when it cannot start.
    """
    try:
        pid = os.posix_spawnp(
            command[0], list(command), dict(env),
            # A dup2 of a descriptor onto itself clears close-on-exec: the
            # command inherits the lease's lock, as pass_fds does.
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, fd) for fd in fds],
            setsigmask=mask, setsigdef=_RESTORED,
        )
    except FileNotFoundError as e:
        raise CommandNotStarted(command[0], errno.ENOENT, "command not found",
                                "Check its name and PATH, or give its path") from e
    except PermissionError as e:
        raise CommandNotStarted(command[0], errno.EACCES, "cannot be executed "
                                "(permission denied)", "Check that it is an executable "
                                "file, or run it through its interpreter") from e
    except OSError as e:
        raise CommandNotStarted(command[0], e.errno or 0, f"could not be started "
                                f"({e.strerror})", "Check the command") from e
    started(pid)
    return _wait(pid)


def _wait(pid: int) -> int:
    """Wait for *pid* to exit, forwarding signals; its exit status as a shell reports it."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_status(status)
        # A SIGCHLD that came before this call is pending, so an exit is
        # never missed between the waitpid above and here.
        info = signal.sigwaitinfo(_WATCHED)
        if info.si_signo in FORWARDED and _forward(info, pid):
            try:  # noqa: SIM105 (contextlib costs the client's start)
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                # Gone already: it has just exited, and the next waitpid says how.
                pass


def _forward(info: signal.struct_siginfo, pid: int) -> bool:
    """Whether the signal *info* describes should go on to the command *pid*."""
    if info.si_pid == pid:
        # The command signalled this process: sending it back would loop.
        return False
    if info.si_code == _SI_KERNEL:
        # The kernel signalled the whole process group (a terminal); the
        # command has it already unless it moved to a group of its own.
        try:
            return os.getpgid(pid) != os.getpgrp()
        except ProcessLookupError:
            return False
    return True
