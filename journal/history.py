"""Finished history: what the journal's records say of generations the state has let go of.

The reducer's state forgets a generation once its removal finishes (see
:mod:`sessiontemp.journal.reducer`).  A few readers still need such a generation: a
recovery pass that finds one on disk again after a power loss (whose was
it, what identity did it have, was its removal refused?) and ``fsck``
(journaled as removed, still present).  They ask the journal, through
:meth:`sessiontemp.journal.store.Store.generation_rows`, which reads only the records
of the generations asked about, through an index.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from .errors import RuleViolation
from .events import (
    CommandStarted,
    GenerationCreated,
    GenerationReady,
    Reappeared,
    RemovalFinished,
    RemovalStarted,
    decode,
)
from .reducer import REAPPEARED, command_key
from .store import Store

__all__ = ["Past", "pasts"]


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
