"""``events``: the event log as written, filtered, optionally followed as it grows."""

from __future__ import annotations

import difflib
import json
import os
import time as _time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from sessiontemp.inspect.read import as_path, opened
from sessiontemp.journal.errors import BadInput
from sessiontemp.journal.events import KINDS

__all__ = ["EventFilter", "EventRow", "check_kind", "events"]


@attrs.frozen
class EventRow:
    """One journal record as written: its fields are the event's JSON payload."""

    seq: int
    time: float
    kind: str
    fields: Mapping[str, Any]


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


def events(
    journal: os.PathLike[str] | str,
    selection: EventFilter = EventFilter(),
    *,
    follow: bool = False,
    poll: float = 0.25,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[EventRow]:
    """The journal's events matching *selection*, in order.

    With *follow*, keep waiting for events other processes append (every
    *poll* seconds) until *stop* returns True, the limit is reached, or
    ``until_seq``/``until_time`` is passed.
    """
    path = as_path(journal, "the journal")
    naming = tuple(t for t in (selection.manager, selection.generation) if t is not None)
    after = max((selection.since_seq or 1) - 1, 0)
    given = 0
    if selection.limit == 0:
        return
    with opened(path) as store:
        while True:
            for seq, time, kind, payload in store.rows_where(
                after=after, until=selection.until_seq, since_time=selection.since_time,
                until_time=selection.until_time, kinds=selection.kinds, naming=naming,
            ):
                after = seq
                row = EventRow(seq, time, kind, _fields(payload))
                if not selection.matches(row):
                    continue
                yield row
                given += 1
                if selection.limit is not None and given >= selection.limit:
                    return
            if not follow or stop():
                return
            if selection.until_seq is not None and after >= selection.until_seq:
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
