"""Read a journal and say what happened: the library behind ``journal-inspect``.

Every function here opens the journal read-only (falling back to immutable
reading for a copy on a read-only medium), never writes to it, never takes a
lock that a manager waits for, and returns plain data: :mod:`sessiontemp.cli`
only formats it.  The ``as_json`` functions give the one stable JSON form of
each result, documented in the README ("journal-inspect").

A journal is named either by its file (*journal*) or by its root (*root*);
with a bare file, liveness of managers and the disk are unknown.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import time as _time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import attrs

from journal import checkpoint
from journal.errors import CheckpointInvalid, JournalError, RuleViolation
from journal.events import KINDS, ManagerOpened, Record, RecoveryStarted, Unreadable, decode
from journal.reducer import EMPTY, Fold, GenerationState, ManagerState, State, held_by
from journal.store import Store
from sessiontemp.root import (
    GENERATION_PREFIX,
    JOURNAL_NAME,
    MANAGERS_DIR,
    RECOVERY_LOCK,
    TRASH_PREFIX,
    default_root,
    generation_id_of,
)

__all__ = [
    "EventFilter",
    "EventRow",
    "FsckReport",
    "Liveness",
    "Problem",
    "StateAt",
    "Story",
    "Summary",
    "Verification",
    "as_json",
    "events",
    "explain",
    "fsck",
    "locate",
    "probe_liveness",
    "state_at",
    "summary",
    "verify",
]

Progress: TypeAlias = Callable[[int, int], None]
Liveness: TypeAlias = Literal["live", "gone", "unknown"]

# Entries of a root that are neither generations nor trash.
_ROOT_FILES: Final = frozenset({
    JOURNAL_NAME, JOURNAL_NAME + "-wal", JOURNAL_NAME + "-shm", JOURNAL_NAME + "-journal",
    RECOVERY_LOCK, MANAGERS_DIR,
})
_PROGRESS_EVERY: Final = 50_000


# -- where the journal is ------------------------------------------------------


@attrs.frozen
class Location:
    """The journal file, and its root when known (None for a bare journal file)."""

    journal: Path
    root: Path | None


def locate(journal: os.PathLike[str] | str | None = None,
           root: os.PathLike[str] | str | None = None) -> Location:
    """The journal named by its file, else by its root, else the per-user default root."""
    if journal is not None:
        return Location(Path(journal), None if root is None else Path(root))
    base = Path(default_root() if root is None else root)
    return Location(base / JOURNAL_NAME, base)


@contextlib.contextmanager
def _opened(journal: Path, *, snapshot: bool = False) -> Iterator[Store]:
    """The journal open read-only; with *snapshot*, every read sees the same moment."""
    store = Store(journal, readonly=True)
    try:
        if snapshot:
            with store.snapshot():
                yield store
        else:
            yield store
    finally:
        store.close()


def probe_liveness(root: Path, manager_id: str) -> Liveness:
    """Whether a manager's liveness lock is held, without creating or keeping anything.

    The lock file is opened read-only only if it exists; a non-blocking
    shared flock is tried and, if had, dropped at once.  "unknown" when the
    file is missing (not made yet, or already swept) or unreadable.
    """
    path = root / MANAGERS_DIR / f"{manager_id}.lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "unknown"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return "live"
            return "unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "gone"
    finally:
        os.close(fd)


# -- replay ----------------------------------------------------------------------


@attrs.frozen
class Problem:
    """One thing wrong: the event it concerns (None for the whole file), the check, why."""

    seq: int | None
    check: str
    message: str


def _replay(
    store: Store,
    *,
    until: int | None = None,
    progress: Progress | None = None,
    lenient: list[Problem] | None = None,
    each: Callable[[Record, Fold], None] | None = None,
    start: State = EMPTY,
    refused: list[Problem] | None = None,
) -> State:
    """Fold the reducer over the journal after *start* up to *until*; strict unless told.

    Strict: a gap or an event that breaks the rules raises
    :class:`JournalCorrupt`.  Lenient: each is recorded in *lenient* and the
    event skipped.  Tolerant (*refused* given): read the way recovery reads
    it, each refused record listed in *refused* while what it names is held
    (``State.held``).  *each* sees every record after it is applied.
    """
    total = store.last_seq() if until is None else until
    draft = Fold(start, tolerant=refused is not None)
    expected = start.seq + 1
    step = draft.step
    for seq, time, kind, payload, _ in store.rows(after=start.seq, until=until):
        if seq != expected:
            gap = RuleViolation(seq, f"follows event {expected - 1}: a gap")
            if refused is not None:
                refused.append(Problem(seq, "sequence", str(gap)))
            elif lenient is None:
                raise store.corrupt(gap)
            else:
                lenient.append(Problem(seq, "sequence", str(gap)))
        expected = seq + 1
        try:
            record = Record(seq, time, decode(seq, kind, payload))
        except RuleViolation as e:
            if refused is not None:
                # Folded as unreadable: the fold refuses it and holds what it may name.
                record = Record(seq, time, Unreadable(kind, payload, e.reason))
            elif lenient is None:
                raise store.corrupt(e) from e
            else:
                lenient.append(Problem(seq, "schema", str(e)))
                continue
        if refused is not None:
            step(record)
            if draft.refused:
                check = "schema" if isinstance(record.event, Unreadable) else "rules"
                refused += [Problem(v.seq, check, str(v)) for v in draft.refused]
                draft.refused.clear()
                continue
        else:
            try:
                step(record)
            except RuleViolation as e:
                if lenient is None:
                    raise store.corrupt(e) from e
                # The event is skipped: the state stays as it was before it.
                lenient.append(Problem(seq, "rules", str(e)))
                continue
        if each is not None:
            each(record, draft)
        if progress is not None and seq % _PROGRESS_EVERY == 0:
            progress(seq, total)
    if progress is not None:
        progress(total, total)
    return draft.state()


# -- summary -----------------------------------------------------------------------


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


@attrs.frozen
class Summary:
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
    generations: Mapping[str, int]
    verify: Verification
    # The newest checkpoint replays would start from (this format, this
    # history; not decoded here), None when they start from event 1.
    checkpoint: int | None = None


@attrs.frozen
class Verification:
    """The result of checking a journal; ``mode`` is "quick" (summary) or "full"."""

    journal: Path
    mode: Literal["quick", "full"]
    events: int
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def summary(journal: os.PathLike[str] | str, root: os.PathLike[str] | str | None = None
            ) -> Summary:
    """Counts and times of a journal, from SQL aggregates and a replay of only what is open.

    Only the events of managers that have not ended are replayed, so it is
    fast on a long journal.  Its ``verify`` is the quick check: sequence
    gap-free, kinds known, and the open managers' events obey the rules;
    :func:`verify` does the full one.
    """
    path = Path(journal)
    with _opened(path, snapshot=True) as store:
        ((first, last, count),) = store.query("SELECT min(seq), max(seq), count(*) FROM events")
        times = dict(store.query("SELECT seq, time FROM events WHERE seq IN (?, ?)",
                            (first or 0, last or 0)))
        counted = ("manager.opened", "manager.closed", "manager.dead",
                   "generation.created", "removal.started", "removal.finished")
        others = tuple(k for k in KINDS if k not in counted)
        marks = ",".join("?" * len(others))
        kinds: dict[str, int] = dict.fromkeys(counted, 0)
        kinds.update(store.query(
            f"SELECT kind, count(*) FROM events WHERE kind NOT IN ({marks}) GROUP BY kind",  # noqa: S608 (placeholders only)
            others))
        problems: list[Problem] = []
        if count and (first != 1 or last != count):
            problems.append(Problem(None, "sequence", f"{count} events numbered {first} to "
                                    f"{last}: the sequence has gaps"))
        for kind in sorted(set(kinds) - set(KINDS)):
            problems.append(Problem(None, "kinds", f"{kinds[kind]} events of unknown kind "
                                    f"{kind!r}"))
        open_rows: list[tuple[int, str]] = []
        if kinds["manager.opened"] > kinds["manager.closed"] + kinds["manager.dead"]:
            open_rows = store.query(
                "SELECT seq, json_extract(payload, '$.manager') FROM events "
                "WHERE kind = 'manager.opened' AND json_extract(payload, '$.manager') NOT IN "
                "(SELECT json_extract(payload, '$.manager') FROM events "
                "WHERE kind IN ('manager.closed', 'manager.dead'))")
        total_generations = 0
        if kinds["generation.created"] or kinds["removal.started"]:
            ((total_generations,),) = store.query(
                "SELECT count(DISTINCT json_extract(payload, '$.generation')) FROM events "
                "WHERE kind IN ('generation.created', 'removal.started')")
        state = _open_part(store, open_rows, problems)
        newest = next((seq for seq, format, chained in store.checkpoints()
                       if format == checkpoint.FORMAT and chained), None)
        size = sum(_size(path.with_name(path.name + suffix)) for suffix in ("", "-wal"))
        immutable = store.immutable
    base = None if root is None else Path(root)
    running = tuple(
        ManagerInfo(
            id=m.id, pid=m.pid, opened_seq=m.opened_seq, opened_at=m.opened_at,
            owners=m.owners, sealed=m.sealed, current=m.current,
            generations=len(m.generations),
            liveness="unknown" if base is None else probe_liveness(base, m.id),
        )
        for m in sorted(state.managers.values(), key=lambda m: m.opened_seq)
        if m.ended is None
    )
    own = [g for g in state.generations.values() if g.manager in state.managers]
    own_unremoved = [g for g in own if g.removal is None]
    removed = kinds["removal.finished"]
    pending = kinds["removal.started"] - removed
    live = sum(1 for g in own_unremoved if not g.retired)
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
    }
    generations = {
        "total": total_generations,
        "live": live,
        "retired": total_generations - kinds["removal.started"] - live,
        "removal_pending": pending,
        "removed": removed,
        "leases_held": sum(len(g.leases) for g in own_unremoved),
    }
    return Summary(
        journal=path, root=base, immutable=immutable, size_bytes=size, events=count,
        first_seq=first, last_seq=last, first_time=times.get(first), last_time=times.get(last),
        managers=managers, running=running, generations=generations,
        verify=Verification(path, "quick", count, tuple(problems)), checkpoint=newest,
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _open_part(store: Store, open_rows: list[tuple[int, str]], problems: list[Problem]
               ) -> State:
    """Replay only the events naming the managers that have not ended."""
    if not open_rows:
        return State()
    ids = [m for _, m in open_rows]
    start = min(seq for seq, _ in open_rows)
    sql = "SELECT seq, time, kind, payload FROM events WHERE seq >= ?"
    params: list[Any] = [start]
    if len(ids) <= 50:
        # Each id is a unique token: a manager's events name it, and so do
        # the removals it made of its own generations ("by").
        sql += " AND (" + " OR ".join(["instr(payload, ?) > 0"] * len(ids)) + ")"
        params += [f'"{m}"' for m in ids]
    wanted = set(ids)
    draft = Fold(State())
    for seq, time, kind, payload in store.query(sql + " ORDER BY seq", tuple(params)):
        try:
            event = decode(seq, kind, payload)
            if getattr(event, "manager", None) in wanted or getattr(event, "by", None) in wanted:
                draft.step(Record(seq, time, event))
        except RuleViolation as e:
            problems.append(Problem(e.seq, "rules", str(e)))
    return draft.state()


# -- events --------------------------------------------------------------------------


@attrs.frozen
class EventRow:
    """One journal record as written: its fields are the event's JSON payload."""

    seq: int
    time: float
    kind: str
    fields: Mapping[str, Any]


@attrs.frozen
class EventFilter:
    """Which events to list; every given criterion must hold."""

    manager: str | None = None
    generation: str | None = None
    kinds: tuple[str, ...] = ()
    since_seq: int | None = None
    until_seq: int | None = None
    since_time: float | None = None
    until_time: float | None = None
    limit: int | None = None

    def matches(self, row: EventRow) -> bool:
        f = row.fields
        if self.manager is not None and self.manager not in (
            f.get("manager"), f.get("by"), f.get("recovery")
        ):
            return False
        return self.generation is None or f.get("generation") == self.generation


def parse_moment(text: str) -> int | float:
    """A sequence number (an integer) or a time (ISO 8601, or epoch seconds with a point).

    Raises ValueError for anything else.
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither a sequence number nor a time (ISO 8601, or "
                         "epoch seconds with a decimal point)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()


def events(
    journal: os.PathLike[str] | str,
    selection: EventFilter = EventFilter(),
    *,
    follow: bool = False,
    poll: float = 0.25,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[EventRow]:
    """The journal's events matching *selection*, in order.

    With *follow*, keep waiting for events other processes append (every
    *poll* seconds) until *stop* returns True, the limit is reached, or
    ``until_seq``/``until_time`` is passed.
    """
    path = Path(journal)
    clauses = ["seq > ?"]
    params: list[Any] = []
    if selection.until_seq is not None:
        clauses.append("seq <= ?")
        params.append(selection.until_seq)
    if selection.since_time is not None:
        clauses.append("time >= ?")
        params.append(selection.since_time)
    if selection.until_time is not None:
        clauses.append("time <= ?")
        params.append(selection.until_time)
    if selection.kinds:
        clauses.append(f"kind IN ({','.join('?' * len(selection.kinds))})")
        params += list(selection.kinds)
    for token in (selection.manager, selection.generation):
        if token is not None:
            clauses.append("instr(payload, ?) > 0")
            params.append(json.dumps(token))
    # Only fixed clauses with placeholders are joined: every value is a parameter.
    sql = ("SELECT seq, time, kind, payload FROM events WHERE "  # noqa: S608
           + " AND ".join(clauses) + " ORDER BY seq LIMIT 10000")
    after = max((selection.since_seq or 1) - 1, 0)
    given = 0
    with _opened(path) as store:
        while True:
            rows = store.query(sql, (after, *params))
            for seq, time, kind, payload in rows:
                after = seq
                row = EventRow(seq, time, kind, _fields(payload))
                if not selection.matches(row):
                    continue
                yield row
                given += 1
                if selection.limit is not None and given >= selection.limit:
                    return
            if len(rows) == 10000:
                continue
            if not follow or stop():
                return
            if selection.until_seq is not None and after >= selection.until_seq:
                return
            if selection.until_time is not None and _time.time() > selection.until_time:
                return
            _time.sleep(poll)


def _fields(payload: str) -> Mapping[str, Any]:
    try:
        fields = json.loads(payload)
    except ValueError:
        return {"payload": payload}
    return fields if isinstance(fields, dict) else {"payload": payload}


# -- state at a moment -----------------------------------------------------------------


@attrs.frozen
class StateAt:
    """The derived state right after event ``seq`` (0: before any), written at ``time``."""

    journal: Path
    seq: int
    time: float | None
    state: State


def state_at(journal: os.PathLike[str] | str, at: int | float | None = None, *,
             progress: Progress | None = None) -> StateAt:
    """The state right after event *at* (an int) or the last event at or before a time.

    None means the end of the journal.  A sequence number past the end is an
    error (ValueError); a time before the first event gives the empty state.
    """
    path = Path(journal)
    with _opened(path, snapshot=True) as store:
        last = store.last_seq()
        if at is None:
            seq = last
        elif isinstance(at, int):
            if at < 0 or at > last:
                raise ValueError(f"there is no event {at}: the journal holds events 1 to {last}")
            seq = at
        else:
            ((found,),) = store.query("SELECT max(seq) FROM events WHERE time <= ?", (at,))
            seq = int(found or 0)
        # Read the way recovery reads it: a refused record holds what it
        # names instead of stopping the replay (verify lists it).
        state = _replay(store, until=seq, progress=progress, refused=[],
                        start=checkpoint.restore(store, until=seq).state) if seq else State()
        rows = store.query("SELECT time FROM events WHERE seq = ?", (seq,))
    return StateAt(path, seq, rows[0][0] if rows else None, state)


# -- explain -----------------------------------------------------------------------


@attrs.frozen
class Sentence:
    seq: int
    time: float
    kind: str
    text: str


@attrs.frozen
class Story:
    """One generation's life in sentences; ``status`` sums up where it is now.

    ``status``: "live" (its manager's current directory), "retired" (waiting
    for its last lease or a recovery), "removing" (removal started, not
    finished), "removed", or "unknown" (the journal never names it).
    """

    journal: Path
    generation: str
    path: Path | None
    status: str
    manager: str | None
    sentences: tuple[Sentence, ...]
    leases: tuple[str, ...]


def generation_of(target: str) -> str:
    """The generation id named by a directory path, a generation or trash name, or an id."""
    name = Path(target.rstrip("/")).name
    return generation_id_of(name) or name


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def explain(journal: os.PathLike[str] | str, target: str, root: os.PathLike[str] | str | None
            = None, *, progress: Progress | None = None) -> Story:
    """The life story of the generation *target* (a path or an id).

    Only the part of the journal that concerns it is replayed: from the
    newest checkpoint before it was first named, up to the end of its removal
    (or the end of the journal while it is not removed).
    """
    gid = generation_of(target)
    path = Path(journal)
    said: list[Sentence] = []
    recoveries: dict[str, int] = {}
    deaths: dict[str, tuple[int, float, str]] = {}
    managers: dict[str, ManagerState] = {}
    last = [0.0]
    held: set[str] = set()  # the generation's leases before the current event

    def say(record: Record, text: str) -> None:
        said.append(Sentence(record.seq, record.time, record.event.kind, text))

    def each(record: Record, draft: Fold) -> None:
        e = record.event
        kind = e.kind
        if kind == "recovery.started":
            recoveries[e.recovery] = e.pid  # type: ignore[union-attr]
            return
        if kind == "manager.dead":
            deaths[e.manager] = (record.seq, record.time, e.recovery)  # type: ignore[union-attr]
        generation = draft.generations.get(gid)
        if generation is None:
            return
        if getattr(e, "generation", None) == gid:
            _tell(record, e, say, draft, recoveries, deaths, managers)
        elif generation.retired_seq == record.seq and generation.manager is not None:
            m = generation.manager
            why = {
                "rotate": f"its manager {m} rotated",
                "release": f"the last owner of its manager {m} released it, sealing it",
                "manager.closed": f"its manager {m} was closed",
                "manager.dead": f"a recovery found its manager {m} dead",
            }.get(kind, kind)
            say(record, f"Retired at {_when(record.time)}: {why}.")
        if (kind in ("manager.closed", "manager.dead") and e.manager == generation.manager  # type: ignore[union-attr]
                and generation.removal is None and held):
            how = "was closed" if kind == "manager.closed" else (
                f"was found dead by recovery {e.recovery} "  # type: ignore[union-attr]
                f"(pid {recoveries.get(e.recovery, '?')})")  # type: ignore[union-attr]
            say(record, f"Its manager {e.manager} {how} at {_when(record.time)} while "  # type: ignore[union-attr]
                f"lease(s) {', '.join(sorted(held))} were held: from then on only a command "
                "still running under them keeps the directory.")
        held.clear()
        held.update(generation.leases)

    def each_all(record: Record, draft: Fold) -> None:
        last[0] = record.time
        event = record.event
        if isinstance(event, ManagerOpened):
            managers[event.manager] = draft.managers[event.manager]
        each(record, draft)

    where = None if root is None else Path(root) / (GENERATION_PREFIX + gid)
    with _opened(path, snapshot=True) as store:
        first, finished = _span_of(store, gid)
        if first is None:
            return Story(path, gid, where, "unknown", None, (), ())
        start = checkpoint.restore(store, until=first - 1).state
        # What the story needs from before the start: the pids of managers
        # and of recovery passes that may act on it later.
        managers.update(start.managers)
        recoveries.update(_recoveries(store, until=start.seq))
        refused: list[Problem] = []
        state = _replay(store, until=finished, progress=progress, each=each_all, start=start,
                        refused=refused)
    generation = state.generations.get(gid)
    if generation is None:
        return Story(path, gid, where, "unknown", None, (), ())
    status = ("removed" if generation.removal == "finished" else
              "removing" if generation.removal == "started" else
              "retired" if generation.retired else "live")
    end = Sentence(state.seq, last[0], "now", "")
    owner = state.managers.get(generation.manager or "")
    holding = held_by(state, generation)
    if holding is not None and generation.removal != "finished":
        why = next((p.message for p in refused if p.seq == holding),
                   f"event {holding} is refused")
        said.append(attrs.evolve(end, text=(
            f"It is held: {why}, and that record names it or its manager, so no recovery "
            "removes it. Keep what you need from it and remove it by hand (see the README's "
            "'A record the rules refuse').")))
    elif status == "live" and owner is not None:
        holders = ", ".join(sorted(generation.leases)) or "no lease"
        said.append(attrs.evolve(end, text=(
            f"It is still live: the current directory of manager {owner.id} (pid {owner.pid}), "
            f"held by {holders}.")))
    elif status == "retired":
        if generation.leases:
            said.append(attrs.evolve(end, text=(
                f"It is retired and still held by lease(s) {', '.join(sorted(generation.leases))}; "
                "it goes when the last is released.")))
        elif owner is not None and owner.ended is not None:
            said.append(attrs.evolve(end, text=(
                f"It is retired and not yet removed: its manager {owner.id} {owner.ended}; the "
                "next recovery removes it once no command holds it.")))
        else:
            said.append(attrs.evolve(end, text="It is retired and not yet removed."))
    elif status == "removing":
        said.append(attrs.evolve(end, text=(
            "Its removal was started and not finished; the next recovery finishes it.")))
    return Story(path, gid, where, status, generation.manager, tuple(said),
                 tuple(sorted(generation.leases)))


def _span_of(store: Store, gid: str) -> tuple[int | None, int | None]:
    """The seqs of the first event that names generation *gid* and of its removal's end."""
    # instr() finds the few candidate rows in C; each is then decoded to be sure.
    needle = '"generation":' + json.dumps(gid)
    first = finished = None
    for seq, kind, payload in store.query(
        "SELECT seq, kind, payload FROM events WHERE kind IN "
        "('generation.created', 'removal.started', 'removal.finished') "
        "AND instr(payload, ?) > 0 ORDER BY seq", (needle,),
    ):
        try:
            event = decode(seq, kind, payload)
        except RuleViolation:
            # Refused on replay, as recovery refuses it; it tells no part of the story.
            continue
        if getattr(event, "generation", None) != gid:
            continue
        if first is None:
            first = seq
        if kind == "removal.finished":
            finished = seq
            break
    return first, finished


def _recoveries(store: Store, *, until: int) -> dict[str, int]:
    """The pid of every recovery pass started up to event *until*, by its id."""
    found: dict[str, int] = {}
    if until == 0:
        return found
    for seq, kind, payload in store.query(
        "SELECT seq, kind, payload FROM events WHERE kind = 'recovery.started' AND seq <= ?",
        (until,),
    ):
        try:
            event = decode(seq, kind, payload)
        except RuleViolation:
            continue
        if isinstance(event, RecoveryStarted):
            found[event.recovery] = event.pid
    return found


def _tell(record: Record, e: Any, say: Callable[[Record, str], None], draft: Fold,
          recoveries: Mapping[str, int], deaths: Mapping[str, tuple[int, float, str]],
          managers: Mapping[str, ManagerState]) -> None:
    when = _when(record.time)
    kind = e.kind
    if kind == "generation.created":
        m = managers.get(e.manager)
        pid = f" (pid {m.pid})" if m is not None else ""
        say(record, f"Created at {when} by manager {e.manager}{pid}.")
    elif kind == "generation.ready":
        say(record, f"Its directory was made at {when} (device {e.device}, inode {e.inode}).")
    elif kind == "lease.acquired":
        say(record, f"Lease {e.lease} was taken at {when}.")
    elif kind == "lease.released":
        say(record, f"Lease {e.lease} was released at {when}.")
    elif kind == "removal.started":
        generation: GenerationState = draft.generations[e.generation]
        if e.by in recoveries:
            dead = ""
            if generation.manager is not None and generation.manager in deaths:
                dseq, dtime, _ = deaths[generation.manager]
                m = managers.get(generation.manager)
                pid = f" (pid {m.pid})" if m is not None else ""
                dead = (f", after manager {generation.manager}{pid} was found dead at "
                        f"{_when(dtime)} (event {dseq})")
            elif generation.manager is None:
                dead = ", as a stray the journal did not know"
            who = f"recovery {e.by} (pid {recoveries[e.by]}){dead}"
        elif e.by == generation.manager:
            who = f"its own manager {e.by}, in normal use"
        else:
            who = e.by
        if generation.retired_seq == record.seq and generation.manager is not None:
            say(record, f"Retired at {when} by the start of its removal.")
        say(record, f"Removal was started at {when} by {who}: {e.reason}.")
    elif kind == "removal.finished":
        outcome = {"removed": "its directory was removed",
                   "absent": "its directory was already gone"}.get(e.outcome, e.outcome)
        say(record, f"Removal finished at {when}: {outcome}.")


# -- verify ------------------------------------------------------------------------


def verify(journal: os.PathLike[str] | str, *, progress: Progress | None = None
           ) -> Verification:
    """Every check there is: SQLite integrity, sequence and digest chain, kinds and payloads,
    the lifecycle rules (lenient: every violation is listed, the event skipped) and the
    reducer's invariants on the final state."""
    path = Path(journal)
    problems: list[Problem] = []
    with _opened(path, snapshot=True) as store:
        for message in store.verify():
            check, _, text = message.partition(": ")
            problems.append(Problem(_seq_in(text), check if check in (
                "integrity", "sequence") else "digest", message))
        claims, problems_of_checkpoints = _checkpoints(store)
        lenient: list[Problem] = []

        def compare(record: Record, draft: Fold) -> None:
            claim = claims.pop(record.seq, None)
            if claim is not None and claim != draft.state():
                problems_of_checkpoints.append(Problem(record.seq, "checkpoints", (
                    f"checkpoint at event {record.seq} does not match the state replayed "
                    "from the events, so replays starting from it go wrong: delete its row "
                    "from the table checkpoints (the next recovery writes a new one)")))

        state = _replay(store, progress=progress, lenient=lenient,
                        each=compare if claims else None)
        count = store.last_seq()
    problems += [p for p in lenient if p.check != "sequence"]
    problems += problems_of_checkpoints
    problems += [Problem(seq, "checkpoints", f"checkpoint at event {seq} could not be compared: "
                         "the replay skipped that event") for seq in sorted(claims)]
    for g in sorted(state.generations.values(), key=lambda g: g.created_seq):
        if g.removal is not None and g.leases:
            problems.append(Problem(g.removal_seq, "invariants",
                                    f"generation {g.id} is being removed yet leased"))
    for m in sorted(state.managers.values(), key=lambda m: m.opened_seq):
        if m.owners < 0:
            problems.append(Problem(None, "invariants", f"manager {m.id} has {m.owners} owners"))
        if m.ended is not None and m.current is not None:
            problems.append(Problem(m.ended_seq, "invariants",
                                    f"manager {m.id} ended with a current generation"))
    return Verification(path, "full", count, tuple(problems))


def _checkpoints(store: Store) -> tuple[dict[int, State], list[Problem]]:
    """The states the journal's checkpoints claim, by seq, and the ones that cannot be read.

    One of a format this version does not read is no problem: the next
    recovery writes a checkpoint this version reads.
    """
    claims: dict[int, State] = {}
    problems: list[Problem] = []
    for seq, format, chained in store.checkpoints():
        if format != checkpoint.FORMAT:
            continue
        if not chained:
            problems.append(Problem(seq, "checkpoints", (
                f"checkpoint at event {seq} was derived from another history; replays skip it")))
            continue
        try:
            claims[seq] = checkpoint.decode(store.checkpoint_state(seq))
        except CheckpointInvalid as e:
            problems.append(Problem(seq, "checkpoints",
                                    f"checkpoint at event {seq} {e.reason}; replays skip it"))
    return claims, problems


def _seq_in(text: str) -> int | None:
    for word in text.replace(",", " ").split():
        if word.isdigit():
            return int(word)
    return None


# -- fsck ------------------------------------------------------------------------------


@attrs.frozen
class Finding:
    """One disagreement between the journal and the root.

    ``check``: "missing" (the journal keeps it, the disk does not have it),
    "not-removed" (journaled as removed, still on disk), "trash" (a trash entry
    not yet emptied), "stray" (generation prefix, unknown to the journal),
    "unknown" (any other entry in the root), "unrecovered" (a manager not
    ended in the journal whose liveness lock is free), "refused" (a record
    the lifecycle rules refuse: what it names is held, never removed).
    """

    check: str
    path: Path
    generation: str | None
    message: str


@attrs.frozen
class RepairReport:
    """What the recovery run by ``fsck --repair`` did."""

    removed: tuple[tuple[Path, str, str], ...]
    skipped: tuple[tuple[Path, str], ...]
    dead: tuple[str, ...]
    ran: bool


@attrs.frozen
class FsckReport:
    root: Path
    findings: tuple[Finding, ...]
    repair: RepairReport | None = None
    before: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings


def fsck(root: os.PathLike[str] | str, *, repair: bool = False,
         progress: Progress | None = None) -> FsckReport:
    """Compare the journal of *root* with the root's entries; with *repair*, recover first
    (which writes to the journal and removes directories) and check again."""
    base = Path(root)
    if not base.is_dir():
        raise JournalError(base / JOURNAL_NAME, f"does not exist: {base} is not a directory",
                           "Pass the root that holds the journal")
    if not repair:
        return FsckReport(base, _fsck(base, progress))
    from sessiontemp.recovery import recover

    before = _fsck(base, progress)
    report = recover(base, busy_timeout=10.0)
    done = RepairReport(
        removed=tuple((r.path, r.generation, r.reason) for r in report.removed),
        skipped=tuple((s.path, s.reason) for s in report.skipped),
        dead=report.dead, ran=report.ran,
    )
    return FsckReport(base, _fsck(base, progress), done, before)


def _fsck(base: Path, progress: Progress | None) -> tuple[Finding, ...]:
    # Listed first, read second: a generation is journaled before its mkdir,
    # so every directory listed is known to the state read afterwards.
    names = sorted(os.listdir(base))
    journal = base / JOURNAL_NAME
    refused: list[Problem] = []
    with _opened(journal, snapshot=True) as store:
        state = _replay(store, progress=progress, start=checkpoint.restore(store).state,
                        refused=refused)
    findings = [Finding("refused", journal, None, (
        f"{p.message}; recovery keeps what it names: see the README's 'A record the rules "
        "refuse'")) for p in refused]
    present = set(names)
    for name in names:
        path = base / name
        if name in _ROOT_FILES:
            continue
        gid = generation_id_of(name)
        if gid is None:
            findings.append(Finding("unknown", path, None, "not made by sessiontemp"))
            continue
        known = state.generations.get(gid)
        if known is not None and known.removal == "finished":
            if os.path.lexists(path):  # not removed while we read the journal
                findings.append(Finding("not-removed", path, gid, (
                    f"the journal says its removal ended ({known.removal_outcome}) at event "
                    f"{known.removal_seq}")))
            continue
        if name.startswith(TRASH_PREFIX):
            findings.append(Finding("trash", path, gid, "a trash entry not yet emptied"))
        elif known is None:
            findings.append(Finding("stray", path, gid, "unknown to the journal"))
    for g in sorted(state.generations.values(), key=lambda g: g.created_seq):
        if g.removal is None and g.ready and GENERATION_PREFIX + g.id not in present:
            findings.append(Finding("missing", base / (GENERATION_PREFIX + g.id), g.id, (
                f"the journal keeps it (made at event {g.created_seq}, manager {g.manager}) "
                "but it is not on disk")))
    for m in sorted(state.managers.values(), key=lambda m: m.opened_seq):
        if m.ended is None and probe_liveness(base, m.id) == "gone":
            findings.append(Finding("unrecovered", base / MANAGERS_DIR / f"{m.id}.lock", None, (
                f"manager {m.id} (pid {m.pid}) is gone but not yet declared dead; "
                "recovery would")))
    return tuple(findings)


# -- JSON -------------------------------------------------------------------------------


def _ser(_inst: Any, _field: Any, value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _asdict(obj: Any) -> dict[str, Any]:
    return attrs.asdict(obj, value_serializer=_ser)


def state_json(state: State) -> dict[str, Any]:
    return {
        "managers": {k: _asdict(v) for k, v in sorted(state.managers.items())},
        "generations": {k: _asdict(v) for k, v in sorted(state.generations.items())},
    }


def as_json(result: object) -> dict[str, Any]:
    """The documented JSON form of any result of this module."""
    if isinstance(result, Summary):
        return {
            "journal": str(result.journal), "root": _str(result.root),
            "immutable": result.immutable, "size_bytes": result.size_bytes,
            "events": result.events, "first_seq": result.first_seq,
            "last_seq": result.last_seq, "first_time": result.first_time,
            "last_time": result.last_time, "managers": dict(result.managers),
            "running_managers": [_asdict(m) for m in result.running],
            "generations": dict(result.generations),
            "verify": as_json(result.verify), "checkpoint": result.checkpoint,
        }
    if isinstance(result, Verification):
        return {"journal": str(result.journal), "mode": result.mode, "events": result.events,
                "ok": result.ok, "problems": [_asdict(p) for p in result.problems]}
    if isinstance(result, EventRow):
        return {"seq": result.seq, "time": result.time, "kind": result.kind,
                "fields": dict(result.fields)}
    if isinstance(result, StateAt):
        return {"journal": str(result.journal), "seq": result.seq, "time": result.time,
                **state_json(result.state)}
    if isinstance(result, Story):
        return {"journal": str(result.journal), "generation": result.generation,
                "path": _str(result.path), "status": result.status, "manager": result.manager,
                "leases": list(result.leases),
                "story": [_asdict(s) for s in result.sentences]}
    if isinstance(result, FsckReport):
        return {
            "root": str(result.root), "ok": result.ok,
            "findings": [_asdict(f) for f in result.findings],
            "before": [_asdict(f) for f in result.before],
            "repair": None if result.repair is None else {
                "ran": result.repair.ran,
                "removed": [{"path": str(p), "generation": g, "reason": r}
                            for p, g, r in result.repair.removed],
                "skipped": [{"path": str(p), "reason": r} for p, r in result.repair.skipped],
                "dead": list(result.repair.dead),
            },
        }
    raise TypeError(f"no JSON form for {type(result).__name__}")


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
