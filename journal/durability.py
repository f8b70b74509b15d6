"""Durability: which appends are synced before they return, in each mode.

``"relaxed"`` syncs only the events a file-system effect follows (a
generation's creation before its mkdir, a removal's start before its
rename, the manager's end before its lock file goes) and an artifact's
record, and lets the others reach the disk with the next sync.  ``"full"``
syncs every append but three kinds: a removal's end, a measurement, and the
records of a holder (a lease taken, a command started on it, a lease given
back), which a power loss makes moot (see below).  An append of several
events is synced when any of them is: in "full", a new generation's first
lease is, with the generation's identity.  The manager asks :func:`synced` on every append:
one dict lookup for one event.  A recovery pass appends through
:meth:`Ledger.append`, which syncs every commit, in either mode.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from .errors import BadInput
from .events import (
    KINDS,
    ArtifactKept,
    CommandStarted,
    Event,
    GenerationCreated,
    GenerationMeasured,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    Reappeared,
    RemovalFinished,
    RemovalStarted,
)

__all__ = ["DURABILITY", "Durability", "check", "synced"]

Durability: TypeAlias = Literal["full", "relaxed"]
DURABILITY: Final[tuple[Durability, ...]] = ("full", "relaxed")

# The events a file-system effect follows (a mkdir, a rename, the liveness
# file's unlink): synced before it in either mode.  A removal's end is
# synced in neither: lost, it leaves the removal started, which recovery
# finishes as it would have (and the rmdir it records is not synced either).
# An artifact's record is synced in both too: its caller is told the file is
# kept, and without the record a recovery would remove it as unreferenced.
# (A reappeared directory's record is a removal's start too: a recovery
# pass's, which syncs every commit anyway.)
_WRITE_AHEAD: Final = (GenerationCreated, RemovalStarted, Reappeared, ManagerClosed,
                       ArtifactKept)
# Synced in neither mode: a measurement is telemetry, and one lost
# leaves the last one before it as the generation's size.  Not syncing it
# also keeps a periodic measurement from costing an fsync.
# A holder's records (a lease taken, a command started on it, a lease
# given back) are not synced either.  No file-system effect follows them
# (a lease's lock is dropped only once its release is committed, which a
# process crash keeps: the frames are in the -wal file).  What a power
# loss can drop of them describes processes the power loss ended too, and
# locks it dropped too; recovery decides by locks and liveness and removes
# a dead manager's generations whatever their leases said, so a lease or
# its release lost changes nothing it does.  They are the harness's hot
# path: synced, they cost an fdatasync each, three per command.  A release
# that makes its generation's removal due is made durable by the removal's
# start, synced before the rename; a lease taken with a new generation
# shares the sync of the generation's identity (in "full").
# A refusal for space (SpaceRefused) is in neither list: in "full" it is
# on disk before its caller is told, as every answer is; in "relaxed" no
# effect follows it.
_NEVER_SYNCED: Final = (RemovalFinished, GenerationMeasured, LeaseAcquired, CommandStarted,
                        LeaseReleased)

# Looked up by the event's class (events are final classes).
_SYNCED: Final[dict[Durability, dict[type, bool]]] = {
    "full": {cls: issubclass(cls, _WRITE_AHEAD) or not issubclass(cls, _NEVER_SYNCED)
             for cls in KINDS.values()},
    "relaxed": {cls: issubclass(cls, _WRITE_AHEAD) for cls in KINDS.values()},
}


def check(durability: object) -> Durability:
    """*durability* if it names a mode; BadInput naming the modes otherwise."""
    for mode in DURABILITY:
        if durability == mode:
            return mode
    raise BadInput("durability", f"must be one of {', '.join(map(repr, DURABILITY))}, "
                   f"not {durability!r}", "Pass one of them")


def synced(durability: Durability, events: tuple[Event, ...]) -> bool:
    """Whether an append of *events* must be durable before it returns, in *durability*."""
    table = _SYNCED[durability]
    if len(events) == 1:
        return table[type(events[0])]
    return any(table[type(event)] for event in events)
