"""The events of a session's life, and how they are written down.

Each lifecycle step is one frozen event.  An event says what happened and to
whom; when it happened and in which order is the job of the :class:`Record`
the store wraps around it.  Events are stored as a kind string and a JSON
object of their fields; :func:`encode` and :func:`decode` are the only places
that know this.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import ClassVar, Final, TypeAlias

import attrs

from . import ids
from .errors import RuleViolation, UnknownKind

__all__ = [
    "KINDS",
    "ArtifactKept",
    "ArtifactRemoved",
    "CommandStarted",
    "Event",
    "GenerationCreated",
    "GenerationMeasured",
    "GenerationReady",
    "LeaseAcquired",
    "LeaseReleased",
    "ManagerClosed",
    "ManagerDied",
    "ManagerOpened",
    "Reappeared",
    "Record",
    "RecoveryStarted",
    "Released",
    "RemovalFinished",
    "RemovalStarted",
    "Retained",
    "Rotated",
    "SessionAdopted",
    "SessionClaimed",
    "SessionDiscarded",
    "SpaceRefused",
    "Unreadable",
    "decode",
    "encode",
    "named_ids",
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
class GenerationMeasured:
    """A live generation's size, as its manager's walk of it found it at *time*.

    ``bytes`` is the space allocated (hard links counted once), ``inodes``
    the entries, ``unread`` how many entries the walk could not read (it
    counts what it saw and says so rather than guess).  Telemetry: losing
    one to a power loss changes nothing but the history of sizes.
    """

    kind: ClassVar[str] = "generation.measured"
    manager: str
    generation: str
    bytes: int
    inodes: int
    time: float
    unread: int


@attrs.frozen
class SpaceRefused:
    """An acquire was refused for space, and no command started.

    ``cause`` names the limit that refused it, as the manager's option is
    named: ``"max_bytes"`` or ``"max_inodes"`` (the directory, as last
    measured, is over its budget) or ``"min_free_bytes"`` (the root's file
    system has less free than that).  ``found`` is what was found (the
    directory's bytes or inodes, or the free bytes), ``limit`` the limit.
    ``generation`` is the directory refused; for a low disk, the current
    one, or "" when the manager had none yet.  A record of the answer the
    caller was given: it changes nothing in the lifecycle.
    """

    kind: ClassVar[str] = "space.refused"
    manager: str
    generation: str
    cause: str
    found: int
    limit: int


@attrs.frozen
class LeaseAcquired:
    """A command was handed the generation and keeps it alive until released.

    ``label`` says, for people, what the lease is for; journals written
    before it existed have none.
    """

    kind: ClassVar[str] = "lease.acquired"
    manager: str
    generation: str
    lease: str
    label: str = ""


@attrs.frozen
class CommandStarted:
    """A process was started on a lease: removal waits for it as long as it runs.

    ``started`` is the process's start time in clock ticks since boot (field
    22 of ``/proc/PID/stat``): with the pid, it names one process for good,
    where a pid alone is soon reused.  It is the second liveness signal,
    for a command that closes the lease's inherited lock descriptor.
    """

    kind: ClassVar[str] = "command.started"
    manager: str
    generation: str
    lease: str
    pid: int
    started: int


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
class Reappeared:
    """A generation journaled as removed is on disk again, and is about to be removed again.

    Directory operations are not fsynced, so a power loss can undo a removal
    the journal already holds; its removal starts over.
    """

    kind: ClassVar[str] = "generation.reappeared"
    generation: str
    by: str


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


@attrs.frozen
class SessionClaimed:
    """A manager became the one owner of a named session, holding the session's lock.

    ``window_ms`` is how long, after this manager's death is journaled, its
    current generation is kept for a successor to resume (milliseconds).
    """

    kind: ClassVar[str] = "session.claimed"
    manager: str
    session: str
    window_ms: int


@attrs.frozen
class SessionAdopted:
    """The session's new owner took over the generation its dead owner *previous* left.

    The generation, with its files, becomes the manager's current one.
    """

    kind: ClassVar[str] = "session.adopted"
    manager: str
    session: str
    generation: str
    previous: str


@attrs.frozen
class SessionDiscarded:
    """The generation a session's dead owner left is no longer kept for a resume.

    From here on the orphan rules remove it.  ``reason`` says why, for
    people: the resume window passed, a new owner started afresh, or the
    session was removed.
    """

    kind: ClassVar[str] = "session.discarded"
    session: str
    by: str
    reason: str


@attrs.frozen
class ArtifactKept:
    """A file was copied into the root's artifact store, and is durable.

    Written only once the copy and its directory are fsynced, so a record
    always names a complete file with this digest and size.
    """

    kind: ClassVar[str] = "artifact.kept"
    manager: str
    artifact: str
    label: str
    sha256: str
    size: int


@attrs.frozen
class ArtifactRemoved:
    """An artifact is about to be deleted, by an explicit call.

    Written before the unlink: a crash in between leaves a file no record
    names, which fsck reports and recovery removes.
    """

    kind: ClassVar[str] = "artifact.removed"
    artifact: str
    by: str


@attrs.frozen
class Unreadable:
    """A stored record that does not decode, as a tolerant reader passes it on.

    Never written: it stands for a record whose kind this version does not
    know, or whose payload is damaged, so that the reducer can refuse it and
    hold on to whatever it may name instead of failing the whole replay.
    """

    kind: ClassVar[str] = "unreadable"
    stored_kind: str
    payload: str
    reason: str


Event: TypeAlias = (
    ManagerOpened
    | Retained
    | Released
    | Rotated
    | GenerationCreated
    | GenerationReady
    | GenerationMeasured
    | SpaceRefused
    | LeaseAcquired
    | LeaseReleased
    | CommandStarted
    | RemovalStarted
    | RemovalFinished
    | Reappeared
    | ManagerClosed
    | RecoveryStarted
    | ManagerDied
    | SessionClaimed
    | SessionAdopted
    | SessionDiscarded
    | ArtifactKept
    | ArtifactRemoved
    | Unreadable
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
        GenerationMeasured,
        SpaceRefused,
        LeaseAcquired,
        LeaseReleased,
        CommandStarted,
        RemovalStarted,
        RemovalFinished,
        Reappeared,
        ManagerClosed,
        RecoveryStarted,
        ManagerDied,
        SessionClaimed,
        SessionAdopted,
        SessionDiscarded,
        ArtifactKept,
        ArtifactRemoved,
    )
}

# The JSON type of each field annotation; any other is a str.
_FIELD_TYPES: Final[dict[object, type]] = {"int": int, int: int, "float": float, float: float}
# Field names and types of each kind, for checking payloads read from disk.
_FIELDS: Final[dict[str, dict[str, type]]] = {
    kind: {a.name: _FIELD_TYPES.get(a.type, str)
           for a in attrs.fields(attrs.resolve_types(cls))}
    for kind, cls in KINDS.items()
}
# Fields a payload may lack: added after journals were first written.
_OPTIONAL: Final[dict[str, frozenset[str]]] = {
    kind: frozenset(a.name for a in attrs.fields(cls) if a.default is not attrs.NOTHING)
    for kind, cls in KINDS.items()
}
# Per known kind, in the order sort_keys gives: each field's JSON key (a
# Python name: nothing to escape) with its colon, and the field's name.
_LAYOUT: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    kind: tuple((f'"{name}":', name) for name in sorted(fields)) for kind, fields in _FIELDS.items()
}
# What json.dumps quotes a str with, ensure_ascii being its default.
_quote: Final = encode_basestring_ascii
# Longest free text accepted in a record (reasons, labels): a damaged
# length would otherwise flood every report that quotes it.
_MAX_TEXT: Final = 4096


def _pattern(regex: re.Pattern[str], what: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        return None if regex.fullmatch(str(value)) else f"is not {what}"
    return check


def _at_least(low: int) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        return None if isinstance(value, int) and value >= low else f"is below {low}"
    return check


def _finite_time(value: object) -> str | None:
    ok = isinstance(value, float) and math.isfinite(value) and value >= 0
    return None if ok else "is not a finite time at or after the epoch"


def _manager_or_recovery(value: object) -> str | None:
    text = str(value)
    if ids.MANAGER.fullmatch(text) or ids.RECOVERY.fullmatch(text):
        return None
    return "is neither a canonical manager id nor a recovery id"


def _text(value: object) -> str | None:
    return None if len(str(value)) <= _MAX_TEXT else f"is longer than {_MAX_TEXT} characters"


# How each field is checked beyond its type; ids end up in file names.
_CHECKS: Final[dict[str, Callable[[object], str | None]]] = {
    "manager": _pattern(ids.MANAGER, "a canonical manager id"),
    "generation": _pattern(ids.GENERATION, "a canonical generation id"),
    "lease": _pattern(ids.LEASE, "a canonical lease id"),
    "recovery": _pattern(ids.RECOVERY, "a canonical recovery id"),
    "by": _manager_or_recovery,
    "pid": _at_least(1),
    "device": _at_least(0),
    "inode": _at_least(0),
    "started": _at_least(0),
    "reason": _text,
    "outcome": _text,
    "label": _text,
    "session": _pattern(ids.SESSION, "a session name (1-64 of A-Z a-z 0-9 . _ -, not . or ..)"),
    "previous": _pattern(ids.MANAGER, "a canonical manager id"),
    "artifact": _pattern(ids.ARTIFACT, "a canonical artifact id"),
    "sha256": _pattern(ids.SHA256, "a SHA-256 digest in lower-case hex"),
    "size": _at_least(0),
    "window_ms": _at_least(0),
    "bytes": _at_least(0),
    "inodes": _at_least(0),
    "unread": _at_least(0),
    "found": _at_least(0),
    "limit": _at_least(0),
    "time": _finite_time,
}
# Checks of one kind's field that are stricter than the field's own: an
# artifact's label ends up in a file name.
_KIND_CHECKS: Final[dict[tuple[str, str], Callable[[object], str | None]]] = {
    ("artifact.kept", "label"): _pattern(
        ids.ARTIFACT_LABEL, "an artifact label (1-80 of A-Z a-z 0-9 . _ -, starting with a "
        "letter or digit)"),
    # A low disk may be refused before the manager made any directory.
    ("space.refused", "generation"): _pattern(
        re.compile(f"(?:{ids.GENERATION.pattern})?"), "a canonical generation id, or empty"),
    ("space.refused", "cause"): _pattern(
        re.compile("max_bytes|max_inodes|min_free_bytes"),
        "one of max_bytes, max_inodes, min_free_bytes"),
}
_ID_FIELDS: Final = ("manager", "generation", "by", "recovery", "previous")
# Anything in a damaged payload that looks like an id: a reader holds on to
# whatever such a record might name.
_ID_LIKE: Final = re.compile(r"[0-9a-f]{32}|[a-z2-7]{16}")


@attrs.frozen
class Record:
    """An event as committed: its place in the global order and its wall-clock time."""

    seq: int
    time: float
    event: Event


def encode(event: Event) -> tuple[str, str]:
    """Return the ``(kind, payload)`` pair stored for *event*.

    The payload is ``json.dumps(fields, separators=(",", ":"),
    sort_keys=True)``, byte for byte: the digest chain covers it.
    """
    layout = _LAYOUT.get(event.kind)
    if layout is not None:
        # Every field of a known kind is a str, an int or a float: written out
        # directly, at a third of json.dumps's cost, on every append.
        parts = []
        for key, name in layout:
            value = getattr(event, name)
            if type(value) is str:
                parts.append(key + _quote(value))
            elif type(value) is int:
                parts.append(key + int.__repr__(value))
            elif type(value) is float and math.isfinite(value):
                # What json.dumps writes for a finite float.
                parts.append(key + float.__repr__(value))
            else:
                break
        else:
            return event.kind, "{" + ",".join(parts) + "}"
    names = _FIELDS.get(event.kind)
    fields = attrs.asdict(event) if names is None else {n: getattr(event, n) for n in names}
    return event.kind, json.dumps(fields, separators=(",", ":"), sort_keys=True)


def decode(seq: int, kind: str, payload: str) -> Event:
    """Rebuild the event stored as ``(kind, payload)`` at *seq*, checking its schema.

    Raises :class:`UnknownKind` for a kind this version does not know and
    :class:`RuleViolation` for a payload that does not fit its kind: a field
    missing, extra, of the wrong type, or an id not in its canonical form.
    """
    cls = KINDS.get(kind)
    if cls is None:
        raise UnknownKind(seq, f"has kind {kind[:80]!r}, which this version does not know")
    try:
        fields = json.loads(payload)
    except ValueError as e:
        raise RuleViolation(seq, f"has a payload that is not JSON ({e})") from None
    expected = _FIELDS[kind]
    if not isinstance(fields, dict) or not (
        expected.keys() - _OPTIONAL[kind] <= fields.keys() <= expected.keys()
    ):
        raise RuleViolation(seq, f"has a payload that does not fit kind {kind!r}: "
                            f"{payload[:300]}")
    for name, value in fields.items():
        # bool is an int to Python but never a valid field here.
        if type(value) is not expected[name]:
            raise RuleViolation(seq, f"has field {name!r} of the wrong type: {payload[:300]}")
        check = _KIND_CHECKS.get((kind, name)) or _CHECKS.get(name)
        problem = None if check is None else check(value)
        if problem is not None:
            raise RuleViolation(seq, f"has field {name!r} that {problem}: {str(value)[:80]!r}")
    return cls(**fields)


def named_ids(event: Event) -> frozenset[str]:
    """The manager, generation and recovery ids *event* names, for holding on to them.

    For an :class:`Unreadable` record, anything in its payload shaped like
    an id: what it meant cannot be known, so everything it might name is kept.
    """
    if isinstance(event, Unreadable):
        return frozenset(_ID_LIKE.findall(event.payload))
    return frozenset(
        value for name in _ID_FIELDS
        if isinstance(value := getattr(event, name, None), str) and value
    )
