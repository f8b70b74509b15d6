"""Running one command in a private leased directory: what ``sessiontemp run`` does.

The command is started with TMPDIR, TMP and TEMP on a fresh leased
directory and the lease's lock inherited, so it keeps the directory for as
long as it (or anything it hands the descriptor to) runs, even if this
process is killed; the next recovery removes it once it exits.  Starting,
waiting and forwarding signals are :mod:`sessiontemp._kernel.spawn`'s, shared with
``sessiontemp run --session``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import attrs

from sessiontemp._kernel.spawn import FORWARDED, exit_status, start_and_wait, watching
from sessiontemp.journal.errors import BadInput, OverBudget
from sessiontemp.lease import Lease
from sessiontemp.manager import Manager
from sessiontemp.space import budget
from sessiontemp.space.budget import Limits
from sessiontemp.space.usage import Usage

__all__ = ["FORWARDED", "Finished", "exit_status", "label", "run_command"]

# Longest label given to a lease: the journal refuses free text past 4096
# characters, and a label is for people reading a report.
_LABEL_LIMIT: Final = 1000


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
    with watching() as previous_mask:
        usage = over = None
        limits = Limits(max_bytes, max_inodes, min_free_bytes)
        with Manager(root, max_bytes=limits.max_bytes, max_inodes=limits.max_inodes,
                     min_free_bytes=limits.min_free_bytes,
                     measure_every=limits.measure_every) as manager:
            manager.retain()
            with manager.acquire(label=label(shlex.join(command))) as lease:
                # 128+N when a forwarded signal came before the command started.
                status = _start_and_wait(lease, command, previous_mask)
                if limits.budgeted:
                    # Before the lease goes: the directory is the run's until then.
                    usage = manager.measure()
                    if budget.over(limits, usage.bytes, usage.inodes):
                        over = budget.over_budget(limits, usage)
            # The last owner seals the session; its directory goes now unless held.
            manager.release()
        return Finished(status, lease.path, kept=lease.path.exists(), usage=usage, over=over)


def _start_and_wait(lease: Lease, command: Sequence[str], mask: Iterable[int]) -> int:
    # Tracked too, for a command that closes the descriptor it inherited.
    return start_and_wait(command, {**os.environ, **lease.env()}, lease.pass_fds, mask,
                          lease.track)
