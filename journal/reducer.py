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
past (``journal-inspect state --at``, ``explain``) passes a
:class:`~sessiontemp.journal.state.Forgotten`
to the fold, which keeps the last state of everything the fold let go of.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .errors import RuleViolation
from .events import Record, named_ids
from .rules import RULES
from .state import (
    EMPTY,
    REAPPEARED,
    ArtifactState,
    Forgotten,
    GenerationState,
    ManagerState,
    SessionState,
    State,
    command_key,
    held_by,
    kept_for_resume,
    reclaimed,
    removal_due,
    resumed,
)

# The state's names are re-exported: the reducer is where callers have
# always found them.
__all__ = [
    "EMPTY",
    "REAPPEARED",
    "ArtifactState",
    "Fold",
    "Forgotten",
    "GenerationState",
    "ManagerState",
    "SessionState",
    "State",
    "apply",
    "command_key",
    "held_by",
    "kept_for_resume",
    "reclaimed",
    "removal_due",
    "replay",
    "resumed",
]


def apply(state: State, record: Record) -> State:
    """The state right after *record*."""
    fold = Fold(state)
    fold.step(record)
    return fold.state()


def replay(records: Iterable[Record], initial: State = EMPTY, *, tolerant: bool = False,
           history: Forgotten | None = None) -> State:
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
                 history: Forgotten | None = None) -> None:
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
        replay, and a ledger's fold of every append).
        """
        return State(managers=self.managers, generations=self.generations, seq=self.seq,
                     held=self.held, sessions=self.sessions, artifacts=self.artifacts)

    def step(self, record: Record) -> None:
        # Increasing, not consecutive: a manager folds only the events it
        # appended, which other writers interleave.  That the whole journal
        # has no gap is the store's promise, checked where it is read.
        if record.seq <= self.seq:
            raise RuleViolation(record.seq, f"follows event {self.seq}: out of order")
        self.seq = record.seq
        try:
            RULES[type(record.event)](self, record, record.event)
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

    def retire_generations(self, seq: int, manager: ManagerState, *, drop_leases: bool
                           ) -> ManagerState:
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
