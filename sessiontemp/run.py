"""Running one command in a private leased directory: what ``sessiontemp run`` does.

The command is started with TMPDIR, TMP and TEMP on a fresh leased
directory and the lease's lock inherited, so it keeps the directory for as
long as it (or anything it hands the descriptor to) runs, even if this
process is killed; the next recovery removes it once it exits.

Signals are handled without a race: the forwarded ones (and SIGCHLD) are
blocked before the command starts, so none is lost between the start and
the first wait, and :func:`signal.sigwaitinfo` then takes them one at a
time together with the sender's identity.

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

import contextlib
import functools
import os
import shlex
import signal
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import attrs

from sessiontemp import budget, processes
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
# si_code of a signal a process sent with kill() (Linux).
_SI_USER: Final = 0
# How many times to yield to a signal's sender that still runs (_let_finish).
_YIELDS: Final = 100
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
    # In the foreground of a terminal the command shares this process's group
    # (it reads the terminal, stops and resumes with its job, shares the
    # foreground with the rest of a pipeline); anywhere else it leads a group
    # of its own, which no signal to this process's group reaches.
    shared = _in_terminal_foreground()
    spawn = os.posix_spawnp if shared else functools.partial(os.posix_spawnp, setpgroup=0)
    try:
        pid = spawn(
            command[0], list(command), {**os.environ, **lease.env()},
            # A dup2 of a descriptor onto itself clears close-on-exec: the
            # command inherits the lease's lock, as pass_fds does.
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, fd) for fd in lease.pass_fds],
            setsigmask=mask, setsigdef=_RESTORED,
        )
    except OSError as e:
        raise not_started(command[0], e) from e
    # Also for a command that closes the descriptors it inherited.
    lease.track(pid)
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
    watched = {*FORWARDED, signal.SIGCHLD}
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
        batch = [signal.sigwaitinfo(watched)]
        _let_finish(batch[0].si_pid)
        while (more := signal.sigtimedwait(watched, 0)) is not None:
            batch.append(more)
        sent = set()
        for info in batch:
            if info.si_signo not in FORWARDED or info.si_signo in sent or not _forward(
                    info, pid, shared=shared):
                continue
            sent.add(info.si_signo)
            # Gone already: it has just exited, and the next waitpid says how.
            with contextlib.suppress(ProcessLookupError):
                if shared:
                    os.kill(pid, info.si_signo)
                else:
                    # The command's group stands in for this process's: the
                    # command and what it started, as a signal to the group
                    # would have reached them.
                    os.killpg(pid, info.si_signo)


def _let_finish(sender: int) -> None:
    """Give *sender*, while it runs on, the moment to send what it sends next.

    Waking this process can take the processor from the sender between two
    of its signals (GNU timeout signals its child, then at once its group);
    yielding lets it send the second, which then merges with the first.
    Bounded: a sender that keeps running (a shell going on with its script)
    is waited for no further.
    """
    for _ in range(_YIELDS):
        if sender <= 0 or processes.state(sender) != "R":
            return
        os.sched_yield()


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
