"""Running one command in a private leased directory: what ``sessiontemp run`` does.

The command is started with TMPDIR, TMP and TEMP on a fresh leased
directory and the lease's lock inherited, so it keeps the directory for as
long as it (or anything it hands the descriptor to) runs, even if this
process is killed; the next recovery removes it once it exits.

Signals are handled without a race: the forwarded ones (and SIGCHLD) are
blocked before the command starts, so none is lost between the start and
the first wait, and :func:`signal.sigwaitinfo` then takes them one at a
time together with the sender's identity.  That identity decides whether
to forward: a signal the kernel sent to the whole foreground process group
(Ctrl-C, Ctrl-\\, a terminal resize or hangup) has already reached the
command, and forwarding it again would deliver it twice.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import attrs

from sessiontemp import budget
from sessiontemp.budget import Limits
from sessiontemp.journal.errors import BadInput, OverBudget
from sessiontemp.lease import Lease, not_started
from sessiontemp.manager import Manager
from sessiontemp.usage import Usage

__all__ = ["FORWARDED", "Finished", "exit_status", "label", "run_command"]

FORWARDED: Final = frozenset({
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH,
})

# Longest label given to a lease: the journal refuses free text past 4096
# characters, and a label is for people reading a report.
_LABEL_LIMIT: Final = 1000
# si_code of a signal the kernel itself generated, as a terminal's are (Linux).
_SI_KERNEL: Final = 0x80
# Python ignores these at start-up; a command expects them at their default,
# as subprocess's restore_signals gives it.
_RESTORED: Final = (signal.SIGPIPE, signal.SIGXFSZ)


@attrs.frozen
class Finished:
    """How a command ended: the exit status a shell would report, and its directory.

    ``kept`` is True when the directory was still there after the wrapper
    let go of it: something the command left running still holds it, and a
    later recovery removes it once that exits.  With a budget, ``usage`` is
    the directory's size when the command exited (measured and journaled
    then), and ``over`` the :class:`~sessiontemp.OverBudget` it earned, if
    it grew past the budget (the command was never stopped for it).
    """

    status: int
    path: Path
    kept: bool
    usage: Usage | None = None
    over: OverBudget | None = None


def label(text: str) -> str:
    """*text* as a lease label: cut to a length the journal accepts, marked when cut."""
    return text if len(text) <= _LABEL_LIMIT else text[:_LABEL_LIMIT - 3] + "..."


def exit_status(wait_status: int) -> int:
    """The status a shell reports for a wait status: the exit code, or 128+N for signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def run_command(
    command: Sequence[str], *, root: os.PathLike[str] | str | None = None,
    max_bytes: int | None = None, max_inodes: int | None = None,
    min_free_bytes: int | None = None,
) -> Finished:
    """Run *command* in a private leased directory under *root* until it exits.

    Opens a manager (running recovery), leases a fresh directory labelled
    with the command line, starts the command with the temporary variables
    set on it, tracks it, and waits, forwarding the ``FORWARDED`` signals;
    then releases the lease and closes the manager, which removes the
    directory unless something still holds it.  Call it from the main
    thread: it takes over SIGCHLD while it runs.

    *max_bytes*, *max_inodes* and *min_free_bytes* go to the manager (None:
    no budget, and its default floor of free space): a root whose file
    system has less free space than the floor refuses the command before it
    starts
    (:class:`~sessiontemp.LowDisk`); with a budget, the directory is
    measured once more when the command exits, and a size over the budget
    is returned as ``Finished.over`` (the command is never stopped for it).

    A forwarded signal that comes before the command could start stops it
    from starting (the status is then 128+N), except SIGWINCH, which is
    passed on once it has started.  Raises :class:`~sessiontemp.BadInput`
    for an empty *command* or a call from another thread than the main
    one, :class:`~sessiontemp.CommandNotStarted` when the command is not
    found or not executable, and the manager's errors
    (:class:`~sessiontemp.UnsafeRoot`, :class:`~sessiontemp.Unavailable`,
    a :class:`~sessiontemp.JournalError`)
    before starting it.
    """
    if not command:
        raise BadInput("the command", "is empty", "Name the command to run after --")
    if threading.current_thread() is not threading.main_thread():
        raise BadInput("run_command", "was called from another thread than the main one",
                       "Call it from the main thread: it takes over SIGCHLD while it runs")
    watched = {*FORWARDED, signal.SIGCHLD}
    # Blocked from the start, not only once the command runs: a thread the
    # manager starts meanwhile (its journal's maintenance) inherits the mask,
    # so the kernel cannot hand it a signal that sigwaitinfo here would miss.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    # An ignored SIGCHLD would make the kernel reap the command itself, and
    # its exit status would be lost.
    previous_chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        usage = over = None
        limits = Limits(max_bytes, max_inodes, min_free_bytes)
        with Manager(root, max_bytes=limits.max_bytes, max_inodes=limits.max_inodes,
                     min_free_bytes=limits.min_free_bytes,
                     measure_every=limits.measure_every) as manager:
            manager.retain()
            with manager.acquire(label=label(shlex.join(command))) as lease:
                early = _pending_stop()
                status = 128 + early if early else _start_and_wait(
                    lease, command, previous_mask)
                if limits.budgeted:
                    # Before the lease goes: the directory is the run's until then.
                    usage = manager.measure()
                    if budget.over(limits, usage.bytes, usage.inodes):
                        over = budget.over_budget(limits, usage)
            # The last owner seals the session; its directory goes now unless held.
            manager.release()
        return Finished(status, lease.path, kept=lease.path.exists(), usage=usage, over=over)
    finally:
        # What is still pending was meant for the command, which is gone.
        while signal.sigtimedwait(watched, 0) is not None:
            pass
        # None: a handler set outside Python, which cannot be put back; the default is SIGCHLD's.
        signal.signal(signal.SIGCHLD,
                      signal.SIG_DFL if previous_chld is None else previous_chld)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


def _pending_stop() -> int:
    """A pending forwarded signal that would have ended this process (taken); 0 if none."""
    for signum in sorted(signal.sigpending() & (FORWARDED - {signal.SIGWINCH})):
        if signal.sigtimedwait({signum}, 0) is not None:
            return int(signum)
    return 0


def _start_and_wait(lease: Lease, command: Sequence[str], mask: Iterable[int]) -> int:
    try:
        pid = os.posix_spawnp(
            command[0], list(command), {**os.environ, **lease.env()},
            # A dup2 of a descriptor onto itself clears close-on-exec: the
            # command inherits the lease's lock, as pass_fds does.
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, fd) for fd in lease.pass_fds],
            setsigmask=mask, setsigdef=_RESTORED,
        )
    except OSError as e:
        raise not_started(command[0], e) from e
    # Also for a command that closes the descriptor it inherited.
    lease.track(pid)
    return _wait(pid)


def _wait(pid: int) -> int:
    """Wait for *pid* to exit, forwarding signals; its exit status as a shell reports it."""
    watched = {*FORWARDED, signal.SIGCHLD}
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_status(status)
        # A SIGCHLD that came before this call is pending, so an exit is
        # never missed between the waitpid above and here.
        info = signal.sigwaitinfo(watched)
        if info.si_signo in FORWARDED and _forward(info, pid):
            # Gone already: it has just exited, and the next waitpid says how.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, info.si_signo)


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
