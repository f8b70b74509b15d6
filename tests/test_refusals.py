"""An append the journal refuses, at every journal step of every operation: nothing is lost.

The store refuses an append in three ways a process lives through: the disk
is full (``JournalFull``, SQLite's ENOSPC), another process holds the
write lock past ``busy_timeout`` (``JournalBusy``) or the journal cannot be
written (``JournalReadOnly``: a read-only file system, EROFS, or a file
its owner may not write, EACCES).  The state machine aims them at the
manager's own operations; here each operation of
``tests/test_descriptors.py`` (open, acquire on a fresh root and on a live
generation, a lease release, an owner's release, rotate, close, keep, an
adoption, a fresh start, remove_session, remove_artifact, recover) runs
after the script that brings a fresh root to where it starts, and the
refusal is raised, as the store raises it, just before its k-th journal
step, for every k until the operation has no more.

The operation completes, or raises the refusal (or a ``SessionTempError``
that carries it); a lease's release and a close never raise.  As far as
the journal says it happened entirely or not at all, memory and journal
agree, the caller's retry (for what raised) does what was asked, and the
model's invariants hold: no leak, no wrongful removal, every artifact's
content intact.

The same operations meet another process too (:mod:`tests.neighbour`): at
each step it rolls the journal over and retires, or makes one move alone
(a checkpoint, a retirement of a segment it sealed before the operation, a
long-lived manager's maintenance, a whole recovery pass; the last three not
inside a recovery pass, which holds the lock they take), and the operation
completes as it would have; every manager then closes, a recovery runs,
``verify`` and ``fsck`` are clean.

The default run takes one refusal and one move for each operation, taking
turns; ``-m slow`` takes every refusal and every move for every operation.
"""

from __future__ import annotations

import functools
import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sessiontemp import Manager
from sessiontemp._guards.steps import StepKind
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.journal.errors import JournalError, SessionTempError
from tests.faults import STORE_FAILURES, Faults, StoreFailure, raising, store_error
from tests.model import SCRATCH, Op, World
from tests.neighbour import MOVES, Move, Neighbour, stepping_in
from tests.test_crashpoints import Tally, carry_on, conclude, perform, world_at
from tests.test_descriptors import NEVER_RAISE, OPERATIONS, WITHOUT_MANAGER


def refused_as_told(op: Op, error: JournalError) -> Callable[[BaseException | None], bool]:
    """What *op* may raise when an append is refused: nothing, the refusal, or one carrying it."""
    def judge(raised: BaseException | None) -> bool:
        if raised is None:
            return True
        if op[0] in NEVER_RAISE:
            return False
        return raised is error or raised.__cause__ is error or (
            isinstance(raised, SessionTempError) and error.reason in str(raised))

    return judge


def run_refused(world: World, faults: Faults, op: Op, k: int, error: JournalError
                ) -> tuple[StepKind, str] | None:
    """Run *op* (no manager's own) with *error* raised before its k-th journal step; where
    that was, or None."""
    faults.arm(raising(error), at=k, only="journal")
    raised: BaseException | None = None
    try:
        perform(world, op)
    except Exception as e:
        raised = e
    finally:
        fired = faults.disarm()
    if fired is None:
        if raised is not None:
            raise raised
        return None
    assert refused_as_told(op, error)(raised), f"{op} refused at {fired} raised {raised!r}"
    for name in world.live():
        world.memory_agrees(world.real[name])
    # Before any retry: the artifacts are exactly what the journal says, each intact.
    world.check_artifacts(world.journal_state(), full=False)
    if raised is None:
        return fired
    # Refused: the caller retries once the journal takes appends again, as it was told.
    if op[0] == "open_session":
        assert world.open(op[1], resume=op[2] == "resume") is not None
    elif op[0] == "remove_artifact":
        world.remove_artifact(op[1], again=True)
    else:
        perform(world, op)
    return fired


def journal_steps(world: World, faults: Faults, op: Op, k: int, error: JournalError
                  ) -> tuple[StepKind, str] | None:
    """*op* with *error* raised before its k-th journal step; where that was, or None.

    A manager's own operation goes through :meth:`World.faulted`, which takes the
    operation's outcome into the model as the journal shows it.
    """
    if op[0] in WITHOUT_MANAGER:
        return run_refused(world, faults, op, k, error)
    journal_only = JournalOnly(faults)
    return world.faulted(op, journal_only, raising(error), at=k,
                         expected=refused_as_told(op, error))


class JournalOnly(Faults):
    """A step hook armed on journal steps only, for World.faulted (which arms every kind)."""

    def __init__(self, inner: Faults) -> None:
        super().__init__()
        self.inner = inner

    def arm(self, action: Callable[[StepKind, str], None], at: int = 1,
            only: StepKind | None = None) -> None:
        self.inner.arm(action, at, "journal")

    def disarm(self) -> tuple[StepKind, str] | None:
        return self.inner.disarm()


def enumerate_refusals(op_name: str, failure: StoreFailure) -> Tally:
    """Every journal step k of the operation named *op_name*, the append refused there."""
    script, op = OPERATIONS[op_name]
    tally = Tally()
    tally.operations += 1
    for k in itertools.count(1):
        faults = Faults()
        where = f"{op_name}, append refused ({failure}) at journal step {k}"
        with world_at(Manager, faults) as world:
            for step in script:
                perform(world, step)
            name = (world.manager_of(("release_lease", op[1])) if op[0] == "keep"
                    else None if op[0] in WITHOUT_MANAGER else world.manager_of(op))
            error = store_error(failure, world.root / JOURNAL_NAME)
            try:
                fired = journal_steps(world, faults, op, k, error)
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
                continue
            if fired is None:
                break
            tally.crash_points += 1
            tally.by_kind[fired[1].split()[0]] += 1
            where = f"{where} {fired}"
            try:
                carry_on(world, name)
                leaked, removed = world.disk_difference()
                tally.leaks += len(leaked)
                tally.wrongful += len(removed)
                world.check()
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
    return tally


def cases(every: bool) -> list[tuple[str, StoreFailure]]:
    """(operation, refusal) pairs: each operation with one refusal, taking turns; or all."""
    return [(op_name, failure) for i, op_name in enumerate(OPERATIONS)
            for j, failure in enumerate(STORE_FAILURES)
            if every or j == i % len(STORE_FAILURES)]


@pytest.mark.parametrize(("op_name", "failure"), [
    *(pytest.param(o, f, id=f"{o}-{f}") for o, f in cases(False)),
    *(pytest.param(o, f, id=f"{o}-{f}-every", marks=pytest.mark.slow)
      for o, f in cases(True) if (o, f) not in cases(False)),
])
def test_an_append_refused_at_every_journal_step_of_an_operation_loses_nothing(
    op_name: str, failure: StoreFailure,
) -> None:
    tally = enumerate_refusals(op_name, failure)
    print(f"\n{op_name}, {failure}: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points >= 1


# -- another process's move at every step of the same operations -----------------------------

# The operations that are recovery passes: they hold the recovery lock across their steps,
# which the neighbour's retirement, maintenance and recovery take (or wait for).
PASSES = frozenset({"open", "open_session", "recover", "remove_session", "remove_artifact"})


def moves_for(op: Op) -> tuple[Move, ...]:
    return tuple(m for m in MOVES if op[0] not in PASSES or m in ("rollover", "checkpoint"))


def enumerate_moves(op_name: str, how: Move, neighbour: Neighbour) -> Tally:
    """Every step k of the operation named *op_name*, the neighbour making its move there."""
    script, op = OPERATIONS[op_name]
    tally = Tally()
    tally.operations += 1
    for k in itertools.count(1):
        faults = Faults()
        where = f"{op_name}, the neighbour's {how} at step {k}"
        base = Path(tempfile.mkdtemp(prefix="sessiontemp-moves-", dir=SCRATCH))
        world = World(base / "w", step_hook=faults, neighbour=neighbour)
        try:
            for step in script:
                perform(world, step)
            name = (world.manager_of(("release_lease", op[1])) if op[0] == "keep"
                    else None if op[0] in WITHOUT_MANAGER else world.manager_of(op))
            try:
                world.before_stepping_in(how)
                faults.arm(stepping_in(functools.partial(world.interleave, how)), at=k)
                try:
                    perform(world, op)
                finally:
                    fired = faults.disarm()
                world.after_stepping_in(how, fired)
                for live in world.live():
                    world.memory_agrees(world.real[live])
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
                continue
            if fired is None:
                break
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            where = f"{where} {fired}"
            try:
                world.check()
                carry_on(world, name)
                leaked, removed = world.disk_difference()
                tally.leaks += len(leaked)
                tally.wrongful += len(removed)
                conclude(world)
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
        finally:
            faults.disarm()
            world.shutdown()
            shutil.rmtree(base, ignore_errors=True)
    return tally


def move_cases(every: bool) -> list[tuple[str, Move]]:
    """(operation, move) pairs: each operation with one of its moves, taking turns; or all."""
    chosen = []
    for i, (op_name, (_, op)) in enumerate(OPERATIONS.items()):
        moves = moves_for(op)
        chosen += [(op_name, m) for j, m in enumerate(moves) if every or j == i % len(moves)]
    return chosen


@pytest.fixture(scope="module")
def neighbour() -> Iterator[Neighbour]:
    other = Neighbour()
    try:
        yield other
    finally:
        other.end()


@pytest.mark.parametrize(("op_name", "how"), [
    *(pytest.param(o, m, id=f"{o}-{m}") for o, m in move_cases(False)),
    *(pytest.param(o, m, id=f"{o}-{m}-every", marks=pytest.mark.slow)
      for o, m in move_cases(True) if (o, m) not in move_cases(False)),
])
def test_another_process_at_every_step_of_an_operation_on_sessions_and_artifacts_changes_nothing(
    op_name: str, how: Move, neighbour: Neighbour,
) -> None:
    """Another process rolls over and retires, or checkpoints, retires a segment it sealed
    before, maintains or recovers, at each step of each operation (keep, adopt, a fresh start,
    remove_session and remove_artifact among them): the operation completes as it would have,
    every invariant holds, every manager closes, verify and fsck are clean."""
    tally = enumerate_moves(op_name, how, neighbour)
    print(f"\n{op_name}, the neighbour {how}: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points >= 1
