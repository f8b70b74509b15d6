"""``usage``: what each directory of a root holds on disk, largest first, and what is free.

The sizes are the managers' own measurements, as the journal keeps them
(``generation.measured``: the last one and the peak of each generation);
with *measure*, each directory is walked now instead, by the same read-only
walk a manager measures with (:func:`sessiontemp.space.usage.measure_tree`: by
descriptors, never following a symlink nor leaving the directory's mount).
Either way nothing is written: not the journal (a measurement taken here is
reported, never journaled, so an inspector needs no write access and never
races a manager's appends), not the directories.

Which directories: every generation the journal has not finished removing
(its manager's current one, one retired and waiting for its last command,
one whose removal was cut short), each with its session, its manager and
that manager's pid and liveness, the labels of the leases that used it,
and how often (and when last) an acquire of it was refused for space.
The root's file system says how much is free and whether it is RAM-backed
(tmpfs or ramfs), where every byte a session holds is a byte of memory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs

from sessiontemp._kernel.root import GENERATION_PREFIX, WORK_DIR, os_error
from sessiontemp.inspect.read import (
    Liveness,
    Problem,
    Progress,
    as_path,
    kept_history,
    opened,
    probe_liveness,
)
from sessiontemp.journal import history
from sessiontemp.journal.errors import BadInput, RuleViolation
from sessiontemp.journal.events import LeaseAcquired, SpaceRefused, decode
from sessiontemp.journal.reducer import GenerationState, State
from sessiontemp.journal.store import Store
from sessiontemp.space import disk
from sessiontemp.space.usage import measure_tree

__all__ = ["LABELS", "DirectoryUsage", "SpaceReport", "usage"]

LABELS: Final = 20
"""The most lease labels listed for one directory: the newest distinct ones."""


@attrs.frozen
class DirectoryUsage:
    """One directory the journal has not finished removing, and its size.

    ``bytes`` and ``inodes`` are the last measurement (0 before the first:
    ``measured_at`` None then), ``peak_bytes`` and ``peak_inodes`` the
    largest any measurement found, ``unread`` how many entries the walk
    could not read (None when unknown: a journaled measurement).
    ``status`` is "live" (its manager's current directory), "retired"
    (waiting for its last lease or command, or a recovery) or "removing"
    (a removal started and not finished).  ``labels`` are the labels of the
    leases taken on it, the newest 20 (``LABELS``) distinct ones, in the
    order they were taken; ``leases`` counts every lease.  ``refused``
    counts the acquires of it refused for space as the journal recorded them
    (``space.refused``: over its budget, or a low disk while it was current),
    ``refused_at`` the time of the last.  ``measured_now`` says the size was
    walked by this call, not read from the journal.
    """

    path: Path
    generation: str
    status: str
    session: str | None
    manager: str | None
    pid: int | None
    liveness: Liveness | None
    labels: tuple[str, ...]
    leases: int
    bytes: int
    inodes: int
    measured_at: float | None
    peak_bytes: int
    peak_inodes: int
    unread: int | None = None
    measured_now: bool = False
    refused: int = 0
    refused_at: float | None = None
    # Created before the kept history: the labels (and the count) of the
    # leases taken on it before then went with the retired history.
    before_history: bool = False


@attrs.frozen
class SpaceReport:
    """What :func:`usage` found: the directories largest first, and the root's file system.

    ``free_bytes`` is what an unprivileged writer may still use
    (``statvfs``'s available blocks), ``total_bytes`` the file system's
    size, and ``tmpfs`` whether it is RAM-backed (tmpfs or ramfs, as the
    kernel's mount table names its type).
    ``seq`` is the last event the journal's state was read at; ``problems``
    lists records the lifecycle rules refuse (skipped, as recovery skips them).
    ``history`` says where the kept history starts, in words, once history
    was retired (None before): what a directory created before it
    (``before_history``) no longer has of its leases.
    """

    journal: Path
    root: Path
    seq: int
    free_bytes: int
    total_bytes: int
    tmpfs: bool
    measured: bool
    directories: tuple[DirectoryUsage, ...]
    problems: tuple[Problem, ...] = ()
    history: str | None = None

    @property
    def bytes(self) -> int:
        """What the directories hold together, as measured."""
        return sum(d.bytes for d in self.directories)


def usage(
    journal: os.PathLike[str] | str,
    root: os.PathLike[str] | str,
    *,
    measure: bool = False,
    progress: Progress | None = None,
    measuring: Progress | None = None,
    now: float | None = None,
) -> SpaceReport:
    """Every directory of *root* the journal has not finished removing, largest first.

    The state is replayed from the newest checkpoint (tolerantly, as
    recovery replays it: a refused record is skipped and listed in
    ``problems``), so the cost follows what is live, plus one read of the
    lease records since the oldest such directory was created, for their
    labels.  With *measure*, each directory is walked now, read-only
    (*measuring* is called with (directories done, in all)); its time is
    *now* (default: the clock's).  Never writes the journal.
    """
    path, base = as_path(journal, "the journal"), as_path(root, "the root")
    problems: list[Problem] = []
    with opened(path, snapshot=True) as store:
        state = history.fold(store, after=None, lenient=problems, progress=progress)
        kept = history.start(store)
        generations = sorted(state.generations.values(), key=lambda g: g.created_seq)
        labels, refusals = _leases_and_refusals(store, generations)
    space, tmpfs = _filesystem(base)
    sessions = _sessions(state)
    liveness: dict[str, Liveness] = {}
    found = []
    for i, g in enumerate(generations):
        owner = state.managers.get(g.manager or "")
        if owner is not None and owner.id not in liveness:
            liveness[owner.id] = probe_liveness(base, owner.id)
        taken = labels.get(g.id, [])
        refused = refusals.get(g.id, [])
        row = DirectoryUsage(
            path=base / (GENERATION_PREFIX + g.id), generation=g.id, status=_status(g, state),
            session=sessions.get(g.id) or sessions.get(g.manager or ""),
            manager=g.manager, pid=None if owner is None else owner.pid,
            liveness=None if owner is None else liveness[owner.id],
            labels=tuple(_newest_distinct(taken)), leases=len(taken),
            bytes=g.measured_bytes or 0, inodes=g.measured_inodes or 0,
            measured_at=g.measured_at, peak_bytes=g.peak_bytes, peak_inodes=g.peak_inodes,
            refused=len(refused), refused_at=max(refused, default=None),
            before_history=g.created_seq <= kept.seq)
        if measure:
            row = _measured(row, time.time() if now is None else now)
            if measuring is not None:
                measuring(i + 1, len(generations))
        found.append(row)
    found.sort(key=lambda d: (-d.bytes, -d.inodes, d.generation))
    return SpaceReport(
        journal=path, root=base, seq=state.seq, free_bytes=space.free,
        total_bytes=space.total, tmpfs=tmpfs, measured=measure, directories=tuple(found),
        problems=tuple(p for p in problems if p.check in ("rules", "schema")),
        history=kept_history(kept) if kept.seq else None)


def _filesystem(root: Path) -> tuple[disk.Space, bool]:
    """The space of *root*'s file system and whether it is RAM-backed, as a manager asks."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError) as e:
        raise BadInput(root, "does not exist" if isinstance(e, FileNotFoundError) else
                       "is not a directory", "Pass the root directory that holds the "
                       "journal") from None
    except OSError as e:
        raise os_error(root, e, "opened") from None
    try:
        return disk.space_of(fd), disk.is_ram(fd)
    finally:
        os.close(fd)


def _measured(row: DirectoryUsage, now: float) -> DirectoryUsage:
    """*row* with its directory walked now; a directory that is gone measures zeros.

    What its commands made is walked, in its work directory, as its manager
    measures it (the generation itself when it has none).
    """
    work = row.path / WORK_DIR
    try:
        size = measure_tree(work if work.is_dir() and not work.is_symlink() else row.path)
    except OSError:
        # The directory itself cannot be read (replaced by a symlink, its mode
        # taken away): nothing of it is counted, and that is said.
        return attrs.evolve(row, bytes=0, inodes=0, measured_at=now, unread=1,
                            measured_now=True)
    return attrs.evolve(
        row, bytes=size.bytes, inodes=size.inodes, measured_at=now, unread=size.unread_count,
        peak_bytes=max(row.peak_bytes, size.bytes), peak_inodes=max(row.peak_inodes,
                                                                    size.inodes),
        measured_now=True)


def _status(g: GenerationState, state: State) -> str:
    if g.removal is not None:
        return "removing"
    owner = state.managers.get(g.manager or "")
    return "live" if owner is not None and owner.current == g.id and not g.retired else (
        "retired")


def _sessions(state: State) -> dict[str, str]:
    """The session of each manager that owns one, and of each directory kept for a resume."""
    named: dict[str, str] = {}
    for s in state.sessions.values():
        named[s.owner] = s.name
        if s.kept is not None:
            named[s.kept] = s.name
    return named


def _leases_and_refusals(store: Store, generations: Iterable[GenerationState]
                         ) -> tuple[Mapping[str, list[str]], Mapping[str, list[float]]]:
    """The labels of the leases taken on each of *generations*, in the order taken, and
    the times of the acquires of each refused for space.

    One read of those records written since the oldest of them was
    created: a lease and a refusal name their generation only in their payload.
    """
    wanted = {g.id: g.created_seq for g in generations}
    labels: dict[str, list[str]] = {}
    refused: dict[str, list[float]] = {}
    if not wanted:
        return labels, refused
    for seq, at, kind, payload in store.rows_where(
            after=min(wanted.values()) - 1, kinds=[LeaseAcquired.kind, SpaceRefused.kind]):
        try:
            event = decode(seq, kind, payload)
        except RuleViolation:
            continue  # the replay lists it as a problem
        if isinstance(event, LeaseAcquired) and event.generation in wanted:
            labels.setdefault(event.generation, []).append(event.label)
        elif isinstance(event, SpaceRefused) and event.generation in wanted:
            refused.setdefault(event.generation, []).append(at)
    return labels, refused


def _newest_distinct(labels: list[str]) -> list[str]:
    """The newest ``LABELS`` distinct non-empty labels, in the order first taken."""
    seen: dict[str, None] = {}
    for label in reversed(labels):
        if label and label not in seen:
            seen[label] = None
            if len(seen) == LABELS:
                break
    return list(reversed(seen))
