"""The events of a session's life, and how they are written down.

Each lifecycle step is one frozen event.  An event says what happened and to
whom; when it happened and in which order is the job of the :class:`Record`
the store wraps around it.  Events are stored as a kind string and a JSON
object of their fields; :func:`encode` and :func:`decode` are the only places
that know this.
"""

from __future__ import annotations

import json
from typing import ClassVar, Final, TypeAlias

import attrs

from journal.errors import RuleViolation

__all__ = [
    "KINDS",
    "Event",
    "GenerationCreated",
    "GenerationReady",
    "LeaseAcquired",
    "LeaseReleased",
    "ManagerClosed",
    "ManagerDied",
    "ManagerOpened",
    "Record",
    "RecoveryStarted",
    "Released",
    "RemovalFinished",
    "RemovalStarted",
    "Retained",
    "Rotated",
    "decode",
    "encode",
]


@attrs.frozen
class ManagerOpened:
    """A manager came to life, holding its liveness lock, with no owners yet."""

    kind: ClassVar[str] = "manager.opened"
    manager: str
    pid: int


@attrs.frozen
class Retained:
    """An owner took a reference; a no-op once the manager is sealed."""

    kind: ClassVar[str] = "retain"
    manager: str


@attrs.frozen
class Released:
    """An owner dropped its reference; the last one seals the manager for good."""

    kind: ClassVar[str] = "release"
    manager: str


@attrs.frozen
class Rotated:
    """The current generation was retired; the next acquire makes a fresh one."""

    kind: ClassVar[str] = "rotate"
    manager: str


@attrs.frozen
class GenerationCreated:
    """A generation directory is about to be made under this name.

    Written before ``mkdir``, so after a crash the journal names every
    directory that may exist.
    """

    kind: ClassVar[str] = "generation.created"
    manager: str
    generation: str


@attrs.frozen
class GenerationReady:
    """The directory exists, is private and locked; this is its identity on disk."""

    kind: ClassVar[str] = "generation.ready"
    manager: str
    generation: str
    device: int
    inode: int


@attrs.frozen
class LeaseAcquired:
    """A command was handed the generation and keeps it alive until released."""

    kind: ClassVar[str] = "lease.acquired"
    manager: str
    generation: str
    lease: str


@attrs.frozen
class LeaseReleased:
    """A command gave its lease back."""

    kind: ClassVar[str] = "lease.released"
    manager: str
    generation: str
    lease: str


@attrs.frozen
class RemovalStarted:
    """A generation, or a stray entry with the generation prefix, is about to be removed.

    ``by`` is the manager or recovery pass doing it; ``reason`` says why in
    words meant for people.
    """

    kind: ClassVar[str] = "removal.started"
    generation: str
    by: str
    reason: str


@attrs.frozen
class RemovalFinished:
    """Nothing is left of the generation; ``outcome`` is "removed" or "absent"."""

    kind: ClassVar[str] = "removal.finished"
    generation: str
    by: str
    outcome: str


@attrs.frozen
class ManagerClosed:
    """The manager was closed: sealed, its leases void, its lock given up."""

    kind: ClassVar[str] = "manager.closed"
    manager: str


@attrs.frozen
class RecoveryStarted:
    """A recovery pass began acting on the root."""

    kind: ClassVar[str] = "recovery.started"
    recovery: str
    pid: int


@attrs.frozen
class ManagerDied:
    """A recovery pass found the manager's liveness lock free: its process is gone."""

    kind: ClassVar[str] = "manager.dead"
    manager: str
    recovery: str


Event: TypeAlias = (
    ManagerOpened
    | Retained
    | Released
    | Rotated
    | GenerationCreated
    | GenerationReady
    | LeaseAcquired
    | LeaseReleased
    | RemovalStarted
    | RemovalFinished
    | ManagerClosed
    | RecoveryStarted
    | ManagerDied
)

KINDS: Final[dict[str, type[Event]]] = {
    cls.kind: cls
    for cls in (
        ManagerOpened,
        Retained,
        Released,
        Rotated,
        GenerationCreated,
        GenerationReady,
        LeaseAcquired,
        LeaseReleased,
        RemovalStarted,
        RemovalFinished,
        ManagerClosed,
        RecoveryStarted,
        ManagerDied,
    )
}

# Field names and types of each kind, for checking payloads read from disk.
_FIELDS: Final[dict[str, dict[str, type]]] = {
    kind: {a.name: (int if a.type in ("int", int) else str) for a in attrs.fields(cls)}
    for kind, cls in KINDS.items()
}


@attrs.frozen
class Record:
    """An event as committed: its place in the global order and its wall-clock time."""

    seq: int
    time: float
    event: Event


def encode(event: Event) -> tuple[str, str]:
    """Return the ``(kind, payload)`` pair stored for *event*."""
    return event.kind, json.dumps(attrs.asdict(event), separators=(",", ":"), sort_keys=True)


def decode(seq: int, kind: str, payload: str) -> Event:
    """Rebuild the event stored as ``(kind, payload)`` at *seq*, checking its schema.

    Raises :class:`RuleViolation` for a kind this version does not know or a
    payload that does not fit its kind.
    """
    cls = KINDS.get(kind)
    if cls is None:
        raise RuleViolation(seq, f"has kind {kind!r}, which this version does not know")
    try:
        fields = json.loads(payload)
    except ValueError as e:
        raise RuleViolation(seq, f"has a payload that is not JSON ({e})") from None
    expected = _FIELDS[kind]
    if not isinstance(fields, dict) or fields.keys() != expected.keys():
        raise RuleViolation(seq, f"has a payload that does not fit kind {kind!r}: {payload}")
    for name, typ in expected.items():
        value = fields[name]
        # bool is an int to Python but never a valid field here.
        if type(value) is not typ:
            raise RuleViolation(seq, f"has field {name!r} of the wrong type: {payload}")
    return cls(**fields)
