"""``explain``: one generation's life, told in plain sentences.

Its size on disk is told as its manager measured it: the first measurement,
each that grew past what was told by a quarter, and at the end the last one
and the peak.  Only the part of the journal that concerns the generation is replayed: from
the newest checkpoint before it was first named to the end of its removal
(or to the end of the journal while it is not removed), never from before
where the kept history starts.  A generation created before it (retention
retired its first records) is told from the state there: who created it and
when, the leases and commands it held, and in words what went with the
retired history (its leases' labels); one the kept history never names is
told so, with where that history starts.  Each event is told
by a ``match`` on its type, as the replay reaches it.  The reducer's state
lets go of a generation when its removal ends, and of a manager once it has
ended with nothing left: the replay keeps them in a
:class:`~sessiontemp.journal.reducer.Forgotten`, so the story can still name them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from sessiontemp._kernel.root import GENERATION_PREFIX
from sessiontemp.inspect.read import (
    Problem,
    Progress,
    as_path,
    generation_of,
    kept_history,
    opened,
    when,
)
from sessiontemp.journal import history
from sessiontemp.journal.errors import RuleViolation
from sessiontemp.journal.events import (
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
    Rotated,
    SessionAdopted,
    SessionDiscarded,
    SpaceRefused,
    decode,
)
from sessiontemp.journal.reducer import (
    Fold,
    Forgotten,
    GenerationState,
    ManagerState,
    SessionState,
    held_by,
    resumed,
)
from sessiontemp.journal.store import Store
from sessiontemp.space.budget import described
from sessiontemp.space.usage import human

__all__ = ["Sentence", "Story", "explain"]


@attrs.frozen
class Sentence:
    """One sentence of a story: the event it tells (``kind`` "now" for the last word)."""

    seq: int
    time: float
    kind: str
    text: str


@attrs.frozen
class Story:
    """One generation's life in sentences; ``status`` sums up where it is now.

    ``status``: "live" (its manager's current directory), "retired" (waiting
    for its last lease or a recovery), "removing" (removal started, not
    finished), "removed", or "unknown" (the kept history never names it;
    once history was retired, one sentence says where the kept history
    starts).
    """

    journal: Path
    generation: str
    path: Path | None
    status: str
    manager: str | None
    sentences: tuple[Sentence, ...]
    leases: tuple[str, ...]


@attrs.define
class _Teller:
    """What the story needs to remember while the replay runs past the generation."""

    gid: str
    managers: dict[str, ManagerState]
    recoveries: dict[str, int]
    said: list[Sentence] = attrs.field(factory=list)
    deaths: dict[str, float] = attrs.field(factory=dict)  # when each manager ended
    last: float = 0.0
    held: set[str] = attrs.field(factory=set)  # the generation's leases before this event
    kept_for: str | None = None  # the session keeping it for a resume, if any
    told: int = -1  # the largest size a sentence has told (-1: none yet)

    def before(self, generation: GenerationState, kept: history.Start) -> None:
        """Tell what the state where the story starts holds of a generation created before it.

        Its first records went with the retired history: who created it and
        when, what retired it, its leases and commands are in that state;
        its leases' labels are not, and that is said.
        """
        m = generation.manager
        by = "as a stray" if m is None else f"by manager {m}{self.pid_of(m)}"
        text = [f"Created at {when(generation.created_at)} {by}, before {kept_history(kept)}: "
                "its records until then were retired with the history before it."]
        if generation.leases:
            text.append(f"Lease(s) {', '.join(sorted(generation.leases))} were taken on it "
                        "before then (their labels went with that history).")
        if generation.commands:
            pids = ", ".join(sorted(c.partition(":")[0] for c in generation.commands))
            text.append(f"Command pid {pids} was started under a lease before then; its "
                        "removal waits for that process as long as it runs.")
        if generation.retired_seq is not None and generation.retired_seq <= kept.seq:
            text.append(f"It was retired before then (event {generation.retired_seq:,}).")
        self.said.append(Sentence(generation.created_seq, generation.created_at,
                                  "generation.created", " ".join(text)))
        self.held = set(generation.leases)
        self.last = kept.time or generation.created_at

    def say(self, record: Record, text: str) -> None:
        self.said.append(Sentence(record.seq, record.time, record.event.kind, text))

    def pid_of(self, manager: str | None) -> str:
        m = self.managers.get(manager or "")
        return f" (pid {m.pid})" if m is not None else ""

    def each(self, record: Record, draft: Fold) -> None:
        self.last = record.time
        match record.event:
            case ManagerOpened(manager=m):
                self.managers[m] = draft.managers[m]
            case _:
                pass
        if self.note(record, draft):
            return
        generation = _seen(draft, self.gid)
        if generation is None:
            return
        if getattr(record.event, "generation", None) == self.gid:
            self.tell(record, draft, generation)
        elif generation.retired_seq == record.seq and generation.manager is not None:
            self.say(record, f"Retired at {when(record.time)}: "
                     f"{_retired_by(record, generation.manager)}.")
        self.ended_while_held(record, generation)
        self.resume(record, draft)
        self.held = set(generation.leases)

    def resume(self, record: Record, draft: Fold) -> None:
        """Say when a named session keeps the generation for a resume, and when it stops."""
        at = when(record.time)
        match record.event:
            case ManagerDied():
                for session in draft.sessions.values():
                    if session.kept == self.gid and session.kept_seq == record.seq:
                        self.kept_for = session.name
                        self.say(record, f"Kept at {at} for session {session.name}: its owner "
                                 "died, and its next owner may resume it, files and all, "
                                 f"within {session.window:g} s.")
            case SessionDiscarded(session=name, by=by, reason=reason) if name == self.kept_for:
                self.kept_for = None
                pid = f" (pid {self.recoveries[by]})" if by in self.recoveries else ""
                self.say(record, f"No longer kept for session {name} from {at} (recovery "
                         f"{by}{pid}): {reason}; it is removed as any orphan.")
            case _:
                pass

    def note(self, record: Record, draft: Fold) -> bool:
        """Remember recovery passes' pids and when managers ended; True when the event
        concerns nothing else."""
        match record.event:
            case RecoveryStarted(recovery=r, pid=pid):
                self.recoveries[r] = pid
                return True
            case ManagerDied(manager=m) | ManagerClosed(manager=m):
                ended = draft.managers.get(m)
                if ended is None and draft.history is not None:
                    # Ended with nothing left: the state let it go.
                    ended = draft.history.managers.get(m)
                if ended is not None:
                    self.managers[m] = ended
                self.deaths[m] = record.time
        return False

    def tell(self, record: Record, draft: Fold, generation: GenerationState) -> None:
        at = when(record.time)
        match record.event:
            case GenerationCreated(manager=m):
                self.say(record, f"Created at {at} by manager {m}{self.pid_of(m)}.")
            case GenerationReady(device=device, inode=inode):
                self.say(record, f"Its directory was made at {at} (device {device}, "
                         f"inode {inode}).")
            case LeaseAcquired(lease=lease, label=label):
                named = f" ({label})" if label else ""
                self.say(record, f"Lease {lease}{named} was taken at {at}.")
            case CommandStarted(lease=lease, pid=pid):
                self.say(record, f"Command pid {pid} was started under lease {lease} at {at}; "
                         "its removal waits for that process as long as it runs.")
            case LeaseReleased(lease=lease):
                self.say(record, f"Lease {lease} was released at {at}.")
            case GenerationMeasured(bytes=size, inodes=inodes):
                self.measured(record, size, inodes)
            case SpaceRefused(cause=cause, found=found, limit=limit):
                self.say(record, f"An acquire was refused at {at}, and no command started: "
                         f"{described(cause, found, limit)}.")
            case SessionAdopted(manager=m, session=name, previous=previous):
                self.kept_for = None
                self.say(record, f"Adopted at {at} by manager {m}{self.pid_of(m)}, the next "
                         f"owner of session {name}: it resumed the directory manager "
                         f"{previous} left when it died, files and all, as its current one.")
            case RemovalStarted(by=by, reason=reason):
                if generation.retired_seq == record.seq and generation.manager is not None:
                    self.say(record, f"Retired at {at} by the start of its removal.")
                self.say(record, f"Removal was started at {at} by "
                         f"{self.remover(by, generation)}: {reason}.")
            case Reappeared(by=by):
                self.say(record, f"It was on disk again at {at}, after its removal (a power "
                         f"loss undid it); {self.remover(by, generation)} removes it again.")
            case RemovalFinished(outcome=outcome):
                what = {"removed": "its directory was removed",
                        "absent": "its directory was already gone"}.get(outcome, outcome)
                self.say(record, f"Removal finished at {at}: {what}.")
            case _:
                pass

    def measured(self, record: Record, size: int, inodes: int) -> None:
        """Tell the first measurement and each that grew past what was told by a quarter:
        how it grew, in a few sentences, however often it was measured."""
        if self.told >= 0 and size <= self.told * 1.25 + 4096:
            return
        first = "First measured" if self.told < 0 else "Grown to"
        self.told = size
        self.say(record, f"{first} at {when(record.time)}: {human(size)} on disk in "
                 f"{inodes:,} inodes.")

    def size(self, generation: GenerationState) -> str:
        """Its last measurement and its peak, in a sentence ("" when never measured).

        From the state alone: an answer about the present is the same
        whether or not the history that measured it was retired (how it
        grew is told by the measurements' own sentences).
        """
        if generation.measured_at is None:
            return ""
        last = (f"{human(generation.measured_bytes or 0)} in "
                f"{generation.measured_inodes or 0:,} inodes at {when(generation.measured_at)}")
        return (f"Its size on disk: the last measurement {last}; its peak "
                f"{human(generation.peak_bytes)} in {generation.peak_inodes:,} inodes.")

    def remover(self, by: str, generation: GenerationState) -> str:
        """Who removed the generation, in words: its manager, or which recovery and why."""
        if by == generation.manager:
            return f"its own manager {by}, in normal use"
        # The state says who ended the manager (ended_by): no other query.
        owner = self.managers.get(generation.manager or "")
        dead = ""
        if owner is not None and owner.ended == "dead":
            at = (f" at {when(self.deaths[owner.id])}" if owner.id in self.deaths else "")
            finder = "" if owner.ended_by == by else f" by recovery {owner.ended_by}"
            dead = (f", after manager {owner.id} (pid {owner.pid}) was found dead{finder}{at} "
                    f"(event {owner.ended_seq})")
        elif generation.manager is None:
            dead = ", as a stray the journal did not know"
        pid = f" (pid {self.recoveries[by]})" if by in self.recoveries else ""
        return f"recovery {by}{pid}{dead}"

    def ended_while_held(self, record: Record, generation: GenerationState) -> None:
        """Say so when the manager ended while leases were held: only commands keep it now."""
        if generation.removal is not None or not self.held:
            return
        match record.event:
            case ManagerClosed(manager=m) if m == generation.manager:
                how = "was closed"
            case ManagerDied(manager=m, recovery=r) if m == generation.manager:
                pid = f" (pid {self.recoveries[r]})" if r in self.recoveries else ""
                how = f"was found dead by recovery {r}{pid}"
            case _:
                return
        self.say(record, f"Its manager {m} {how} at {when(record.time)} while lease(s) "
                 f"{', '.join(sorted(self.held))} were held: from then on only a command "
                 "still running under them keeps the directory.")


# The records that open and close a generation's story.
_SPAN_KINDS: Final = frozenset({"generation.created", "removal.started", "removal.finished",
                                "generation.reappeared"})


def _seen(draft: Fold, gid: str) -> GenerationState | None:
    """Generation *gid* as the replay so far tells it, kept past the end of its removal."""
    now = draft.generations.get(gid)
    past = None if draft.history is None else draft.history.generations.get(gid)
    if past is None:
        return now
    return past if now is None else resumed(past, now)


def _retired_by(record: Record, m: str) -> str:
    match record.event:
        case Rotated():
            return f"its manager {m} rotated"
        case Released():
            return f"the last owner of its manager {m} released it, sealing it"
        case ManagerClosed():
            return f"its manager {m} was closed"
        case ManagerDied():
            return f"a recovery found its manager {m} dead"
        case _:
            return record.event.kind


def explain(journal: os.PathLike[str] | str, target: str, root: os.PathLike[str] | str | None
            = None, *, progress: Progress | None = None) -> Story:
    """The life story of the generation *target* (a path or an id).

    Only the part of the journal that concerns it is replayed: from the
    newest checkpoint before it was first named, up to the end of its removal
    (or the end of the journal while it is not removed).  A path that names
    no generation is :class:`~sessiontemp.BadInput`.
    """
    gid = generation_of(target)
    path = as_path(journal, "the journal")
    where = None if root is None else as_path(root, "the root") / (GENERATION_PREFIX + gid)
    with opened(path, snapshot=True) as store:
        first, finished = _span_of(store, gid)
        kept = history.start(store)
        start = kept.state if first is None else history.begin(store, first - 1)
        if gid not in start.generations and first is None:
            return Story(path, gid, where, "unknown", None, _unnamed(kept), ())
        # The managers from before the start are in its state, and who ended
        # each (ended_by); only the pids of recovery passes that started
        # before it are read apart, so that every checkpoint tells the same.
        teller = _Teller(gid, dict(start.managers), {
            r.event.recovery: r.event.pid for r in store.records_of(
                ["recovery.started"], until=start.seq)
            if isinstance(r.event, RecoveryStarted)} if start.seq else {})
        before = start.generations.get(gid)
        if before is not None and kept.seq:
            teller.before(before, kept)
        refused: list[Problem] = []
        forgotten = Forgotten()
        state = forgotten.whole(history.fold(store, start=start, until=finished,
                                             progress=progress, each=teller.each,
                                             lenient=refused, forgotten=forgotten))
    generation = state.generations.get(gid)
    if generation is None:
        return Story(path, gid, where, "unknown", None, (), ())
    status = ("removed" if generation.removal == "finished" else
              "removing" if generation.removal == "started" else
              "retired" if generation.retired else "live")
    said = teller.said
    holding = held_by(state, generation)
    now = (f"It is kept: event {holding}, which the lifecycle rules refuse, names it or its "
           "manager, so no recovery removes it until a person decides (see `journal-inspect "
           "verify`)." if holding is not None and generation.removal != "finished" else
           _now(status, generation, state.managers.get(generation.manager or ""),
                _keeper(state.sessions.values(), generation)))
    size = teller.size(generation)
    if size or now:
        said.append(Sentence(state.seq, teller.last, "now", " ".join(filter(None, [now,
                                                                                  size]))))
    return Story(path, gid, where, status, generation.manager, tuple(said),
                 tuple(sorted(generation.leases)))


def _unnamed(kept: history.Start) -> tuple[Sentence, ...]:
    """What is known of a generation the kept history never names: where that history starts."""
    if not kept.seq:
        return ()
    return (Sentence(kept.seq, kept.time or kept.history.retired_at or 0.0, "now", (
        f"No record of it is kept: history before event {kept.first:,} was retired, and "
        f"{kept_history(kept)}, never names it. If it was created and removed before then, "
        "its story went with that history; if not, check the id (`journal-inspect events "
        "--kind generation.created` lists them).")),)


def _keeper(sessions: Iterable[SessionState], generation: GenerationState
            ) -> SessionState | None:
    for session in sessions:
        if session.kept == generation.id and session.owner == generation.manager:
            return session
    return None


def _now(status: str, generation: GenerationState, owner: ManagerState | None,
         kept: SessionState | None = None) -> str:
    """The last word: where the generation stands at the end of the journal."""
    if kept is not None and status == "retired":
        until = "" if kept.kept_at is None else f" until {when(kept.kept_at + kept.window)}"
        return (f"It is kept for session {kept.name}'s resume{until}: "
                f"Manager(root, session={kept.name!r}) adopts it; after that, or with "
                "resume=False, a recovery removes it.")
    if status == "live" and owner is not None:
        holders = ", ".join(sorted(generation.leases)) or "no lease"
        return (f"It is still live: the current directory of manager {owner.id} "
                f"(pid {owner.pid}), held by {holders}.")
    if status == "retired":
        if generation.commands and not generation.leases:
            pids = ", ".join(sorted(c.partition(":")[0] for c in generation.commands))
            return (f"It is retired and not yet removed: its removal waits until no command "
                    f"it recorded (pid {pids}) runs and no lock holds it.")
        if generation.leases:
            return (f"It is retired and still held by lease(s) "
                    f"{', '.join(sorted(generation.leases))}; it goes when the last is released.")
        if owner is not None and owner.ended is not None:
            return (f"It is retired and not yet removed: its manager {owner.id} {owner.ended}; "
                    "the next recovery removes it once no command holds it.")
        return "It is retired and not yet removed."
    if status == "removing":
        return "Its removal was started and not finished; the next recovery finishes it."
    return ""


def _span_of(store: Store, gid: str) -> tuple[int | None, int | None]:
    """The seqs of the first event that names generation *gid* and of its removal's end."""
    first = finished = None
    for seq, _time, kind, payload in store.generation_rows([gid]):
        if kind not in _SPAN_KINDS:
            continue
        try:
            event = decode(seq, kind, payload)
        except RuleViolation as e:
            raise store.corrupt(e) from e
        if getattr(event, "generation", None) != gid:
            continue
        if first is None:
            first = seq
        # The end of its last removal: a power loss may have undone one.
        if kind == "removal.finished":
            finished = seq
        elif kind == "generation.reappeared":
            finished = None
    return first, finished
