"""``summary``: counts and times of a journal, without replaying all of it.

SQL aggregates count what the kept events did; what is live (managers not
ended, their generations and leases) is the state at the journal's end, the
newest checkpoint and the events after it, so a summary of a long journal is
fast, and once history was retired it still counts what was opened before
the kept history and lives on.  With a root, the kernel's locks add what the
journal cannot know: which of those managers still live, and which
directories of ended managers a command that outlived its manager still
holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from sessiontemp._kernel.root import GENERATION_PREFIX, generation_id_of
from sessiontemp.inspect.read import (
    Liveness,
    Problem,
    as_path,
    opened,
    probe_generation,
    probe_liveness,
)
from sessiontemp.inspect.verify import Verification
from sessiontemp.journal import checkpoint, history
from sessiontemp.journal.events import KINDS
from sessiontemp.journal.reducer import State
from sessiontemp.journal.store import History

__all__ = ["ManagerInfo", "Summary", "summary"]

# The kinds whose counts summary reports; unknown kinds are counted too, to
# be reported as problems.
_COUNTED: Final = ("manager.opened", "manager.closed", "manager.dead", "generation.created",
                   "removal.started", "removal.finished", "session.claimed", "session.adopted",
                   "session.discarded", "artifact.kept", "artifact.removed",
                   "generation.measured", "space.refused")


@attrs.frozen
class ManagerInfo:
    """A manager the journal says has not ended, with its liveness on disk."""

    id: str
    pid: int
    opened_seq: int
    opened_at: float
    owners: int
    sealed: bool
    current: str | None
    generations: int
    liveness: Liveness
    session: str | None = None


@attrs.frozen
class Summary:
    """What :func:`summary` found: the file, its events, managers and generations.

    ``managers`` counts opened, closed, dead and not-ended managers (and of
    those: live, gone, of unknown liveness, sealed, and their owners; and
    ``before_history``, those the state where the kept history starts
    holds: opened before it, their records retired);
    ``generations`` counts them by where they are in their life (in all:
    those the kept history names, and those it does not that were there
    where it starts, ``before_history`` of them in that state), the leases
    the journal says are held, and ``held_by_commands``: directories of
    managers that ended or are gone which a running command still holds
    (their leases died with the manager in the journal; only the kernel lock
    on the directory tells).  It is None without a root.  ``running`` lists
    the managers not ended; ``verify`` is the quick check.  ``space``
    counts the measurements journaled, the acquires refused for space
    (``refused``) and, of the directories of the managers not ended, those
    measured, the bytes and inodes they held as last measured, the largest
    now and the largest peak (ids and bytes).
    """

    journal: Path
    root: Path | None
    immutable: bool
    size_bytes: int
    events: int
    first_seq: int | None
    last_seq: int | None
    first_time: float | None
    last_time: float | None
    managers: Mapping[str, int]
    running: tuple[ManagerInfo, ...]
    generations: Mapping[str, int | None]
    verify: Verification
    # The newest checkpoint replays would start from (this format, this
    # history; not decoded here), None when they start from event 1.
    checkpoint: int | None = None
    held: tuple[str, ...] = ()
    # Where the kept history starts and what was retired before it.
    history: History | None = None
    # Named sessions: claims, adoptions (resumes) and discards journaled;
    # artifacts: kept, removed, and kept now.
    sessions: Mapping[str, int] = attrs.field(factory=dict)
    artifacts: Mapping[str, int] = attrs.field(factory=dict)
    # Sizes on disk: measurements journaled, and of the directories of the
    # managers not ended, as last measured (see :func:`summary`).
    space: Mapping[str, int | str | None] = attrs.field(factory=dict)


def _space(state: State, measurements: int, refused: int) -> dict[str, int | str | None]:
    """What the directories of the managers not ended held, as last measured."""
    running = {m.id for m in state.managers.values() if m.ended is None}
    measured = [g for g in state.generations.values()
                if g.manager in running and g.measured_at is not None]
    largest = max(measured, key=lambda g: (g.measured_bytes or 0, g.id), default=None)
    peak = max(measured, key=lambda g: (g.peak_bytes, g.id), default=None)
    return {
        "measurements": measurements,
        "measured": len(measured),
        "bytes": sum(g.measured_bytes or 0 for g in measured),
        "inodes": sum(g.measured_inodes or 0 for g in measured),
        "largest": None if largest is None else largest.id,
        "largest_bytes": 0 if largest is None else largest.measured_bytes or 0,
        "peak": None if peak is None else peak.id,
        "peak_bytes": 0 if peak is None else peak.peak_bytes,
        "refused": refused,
    }


def summary(journal: os.PathLike[str] | str, root: os.PathLike[str] | str | None = None
            ) -> Summary:
    """Counts and times of a journal, from SQL aggregates and the state at its end.

    The state is the newest checkpoint and the events after it, so it is
    fast on a long journal.  Its ``verify`` is the quick check: sequence
    gap-free, kinds known, and the events after that checkpoint obey the
    rules; :func:`verify` does the full one.  With *root*, each open manager's
    liveness lock and the directory lock of each generation whose manager
    ended or is gone are probed.
    """
    path = as_path(journal, "the journal")
    base = None if root is None else as_path(root, "the root")
    with opened(path, snapshot=True) as store:
        first, last, count = store.extent()
        retirement = store.history()
        times = store.times_of([s for s in (first, last) if s is not None])
        kinds = dict.fromkeys(_COUNTED, 0)
        kinds.update(store.kind_counts(excluding=[k for k in KINDS if k not in _COUNTED]))
        problems: list[Problem] = []
        # Kept events may reach back before where retired history ends: a
        # retirement records its end first and deletes its files after (one
        # under way in another process, or cut short by a crash).
        if first is not None and last is not None and (
                first > retirement.retired_until + 1 or last != first + count - 1):
            problems.append(Problem(None, "sequence", f"{count} events numbered {first} to "
                                    f"{last}: the sequence has gaps"))
        for kind in sorted(set(kinds) - set(KINDS)):
            problems.append(Problem(None, "kinds", f"{kinds[kind]} events of unknown kind "
                                    f"{kind!r}"))
        total_generations = 0
        if kinds["generation.created"] or kinds["removal.started"]:
            total_generations = store.generation_count()
        # Tolerant, as recovery is: a refused record is a problem of the quick check.
        refused: list[Problem] = []
        state = history.fold(store, after=None, lenient=refused)
        problems += [p for p in refused if p.check != "sequence"]
        before = history.start(store).state
        newest = next((seq for seq, format, chained in store.checkpoints()
                       if format == checkpoint.FORMAT and chained), None)
        size = sum(_size(path.with_name(path.name + suffix)) for suffix in ("", "-wal"))
        size += sum(s.bytes for s in store.segments() if s.path != path)
        immutable = store.immutable
    running = tuple(
        ManagerInfo(
            id=m.id, pid=m.pid, opened_seq=m.opened_seq, opened_at=m.opened_at,
            owners=m.owners, sealed=m.sealed, current=m.current,
            generations=len(m.generations),
            liveness="unknown" if base is None else probe_liveness(base, m.id),
            session=next((s.name for s in state.sessions.values() if s.owner == m.id), None),
        )
        for m in sorted(state.managers.values(), key=lambda m: m.opened_seq)
        if m.ended is None
    )
    held: tuple[str, ...] = ()
    if base is not None:
        # A live manager holds its own generations' locks itself; a lock on
        # any other directory says a command outlived its manager.  Only the
        # directories on disk are probed: no query over the whole history.
        live = {m.id for m in running if m.liveness != "gone"}
        mine = {g for m in state.managers.values() if m.id in live for g in m.generations}
        held = tuple(sorted(
            gid for name in _entries(base)
            if name.startswith(GENERATION_PREFIX) and (gid := generation_id_of(name)) is not None
            and gid not in mine and probe_generation(base, gid) == "held"))
    unremoved = [g for g in state.generations.values() if g.removal is None]
    managers = {
        "opened": kinds["manager.opened"],
        "closed": kinds["manager.closed"],
        "dead": kinds["manager.dead"],
        "running": len(running),
        "live": sum(1 for m in running if m.liveness == "live"),
        "gone": sum(1 for m in running if m.liveness == "gone"),
        "unknown": sum(1 for m in running if m.liveness == "unknown"),
        "sealed": sum(1 for m in running if m.sealed),
        "owners": sum(m.owners for m in running),
        "before_history": len(before.managers),
    }
    generations: dict[str, int | None] = {
        "total": total_generations + _unnamed(before, state),
        "live": sum(1 for g in unremoved if not g.retired),
        "retired": sum(1 for g in unremoved if g.retired),
        "removal_pending": sum(1 for g in state.generations.values() if g.removal == "started"),
        "removed": kinds["removal.finished"],
        "leases_held": sum(len(g.leases) for g in unremoved),
        "held_by_commands": None if base is None else len(held),
        "before_history": len(before.generations),
    }
    return Summary(
        journal=path, root=base, immutable=immutable, size_bytes=size, events=count,
        first_seq=first, last_seq=last, first_time=times.get(first or 0),
        last_time=times.get(last or 0), managers=managers, running=running,
        generations=generations, verify=Verification(path, "quick", count, tuple(problems)),
        checkpoint=newest, held=held, history=retirement,
        sessions={"claims": kinds["session.claimed"], "resumed": kinds["session.adopted"],
                  "discarded": kinds["session.discarded"]},
        artifacts={"kept": kinds["artifact.kept"] - kinds["artifact.removed"],
                   "removed": kinds["artifact.removed"]},
        space=_space(state, kinds["generation.measured"], kinds["space.refused"]),
    )


def _entries(root: Path) -> list[str]:
    try:
        return os.listdir(root)
    except OSError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unnamed(before: State, now: State) -> int:
    """How many generations of *before* (where the kept history starts) it never names.

    The SQL count names a generation by its creation or the start of its
    removal: one whose removal had not started there and has since started
    (or finished: the state let it go) is counted by it already.
    """
    return sum(1 for g in before.generations.values() if not (
        g.removal is None and (g.id not in now.generations
                               or now.generations[g.id].removal is not None)))
