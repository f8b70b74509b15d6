"""``verify``: every check there is, over the whole journal.

SQLite's integrity, the gap-free sequence and the digest chain (from
:meth:`Store.verify`), each payload's schema, the lifecycle rules (lenient:
every violation is listed and its event skipped), every stored checkpoint
against the state folded from where the kept history starts (event 1, until
history is retired), and the reducer's invariants on the final state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import attrs

from sessiontemp.inspect.read import Problem, Progress, as_path, opened
from sessiontemp.journal import checkpoint, history
from sessiontemp.journal.errors import CheckpointInvalid
from sessiontemp.journal.events import Record
from sessiontemp.journal.reducer import Fold, State
from sessiontemp.journal.store import Store

__all__ = ["Verification", "verify"]


@attrs.frozen
class Verification:
    """The result of checking a journal; ``mode`` is "quick" (summary) or "full"."""

    journal: Path
    mode: Literal["quick", "full"]
    events: int
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        """True when no check found a problem."""
        return not self.problems


def verify(journal: os.PathLike[str] | str, *, progress: Progress | None = None
           ) -> Verification:
    """Every check there is: SQLite integrity, sequence and digest chain, kinds and payloads,
    the lifecycle rules (lenient: every violation is listed, the event skipped) and the
    reducer's invariants on the final state."""
    path = as_path(journal, "the journal")
    problems: list[Problem] = []
    with opened(path, snapshot=True) as store:
        for message in store.verify():
            check, _, text = message.partition(": ")
            problems.append(Problem(_seq_in(text), check if check in (
                "integrity", "sequence") else "digest", message))
        claims, problems_of_checkpoints = _checkpoints(store)
        lenient: list[Problem] = []

        def compare(record: Record, draft: Fold) -> None:
            claim = claims.pop(record.seq, None)
            if claim is not None and claim != draft.state():
                problems_of_checkpoints.append(Problem(record.seq, "checkpoints", (
                    f"checkpoint at event {record.seq} does not match the state replayed "
                    "from the events, so replays starting from it go wrong: delete its row "
                    "from the table checkpoints (the next recovery writes a new one)")))

        start = history.start(store)
        if not start.usable:
            # The first kept segment begins with the checkpoint of the event
            # before its first; the chain check above ties it to the events.
            problems.append(Problem(start.seq, "checkpoints", (
                f"history up to event {start.seq} was retired, yet no usable checkpoint of "
                "that event is kept, so the events after it cannot be replayed")))
        # The checkpoints of history recorded retired, in files not yet
        # deleted (a retirement under way in another process, or one a crash
        # cut short between its record and its deletions): the fold of the
        # kept history starts after them, so none is compared, nor missed.
        for seq in [seq for seq in claims if seq <= start.state.seq]:
            del claims[seq]
        state = history.fold(store, progress=progress, lenient=lenient,
                             each=compare if claims else None)
        count = store.last_seq()
    problems += [p for p in lenient if p.check != "sequence"]
    problems += problems_of_checkpoints
    problems += [Problem(seq, "checkpoints", f"checkpoint at event {seq} could not be compared: "
                         "the replay skipped that event") for seq in sorted(claims)]
    problems += _invariants(state)
    return Verification(path, "full", count, tuple(problems))


def _invariants(state: State) -> list[Problem]:
    problems = []
    for g in sorted(state.generations.values(), key=lambda g: g.created_seq):
        if g.removal is not None and g.leases:
            problems.append(Problem(g.removal_seq, "invariants",
                                    f"generation {g.id} is being removed yet leased"))
    for m in sorted(state.managers.values(), key=lambda m: m.opened_seq):
        if m.owners < 0:
            problems.append(Problem(None, "invariants", f"manager {m.id} has {m.owners} owners"))
        if m.ended is not None and m.current is not None:
            problems.append(Problem(m.ended_seq, "invariants",
                                    f"manager {m.id} ended with a current generation"))
    return problems


def _checkpoints(store: Store) -> tuple[dict[int, State], list[Problem]]:
    """The states the journal's checkpoints claim, by seq, and the ones that cannot be read.

    One of a format this version does not read is no problem: the next
    recovery writes a checkpoint this version reads.
    """
    claims: dict[int, State] = {}
    problems: list[Problem] = []
    for seq, format, chained in store.checkpoints():
        if format != checkpoint.FORMAT:
            continue
        if not chained:
            problems.append(Problem(seq, "checkpoints", (
                f"checkpoint at event {seq} was derived from another history; replays skip it")))
            continue
        try:
            claims[seq] = checkpoint.decode(store.checkpoint_state(seq))
        except CheckpointInvalid as e:
            problems.append(Problem(seq, "checkpoints",
                                    f"checkpoint at event {seq} {e.reason}; replays skip it"))
    return claims, problems


def _seq_in(text: str) -> int | None:
    for word in text.replace(",", " ").split():
        if word.isdigit():
            return int(word)
    return None
