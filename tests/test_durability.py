"""Which appends wait for a sync, counted through the store's synced commits.

The decisions per record kind and the argument for them are in
docs/concepts/durability.md; the power-loss model of the crash-point
enumeration (tests/test_crashpoints.py) proves that what rides on the next
sync may be lost to a power loss without a leak or a wrongful removal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiontemp import Manager
from sessiontemp.journal.testing import synced_commits
from sessiontemp.manager import DURABILITY, Durability


class Syncs:
    """How many synced commits the stores of this process made."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, segment: Path) -> None:
        self.count += 1


@pytest.fixture
def syncs() -> Iterator[Syncs]:
    counted = Syncs()
    with synced_commits(counted):
        yield counted


@pytest.fixture(params=DURABILITY)
def manager(root: Path, request: pytest.FixtureRequest) -> Iterator[Manager]:
    durability: Durability = request.param
    manager = Manager(root, durability=durability)
    manager.retain()
    try:
        yield manager
    finally:
        manager.close()


def test_a_command_under_a_lease_on_a_live_generation_waits_for_no_sync(
    manager: Manager, syncs: Syncs,
) -> None:
    manager.acquire().release()  # the generation is made
    before = syncs.count
    for _ in range(3):
        lease = manager.acquire()
        assert lease.popen(["true"]).wait() == 0
        lease.release()
    assert syncs.count == before


def test_a_new_generation_is_synced_before_its_directory_is_made(
    manager: Manager, syncs: Syncs,
) -> None:
    lease = manager.acquire()
    # The creation, before the mkdir; in full, the directory's identity
    # with the first lease too.
    assert syncs.count == (2 if manager.durability == "full" else 1)
    lease.release()


def test_a_release_that_starts_its_generations_removal_is_synced(
    manager: Manager, syncs: Syncs,
) -> None:
    lease = manager.acquire()
    manager.rotate()
    before = syncs.count
    lease.release()
    assert not lease.path.exists()
    # The removal's start, before the rename, carries the release with it.
    assert syncs.count == before + 1
