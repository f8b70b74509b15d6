"""Durability: which appends are synced before they return, in each mode.

``"full"`` syncs every append but a removal's end; ``"relaxed"`` syncs only
the events a file-system effect follows (a generation's creation before its
mkdir, a removal's start before its rename, the manager's end before its
lock file goes) and an artifact's record, and lets the others reach the
disk with the next sync.  The manager asks :func:`synced` on every append:
one dict lookup for one event.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from .errors import BadInput
from .events import (
    KINDS,
    ArtifactKept,
    Event,
    GenerationCreated,
    GenerationMeasured,
    ManagerClosed,
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
_WRITE_AHEAD: Final = (GenerationCreated, RemovalStarted, ManagerClosed, ArtifactKept)
# Synced in neither mode: a measurement is telemetry, and one lost
# leaves the last one before it as the generation's size.  Not syncing it
# also keeps a periodic measurement from costing an fsync.  A refusal for
# space (SpaceRefused) is in neither list: in "full" it is on disk before
# its caller is told, as every answer is; in "relaxed" no effect follows it.
_NEVER_SYNCED: Final = (RemovalFinished, GenerationMeasured)

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
