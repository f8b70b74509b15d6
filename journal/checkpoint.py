"""Checkpoints: the reducer's state after one event, kept so a replay can start there.

The journal only grows, and a replay from its first event costs time in
proportion to its whole history.  A checkpoint is the :class:`State` after
event N, encoded by :func:`encode` and stored beside the events together
with the chain digest of event N.  :func:`restore` gives the state of the
newest checkpoint that belongs to this journal's history and decodes
cleanly; folding the events after it gives exactly what a replay from event
1 gives.

A checkpoint is derived data, never the source of truth.  One that is
damaged, of another format or of another history is skipped, and said to
be; ``journal-inspect verify`` replays from event 1 and compares every
checkpoint with the state it claims to hold.

The encoding is columnar JSON (one list per field), compressed with zlib and
prefixed with a BLAKE2b digest of the compressed bytes.  Never pickle: a
journal copied from another machine is input, not code.

The state holds only what is alive or still owes work (see
:mod:`sessiontemp.journal.reducer`), so a checkpoint's size, and the time to restore
it, follow the live managers and generations, not the history before it.
A checkpoint of format 2 held every manager and generation ever seen: it is
of another format, skipped like any other, and the replay starts from an
older usable one or from event 1 (and then writes one of this format).
"""

from __future__ import annotations

import hashlib
import json
import operator
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .errors import CheckpointInvalid
from .events import Record
from .reducer import (
    EMPTY,
    ArtifactState,
    GenerationState,
    ManagerState,
    SessionState,
    State,
)
from .store import Store

__all__ = ["EVERY", "FORMAT", "KEEP", "ON_OPEN", "Restored", "decode", "due", "encode", "newest",
           "origin", "restore", "save"]

# Bump whenever the reducer's rules or the fields of its states change: a
# checkpoint of another format is skipped, and the next replay writes a new one.
# 3: the state holds only live objects (2 held every one ever seen).
# 4: and named sessions and artifacts.
# 5: a session is forgotten with its owner once nothing is kept for a resume.
# 6: a generation carries its last measurement and its peak size.
FORMAT: Final = 6
# A checkpoint is due once this many events follow the newest one, and at
# least a quarter as many as the state holds managers and generations, so
# that writing checkpoints costs a bounded amount per event however long
# the history grows.
EVERY: Final = 20_000
# What a recovery pass (every Manager open) replays before it writes one.
# Replaying the events after the newest checkpoint costs some 10 to 20 us
# an event, the bulk of an open once the rest is done; a pass that replayed
# this many leaves a checkpoint, so an open replays at most about this many
# (unless a long-lived appender wrote more since), and writes one durable
# commit more per this many events (an open and a close write two or
# three).  The quarter-of-the-state floor of :func:`due` applies as well.
ON_OPEN: Final = 100
# The newest few are kept, and the newest of each of the last few runs of
# EVERY events: ``journal-inspect state --at`` starts from the newest at or
# before the moment asked for.
KEEP: Final = 3

_DIGEST_SIZE: Final = 16
_NONE_TYPE: Final = type(None)
_NO_IDS: Final[frozenset[str]] = frozenset()


@attrs.frozen
class _Column:
    name: str
    types: tuple[type, ...]
    # A frozenset of ids, stored as a sorted list of str.
    is_set: bool = False


# Each field's type, as attrs.resolve_types gives it (the modules postpone
# their annotations), as columns.
_TYPES: Final[dict[object, tuple[tuple[type, ...], bool]]] = {
    str: ((str,), False),
    int: ((int,), False),
    float: ((float,), False),
    bool: ((bool,), False),
    str | None: ((str, _NONE_TYPE), False),
    int | None: ((int, _NONE_TYPE), False),
    float | None: ((float, _NONE_TYPE), False),
    frozenset[str]: ((list,), True),
}


def _columns(cls: type) -> tuple[_Column, ...]:
    # A field of a type not listed here fails at import, not when a
    # checkpoint is first written.
    return tuple(_Column(a.name, *_TYPES[a.type]) for a in attrs.fields(attrs.resolve_types(cls)))


_MANAGER_COLUMNS: Final = _columns(ManagerState)
_GENERATION_COLUMNS: Final = _columns(GenerationState)
_SESSION_COLUMNS: Final = _columns(SessionState)
_ARTIFACT_COLUMNS: Final = _columns(ArtifactState)
_BODY_KEYS: Final = frozenset({"seq", "managers", "generations", "held", "sessions", "artifacts"})


@attrs.frozen
class Restored:
    """Where a replay starts: the state of a checkpoint (or the empty one) and what was skipped.

    ``checkpoint`` is the seq of the checkpoint used, None when there was
    none to use; ``skipped`` lists ``(seq, reason)`` for each newer one that
    could not be used.
    """

    state: State
    checkpoint: int | None
    skipped: tuple[tuple[int, str], ...] = ()


def due(state: State, since: int, *, every: int = EVERY) -> bool:
    """Whether enough events follow the checkpoint at *since* (0: none) to write another."""
    size = len(state.managers) + len(state.generations)
    return state.seq - since >= max(every, size // 4)


def save(store: Store, state: State, *, keep: int = KEEP, roll_over: bool = False,
         catch_up: Callable[[list[Record]], State] | None = None) -> None:
    """Write *state* as the checkpoint of its seq, keeping the newest *keep*.

    And, older, the newest of each run of EVERY events for the newest
    *keep* runs: recovery writes one every ON_OPEN events, and a reader of
    the past (``explain``, ``state --at``) still finds one at most about
    EVERY events before the point it asks for, over the last KEEP * EVERY.
    *roll_over*: start a new segment with it once the active one is past
    what a retirement pass lets it hold (:meth:`Store.rollover_due`).  A
    new segment begins with the state at the journal's last event: events
    appended since *state* are folded onto it there by *catch_up* (a whole
    :class:`~.ledger.Ledger`'s, which takes the result as its own state: the
    writer's state never falls behind the journal it rolled over); without
    it, a rollover that events follow is left for a later pass.
    """
    def caught_up(records: list[Record]) -> bytes:
        assert catch_up is not None
        return encode(catch_up(records))

    store.save_checkpoint(state.seq, FORMAT, encode(state), keep=keep, spacing=EVERY,
                          roll_over=roll_over,
                          catch_up=None if catch_up is None else caught_up)


def origin(store: Store) -> Restored:
    """The state where the kept history starts: empty, or after the last event retired.

    Every reader of the kept history starts here (or later): once history
    is retired, event 1 is gone, and the segment that starts the kept part
    holds the checkpoint of the event before its first.  When that
    checkpoint cannot be used (damaged, of another format, or a journal
    whose rollover did not start with one), the result's state is older
    than ``store.history().retired_until``: the caller says so.
    """
    retired = store.history().retired_until
    if not retired:
        return Restored(EMPTY, None)
    return restore(store, until=retired)


def restore(store: Store, *, until: int | None = None) -> Restored:
    """The newest usable checkpoint at or before *until* (None: the end of the journal)."""
    # The active segment's own checkpoints first: they are the newest, and
    # reading them opens no other segment.  Only when none of them is
    # usable are they all asked for, and what is skipped told from there.
    found = _newest(store, until, recent=True)
    if found.checkpoint is not None or not store.rolled_over:
        return found
    return _newest(store, until, recent=False)


def newest(store: Store) -> int:
    """The seq of the newest checkpoint a replay could start from (0: none), not decoded."""
    for recent in (True, False):
        for seq, format, chained in store.checkpoints(recent=recent):
            if format == FORMAT and chained:
                return seq
        if not store.rolled_over:
            break
    return 0


def _newest(store: Store, until: int | None, *, recent: bool) -> Restored:
    skipped: list[tuple[int, str]] = []
    for seq, format, chained in store.checkpoints(until=until, recent=recent):
        if format != FORMAT:
            skipped.append((seq, f"is of format {format}, which this version does not read"))
            continue
        if not chained:
            skipped.append((seq, f"was derived from another history (event {seq} differs)"))
            continue
        try:
            state = decode(store.checkpoint_state(seq))
        except KeyError:
            skipped.append((seq, "was replaced by a newer checkpoint while being read"))
            continue
        except CheckpointInvalid as e:
            skipped.append((seq, e.reason))
            continue
        if state.seq != seq:
            skipped.append((seq, f"holds the state after event {state.seq}, not {seq}"))
            continue
        return Restored(state, seq, tuple(skipped))
    return Restored(EMPTY, None, tuple(skipped))


# -- encoding ---------------------------------------------------------------------


def encode(state: State) -> bytes:
    """The bytes stored for *state*."""
    body = {
        "seq": state.seq,
        "managers": _to_columns(state.managers.values(), _MANAGER_COLUMNS),
        "generations": _to_columns(state.generations.values(), _GENERATION_COLUMNS),
        "held": dict(state.held),
        "sessions": _to_columns(state.sessions.values(), _SESSION_COLUMNS),
        "artifacts": _to_columns(state.artifacts.values(), _ARTIFACT_COLUMNS),
    }
    compressed = zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 1)
    return hashlib.blake2b(compressed, digest_size=_DIGEST_SIZE).digest() + compressed


def _to_columns(objects: Iterable[Any], columns: Sequence[_Column]) -> dict[str, list[Any]]:
    get = operator.attrgetter(*(c.name for c in columns))
    rows = [get(o) for o in objects]
    values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    out: dict[str, list[Any]] = {}
    for column, column_values in zip(columns, values, strict=True):
        if column.is_set:
            out[column.name] = [sorted(v) for v in column_values]
        elif column.types == (float,):
            out[column.name] = [float(v) for v in column_values]
        elif column.types == (float, _NONE_TYPE):
            out[column.name] = [None if v is None else float(v) for v in column_values]
        else:
            out[column.name] = list(column_values)
    return out


def decode(data: bytes) -> State:
    """The state stored as *data*; :class:`CheckpointInvalid` says why it cannot be."""
    digest, compressed = data[:_DIGEST_SIZE], data[_DIGEST_SIZE:]
    if hashlib.blake2b(compressed, digest_size=_DIGEST_SIZE).digest() != digest:
        raise CheckpointInvalid("is damaged: its digest does not match its contents")
    try:
        body = json.loads(zlib.decompress(compressed))
    except (zlib.error, ValueError) as e:
        raise CheckpointInvalid(f"does not decode ({e})") from None
    if not isinstance(body, dict) or body.keys() != _BODY_KEYS:
        raise CheckpointInvalid("is not a checkpoint of this format")
    seq = body["seq"]
    if type(seq) is not int or seq < 0:
        raise CheckpointInvalid(f"names no valid event: seq {seq!r}")
    held = body["held"]
    if not isinstance(held, dict) or not all(type(v) is int for v in held.values()):
        raise CheckpointInvalid("has a malformed held map")
    generations = body["generations"]
    removals = generations.get("removal") if isinstance(generations, dict) else None
    if isinstance(removals, list) and "finished" in removals:
        # The state forgets a generation whose removal finished.
        raise CheckpointInvalid("holds a removed generation, which this format never does")
    return State(
        managers=_from_columns(body["managers"], _MANAGER_COLUMNS, ManagerState),
        generations=_from_columns(generations, _GENERATION_COLUMNS, GenerationState),
        seq=seq,
        held=held,
        sessions=_from_columns(body["sessions"], _SESSION_COLUMNS, SessionState),
        artifacts=_from_columns(body["artifacts"], _ARTIFACT_COLUMNS, ArtifactState),
    )


def _from_columns(
    table: object, columns: Sequence[_Column], cls: Callable[..., Any]
) -> Mapping[str, Any]:
    what = getattr(cls, "__name__", "state")
    if not isinstance(table, dict) or table.keys() != {c.name for c in columns}:
        raise CheckpointInvalid(f"has {what} fields that do not fit this format")
    values: list[list[Any]] = []
    length = None
    # Checked a column at a time: a set of types per column costs far less
    # than a check per value in Python.
    for column in columns:
        column_values = table[column.name]
        if not isinstance(column_values, list) or length not in (None, len(column_values)):
            raise CheckpointInvalid(f"has a malformed {what} column {column.name!r}")
        length = len(column_values)
        if not set(map(type, column_values)) <= set(column.types):
            raise CheckpointInvalid(f"has a {what} field {column.name!r} of the wrong type")
        if column.is_set:
            if any(type(item) is not str for ids in column_values for item in ids):
                raise CheckpointInvalid(f"has a {what} field {column.name!r} of the wrong type")
            column_values = [frozenset(ids) if ids else _NO_IDS for ids in column_values]
        values.append(column_values)
    built = dict(zip(values[0], map(cls, *values), strict=True))
    if len(built) != length:
        raise CheckpointInvalid(f"names one {what} twice")
    return built
