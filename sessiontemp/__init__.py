"""Private, journaled temporary directories for the commands of a session.

A :class:`Manager` gives every command of a logical session (an agent's chat,
a notebook kernel, a CI job) a lease on the session's one private 0700
directory; owners retain and release it, rotate gives later commands a fresh
directory, and a crash at any point is cleaned up by the next recovery
without touching anything still in use.
"""

# isort: off
# First: on a platform without the kernel facilities needed, one clear
# Unsupported error instead of a ModuleNotFoundError from deep inside.
import sessiontemp.platform  # noqa: F401 (imported for its check alone)
# isort: on

from journal.errors import (
    BadInput,
    CheckpointInvalid,
    CommandNotStarted,
    ForkedCopy,
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalFull,
    JournalReadOnly,
    JournalVersionError,
    NoSuchRoot,
    RootReadOnly,
    RootUnusable,
    SessionOwned,
    SessionTempError,
    Unavailable,
    UnsafeRoot,
    Unsupported,
)
from journal.segments import DEFAULT_RETENTION, Retention
from sessiontemp.artifacts import Artifact, remove_artifact
from sessiontemp.lease import Lease
from sessiontemp.manager import Manager
from sessiontemp.placement import InsideWorkdir
from sessiontemp.recovery import Removed, Report, Skipped, recover
from sessiontemp.root import GENERATION_PREFIX, TRASH_PREFIX, default_root
from sessiontemp.sessions import remove_session

__all__ = [
    "DEFAULT_RETENTION",
    "GENERATION_PREFIX",
    "TRASH_PREFIX",
    "Artifact",
    "BadInput",
    "CheckpointInvalid",
    "CommandNotStarted",
    "ForkedCopy",
    "InsideWorkdir",
    "JournalBusy",
    "JournalCorrupt",
    "JournalError",
    "JournalFull",
    "JournalReadOnly",
    "JournalVersionError",
    "Lease",
    "Manager",
    "NoSuchRoot",
    "Removed",
    "Report",
    "Retention",
    "RootReadOnly",
    "RootUnusable",
    "SessionOwned",
    "SessionTempError",
    "Skipped",
    "Unavailable",
    "UnsafeRoot",
    "Unsupported",
    "default_root",
    "recover",
    "remove_artifact",
    "remove_session",
]
