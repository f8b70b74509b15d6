"""``events``: the event log as written, filtered, optionally followed as it grows.

A follower reads what other processes append, and retention may retire
events before it gets to them (with ``history_bytes=0`` a segment goes as
soon as it is sealed).  It never passes over them in silence: each run of
events it could not read is given in the stream as a :class:`Missed`, in
its place, saying which events they were and where reading resumed.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import time as _time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, overload

import attrs

from sessiontemp.inspect.read import as_path, opened
from sessiontemp.journal.errors import BadInput
from sessiontemp.journal.events import KINDS

__all__ = ["EventFilter", "EventRow", "Missed", "check_kind", "events"]


@attrs.frozen
class EventRow:
    """One journal record as written: its fields are the event's JSON payload."""

    seq: int
    time: float
    kind: str
    fields: Mapping[str, Any]


@attrs.frozen
class Missed:
    """Events *first* to *last* a follower could not read: retired before it got to them.

    Some might not have matched its filter: they can no longer be read to
    tell.  The next row given, if any, follows *last* (``resumed``).
    """

    first: int
    last: int

    @property
    def count(self) -> int:
        """How many events were missed."""
        return self.last - self.first + 1

    @property
    def resumed(self) -> int:
        """Where reading resumed: the first event after the missed ones."""
        return self.last + 1


@attrs.frozen
class EventFilter:
    """Which events to list; every given criterion must hold.

    A limit below 0 or a kind this version does not know is :class:`~sessiontemp.BadInput`.
    """

    manager: str | None = None
    generation: str | None = None
    kinds: tuple[str, ...] = ()
    since_seq: int | None = None
    until_seq: int | None = None
    since_time: float | None = None
    until_time: float | None = None
    limit: int | None = None

    def __attrs_post_init__(self) -> None:
        # Checked here, not when the first row is read: a bad filter is
        # refused before anything is printed.
        if self.limit is not None and self.limit < 0:
            raise BadInput(f"--limit {self.limit}", "is below 0",
                           "Pass a whole number of events, 0 or more")
        for kind in self.kinds:
            check_kind(kind)

    def matches(self, row: EventRow) -> bool:
        """Whether *row* names the manager and generation asked for (the SQL checks the rest)."""
        f = row.fields
        if self.manager is not None and self.manager not in (
            f.get("manager"), f.get("by"), f.get("recovery")
        ):
            return False
        return self.generation is None or f.get("generation") == self.generation


def check_kind(kind: str) -> str:
    """*kind* if this version knows it; else :class:`~sessiontemp.BadInput` naming the closest."""
    if not isinstance(kind, str):
        raise BadInput(f"the kind {kind!r}", f"is of type {type(kind).__name__}, not a str",
                       f"Pass one kind as a str: {', '.join(KINDS)}")
    if kind in KINDS:
        return kind
    close = difflib.get_close_matches(kind, list(KINDS), n=1, cutoff=0.6)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    raise BadInput(f"--kind {kind}", "is not an event kind",
                   f"{hint}Kinds: {', '.join(KINDS)}")


@overload
def events(
    journal: os.PathLike[str] | str, selection: EventFilter = ..., *,
    follow: Literal[False] = ..., poll: float = ..., stop: Callable[[], bool] = ...,
) -> Iterator[EventRow]: ...


@overload
def events(
    journal: os.PathLike[str] | str, selection: EventFilter = ..., *,
    follow: bool, poll: float = ..., stop: Callable[[], bool] = ...,
) -> Iterator[EventRow | Missed]: ...


def events(
    journal: os.PathLike[str] | str,
    selection: EventFilter = EventFilter(),
    *,
    follow: bool = False,
    poll: float = 0.25,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[EventRow | Missed]:
    """The journal's events matching *selection*, in order.

    With *follow*, keep waiting for events other processes append (every
    *poll* seconds) until *stop* returns True, the limit is reached, or
    ``until_seq``/``until_time`` is passed; and give, in their place, a
    :class:`Missed` for each run of events after the start (``since_seq``,
    else where the kept history started when reading began) that retention
    retired before they could be read.  Without *follow*, the listing is of
    the kept history alone (``summary`` says where it starts).
    """
    path = as_path(journal, "the journal")
    if selection.limit == 0:
        return
    found: Generator[EventRow | Missed, None, None] = (
        _followed(path, selection, poll, stop) if follow else _listed(path, selection))
    # Closed on return, so that the store is closed when the limit is reached.
    with contextlib.closing(found):
        given = 0
        for item in found:
            yield item
            if isinstance(item, EventRow):
                given += 1
                if given == selection.limit:
                    return


def _listed(path: Path, selection: EventFilter) -> Generator[EventRow, None, None]:
    """:func:`events` without *follow* or limit: the kept history, filtered in the query."""
    naming = tuple(t for t in (selection.manager, selection.generation) if t is not None)
    after = max((selection.since_seq or 1) - 1, 0)
    with opened(path) as store:
        for seq, time, kind, payload in store.rows_where(
            after=after, until=selection.until_seq, since_time=selection.since_time,
            until_time=selection.until_time, kinds=selection.kinds, naming=naming,
        ):
            row = EventRow(seq, time, kind, _fields(payload))
            if selection.matches(row):
                yield row


def _followed(path: Path, selection: EventFilter, poll: float, stop: Callable[[], bool]
              ) -> Generator[EventRow | Missed, None, None]:
    """:func:`events` with *follow*, without limit.

    Every kept event after the last one read is read, and the filter applied
    here rather than in the query: sequence numbers have no holes, so a jump
    between two rows read is exactly a run of retired events, where a query
    that filters could not tell them from events that did not match.
    """
    naming = tuple(t for t in (selection.manager, selection.generation) if t is not None)
    kinds = frozenset(selection.kinds)
    until = selection.until_seq
    with opened(path) as store:
        if selection.since_seq is not None:
            after = max(selection.since_seq - 1, 0)
        else:
            # Retired before this reader started: not missed, never asked for.
            after = store.history().retired_until
        while True:
            for seq, time, kind, payload in store.rows_where(after=after, until=until):
                if seq > after + 1:
                    yield Missed(after + 1, seq - 1)
                after = seq
                if (kinds and kind not in kinds) or not all(n in payload for n in naming) or (
                    selection.since_time is not None and time < selection.since_time) or (
                    selection.until_time is not None and time > selection.until_time):
                    continue
                row = EventRow(seq, time, kind, _fields(payload))
                if selection.matches(row):
                    yield row
            # Retired past the last event read, with nothing kept after them
            # yet to show the jump: said now, not when (or if) one comes.
            retired = store.history().retired_until
            if until is not None:
                retired = min(retired, until)
            if retired > after:
                yield Missed(after + 1, retired)
                after = retired
            if stop():
                return
            if until is not None and after >= until:
                return
            if selection.until_time is not None and _time.time() > selection.until_time:
                return
            _time.sleep(poll)


def _fields(payload: str) -> Mapping[str, Any]:
    try:
        fields = json.loads(payload)
    except ValueError:
        return {"payload": payload}
    return fields if isinstance(fields, dict) else {"payload": payload}
