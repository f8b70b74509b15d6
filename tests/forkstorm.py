"""A driver process for the fork tests: a storm of forks from a thread while others work.

Run as ``python tests/forkstorm.py ROOT --forks N --main-forks K --pool M``.  Worker threads
use the library without pause: one opens and closes managers (retain,
acquire, release, close), one acquires, writes, rotates and releases on a
shared manager, one starts commands with ``lease.popen`` (some with a
``preexec_fn`` that sleeps, so that the lease's lock is held for a while),
one keeps artifacts.  Meanwhile a thread forks N times; each child releases
its copies of two leases (one of them the lease the popen thread starts
its commands with), closes its copies of the managers and exits by
``os._exit``.  Then the main thread forks ``--main-forks`` times, and those
children exit by ``sys.exit``, through the interpreter's whole shutdown
(which a child forked from another thread cannot run); then a thread starts
M processes with multiprocessing's ``fork`` start method, whose target does
the same.  A child that has not exited within the deadline is killed and
counted as hung.

Afterwards the workers stop, the shared manager must still work and agree
with its journal, and once everything is closed a recovery must leave no
generation on disk and the journal must verify.  One JSON line on stdout
says what happened.  ``--planted`` runs the old at-fork handler, which
parks a store's connection under the store module's lock, to show that
the storm catches a child handler that can wait for a parent's lock; it
stops at the first child that hangs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX, Lease, Manager, recover
from tests.childio import emit
from tests.faultchild import agrees_with_journal
from tests.forking import fork, in_thread
from tests.model import journal_problems

# Generous, for two shared cores: a child that has not exited by then never will.
DEADLINE = 30.0
BUSY_TIMEOUT = 30.0


class Workers:
    """The threads that use the library while the forks come."""

    def __init__(self, root: Path, shared: Manager, starting: Lease) -> None:
        self.root = root
        self.shared = shared
        self.starting = starting
        # A preexec_fn runs the at-fork handlers in popen's own child, too.
        self.slow_popen = True
        self.stop = threading.Event()
        self.rounds: dict[str, int] = {}
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._loop, args=(name, work), daemon=True)
                        for name, work in (("open-close", self.open_close),
                                           ("acquire-rotate", self.acquire_rotate),
                                           ("popen", self.popen), ("keep", self.keep))]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(DEADLINE)
            if thread.is_alive():
                self.errors.append(f"worker {thread.name} did not stop")

    def _loop(self, name: str, work: Callable[[], None]) -> None:
        self.rounds[name] = 0
        while not self.stop.is_set():
            try:
                work()
            except Exception:  # told to the test, which fails on it
                if len(self.errors) < 5:
                    self.errors.append(f"{name}: {traceback.format_exc()}")
            self.rounds[name] += 1

    def open_close(self) -> None:
        with Manager(self.root, busy_timeout=BUSY_TIMEOUT) as manager:
            if self.rounds["open-close"] % 4 == 0:
                manager.retain()
                with manager.acquire(label="open-close") as lease:
                    (lease.path / "f").write_bytes(b"x")

    def acquire_rotate(self) -> None:
        with self.shared.acquire(label="rotate") as lease:
            (lease.path / "f").write_bytes(b"y")
            self.shared.rotate()

    def popen(self) -> None:
        # Always the one lease, which every forked child releases its copy of.
        slow = self.slow_popen and self.rounds["popen"] % 4 == 0
        # A preexec_fn that sleeps keeps popen inside the lease's lock until the exec.
        child = self.starting.popen(["true"], preexec_fn=(lambda: time.sleep(0.05)) if slow
                                    else None)
        child.wait()

    def keep(self) -> None:
        with self.shared.acquire(label="keep") as lease:
            (lease.path / "k").write_bytes(b"kept")
            lease.keep("k", "storm")


def in_child(managers: list[Manager], leases: list[Lease]) -> int:
    """What each forked child does with its copies: release, close; 0 if nothing raised."""
    try:
        for lease in leases:
            lease.release()
        for manager in managers:
            manager.close()
    except BaseException:
        traceback.print_exc()
        return 3
    return 0


def wait_for(pid: int, deadline: float) -> int | None:
    """The exit code of child *pid*, or None if it hung past *deadline* (then killed)."""
    pidfd = os.pidfd_open(pid)
    try:
        ended = bool(select.select([pidfd], [], [], deadline)[0])
    finally:
        os.close(pidfd)
    if not ended:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if ended else None


class Forker:
    """Forks, and judges each child by how it ended."""

    def __init__(self, managers: list[Manager], leases: list[Lease], deadline: float) -> None:
        self.managers, self.leases, self.deadline = managers, leases, deadline
        # Stop at the first hung child (for the planted bug: it is what is looked for).
        self.first_hang = False
        self.tally = {"forks": 0, "main_forks": 0, "hung": 0, "failed": 0, "pool": 0,
                      "pool_hung": 0, "pool_failed": 0}

    def fork(self, count: int, *, shutdown: bool) -> None:
        """Fork *count* children; each ends by ``sys.exit`` with *shutdown*, else ``os._exit``.

        A child forked from a thread other than the main one cannot run the
        interpreter's shutdown (its SystemExit would end its one thread
        only): *shutdown* is for the main thread.
        """
        for _ in range(count):
            pid = fork()
            if pid == 0:
                status = in_child(self.managers, self.leases)
                if shutdown:
                    # Up through every frame of this process's main thread, then the
                    # interpreter's whole shutdown: atexit, the modules' clearing.
                    sys.exit(status)
                os._exit(status)
            code = wait_for(pid, self.deadline)
            self.tally["main_forks" if shutdown else "forks"] += 1
            if code is None:
                self.tally["hung"] += 1
                if self.first_hang:
                    return
            elif code != 0:
                self.tally["failed"] += 1

    def pool(self, count: int) -> None:
        context = multiprocessing.get_context("fork")
        for _ in range(count):
            process = context.Process(target=pool_child, args=(self.managers, self.leases))
            process.start()
            process.join(self.deadline)
            self.tally["pool"] += 1
            if process.is_alive():
                self.tally["pool_hung"] += 1
                process.kill()
                process.join()
            elif process.exitcode != 0:
                self.tally["pool_failed"] += 1


def pool_child(managers: list[Manager], leases: list[Lease]) -> None:
    code = in_child(managers, leases)
    if code:
        sys.exit(code)


def plant_locking_child_handler() -> None:
    """The old disarm: a forked store copy parked under the store module's lock."""
    import sessiontemp.journal.store
    from sessiontemp.journal.store import registry

    forget = sessiontemp.journal.store.Store.forget
    # The parent's lock object, as the old handler found it in the child: copied.
    lock = registry._OPEN_LOCK

    def forget_under_lock(self: sessiontemp.journal.store.Store) -> None:
        with lock:
            forget(self)

    sessiontemp.journal.store.Store.forget = forget_under_lock  # type: ignore[method-assign]


def storm(root: Path, forks: int, main_forks: int, pool: int, deadline: float, *,
          planted: bool = False) -> dict[str, Any]:
    shared = Manager(root, busy_timeout=BUSY_TIMEOUT)
    shared.retain()
    other = Manager(root, busy_timeout=BUSY_TIMEOUT, session="storm")
    other.retain()
    held = other.acquire(label="held across every fork")
    starting = shared.acquire(label="starts commands across every fork")
    workers = Workers(root, shared, starting)
    # The planted handler would hang popen's own child, and popen with it.
    workers.slow_popen = not planted
    workers.start()
    forker = Forker([shared, other], [held, starting], deadline)
    forker.first_hang = planted
    raised = in_thread(lambda: forker.fork(forks, shutdown=False), "forker")
    forker.fork(main_forks, shutdown=True)
    raised += in_thread(lambda: forker.pool(pool), "pool")
    workers.finish()
    works = ""
    try:
        with shared.acquire(label="after the storm") as lease:
            (lease.path / "after").write_bytes(b"after")
    except Exception as e:
        works = repr(e)
    journal = agrees_with_journal(shared)
    held.release()
    starting.release()
    shared.close()
    other.close()
    report = recover(root, busy_timeout=BUSY_TIMEOUT)
    left = sorted(n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))
    return {**forker.tally, "rounds": workers.rounds, "errors": workers.errors,
            "works": works, "forker_raised": raised, "journal": journal, "left": left,
            "skipped": [str(s.reason) for s in report.skipped],
            "problems": journal_problems(root)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", type=Path)
    parser.add_argument("--forks", type=int, default=200)
    parser.add_argument("--main-forks", type=int, default=50,
                        help="forks from the main thread, whose children exit by sys.exit")
    parser.add_argument("--pool", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=DEADLINE,
                        help="seconds a child has to exit before it counts as hung")
    parser.add_argument("--planted", action="store_true")
    args = parser.parse_args(argv)
    if args.planted:
        plant_locking_child_handler()
    emit(storm(args.root, args.forks, args.main_forks, args.pool, args.deadline,
               planted=args.planted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
