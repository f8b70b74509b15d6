"""The library behind journal-inspect: fast paths agree with a full replay; reading is read-only."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontemp import Manager, inspect
from sessiontemp._kernel.root import WORK_DIR
from sessiontemp.journal import checkpoint, rules
from sessiontemp.journal.events import Record
from sessiontemp.journal.reducer import Forgotten, GenerationState, ManagerState, State, replay
from sessiontemp.journal.store import Store
from tests.strategies import ids, legal_records, scaled, times

_SETTINGS = scaled(0.25)


def write_journal(path: Path, records: list[Record]) -> None:
    store = Store(path)
    try:
        for record in records:
            store.append([record.event], time=record.time)
    finally:
        store.close()


def whole(records: Iterable[Record]) -> State:
    """Every manager and generation *records* name, finished ones included."""
    forgotten = Forgotten()
    return forgotten.whole(replay(records, history=forgotten))


def replayed(path: Path) -> State:
    store = Store(path, readonly=True)
    try:
        return whole(store.records())
    finally:
        store.close()


def counts_by_full_replay(state: State) -> tuple[dict[str, int], dict[str, int | None]]:
    """What summary reports, computed the slow and obvious way."""
    managers = state.managers.values()
    running = [m for m in managers if m.ended is None]
    generations = state.generations.values()
    return {
        "opened": len(managers),
        "closed": sum(m.ended == "closed" for m in managers),
        "dead": sum(m.ended == "dead" for m in managers),
        "running": len(running),
        "live": 0, "gone": 0, "unknown": len(running),
        "sealed": sum(m.sealed for m in running),
        "owners": sum(m.owners for m in running),
        # Nothing of these journals was retired: the kept history is all of it.
        "before_history": 0,
    }, {
        "total": len(generations),
        "live": sum(not g.retired and g.removal is None for g in generations),
        "retired": sum(g.retired and g.removal is None for g in generations),
        "removal_pending": sum(g.removal == "started" for g in generations),
        "removed": sum(g.removal == "finished" for g in generations),
        "leases_held": sum(len(g.leases) for g in generations if g.removal is None),
        # Without a root the directories' locks cannot be probed.
        "held_by_commands": None,
        "before_history": 0,
    }


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("journals")


counter = iter(range(10**9))


@_SETTINGS
@given(records=legal_records(max_steps=30))
def test_summary_without_a_full_replay_counts_what_a_full_replay_finds(
    scratch: Path, records: list[Record],
) -> None:
    path = scratch / f"j{next(counter)}.sqlite3"
    write_journal(path, records)
    summary = inspect.summary(path)
    managers, generations = counts_by_full_replay(replayed(path))
    assert (dict(summary.managers), dict(summary.generations)) == (managers, generations)
    assert summary.verify.ok
    assert summary.events == len(records)


@_SETTINGS
@given(records=legal_records(max_steps=30), data=st.data())
def test_a_legal_history_verifies_clean_and_its_state_at_any_point_is_the_replay(
    scratch: Path, records: list[Record], data: st.DataObject,
) -> None:
    # Whatever checkpoints the journal holds (recovery writes them at any
    # point), the live state starts from the newest at or before the point
    # asked for and the whole one from event 1: both equal a replay.
    path = scratch / f"j{next(counter)}.sqlite3"
    write_journal(path, records)
    marks = data.draw(st.sets(st.integers(1, len(records)), max_size=3),
                      label="checkpoints") if records else set()
    store = Store(path)
    try:
        for seq in sorted(marks):
            checkpoint.save(store, replay(records[:seq]), keep=10)
    finally:
        store.close()
    assert inspect.verify(path).problems == ()
    assert inspect.state_at(path).state == whole(records)
    assert inspect.state_at(path, live=True).state == replay(records)
    points = data.draw(st.lists(st.integers(0, len(records)), max_size=3), label="points")
    for seq in points:
        assert inspect.state_at(path, seq).state == whole(records[:seq])
        assert inspect.state_at(path, seq, live=True).state == replay(records[:seq])


def test_rows_are_the_same_however_they_are_batched_and_bounded(tmp_path: Path) -> None:
    with Manager(tmp_path / "root") as manager:
        for _ in range(5):
            manager.retain()
        store = Store(tmp_path / "root" / "journal.sqlite3", readonly=True)
        try:
            rows = list(store.rows())
            assert list(store.rows(batch=2)) == rows
            assert list(store.rows(after=2, until=4, batch=1)) == rows[2:4]
        finally:
            store.close()


def test_an_immutable_open_reads_the_same_records(tmp_path: Path) -> None:
    with Manager(tmp_path / "root") as manager:
        manager.retain()
    path = tmp_path / "root" / "journal.sqlite3"
    plain, immutable = Store(path, readonly=True), Store(path, immutable=True)
    try:
        assert immutable.readonly
        assert immutable.immutable
        assert list(immutable.records()) == list(plain.records())
    finally:
        plain.close()
        immutable.close()


def test_a_read_only_open_that_sqlite_refuses_falls_back_to_immutable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Manager(tmp_path / "root") as manager:
        manager.retain()
    real_connect = sqlite3.connect

    class Refusing:
        def execute(self, *_: Any) -> Any:
            raise sqlite3.OperationalError("unable to open database file")

        def close(self) -> None:
            pass

    def connect(database: str, *args: Any, **kwargs: Any) -> Any:
        if "immutable=1" in database:
            return real_connect(database, *args, **kwargs)
        return Refusing()

    monkeypatch.setattr("sqlite3.connect", connect)
    store = Store(tmp_path / "root" / "journal.sqlite3", readonly=True)
    try:
        assert store.immutable
        assert store.last_seq() > 0
    finally:
        store.close()


def test_probing_liveness_creates_nothing_and_holds_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Manager(root) as manager:
        assert inspect.probe_liveness(root, manager.id) == "live"
        assert inspect.probe_liveness(root, "nobody") == "unknown"
        assert not (root / "managers" / "nobody.lock").exists()
        lock = root / "managers" / f"{manager.id}.lock"
    # Closed: its lock file is gone or free, and a probe leaves it free.
    assert inspect.probe_liveness(root, manager.id) in ("gone", "unknown")
    if lock.exists():
        assert inspect.probe_liveness(root, manager.id) == "gone"


@pytest.mark.parametrize(("text", "moment"), [
    ("0", 0), ("1200", 1200), ("1700000000.5", 1700000000.5),
    ("2026-11-30T10:00:00+00:00", 1796032800.0),
])
def test_a_moment_is_a_sequence_number_or_a_time(text: str, moment: float) -> None:
    assert inspect.parse_moment(text) == moment


def test_a_moment_that_is_neither_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="yesterday"):
        inspect.parse_moment("yesterday")


def test_a_generation_is_named_by_its_path_its_work_directory_its_trash_name_or_its_id() -> None:
    gid = "abcdefghijk23456"
    assert inspect.generation_of(f"/r/sessiontemp-gen-{gid}/") == gid
    # A command's TMPDIR (a lease's path): the generation's work directory.
    assert inspect.generation_of(f"/r/sessiontemp-gen-{gid}/{WORK_DIR}") == gid
    assert inspect.generation_of(f"/r/sessiontemp-trash-{gid}/{WORK_DIR}/") == gid
    assert inspect.generation_of(f"sessiontemp-trash-{gid}") == gid
    assert inspect.generation_of(gid) == gid


# -- the reducer's fast paths are attrs.evolve, only faster -------------------------------


def full_generation_states() -> st.SearchStrategy[GenerationState]:
    """Generation states with every field drawn, so a field out of place shows."""
    maybe_int = st.none() | st.integers(0, 10**6)
    maybe_text = st.none() | ids()
    return st.builds(
        GenerationState, id=ids(), manager=maybe_text, created_seq=st.integers(1, 10**6),
        created_at=times(), ready=st.booleans(), device=maybe_int, inode=maybe_int,
        leases=st.frozensets(ids(), max_size=3), retired=st.booleans(),
        retired_seq=maybe_int, removal=maybe_text, removal_seq=maybe_int,
        removal_by=maybe_text, removal_reason=maybe_text, removal_outcome=maybe_text,
        measured_bytes=maybe_int, measured_inodes=maybe_int, measured_at=st.none() | times(),
        peak_bytes=st.integers(0, 10**6), peak_inodes=st.integers(0, 10**6),
    )


def manager_states() -> st.SearchStrategy[ManagerState]:
    return st.builds(
        ManagerState, id=ids(), pid=st.integers(1, 10**6), opened_seq=st.integers(1, 10**6),
        opened_at=times(), owners=st.integers(0, 5), sealed=st.booleans(),
        current=st.none() | ids(), generations=st.frozensets(ids(), max_size=3),
        ended=st.none() | st.sampled_from(["closed", "dead"]),
        ended_seq=st.none() | st.integers(1, 10**6),
    )


@_SETTINGS
@given(generation=full_generation_states(), leases=st.frozensets(ids(), max_size=3))
def test_replacing_a_generations_leases_directly_is_attrs_evolve(
    generation: GenerationState, leases: frozenset[str],
) -> None:
    assert rules._with_leases(generation, leases) == attrs.evolve(generation, leases=leases)


@_SETTINGS
@given(manager=manager_states(), owners=st.integers(0, 5))
def test_replacing_a_managers_owners_directly_is_attrs_evolve(
    manager: ManagerState, owners: int,
) -> None:
    assert rules._with_owners(manager, owners) == attrs.evolve(manager, owners=owners)


def test_the_fast_paths_name_every_field_of_the_states() -> None:
    # The direct constructors pass every field by position, in this order.
    assert [a.name for a in attrs.fields(GenerationState)] == [
        "id", "manager", "created_seq", "created_at", "ready", "device", "inode", "leases",
        "retired", "retired_seq", "removal", "removal_seq", "removal_by", "removal_reason",
        "removal_outcome", "commands", "measured_bytes", "measured_inodes", "measured_at",
        "peak_bytes", "peak_inodes",
    ]
    assert [a.name for a in attrs.fields(ManagerState)] == [
        "id", "pid", "opened_seq", "opened_at", "owners", "sealed", "current", "generations",
        "ended", "ended_seq", "ended_by",
    ]
