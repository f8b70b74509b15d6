"""The event-sourced core of sessiontemp: events, their store and the reducer.

It knows nothing about directories' contents, only about the lifecycle that
the events describe; :mod:`sessiontemp` puts it to work on a real root.

Its names are loaded when first used, as :mod:`sessiontemp`'s are: importing
one module (``sessiontemp.journal.errors``, say) does not import the store and what it
needs with it.
"""

from __future__ import annotations

# Not typing's: the session client's start-up imports this package (for its
# errors), and typing alone would cost it more than the rest (checkers take
# the name as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .errors import (
        CheckpointInvalid,
        JournalBusy,
        JournalCorrupt,
        JournalError,
        JournalFull,
        JournalReadOnly,
        JournalVersionError,
        RuleViolation,
        SessionTempError,
    )
    from .events import KINDS, Event, Record, decode, encode
    from .reducer import EMPTY, GenerationState, ManagerState, State, apply, replay
    from .segments import DEFAULT_RETENTION, Retention
    from .store import SCHEMA_VERSION, SEGMENTED_VERSION, History, Store

__all__ = [
    "DEFAULT_RETENTION",
    "EMPTY",
    "KINDS",
    "SCHEMA_VERSION",
    "SEGMENTED_VERSION",
    "CheckpointInvalid",
    "Event",
    "GenerationState",
    "History",
    "JournalBusy",
    "JournalCorrupt",
    "JournalError",
    "JournalFull",
    "JournalReadOnly",
    "JournalVersionError",
    "ManagerState",
    "Record",
    "Retention",
    "RuleViolation",
    "SessionTempError",
    "State",
    "Store",
    "apply",
    "decode",
    "encode",
    "replay",
]

# Where each public name lives.
_WHERE: dict[str, str] = {
    "CheckpointInvalid": ".errors",
    "DEFAULT_RETENTION": ".segments",
    "EMPTY": ".reducer",
    "Event": ".events",
    "GenerationState": ".reducer",
    "History": ".store",
    "JournalBusy": ".errors",
    "JournalCorrupt": ".errors",
    "JournalError": ".errors",
    "JournalFull": ".errors",
    "JournalReadOnly": ".errors",
    "JournalVersionError": ".errors",
    "KINDS": ".events",
    "ManagerState": ".reducer",
    "Record": ".events",
    "Retention": ".segments",
    "RuleViolation": ".errors",
    "SCHEMA_VERSION": ".store",
    "SEGMENTED_VERSION": ".store",
    "SessionTempError": ".errors",
    "State": ".reducer",
    "Store": ".store",
    "apply": ".reducer",
    "decode": ".events",
    "encode": ".events",
    "replay": ".reducer",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sessiontemp.journal' has no attribute {name!r}")
    # __import__, not importlib: a process that dropped privileges may no
    # longer read importlib's files, which this package no longer imports.
    value = getattr(__import__(module[1:], globals(), level=1, fromlist=[name]), name)
    # Cached as a module attribute: later lookups never come here again.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
