"""A driver process for the fork tests: forks taken while other threads use the library.

Run as ``python tests/forkchild.py MODE ROOT [options]``; it answers with one
JSON line (``tests/childio.py``) once done.

Modes:

``storm ROOT --forks N --forker {main,thread} --exit {os._exit,sys.exit}``
    Threads work on ROOT all the time: one opens and closes managers (each
    opened, retained, leased from, closed), one acquires, rotates and
    releases on a long-lived manager, one starts commands with
    ``lease.popen`` (every other one with a ``preexec_fn`` that sleeps, so
    that popen holds the lease's lock for a while), one keeps artifacts with
    ``lease.keep`` and removes them.  Meanwhile the forker (the main thread,
    or a thread of its own) forks N times.  Each child checks that its copy
    of every manager refuses an acquire, releases its copy of every lease
    held at the fork, closes its copy of every manager, and exits the way
    asked: ``sys.exit`` from the main thread is the interpreter's whole end
    (garbage collection, every module's objects let go of), from a thread
    the end of that thread.  Each must have exited within ``--deadline``
    seconds (an alarm kills one that hangs, and the parent gives up waiting
    a second later).  With ``--multiprocessing``, every other child is a
    ``multiprocessing`` process of the 'fork' start method doing the same.
    Then the threads stop, a recovery runs, and the counts are answered with
    whether the long-lived manager agrees with the journal and the disk;
    then it closes.

``--planted`` runs a deliberately broken variant: the child's release of
its copy of a lease waits for the lease's lock as the parent's own release
does, so a child forked while a thread is inside ``lease.popen`` hangs.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from sessiontemp import Lease, Manager, recover, remove_artifact
from sessiontemp.handles import Hold
from sessiontemp.journal.errors import ForkedCopy, SessionTempError
from tests.childio import emit
from tests.faultchild import agrees_with_journal, disk_agrees
from tests.forking import fork, in_thread

BUSY_TIMEOUT = 20.0

# Exit statuses of a forked child, each naming what went wrong in it.
CHILD_FAILURES = {
    0: "exited as asked",
    3: "its copy of a manager did not refuse an acquire with ForkedCopy",
    4: "closing or releasing a copy raised",
    5: "its copy of a lease was still held after release()",
    -signal.SIGALRM: "hung: its deadline's alarm killed it",
    -signal.SIGKILL: "hung past its deadline: the parent killed it",
}


class Registry:
    """What the working threads hold right now, for a forked child to let go of."""

    def __init__(self) -> None:
        # Appended to and removed from by the workers; a child copies them as they were.
        self.managers: list[Manager] = []
        self.leases: list[Lease] = []

    def snapshot(self) -> tuple[list[Manager], list[Lease]]:
        return list(self.managers), list(self.leases)


REGISTRY = Registry()


def in_child(how: str, deadline: float) -> int:
    """What each forked child does with its copies; its exit status."""
    # The deadline: a child that hangs is killed by its own alarm.
    signal.alarm(max(1, round(deadline)))
    managers, leases = REGISTRY.snapshot()
    code = 0
    try:
        for manager in managers:
            try:
                manager.acquire()
                code = code or 3
            except ForkedCopy:
                pass
            except SessionTempError:
                # Closed by its thread before the fork: closed copies refuse as closed.
                pass
        for lease in leases:
            lease.release()
            if not lease.released:
                code = code or 5
        for manager in managers:
            manager.close()
    except Exception:
        traceback.print_exc()
        code = code or 4
    return code


def child_exit(how: str, code: int) -> None:
    if how == "sys.exit":
        # The interpreter's own end: atexit handlers, then every module's
        # objects let go of (the copies of the parent's connections too).
        sys.exit(code)
    os._exit(code)


def multiprocessing_target(how: str, deadline: float) -> None:
    code = in_child(how, deadline)
    # multiprocessing ends the process with os._exit after its own clean-up.
    sys.exit(code)


class Worker(threading.Thread):
    """A thread that runs *step* until told to stop, counting rounds and failures."""

    def __init__(self, name: str, step: Any, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.step = step
        self.stop = stop
        self.rounds = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
                self.rounds += 1
            except Exception as e:
                if len(self.failures) < 5:
                    self.failures.append(f"{self.name}: {e!r}")


def held(lease: Lease) -> Lease:
    REGISTRY.leases.append(lease)
    return lease


def let_go(lease: Lease) -> None:
    lease.release()
    with contextlib.suppress(ValueError):
        REGISTRY.leases.remove(lease)


def workers(root: Path, long_lived: Manager, stop: threading.Event) -> list[Worker]:
    def open_and_close() -> None:
        manager = Manager(root, busy_timeout=BUSY_TIMEOUT)
        REGISTRY.managers.append(manager)
        try:
            manager.retain()
            lease = held(manager.acquire(label="opener"))
            let_go(lease)
        finally:
            manager.close()
            REGISTRY.managers.remove(manager)

    def acquire_and_release() -> None:
        lease = held(long_lived.acquire(label="leaser"))
        (lease.path / "work").write_bytes(b"w")
        let_go(lease)
        if not stop.is_set() and time.monotonic_ns() % 3 == 0:
            long_lived.rotate()

    def start_commands() -> None:
        lease = held(long_lived.acquire(label="popen"))
        try:
            # Every other command with a preexec_fn that sleeps: popen holds
            # the lease's lock until the exec, and the command's own child
            # process runs the at-fork handlers too.
            slow = time.monotonic_ns() % 2 == 0
            lease.popen(["true"], preexec_fn=(lambda: time.sleep(0.02)) if slow else None
                        ).wait()
        finally:
            let_go(lease)

    def keep_artifacts() -> None:
        lease = held(long_lived.acquire(label="keeper"))
        try:
            (lease.path / "kept").write_bytes(b"k" * 64)
            artifact = lease.keep("kept", "storm")
        finally:
            let_go(lease)
        remove_artifact(root, artifact, busy_timeout=BUSY_TIMEOUT)

    return [Worker(name, step, stop) for name, step in (
        ("opener", open_and_close), ("leaser", acquire_and_release),
        ("popen", start_commands), ("keeper", keep_artifacts))]


def reap(pid: int, deadline: float) -> int:
    """The exit status of child *pid*, killed and reaped if it has not exited by *deadline*."""
    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], deadline)[0]:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class Forker:
    """Forks *count* children, one at a time, each given *deadline* seconds to exit."""

    def __init__(self, count: int, how: str, deadline: float, use_multiprocessing: bool) -> None:
        self.count = count
        self.how = how
        self.deadline = deadline
        self.use_multiprocessing = use_multiprocessing
        self.statuses: dict[int, int] = {}
        self.forks = 0
        self.multiprocessing = 0
        self.context = multiprocessing.get_context("fork")

    def one(self, i: int) -> int:
        if self.use_multiprocessing and i % 2:
            process = self.context.Process(target=multiprocessing_target,
                                           args=(self.how, self.deadline))
            process.start()
            process.join(self.deadline + 1)
            if process.exitcode is None:
                process.kill()
                process.join()
                return -signal.SIGKILL
            self.multiprocessing += 1
            assert process.exitcode is not None
            return process.exitcode
        pid = fork()
        if pid == 0:
            child_exit(self.how, in_child(self.how, self.deadline))
        return reap(pid, self.deadline + 1)

    def run(self) -> None:
        for i in range(self.count):
            status = self.one(i)
            self.forks += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1
            # A short pause: the workers move on to other steps between forks.
            time.sleep(0.001 * (i % 5))


def plant_waiting_release() -> None:
    """The old behaviour: a child's release of its copy waits for the lease's own lock."""
    import threading as plain

    def drop_copy(self: Hold) -> None:
        with self._mutex:
            fds, self._fds = self._fds, None
        for fd in fds or ():
            os.close(fd)

    original_init = Hold.__init__

    def init(self: Hold, *fds: int) -> None:
        original_init(self, *fds)
        self._mutex = plain.Lock()  # type: ignore[assignment]

    Hold.__init__ = init  # type: ignore[method-assign]
    Hold.drop_copy = drop_copy  # type: ignore[method-assign]


def storm(root: Path, args: argparse.Namespace) -> int:
    stop = threading.Event()
    long_lived = Manager(root, busy_timeout=BUSY_TIMEOUT)
    long_lived.retain()
    REGISTRY.managers.append(long_lived)
    working = workers(root, long_lived, stop)
    for worker in working:
        worker.start()
    forker = Forker(args.forks, args.exit, args.deadline, args.multiprocessing)
    raised = ""
    if args.forker == "thread":
        raised = in_thread(forker.run, "forker")
    else:
        forker.run()
    stop.set()
    for worker in working:
        worker.join(BUSY_TIMEOUT)
    alive = [w.name for w in working if w.is_alive()]
    works = ""
    try:
        with long_lived.acquire(label="after the storm") as lease:
            (lease.path / "after").write_bytes(b"a")
        # What a closed manager could not remove while a child held a copy
        # of its lock is the next recovery's; then the disk is the manager's.
        recover(root, busy_timeout=BUSY_TIMEOUT)
    except Exception as e:
        works = repr(e)
    emit({
        "forks": forker.forks, "multiprocessing": forker.multiprocessing,
        "statuses": {str(k): v for k, v in sorted(forker.statuses.items())},
        "rounds": {w.name: w.rounds for w in working},
        "failures": [f for w in working for f in w.failures],
        "stuck": alive, "works": works, "forker_raised": raised,
        "journal": agrees_with_journal(long_lived), "disk": disk_agrees(long_lived),
    })
    long_lived.close()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("storm",))
    parser.add_argument("root", type=Path)
    parser.add_argument("--forks", type=int, default=200)
    parser.add_argument("--forker", choices=("main", "thread"), default="thread")
    parser.add_argument("--exit", choices=("os._exit", "sys.exit"), default="os._exit")
    parser.add_argument("--deadline", type=float, default=10.0)
    parser.add_argument("--multiprocessing", action="store_true")
    parser.add_argument("--planted", action="store_true")
    args = parser.parse_args(argv)
    if args.planted:
        plant_waiting_release()
    return storm(args.root, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
