"""Private, journaled temporary directories for the commands of a session.

A :class:`Manager` gives every command of a logical session (an agent's chat,
a notebook kernel, a CI job) a lease on the session's one private 0700
directory; owners retain and release it, rotate gives later commands a fresh
directory, and a crash at any point is cleaned up by the next recovery
without touching anything still in use.

Its names are loaded when first used (``from sessiontemp import Manager``):
``import sessiontemp`` alone imports nothing more, so the pytest plugin and
the console scripts can tell a platform the library refuses (anything but
Linux) from a working one without importing what needs it.  There, the
first name used raises :class:`Unsupported`, an ``ImportError``, naming what
the platform lacks.
"""

from __future__ import annotations

import sys as _sys

from sessiontemp import platform as _platform
from sessiontemp.journal import errors as _errors

# Not typing's: the session client's start-up imports this package, and
# typing alone would cost it more than the rest (checkers take it as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sessiontemp._kernel.root import GENERATION_PREFIX, TRASH_PREFIX, default_root
    from sessiontemp.artifacts import Artifact
    from sessiontemp.journal.errors import (
        BadInput,
        CheckpointInvalid,
        CommandNotStarted,
        ForkedCopy,
        HistoryRetired,
        JournalBusy,
        JournalCorrupt,
        JournalError,
        JournalFull,
        JournalReadOnly,
        JournalVersionError,
        LowDisk,
        NoSuchRoot,
        OverBudget,
        PackageUnreadable,
        RootReadOnly,
        RootUnusable,
        SessionOwned,
        SessionTempError,
        Unavailable,
        UnsafeRoot,
        Unsupported,
    )
    from sessiontemp.journal.segments import DEFAULT_RETENTION, Retention
    from sessiontemp.lease import Lease
    from sessiontemp.manager import Manager
    from sessiontemp.recovery.cleanup import (
        recover,
        recover_async,
        remove_artifact,
        remove_artifact_async,
        remove_session,
        remove_session_async,
    )
    from sessiontemp.recovery.passes import Report
    from sessiontemp.recovery.sweeps import Removed, Skipped
    from sessiontemp.space.placement import InsideWorkdir
    from sessiontemp.space.usage import Usage

__all__ = [
    "DEFAULT_RETENTION",
    "GENERATION_PREFIX",
    "TRASH_PREFIX",
    "Artifact",
    "BadInput",
    "CheckpointInvalid",
    "CommandNotStarted",
    "ForkedCopy",
    "HistoryRetired",
    "InsideWorkdir",
    "JournalBusy",
    "JournalCorrupt",
    "JournalError",
    "JournalFull",
    "JournalReadOnly",
    "JournalVersionError",
    "Lease",
    "LowDisk",
    "Manager",
    "NoSuchRoot",
    "OverBudget",
    "PackageUnreadable",
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
    "Usage",
    "default_root",
    "recover",
    "recover_async",
    "remove_artifact",
    "remove_artifact_async",
    "remove_session",
    "remove_session_async",
]

# Where each public name lives.
_WHERE: dict[str, str] = {
    "DEFAULT_RETENTION": "sessiontemp.journal.segments",
    "GENERATION_PREFIX": "sessiontemp._kernel.root",
    "TRASH_PREFIX": "sessiontemp._kernel.root",
    "Artifact": "sessiontemp.artifacts",
    "BadInput": "sessiontemp.journal.errors",
    "CheckpointInvalid": "sessiontemp.journal.errors",
    "CommandNotStarted": "sessiontemp.journal.errors",
    "ForkedCopy": "sessiontemp.journal.errors",
    "HistoryRetired": "sessiontemp.journal.errors",
    "InsideWorkdir": "sessiontemp.space.placement",
    "JournalBusy": "sessiontemp.journal.errors",
    "JournalCorrupt": "sessiontemp.journal.errors",
    "JournalError": "sessiontemp.journal.errors",
    "JournalFull": "sessiontemp.journal.errors",
    "JournalReadOnly": "sessiontemp.journal.errors",
    "JournalVersionError": "sessiontemp.journal.errors",
    "Lease": "sessiontemp.lease",
    "LowDisk": "sessiontemp.journal.errors",
    "Manager": "sessiontemp.manager",
    "NoSuchRoot": "sessiontemp.journal.errors",
    "OverBudget": "sessiontemp.journal.errors",
    "PackageUnreadable": "sessiontemp.journal.errors",
    "Removed": "sessiontemp.recovery.sweeps",
    "Report": "sessiontemp.recovery.passes",
    "Retention": "sessiontemp.journal.segments",
    "RootReadOnly": "sessiontemp.journal.errors",
    "RootUnusable": "sessiontemp.journal.errors",
    "SessionOwned": "sessiontemp.journal.errors",
    "SessionTempError": "sessiontemp.journal.errors",
    "Skipped": "sessiontemp.recovery.sweeps",
    "Unavailable": "sessiontemp.journal.errors",
    "UnsafeRoot": "sessiontemp.journal.errors",
    "Usage": "sessiontemp.space.usage",
    "Unsupported": "sessiontemp.journal.errors",
    "default_root": "sessiontemp._kernel.root",
    "recover": "sessiontemp.recovery.cleanup",
    "remove_artifact": "sessiontemp.recovery.cleanup",
    "remove_session": "sessiontemp.recovery.cleanup",
    "recover_async": "sessiontemp.recovery.cleanup",
    "remove_artifact_async": "sessiontemp.recovery.cleanup",
    "remove_session_async": "sessiontemp.recovery.cleanup",
}


def __getattr__(name: str) -> Any:
    """Load a public name on first use (PEP 562), once the platform is known to suffice."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sessiontemp' has no attribute {name!r}")
    _platform.require()
    try:
        # __import__, not importlib: a process that dropped privileges may
        # no longer read importlib's files, which this package no longer imports.
        __import__(module)
        loaded = _sys.modules[module]
    except (ImportError, OSError) as e:
        # A module (of the library's, or one of Python's it imports) whose
        # files this process may not read, after a privilege drop: say that.
        found = _platform.unreadable(getattr(e, "name", None) or module, e)
        if found is None or isinstance(e, _errors.SessionTempError):
            raise
        raise found from e
    value = getattr(loaded, name)
    # Cached as a module attribute: later lookups never come here again.
    globals()[name] = value
    return value


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext sessiontemp``: the kernel owns the notebook's session (see
    :mod:`sessiontemp.integrations.notebook`)."""
    from sessiontemp.integrations import notebook

    notebook.load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext sessiontemp``: the kernel's ownership ends, its TMPDIR is its own again."""
    from sessiontemp.integrations import notebook

    notebook.unload(ipython)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
