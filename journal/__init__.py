"""The event-sourced core of sessiontemp: events, their store and the reducer.

It knows nothing about directories' contents, only about the lifecycle that
the events describe; :mod:`sessiontemp` puts it to work on a real root.
"""

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
