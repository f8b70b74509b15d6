"""The lifecycle's rules: how each event changes the fold, and what it refuses.

One rule per event type, registered in :data:`RULES` and dispatched on the
event's type by :meth:`sessiontemp.journal.reducer.Fold.step`.  A rule raises
:class:`~sessiontemp.journal.errors.RuleViolation` before changing anything but the
fold's ``seq``; otherwise it updates the fold's working maps in place, with
new frozen values.  Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

import attrs

from .errors import RuleViolation, UnknownKind
from .events import (
    KINDS,
    ArtifactKept,
    ArtifactRemoved,
    CommandStarted,
    GenerationCreated,
    GenerationMeasured,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    Reappeared,
    Record,
    RecoveryStarted,
    Released,
    RemovalFinished,
    RemovalStarted,
    Retained,
    Rotated,
    SessionAdopted,
    SessionClaimed,
    SessionDiscarded,
    SpaceRefused,
    Unreadable,
)
from .state import (
    REAPPEARED,
    ArtifactState,
    GenerationState,
    ManagerState,
    SessionState,
    command_key,
)


class Fold(Protocol):
    """What a rule works on: the working maps of a fold in progress, and its lookups.

    :class:`sessiontemp.journal.reducer.Fold` is the one implementation; named here so
    that the rules, below the reducer, never import it.
    """

    managers: dict[str, ManagerState]
    generations: dict[str, GenerationState]
    sessions: dict[str, SessionState]
    artifacts: dict[str, ArtifactState]
    owned: dict[str, str]

    def live_manager(self, seq: int, manager_id: str) -> ManagerState: ...

    def generation(self, seq: int, generation_id: str) -> GenerationState: ...

    def owned_generation(self, seq: int, manager_id: str,
                         generation_id: str) -> GenerationState: ...

    def finish(self, generation: GenerationState) -> None: ...

    def forget_if_done(self, manager: ManagerState) -> None: ...

    def retire_generations(self, seq: int, manager: ManagerState, *,
                           drop_leases: bool) -> ManagerState: ...

__all__ = ["RULES"]


# How _with_leases builds a frozen instance from a copy of another's fields.
_new: Final = object.__new__
_set: Final = object.__setattr__


def _with_leases(g: GenerationState, leases: frozenset[str]) -> GenerationState:
    """*g* with other leases: ``attrs.evolve`` without its cost, on the hottest path.

    A copy of *g*'s fields with one changed, set as the new instance's
    ``__dict__`` whole: a third of what the generated ``__init__`` costs,
    which sets its fields one by one (the class has no validators
    or converters to skip).
    """
    fields = g.__dict__.copy()
    fields["leases"] = leases
    new = _new(GenerationState)
    _set(new, "__dict__", fields)
    return new


def _with_owners(m: ManagerState, owners: int) -> ManagerState:
    # By keyword, not attrs.evolve: the same fields at a third of its cost.
    return ManagerState(id=m.id, pid=m.pid, opened_seq=m.opened_seq, opened_at=m.opened_at,
                        owners=owners, sealed=m.sealed, current=m.current,
                        generations=m.generations, ended=m.ended, ended_seq=m.ended_seq,
                        ended_by=m.ended_by)


# Any: each rule takes its own event type, which the dispatch guarantees.
_Rule = Callable[["Fold", Record, Any], None]
RULES: dict[type, _Rule] = {}


def _rule(event_type: type) -> Callable[[_Rule], _Rule]:
    def register(rule: _Rule) -> _Rule:
        RULES[event_type] = rule
        return rule

    return register


@_rule(ManagerOpened)
def _opened(d: Fold, r: Record, e: ManagerOpened) -> None:
    if e.manager in d.managers:
        raise RuleViolation(r.seq, f"opens manager {e.manager} a second time")
    d.managers[e.manager] = ManagerState(
        id=e.manager, pid=e.pid, opened_seq=r.seq, opened_at=r.time
    )


@_rule(Retained)
def _retained(d: Fold, r: Record, e: Retained) -> None:
    manager = d.live_manager(r.seq, e.manager)
    if not manager.sealed:
        d.managers[e.manager] = _with_owners(manager, manager.owners + 1)


@_rule(Released)
def _released(d: Fold, r: Record, e: Released) -> None:
    manager = d.live_manager(r.seq, e.manager)
    owners = max(manager.owners - 1, 0)
    if owners == 0:
        manager = attrs.evolve(d.retire_generations(r.seq, manager, drop_leases=False), sealed=True)
    d.managers[e.manager] = _with_owners(manager, owners)


@_rule(Rotated)
def _rotated(d: Fold, r: Record, e: Rotated) -> None:
    manager = d.live_manager(r.seq, e.manager)
    if not manager.sealed:
        d.managers[e.manager] = d.retire_generations(r.seq, manager, drop_leases=False)


@_rule(GenerationCreated)
def _created(d: Fold, r: Record, e: GenerationCreated) -> None:
    manager = d.live_manager(r.seq, e.manager)
    if manager.sealed or manager.owners == 0:
        raise RuleViolation(r.seq, f"creates a generation for manager {e.manager}, "
                            "which is sealed or has no owner")
    if manager.current is not None:
        raise RuleViolation(r.seq, f"creates a generation while {manager.current} is current")
    if e.generation in d.generations:
        raise RuleViolation(r.seq, f"creates generation {e.generation} a second time")
    d.generations[e.generation] = GenerationState(
        id=e.generation, manager=e.manager, created_seq=r.seq, created_at=r.time
    )
    m = manager
    d.managers[e.manager] = ManagerState(
        id=m.id, pid=m.pid, opened_seq=m.opened_seq, opened_at=m.opened_at, owners=m.owners,
        sealed=m.sealed, current=e.generation, generations=m.generations | {e.generation},
        ended=m.ended, ended_seq=m.ended_seq, ended_by=m.ended_by,
    )


@_rule(GenerationReady)
def _ready(d: Fold, r: Record, e: GenerationReady) -> None:
    d.live_manager(r.seq, e.manager)
    generation = d.owned_generation(r.seq, e.manager, e.generation)
    if generation.ready or generation.removal is not None:
        raise RuleViolation(r.seq, f"readies generation {e.generation}, which is not being made")
    g = generation
    d.generations[e.generation] = GenerationState(
        g.id, g.manager, g.created_seq, g.created_at, True, e.device, e.inode, g.leases,
        g.retired, g.retired_seq, g.removal, g.removal_seq, g.removal_by, g.removal_reason,
        g.removal_outcome, g.commands,
    )


@_rule(GenerationMeasured)
def _measured(d: Fold, r: Record, e: GenerationMeasured) -> None:
    # Only a manager measures its own generations, and only while they
    # live: one being made has no size yet, one being removed no future.
    d.live_manager(r.seq, e.manager)
    generation = d.owned_generation(r.seq, e.manager, e.generation)
    if not generation.ready or generation.removal is not None:
        raise RuleViolation(r.seq, f"measures generation {e.generation}, which is not live "
                            "(not ready yet, or being removed)")
    d.generations[e.generation] = attrs.evolve(
        generation, measured_bytes=e.bytes, measured_inodes=e.inodes, measured_at=e.time,
        peak_bytes=max(generation.peak_bytes, e.bytes),
        peak_inodes=max(generation.peak_inodes, e.inodes),
    )


@_rule(SpaceRefused)
def _refused(d: Fold, r: Record, e: SpaceRefused) -> None:
    # Changes nothing: no lease was granted, no directory made.  Checked
    # all the same, so that the history of refusals names only what was
    # there to refuse: a live manager's own directory, not yet being removed,
    # and a budget's refusal always names one.
    d.live_manager(r.seq, e.manager)
    if not e.generation:
        if e.cause != "min_free_bytes":
            raise RuleViolation(r.seq, f"refuses for {e.cause} without naming a directory")
        return
    generation = d.owned_generation(r.seq, e.manager, e.generation)
    if generation.removal is not None:
        raise RuleViolation(r.seq, f"refuses generation {e.generation}, which is being removed")


@_rule(LeaseAcquired)
def _acquired(d: Fold, r: Record, e: LeaseAcquired) -> None:
    manager = d.live_manager(r.seq, e.manager)
    if manager.sealed or manager.owners == 0:
        raise RuleViolation(r.seq, f"leases from manager {e.manager}, "
                            "which is sealed or has no owner")
    generation = d.owned_generation(r.seq, e.manager, e.generation)
    if manager.current != e.generation or not generation.ready:
        raise RuleViolation(r.seq, f"leases generation {e.generation}, which is not current")
    if e.lease in generation.leases:
        raise RuleViolation(r.seq, f"grants lease {e.lease} a second time")
    d.generations[e.generation] = _with_leases(generation, generation.leases | {e.lease})
    session = d.owned.get(e.manager)
    if session is not None:
        d.sessions[session] = attrs.evolve(d.sessions[session], used_at=r.time)


@_rule(LeaseReleased)
def _lease_released(d: Fold, r: Record, e: LeaseReleased) -> None:
    d.live_manager(r.seq, e.manager)
    generation = d.owned_generation(r.seq, e.manager, e.generation)
    if e.lease not in generation.leases:
        raise RuleViolation(r.seq, f"releases lease {e.lease}, which is not held")
    d.generations[e.generation] = _with_leases(generation, generation.leases - {e.lease})


@_rule(CommandStarted)
def _command_started(d: Fold, r: Record, e: CommandStarted) -> None:
    d.live_manager(r.seq, e.manager)
    generation = d.owned_generation(r.seq, e.manager, e.generation)
    if e.lease not in generation.leases:
        raise RuleViolation(r.seq, f"starts a command on lease {e.lease}, which is not held")
    d.generations[e.generation] = attrs.evolve(
        generation, commands=generation.commands | {command_key(e.pid, e.started)}
    )


@_rule(RemovalStarted)
def _removal_started(d: Fold, r: Record, e: RemovalStarted) -> None:
    generation = d.generations.get(e.generation)
    if generation is None:
        # A stray: found on disk with no record the state holds (never
        # named, or forgotten once removed); recovery claims it.
        d.generations[e.generation] = GenerationState(
            id=e.generation, manager=None, created_seq=r.seq, created_at=r.time,
            retired=True, retired_seq=r.seq, removal="started", removal_seq=r.seq,
            removal_by=e.by, removal_reason=e.reason,
        )
        return
    if generation.removal is not None:
        raise RuleViolation(r.seq, f"removes generation {e.generation} a second time")
    if generation.leases:
        raise RuleViolation(r.seq, f"removes generation {e.generation} while it is leased")
    if generation.manager is not None:
        manager = d.managers[generation.manager]
        if manager.current == e.generation:
            # Only a generation that failed to come into being is removed
            # while current; it stops being current at once.
            if generation.ready:
                raise RuleViolation(r.seq, f"removes generation {e.generation} while current")
            d.managers[manager.id] = attrs.evolve(manager, current=None)
    d.generations[e.generation] = attrs.evolve(
        generation,
        retired=True,
        retired_seq=generation.retired_seq if generation.retired else r.seq,
        removal="started",
        removal_seq=r.seq,
        removal_by=e.by,
        removal_reason=e.reason,
    )


@_rule(RemovalFinished)
def _removal_finished(d: Fold, r: Record, e: RemovalFinished) -> None:
    generation = d.generation(r.seq, e.generation)
    if generation.removal != "started":
        raise RuleViolation(r.seq, f"finishes removing generation {e.generation}, "
                            "whose removal was not started")
    d.finish(attrs.evolve(generation, removal="finished", removal_outcome=e.outcome))


@_rule(Reappeared)
def _reappeared(d: Fold, r: Record, e: Reappeared) -> None:
    # A generation the state holds has not finished its removal.  One it
    # does not hold was removed (or never named: only the journal's records
    # can tell, and recovery reads them before it writes this event).
    if e.generation in d.generations:
        raise RuleViolation(r.seq, f"finds generation {e.generation} on disk again, "
                            "which was never journaled as removed")
    d.generations[e.generation] = GenerationState(
        id=e.generation, manager=None, created_seq=r.seq, created_at=r.time,
        retired=True, retired_seq=r.seq, removal="started", removal_seq=r.seq,
        removal_by=e.by, removal_reason=REAPPEARED,
    )


def _end(d: Fold, r: Record, manager_id: str, how: str, by: str) -> None:
    manager = d.retire_generations(r.seq, d.live_manager(r.seq, manager_id), drop_leases=True)
    manager = attrs.evolve(manager, sealed=True, ended=how, ended_seq=r.seq, ended_by=by)
    d.managers[manager_id] = manager
    d.forget_if_done(manager)


@_rule(ManagerClosed)
def _closed(d: Fold, r: Record, e: ManagerClosed) -> None:
    _end(d, r, e.manager, "closed", e.manager)


@_rule(ManagerDied)
def _died(d: Fold, r: Record, e: ManagerDied) -> None:
    manager = d.live_manager(r.seq, e.manager)
    session = d.owned.get(e.manager)
    current = None if manager.current is None else d.generations[manager.current]
    _end(d, r, e.manager, "dead", e.recovery)
    if session is not None and current is not None and current.ready and (
        current.removal is None
    ):
        # A named session's directory outlives its owner's crash: kept for
        # the next owner to resume, until its window passes.
        d.sessions[session] = attrs.evolve(
            d.sessions[session], kept=current.id, kept_seq=r.seq, kept_at=r.time,
            discarded_seq=None, discarded_reason=None,
        )


@_rule(Unreadable)
def _unreadable(d: Fold, r: Record, e: Unreadable) -> None:
    # Refused the way decode refused it, so that whoever reports it gives
    # the matching fix (an upgrade for a kind from a newer version).
    error = RuleViolation if e.stored_kind in KINDS else UnknownKind
    raise error(r.seq, e.reason)


@_rule(RecoveryStarted)
def _recovery_started(d: Fold, r: Record, e: RecoveryStarted) -> None:
    # Recorded for the history; it changes no manager or generation.
    pass


# -- named sessions and artifacts ---------------------------------------------------


@_rule(SessionClaimed)
def _session_claimed(d: Fold, r: Record, e: SessionClaimed) -> None:
    manager = d.live_manager(r.seq, e.manager)
    if e.manager in d.owned:
        raise RuleViolation(r.seq, f"has manager {e.manager} claim session {e.session}, but it "
                            f"owns session {d.owned[e.manager]} already")
    if manager.generations:
        raise RuleViolation(r.seq, f"has manager {e.manager} claim session {e.session} after "
                            "it made generations")
    previous = d.sessions.get(e.session)
    if previous is not None:
        # Not refused while the previous owner is not ended in the journal:
        # the claimer holds the session's kernel lock, so that owner is gone
        # (its death not yet journaled); it simply owns the session no more.
        d.owned.pop(previous.owner, None)
    d.sessions[e.session] = SessionState(
        name=e.session, owner=e.manager, claimed_seq=r.seq, claimed_at=r.time,
        window=e.window_ms / 1000,
        used_at=None if previous is None else previous.used_at,
        # What the dead owner left stays named, for an adoption in the same
        # commit; no longer kept once the owner changed (kept_for_resume).
        kept=None if previous is None else previous.kept,
        kept_seq=None if previous is None else previous.kept_seq,
        kept_at=None if previous is None else previous.kept_at,
        adoptions=0 if previous is None else previous.adoptions,
        adopted_seq=None if previous is None else previous.adopted_seq,
        adopted_from=None if previous is None else previous.adopted_from,
    )
    d.owned[e.manager] = e.session


@_rule(SessionAdopted)
def _session_adopted(d: Fold, r: Record, e: SessionAdopted) -> None:
    manager = d.live_manager(r.seq, e.manager)
    session = d.sessions.get(e.session)
    if session is None or session.owner != e.manager:
        raise RuleViolation(r.seq, f"has manager {e.manager} adopt for session {e.session}, "
                            "which it does not own")
    generation = d.generation(r.seq, e.generation)
    if session.kept != e.generation or generation.manager != e.previous:
        raise RuleViolation(r.seq, f"adopts generation {e.generation}, which session "
                            f"{e.session}'s previous owner {e.previous} did not leave")
    previous = d.managers.get(e.previous)
    if previous is None or previous.ended != "dead":
        raise RuleViolation(r.seq, f"adopts from manager {e.previous}, which is not dead")
    if generation.removal is not None or not generation.ready:
        raise RuleViolation(r.seq, f"adopts generation {e.generation}, whose removal began")
    if manager.current is not None:
        raise RuleViolation(r.seq, f"adopts generation {e.generation} while "
                            f"{manager.current} is current")
    d.generations[e.generation] = attrs.evolve(
        generation, manager=e.manager, retired=False, retired_seq=None, leases=frozenset()
    )
    previous = attrs.evolve(previous, generations=previous.generations - {e.generation})
    d.managers[e.previous] = previous
    # Dead, and now with nothing left: the state lets it go.
    d.forget_if_done(previous)
    d.managers[e.manager] = attrs.evolve(
        manager, current=e.generation, generations=manager.generations | {e.generation}
    )
    d.sessions[e.session] = attrs.evolve(
        session, kept=None, kept_seq=None, kept_at=None, adoptions=session.adoptions + 1,
        adopted_seq=r.seq, adopted_from=e.previous,
    )


@_rule(SessionDiscarded)
def _session_discarded(d: Fold, r: Record, e: SessionDiscarded) -> None:
    session = d.sessions.get(e.session)
    if session is None:
        raise RuleViolation(r.seq, f"discards session {e.session}, which was never claimed")
    owner = d.managers.get(session.owner)
    if owner is not None and owner.ended is None:
        raise RuleViolation(r.seq, f"discards session {e.session}, which manager "
                            f"{session.owner} still owns")
    d.sessions[e.session] = attrs.evolve(
        session, kept=None, kept_seq=None, kept_at=None, discarded_seq=r.seq,
        discarded_reason=e.reason,
    )


@_rule(ArtifactKept)
def _artifact_kept(d: Fold, r: Record, e: ArtifactKept) -> None:
    d.live_manager(r.seq, e.manager)
    if e.artifact in d.artifacts:
        raise RuleViolation(r.seq, f"keeps artifact {e.artifact} a second time")
    d.artifacts[e.artifact] = ArtifactState(
        id=e.artifact, label=e.label, sha256=e.sha256, size=e.size, manager=e.manager,
        session=d.owned.get(e.manager), kept_seq=r.seq, kept_at=r.time,
    )


@_rule(ArtifactRemoved)
def _artifact_removed(d: Fold, r: Record, e: ArtifactRemoved) -> None:
    if e.artifact not in d.artifacts:
        raise RuleViolation(r.seq, f"removes artifact {e.artifact}, which is not kept")
    del d.artifacts[e.artifact]
