"""Every crash point of every operation, in every state class of a small model.

The state classes are found by a breadth-first walk of the reference model
(:class:`tests.model.Model`, no disk): up to two live managers, two owners,
two leases, a crashed manager waiting for recovery, files or none; two
states are one class when they differ only in names.  Each class keeps the
shortest script that reaches it.

For each class and each operation possible there (open, retain, release,
rotate, acquire, lease release, write, measure, close, crash, recovery), and for every
k, a fresh root is brought to the class by its script; then the operation
runs under a fault layer, the step hook, that stops the world just before
its k-th durable step (journal commit, mkdir, rename, removal of one entry,
lock taken or dropped): it raises :class:`_Crash`, a BaseException, there
and at every later step.  The manager that ran the operation is then killed
(:func:`tests.model.simulate_kill`: its descriptors closed, nothing
journaled, nothing removed), a new manager is opened, whose open runs
recovery, and every invariant of :meth:`tests.model.World.check` must hold:
no leak, no wrongful removal, journal and disk agree.  k grows until the
operation completes without reaching it.

Recovery itself is crashed twice over: at every step of one pass, then at
every step of the next pass on what the first left, then a clean pass.

Another process steps in at every step k of every operation too (a
neighbour, :mod:`tests.neighbour`): it checkpoints, rolls over and retires
every sealed segment there, and the operation completes as it would have;
or it holds the journal's write lock past busy_timeout from there, the
operation's next append fails (the model follows what the journal shows),
and once let go it rolls over and retires.  Then the manager's next
operation runs, every manager closes (giving up every lock), a recovery
runs, and every invariant holds, ``verify`` and ``fsck`` are clean and no
descriptor to a deleted segment is left open.

The default run enumerates a fixed sample of the (class, operation) pairs
(``SAMPLE_STRIDE``), which still crashes every kind of operation at every
kind of step; ``-m slow`` enumerates them all.  The counts are printed
(``pytest -s``) and written down in TESTING.md.
Last, the short version of ``tools/torture.py`` (real processes, real
SIGKILL) runs here; its long version is marked slow.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import attrs
import pytest

from sessiontemp import Manager, handles
from sessiontemp._guards.steps import StepKind
from sessiontemp._kernel.liveness import lock_shared, lock_work
from sessiontemp._kernel.root import JOURNAL_NAME, generation_name, new_generation_id
from sessiontemp.generations import Generations, Made
from sessiontemp.inspect import fsck, verify
from sessiontemp.journal import ledger
from sessiontemp.journal.durability import synced
from sessiontemp.journal.errors import SessionTempError
from sessiontemp.journal.events import ArtifactKept, Event, GenerationCreated, GenerationReady
from sessiontemp.journal.testing import synced_commits
from sessiontemp.manager import DURABILITY, Durability
from tests.faults import Faults, Injected, raising
from tests.model import SCRATCH, Model, Op, World
from tests.neighbour import Neighbour, deleted_descriptors, stepping_in
from tests.powerloss import DIRECTORIES, Directories, PowerLoss, SyncedWal, lose_directories
from tests.powerloss import judge as judge_power_loss

Script = tuple[Op, ...]

MAX_LIVE = 2
MAX_OWNERS = 2
MAX_LEASES = 2
MAX_DEPTH = 7


class _Crash(BaseException):
    """The world stops here: raised by the fault layer, caught by the test only."""


class FaultLayer:
    """The step hook: while armed, stop the world just before the k-th durable step.

    Once it has stopped, every later step raises too, so nothing durable
    happens after the crash point (exception handlers on the way out may
    try).
    """

    def __init__(self) -> None:
        self.armed = False
        self.crash_at: int | None = None
        self.count = 0
        self.crashed_at: tuple[StepKind, str] | None = None

    def arm(self, k: int | None) -> None:
        self.armed, self.crash_at, self.count, self.crashed_at = True, k, 0, None

    def disarm(self) -> None:
        self.armed = False

    def __call__(self, kind: StepKind, detail: str) -> None:
        if not self.armed:
            return
        if self.crashed_at is not None:
            raise _Crash("after the crash point")
        self.count += 1
        if self.count == self.crash_at:
            self.crashed_at = (kind, detail)
            raise _Crash(kind, detail)


# -- the state classes -----------------------------------------------------------------


class Sketch:
    """The model alone, named the way :class:`World` names things, to find state classes."""

    def __init__(self) -> None:
        self.model = Model()
        self.counter = itertools.count()
        self.generations = itertools.count()

    def run(self, op: Op) -> None:
        kind, *args = op
        m = self.model
        if kind == "open":
            m.open(f"m{next(self.counter)}")
        elif kind == "acquire":
            if m.can_acquire(args[0]):
                current = m.managers[args[0]].current
                m.acquire(args[0], f"l{next(self.counter)}",
                          current or f"g{next(self.generations)}")
        elif kind == "write":
            m.write(args[0], args[1], "x")
        elif kind == "recover":
            m.recover()
        else:
            getattr(m, kind)(*args)


def operations(model: Model) -> list[Op]:
    """What can be done in *model*'s state, within the small model's bounds."""
    ops: list[Op] = [("recover",)]
    live = model.live()
    if len([m for m in model.managers.values() if m.status in ("live", "crashed")]) < MAX_LIVE:
        ops.append(("open",))
    for name in live:
        manager = model.managers[name]
        if manager.owners < MAX_OWNERS:
            ops.append(("retain", name))
        ops += [("release", name), ("rotate", name), ("close", name), ("crash", name)]
        if manager.current is not None:
            # A measurement journals only for a current directory.
            ops.append(("measure", name))
        if len(model.held) < MAX_LEASES or not model.can_acquire(name):
            ops.append(("acquire", name))
    for lease in sorted(model.held):
        ops += [("release_lease", lease), ("write", lease, "f.txt")]
    return ops


def state_class(model: Model) -> tuple[object, ...]:
    """The state up to names: what each manager that has not ended holds."""
    def generation(gid: str) -> int:
        return len(model.generations[gid].leases & set(model.held))

    classes = []
    for name, m in model.managers.items():
        if m.status not in ("live", "crashed"):
            continue
        retired = sorted(generation(g) for g, gen in model.generations.items()
                         if gen.manager == name and not gen.removed and g != m.current)
        current = None if m.current is None else generation(m.current)
        classes.append((m.status, m.owners, m.sealed, current, tuple(retired)))
    return tuple(sorted(classes, key=repr))


def state_classes() -> dict[tuple[object, ...], Script]:
    """Every state class within the bounds, with the shortest script reaching it."""
    found: dict[tuple[object, ...], Script] = {state_class(Model()): ()}
    frontier: list[Script] = [()]
    for _ in range(MAX_DEPTH):
        following: list[Script] = []
        for script in frontier:
            sketch = replayed(script)
            for op in operations(sketch.model):
                after = replayed((*script, op))
                key = state_class(after.model)
                if key not in found:
                    found[key] = (*script, op)
                    following.append((*script, op))
        frontier = following
    return found


def replayed(script: Script) -> Sketch:
    sketch = Sketch()
    for op in script:
        sketch.run(op)
    return sketch


# -- one crash point ---------------------------------------------------------------------


def perform(world: World, op: Op) -> None:
    kind, *args = op
    if kind == "write":
        world.write(args[0], args[1])
    elif kind == "open_session":
        world.open(args[0], resume=args[1] == "resume")
    else:
        getattr(world, kind)(*args)


def victim_of(world: World, op: Op) -> str | None:
    """The manager whose process runs *op*: killed when *op* crashes."""
    kind, *args = op
    if kind in ("open", "open_session", "recover"):
        return None  # a manager half-opened, or a recovery pass: gone with the crash
    if kind in ("release_lease", "write", "keep"):
        return world.model.generations[world.model.held[args[0]]].manager
    return args[0]


@attrs.define
class Tally:
    """What the enumeration did and found."""

    crash_points: int = 0
    operations: int = 0
    by_kind: collections.Counter[str] = attrs.field(factory=collections.Counter)
    leaks: int = 0
    wrongful: int = 0
    # Descriptors still open once the world is shut down (a process that
    # carries on must not accumulate them).
    descriptors: int = 0
    # A power loss: the -wal frames it dropped (committed, not yet synced).
    dropped: int = 0
    failures: list[str] = attrs.field(factory=list)

    def line(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.by_kind.items()))
        return (f"{self.crash_points} crash points in {self.operations} operations "
                f"({kinds}); leaks {self.leaks}, wrongful removals {self.wrongful}, "
                f"descriptors left open {self.descriptors}, failures {len(self.failures)}")


@contextlib.contextmanager
def world_at(manager_class: type[Manager], hook: FaultLayer | Faults,
             durability: Durability = "full") -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="sessiontemp-crashpoint-", dir=SCRATCH))
    world = World(base / "w", manager_class=manager_class, step_hook=hook,
                  durability=durability)
    try:
        yield world
    finally:
        hook.disarm()
        world.shutdown()
        shutil.rmtree(base, ignore_errors=True)


def stop_at(world: World, hook: FaultLayer, op: Op, k: int,
            stopped: Callable[[], None] | None = None) -> bool:
    """Run *op*, stopping the world before its k-th step, and kill what ran it.

    False when *op* ended before its k-th step.  *stopped* is called once the
    world stopped, before the kill.
    """
    victim = victim_of(world, op)
    keep = open_descriptors() - (set() if victim is None else descriptors_of(world.real[victim]))
    hook.arm(k)
    try:
        perform(world, op)
    except _Crash:
        pass
    finally:
        hook.disarm()
    if hook.crashed_at is None:
        return False
    if stopped is not None:
        stopped()
    if victim is not None:
        world.crash(victim)
    # A killed process loses every descriptor; the ones the operation opened
    # and did not close (a finally block stopped by the fault layer) go too.
    # Those of the other managers, opened before, stay; so do SQLite's own
    # on the journal, which it keeps past a close for its POSIX locks.
    journal = os.fspath(world.root / JOURNAL_NAME)
    for fd in open_descriptors() - keep:
        with contextlib.suppress(OSError):
            if not os.readlink(f"/proc/self/fd/{fd}").startswith(journal):
                os.close(fd)
    return True


def open_descriptors() -> set[int]:
    """This process's open descriptors (not the one that listed them, closed since)."""
    listed = {int(fd) for fd in os.listdir("/proc/self/fd")}
    return {fd for fd in listed if is_open(fd)}


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def descriptors_of(manager: Manager) -> set[int]:
    """The lock descriptors of *manager* (its journal, root and liveness go by their close)."""
    held = handles.of(manager.id)
    leases = {hold.fd for hold in held.leases.values() if hold.fd is not None}
    return {*held.generations.values(), *leases}


def judge(world: World, tally: Tally, where: str) -> None:
    """Recover by opening a manager, then every invariant; count leaks and wrongful removals."""
    world.open()
    leaked, removed = world.disk_difference()
    tally.leaks += len(leaked)
    tally.wrongful += len(removed)
    try:
        world.check(full=False)
    except AssertionError as e:
        tally.failures.append(f"{where}: {e}")


def enumerate_operation(script: Script, op: Op, tally: Tally, *,
                        manager_class: type[Manager] = Manager,
                        durability: Durability = "full") -> None:
    """Every crash point of *op* after *script*; each judged after recovery."""
    tally.operations += 1
    for k in itertools.count(1):
        hook = FaultLayer()
        with world_at(manager_class, hook, durability) as world:
            for step in script:
                perform(world, step)
            if not stop_at(world, hook, op, k):
                return
            assert hook.crashed_at is not None
            tally.crash_points += 1
            tally.by_kind[hook.crashed_at[0]] += 1
            judge(world, tally, f"{script} then {op} stopped at step {k} {hook.crashed_at}")


def enumerate_power_losses(script: Script, op: Op, tally: Tally, *,
                           durability: Durability = "full",
                           directories: Directories = "kept") -> None:
    """Every crash point of *op* after *script*, the power lost there; each judged after recovery.

    The operation stops at its k-th step, as a kill stops it; then the power
    goes: every manager dies, every -wal frame not yet synced is dropped,
    the *directories* case of what the file system kept of directory effects
    applies (:mod:`tests.powerloss`), and a recovery runs on what the disk kept.
    """
    tally.operations += 1
    for k in itertools.count(1):
        hook = FaultLayer()
        synced = SyncedWal()
        with synced_commits(synced), world_at(Manager, hook, durability) as world:
            power = PowerLoss(world.root, synced)
            for step in script:
                perform(world, step)
            if not stop_at(world, hook, op, k, power.goes):
                return
            assert hook.crashed_at is not None
            tally.crash_points += 1
            tally.by_kind[hook.crashed_at[0]] += 1
            promised = {artifact.id for artifact in world.artifacts.values()}
            for name in world.live():
                world.crash(name)
            assert power.cut is not None
            power.cut.restore()
            tally.dropped += power.cut.dropped
            lose_directories(world.root, directories)
            where = (f"{script} then {op}, the power lost at step {k} {hook.crashed_at}, "
                     f"directories {directories}")
            try:
                verdict = judge_power_loss(world.root, promised)
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
                continue
            tally.leaks += len(verdict.leaked)
            tally.wrongful += len(verdict.wrongful)
            if verdict.leaked or verdict.wrongful or verdict.problems:
                tally.failures.append(f"{where}: leaked {sorted(verdict.leaked)}, wrongly "
                                      f"removed {sorted(verdict.wrongful)}; {verdict.problems}")


def enumerate_double_recovery_crash(script: Script, tally: Tally) -> None:
    """Crash a recovery pass at every step k1, then the next pass at every step k2."""
    for k1 in itertools.count(1):
        for k2 in itertools.count(1):
            hook = FaultLayer()
            with world_at(Manager, hook) as world:
                for step in script:
                    perform(world, step)
                if not stop_at(world, hook, ("recover",), k1):
                    return
                first = hook.crashed_at
                if not stop_at(world, hook, ("recover",), k2):
                    break
                tally.crash_points += 1
                tally.by_kind["recovery twice"] += 1
                judge(world, tally, f"{script} then recovery stopped at step {k1} {first}, "
                      f"the next at step {k2} {hook.crashed_at}")


# -- one exception point: the process carries on ------------------------------------------


def fail_at(world: World, faults: Faults, op: Op, k: int) -> tuple[StepKind, str] | None:
    """Run *op* with an exception raised before its k-th step only; catch it, carry on.

    The model becomes what the journal shows (:meth:`World.failed`), and the
    memory of the manager that ran it must be the journal.  None when *op*
    ended before its k-th step.
    """
    kind = op[0]
    error = Injected(f"before step {k}")
    if kind not in ("open", "open_session", "recover"):
        return world.failed(op, faults, error, at=k)
    # A recovery pass (an open runs one first) stopped half-way: what it
    # did is journaled, the rest is for the next pass.
    faults.arm(raising(error), at=k)
    try:
        perform(world, op)
    except Injected:
        pass  # what the process does: catch it and carry on
    finally:
        fired = faults.disarm()
    for name in world.live():
        world.memory_agrees(world.real[name])
    return fired


def carry_on(world: World, name: str | None) -> None:
    """The next operation of manager *name* (None: a recovery pass): it finishes what was left."""
    if name in world.unclosed:
        world.finish_close(name)
    elif name in world.real:
        if world.model.can_acquire(name):
            lease = world.acquire(name)
            assert lease is not None
            world.release_lease(lease)
        else:
            world.close(name)
    else:
        # Closed, or never opened: the next recovery finishes its work.
        world.recover()


def judge_carrying_on(world: World, name: str | None, tally: Tally, where: str) -> None:
    """Carry on, then every invariant; count leaks and wrongful removals."""
    try:
        carry_on(world, name)
    except Exception as e:  # any failure to carry on is a finding, counted
        tally.failures.append(f"{where}: the next operation failed: {e!r}")
        return
    leaked, removed = world.disk_difference()
    tally.leaks += len(leaked)
    tally.wrongful += len(removed)
    try:
        world.check()
    except AssertionError as e:
        tally.failures.append(f"{where}: {e}")


def enumerate_exceptions(script: Script, op: Op, tally: Tally, *,
                         manager_class: type[Manager] = Manager) -> None:
    """Every step k of *op* after *script*: an exception there, the process carrying on."""
    tally.operations += 1
    if op[0] in ("write", "crash"):
        return  # no durable step
    for k in itertools.count(1):
        faults = Faults()
        before = open_descriptors()
        with world_at(manager_class, faults) as world:
            for step in script:
                perform(world, step)
            where = f"{script} then {op} with an exception at step {k}"
            name = None if op[0] in ("open", "recover") else world.manager_of(op)
            try:
                fired = fail_at(world, faults, op, k)
            except AssertionError as e:
                tally.failures.append(f"{where}: {e}")
                continue
            if fired is None:
                return
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            judge_carrying_on(world, name, tally, f"{where} {fired}")
        left = open_descriptors() - before
        if left:
            tally.descriptors += len(left)
            tally.failures.append(f"{where} {fired}: descriptors left open: {sorted(left)}")


# -- another process steps in: the operation carries on -----------------------------------

# The two ways: the neighbour rolls the journal over and retires every sealed
# segment, the one the manager writes to included; or it holds the journal's
# write lock past the managers' busy_timeout, and rolls over once let go.
# Beside them, each of the neighbour's moves alone (tests/neighbour.py's Move):
# a checkpoint with no rollover, a retirement of a segment sealed before the
# operation, a long-lived manager's maintenance, a whole recovery pass.
Interleaving = Literal["rollover", "busy", "checkpoint", "retire", "maintain", "recover"]
INTERLEAVINGS: tuple[Interleaving, ...] = ("rollover", "busy")
ALONE: tuple[Interleaving, ...] = ("checkpoint", "retire", "maintain", "recover")
# The moves that need the recovery lock, which a recovery pass (open, recover)
# holds across its steps: a retirement or a maintenance there does nothing, and
# a recovery pass would wait for the one it steps into.
NEEDS_THE_ROOT: frozenset[Interleaving] = frozenset({"busy", "retire", "maintain", "recover"})
# Short, so that a lock held on purpose fails an append quickly.
NEIGHBOURLY_BUSY_TIMEOUT = 0.2


def step_in_at(world: World, faults: Faults, op: Op, k: int, how: Interleaving
               ) -> tuple[StepKind, str] | None:
    """Run *op* with the neighbour stepping in just before its k-th step; None if it has fewer.

    A rollover and retirement changes nothing the operation may see: it
    completes as it would have, and the model with it.  A lock held past
    busy_timeout fails the operation's next append: the model follows what
    the journal shows (:meth:`World.met_a_busy_journal`); then the lock is
    let go and the neighbour rolls over and retires.
    """
    if how == "busy":
        fired = world.met_a_busy_journal(op, faults, at=k)
        if fired is not None:
            world.interleave()
        return fired
    world.before_stepping_in(how)
    faults.arm(stepping_in(lambda: world.interleave(how)), at=k)
    try:
        perform(world, op)
    finally:
        fired = faults.disarm()
    world.after_stepping_in(how, fired)
    for name in world.live():
        world.memory_agrees(world.real[name])
    return fired


def conclude(world: World) -> None:
    """Every manager closes, giving up every lock; a recovery; verify and fsck find nothing."""
    for name in list(world.unclosed):
        world.finish_close(name)
    for name in world.live():
        manager = world.real[name]
        world.close(name)
        assert manager.closed
        assert not world.root.joinpath("managers", f"{manager.id}.lock").exists(), (
            f"{name}'s close left its liveness lock file")
    world.recover()
    world.check()
    assert os.listdir(world.root / "managers") == [], "a liveness lock file was left"
    checked = verify(world.root / JOURNAL_NAME)
    assert checked.problems == (), checked.problems[:5]
    assert fsck(world.root).ok
    assert deleted_descriptors(world.root) == [], "a retired segment is still open"


def enumerate_interleavings(script: Script, op: Op, tally: Tally, neighbour: Neighbour,
                            how: Interleaving) -> None:
    """Every step k of *op* after *script*, the neighbour stepping in there; then carry on."""
    tally.operations += 1
    if op[0] in ("write", "crash") or (how in NEEDS_THE_ROOT and op[0] in ("open", "recover")):
        # No durable step; or a recovery pass, whose refused append is a failed open, and
        # which holds the lock the neighbour's retirement, maintenance or recovery takes.
        return
    for k in itertools.count(1):
        faults = Faults()
        base = Path(tempfile.mkdtemp(prefix="sessiontemp-neighbour-", dir=SCRATCH))
        world = World(base / "w", step_hook=faults, busy_timeout=NEIGHBOURLY_BUSY_TIMEOUT,
                      neighbour=neighbour)
        try:
            for step in script:
                perform(world, step)
            where = f"{script} then {op} with the neighbour ({how}) at step {k}"
            name = None if op[0] in ("open", "recover") else world.manager_of(op)
            try:
                fired = step_in_at(world, faults, op, k, how)
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
                continue
            if fired is None:
                return
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            where = f"{where} {fired}"
            try:
                world.check()
                carry_on(world, name)
                leaked, removed = world.disk_difference()
                tally.leaks += len(leaked)
                tally.wrongful += len(removed)
                world.check()
                conclude(world)
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
        finally:
            faults.disarm()
            neighbour.let_go()
            world.shutdown()
            shutil.rmtree(base, ignore_errors=True)


CLASSES = state_classes()

# The default run enumerates a fixed sample of the (class, operation) pairs: of each kind
# of operation, every SAMPLE_STRIDE-th pair in breadth-first order, the shortest script
# first; of the classes with a dead manager, every SAMPLE_STRIDE-th.  Every kind of
# operation and of step is still crashed, in simple states and crowded ones; `-m slow`
# enumerates every pair and class.  A kill at step k runs each sampled pair in one of the
# two durabilities, taking turns.
SAMPLE_STRIDE = 10
SAMPLED = pytest.param(False, id="sampled")
EVERY = pytest.param(True, id="every", marks=pytest.mark.slow)
STEP_KINDS = {"journal", "lock", "unlock", "mkdir", "rename", "rmdir"}


def pairs(every: bool, *, share: int = 0, shares: int = 1) -> list[tuple[Script, Op]]:
    """The (script, operation) pairs to enumerate: all of them, or the default run's sample.

    The sample can be dealt out: share *share* of *shares* takes every *shares*-th of
    its pairs of each kind, so the shares together are the whole sample.
    """
    seen: collections.Counter[str] = collections.Counter()
    chosen = []
    for script in CLASSES.values():
        for op in operations(replayed(script).model):
            if every or seen[op[0]] % (SAMPLE_STRIDE * shares) == SAMPLE_STRIDE * share:
                chosen.append((script, op))
            seen[op[0]] += 1
    return chosen


def test_the_small_model_has_its_state_classes() -> None:
    # Two live managers with owners, leases, retired generations, crashed
    # neighbours: a few hundred classes; a change here changes every figure.
    assert len(CLASSES) > 20


@pytest.mark.parametrize("every", [SAMPLED, EVERY])
@pytest.mark.parametrize("durability", DURABILITY)
def test_every_crash_point_of_every_operation_leaves_no_leak_and_no_wrongful_removal(
    durability: Durability, every: bool,
) -> None:
    # In the relaxed durability a crash point is the same process death: what
    # was committed without a sync is in the -wal file and survives it.  The
    # default run deals its sample out between the two durabilities (the whole
    # enumeration, in CI, runs every pair in both): each still crashes every
    # kind of operation at every kind of step.
    tally = Tally()
    chosen = pairs(every, share=DURABILITY.index(durability), shares=len(DURABILITY))
    for script, op in chosen:
        enumerate_operation(script, op, tally, durability=durability)
    print(f"\n{len(CLASSES)} state classes, {len(chosen)} operations, {durability} durability: "
          f"{tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points > 100
    assert set(tally.by_kind) >= STEP_KINDS


# The default run deals a thinner sample out to the power loss: every POWER_STRIDE-th pair
# of each kind of operation, taking turns between the two durabilities.
POWER_STRIDE = 2


@pytest.mark.parametrize("every", [SAMPLED, EVERY])
@pytest.mark.parametrize("durability", DURABILITY)
def test_a_power_loss_at_every_crash_point_leaves_no_leak_and_no_wrongful_removal(
    durability: Durability, every: bool,
) -> None:
    """At every crash point the power goes instead: every manager dies, every -wal frame
    not yet synced is dropped, and the directory effects are kept, or every mkdir is lost,
    or every rename into the trash undone; recovery then leaves no directory the journal
    does not keep and removes nothing its synced records promise.  The default run takes
    the directory cases in turn, pair by pair; the whole enumeration runs each pair in each."""
    tally = Tally()
    chosen = pairs(every, share=DURABILITY.index(durability), shares=len(DURABILITY) * (
        1 if every else POWER_STRIDE))
    for i, (script, op) in enumerate(chosen):
        for directories in DIRECTORIES if every else (DIRECTORIES[i % len(DIRECTORIES)],):
            enumerate_power_losses(script, op, tally, durability=durability,
                                   directories=directories)
    print(f"\n{len(CLASSES)} state classes, {len(chosen)} operations, {durability} durability, "
          f"the power lost: {tally.line()}; {tally.dropped} unsynced -wal frames dropped")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points > 50
    assert set(tally.by_kind) >= STEP_KINDS


@pytest.mark.parametrize("every", [SAMPLED, EVERY])
def test_a_recovery_crashed_and_its_successor_crashed_again_are_finished_by_the_next(
    every: bool,
) -> None:
    tally = Tally()
    with_work = [s for s in CLASSES.values()
                 if any(m.status == "crashed" for m in replayed(s).model.managers.values())]
    with_work = with_work if every else with_work[::SAMPLE_STRIDE]
    assert with_work
    for script in with_work:
        enumerate_double_recovery_crash(script, tally)
    print(f"\n{len(with_work)} state classes with a dead manager: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points > 0


@pytest.mark.parametrize("every", [SAMPLED, EVERY])
def test_an_exception_at_every_step_of_every_operation_is_lived_through_without_a_leak(
    every: bool,
) -> None:
    tally = Tally()
    recovery = Tally()
    chosen = pairs(every)
    for script, op in chosen:
        enumerate_exceptions(script, op, recovery if op[0] in ("open", "recover") else tally)
    print(f"\n{len(CLASSES)} state classes, {len(chosen)} operations, an exception and the "
          "process carries on: "
          f"{tally.line()}; in recovery passes (open, recover): {recovery.line()}")
    failures = tally.failures + recovery.failures
    assert failures == [], "\n".join(failures[:10])
    assert (tally.leaks, tally.wrongful, recovery.leaks, recovery.wrongful) == (0, 0, 0, 0)
    assert (tally.descriptors, recovery.descriptors) == (0, 0)
    assert tally.crash_points > 100
    assert recovery.crash_points > 10
    assert set(tally.by_kind) >= STEP_KINDS


# The default run deals a thinner sample out between the two interleavings: every
# NEIGHBOURLY_STRIDE-th pair of each kind of operation, taking turns.
NEIGHBOURLY_STRIDE = 4


@pytest.fixture(scope="module")
def neighbour() -> Iterator[Neighbour]:
    other = Neighbour()
    try:
        yield other
    finally:
        other.end()


@pytest.mark.parametrize("every", [SAMPLED, EVERY])
@pytest.mark.parametrize("how", INTERLEAVINGS)
def test_another_process_stepping_in_at_every_step_of_every_operation_leaves_all_agreeing(
    neighbour: Neighbour, how: Interleaving, every: bool,
) -> None:
    """At each step of each operation another process rolls over and retires, or holds the
    journal past busy_timeout and then rolls over; the operation carries on, memory, journal
    and disk agree, the manager keeps working, close gives up every lock, verify and fsck
    are clean."""
    tally = Tally()
    chosen = pairs(every) if every else pairs(
        False, share=INTERLEAVINGS.index(how), shares=NEIGHBOURLY_STRIDE)
    before, retired = neighbour.interleaved, neighbour.retired
    for script, op in chosen:
        enumerate_interleavings(script, op, tally, neighbour, how)
    print(f"\n{len(CLASSES)} state classes, {len(chosen)} operations, the neighbour {how}: "
          f"{tally.line()}; {neighbour.interleaved - before} rollovers, "
          f"{neighbour.retired - retired} segments retired")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points > 20
    assert set(tally.by_kind) >= {"journal", "lock", "mkdir", "rename", "rmdir"}


# The default run deals a thinner sample still out between the moves alone.
ALONE_STRIDE = 8
MANAGER_OPERATIONS = frozenset({"retain", "release", "rotate", "acquire", "release_lease",
                                "close", "measure"})


@pytest.mark.parametrize("every", [SAMPLED, EVERY])
@pytest.mark.parametrize("how", ALONE)
def test_another_process_checkpointing_retiring_maintaining_or_recovering_at_every_step(
    neighbour: Neighbour, how: Interleaving, every: bool,
) -> None:
    """At each step of each operation another process makes one move alone: writes a
    checkpoint (no rollover), retires a segment sealed before the operation, runs a
    long-lived manager's maintenance, or runs a whole recovery pass; the operation carries
    on, memory, journal and disk agree, the manager keeps working, close gives up every
    lock, verify and fsck are clean."""
    tally = Tally()
    chosen = pairs(every) if every else pairs(
        False, share=ALONE.index(how), shares=ALONE_STRIDE)
    if how == "recover" and not every:
        # The pass has work where a manager crashed: the sample is of those classes.
        chosen = [(script, op) for script, op in pairs(True) if op[0] in MANAGER_OPERATIONS
                  and any(m.status == "crashed" for m in replayed(script).model.managers.values())
                  ][::ALONE_STRIDE * 2]
    before, retired, buried = neighbour.interleaved, neighbour.retired, neighbour.buried
    for script, op in chosen:
        enumerate_interleavings(script, op, tally, neighbour, how)
    print(f"\n{len(CLASSES)} state classes, {len(chosen)} operations, the neighbour {how}: "
          f"{tally.line()}; {neighbour.interleaved - before} moves, "
          f"{neighbour.retired - retired} segments retired, "
          f"{neighbour.buried - buried} dead managers buried")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points > 10
    assert set(tally.by_kind) >= {"journal", "lock", "unlock"}
    if how in ("retire", "maintain"):
        assert neighbour.retired > retired, "nothing was retired"
    if how == "recover":
        assert neighbour.buried > buried, "no dead manager was buried"


# -- named sessions and artifacts -----------------------------------------------------------

# A named session's owner with a file in its directory, killed.
OWNER_KILLED: Script = (("open_session", "s0", "resume"), ("retain", "m0"), ("acquire", "m0"),
                        ("write", "l1", "f.txt"), ("crash", "m0"))


def test_every_crash_point_of_an_adoption_leaves_the_directory_for_the_next_resume() -> None:
    tally = Tally()
    resumed = 0
    for k in itertools.count(1):
        hook = FaultLayer()
        with world_at(Manager, hook) as world:
            for step in OWNER_KILLED:
                perform(world, step)
            if not stop_at(world, hook, ("open_session", "s0", "resume"), k):
                break
            tally.crash_points += 1
            tally.by_kind[hook.crashed_at[0] if hook.crashed_at else "?"] += 1
            where = f"an adopting open stopped at step {k} {hook.crashed_at}"
            judge(world, tally, where)
            # Whether or not the adoption was journaled, the next resume finds the files.
            name = world.open("s0", resume=True)
            assert name is not None
            resumed += world.real[name].resumed
            try:
                world.check(full=False)
            except AssertionError as e:
                tally.failures.append(f"{where}, then a resume: {e}")
    print(f"\nadoption: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert resumed == tally.crash_points > 3
    assert tally.by_kind["lock"]
    assert tally.by_kind["journal"]


def test_an_exception_at_every_step_of_a_fresh_start_is_lived_through_by_a_retry() -> None:
    # Whatever the failed open did (the session discarded or not, its
    # directory removed or half), the caller's retry finishes the job.
    tally = Tally()
    for k in itertools.count(1):
        faults = Faults()
        before = open_descriptors()
        with world_at(Manager, faults) as world:
            for step in OWNER_KILLED:
                perform(world, step)
            fired = fail_at(world, faults, ("open_session", "s0", "fresh"), k)
            if fired is None:
                break
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            where = f"a fresh start with an exception at step {k} {fired}"
            try:
                assert world.open("s0", resume=False) is not None
                leaked, removed = world.disk_difference()
                tally.leaks += len(leaked)
                tally.wrongful += len(removed)
                world.check()
            except AssertionError as e:
                tally.failures.append(f"{where}: {e}")
        if open_descriptors() - before:
            tally.failures.append(f"{where}: descriptors left open")
    print(f"\nfresh start, an exception at each step, then a retry: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    assert tally.crash_points > 3


def test_every_crash_point_of_keep_leaves_a_recorded_artifact_or_nothing() -> None:
    tally = Tally()
    enumerate_operation((("open",), ("retain", "m0"), ("acquire", "m0")), ("keep", "l1"), tally)
    print(f"\nkeep: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert (tally.leaks, tally.wrongful) == (0, 0)
    # The copy, then the record (fsynced in between): both crash points are reached.
    assert tally.by_kind["copy"] == 1
    assert tally.by_kind["journal"] == 1


def test_an_exception_at_every_step_of_keep_leaves_no_file_and_the_lease_keeps_working() -> None:
    tally = Tally()
    for k in itertools.count(1):
        faults = Faults()
        with world_at(Manager, faults) as world:
            for step in (("open",), ("retain", "m0"), ("acquire", "m0")):
                perform(world, step)
            world.write("l1", "kept.txt", "a0\n")
            faults.arm(raising(Injected(f"before step {k}")), at=k)
            try:
                world.leases["l1"].keep("kept.txt", "a0")
            except Injected:
                pass
            finally:
                fired = faults.disarm()
            if fired is None:
                break
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            try:
                # Nothing recorded, nothing left in the store; the same lease keeps it next.
                world.check()
                world.keep("l1")
                world.check()
            except AssertionError as e:
                tally.failures.append(f"keep with an exception at step {k} {fired}: {e}")
    print(f"\nkeep, an exception at each step: {tally.line()}")
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert dict(tally.by_kind) == {"copy": 1, "journal": 1}


# -- a planted bug: the enumeration must catch it ---------------------------------------------


def mkdir_before_journal(self: Generations) -> Made:
    """Makes the directory first and journals it after: the bug the journal-first rule forbids."""
    generation = new_generation_id()
    name = generation_name(generation)
    root_fd = self.handles.root.fd
    self.steps.before("mkdir", name)
    os.mkdir(name, 0o700, dir_fd=root_fd)
    self.writer.append(GenerationCreated(self.manager, generation))
    self.steps.before("lock", name)
    fd = lock_shared(root_fd, name)
    st = os.fstat(fd)
    return generation, fd, lock_work(fd), GenerationReady(self.manager, generation, st.st_dev,
                                                          st.st_ino)


def test_the_enumeration_finds_a_directory_made_before_its_journal_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Generations, "make", mkdir_before_journal)
    tally = Tally()
    enumerate_operation((("open",), ("retain", "m0")), ("acquire", "m0"), tally)
    assert tally.leaks >= 1
    assert tally.failures


def not_synced(kind: type[Event]) -> Callable[[Durability, tuple[Event, ...]], bool]:
    """Lets an append holding a *kind* ride on the next sync: the bug the write-ahead rule
    forbids for a generation's creation (before its mkdir) and a removal's start (before
    its rename)."""
    def planted(durability: Durability, events: tuple[Event, ...]) -> bool:
        if any(isinstance(event, kind) for event in events):
            return False
        return synced(durability, events)
    return planted


# A creation lost after its mkdir leaves a directory no record names; an artifact's
# record lost after its keep returned, a file the journal does not know.
@pytest.mark.parametrize(("kind", "script", "op", "durability"), [
    (GenerationCreated, (("open",), ("retain", "m0")), ("acquire", "m0"), "full"),
    (ArtifactKept, (("open",), ("retain", "m0"), ("acquire", "m0"), ("keep", "l1")),
     ("release_lease", "l1"), "relaxed"),
])
def test_the_power_loss_model_finds_a_write_ahead_record_not_synced_before_its_effect(
    monkeypatch: pytest.MonkeyPatch, kind: type[Event], script: Script, op: Op,
    durability: Durability,
) -> None:
    monkeypatch.setattr(ledger, "synced", not_synced(kind))
    tally = Tally()
    enumerate_power_losses(script, op, tally, durability=durability)
    assert tally.leaks + tally.wrongful >= 1
    assert tally.failures
    # The same operation with its records synced as they are: nothing found.
    monkeypatch.undo()
    clean = Tally()
    enumerate_power_losses(script, op, clean, durability=durability)
    assert clean.crash_points == tally.crash_points
    assert (clean.leaks, clean.wrongful, clean.failures) == (0, 0, [])


def test_an_exception_at_any_step_of_a_removal_leaves_no_descriptor_open() -> None:
    # Before step "unlock" of a removal, an exception used to skip closing
    # the descriptor that holds the generation's exclusive lock.
    tally = Tally()
    enumerate_exceptions((("open",), ("retain", "m0"), ("acquire", "m0"), ("rotate", "m0")),
                         ("release_lease", "l1"), tally)
    assert tally.by_kind["unlock"] >= 1
    assert tally.descriptors == 0, tally.failures
    assert tally.failures == []


def never_abandons(self: Generations, generation: str, reason: str) -> None:
    """Leaves a generation whose making failed as it is, current and never ready."""


def test_the_enumeration_finds_a_half_made_directory_that_is_never_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Generations, "abandon", never_abandons)
    tally = Tally()
    enumerate_exceptions((("open",), ("retain", "m0")), ("acquire", "m0"), tally)
    assert tally.crash_points >= 3
    assert any("left work owed" in f or "half made" in f for f in tally.failures), tally.failures


@pytest.mark.parametrize("op", [("recover",), ("open",)])
def test_an_operation_with_nothing_to_do_can_still_be_stopped_at_each_step(op: Op) -> None:
    tally = Tally()
    enumerate_operation((("open",), ("retain", "m0"), ("acquire", "m0"), ("crash", "m0")),
                        op, tally)
    assert tally.crash_points >= 1
    assert tally.failures == []


# -- real kills: the torture script's short version ---------------------------------------------

TORTURE = Path(__file__).parent.parent / "tools" / "torture.py"


def run_torture(*options: str, timeout: float) -> dict[str, object]:
    done = subprocess.run([sys.executable, str(TORTURE), *options], capture_output=True,
                          text=True, timeout=timeout, check=False)
    figures: dict[str, object] = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    return figures


def judge_torture(figures: dict[str, object], kills: int) -> None:
    assert figures["kills"] == kills
    assert (figures["leaks"], figures["wrongful_removals"], figures["artifacts_lost"]) == (
        0, 0, 0), figures
    assert figures["journal_problems"] == []
    assert figures["failed_workers"] == 0
    # What the run was for happened: named sessions, artifacts kept and read back,
    # rollovers (history retired past event 1).
    assert figures["sessions_new"] or figures["sessions_resumed"]
    assert figures["artifacts_kept"]
    assert figures["artifacts_read_back"]
    assert isinstance(figures["history_from_event"], int)
    assert figures["history_from_event"] > 1


def test_workers_killed_at_random_leak_nothing_and_lose_no_directory_in_use() -> None:
    figures = run_torture("--processes", "3", "--kills", "15", "--seconds", "40",
                          timeout=120)
    judge_torture(figures, 15)


@pytest.mark.slow
def test_the_long_torture_survives_six_hundred_kills_across_four_processes() -> None:
    figures = run_torture("--processes", "4", "--kills", "600", "--seconds", "3600",
                          timeout=5400)
    judge_torture(figures, 600)
    assert figures["sessions_resumed"]
    assert figures["sessions_started_afresh"]
    assert figures["sessions_removed"]
    assert figures["artifacts_removed"]
