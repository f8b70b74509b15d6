"""The real managers agree with the reference model, step by step, across crashes.

A hypothesis state machine opens up to three managers on one root in this
process and drives them at random: retain, release, rotate, acquire, lease
release, write a file through a lease, close, crash (see
:func:`tests.model.simulate_kill`), open a new manager (whose open runs
recovery), a standalone recovery, and a checkpoint of the journal, from
which every later recovery starts.  After every step :meth:`World.check`
holds: the directories on disk are exactly the model's live generations, the
journal replayed from scratch is the model and equals the replay from the
newest checkpoint, each live generation holds
exactly its files, nothing outside the root changed, sealed managers refuse
to lease.

The budget: 1,000 examples of up to 15 steps in the ``ci`` profile (the
default), 100 in ``dev``, 10,000 in ``long`` (HYPOTHESIS_PROFILE).  A planted
bug, a manager that removes a retired generation while one lease is left,
must make the same machine fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sessiontemp import Manager
from sessiontemp.root import generation_name
from tests.model import SCRATCH, World

EXAMPLES = {"ci": 1000, "dev": 100, "long": 10_000}
MAX_MANAGERS = 3


def machine_settings(examples: int | None = None) -> settings:
    profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    return settings(
        max_examples=examples or EXAMPLES.get(profile, EXAMPLES["ci"]),
        stateful_step_count=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


picks = st.integers(min_value=0, max_value=7)


class SessionMachine(RuleBasedStateMachine):
    """Managers on one root beside the reference model; every invariant after every step."""

    manager_class: ClassVar[type[Manager]] = Manager

    def __init__(self) -> None:
        super().__init__()
        self.world = World(Path(tempfile.mkdtemp(prefix="sessiontemp-machine-", dir=SCRATCH)) / "w",
                           manager_class=self.manager_class)

    def manager(self, i: int) -> str:
        live = self.world.live()
        return live[i % len(live)]

    def lease(self, i: int) -> str:
        held = self.world.held()
        return held[i % len(held)]

    def has_manager(self) -> bool:
        return bool(self.world.live())

    def has_lease(self) -> bool:
        return bool(self.world.leases)

    @initialize()
    def open_first_manager(self) -> None:
        self.world.open()

    @precondition(lambda self: len(self.world.live()) < MAX_MANAGERS)
    @rule()
    def open_manager(self) -> None:
        self.world.open()

    @precondition(has_manager)
    @rule(i=picks)
    def retain(self, i: int) -> None:
        self.world.retain(self.manager(i))

    @precondition(has_manager)
    @rule(i=picks)
    def release(self, i: int) -> None:
        self.world.release(self.manager(i))

    @precondition(has_manager)
    @rule(i=picks)
    def rotate(self, i: int) -> None:
        self.world.rotate(self.manager(i))

    @precondition(has_manager)
    @rule(i=picks)
    def acquire(self, i: int) -> None:
        self.world.acquire(self.manager(i))

    @precondition(has_lease)
    @rule(i=picks)
    def release_lease(self, i: int) -> None:
        self.world.release_lease(self.lease(i))

    @precondition(has_lease)
    @rule(i=picks, file=st.sampled_from(["a.txt", "b.txt", "c.txt"]))
    def write(self, i: int, file: str) -> None:
        self.world.write(self.lease(i), file)

    @precondition(has_manager)
    @rule(i=picks)
    def close(self, i: int) -> None:
        self.world.close(self.manager(i))

    @precondition(has_manager)
    @rule(i=picks)
    def crash(self, i: int) -> None:
        self.world.crash(self.manager(i))

    @rule()
    def recover(self) -> None:
        self.world.recover()

    @rule()
    def checkpoint(self) -> None:
        self.world.checkpoint()

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.world.check()

    def teardown(self) -> None:
        self.world.shutdown()
        shutil.rmtree(self.world.base.parent, ignore_errors=True)


TestManagersAgreeWithTheReferenceModelAcrossCrashes = SessionMachine.TestCase
TestManagersAgreeWithTheReferenceModelAcrossCrashes.settings = machine_settings()


# -- a planted bug: the machine must catch it ---------------------------------------------


class RemovesOneLeaseTooEarly(Manager):
    """Removes a retired generation while one lease is still left: off by one."""

    def _settle(self) -> None:
        super()._settle()
        for generation in self.state.generations.values():
            if (generation.manager == self.id and generation.retired
                    and len(generation.leases) == 1 and generation.removal is None):
                shutil.rmtree(self.root / generation_name(generation.id), ignore_errors=True)


class MachineWithTheEarlyRemoval(SessionMachine):
    manager_class = RemovesOneLeaseTooEarly


def test_the_machine_finds_a_generation_removed_one_lease_too_early() -> None:
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            MachineWithTheEarlyRemoval,
            # Finding it is the point; shrinking it would only cost time.
            settings=settings(machine_settings(1000), database=None, print_blob=False,
                              phases=[Phase.generate]),
        )
