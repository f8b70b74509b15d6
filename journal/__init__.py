"""The event-sourced core of sessiontemp: events, their store and the reducer.

It knows nothing about directories' contents, only about the lifecycle that
the events describe; :mod:`sessiontemp` puts it to work on a real root.

Its names are loaded when first used, as :mod:`sessiontemp`'s are: importing
one module (``journal.errors``, say) does not import the store and what it
needs with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from journal.errors import (
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
    from journal.events import KINDS, Event, Record, decode, encode
    from journal.reducer import EMPTY, GenerationState, ManagerState, State, apply, replay
    from journal.segments import DEFAULT_RETENTION, Retention
    from journal.store import SCHEMA_VERSION, SEGMENTED_VERSION, History, Store

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
    "CheckpointInvalid": "journal.errors",
    "DEFAULT_RETENTION": "journal.segments",
    "EMPTY": "journal.reducer",
    "Event": "journal.events",
    "GenerationState": "journal.reducer",
    "History": "journal.store",
    "JournalBusy": "journal.errors",
    "JournalCorrupt": "journal.errors",
    "JournalError": "journal.errors",
    "JournalFull": "journal.errors",
    "JournalReadOnly": "journal.errors",
    "JournalVersionError": "journal.errors",
    "KINDS": "journal.events",
    "ManagerState": "journal.reducer",
    "Record": "journal.events",
    "Retention": "journal.segments",
    "RuleViolation": "journal.errors",
    "SCHEMA_VERSION": "journal.store",
    "SEGMENTED_VERSION": "journal.store",
    "SessionTempError": "journal.errors",
    "State": "journal.reducer",
    "Store": "journal.store",
    "apply": "journal.reducer",
    "decode": "journal.events",
    "encode": "journal.events",
    "replay": "journal.reducer",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'journal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    # Cached as a module attribute: later lookups never come here again.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
