"""Private, journaled temporary directories for the commands of a session.

A :class:`Manager` gives every command of a logical session (an agent's chat,
a notebook kernel, a CI job) a lease on the session's one private 0700
directory; owners retain and release it, rotate gives later commands a fresh
directory, and a crash at any point is cleaned up by the next recovery
without touching anything still in use.
"""

from journal.errors import (
    CheckpointInvalid,
    CommandNotStarted,
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalFull,
    JournalReadOnly,
    JournalVersionError,
    SessionTempError,
    Unavailable,
    UnsafeRoot,
)
from sessiontemp.lease import Lease
from sessiontemp.manager import Manager
from sessiontemp.recovery import Removed, Report, Skipped, recover
from sessiontemp.root import GENERATION_PREFIX, TRASH_PREFIX, default_root

__all__ = [
    "GENERATION_PREFIX",
    "TRASH_PREFIX",
    "CheckpointInvalid",
    "CommandNotStarted",
    "JournalBusy",
    "JournalCorrupt",
    "JournalError",
    "JournalFull",
    "JournalReadOnly",
    "JournalVersionError",
    "Lease",
    "Manager",
    "Removed",
    "Report",
    "SessionTempError",
    "Skipped",
    "Unavailable",
    "UnsafeRoot",
    "default_root",
    "recover",
]
