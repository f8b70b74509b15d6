"""Read a journal and say what happened: the library behind ``journal-inspect``.

Every function here opens the journal read-only (falling back to immutable
reading for a copy on a read-only medium), never writes to it (except
``fsck(repair=True)``, which runs a recovery pass), never takes a lock that
a manager waits for, and returns plain data: the ``journal-inspect``
console script (``sessiontemp.cli.journal_inspect``) only formats it.  :func:`as_json`
gives the one stable JSON form of each result, documented with the JSON
reference of the documentation ("JSON output") and versioned by its
``"schema"`` field.

One module per question, each reading the journal only through named
``sessiontemp.journal.store.Store`` methods: ``read`` (locating, opening, replaying,
probing locks), ``summary``, ``events``, ``state``, ``story``
(``explain``), ``verify``, ``fsck``, ``timeline``, ``space`` (``usage``)
and ``json``.

A journal is named either by its file (*journal*) or by its root (*root*);
with a bare file, liveness of managers and the disk are unknown.
"""

from sessiontemp.inspect.events import EventFilter, EventRow, Missed, check_kind, events
from sessiontemp.inspect.fsck import Finding, FsckReport, RepairReport, fsck
from sessiontemp.inspect.json import SCHEMA, as_json, state_json
from sessiontemp.inspect.read import (
    Hold,
    Liveness,
    Location,
    Problem,
    Progress,
    generation_of,
    locate,
    parse_moment,
    probe_generation,
    probe_liveness,
)
from sessiontemp.inspect.space import DirectoryUsage, SpaceReport, usage
from sessiontemp.inspect.state import StateAt, state_at
from sessiontemp.inspect.story import Sentence, Story, explain
from sessiontemp.inspect.summary import ManagerInfo, Summary, summary
from sessiontemp.inspect.timeline import COLOURS, IDLE, Timeline, timeline
from sessiontemp.inspect.verify import Verification, verify

__all__ = [
    "COLOURS",
    "IDLE",
    "SCHEMA",
    "DirectoryUsage",
    "EventFilter",
    "EventRow",
    "Finding",
    "FsckReport",
    "Hold",
    "Liveness",
    "Location",
    "ManagerInfo",
    "Missed",
    "Problem",
    "Progress",
    "RepairReport",
    "Sentence",
    "SpaceReport",
    "StateAt",
    "Story",
    "Summary",
    "Timeline",
    "Verification",
    "as_json",
    "check_kind",
    "events",
    "explain",
    "fsck",
    "generation_of",
    "locate",
    "parse_moment",
    "probe_generation",
    "probe_liveness",
    "state_at",
    "state_json",
    "summary",
    "timeline",
    "usage",
    "verify",
]
