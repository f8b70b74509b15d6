"""A child forked from a thread of its own at a chosen step, judged by what it did.

:class:`ForkingHook` is a step hook (:class:`tests.faults.Faults`): armed
for the k-th durable step of an operation, it starts a thread that forks,
and waits for that thread there, so the operation's thread holds whatever
it holds at that step for the child's whole life.  The child reads what
its copy of each manager says, releases its copy of every lease, checks
that each manager's copy refuses an acquire with ForkedCopy, closes it and
leaves its ``with`` block, and exits; it must exit within the deadline,
having changed nothing under the root: its entries (mode, size, mtime), the
journal's files, and who holds a flock on each (a copy is only ever closed,
never unlocked).  ``outcome`` says what went wrong, or is empty.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import attrs

from sessiontemp import Manager
from sessiontemp._guards.steps import StepKind
from sessiontemp._kernel.locks import flock_holders
from sessiontemp.journal.errors import ForkedCopy
from tests.faults import Faults
from tests.model import World

__all__ = ["CHILD_FAILURES", "DEADLINE", "ClosesUnderTheMutex", "ForkingHook", "fork",
           "in_child", "in_thread", "snapshot", "wait_for"]

# Long, for two shared cores: a child that has not exited by then never will.
DEADLINE = 30.0

# Exit statuses of a forked child, each naming what went wrong in it.
CHILD_FAILURES = {
    3: "its copy of a manager did not refuse an acquire with ForkedCopy",
    4: "releasing or closing a copy raised",
    5: "its copy of a lease was still held after release()",
}


def in_child(world: World) -> int:
    """What the forked child does with its copies; 0 if it all went as it must."""
    try:
        for lease in list(world.leases.values()):
            lease.release()
            if not lease.released:
                return 5
        for manager in [*world.real.values(), *world.unclosed.values()]:
            # What a child may read of its copy, as of any object it inherited.
            repr(manager)
            _ = manager.current_dir, manager.sealed, manager.owners, manager.closed
            try:
                manager.acquire()
            except ForkedCopy:
                pass
            else:
                return 3
            manager.close()
            with manager:
                pass
    except BaseException:
        traceback.print_exc()
        return 4
    return 0


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under *root* (size and mtime of each file), and who holds a flock on each."""
    entries: dict[str, object] = {}
    if not root.exists():
        return entries
    for path in [root, *sorted(root.rglob("*"))]:
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(path, follow_symlinks=False)
            holders = flock_holders(st)
            entries[str(path.relative_to(root))] = (
                st.st_mode, st.st_size if path.is_file() else 0, st.st_mtime_ns,
                # Who holds it, not how many times: /proc/locks names no
                # descriptor, so two shared locks of one process are two equal
                # lines, and their count moves with the parent's own opens of
                # the root's directories (seen on 3.13) while the child lives.
                None if holders is None else sorted(set(holders)))
    return entries


def fork(*, patience: float = 60.0) -> int:
    """``os.fork()``, waiting out a process limit the machine reaches for a moment.

    EAGAIN from fork is the kernel's limit on processes (a cgroup's
    ``pids.max``, ``RLIMIT_NPROC``) met while the storm's own commands and
    children come and go: the machine's state, not the library's, so the
    storm waits for a slot rather than end there.
    """
    waited = 0.0
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if waited >= patience:
                raise
            time.sleep(0.05)
            waited += 0.05


def in_thread(target: Callable[[], object], name: str) -> str:
    """Run *target* in a thread of its own to its end; the traceback it raised, or ``""``.

    A thread's exception ends only that thread: a storm that forks from one
    must say why its count fell short, not go on as if the count were met.
    """
    raised: list[str] = []

    def run() -> None:
        try:
            target()
        except BaseException:
            raised.append(traceback.format_exc())

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    return "".join(raised)


def wait_for(pid: int, deadline: float) -> int | None:
    """Child *pid*'s exit code, or None when it hung past *deadline* (it is killed then)."""
    pidfd = os.pidfd_open(pid)
    try:
        ended = bool(select.select([pidfd], [], [], deadline)[0])
    finally:
        os.close(pidfd)
    if not ended:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if ended else None


@attrs.define
class ForkingHook(Faults):
    """The step hook: once armed, at the chosen step, fork from a thread of its own.

    The operation's thread waits in the hook until the child has exited (or
    was killed past the deadline); what the child did is in ``outcome``.
    """

    world: World | None = None
    deadline: float = DEADLINE
    outcome: str | None = None

    def fork_from_a_thread(self, kind: StepKind, detail: str) -> None:
        forker = threading.Thread(target=self._fork)
        forker.start()
        forker.join()

    def _fork(self) -> None:
        world = self.world
        assert world is not None
        # A journal maintenance already running in another thread of this
        # process takes and gives up locks of its own (a pass's shared locks)
        # while the child lives: let it finish first, so that what changed is
        # the child's doing.  It may wait for what the parked operation holds:
        # then, after a while, the fork goes ahead anyway.
        for thread in threading.enumerate():
            if thread.name == "sessiontemp-journal-maintenance":
                thread.join(5.0)
        # Nor may a collection in this process free a manager dropped earlier
        # (its finalizer gives its locks up) while the child lives.
        collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            self._fork_and_judge(world)
        finally:
            if collecting:
                gc.enable()

    def _fork_and_judge(self, world: World) -> None:
        before = snapshot(world.root)
        pid = os.fork()
        if pid == 0:
            os._exit(in_child(world))
        code = wait_for(pid, self.deadline)
        after = snapshot(world.root)
        if code is None:
            self.outcome = f"the child hung: killed after {self.deadline:g} s"
        elif code != 0:
            self.outcome = f"the child {CHILD_FAILURES.get(code, f'exited {code}')}"
        elif after != before:
            changed = sorted(k for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k))
            self.outcome = f"the child changed {changed}: " + "; ".join(
                f"{k}: {before.get(k)} -> {after.get(k)}" for k in changed)
        else:
            self.outcome = ""


class ClosesUnderTheMutex(Manager):
    """A planted bug: a copy that closes under the mutex, which a parent's thread may hold."""

    def close(self) -> None:
        with self._mutex:
            super().close()
