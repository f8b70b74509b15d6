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

The default run takes one refusal for each operation, taking turns; ``-m
slow`` takes all three for every operation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from journal.errors import JournalError, SessionTempError
from sessiontemp import Manager
from sessiontemp.root import JOURNAL_NAME
from sessiontemp.steps import StepKind
from tests.faults import STORE_FAILURES, Faults, StoreFailure, raising, store_error
from tests.model import Op, World
from tests.test_crashpoints import Tally, carry_on, perform, world_at
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
