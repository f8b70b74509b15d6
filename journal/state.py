"""The reducer's state: what is alive or still owes work, as frozen values, and questions of it.

Every class here is a frozen attrs value; :mod:`sessiontemp.journal.reducer` folds the
events into a :class:`State`, and :mod:`sessiontemp.journal.rules` says how each event
changes it.  A reader that tells the past hands the fold a
:class:`Forgotten`, which keeps the last state of everything the fold let go
of.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

__all__ = [
    "EMPTY",
    "REAPPEARED",
    "ArtifactState",
    "Forgotten",
    "GenerationState",
    "ManagerState",
    "SessionState",
    "State",
    "command_key",
    "held_by",
    "kept_for_resume",
    "reclaimed",
    "removal_due",
    "resumed",
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
    removal finishes: "finished" is seen only in a :class:`Forgotten`.
    ``measured_bytes``, ``measured_inodes`` and ``measured_at`` are its last
    measurement (None before the first), ``peak_bytes`` and ``peak_inodes``
    the largest any measurement found: two numbers a generation, so the
    state stays bounded by the live objects however often it is measured.
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
    measured_bytes: int | None = None
    measured_inodes: int | None = None
    measured_at: float | None = None
    peak_bytes: int = 0
    peak_inodes: int = 0


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
class Forgotten:
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
