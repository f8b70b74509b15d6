"""What the state holds follows what is alive, not how long the history is.

Counted in objects, never timed: a manager's own state, the state a
recovery replays, and a checkpoint of it hold as much after many rotations
and many ended managers as after a few.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest

from sessiontemp import Manager, recover
from sessiontemp._kernel.root import GENERATION_PREFIX
from sessiontemp.journal import JournalVersionError, State, Store, checkpoint, replay, testing


def size(state: State) -> int:
    """How many managers, generations, and ids inside them, *state* holds."""
    return (len(state.managers) + len(state.generations) + len(state.held)
            + sum(len(m.generations) for m in state.managers.values())
            + sum(len(g.leases) + len(g.commands) for g in state.generations.values()))


def closed_after_rotations(root: Path) -> tuple[Path, str]:
    """The journal of a manager on *root* that rotated 3 times and closed, and its id."""
    with Manager(root) as manager:
        manager.retain()
        rotated(manager, 3)
    return root / "journal.sqlite3", manager.id


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


def interned_while(work: Callable[[], None]) -> list[str]:
    """Every string ``sys.intern`` was called on from Python code while *work* ran.

    *work* runs in a thread of its own, profiled from its first line (a
    manager's operations run inline on a thread other than the main one).
    """
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "c_call" and arg is sys.intern:
            # The caller's frame names what it interns (pathlib: ``rel``).
            seen.extend(v for v in frame.f_locals.values() if isinstance(v, str))

    def run() -> None:
        sys.setprofile(profile)
        try:
            work()
        finally:
            sys.setprofile(None)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen


def test_rotating_and_leasing_interns_no_generation_name(root: Path) -> None:
    """pathlib interns each component it parses: the interned table would grow per generation."""
    with Manager(root) as manager:
        manager.retain()

        def cycles() -> None:
            for _ in range(3):
                manager.rotate()
                with manager.acquire() as lease:
                    lease.env()

        interned = interned_while(cycles)
        assert not [name for name in interned if GENERATION_PREFIX in name]
        # Read, the lease's path is a Path like any other (and is interned then).
        with manager.acquire() as lease:
            assert lease.path == Path(lease.env()["TMPDIR"])
            assert lease.path.parent.parent == root


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


def indexes(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'"
                                           " AND name LIKE 'events_by_%'")}
    finally:
        conn.close()


def test_a_journal_without_the_read_indexes_is_refused_with_the_fix_and_left_as_it_is(
    root: Path,
) -> None:
    path, _manager_id = closed_after_rotations(root)
    assert indexes(path) == {"events_by_generation", "events_by_manager"}
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX events_by_generation")
    conn.execute("DROP INDEX events_by_manager")
    conn.close()
    for readonly in (True, False):
        with pytest.raises(JournalVersionError) as excinfo:
            Store(path, readonly=readonly)
        assert excinfo.value.path == str(path)
        assert "events_by_manager" in excinfo.value.reason
        assert "aside" in excinfo.value.fix
    assert indexes(path) == set()


def index_sql(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"
                                 " AND name LIKE 'events_by_%'").fetchall())
    finally:
        conn.close()


def plans_of_reads(store: Store, read: Callable[[], object]) -> list[str]:
    """SQLite's query plan of every SELECT on the events that *read* runs through *store*."""
    statements: list[str] = []
    conn = testing.connection(store)
    conn.set_trace_callback(statements.append)
    try:
        read()
    finally:
        conn.set_trace_callback(None)
    plans: list[str] = []
    for sql in statements:
        if sql.startswith("SELECT seq, time, kind, payload FROM events"):
            plans.extend(str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql)
                         if "events" in str(row[3]))
    return plans


def indexed_reads(store: Store, manager: str) -> tuple[list[object], dict[str, int]]:
    """What the reads through the two indexes answer, checking that each uses its index."""
    generations = {json.loads(payload)["generation"] for _, _, _, payload
                   in store.rows_where(kinds=["generation.created"])}
    plans = plans_of_reads(store, lambda: list(store.generation_rows(generations)))
    assert plans
    assert all("USING INDEX events_by_generation" in p for p in plans)
    plans = plans_of_reads(store, lambda: store.manager_ends([manager]))
    assert plans
    assert all("USING INDEX events_by_manager" in p for p in plans)
    return list(store.generation_rows(generations)), store.manager_ends([manager])


def test_an_append_evaluates_the_read_indexes_condition_without_a_temporary_table(
    root: Path,
) -> None:
    # A `kind IN (...)` condition of more than two values makes SQLite
    # build a temporary table on every INSERT: a third of what it costs.
    with Manager(root) as manager:
        manager.retain()
    conn = sqlite3.connect(root / "journal.sqlite3")
    try:
        program = conn.execute(
            "EXPLAIN INSERT INTO events (seq, time, kind, payload, digest) VALUES (?, ?, ?, ?, ?)",
            (10**9, 1.0, "lease.acquired", "{}", b"")).fetchall()
    finally:
        conn.close()
    opcodes = {row[1] for row in program}
    assert "IdxInsert" in opcodes  # the indexes are there and updated
    assert "OpenEphemeral" not in opcodes


def test_indexes_of_an_older_condition_are_refused_with_the_fix_and_left_as_they_are(
    root: Path,
) -> None:
    path, manager_id = closed_after_rotations(root)
    current = index_sql(path)
    store = Store(path, readonly=True)
    try:
        indexed_reads(store, manager_id)
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        for name, sql in current.items():
            # What journals of development versions had: the same index, with `kind IN`.
            kinds = re.findall(r"kind = '([a-z.]+)'", sql)
            in_form = sql[:sql.index(" WHERE ")] + " WHERE kind IN ({})".format(
                ", ".join(f"'{k}'" for k in kinds))
            conn.execute(f"DROP INDEX {name}")
            conn.execute(in_form)
    finally:
        conn.close()
    older = index_sql(path)
    assert all(" IN (" in sql for sql in older.values())
    for readonly in (True, False):
        with pytest.raises(JournalVersionError) as excinfo:
            Store(path, readonly=readonly)
        assert "events_by_generation" in excinfo.value.reason
        assert index_sql(path) == older
