"""``state``: the derived state right after one event, or at one moment.

The reducer's state holds only what is alive or owes work; ``state`` lists
every manager and generation seen up to that moment, so the finished ones
come from the records: the fold starts where the kept history starts and
keeps what it lets go of (a :class:`~sessiontemp.journal.reducer.Forgotten`).  With *live*
only, it lists what the state holds, from the newest checkpoint on.  A
moment before the kept history is :class:`~sessiontemp.HistoryRetired`: the
state there is no longer known, and another moment's is never shown.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from sessiontemp.inspect.read import Problem, Progress, as_path, opened
from sessiontemp.journal import history
from sessiontemp.journal.errors import BadInput
from sessiontemp.journal.reducer import Forgotten, State

__all__ = ["StateAt", "state_at"]


@attrs.frozen
class StateAt:
    """The derived state right after event ``seq`` (0: before any), written at ``time``.

    ``state`` holds every manager and generation seen by then, finished
    ones included (only what is live with *live*).  ``refused`` lists the
    seqs of records the lifecycle rules refuse; what they name is held in
    ``state.held``, as recovery holds it.
    """

    journal: Path
    seq: int
    time: float | None
    state: State
    refused: tuple[int, ...] = ()


def state_at(journal: os.PathLike[str] | str, at: int | float | None = None, *,
             progress: Progress | None = None, live: bool = False) -> StateAt:
    """The state right after event *at* (an int) or the last event at or before a time.

    None means the end of the journal.  A sequence number past the end is an
    error (ValueError); a time before the first event gives the empty state.
    A moment before where the kept history starts (retention retired the
    events before it; a time before its first event, once history was
    retired) raises :class:`~sessiontemp.HistoryRetired`.  The fold is
    tolerant, as recovery's is: a record the rules refuse is skipped and
    listed.  Every manager and generation seen by then is listed (those of
    the kept history, and what was live where it starts), which takes a
    fold from where the kept history starts; *live* lists only what is
    alive or owes work, folded from the newest checkpoint at or before it.
    """
    path = as_path(journal, "the journal")
    with opened(path, snapshot=True) as store:
        last = store.last_seq()
        if at is None:
            seq = last
        elif isinstance(at, int):
            if at < 0 or at > last:
                raise BadInput(f"event {at}", f"is not in the journal, which holds events 1 "
                               f"to {last}", "Pass a sequence number in that range, or a time")
            seq = at
        else:
            seq = store.seq_at(at)
        # Before the kept history nothing is known: not even "nothing yet"
        # for a time before its first event, which may follow retired ones.
        history.kept(store, seq)
        refused: list[Problem] = []
        state = State()
        if seq and live:
            state = history.fold(store, after=seq, until=seq, progress=progress,
                                 lenient=refused)
        elif seq:
            # What has finished is only in the records: no checkpoint holds it.
            forgotten = Forgotten()
            state = forgotten.whole(history.fold(store, until=seq, progress=progress,
                                                 lenient=refused, forgotten=forgotten))
        time = store.times_of([seq]).get(seq)
    return StateAt(path, seq, time, state, tuple(
        p.seq for p in refused if p.seq is not None and p.check in ("rules", "schema")))
