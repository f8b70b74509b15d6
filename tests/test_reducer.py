"""The reducer: the lifecycle rules, as a pure function of the events.

Legal histories come from :class:`tests.strategies.Lifecycle`, a model of
what managers and recovery write; each illegal event is one such history
followed by one event a correct writer never writes.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontemp.journal import EMPTY, Event, Record, RuleViolation, State, apply, replay
from sessiontemp.journal.events import (
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    Reappeared,
    RecoveryStarted,
    Released,
    RemovalFinished,
    RemovalStarted,
    Retained,
    Rotated,
    named_ids,
)
from sessiontemp.journal.reducer import REAPPEARED, Forgotten, GenerationState, removal_due
from tests.strategies import (
    MANAGER_EVENT_CLASSES,
    Lifecycle,
    Snapshot,
    event_fields,
    events_of,
    generation_states,
    legal_records,
    lifecycles,
    live_part,
    scaled,
    snapshot_of,
)
from tests.strategies import (
    records as any_records,
)

# Whole-history properties: every example replays every prefix.
fewer = scaled(0.35)
# One event after a random history: cheaper, and there are many such tests.
few = scaled(0.15)
# A recovery pass's id in canonical form.
RECOVERY = "fedcba9876543210"


def states_after_each(records: Sequence[Record]) -> list[State]:
    """The state before the first record, then after each one, by single steps."""
    return list(itertools.accumulate(records, apply, initial=EMPTY))


def choose(data: st.DataObject, candidates: Sequence[str], make: Callable[[], str]) -> str:
    """One of *candidates*, or, when there is none, what *make* builds legally."""
    if candidates:
        return data.draw(st.sampled_from(sorted(candidates)))
    return make()


def step(lc: Lifecycle, event: Event) -> tuple[State, Record, State]:
    """The state after *lc*, the record *event* would get next, and the state after it."""
    state = replay(lc.records)
    record = lc.next_record(event)
    return state, record, apply(state, record)


def assert_rejected(lc: Lifecycle, event: Event, *, seq: int | None = None) -> RuleViolation:
    """Both apply and replay refuse *event* after *lc*, naming its seq, and change nothing."""
    state = replay(lc.records)
    before = copy.deepcopy(state)
    record = lc.next_record(event)
    if seq is not None:
        record = attrs.evolve(record, seq=seq)
    with pytest.raises(RuleViolation) as excinfo:
        apply(state, record)
    assert excinfo.value.seq == record.seq
    assert str(excinfo.value).startswith(f"event {record.seq} ")
    assert state == before
    with pytest.raises(RuleViolation) as again:
        replay([*lc.records, record])
    assert again.value.seq == record.seq
    return excinfo.value


# -- replay and apply ---------------------------------------------------------------


def model_state(lc: Lifecycle, n: int) -> Snapshot:
    """What the lifecycle model says the state holds after the first *n* records of *lc*."""
    return live_part(lc.snapshots[n - 1]) if n else snapshot_of(EMPTY)


@fewer
@given(lc=lifecycles())
def test_replay_of_every_prefix_of_a_legal_history_is_the_lifecycle_models_state(
    lc: Lifecycle,
) -> None:
    # replay folds in place, one Fold for the whole history; the model is
    # written separately (tests/strategies.py) and shares none of its code.
    for n in range(len(lc.records) + 1):
        assert snapshot_of(replay(lc.records[:n])) == model_state(lc, n), n


def untouched(state: State, event: Event) -> tuple[set[str], set[str]]:
    """The managers and generations of *state* that *event* has no business changing.

    An event may change what it names, the managers of the generations it
    names, and the generations of the managers it names; nothing else.
    """
    named = set(named_ids(event))
    owners = {g.manager for gid in named if (g := state.generations.get(gid)) is not None}
    managers = set(state.managers) - named - owners
    generations = {gid for gid, g in state.generations.items()
                   if gid not in named and g.manager not in named}
    return managers, generations


def applied(state: State, record: Record) -> State | RuleViolation:
    try:
        return apply(state, record)
    except RuleViolation as e:
        return e


@fewer
@given(lc=lifecycles(max_steps=15), tail=any_records(max_size=6))
def test_a_record_legal_or_not_changes_only_what_it_names_and_a_refused_one_nothing(
    lc: Lifecycle, tail: list[Record]
) -> None:
    state = replay(lc.records)
    assert snapshot_of(state) == model_state(lc, len(lc.records))
    for arbitrary in tail:
        record = attrs.evolve(arbitrary, seq=state.seq + 1)
        before = copy.deepcopy(state)
        after = applied(state, record)
        assert state == before
        if isinstance(after, RuleViolation):
            assert after.seq == record.seq
            continue
        assert after.seq == record.seq
        managers, generations = untouched(before, record.event)
        assert {m: after.managers.get(m) for m in managers} == {
            m: before.managers[m] for m in managers}
        assert {g: after.generations.get(g) for g in generations} == {
            g: before.generations[g] for g in generations}
        state = after


@fewer
@given(records=legal_records())
def test_replay_is_deterministic(records: list[Record]) -> None:
    first = replay(records)
    assert replay(iter(copy.deepcopy(records))) == first
    assert replay(records) == first


@fewer
@given(lc=lifecycles(), data=st.data())
def test_replay_resumed_from_an_earlier_state_reaches_the_lifecycle_models_state(
    lc: Lifecycle, data: st.DataObject
) -> None:
    records = lc.records
    k = data.draw(st.integers(0, len(records)), label="split")
    middle = replay(records[:k])
    before = copy.deepcopy(middle)
    assert snapshot_of(replay(records[k:], middle)) == model_state(lc, len(records))
    assert middle == before


@fewer
@given(records=legal_records())
def test_apply_never_changes_the_state_it_is_given(records: list[Record]) -> None:
    state = EMPTY
    for record in records:
        before = copy.deepcopy(state)
        after = apply(state, record)
        assert state == before
        state = after


@fewer
@given(records=legal_records())
def test_the_state_remembers_the_seq_of_the_last_event(records: list[Record]) -> None:
    for record, state in zip(records, states_after_each(records)[1:], strict=True):
        assert state.seq == record.seq
    assert replay([]) == EMPTY


@fewer
@given(lc=lifecycles())
def test_the_reducer_agrees_with_the_lifecycle_model_after_every_event(lc: Lifecycle) -> None:
    states = states_after_each(lc.records)[1:]
    for record, state, expected in zip(lc.records, states, lc.snapshots, strict=True):
        assert snapshot_of(state) == live_part(expected), record


# -- invariants after every prefix of a legal history ----------------------------------


@fewer
@given(records=legal_records())
def test_owners_are_never_negative(records: list[Record]) -> None:
    for state in states_after_each(records):
        for manager in state.managers.values():
            assert manager.owners >= 0


@fewer
@given(records=legal_records())
def test_a_sealed_manager_stays_sealed_and_never_gains_a_generation_or_a_lease(
    records: list[Record],
) -> None:
    for before, after in itertools.pairwise(states_after_each(records)):
        for manager in before.managers.values():
            if not manager.sealed:
                continue
            later = after.managers.get(manager.id)
            if later is None:
                # Ended with nothing left to remove: forgotten.
                continue
            assert later.sealed
            assert later.current is None
            assert later.generations <= manager.generations
            for generation in later.generations:
                assert (after.generations[generation].leases
                        <= before.generations[generation].leases)


@fewer
@given(records=legal_records())
def test_a_generation_being_removed_or_removed_has_no_leases(records: list[Record]) -> None:
    for state in states_after_each(records):
        for generation in state.generations.values():
            if generation.removal is not None:
                assert not generation.leases
                assert generation.retired


@fewer
@given(records=legal_records())
def test_each_manager_has_at_most_one_current_generation_and_it_is_not_retired(
    records: list[Record],
) -> None:
    for state in states_after_each(records):
        for manager in state.managers.values():
            unretired = {
                g.id for g in state.generations.values()
                if g.manager == manager.id and not g.retired
            }
            assert len(unretired) <= 1
            if manager.current is None:
                assert not unretired
                continue
            assert unretired == {manager.current}
            current = state.generations[manager.current]
            assert current.manager == manager.id
            assert current.removal is None
            assert manager.current in manager.generations


@fewer
@given(records=legal_records())
def test_an_ended_manager_is_sealed_and_none_of_its_generations_holds_a_lease(
    records: list[Record],
) -> None:
    for state in states_after_each(records):
        for manager in state.managers.values():
            if manager.ended is None:
                continue
            assert manager.sealed
            assert manager.current is None
            for generation in state.generations.values():
                if generation.manager == manager.id:
                    assert not generation.leases
                    assert generation.retired


@fewer
@given(records=legal_records())
def test_a_manager_lists_exactly_its_generations_not_yet_removed(
    records: list[Record],
) -> None:
    for state in states_after_each(records):
        for manager in state.managers.values():
            assert manager.generations == {
                g.id for g in state.generations.values()
                if g.manager == manager.id and g.removal != "finished"
            }


# -- the owner rules (the Go seed's semantics) ---------------------------------------


@few
@given(lc=lifecycles(), data=st.data())
def test_a_release_on_a_manager_with_no_owner_seals_it(
    lc: Lifecycle, data: st.DataObject
) -> None:
    manager = choose(data, [
        m for m in lc.live_managers()
        if not lc.managers[m].sealed and lc.managers[m].owners == 0
    ], lc.open_manager)
    _, _, after = step(lc, Released(manager))
    assert after.managers[manager].sealed
    assert after.managers[manager].owners == 0


@few
@pytest.mark.parametrize("owner_event", [Retained, Released, Rotated])
@given(lc=lifecycles(), data=st.data())
def test_an_owner_event_on_a_sealed_manager_changes_nothing(
    owner_event: type[Retained | Released | Rotated], lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = lc.open_manager()
        lc.retain(manager)
        lc.acquire(manager)
        lc.release(manager)
        return manager

    manager = choose(data, lc.sealed_live_managers(), make)
    before, record, after = step(lc, owner_event(manager))
    assert after.managers == before.managers
    assert after.generations == before.generations
    assert after.seq == record.seq


@few
@given(lc=lifecycles(), data=st.data())
def test_retain_on_an_unsealed_manager_adds_an_owner(lc: Lifecycle, data: st.DataObject) -> None:
    manager = choose(data, [
        m for m in lc.live_managers() if not lc.managers[m].sealed
    ], lc.open_manager)
    before, _, after = step(lc, Retained(manager))
    assert after.managers[manager].owners == before.managers[manager].owners + 1
    assert after.generations == before.generations


def _leasing_with_current(lc: Lifecycle, owners: int = 1) -> list[str]:
    return [
        m for m in lc.leasing_managers()
        if lc.managers[m].current is not None and lc.managers[m].owners == owners
    ]


def _make_leasing(lc: Lifecycle, owners: int = 1) -> Callable[[], str]:
    def make() -> str:
        manager = lc.open_manager()
        for _ in range(owners):
            lc.retain(manager)
        lc.acquire(manager)
        return manager

    return make


@few
@given(lc=lifecycles(), data=st.data())
def test_rotate_retires_the_current_generation_and_keeps_its_leases(
    lc: Lifecycle, data: st.DataObject
) -> None:
    owners = data.draw(st.integers(1, 3), label="owners")
    manager = choose(data, _leasing_with_current(lc, owners), _make_leasing(lc, owners))
    before, record, after = step(lc, Rotated(manager))
    generation = before.managers[manager].current
    assert generation is not None
    assert after.managers[manager] == attrs.evolve(before.managers[manager], current=None)
    assert after.generations[generation] == attrs.evolve(
        before.generations[generation], retired=True, retired_seq=record.seq
    )
    assert {g: s for g, s in after.generations.items() if g != generation} == {
        g: s for g, s in before.generations.items() if g != generation
    }


@few
@given(lc=lifecycles(), data=st.data())
def test_a_release_that_leaves_an_owner_keeps_the_current_generation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    owners = data.draw(st.integers(2, 4), label="owners")
    manager = choose(data, _leasing_with_current(lc, owners), _make_leasing(lc, owners))
    before, _, after = step(lc, Released(manager))
    assert after.managers[manager] == attrs.evolve(before.managers[manager], owners=owners - 1)
    assert after.generations == before.generations


@few
@given(lc=lifecycles(), data=st.data())
def test_the_last_release_seals_the_manager_and_retires_its_current_generation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    manager = choose(data, _leasing_with_current(lc), _make_leasing(lc))
    before, record, after = step(lc, Released(manager))
    generation = before.managers[manager].current
    assert generation is not None
    assert after.managers[manager] == attrs.evolve(
        before.managers[manager], owners=0, sealed=True, current=None
    )
    retired = after.generations[generation]
    assert retired.retired
    assert retired.retired_seq == record.seq
    # Its leases stay: commands still using it keep it until they release.
    assert retired.leases == before.generations[generation].leases


@few
@pytest.mark.parametrize(
    ("end", "how", "by"),
    [(ManagerClosed, "closed", None), (lambda m: ManagerDied(m, RECOVERY), "dead", RECOVERY)],
    ids=["closed", "dead"],
)
@given(lc=lifecycles(), data=st.data())
def test_an_ending_manager_drops_its_leases_and_retires_all_its_generations(
    end: Callable[[str], Event], how: str, by: str | None, lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = lc.open_manager()
        lc.retain(manager)
        lc.acquire(manager)
        lc.rotate(manager)
        lc.acquire(manager)
        return manager

    manager = choose(data, lc.live_managers(), make)
    before = replay(lc.records)
    record = lc.next_record(end(manager))
    forgotten = Forgotten()
    after = replay([record], before, history=forgotten)
    # Kept while it owns a generation not yet removed; forgotten otherwise.
    assert (manager in after.managers) is bool(before.managers[manager].generations)
    ended = after.managers.get(manager) or forgotten.managers[manager]
    assert ended == attrs.evolve(
        before.managers[manager], sealed=True, current=None, ended=how, ended_seq=record.seq,
        ended_by=by or manager,
    )
    for gid, generation in after.generations.items():
        old = before.generations[gid]
        if gid in before.managers[manager].generations:
            assert generation == attrs.evolve(
                old, retired=True, leases=frozenset(),
                retired_seq=old.retired_seq if old.retired else record.seq,
            )
        else:
            assert generation == old
    assert {m: s for m, s in after.managers.items() if m != manager} == {
        m: s for m, s in before.managers.items() if m != manager
    }


# -- removal ------------------------------------------------------------------------


@given(generation=generation_states())
def test_removal_is_due_exactly_for_retired_lease_free_generations_not_yet_being_removed(
    generation: GenerationState,
) -> None:
    expected = generation.retired and not generation.leases and generation.removal is None
    assert removal_due(generation) is expected


def test_a_rotated_generation_becomes_due_when_its_last_lease_is_released() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.retain(manager)
    generation, first = lc.acquire(manager)
    _, second = lc.acquire(manager)
    assert not removal_due(replay(lc.records).generations[generation])
    lc.rotate(manager)
    assert not removal_due(replay(lc.records).generations[generation])
    lc.release_lease(generation, first)
    assert not removal_due(replay(lc.records).generations[generation])
    lc.release_lease(generation, second)
    assert removal_due(replay(lc.records).generations[generation])
    lc.start_removal(generation, by=manager)
    assert not removal_due(replay(lc.records).generations[generation])
    lc.finish_removal(generation, by=manager)
    state = replay(lc.records)
    assert generation not in state.generations
    assert generation not in state.managers[manager].generations


@few
@given(lc=lifecycles())
def test_removal_due_holds_in_legal_histories_exactly_where_the_model_expects_it(
    lc: Lifecycle,
) -> None:
    state = replay(lc.records)
    due = {gid for gid, g in state.generations.items() if removal_due(g)}
    assert due == set(lc.due_generations())


@few
@given(
    lc=lifecycles(),
    by=st.text(min_size=1, max_size=10),
    reason=st.text(max_size=20),
    finish=st.booleans(),
)
def test_a_removal_of_a_generation_never_created_records_a_stray_without_manager(
    lc: Lifecycle, by: str, reason: str, finish: bool
) -> None:
    stray = lc.new_id("stray")
    before, record, after = step(lc, RemovalStarted(stray, by, reason))
    assert after.managers == before.managers
    generation = after.generations[stray]
    assert generation.manager is None
    assert generation.retired
    assert not generation.ready
    assert generation.removal == "started"
    assert generation.removal_seq == record.seq
    assert generation.created_seq == record.seq
    assert (generation.removal_by, generation.removal_reason) == (by, reason)
    assert not removal_due(generation)
    if finish:
        forgotten = Forgotten()
        done = replay([attrs.evolve(record, seq=record.seq + 1,
                                    event=RemovalFinished(stray, by, "removed"))],
                      after, history=forgotten)
        assert stray not in done.generations
        assert forgotten.generations[stray].removal == "finished"
        assert forgotten.generations[stray].removal_outcome == "removed"
        assert done.managers == before.managers


def test_removing_a_generation_that_never_became_ready_stops_it_being_current() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.retain(manager)
    generation = lc.create_generation(manager)
    before, _, after = step(lc, RemovalStarted(generation, manager, "could not be made"))
    assert before.managers[manager].current == generation
    assert after.managers[manager].current is None
    assert after.generations[generation].retired
    assert after.generations[generation].removal == "started"
    # And the manager may make the next one at once.
    lc.start_removal(generation, by=manager, reason="could not be made")
    lc.finish_removal(generation, by=manager, outcome="absent")
    _, _, later = step(lc, GenerationCreated(manager, "next"))
    assert later.managers[manager].current == "next"


# -- events the rules forbid -------------------------------------------------------------


@few
@given(lc=lifecycles(), data=st.data())
def test_a_lease_from_a_sealed_manager_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = lc.open_manager()
        lc.retain(manager)
        lc.acquire(manager)
        lc.release(manager)
        return manager

    manager = choose(
        data, [m for m in lc.sealed_live_managers() if lc.generations_of(m)], make
    )
    generation = data.draw(st.sampled_from(lc.generations_of(manager)), label="generation")
    assert_rejected(lc, LeaseAcquired(manager, generation, lc.new_id("lease")))


@few
@given(lc=lifecycles(), data=st.data())
def test_a_generation_created_by_a_sealed_manager_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = lc.open_manager()
        lc.release(manager)
        return manager

    manager = choose(data, lc.sealed_live_managers(), make)
    assert_rejected(lc, GenerationCreated(manager, lc.new_id("g")))


def test_a_generation_created_by_a_manager_without_owner_is_a_violation() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    assert_rejected(lc, GenerationCreated(manager, "g"))


@few
@given(lc=lifecycles(), data=st.data())
def test_a_generation_created_while_another_is_current_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    manager = choose(data, [
        m for m in lc.leasing_managers() if lc.managers[m].current is not None
    ], _make_leasing(lc))
    assert_rejected(lc, GenerationCreated(manager, lc.new_id("g")))


@few
@given(lc=lifecycles(), data=st.data())
def test_creating_a_generation_id_a_second_time_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make_manager() -> str:
        manager = lc.open_manager()
        lc.retain(manager)
        return manager

    def make_generation() -> str:
        return lc.remove_stray(by=lc.start_recovery(), finish=False)

    # Only one the state still holds: a removed one is forgotten (see
    # test_a_forgotten_id_is_taken_for_a_new_one).
    generation = choose(data, [
        g.id for g in lc.generations.values() if g.removal != "finished"
    ], make_generation)
    manager = choose(data, [
        m for m in lc.leasing_managers() if lc.managers[m].current is None
    ], make_manager)
    assert_rejected(lc, GenerationCreated(manager, generation))


@few
@given(lc=lifecycles(), data=st.data())
def test_a_lease_on_a_generation_that_is_not_current_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = lc.open_manager()
        lc.retain(manager)
        lc.acquire(manager)
        lc.rotate(manager)
        return manager

    manager = choose(data, [
        m for m in lc.leasing_managers()
        if any(lc.generations[g].retired for g in lc.generations_of(m))
    ], make)
    generation = data.draw(st.sampled_from([
        g for g in lc.generations_of(manager) if lc.generations[g].retired
    ]), label="generation")
    assert_rejected(lc, LeaseAcquired(manager, generation, lc.new_id("lease")))


@few
@given(lc=lifecycles(), data=st.data())
def test_granting_a_held_lease_a_second_time_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> tuple[str, str]:
        return lc.acquire(_make_leasing(lc)())

    current = [
        (g, lease) for g, lease in lc.held_leases()
        if (m := lc.generations[g].manager) is not None
        and m in lc.leasing_managers() and lc.managers[m].current == g
    ]
    generation, lease = data.draw(st.sampled_from(current)) if current else make()
    manager = lc.generations[generation].manager
    assert manager is not None
    assert_rejected(lc, LeaseAcquired(manager, generation, lease))


@few
@given(lc=lifecycles(), data=st.data(), released_before=st.booleans())
def test_releasing_a_lease_that_is_not_held_is_a_violation(
    lc: Lifecycle, data: st.DataObject, released_before: bool
) -> None:
    def make() -> str:
        manager = _make_leasing(lc)()
        lc.rotate(manager)
        return manager

    manager = choose(data, [m for m in lc.live_managers() if lc.generations_of(m)], make)
    generation = data.draw(st.sampled_from(lc.generations_of(manager)), label="generation")
    if released_before:
        if lc.managers[manager].sealed or lc.managers[manager].owners == 0:
            manager = _make_leasing(lc)()
        generation, lease = lc.acquire(manager)
        lc.release_lease(generation, lease)
    else:
        lease = lc.new_id("lease")
    assert_rejected(lc, LeaseReleased(manager, generation, lease))


@few
@given(lc=lifecycles(), data=st.data())
def test_a_second_removal_of_a_generation_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        return lc.remove_stray(by=lc.start_recovery(), finish=False)

    generation = choose(data, [
        g.id for g in lc.generations.values() if g.removal == "started"
    ], make)
    assert_rejected(lc, RemovalStarted(generation, "someone", "again"))


@few
@given(lc=lifecycles(), data=st.data())
def test_removing_a_leased_generation_is_a_violation(lc: Lifecycle, data: st.DataObject) -> None:
    def make() -> str:
        return lc.acquire(_make_leasing(lc)())[0]

    generation = choose(data, sorted({g for g, _ in lc.held_leases()}), make)
    assert_rejected(lc, RemovalStarted(generation, "someone", "too early"))


@few
@given(lc=lifecycles(), data=st.data())
def test_removing_the_ready_current_generation_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    manager = choose(data, [
        m for m in lc.live_managers() if lc.managers[m].current is not None
    ], _make_leasing(lc))
    generation = lc.managers[manager].current
    assert generation is not None
    for generation_, lease in lc.held_leases():
        if generation_ == generation:
            lc.release_lease(generation, lease)
    assert_rejected(lc, RemovalStarted(generation, manager, "while current"))


@few
@given(lc=lifecycles(), data=st.data())
def test_finishing_a_removal_that_was_not_started_is_a_violation(
    lc: Lifecycle, data: st.DataObject
) -> None:
    not_started = [g.id for g in lc.generations.values() if g.removal != "started"]
    generation = data.draw(st.sampled_from([*not_started, lc.new_id("unknown")]))
    assert_rejected(lc, RemovalFinished(generation, "someone", "removed"))


def _naming(cls: type[Event], manager: str, lc: Lifecycle, data: st.DataObject) -> Event:
    """An event of kind *cls* about *manager*, naming one of its generations when it has any."""
    event = data.draw(events_of(cls), label="event")
    changes: dict[str, Any] = {"manager": manager}
    generations = lc.generations_of(manager)
    if "generation" in event_fields(cls) and generations:
        changes["generation"] = data.draw(st.sampled_from(generations), label="generation")
    return attrs.evolve(event, **changes)


_ACTING = [cls for cls in MANAGER_EVENT_CLASSES if cls is not ManagerOpened]


@few
@pytest.mark.parametrize("cls", _ACTING, ids=lambda cls: cls.kind)
@given(lc=lifecycles(), data=st.data())
def test_an_event_naming_a_manager_never_opened_is_a_violation(
    cls: type[Event], lc: Lifecycle, data: st.DataObject
) -> None:
    assert_rejected(lc, _naming(cls, lc.new_id("unknown"), lc, data))


@few
@pytest.mark.parametrize("cls", _ACTING, ids=lambda cls: cls.kind)
@given(lc=lifecycles(), data=st.data())
def test_an_event_naming_an_ended_manager_is_a_violation(
    cls: type[Event], lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = _make_leasing(lc)()
        if data.draw(st.booleans(), label="dies"):
            lc.die(manager, lc.start_recovery())
        else:
            lc.close(manager)
        return manager

    manager = choose(data, lc.ended_managers(), make)
    assert_rejected(lc, _naming(cls, manager, lc, data))


@few
@given(lc=lifecycles(), data=st.data(), pid=st.integers(1, 2**22))
def test_opening_a_manager_a_second_time_is_a_violation(
    lc: Lifecycle, data: st.DataObject, pid: int
) -> None:
    manager = choose(data, list(live_part(lc.snapshots[-1]).managers) if lc.records else [],
                     lc.open_manager)
    assert_rejected(lc, ManagerOpened(manager, pid))


@few
@given(lc=lifecycles(), data=st.data())
def test_the_reducer_folds_increasing_seqs_with_gaps_as_a_manager_folds_its_own_events(
    lc: Lifecycle, data: st.DataObject
) -> None:
    # A manager applies only the records it appended, which other writers
    # interleave; that the journal as a whole has no gap is checked by
    # Store.records (see test_store).  The fold must not depend on the gaps.
    gaps = data.draw(st.lists(st.integers(0, 5), min_size=len(lc.records),
                              max_size=len(lc.records)), label="gaps")
    seqs = list(itertools.accumulate(g + 1 for g in gaps))
    spread = [attrs.evolve(r, seq=seq) for r, seq in zip(lc.records, seqs, strict=True)]
    expected = replay(lc.records)
    state = replay(spread)
    assert (state.seq, snapshot_of(state)) == (seqs[-1] if seqs else 0, snapshot_of(expected))
    assert state == functools.reduce(apply, spread, EMPTY)


@few
@given(lc=lifecycles(), data=st.data())
def test_a_repeated_or_earlier_seq_is_a_violation(lc: Lifecycle, data: st.DataObject) -> None:
    if not lc.records:
        lc.open_manager()
    seq = data.draw(st.integers(-3, len(lc.records)), label="seq")
    assert_rejected(lc, RecoveryStarted("r", 1), seq=seq)


def test_an_event_after_a_violation_is_never_reached_by_replay() -> None:
    # The fold stops at the first bad record, whatever follows it.
    lc = Lifecycle()
    manager = lc.open_manager()
    bad = lc.next_record(Retained("nobody"))
    good = attrs.evolve(bad, seq=bad.seq + 1, event=Retained(manager))
    with pytest.raises(RuleViolation) as excinfo:
        replay([*lc.records, bad, good])
    assert excinfo.value.seq == bad.seq


def test_a_ready_event_for_another_managers_generation_is_a_violation() -> None:
    lc = Lifecycle()
    first, second = lc.open_manager(), lc.open_manager()
    lc.retain(first)
    lc.retain(second)
    generation = lc.create_generation(first)
    assert_rejected(lc, GenerationReady(second, generation, 1, 2))


# -- what the state forgets ------------------------------------------------------------


@fewer
@given(lc=lifecycles())
def test_a_history_puts_back_exactly_what_the_state_forgot(lc: Lifecycle) -> None:
    # The model never forgets: the state and what its fold let go of are,
    # together, the model's whole history.
    forgotten = Forgotten()
    state = replay(lc.records, history=forgotten)
    assert snapshot_of(forgotten.whole(state)) == (
        lc.snapshots[-1] if lc.records else snapshot_of(EMPTY))
    assert not forgotten.managers.keys() & state.managers.keys()
    assert not forgotten.generations.keys() & state.generations.keys()


@fewer
@given(lc=lifecycles(), cut=st.integers(0, 200))
def test_a_fold_resumed_from_a_forgetting_state_forgets_the_same(lc: Lifecycle, cut: int) -> None:
    k = min(cut, len(lc.records))
    first, second, whole = Forgotten(), Forgotten(), Forgotten()
    end = replay(lc.records[k:], replay(lc.records[:k], history=first), history=second)
    assert end == replay(lc.records, history=whole)
    assert {**first.managers, **second.managers} == whole.managers
    assert {**first.generations, **second.generations} == whole.generations


def test_a_removed_generation_and_its_ended_manager_are_forgotten() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.retain(manager)
    generation, _lease = lc.acquire(manager)
    lc.close(manager)
    state = replay(lc.records)
    # Ended, but its generation still owes a removal: both stay.
    assert state.managers[manager].ended == "closed"
    assert state.generations[generation].retired
    recovery = lc.start_recovery()
    lc.start_removal(generation, by=recovery)
    assert replay(lc.records).managers[manager].generations == {generation}
    lc.finish_removal(generation, by=recovery)
    forgotten = Forgotten()
    state = replay(lc.records, history=forgotten)
    assert (state.managers, state.generations) == ({}, {})
    assert forgotten.managers[manager].ended_by == manager
    assert forgotten.generations[generation].removal_outcome == "removed"
    assert forgotten.generations[generation].retired_seq is not None


def test_a_manager_that_ends_with_nothing_left_is_forgotten_at_once() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.retain(manager)
    recovery = lc.start_recovery()
    lc.die(manager, recovery)
    forgotten = Forgotten()
    state = replay(lc.records, history=forgotten)
    assert manager not in state.managers
    assert forgotten.managers[manager].ended == "dead"
    assert forgotten.managers[manager].ended_by == recovery


@few
@given(lc=lifecycles(), data=st.data())
def test_an_event_naming_a_removed_generation_is_refused_as_one_that_does_not_exist(
    lc: Lifecycle, data: st.DataObject
) -> None:
    def make() -> str:
        manager = lc.open_manager()
        lc.retain(manager)
        return lc.abandon_generation(manager)

    generation = choose(data, [
        g.id for g in lc.generations.values() if g.removal == "finished"
    ], make)
    error = assert_rejected(lc, RemovalFinished(generation, RECOVERY, "removed"))
    assert f"names generation {generation}, which does not exist" in str(error)


def test_an_event_naming_a_forgotten_manager_is_refused_as_one_not_open() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.close(manager)
    error = assert_rejected(lc, Retained(manager))
    assert f"names manager {manager}, which is not open" in str(error)


def test_a_forgotten_id_is_taken_for_a_new_one() -> None:
    # What the state can no longer tell: ids are random, so only a forged
    # journal reuses one (see the reducer's docstring).
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.retain(manager)
    generation = lc.abandon_generation(manager)
    lc.close(manager)
    state = replay(lc.records)
    again = lc.next_record(ManagerOpened(manager, 9))
    assert apply(state, again).managers[manager].pid == 9
    stray = apply(state, lc.next_record(RemovalStarted(generation, RECOVERY, "on disk")))
    assert stray.generations[generation].manager is None


def test_a_reappeared_generation_comes_back_as_a_removal_without_its_manager() -> None:
    lc = Lifecycle()
    manager = lc.open_manager()
    lc.retain(manager)
    generation, lease = lc.acquire(manager)
    lc.rotate(manager)
    lc.release_lease(generation, lease)
    lc.start_removal(generation, by=manager)
    lc.finish_removal(generation, by=manager)
    forgotten = Forgotten()
    before = replay(lc.records, history=forgotten)
    past = forgotten.generations[generation]
    record = lc.next_record(Reappeared(generation, RECOVERY))
    after = replay([record], before, history=forgotten)
    back = after.generations[generation]
    assert (back.manager, back.removal, back.removal_seq, back.removal_by) == (
        None, "started", record.seq, RECOVERY)
    assert back.removal_reason == REAPPEARED
    # A reader with the history sees one story: its past, with the new removal.
    assert forgotten.whole(after).generations[generation] == attrs.evolve(
        past, removal="started", removal_seq=record.seq, removal_by=RECOVERY,
        removal_reason=REAPPEARED, removal_outcome=None)
    # Again on disk while the state holds it: its removal has not finished.
    error = assert_rejected_after([*lc.records, record], Reappeared(generation, RECOVERY))
    assert "never journaled as removed" in str(error)


def assert_rejected_after(records: list[Record], event: Event) -> RuleViolation:
    state = replay(records)
    with pytest.raises(RuleViolation) as excinfo:
        apply(state, Record(records[-1].seq + 1, records[-1].time + 1, event))
    return excinfo.value
