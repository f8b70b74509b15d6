"""A driver process for the fault tests: managers that live on through a fault.

Run as ``python tests/faultchild.py MODE ROOT [options]``.  Every mode talks
to the test in JSON lines (one message a line on stdout; commands, where a
mode reads any, one a line on stdin), so the test always knows what this
process holds before it does anything to it.  End of file on stdin ends a
mode that waits for commands, so a test that dies never leaves it behind.

Modes:

``neighbour ROOT``
    Another process on the roots: answers ``open PATH [BUSY_TIMEOUT]`` (open
    and close a Manager on PATH, whose open runs recovery) and ``recover
    PATH`` with the recovery report, or with ``{"error": ...}``.  ROOT is
    unused.  ``maintain PATH`` runs what a long-lived manager's maintenance
    does (a checkpoint of the whole journal, a rollover with it, every
    sealed segment retired and nothing kept: ``Retention(0, 0, 0)``; the
    checkpoint is written even when none is due, whenever events follow
    the active segment's base), then
    a recovery pass with that retention, and answers with the segment files
    before and after (``{"refused": WHY}`` when the journal refuses it, a
    full disk); ``maintain PATH pause`` first answers
    ``{"paused": DETAIL}`` just before its checkpoint and waits for ``go``.
    ``interleave PATH`` is what such a neighbour does between two steps of
    another process's operation: a checkpoint of the whole journal and a
    rollover with it, then (unless a recovery pass holds the root: that
    one is the operation's own) every sealed segment retired; it answers
    with the segment files before and after and what it retired.
    ``retire PATH`` is a recovery pass that retires whatever a checkpoint
    covers and rolls nothing over (``Retention(2**40, 0, 0)``).  The
    neighbour's moves one at a time, each answered with the segment files
    before and after: ``checkpoint PATH`` writes a checkpoint of the whole
    journal and rolls nothing over; ``seal PATH`` writes one and rolls over
    with it, retiring nothing; ``retire-sealed PATH`` (under the recovery
    lock, unless a pass holds it) deletes every sealed segment a checkpoint
    covers and writes nothing; ``maintenance PATH`` is a long-lived
    manager's maintenance alone (checkpoint, rollover, retirement, with
    ``Retention(0, 0, 0)``; skipped while a pass holds the root).  ``hold
    PATH`` takes the write lock of the journal's active segment and keeps it
    (answering ``{"holding": FILE}``) until ``let-go``.

``storm ROOT --interrupts N [--from-outside]``
    Opens a manager (``{"manager", "pid"}``), then loops acquire / write a
    file / rotate every other round / release, catching KeyboardInterrupt,
    while a thread of this process sends it SIGINT every 5 to 50 ms, N
    times.  Then it checks that the manager still works and agrees with the
    journal and the disk, and answers with the counts.  It then waits for
    ``close``.  With ``--from-outside`` nothing here sends: another process
    does (SIGINT, and SIGTERM, whose handler here raises :class:`Terminated`
    as an application's may), then says ``calm N`` once it sent N.

``fork ROOT --exit {block,sys.exit,os._exit}``
    Forks inside ``with Manager(ROOT)`` and ``with manager.acquire()``.  The
    child tries ``acquire()`` on its copy, releases its copy of the lease,
    answers ``{"child": ...}``, and exits the way asked: out of both blocks
    and off the end of the program, by ``sys.exit`` inside them, or by
    ``os._exit`` inside them.  The parent waits for it, looks at what it
    left (``{"after_child": ...}``), then rotates, leaves the lease's block,
    acquires and closes, answering ``{"parent": ...}``.

``close ROOT --busy-timeout S``
    Opens a manager holding two leases (one on a retired generation, one on
    the current one) with files in them, answers with ids and paths, and on
    ``close`` closes it, answering with the events it logged and whether its
    liveness lock file is still there.  On ``exit`` it exits.

``--planted`` runs a deliberately broken variant, for the tests to show
that they catch it: in ``storm`` mode, operations run unshielded in the
main thread, where an interrupt cuts them anywhere (with ``--from-outside``:
only SIGINT's handler is deferred, as if the shield knew no other); in
``fork`` mode, the
forked child's copies are not disarmed (so the child journals, unlocks
and unlinks for its parent); in ``close`` mode, a close that could not
journal unlinks the liveness lock file anyway.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sqlite3
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX, Lease, Manager, recover
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel.root import Root, generation_name
from sessiontemp.handles import Handles
from sessiontemp.journal import Retention, Store, checkpoint, replay
from sessiontemp.journal.errors import ForkedCopy, JournalError, RuleViolation
from sessiontemp.recovery.passes import maintain
from tests.childio import commands, emit, report_json, serve

# Long enough for a loaded machine, bounded so that a wedge still ends.
BUSY_TIMEOUT = 10.0


def agrees_with_journal(manager: Manager) -> str:
    """"agrees" when replaying the journal from scratch gives what *manager* holds of its own.

    Otherwise says how it differs, or which record the rules refuse.
    """
    store = Store(manager.root / "journal.sqlite3", readonly=True)
    try:
        state = replay(store.records())
    except (RuleViolation, JournalError) as e:
        return f"the journal holds a record the rules refuse: {e}"
    finally:
        store.close()

    def own(s: Any) -> tuple[object, dict[str, object]]:
        return s.managers[manager.id], {
            gid: g for gid, g in s.generations.items() if g.manager == manager.id
        }

    return "agrees" if own(state) == own(manager.state) else "differs"


# -- neighbour ---------------------------------------------------------------------


# Every checkpoint starts a new segment, and every sealed one is deleted once covered.
EAGER = Retention(segment_bytes=0, history_bytes=0, history_age=0)


def segment_files(root: Path) -> list[str]:
    folder = root / "journal.sqlite3.d"
    names = os.listdir(folder) if folder.exists() else []
    return sorted(n for n in names if n.endswith(".sqlite3"))


def paused_at_checkpoint(kind: str, detail: str) -> None:
    """A step hook: before the checkpoint, say so and wait for ``go`` (others append meanwhile)."""
    if kind == "checkpoint":
        emit({"paused": detail})
        line = sys.stdin.readline()
        if line.split() != ["go"]:
            raise RuntimeError(f"expected go, not {line!r}")


def maintain_eagerly(path: Path, pause: bool = False) -> dict[str, Any]:
    """Checkpoint, roll over and retire everything retired at once, then a recovery pass."""
    before = segment_files(path)
    opened = Root.open(path)
    try:
        store = Store(opened.journal_path, busy_timeout=BUSY_TIMEOUT, retention=EAGER)
        try:
            # Due whatever was appended since the last checkpoint.
            store.maintenance_every = 0
            with capture_logs() as logs:
                maintain(opened, store, clock=time.time,
                         steps=Steps(paused_at_checkpoint if pause else None))
            if segment_files(path) == before:
                # No checkpoint was due (one was written since the last
                # events, and its rollover failed: a full disk): one now.
                checkpoint_now(store)
        finally:
            store.close()
    finally:
        opened.close()
    report = recover(path, busy_timeout=BUSY_TIMEOUT, retention=EAGER)
    return {"before": before, "after": segment_files(path), **report_json(report),
            "warnings": [f"{e['event']}: {e.get('reason', '')}" for e in logs
                         if e["log_level"] in ("warning", "error")]}


def checkpoint_now(store: Store) -> bool:
    """A checkpoint of the whole journal, which rolls over; False when nothing follows the base."""
    start = checkpoint.restore(store)
    state = replay(store.records(after=start.state.seq, tolerant=True), start.state,
                   tolerant=True)
    if state.seq <= store.segments()[-1].base:
        return False
    checkpoint.save(store, state)
    return True


def interleave(path: Path) -> dict[str, Any]:
    """Checkpoint, roll over and (under the recovery lock, if free) retire every sealed segment."""
    before = segment_files(path)
    # Here, not at the top: filelock refuses os.fork in any thread while
    # another is forking (its audit hook), and the fork storms import this
    # module for its judges.
    import filelock

    lock = filelock.FileLock(path / "recovery.lock", timeout=0, thread_local=False,
                             fallback_to_soft=False)
    try:
        lock.acquire()
        locked = True
    except (filelock.Timeout, OSError):
        # The operation it interleaves with is a recovery pass: retiring is its own.
        locked = False
    try:
        # Short: the other process is stopped between two of its steps and
        # holds no write lock, so this never waits for long.
        store = Store(path / "journal.sqlite3", busy_timeout=2.0, retention=EAGER)
        try:
            checkpoint_now(store)
            retired = [str(p) for p in store.retire(now=time.time())] if locked else []
        finally:
            store.close()
    finally:
        if locked:
            lock.release()
    return {"before": before, "after": segment_files(path), "retired": retired,
            "locked": locked}


# A checkpoint here never starts a segment.
NEVER_ROLLS = Retention(segment_bytes=1 << 40, history_bytes=0, history_age=0)


def checkpoint_only(path: Path, *, roll_over: bool) -> dict[str, Any]:
    """A checkpoint of the whole journal, with a rollover or none; nothing retired."""
    before = segment_files(path)
    store = Store(path / "journal.sqlite3", busy_timeout=2.0,
                  retention=EAGER if roll_over else NEVER_ROLLS)
    try:
        written = checkpoint_now(store)
    finally:
        store.close()
    return {"before": before, "after": segment_files(path), "written": written}


def retire_sealed(path: Path) -> dict[str, Any]:
    """Every sealed segment a checkpoint covers deleted (unless a pass holds the root)."""
    before = segment_files(path)
    # Here, not at the top: filelock refuses os.fork in any thread while
    # another is forking (its audit hook), and the fork storms import this
    # module for its judges.
    import filelock

    lock = filelock.FileLock(path / "recovery.lock", timeout=0, thread_local=False,
                             fallback_to_soft=False)
    try:
        lock.acquire()
    except (filelock.Timeout, OSError):
        return {"before": before, "after": before, "retired": [], "locked": False}
    try:
        store = Store(path / "journal.sqlite3", busy_timeout=2.0, retention=EAGER)
        try:
            retired = [str(p) for p in store.retire(now=time.time())]
        finally:
            store.close()
    finally:
        lock.release()
    return {"before": before, "after": segment_files(path), "retired": retired, "locked": True}


def maintenance_only(path: Path) -> dict[str, Any]:
    """What a long-lived manager's maintenance thread does, once, eagerly; no recovery pass."""
    before = segment_files(path)
    opened = Root.open(path)
    try:
        store = Store(opened.journal_path, busy_timeout=2.0, retention=EAGER)
        try:
            store.maintenance_every = 0
            with capture_logs() as logs:
                maintain(opened, store, clock=time.time, steps=Steps(None))
        finally:
            store.close()
    finally:
        opened.close()
    return {"before": before, "after": segment_files(path),
            "retired": [e["path"] for e in logs if e["event"] == "segment.retired"],
            "warnings": [f"{e['event']}: {e.get('reason', '')}" for e in logs
                         if e["log_level"] in ("warning", "error")]}


def hold_active(path: Path) -> sqlite3.Connection:
    """A write transaction on the journal's active segment, open until closed."""
    while True:
        store = Store(path / "journal.sqlite3", readonly=True)
        try:
            active = store.segments()[-1].file
        finally:
            store.close()
        conn = sqlite3.connect(active, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        sealed = "sealed" in {n for (n,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")} and conn.execute(
            "SELECT count(*) FROM sealed").fetchone()[0]
        if not sealed:
            return conn
        # Rolled over since the listing: the newer one is active.
        conn.close()


def neighbour() -> int:
    emit({"pid": os.getpid()})
    held: sqlite3.Connection | None = None

    def run(words: list[str]) -> dict[str, Any]:
        nonlocal held
        if words[0] == "maintain":
            try:
                return maintain_eagerly(Path(words[1]), pause=words[2:] == ["pause"])
            except JournalError as e:
                # The journal refused (a full disk): said, not a failure of this process.
                return {"refused": str(e)}
        if words[0] == "interleave":
            return interleave(Path(words[1]))
        if words[0] in ("checkpoint", "seal"):
            return checkpoint_only(Path(words[1]), roll_over=words[0] == "seal")
        if words[0] == "retire-sealed":
            return retire_sealed(Path(words[1]))
        if words[0] == "maintenance":
            return maintenance_only(Path(words[1]))
        if words[0] == "retire":
            return report_json(recover(words[1], busy_timeout=BUSY_TIMEOUT, retention=Retention(
                segment_bytes=1 << 40, history_bytes=0, history_age=0)))
        if words[0] == "hold":
            held = hold_active(Path(words[1]))
            return {"holding": held.execute("PRAGMA database_list").fetchone()[2]}
        if words[0] == "let-go":
            if held is not None:
                held.close()
                held = None
            return {"let_go": True}
        if words[0] == "open":
            wait = float(words[2]) if len(words) > 2 else BUSY_TIMEOUT
            with Manager(words[1], busy_timeout=wait) as other:
                pass
            # Answered once closed: the test looks at the root next.
            return {"manager": other.id, **report_json(other.recovery)}
        if words[0] == "recover":
            return report_json(recover(words[1], busy_timeout=BUSY_TIMEOUT))
        return {"error": f"unknown command {words[0]!r}"}

    serve(run)
    return 0


# -- a SIGINT storm ------------------------------------------------------------------


class Sender(threading.Thread):
    """Sends this process SIGINT *count* times, 5 to 50 ms apart."""

    def __init__(self, count: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.count = count
        self.sent = 0
        self.rng = random.Random(seed)
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while self.sent < self.count:
                time.sleep(self.rng.uniform(0.005, 0.05))
                os.kill(os.getpid(), signal.SIGINT)
                self.sent += 1
        finally:
            self.done.set()


class Terminated(BaseException):
    """What this process's SIGTERM handler raises, as an application's handler may."""


def terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


# What a signal raises here: the loop catches these and carries on.
INTERRUPTS = (KeyboardInterrupt, Terminated)


class Listener(threading.Thread):
    """Waits for ``calm N`` on stdin: another process sent N signals and stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sent = 0
        self.done = threading.Event()

    def run(self) -> None:
        try:
            for words in commands():
                if words[0] == "calm":
                    self.sent = int(words[1])
                    return
        finally:
            self.done.set()


class Storm:
    """The loop a notebook kernel or a REPL runs: Ctrl-C is caught, and work goes on."""

    def __init__(self, manager: Manager, sender: Sender | Listener) -> None:
        self.manager = manager
        self.sender = sender
        self.rounds = 0
        self.caught = 0
        # Raised by the library once the operation it interrupted had finished.
        self.deferred = 0
        # Escaped the loop's own handler (landed inside it) and caught further out.
        self.escaped = 0
        # Operations that failed with anything but the interrupt: the first few.
        self.failures: list[str] = []

    def one_round(self) -> None:
        with self.manager.acquire(label="storm") as lease:
            (lease.path / f"file-{self.rounds}").write_bytes(b"z" * 256)
            if self.rounds % 2:
                self.manager.rotate()
        self.rounds += 1

    def count(self, interrupt: BaseException) -> None:
        self.caught += 1
        if any(frame.filename.endswith(os.path.join("sessiontemp", "_guards", "shield.py"))
               for frame in traceback.extract_tb(interrupt.__traceback__)):
            self.deferred += 1

    def loop(self) -> None:
        while not self.sender.done.is_set():
            try:
                self.one_round()
            except INTERRUPTS as interrupt:
                self.count(interrupt)
            except Exception as e:
                if len(self.failures) < 5:
                    self.failures.append(repr(e))

    def run(self, hello: dict[str, Any] | None = None) -> None:
        """Loop until the storm is over; *hello*, if any, is said once inside the handlers."""
        # An interrupt can land inside the loop's own handler, and then in
        # the one around it: each level catches what the one inside let out.
        while not self.sender.done.is_set():
            try:
                try:
                    if hello is not None:
                        emit(hello)
                        hello = None
                    self.loop()
                except INTERRUPTS:
                    self.escaped += 1
            except INTERRUPTS:
                self.escaped += 1
        self.sender.join()
        # The last signal may still be on its way to the main thread.
        for _ in range(3):
            try:
                time.sleep(0.05)
            except INTERRUPTS:
                self.escaped += 1


def plant_interruptible_operations() -> None:
    """The old behaviour: operations run in the main thread, where an interrupt cuts them."""
    import sessiontemp.lease
    import sessiontemp.manager

    def inline(operation: Any, undo: Any = None) -> Any:
        return operation()

    sessiontemp.manager.shielded = inline  # type: ignore[attr-defined]
    sessiontemp.lease.shielded = inline  # type: ignore[attr-defined]


def plant_sigint_only_shield() -> None:
    """A shield that knows SIGINT alone: an application's SIGTERM handler cuts operations."""
    import sessiontemp._guards.shield

    sessiontemp._guards.shield._SIGNALS = (int(signal.SIGINT),)  # type: ignore[misc]


def disk_agrees(manager: Manager) -> str:
    """"agrees" when the root holds exactly the generation directories the manager's state names."""
    expected = {generation_name(g.id) for g in manager.state.generations.values()
                if g.manager == manager.id and g.removal is None}
    found = {n for n in os.listdir(manager.root)
             if n.startswith((GENERATION_PREFIX, TRASH_PREFIX))}
    return "agrees" if found == expected else f"differs: {sorted(found ^ expected)}"


def storm(root: Path, interrupts: int, seed: int, from_outside: bool) -> int:
    # Python installs its KeyboardInterrupt handler only when SIGINT was not
    # ignored at start; a parent that ignores it (a test run's other tests
    # may) would pass that on, and no interrupt would ever be raised here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if from_outside:
        signal.signal(signal.SIGTERM, terminate)
    manager = Manager(root, busy_timeout=BUSY_TIMEOUT)
    manager.retain()
    hello = {"manager": manager.id, "pid": os.getpid()}
    sender: Sender | Listener = Listener() if from_outside else Sender(interrupts, seed)
    run = Storm(manager, sender)
    if from_outside:
        # Said where an interrupt is caught: the signals start once it is read.
        sender.start()
        run.run(hello)
    else:
        emit(hello)
        sender.start()
        run.run()
    # Afterwards, without any interrupt: it must simply work.
    works = True
    error = ""
    try:
        with manager.acquire(label="after the storm") as lease:
            (lease.path / "after").write_bytes(b"after")
        manager.rotate()
        with manager.acquire(label="after the storm") as lease:
            pass
    except Exception as e:
        works, error = False, repr(e)
    emit({"sent": sender.sent, "caught": run.caught, "deferred": run.deferred,
          "escaped": run.escaped, "rounds": run.rounds, "failures": run.failures,
          "works": works, "error": error, "closed": manager.closed,
          "journal": agrees_with_journal(manager), "disk": disk_agrees(manager)})
    for words in commands():
        if words[0] == "close":
            manager.close()
            emit({"closed": manager.closed})
            return 0
    return 0


# -- fork inside a with block ----------------------------------------------------------


def plant_fork_unsafety() -> None:
    """The old behaviour: a forked child's copies act as the parent's own."""
    Handles.forget = lambda self: None  # type: ignore[method-assign]
    Store.forget = lambda self: None  # type: ignore[method-assign]
    Handles.forked = property(lambda self: False)  # type: ignore[assignment, method-assign]


def lock_state(path: Path) -> str:
    """"missing", "held" (someone holds a lock on it) or "free", probed through a new descriptor."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "missing"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "held"
    finally:
        os.close(fd)
    return "free"


def journal_rows(root: Path) -> list[list[Any]]:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return [[seq, kind, payload] for seq, _, kind, payload, _ in store.rows()]
    finally:
        store.close()


def in_child(manager: Manager, lease: Lease, parent: int) -> dict[str, Any]:
    """What the forked child sees when it uses its copies."""
    seen: dict[str, Any] = {"pid": os.getpid(), "parent": parent}
    try:
        manager.acquire()
        seen["acquire"] = "succeeded"
    except ForkedCopy as e:
        seen["acquire"] = "ForkedCopy"
        seen["message"] = str(e)
    except Exception as e:
        seen["acquire"] = repr(e)
    try:
        lease.release()
        seen["release"] = "returned"
    except Exception as e:
        seen["release"] = repr(e)
    return seen


def attempt(what: str, action: Any) -> str:
    try:
        action()
    except Exception as e:
        return f"{what}: {e!r}"
    return ""


def fork(root: Path, how: str) -> int:
    parent = os.getpid()
    failures: list[str] = []
    with Manager(root, busy_timeout=BUSY_TIMEOUT) as manager:
        manager.retain()
        with manager.acquire(label="held across the fork") as lease:
            (lease.path / "before-fork").write_bytes(b"parent")
            lock_path = manager.root / "managers" / f"{manager.id}.lock"
            before = journal_rows(root)
            emit({"manager": manager.id, "pid": parent, "lease": lease.id,
                  "generation": lease.generation, "path": str(lease.path),
                  "before_fork": before})
            child = os.fork()
            if child == 0:
                emit({"child": in_child(manager, lease, parent)})
                if how == "sys.exit":
                    sys.exit(0)
                if how == "os._exit":
                    os._exit(0)
                # "block": leave both with blocks, then the program, normally.
            else:
                _, status = os.waitpid(child, 0)
                after = journal_rows(root)
                emit({"after_child": {
                    "child": child,
                    "status": os.waitstatus_to_exitcode(status),
                    "lock_file": lock_state(lock_path),
                    "new_rows": after[len(before):],
                    "rows_changed": after[:len(before)] != before,
                    "lease_released_here": lease.released,
                    "journal": agrees_with_journal(manager),
                }})
                # Retired: only the lease's own lock is left on the directory.
                failures += filter(None, [attempt("rotate", manager.rotate)])
                lease_lock_after_rotate = lock_state(lease.path)
        # Leaving the lease's block released it (in the parent: for real).
        if os.getpid() == parent:
            removed = not lease.path.exists()
            failures += filter(None, [attempt("acquire", lambda: manager.acquire().release())])
    if os.getpid() != parent:
        return 0
    failures += filter(None, [attempt("close", manager.close)])
    emit({"parent": {"failures": failures, "lease_lock_after_rotate": lease_lock_after_rotate,
                     "retired_removed_after_release": removed, "closed": manager.closed,
                     "lock_file_after_close": lock_state(lock_path)}})
    return 0


# -- close that cannot journal -----------------------------------------------------------


class UnlinksItsLockAfterAFailedClose(Manager):
    """The old close: the liveness lock file goes even when the end was not journaled."""

    def _close(self) -> None:
        super()._close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / "managers" / f"{self.id}.lock")


def hold_then_close(root: Path, busy_timeout: float, planted: bool) -> int:
    kind = UnlinksItsLockAfterAFailedClose if planted else Manager
    manager = kind(root, busy_timeout=busy_timeout)
    manager.retain()
    retired = manager.acquire(label="on the retired generation")
    (retired.path / "a").write_bytes(b"a" * 1000)
    manager.rotate()
    current = manager.acquire(label="on the current generation")
    (current.path / "b").write_bytes(b"b" * 1000)
    lock_path = manager.root / "managers" / f"{manager.id}.lock"
    emit({"manager": manager.id, "pid": os.getpid(),
          "generations": [retired.generation, current.generation],
          "paths": [str(retired.path), str(current.path)], "lock_file": str(lock_path)})
    for words in commands():
        if words[0] == "close":
            error = ""
            with capture_logs() as logs:
                try:
                    manager.close()
                except BaseException as e:
                    error = repr(e)
            emit({"error_raised": error, "events": [e["event"] for e in logs],
                  "journal": agrees_with_journal(manager),
                  "closed": manager.closed, "lock_file_exists": lock_path.exists(),
                  "lock_file": lock_state(lock_path)})
        elif words[0] == "exit":
            return 0
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("neighbour", "storm", "fork", "close"))
    parser.add_argument("root", type=Path)
    parser.add_argument("--interrupts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exit", choices=("block", "sys.exit", "os._exit"), default="block")
    parser.add_argument("--busy-timeout", type=float, default=BUSY_TIMEOUT)
    parser.add_argument("--from-outside", action="store_true",
                        help="storm: the signals come from another process")
    parser.add_argument("--planted", action="store_true",
                        help="run the deliberately broken variant of the mode")
    args = parser.parse_args(argv)
    if args.mode == "neighbour":
        return neighbour()
    if args.mode == "storm":
        if args.planted:
            if args.from_outside:
                plant_sigint_only_shield()
            else:
                plant_interruptible_operations()
        return storm(args.root, args.interrupts, args.seed, args.from_outside)
    if args.mode == "fork":
        if args.planted:
            plant_fork_unsafety()
        return fork(args.root, args.exit)
    return hold_then_close(args.root, args.busy_timeout, args.planted)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
