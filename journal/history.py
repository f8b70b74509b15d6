"""The one read model: the kept history, from the state where it starts, folded once.

Every reader of a journal (``journal-inspect``'s summary, state, explain,
usage, timeline, verify and fsck, and the library's own queries) reads the
past and the present here, and none folds events itself
(``tests/test_architecture.py`` holds the tree to that).

Once retention has retired history, event 1 is gone: what is known starts
at the state after the last event retired, which the first kept segment
holds as its checkpoint (:func:`start`), and goes on with the events kept
after it (:func:`fold`, from there or from any newer checkpoint).  A moment
before that is answered with :class:`~.errors.HistoryRetired`, never with
another moment's state (:func:`kept`); what that state does not hold (the
labels of the leases taken before it, the records of what finished before
it) a reader says in words, from :class:`Start`.

Finished history: the reducer's state forgets a generation once its
removal finishes (see :mod:`sessiontemp.journal.reducer`).  A few readers
still need such a generation: a recovery pass that finds one on disk again
after a power loss (whose was it, what identity did it have, was its
removal refused?) and ``fsck`` (journaled as removed, still present).  They
ask :func:`pasts`, which reads only the records of the generations asked
about, through an index.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Final

import attrs

from . import checkpoint
from .errors import HistoryRetired, RuleViolation
from .events import (
    CommandStarted,
    Event,
    GenerationCreated,
    GenerationReady,
    Reappeared,
    Record,
    RemovalFinished,
    RemovalStarted,
    Unreadable,
    decode,
)
from .reducer import EMPTY, REAPPEARED, Fold, Forgotten, State, command_key
from .store import History, Store

__all__ = ["PROGRESS_EVERY", "Past", "Problem", "Start", "begin", "fold", "kept", "pasts", "start"]

# How often (in events) a long fold reports its progress.
PROGRESS_EVERY: Final = 50_000


@attrs.frozen
class Problem:
    """One thing wrong: the event it concerns (None for the whole file), the check, why."""

    seq: int | None
    check: str
    message: str


@attrs.frozen
class Start:
    """Where the kept history starts: right after event ``seq`` (0: nothing was retired).

    ``state`` is the state there: the checkpoint the first kept segment
    starts with (the empty state when nothing was retired).  ``usable`` is
    False when no usable checkpoint of event ``seq`` is kept, and ``state``
    is then an older one (or empty): the events kept after it cannot be
    folded onto it, and a reader says so.  ``time`` is the time of the
    first event kept (None while none is), ``history`` what the store
    says of its retirements.
    """

    seq: int
    state: State
    history: History
    time: float | None = None
    usable: bool = True

    @property
    def first(self) -> int:
        """The first event of the kept history."""
        return self.seq + 1


def start(store: Store) -> Start:
    """Where the kept history of *store* starts, and the state there."""
    history = store.history()
    retired = history.retired_until
    state = EMPTY if not retired else checkpoint.origin(store).state
    time = store.times_of([retired + 1]).get(retired + 1)
    return Start(retired, state, history, time, state.seq == retired)


def begin(store: Store, after: int | None = 0) -> State:
    """The state a fold from *after* starts with (see :func:`fold`).

    The newest usable checkpoint at or before event *after* (None: the
    newest of all), never one before where the kept history starts.
    """
    retired = store.history().retired_until
    state = EMPTY
    if after is None or after > retired:
        state = checkpoint.restore(store, until=after).state
    if state.seq < retired:
        state = max(state, checkpoint.origin(store).state, key=lambda s: s.seq)
    return state


def kept(store: Store, seq: int) -> None:
    """Raise :class:`HistoryRetired` when the state right after event *seq* is no longer known.

    It is known from the last event retired on (the checkpoint there);
    before it, only another moment's state could be told, which is never
    an answer.
    """
    retired = store.history().retired_until
    if seq < retired:
        raise HistoryRetired(store.path, seq, retired)


def fold(
    store: Store,
    *,
    after: int | None = 0,
    start: State | None = None,
    until: int | None = None,
    lenient: list[Problem] | None = None,
    each: Callable[[Record, Fold], None] | None = None,
    forgotten: Forgotten | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> State:
    """The state right after event *until* (None: the last), strict unless *lenient*.

    The fold starts at the newest usable checkpoint at or before event
    *after* (None: the newest of all), and never before where the kept
    history starts (0, the default: from there, which is where every
    finished manager and generation of the kept history is seen): once
    history was retired, event 1 is gone, and the first kept segment holds
    the state after the last event retired.  A moment before that
    (*until*) raises :class:`HistoryRetired`.  A *start* given (the state
    :func:`begin` gave: a reader that needs it before the fold) is where it
    starts instead.

    Strict: a gap or an event that breaks the rules raises
    :class:`JournalCorrupt`.  Lenient: the fold is the reducer's tolerant
    one, as recovery's is: each such record is recorded in *lenient* and
    refused, and whatever it names is held (``State.held``).  *each* sees
    every record the rules accept, after it is applied; *forgotten* keeps
    what the state lets go of (finished generations, ended managers);
    *progress* is called with (events done, events in all) now and then.
    """
    state = begin(store, after) if start is None else start
    if until is not None and until < state.seq:
        raise HistoryRetired(store.path, until, store.history().retired_until)
    total = store.last_seq() if until is None else until
    draft = Fold(state, tolerant=lenient is not None, history=forgotten)
    expected = state.seq + 1
    step = draft.step
    for seq, time, kind, payload, _ in store.rows(after=state.seq, until=until):
        if seq != expected:
            gap = RuleViolation(seq, f"follows event {expected - 1}: a gap")
            if lenient is None:
                raise store.corrupt(gap)
            lenient.append(Problem(seq, "sequence", str(gap)))
        expected = seq + 1
        event: Event
        try:
            event = decode(seq, kind, payload)
        except RuleViolation as e:
            if lenient is None:
                raise store.corrupt(e) from e
            lenient.append(Problem(seq, "schema", str(e)))
            # Refused by the fold below, which holds whatever it may name.
            event = Unreadable(kind, payload, e.reason)
        record = Record(seq, time, event)
        refused = len(draft.refused)
        try:
            step(record)
        except RuleViolation as e:
            raise store.corrupt(e) from e
        if len(draft.refused) > refused:
            if lenient is not None and not isinstance(event, Unreadable):
                lenient.append(Problem(seq, "rules", str(draft.refused[-1])))
            continue
        if each is not None:
            each(record, draft)
        if progress is not None and seq % PROGRESS_EVERY == 0:
            progress(seq, total)
    if progress is not None:
        progress(total, total)
    return draft.state()


# -- finished history --------------------------------------------------------------


@attrs.frozen
class Past:
    """One generation as its own records tell it.

    ``manager`` is None for a stray (its first record was a removal);
    ``removal_seq`` is the seq of the event that started its last removal
    (a ``removal.started`` or a ``generation.reappeared``), None when none
    started; ``outcome`` and ``finished_seq`` are those of the end of that
    removal, None while it has not finished.
    """

    id: str
    manager: str | None
    device: int | None = None
    inode: int | None = None
    commands: frozenset[str] = frozenset()
    removal_seq: int | None = None
    removal_reason: str | None = None
    outcome: str | None = None
    finished_seq: int | None = None

    @property
    def removed(self) -> bool:
        """Whether its last removal finished (removed, absent or refused)."""
        return self.outcome is not None

    @property
    def identity(self) -> tuple[int, int] | None:
        """The (device, inode) journaled when its directory was made, None if never."""
        return None if self.device is None or self.inode is None else (self.device, self.inode)


def pasts(store: Store, generations: Collection[str], *, until: int | None = None
          ) -> dict[str, Past]:
    """What the records up to *until* tell of each of *generations* they name.

    A record that does not decode is passed over: a fold refuses it and
    holds what it names, which every caller checks first.
    """
    found: dict[str, Past] = {}
    for seq, _time, kind, payload in store.generation_rows(generations, until=until):
        try:
            event = decode(seq, kind, payload)
        except RuleViolation:
            continue
        gid = getattr(event, "generation", None)
        if not isinstance(gid, str):
            continue
        past = found.get(gid)
        match event:
            case GenerationCreated(manager=m) if past is None:
                found[gid] = Past(gid, m)
            case RemovalStarted() | Reappeared():
                reason = event.reason if isinstance(event, RemovalStarted) else REAPPEARED
                found[gid] = attrs.evolve(
                    past or Past(gid, None), removal_seq=seq, removal_reason=reason,
                    outcome=None, finished_seq=None)
            case _ if past is None:
                continue
            case GenerationReady(device=device, inode=inode):
                found[gid] = attrs.evolve(past, device=device, inode=inode)
            case CommandStarted(pid=pid, started=started):
                found[gid] = attrs.evolve(past, commands=past.commands | {
                    command_key(pid, started)})
            case RemovalFinished(outcome=outcome) if past.removal_seq is not None:
                found[gid] = attrs.evolve(past, outcome=outcome, finished_seq=seq)
            case _:
                pass
    return found
