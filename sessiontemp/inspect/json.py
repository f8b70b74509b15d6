"""The one stable JSON form of every inspector result, documented in docs/reference/json.md.

Every document carries ``"schema"``: the version of this form.  It grows by
one whenever a field changes meaning or goes away; new fields may appear
without a new version.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Final

import attrs

from sessiontemp.inspect.events import EventRow, Missed
from sessiontemp.inspect.fsck import Finding, FsckReport
from sessiontemp.inspect.space import DirectoryUsage, SpaceReport
from sessiontemp.inspect.state import StateAt
from sessiontemp.inspect.story import Story
from sessiontemp.inspect.summary import Summary
from sessiontemp.inspect.timeline import Timeline
from sessiontemp.inspect.verify import Verification
from sessiontemp.journal.reducer import State

__all__ = ["SCHEMA", "as_json", "moment", "state_json"]

SCHEMA: Final = 1


def _ser(_inst: Any, _field: Any, value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _asdict(obj: Any) -> dict[str, Any]:
    return attrs.asdict(obj, value_serializer=_ser)


def state_json(state: State) -> dict[str, Any]:
    """The managers, generations, sessions and artifacts of *state* as JSON objects."""
    return {
        "managers": {k: _asdict(v) for k, v in sorted(state.managers.items())},
        "generations": {k: _asdict(v) for k, v in sorted(state.generations.items())},
        "sessions": {k: _asdict(v) for k, v in sorted(state.sessions.items())},
        "artifacts": {k: _asdict(v) for k, v in sorted(state.artifacts.items())},
    }


def as_json(result: object) -> dict[str, Any]:
    """The documented JSON form of any result of :mod:`sessiontemp.inspect`."""
    return {"schema": SCHEMA, **_body(result)}


def _findings(findings: tuple[Finding, ...]) -> list[dict[str, Any]]:
    return [_asdict(f) for f in findings]


def _body(result: object) -> dict[str, Any]:
    if isinstance(result, Summary):
        return {
            "journal": str(result.journal), "root": _str(result.root),
            "immutable": result.immutable, "size_bytes": result.size_bytes,
            "events": result.events, "first_seq": result.first_seq,
            "last_seq": result.last_seq, "first_time": result.first_time,
            "last_time": result.last_time, "managers": dict(result.managers),
            "running_managers": [_asdict(m) for m in result.running],
            "generations": dict(result.generations), "held": list(result.held),
            "sessions": dict(result.sessions), "artifacts": dict(result.artifacts),
            "space": dict(result.space),
            "verify": as_json(result.verify), "checkpoint": result.checkpoint,
            "history": None if result.history is None else {
                "first": result.history.first, "first_time": result.history.first_time,
                "retired_until": result.history.retired_until,
                "retired_at": result.history.retired_at},
        }
    if isinstance(result, Verification):
        return {"journal": str(result.journal), "mode": result.mode, "events": result.events,
                "ok": result.ok, "problems": [_asdict(p) for p in result.problems]}
    if isinstance(result, EventRow):
        return {"seq": result.seq, "time": result.time, "kind": result.kind,
                "fields": dict(result.fields)}
    if isinstance(result, Missed):
        return {"missed": {"first": result.first, "last": result.last, "count": result.count},
                "resumed": result.resumed}
    if isinstance(result, StateAt):
        return {"journal": str(result.journal), "seq": result.seq, "time": result.time,
                **state_json(result.state), "held": dict(result.state.held),
                "refused": list(result.refused)}
    if isinstance(result, Story):
        return {"journal": str(result.journal), "generation": result.generation,
                "path": _str(result.path), "status": result.status, "manager": result.manager,
                "leases": list(result.leases),
                "story": [_asdict(s) for s in result.sentences]}
    if isinstance(result, FsckReport):
        return {
            "root": str(result.root), "ok": result.ok,
            "findings": _findings(result.findings), "held": _findings(result.held),
            "before": _findings(result.before),
            "repair": None if result.repair is None else {
                "ran": result.repair.ran,
                "removed": [{"path": str(p), "generation": g, "reason": r}
                            for p, g, r in result.repair.removed],
                "skipped": [{"path": str(p), "reason": r} for p, r in result.repair.skipped],
                "dead": list(result.repair.dead),
            },
        }
    if isinstance(result, Timeline):
        return {
            "journal": str(result.journal), "output": _str(result.output),
            "events": result.events, "managers": result.managers,
            "generations": result.generations, "drawn": result.drawn,
            "grouped": result.grouped, "ended": dict(result.ended),
            "crashes": result.crashes, "recoveries": result.recoveries,
            "refused": list(result.refused), "space_refused": result.space_refused,
        }
    if isinstance(result, SpaceReport):
        return {
            "journal": str(result.journal), "root": str(result.root), "seq": result.seq,
            "free_bytes": result.free_bytes, "total_bytes": result.total_bytes,
            "tmpfs": result.tmpfs, "measured": result.measured,
            "bytes": result.bytes, "directories": [_directory(d) for d in result.directories],
            "problems": [_asdict(p) for p in result.problems],
        }
    raise TypeError(f"no JSON form for {type(result).__name__}")


def _directory(d: DirectoryUsage) -> dict[str, Any]:
    return {
        "path": str(d.path), "generation": d.generation, "status": d.status,
        "session": d.session, "manager": d.manager, "pid": d.pid, "liveness": d.liveness,
        "labels": list(d.labels), "leases": d.leases, "bytes": d.bytes, "inodes": d.inodes,
        "measured_at": moment(d.measured_at), "measured_time": d.measured_at,
        "peak_bytes": d.peak_bytes, "peak_inodes": d.peak_inodes, "unread": d.unread,
        "measured_now": d.measured_now, "refused": d.refused,
        "refused_at": moment(d.refused_at), "before_history": d.before_history,
    }


def moment(t: float | None) -> str | None:
    """*t* (epoch seconds) as ISO 8601 in UTC, to the millisecond; None stays None."""
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
