"""What the state holds follows what is alive, not how long the history is.

Counted in objects, never timed: a manager's own state, the state a
recovery replays, and a checkpoint of it hold as much after many rotations
and many ended managers as after a few.
"""

from __future__ import annotations

from pathlib import Path

from journal import State, Store, checkpoint, replay
from sessiontemp import Manager, recover


def size(state: State) -> int:
    """How many managers, generations, and ids inside them, *state* holds."""
    return (len(state.managers) + len(state.generations) + len(state.held)
            + sum(len(m.generations) for m in state.managers.values())
            + sum(len(g.leases) + len(g.commands) for g in state.generations.values()))


def rotated(manager: Manager, times: int) -> int:
    """Run *times* cold cycles (rotate, acquire, release) on *manager*; its state's size after."""
    for _ in range(times):
        manager.rotate()
        with manager.acquire():
            pass
    return size(manager.state)


def test_a_managers_state_holds_as_much_after_many_rotations_as_after_a_few(root: Path) -> None:
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire():
            pass
        after_few = rotated(manager, 3)
        after_many = rotated(manager, 60)
        # Itself and its current generation: nothing of the 63 removed ones.
        assert after_many == after_few
        assert set(manager.state.managers) == {manager.id}
        assert len(manager.state.generations) == 1


def journal_state(root: Path) -> State:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return replay(store.records())
    finally:
        store.close()


def ended_managers(root: Path, count: int) -> None:
    """*count* managers that each make, rotate away and remove a few generations, then close."""
    for _ in range(count):
        with Manager(root) as manager:
            manager.retain()
            rotated(manager, 2)
            manager.release()


def test_the_journals_state_and_its_checkpoint_hold_only_the_live_manager_whatever_came_before(
    root: Path,
) -> None:
    with Manager(root) as live:
        live.retain()
        with live.acquire():
            pass
        ended_managers(root, 2)
        few = journal_state(root)
        ended_managers(root, 12)
        many = journal_state(root)
        assert many.seq > few.seq
        assert size(many) == size(few)
        assert set(many.managers) == {live.id}
        store = Store(root / "journal.sqlite3")
        try:
            checkpoint.save(store, many)
            restored = checkpoint.restore(store)
        finally:
            store.close()
        assert restored.state == many
        # A recovery pass from that checkpoint finds nothing to do.
        assert recover(root).removed == ()
