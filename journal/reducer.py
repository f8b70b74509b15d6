"""Managers, generations and leases, derived from the events and from nothing else.

:func:`apply` is the whole lifecycle: a pure function from a state and one
record to the next state, with no I/O, no clock and no randomness.  Replaying
the same records always gives the same state; :func:`replay` is that fold,
written so that a journal of millions of events replays in linear time.

An event that the rules forbid (a lease on a sealed manager, a second removal
of one generation) raises :class:`RuleViolation`: a journal holding one was
not written by a correct manager, and guessing what it meant would be worse
than saying so.  A writer checks its events against these rules before it
commits them, so a correct manager never writes one.

A reader that must carry on past such a record (recovery, which must not
let one bad record brick a whole root) folds *tolerantly*: the record is
refused as before, and every manager and generation it names is *held*
(``State.held``): kept as it is, never removed by anyone, and reported,
until a person decides.

The state holds what is alive or still owes work, and forgets the rest, so
that its size (and the cost of every step, and of a checkpoint) follows the
live objects, not the length of the history:

* a generation is dropped when its removal finishes (whatever the outcome,
  "refused: ..." included: nobody will act on it again);
* a manager is dropped once it has ended (closed or dead) and none of its
  generations is left; until then it stays, ended, beside them;
* a named session is dropped with its owner, when nothing is kept for a
  resume: a later claim of the name starts it afresh, as a first one does.

What that means for the rules: an event naming a forgotten manager or
generation is refused as naming one the state does not hold ("never opened,
or ended", "never created, or removed"), which is as strict as before for
everything a correct writer could still do.  What the state can no longer
tell is *reuse* of a forgotten id: opening a manager, or creating a
generation, under the id of one that is gone is accepted as new, and so is a
``removal.started`` of a removed generation's id (a stray, as for an id never
seen).  Ids are random (128 and 80 bits), so only a forged journal reuses
one; ``journal-inspect verify`` and the digest chain are where such a
journal is caught, not the fold.  ``generation.reappeared`` names a
generation journaled as removed, which the state has forgotten: it brings it
back as a removal started, without a manager (like a stray), since the
state no longer knows whose it was; recovery, which journals it, looks its
identity up in the journal's records.  ``held`` is kept whole: it names only
what refused records named, and those are rare.

Finished history lives in the journal's records.  A reader that tells the
past (``journal-inspect state --at``, ``explain``) passes a :class:`History`
to the fold, which keeps the last state of everything the fold let go of.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from journal.errors import RuleViolation, UnknownKind
from journal.events import (
    KINDS,
    ArtifactKept,
    ArtifactRemoved,
    CommandStarted,
    GenerationCreated,
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
    Unreadable,
    named_ids,
)

__all__ = [
    "EMPTY",
    "ArtifactState",
    "Fold",
    "GenerationState",
    "History",
    "ManagerState",
    "SessionState",
    "State",
    "apply",
    "command_key",
    "held_by",
    "kept_for_resume",
    "removal_due",
    "replay",
]


@attrs.frozen
class ManagerState:
    """One manager as the journal knows it.

    ``generations`` holds the ids of its generations not yet removed;
    ``ended`` is None while it lives, then "closed" or "dead", and
    ``ended_by`` names who ended it: itself, or the recovery pass that
    found it dead.  An ended manager stays in the state only while
    ``generations`` is not empty.
    """

    id: str
    pid: int
    opened_seq: int
    opened_at: float
    owners: int = 0
    sealed: bool = False
    current: str | None = None
    generations: frozenset[str] = frozenset()
    ended: str | None = None
    ended_seq: int | None = None
    ended_by: str | None = None


# Not slotted: a new state of a generation is a copy of its fields' dict
# (see _with_leases), on every lease and every release.
@attrs.frozen(slots=False)
class GenerationState:
    """One generation directory as the journal knows it.

    ``manager`` is None for a stray: an entry with the generation prefix that
    recovery found on disk without any record of it.  ``removal`` is None,
    then "started", then "finished"; ``removal_outcome`` says how it ended:
    "removed", "absent" or "refused: <why>".  ``commands`` holds a
    ``"pid:started"`` key (:func:`command_key`) for each process started
    on one of its leases: removal waits for those that still run, even
    after their lease is released.  The state drops a generation once its
    removal finishes: "finished" is seen only in a :class:`History`.
    """

    id: str
    manager: str | None
    created_seq: int
    created_at: float
    ready: bool = False
    device: int | None = None
    inode: int | None = None
    leases: frozenset[str] = frozenset()
    retired: bool = False
    retired_seq: int | None = None
    removal: str | None = None
    removal_seq: int | None = None
    removal_by: str | None = None
    removal_reason: str | None = None
    removal_outcome: str | None = None
    commands: frozenset[str] = frozenset()


@attrs.frozen
class SessionState:
    """A named session: who owns it now, and what its last owner left for a resume.

    ``owner`` is the manager that claimed it last (alive or ended; the state
    forgets the session with it, see :meth:`Fold.forget_if_done`).  When
    that manager dies, its current generation becomes ``kept`` (from
    ``kept_at``, the time its death was journaled) for ``window`` seconds,
    until a successor adopts it or it is discarded.  ``used_at`` is the time
    of the owner's last lease: a usage touch, so that idleness is what an
    age rule measures.
    """

    name: str
    owner: str
    claimed_seq: int
    claimed_at: float
    window: float
    used_at: float | None = None
    kept: str | None = None
    kept_seq: int | None = None
    kept_at: float | None = None
    adoptions: int = 0
    adopted_seq: int | None = None
    adopted_from: str | None = None
    discarded_seq: int | None = None
    discarded_reason: str | None = None


@attrs.frozen
class ArtifactState:
    """A durable file in the root's artifact store, kept until an explicit removal."""

    id: str
    label: str
    sha256: str
    size: int
    manager: str
    session: str | None
    kept_seq: int
    kept_at: float


# Not slotted: built once per fold, of every append, where a slotted frozen
# class's __init__ sets each field through object.__setattr__.
@attrs.frozen(slots=False)
class State:
    """What is alive or owes work after the first ``seq`` events of a journal.

    ``managers`` and ``generations`` hold only what has not finished (see the
    module's docstring); ``held`` maps each manager or generation id named by
    a record the rules refused (in a tolerant fold) to the seq of the first
    such record, whether or not the state still holds it.  ``sessions``
    holds each named session by name while something of it is left (its
    owner, or a directory kept for a resume); ``artifacts`` every artifact
    not yet removed.  The mappings are never mutated once a state is built; treat
    them as read-only.
    """

    managers: Mapping[str, ManagerState] = attrs.field(factory=dict)
    generations: Mapping[str, GenerationState] = attrs.field(factory=dict)
    seq: int = 0
    held: Mapping[str, int] = attrs.field(factory=dict)
    sessions: Mapping[str, SessionState] = attrs.field(factory=dict)
    artifacts: Mapping[str, ArtifactState] = attrs.field(factory=dict)


EMPTY: Final = State()

# Why a generation that reappeared is being removed again.
REAPPEARED: Final = "it was on disk again after its removal (a power loss undid it)"


@attrs.define
class History:
    """The last state of every manager and generation a fold let go of.

    The reducer's state forgets what has finished; a reader that tells the
    past (``journal-inspect state --at``, ``explain``) hands one of these to
    the fold (``Fold(..., history=...)``) to keep it.  Filled only by the
    fold that was given it; the state itself never holds it.
    """

    managers: dict[str, ManagerState] = attrs.field(factory=dict)
    generations: dict[str, GenerationState] = attrs.field(factory=dict)
    sessions: dict[str, SessionState] = attrs.field(factory=dict)

    def keep_generation(self, final: GenerationState) -> None:
        past = self.generations.get(final.id)
        self.generations[final.id] = final if past is None else resumed(past, final)

    def keep_session(self, final: SessionState) -> None:
        past = self.sessions.get(final.name)
        self.sessions[final.name] = final if past is None else reclaimed(past, final)

    def whole(self, state: State) -> State:
        """*state* with what its fold forgot put back: every manager, generation, session seen."""
        generations = dict(self.generations)
        for gid, generation in state.generations.items():
            past = self.generations.get(gid)
            generations[gid] = generation if past is None else resumed(past, generation)
        sessions = dict(self.sessions)
        for name, session in state.sessions.items():
            earlier = self.sessions.get(name)
            sessions[name] = session if earlier is None else reclaimed(earlier, session)
        return State(managers={**self.managers, **state.managers}, generations=generations,
                     seq=state.seq, held=state.held, sessions=sessions,
                     artifacts=state.artifacts)


def reclaimed(past: SessionState, now: SessionState) -> SessionState:
    """A session forgotten once nothing of it was left, then claimed again, as one story.

    *past* is its last state before the state forgot it; *now* what the state
    holds of it since.  The result is what a state that never forgets would
    hold: a claim carries the last use and the adoptions over.
    """
    return attrs.evolve(
        now, used_at=past.used_at if now.used_at is None else now.used_at,
        adoptions=past.adoptions + now.adoptions,
        adopted_seq=past.adopted_seq if now.adopted_seq is None else now.adopted_seq,
        adopted_from=past.adopted_from if now.adopted_seq is None else now.adopted_from,
    )


def resumed(past: GenerationState, now: GenerationState) -> GenerationState:
    """A generation forgotten at the end of a removal, then taken up again, as one story.

    *past* is its last state before the state forgot it; *now* what the state
    holds of it since it reappeared (a removal without a manager).  The
    result is what a state that never forgets would hold: *past*, with the
    removal of *now*.
    """
    return attrs.evolve(past, removal=now.removal, removal_seq=now.removal_seq,
                        removal_by=now.removal_by, removal_reason=now.removal_reason,
                        removal_outcome=now.removal_outcome)


def removal_due(generation: GenerationState) -> bool:
    """True when nothing keeps *generation*: retired, no leases, removal not begun."""
    return generation.retired and not generation.leases and generation.removal is None


def held_by(state: State, generation: GenerationState) -> int | None:
    """The seq of a refused record that holds *generation* (naming it or its manager), or None."""
    if not state.held:
        return None
    seq = state.held.get(generation.id)
    if seq is None and generation.manager is not None:
        seq = state.held.get(generation.manager)
    return seq


def kept_for_resume(state: State, generation: GenerationState) -> SessionState | None:
    """The session that keeps *generation* for a resume, or None.

    Kept means: left current by a session's owner that died, no successor
    has claimed the session since, and it was not discarded.  Nobody but
    the session's next owner (adopting it) or a discard may touch it.
    """
    for session in state.sessions.values():
        if session.kept == generation.id and session.owner == generation.manager:
            return session
    return None


def command_key(pid: int, started: int) -> str:
    """How a process started on a lease is kept in :attr:`GenerationState.commands`."""
    return f"{pid}:{started}"


# How _with_leases builds a frozen instance from a copy of another's fields.
_new: Final = object.__new__
_set: Final = object.__setattr__


def _with_leases(g: GenerationState, leases: frozenset[str]) -> GenerationState:
    """*g* with other leases: ``attrs.evolve`` without its cost, on the hottest path.

    A copy of *g*'s fields with one changed, set as the new instance's
    ``__dict__`` whole: a third of what the generated ``__init__`` costs,
    which sets its sixteen fields one by one (the class has no validators
    or converters to skip).
    """
    fields = g.__dict__.copy()
    fields["leases"] = leases
    new = _new(GenerationState)
    _set(new, "__dict__", fields)
    return new


def _with_owners(m: ManagerState, owners: int) -> ManagerState:
    return ManagerState(m.id, m.pid, m.opened_seq, m.opened_at, owners, m.sealed, m.current,
                        m.generations, m.ended, m.ended_seq, m.ended_by)


def apply(state: State, record: Record) -> State:
    """The state right after *record*."""
    fold = Fold(state)
    fold.step(record)
    return fold.state()


def replay(records: Iterable[Record], initial: State = EMPTY, *, tolerant: bool = False,
           history: History | None = None) -> State:
    """Fold :func:`apply` over *records*, starting from *initial*.

    *tolerant* holds what a refused record names instead of raising (see
    :class:`Fold`); *history*, when given, keeps what the state forgets.
    """
    # Equivalent to functools.reduce(apply, records, initial), but one Fold
    # is updated in place instead of copying both maps per event.
    fold = Fold(initial, tolerant=tolerant, history=history)
    for record in records:
        fold.step(record)
    return fold.result()


class Fold:
    """A replay in progress: :func:`apply` one record at a time, in place.

    It starts from a state and steps through records; :meth:`state` is the
    state so far.  Its ``managers`` and ``generations`` are its own working
    maps, readable between steps (to tell a story as it unfolds) and never
    to be changed from outside.  A rule that refuses a record raises
    :class:`RuleViolation` before changing anything but ``seq``; a
    *tolerant* fold instead adds what the record names to ``held``, appends
    the violation to ``refused`` and carries on.  A *history* keeps the last
    state of each manager and generation the fold lets go of.
    """

    __slots__ = ("artifacts", "generations", "held", "history", "managers", "owned", "refused",
                 "seq", "sessions", "tolerant")

    def __init__(self, state: State = EMPTY, *, tolerant: bool = False,
                 history: History | None = None) -> None:
        self.managers = dict(state.managers)
        self.generations = dict(state.generations)
        self.held = dict(state.held)
        self.sessions = dict(state.sessions)
        self.artifacts = dict(state.artifacts)
        # Which session each manager owns: a lookup for the rules of the
        # hot path (a lease is a usage touch of its manager's session).
        self.owned = {s.owner: s.name for s in state.sessions.values()} if state.sessions else {}
        self.seq = state.seq
        self.tolerant = tolerant
        self.history = history
        self.refused: list[RuleViolation] = []

    def state(self) -> State:
        """The state after the records stepped so far (a copy: stepping on leaves it be)."""
        return State(managers=dict(self.managers), generations=dict(self.generations),
                     seq=self.seq, held=dict(self.held), sessions=dict(self.sessions),
                     artifacts=dict(self.artifacts))

    def result(self) -> State:
        """The state after the records stepped, taking the working maps: no step may follow.

        :meth:`state` without its copies, for a fold that ends here (a
        replay, and the store's fold of every append).
        """
        return State(self.managers, self.generations, self.seq, self.held, self.sessions,
                     self.artifacts)

    def step(self, record: Record) -> None:
        # Increasing, not consecutive: a manager folds only the events it
        # appended, which other writers interleave.  That the whole journal
        # has no gap is the store's promise, checked where it is read.
        if record.seq <= self.seq:
            raise RuleViolation(record.seq, f"follows event {self.seq}: out of order")
        self.seq = record.seq
        try:
            _RULES[type(record.event)](self, record, record.event)
        except RuleViolation as e:
            if not self.tolerant:
                raise
            self.refused.append(e)
            for named in named_ids(record.event):
                self.held.setdefault(named, record.seq)

    # -- lookups that enforce the rules ----------------------------------------

    def live_manager(self, seq: int, manager_id: str) -> ManagerState:
        manager = self.managers.get(manager_id)
        if manager is None:
            # The state forgets a manager once it has ended and nothing of
            # it is left: "never opened" can no longer be told apart.
            raise RuleViolation(seq, f"names manager {manager_id}, which is not open: never "
                                "opened, or closed or dead")
        if manager.ended is not None:
            raise RuleViolation(seq, f"names manager {manager_id}, which is {manager.ended}")
        return manager

    def generation(self, seq: int, generation_id: str) -> GenerationState:
        generation = self.generations.get(generation_id)
        if generation is None:
            raise RuleViolation(seq, f"names generation {generation_id}, which does not exist: "
                                "never created, or already removed")
        return generation

    # -- letting go of what has finished ---------------------------------------

    def finish(self, generation: GenerationState) -> None:
        """Forget *generation*, whose removal just finished, and its manager if that is done too."""
        del self.generations[generation.id]
        if self.history is not None:
            self.history.keep_generation(generation)
        if generation.manager is None:
            return
        manager = self.managers[generation.manager]
        manager = attrs.evolve(manager, generations=manager.generations - {generation.id})
        self.managers[manager.id] = manager
        self.forget_if_done(manager)

    def forget_if_done(self, manager: ManagerState) -> None:
        """Forget *manager* once it has ended and none of its generations is left.

        The session it owns goes with it: nothing of that is left either (a
        directory kept for a resume is one of the owner's generations).
        """
        if manager.ended is None or manager.generations:
            return
        del self.managers[manager.id]
        if self.history is not None:
            self.history.managers[manager.id] = manager
        name = self.owned.pop(manager.id, None)
        if name is not None:
            session = self.sessions.pop(name)
            if self.history is not None:
                self.history.keep_session(session)

    def owned_generation(self, seq: int, manager_id: str, generation_id: str) -> GenerationState:
        generation = self.generation(seq, generation_id)
        if generation.manager != manager_id:
            raise RuleViolation(
                seq, f"names generation {generation_id} of manager {generation.manager}, "
                f"not of {manager_id}"
            )
        return generation

    def retire(self, seq: int, manager: ManagerState, *, drop_leases: bool) -> ManagerState:
        """Retire every generation of *manager* (the current one, or all when it ends)."""
        targets = manager.generations if drop_leases else (
            () if manager.current is None else (manager.current,)
        )
        for generation_id in targets:
            generation = self.generations[generation_id]
            # When the manager ends, its leases' owner is gone; from then on
            # only the kernel lock on the directory says whether a command
            # still uses it.
            leases = frozenset() if drop_leases else generation.leases
            if not generation.retired or leases != generation.leases:
                self.generations[generation_id] = attrs.evolve(
                    generation,
                    retired=True,
                    retired_seq=generation.retired_seq if generation.retired else seq,
                    leases=leases,
                )
        return attrs.evolve(manager, current=None)


# Any: each rule takes its own event type, which the dispatch guarantees.
_Rule = Callable[[Fold, Record, Any], None]
_RULES: dict[type, _Rule] = {}


def _rule(event_type: type) -> Callable[[_Rule], _Rule]:
    def register(rule: _Rule) -> _Rule:
        _RULES[event_type] = rule
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
        manager = attrs.evolve(d.retire(r.seq, manager, drop_leases=False), sealed=True)
    d.managers[e.manager] = _with_owners(manager, owners)


@_rule(Rotated)
def _rotated(d: Fold, r: Record, e: Rotated) -> None:
    manager = d.live_manager(r.seq, e.manager)
    if not manager.sealed:
        d.managers[e.manager] = d.retire(r.seq, manager, drop_leases=False)


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
        m.id, m.pid, m.opened_seq, m.opened_at, m.owners, m.sealed, e.generation,
        m.generations | {e.generation}, m.ended, m.ended_seq, m.ended_by,
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
    manager = d.retire(r.seq, d.live_manager(r.seq, manager_id), drop_leases=True)
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
