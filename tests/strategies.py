"""Hypothesis strategies for the journal: the one place for strategies in this project.

What is here, and how to reuse it:

* Single events.  :func:`events_of` draws one event of a given class with
  arbitrary field values (any text, any integer); :func:`events` draws an
  event of any kind, the kinds evenly spread.  :data:`FIELD_VALUES` maps a
  field's type to the strategy of its values, :func:`wrong_values_for` to
  JSON values of every other type (a bool where an int belongs, an int where
  a str belongs, floats, null, lists, objects).
* Records.  :func:`records` numbers a list of events 1, 2, 3, ... the way the
  store does; :func:`times` draws wall-clock times.
* Legal histories.  :class:`Lifecycle` is a small, independent model of
  what managers and recovery passes write: each of its methods appends the
  events a correct :class:`sessiontemp.Manager` (or recovery) writes for one
  step, in that order, and keeps its own idea of the resulting lifecycle in
  :attr:`Lifecycle.managers` and :attr:`Lifecycle.generations`, with a
  :class:`Snapshot` after every event.  :func:`lifecycles` drives one
  through random legal steps (open managers, retain/release/rotate,
  create+ready generations, acquire and release leases, abandoned
  generations, removals begun and finished, strays, close and death);
  :func:`legal_records` gives just the records.  A test can keep driving
  the model it drew by hand, then add one event of its own with
  :meth:`Lifecycle.next_record`, which numbers it without changing the model.
* Budgets.  :func:`scaled` gives settings with a fraction of the active
  profile's examples (``default``, ``ci``, ``dev`` or ``long``, see ``conftest.py``), for
  tests whose examples are expensive, so every profile keeps its proportions.
* Reducer states.  :func:`generation_states` draws any
  :class:`sessiontemp.journal.GenerationState` (for
  :func:`sessiontemp.journal.reducer.removal_due`);
  :func:`snapshot_of` projects a reducer :class:`sessiontemp.journal.State` onto the
  model's :class:`Snapshot`, so the two can be compared.  The model keeps
  the whole history; :func:`live_part` restricts one of its snapshots to
  what the reducer's state holds (what is alive or still owes work).
* Activity on a timeline: :func:`activities` draws a window's event times
  and the intervals leases were held, spread from milliseconds to days apart,
  for the timeline's compression of idle stretches (``sessiontemp.inspect.scale``).
* Workloads of real processes for the retention oracle
  (``tests/test_retention_oracle.py``): :func:`oracle_workloads` draws
  scenes (managers opened, named or not, with a budget or not; leases,
  files, measurements, commands that close their descriptors, artifacts;
  kills, closes, recovery passes, a pass paused at its checkpoint while
  other steps run) as one list of :class:`tests.oracle.Step`.
* Faults a process lives through (for the state machine):
  :func:`faulted_operations`, :func:`fault_steps`, :func:`store_failures`,
  :func:`interrupt_ways`; the hook that injects them is in ``tests/faults.py``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs
from hypothesis import settings
from hypothesis import strategies as st

from sessiontemp.journal import KINDS, Event, GenerationState, Record, State
from sessiontemp.journal.events import (
    GenerationCreated,
    GenerationMeasured,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    RecoveryStarted,
    Released,
    RemovalFinished,
    RemovalStarted,
    Retained,
    Rotated,
    SessionAdopted,
    SessionClaimed,
    SessionDiscarded,
    SpaceRefused,
)
from sessiontemp.journal.reducer import Fold
from tests.faults import STORE_FAILURES, StoreFailure
from tests.neighbour import MOVES, Move
from tests.oracle import KINDS as ORACLE_KINDS
from tests.oracle import SLOTS
from tests.oracle import Step as OracleStep

__all__ = [
    "EVENT_CLASSES",
    "FAULTED_OPERATIONS",
    "FIELD_EXAMPLES",
    "FIELD_VALUES",
    "MANAGER_EVENT_CLASSES",
    "NAMED_FIELD_VALUES",
    "Activity",
    "Lifecycle",
    "ModelGeneration",
    "ModelManager",
    "Snapshot",
    "activities",
    "event_fields",
    "events",
    "events_of",
    "fault_steps",
    "faulted_operations",
    "generation_id",
    "generation_states",
    "hex_id",
    "hex_ids",
    "ids",
    "interrupt_ways",
    "legal_records",
    "lifecycles",
    "live_part",
    "manager_id",
    "manager_ids",
    "neighbour_moves",
    "oracle_workloads",
    "records",
    "scaled",
    "session_histories",
    "snapshot_of",
    "store_failures",
    "times",
    "wrong_values_for",
]

# -- budgets --------------------------------------------------------------------------


def scaled(fraction: float, *, minimum: int = 10) -> settings:
    """Settings running *fraction* of the active profile's ``max_examples`` (at least *minimum*)."""
    return settings(max_examples=max(minimum, round(settings().max_examples * fraction)))


# -- single events --------------------------------------------------------------

EVENT_CLASSES: Final[tuple[type[Event], ...]] = tuple(KINDS.values())

# The kinds whose ``manager`` field names the manager they act on.
MANAGER_EVENT_CLASSES: Final[tuple[type[Event], ...]] = tuple(
    cls for cls in EVENT_CLASSES if "manager" in {a.name for a in attrs.fields(cls)}
)

FIELD_VALUES: Final[Mapping[type, st.SearchStrategy[Any]]] = {
    str: st.text(max_size=200),
    int: st.integers(),
    float: st.floats(),
}


def manager_id(name: str) -> str:
    """A fixed manager id in canonical form, derived from *name* (for tests that write by hand)."""
    return hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()


def generation_id(name: str) -> str:
    """A fixed generation id in canonical form, derived from *name*."""
    digest = hashlib.md5(name.encode(), usedforsecurity=False).digest()[:10]
    return base64.b32encode(digest).decode().lower()


def hex_id(name: str) -> str:
    """A fixed lease or recovery id in canonical form, derived from *name*."""
    return manager_id(name)[:16]


def manager_ids() -> st.SearchStrategy[str]:
    """A manager id in its canonical form (32 lower-case hex digits)."""
    return st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)


def hex_ids() -> st.SearchStrategy[str]:
    """A lease or recovery id in its canonical form (16 lower-case hex digits)."""
    return st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


# Fields whose values are checked beyond their type: ids in canonical form,
# pids and inode numbers in range.  Any other field takes FIELD_VALUES.
NAMED_FIELD_VALUES: Final[Mapping[str, st.SearchStrategy[Any]]] = {
    "manager": manager_ids(),
    "generation": st.text(alphabet="abcdefghijklmnopqrstuvwxyz234567", min_size=16, max_size=16),
    "lease": hex_ids(),
    "recovery": hex_ids(),
    "by": manager_ids() | hex_ids(),
    "pid": st.integers(1, 2**31),
    "device": st.integers(0, 2**63),
    "inode": st.integers(0, 2**63),
    "started": st.integers(0, 2**62),
    "session": st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True).filter(
        lambda name: name not in (".", "..")
    ),
    "previous": manager_ids(),
    "artifact": hex_ids(),
    "sha256": st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    "size": st.integers(0, 2**62),
    "window_ms": st.integers(0, 2**62),
    "bytes": st.integers(0, 2**62),
    "inodes": st.integers(0, 2**62),
    "unread": st.integers(0, 2**62),
    "found": st.integers(0, 2**62),
    "limit": st.integers(0, 2**62),
    "time": st.floats(min_value=0.0, max_value=4e9, allow_nan=False, allow_infinity=False),
}
# Fields one kind checks more strictly than the field name alone says.
KIND_FIELD_VALUES: Final[Mapping[tuple[str, str], st.SearchStrategy[Any]]] = {
    ("artifact.kept", "label"): st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}",
                                              fullmatch=True),
    ("space.refused", "generation"): st.just("") | NAMED_FIELD_VALUES["generation"],
    ("space.refused", "cause"): st.sampled_from(["max_bytes", "max_inodes", "min_free_bytes"]),
}
# One valid value of every field name, for tests that build an event by hand.
FIELD_EXAMPLES: Final[Mapping[str, Any]] = {
    "manager": "0123456789abcdef0123456789abcdef",
    "generation": "abcdefghijk23456",
    "lease": "0123456789abcdef",
    "recovery": "fedcba9876543210",
    "by": "fedcba9876543210",
    "pid": 7,
    "device": 7,
    "inode": 7,
    "started": 7,
    "session": "chat-42",
    "previous": "fedcba9876543210fedcba9876543210",
    "artifact": "0123456789abcdef",
    "sha256": "0" * 64,
    "size": 7,
    "window_ms": 7,
    "bytes": 7,
    "inodes": 7,
    "unread": 0,
    "found": 7,
    "limit": 7,
    "cause": "max_bytes",
    "time": 1_700_000_000.5,
}


def event_fields(cls: type[Event]) -> dict[str, type]:
    """The field names of *cls* and the Python type of each (``str``, ``int`` or ``float``)."""
    fields: dict[str, type] = {}
    for a in attrs.fields(cls):
        # The event modules use postponed annotations: the type is its name.
        name = a.type if isinstance(a.type, str) else getattr(a.type, "__name__", "")
        fields[a.name] = {"str": str, "int": int, "float": float}[name]
    return fields


def events_of(cls: type[Event]) -> st.SearchStrategy[Event]:
    """One event of class *cls*, every field drawn from :data:`FIELD_VALUES`."""
    return st.builds(
        cls, **{name: KIND_FIELD_VALUES.get(
            (cls.kind, name), NAMED_FIELD_VALUES.get(name, FIELD_VALUES[typ])
        ) for name, typ in event_fields(cls).items()}
    )


def events() -> st.SearchStrategy[Event]:
    """One event of any kind; each kind is equally likely."""
    return st.sampled_from(EVENT_CLASSES).flatmap(events_of)


_JSON_SCALARS: Final[Mapping[str, st.SearchStrategy[Any]]] = {
    "bool": st.booleans(),
    "int": st.integers(),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "str": st.text(max_size=8),
    "null": st.none(),
}


def wrong_values_for(typ: type) -> st.SearchStrategy[Any]:
    """JSON values that are not of type *typ*: every other scalar, and lists and objects.

    For ``int`` this includes bools (an int to Python, never to the schema);
    for ``str`` it includes ints; for ``float``, ints (a whole number
    written without its point is not a time).
    """
    own = {int: "int", str: "str", float: "float"}[typ]
    scalars = [s for name, s in _JSON_SCALARS.items() if name != own]
    return st.one_of(
        *scalars,
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )


# -- records ----------------------------------------------------------------------


def times() -> st.SearchStrategy[float]:
    """A wall-clock time as a clock gives it: a non-negative float, integral or not."""
    return st.floats(min_value=0.0, max_value=4e9, allow_nan=False, allow_infinity=False)


def records(
    event_strategy: st.SearchStrategy[Event] | None = None,
    *,
    min_size: int = 0,
    max_size: int = 20,
) -> st.SearchStrategy[list[Record]]:
    """Events numbered 1, 2, 3, ... with non-decreasing times; any events, legal or not."""

    @st.composite
    def build(draw: st.DrawFn) -> list[Record]:
        drawn = draw(
            st.lists(event_strategy or events(), min_size=min_size, max_size=max_size)
        )
        start = draw(times())
        return [Record(seq, start + seq, event) for seq, event in enumerate(drawn, start=1)]

    return build()


@attrs.frozen
class Activity:
    """A timeline's window [lo, hi]: when events were written, and when leases were held."""

    lo: float
    hi: float
    events: tuple[float, ...]
    leases: tuple[tuple[float, float], ...]


def activities() -> st.SearchStrategy[Activity]:
    """Events and leases over a window, the steps between them from 1 ms to 2 days."""

    @st.composite
    def build(draw: st.DrawFn) -> Activity:
        start = draw(st.floats(min_value=1.6e9, max_value=1.9e9))
        steps = draw(st.lists(st.sampled_from([0.001, 0.5, 5.0, 59.0, 61.0, 600.0, 7200.0,
                                               172800.0]), min_size=1, max_size=30))
        moments = [start]
        for step in steps:
            moments.append(moments[-1] + step)
        leases = []
        for _ in range(draw(st.integers(0, 4))):
            a = draw(st.sampled_from(moments))
            b = a + draw(st.sampled_from([0.01, 30.0, 3600.0, 86400.0]))
            leases.append((a, min(b, moments[-1])))
        return Activity(moments[0], moments[-1], tuple(moments), tuple(leases))

    return build()


def ids() -> st.SearchStrategy[str]:
    """A generation id as the library makes them: 16 characters of lower-case base32."""
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz234567", min_size=16, max_size=16)


# -- the lifecycle model ------------------------------------------------------------

_BASE32: Final = "abcdefghijklmnopqrstuvwxyz234567"


@dataclasses.dataclass(frozen=True)
class ModelManager:
    """What the model expects the reducer to know of one manager."""

    id: str
    owners: int = 0
    sealed: bool = False
    ended: str | None = None
    current: str | None = None


@dataclasses.dataclass(frozen=True)
class ModelGeneration:
    """What the model expects the reducer to know of one generation (or stray)."""

    id: str
    manager: str | None
    ready: bool = False
    retired: bool = False
    leases: frozenset[str] = frozenset()
    removal: str | None = None
    removal_outcome: str | None = None


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The model's whole expectation after some event."""

    managers: Mapping[str, ModelManager]
    generations: Mapping[str, ModelGeneration]


def snapshot_of(state: State) -> Snapshot:
    """The part of a reducer state that the model predicts."""
    return Snapshot(
        managers={
            m.id: ModelManager(m.id, m.owners, m.sealed, m.ended, m.current)
            for m in state.managers.values()
        },
        generations={
            g.id: ModelGeneration(
                g.id, g.manager, g.ready, g.retired, g.leases, g.removal, g.removal_outcome
            )
            for g in state.generations.values()
        },
    )


def live_part(snapshot: Snapshot) -> Snapshot:
    """The part of a whole-history snapshot that the reducer's state holds.

    The model never forgets; the reducer keeps only generations whose removal
    has not finished, and managers not ended or still owning one of those.
    """
    generations = {gid: g for gid, g in snapshot.generations.items()
                   if g.removal != "finished"}
    owning = {g.manager for g in generations.values()}
    return Snapshot(
        managers={mid: m for mid, m in snapshot.managers.items()
                  if m.ended is None or mid in owning},
        generations=generations,
    )


def _require(allowed: bool, subject: object) -> None:
    if not allowed:
        raise ValueError(f"the model was asked for a step the library never takes: {subject!r}")


class Lifecycle:
    """A model of managers and recovery passes that writes only legal histories.

    Each step method appends, in order, the events the library writes for
    that step and updates the model.  The methods assert their own
    preconditions (the ones the manager checks before it writes anything) and
    raise ValueError when asked for a step the library never takes: call them
    only when the step is allowed, which the query methods tell.
    """

    def __init__(self, start_time: float = 1_700_000_000.0) -> None:
        self.records: list[Record] = []
        self.snapshots: list[Snapshot] = []
        self.managers: dict[str, ModelManager] = {}
        self.generations: dict[str, ModelGeneration] = {}
        self._start_time = start_time
        self._counter = itertools.count()

    def __repr__(self) -> str:
        lines = [f"  {r.seq}: {r.event!r}" for r in self.records]
        return "Lifecycle(\n" + "\n".join(lines) + "\n)"

    # -- numbering ---------------------------------------------------------------

    def next_record(self, event: Event) -> Record:
        """*event* as the next record of this history; the model is not changed."""
        seq = len(self.records) + 1
        return Record(seq, self._start_time + seq, event)

    def _emit(self, event: Event) -> None:
        self.records.append(self.next_record(event))
        self.snapshots.append(Snapshot(dict(self.managers), dict(self.generations)))

    def new_id(self, prefix: str) -> str:
        """An id no event of this history uses yet, in the canonical form of its kind.

        *prefix* says the kind: "m" a manager, "g" or "s" a generation or
        stray, "l" a lease, "r" a recovery pass.
        """
        n = next(self._counter)
        if prefix == "m":
            return f"{n:032x}"
        if prefix in ("l", "r"):
            return f"{n:016x}"
        digits = []
        for _ in range(16):
            n, d = divmod(n, 32)
            digits.append(_BASE32[d])
        return "".join(reversed(digits))

    # -- queries -----------------------------------------------------------------

    def live_managers(self) -> list[str]:
        return [m.id for m in self.managers.values() if m.ended is None]

    def sealed_live_managers(self) -> list[str]:
        return [m.id for m in self.managers.values() if m.ended is None and m.sealed]

    def ended_managers(self) -> list[str]:
        return [m.id for m in self.managers.values() if m.ended is not None]

    def leasing_managers(self) -> list[str]:
        """Live managers that may hand out a lease: not sealed, with an owner."""
        return [
            m.id for m in self.managers.values()
            if m.ended is None and not m.sealed and m.owners > 0
        ]

    def held_leases(self) -> list[tuple[str, str]]:
        """Every ``(generation, lease)`` pair currently held."""
        return [
            (g.id, lease)
            for g in self.generations.values()
            for lease in sorted(g.leases)
        ]

    def due_generations(self) -> list[str]:
        """Generations that may be removed now: retired, lease-free, removal not begun."""
        return [
            g.id for g in self.generations.values()
            if g.retired and not g.leases and g.removal is None
        ]

    def started_removals(self) -> list[str]:
        return [g.id for g in self.generations.values() if g.removal == "started"]

    def measurable(self) -> list[tuple[str, str]]:
        """Every ``(manager, generation)`` a manager may measure: ready, not being removed."""
        live = set(self.live_managers())
        return [(g.manager, g.id) for g in self.generations.values()
                if g.manager in live and g.ready and g.removal is None]

    def generations_of(self, manager: str) -> list[str]:
        return [g.id for g in self.generations.values() if g.manager == manager]

    # -- owners ------------------------------------------------------------------

    def open_manager(self, pid: int = 4242) -> str:
        manager = self.new_id("m")
        self.managers[manager] = ModelManager(manager)
        self._emit(ManagerOpened(manager, pid))
        return manager

    def retain(self, manager: str) -> None:
        m = self._live(manager)
        if not m.sealed:
            self.managers[manager] = dataclasses.replace(m, owners=m.owners + 1)
        self._emit(Retained(manager))

    def release(self, manager: str) -> None:
        m = self._live(manager)
        owners = max(m.owners - 1, 0)
        if owners == 0:
            self._retire_current(m)
            m = dataclasses.replace(m, sealed=True, current=None)
        self.managers[manager] = dataclasses.replace(m, owners=owners)
        self._emit(Released(manager))

    def rotate(self, manager: str) -> None:
        m = self._live(manager)
        if not m.sealed:
            self._retire_current(m)
            self.managers[manager] = dataclasses.replace(m, current=None)
        self._emit(Rotated(manager))

    def _retire_current(self, m: ModelManager) -> None:
        if m.current is not None:
            g = self.generations[m.current]
            self.generations[g.id] = dataclasses.replace(g, retired=True)

    # -- generations and leases ----------------------------------------------------

    def create_generation(self, manager: str) -> str:
        """Only ``generation.created``: the step before ``mkdir``."""
        m = self._live(manager)
        _require(not m.sealed and m.owners > 0 and m.current is None, m)
        generation = self.new_id("g")
        self.generations[generation] = ModelGeneration(generation, manager)
        self.managers[manager] = dataclasses.replace(m, current=generation)
        self._emit(GenerationCreated(manager, generation))
        return generation

    def ready_generation(self, manager: str, generation: str) -> None:
        g = self.generations[generation]
        _require(g.manager == manager and not g.ready and g.removal is None, g)
        self.generations[generation] = dataclasses.replace(g, ready=True)
        inode = 1000 + len(self.records)
        self._emit(GenerationReady(manager, generation, 64769, inode))

    def make_generation(self, manager: str) -> str:
        """Created, then ready: a generation made without a hitch."""
        generation = self.create_generation(manager)
        self.ready_generation(manager, generation)
        return generation

    def acquire(self, manager: str) -> tuple[str, str]:
        """A lease on the current generation, made first when there is none."""
        m = self._live(manager)
        _require(not m.sealed and m.owners > 0, m)
        generation = m.current if m.current is not None else self.make_generation(manager)
        lease = self.new_id("l")
        g = self.generations[generation]
        _require(g.ready, g)
        self.generations[generation] = dataclasses.replace(g, leases=g.leases | {lease})
        self._emit(LeaseAcquired(manager, generation, lease))
        return generation, lease

    def measure(self, manager: str, generation: str, size: int, inodes: int) -> None:
        """``generation.measured``: the walk's result, which changes nothing the model predicts."""
        _require((manager, generation) in self.measurable(), (manager, generation))
        self._emit(GenerationMeasured(manager, generation, size, inodes,
                                      self._start_time + len(self.records), 0))

    def refuse(self, manager: str, generation: str | None, cause: str, found: int,
               limit: int) -> None:
        """``space.refused``: an acquire turned away, which changes nothing the model predicts.

        *generation* None: a low disk's refusal naming no directory.
        """
        self._live(manager)
        if generation is None:
            _require(cause == "min_free_bytes", cause)
        else:
            g = self.generations[generation]
            _require(g.manager == manager and g.removal is None, g)
        self._emit(SpaceRefused(manager, generation or "", cause, found, limit))

    def refusable(self) -> list[tuple[str, str | None]]:
        """Every ``(manager, generation)`` a refusal may name: a live manager's own directory
        not being removed, or none."""
        live = self.live_managers()
        return [(m, None) for m in live] + [
            (g.manager, g.id) for g in self.generations.values()
            if g.manager in live and g.removal is None]

    def abandon_generation(self, manager: str) -> str:
        """A generation whose ``mkdir`` failed: created, then removed at once."""
        generation = self.create_generation(manager)
        self.start_removal(generation, by=manager, reason="could not be made")
        self.finish_removal(generation, by=manager, outcome="absent")
        return generation

    def release_lease(self, generation: str, lease: str) -> None:
        g = self.generations[generation]
        _require(lease in g.leases, (g, lease))
        assert g.manager is not None
        self._live(g.manager)
        self.generations[generation] = dataclasses.replace(g, leases=g.leases - {lease})
        self._emit(LeaseReleased(g.manager, generation, lease))

    # -- removal -----------------------------------------------------------------

    def start_removal(
        self, generation: str, *, by: str, reason: str = "retired and no lease left"
    ) -> None:
        """``removal.started``; for an id the history never named, a stray."""
        g = self.generations.get(generation)
        if g is None:
            self.generations[generation] = ModelGeneration(
                generation, None, retired=True, removal="started"
            )
        else:
            _require(g.removal is None and not g.leases, g)
            if g.manager is not None:
                m = self.managers[g.manager]
                if m.current == generation:
                    _require(not g.ready, g)
                    self.managers[m.id] = dataclasses.replace(m, current=None)
            self.generations[generation] = dataclasses.replace(
                g, retired=True, removal="started"
            )
        self._emit(RemovalStarted(generation, by, reason))

    def finish_removal(self, generation: str, *, by: str, outcome: str = "removed") -> None:
        g = self.generations[generation]
        _require(g.removal == "started", g)
        self.generations[generation] = dataclasses.replace(
            g, removal="finished", removal_outcome=outcome
        )
        self._emit(RemovalFinished(generation, by, outcome))

    def remove_stray(self, *, by: str, finish: bool = True) -> str:
        """A recovery pass removing an entry the journal never named."""
        generation = self.new_id("s")
        self.start_removal(generation, by=by, reason="unknown to the journal")
        if finish:
            self.finish_removal(generation, by=by)
        return generation

    # -- the end -----------------------------------------------------------------

    def start_recovery(self, pid: int = 4343) -> str:
        recovery = self.new_id("r")
        self._emit(RecoveryStarted(recovery, pid))
        return recovery

    def close(self, manager: str) -> None:
        self._end(manager, "closed")
        self._emit(ManagerClosed(manager))

    def die(self, manager: str, recovery: str) -> None:
        self._end(manager, "dead")
        self._emit(ManagerDied(manager, recovery))

    def _end(self, manager: str, how: str) -> None:
        m = self._live(manager)
        for g in list(self.generations.values()):
            if g.manager == manager and g.removal != "finished":
                self.generations[g.id] = dataclasses.replace(
                    g, retired=True, leases=frozenset()
                )
        self.managers[manager] = dataclasses.replace(m, sealed=True, ended=how, current=None)

    def _live(self, manager: str) -> ModelManager:
        m = self.managers[manager]
        _require(m.ended is None, m)
        return m


# -- driving the model at random ------------------------------------------------------

_Step = Callable[[st.DrawFn, Lifecycle], None]


def _pick(draw: st.DrawFn, options: Sequence[str]) -> str:
    return draw(st.sampled_from(sorted(options)))


def _remover(lc: Lifecycle, generation: str) -> str:
    """Who removes *generation*: its live manager, or else a recovery pass."""
    owner = lc.generations[generation].manager if generation in lc.generations else None
    if owner is not None and owner in lc.live_managers():
        return owner
    return lc.start_recovery()


def _remove(draw: st.DrawFn, lc: Lifecycle) -> None:
    generation = _pick(draw, lc.due_generations())
    by = _remover(lc, generation)
    lc.start_removal(generation, by=by)
    # Mostly finished at once; sometimes left half-done, as after a crash.
    if draw(st.integers(0, 3)):
        lc.finish_removal(generation, by=by)


def _finish(draw: st.DrawFn, lc: Lifecycle) -> None:
    generation = _pick(draw, lc.started_removals())
    outcome = draw(st.sampled_from(["removed", "absent", "refused: replaced"]))
    lc.finish_removal(generation, by=lc.start_recovery(), outcome=outcome)


def _die(draw: st.DrawFn, lc: Lifecycle) -> None:
    manager = _pick(draw, lc.live_managers())
    lc.die(manager, lc.start_recovery())


def _release_lease(draw: st.DrawFn, lc: Lifecycle) -> None:
    generation, lease = draw(st.sampled_from(lc.held_leases()))
    lc.release_lease(generation, lease)


def _open(draw: st.DrawFn, lc: Lifecycle) -> None:
    lc.open_manager(draw(st.integers(1, 2**22)))


def _retain(draw: st.DrawFn, lc: Lifecycle) -> None:
    lc.retain(_pick(draw, lc.live_managers()))


def _release(draw: st.DrawFn, lc: Lifecycle) -> None:
    lc.release(_pick(draw, lc.live_managers()))


def _rotate(draw: st.DrawFn, lc: Lifecycle) -> None:
    lc.rotate(_pick(draw, lc.live_managers()))


def _close(draw: st.DrawFn, lc: Lifecycle) -> None:
    lc.close(_pick(draw, lc.live_managers()))


def _measure(draw: st.DrawFn, lc: Lifecycle) -> None:
    manager, generation = draw(st.sampled_from(lc.measurable()))
    lc.measure(manager, generation, draw(st.integers(0, 2**40)), draw(st.integers(0, 2**20)))


def _refuse(draw: st.DrawFn, lc: Lifecycle) -> None:
    manager, generation = draw(st.sampled_from(lc.refusable()))
    causes = ["min_free_bytes"] if generation is None else ["max_bytes", "max_inodes",
                                                             "min_free_bytes"]
    lc.refuse(manager, generation, draw(st.sampled_from(causes)), draw(st.integers(0, 2**40)),
              draw(st.integers(0, 2**40)))


def _acquire(draw: st.DrawFn, lc: Lifecycle) -> None:
    lc.acquire(_pick(draw, lc.leasing_managers()))


def _idle(lc: Lifecycle) -> list[str]:
    """Managers that may make a generation now: leasing, with none current."""
    return [m for m in lc.leasing_managers() if lc.managers[m].current is None]


def _fail_generation(draw: st.DrawFn, lc: Lifecycle) -> None:
    """A generation that never became ready: mkdir failed, or the process died."""
    manager = _pick(draw, _idle(lc))
    if draw(st.booleans()):
        lc.abandon_generation(manager)
    else:
        lc.create_generation(manager)
        lc.die(manager, lc.start_recovery())


def _recovery(draw: st.DrawFn, lc: Lifecycle) -> None:
    """A recovery pass that finds only a stray entry, or nothing at all to do."""
    recovery = lc.start_recovery()
    if draw(st.booleans()):
        lc.remove_stray(by=recovery, finish=draw(st.booleans()))


def _enabled(lc: Lifecycle, max_live: int) -> list[_Step]:
    """The steps allowed now, repeated by weight so leases and removals are common."""
    steps: list[_Step] = []
    if len(lc.live_managers()) < max_live:
        steps += [_open] * 2
    if lc.live_managers():
        steps += [_retain] * 3 + [_release] * 2 + [_rotate] * 2 + [_close, _die]
    if lc.leasing_managers():
        steps += [_acquire] * 4
    if _idle(lc):
        steps.append(_fail_generation)
    if lc.held_leases():
        steps += [_release_lease] * 3
    if lc.measurable():
        steps.append(_measure)
    if lc.refusable():
        steps.append(_refuse)
    if lc.due_generations():
        steps += [_remove] * 3
    if lc.started_removals():
        steps += [_finish] * 2
    steps.append(_recovery)
    return steps


def lifecycles(*, max_steps: int = 40, max_live: int = 3) -> st.SearchStrategy[Lifecycle]:
    """A :class:`Lifecycle` driven through up to *max_steps* random legal steps.

    At most *max_live* managers live at once; ended ones may be followed by new ones.
    Each step is one operation of a manager or a recovery pass, so one step
    may write several events (acquiring on an idle manager writes three).
    """

    @st.composite
    def build(draw: st.DrawFn) -> Lifecycle:
        lc = Lifecycle(start_time=draw(times()))
        for _ in range(draw(st.integers(0, max_steps))):
            step = draw(st.sampled_from(_enabled(lc, max_live)))
            step(draw, lc)
        return lc

    return build()


def legal_records(*, max_steps: int = 40, max_live: int = 3) -> st.SearchStrategy[list[Record]]:
    """The records of a random legal history (see :func:`lifecycles`)."""
    return lifecycles(max_steps=max_steps, max_live=max_live).map(
        lambda lc: list(lc.records)
    )


# -- named sessions ---------------------------------------------------------------------

_SESSION_NAMES: Final = ("chat", "repl")


def session_histories(*, max_steps: int = 40) -> st.SearchStrategy[list[Record]]:
    """The records of a random legal history of named sessions.

    Owners claim a name (after a recovery discarded what a dead owner left,
    or adopting it), lease, rotate, close or die; recoveries remove what is
    due.  Each step is chosen among those the reducer's own state allows
    at that point (the state is what decides here, not a model): what this
    exercises is sessions being kept, adopted, discarded and forgotten, and
    then claimed again under the same name.
    """

    @st.composite
    def build(draw: st.DrawFn) -> list[Record]:
        records: list[Record] = []
        fold = Fold()
        counter = itertools.count()
        start = draw(times())
        recovery = hex_id("recovery")

        def emit(*events: Event) -> None:
            for event in events:
                record = Record(len(records) + 1, start + len(records) + 1, event)
                fold.step(record)
                records.append(record)

        for _ in range(draw(st.integers(0, max_steps))):
            live = sorted(m.id for m in fold.managers.values() if m.ended is None)
            steps = ["open"] if len(live) < 3 else []
            steps += ["lease", "rotate", "end"] if live else []
            if any(g.retired and not g.leases and g.removal is None
                   for g in fold.generations.values()):
                steps.append("remove")
            held = sorted((g.id, lease) for g in fold.generations.values() for lease in g.leases)
            if held:
                steps.append("unlease")
            step = draw(st.sampled_from(steps), label="step")
            n = next(counter)
            if step == "open":
                manager = manager_id(f"open{n}")
                emit(ManagerOpened(manager, 1000 + n))
                owned = {s.name for s in fold.sessions.values()
                         if fold.managers.get(s.owner) is not None
                         and fold.managers[s.owner].ended is None}
                free = [name for name in _SESSION_NAMES if name not in owned]
                name = draw(st.sampled_from([None, *free]), label="session")
                session = None if name is None else fold.sessions.get(name)
                kept = None if session is None else session.kept
                resume = draw(st.booleans(), label="resume") if kept is not None else False
                if name is not None and kept is not None and not resume:
                    emit(SessionDiscarded(name, recovery, "started afresh"))
                if name is not None:
                    emit(SessionClaimed(manager, name, 60_000))
                if name is not None and kept is not None and resume and session is not None:
                    emit(SessionAdopted(manager, name, kept, session.owner))
                emit(Retained(manager))
            elif step == "lease":
                manager = draw(st.sampled_from(live), label="manager")
                m = fold.managers[manager]
                if m.sealed or m.owners == 0:
                    continue
                if m.current is None:
                    generation = generation_id(f"gen{n}")
                    emit(GenerationCreated(manager, generation),
                         GenerationReady(manager, generation, 1, n))
                emit(LeaseAcquired(manager, fold.managers[manager].current or "", hex_id(f"l{n}")))
            elif step == "rotate":
                emit(Rotated(draw(st.sampled_from(live), label="manager")))
            elif step == "unlease":
                generation, lease = draw(st.sampled_from(held), label="lease")
                g = fold.generations[generation]
                if g.manager is None or fold.managers[g.manager].ended is not None:
                    continue
                emit(LeaseReleased(g.manager, generation, lease))
            elif step == "end":
                manager = draw(st.sampled_from(live), label="manager")
                died = draw(st.booleans(), label="died")
                emit(ManagerDied(manager, recovery) if died else ManagerClosed(manager))
            else:
                resumable = {s.kept for s in fold.sessions.values()}
                due = sorted(g.id for g in fold.generations.values()
                             if g.retired and not g.leases and g.removal is None
                             and g.id not in resumable)
                if due:
                    generation = draw(st.sampled_from(due), label="generation")
                    emit(RemovalStarted(generation, recovery, "retired and no lease left"),
                         RemovalFinished(generation, recovery, "removed"))
        return records

    return build()


# -- reducer states ---------------------------------------------------------------------


def generation_states() -> st.SearchStrategy[GenerationState]:
    """Any generation state, consistent or not: every flag drawn independently."""
    removal = st.sampled_from([None, "started", "finished"])
    return st.builds(
        GenerationState,
        id=ids(),
        manager=st.none() | ids(),
        created_seq=st.integers(1, 10**6),
        created_at=times(),
        ready=st.booleans(),
        leases=st.frozensets(ids(), max_size=3),
        retired=st.booleans(),
        removal=removal,
        removal_outcome=st.none() | st.sampled_from(["removed", "absent", "refused: moved"]),
    )


# -- faults a process lives through ------------------------------------------------

# The operations of a manager that a fault may hit (tests/model.py names them).
FAULTED_OPERATIONS: Final = ("retain", "release", "rotate", "acquire", "release_lease", "close",
                             "measure")


def faulted_operations() -> st.SearchStrategy[str]:
    """Which operation the next fault hits."""
    return st.sampled_from(FAULTED_OPERATIONS)


def fault_steps() -> st.SearchStrategy[int]:
    """Before which durable step of the operation (1 = its first); past its last, none fires."""
    # Most operations take one to four steps: the first few are drawn most.
    return st.integers(min_value=1, max_value=4) | st.integers(min_value=1, max_value=12)


def neighbour_moves() -> st.SearchStrategy[Move]:
    """What another process does at a step: roll over and retire, or one move alone."""
    return st.sampled_from(MOVES)


def store_failures() -> st.SearchStrategy[StoreFailure]:
    """How the journal refuses an append: "full", "busy" or "readonly" (tests/faults.py)."""
    return st.sampled_from(STORE_FAILURES)


def interrupt_ways() -> st.SearchStrategy[Literal["kill", "raise_signal"]]:
    """How SIGINT is sent: to the process (``kill``, as a terminal does) or to the thread."""
    ways: tuple[Literal["kill", "raise_signal"], ...] = ("kill", "raise_signal")
    return st.sampled_from(ways)


# -- workloads of real processes (the retention oracle) ---------------------------------

# The steps a scene draws at random, between its fixed ones: everything but the
# pause and resume of a pass, which scenes place in pairs.
_ORACLE_SINGLES: Final = tuple(k for k in ORACLE_KINDS if k not in ("pause", "resume"))
# What may run while a recovery pass is paused at its checkpoint: no other pass
# (it would wait for the paused one), so no named open, recover or removal either
# (tests/oracle.py skips those).
_ORACLE_INTERLEAVED: Final = ("acquire", "write", "measure", "command", "end-command",
                              "release-lease", "keep", "kill", "close", "rotate", "release",
                              "open", "churn")


def _oracle_step(kinds: Sequence[str]) -> st.SearchStrategy[OracleStep]:
    return st.builds(OracleStep, kind=st.sampled_from(kinds), slot=st.integers(0, SLOTS - 1),
                     n=st.integers(0, 11), flag=st.booleans())


@st.composite
def _oracle_scene(draw: st.DrawFn) -> list[OracleStep]:
    slot = draw(st.integers(0, SLOTS - 1), label="slot")
    kind = draw(st.sampled_from(("manager", "outlived", "interleaved", "steps")), label="scene")
    if kind == "manager":
        # A manager (named or not, a budget or not) with an owner and a lease.
        opened = draw(_oracle_step(("open",)), label="open")
        return [OracleStep("open", slot, opened.n, opened.flag), OracleStep("retain", slot),
                OracleStep("acquire", slot)]
    if kind == "outlived":
        # A recovery pass paused at its checkpoint (once enough events fell due)
        # while a lease's command that closed its descriptors starts and the
        # lease's manager is killed.
        return [OracleStep("churn", slot, 5), OracleStep("pause"),
                OracleStep("command", slot, draw(st.integers(0, 3), label="lease")),
                OracleStep("kill", slot), OracleStep("resume")]
    if kind == "interleaved":
        # Any steps a live manager may take while a pass is paused at its checkpoint.
        between = draw(st.lists(_oracle_step(_ORACLE_INTERLEAVED), min_size=1, max_size=4),
                       label="between")
        return [OracleStep("churn", slot, 5), OracleStep("pause"), *between,
                OracleStep("resume")]
    return draw(st.lists(_oracle_step(_ORACLE_SINGLES), min_size=1, max_size=4), label="steps")


def oracle_workloads(*, max_scenes: int = 6) -> st.SearchStrategy[list[OracleStep]]:
    """A workload for the retention oracle: a manager opened, then up to *max_scenes* scenes.

    Scenes are a manager opened with an owner and a lease; a pass paused at
    its checkpoint while a command that closed its descriptors starts and
    its manager is killed; a pass paused while other steps run; a few steps
    of any kind.  Steps that cannot apply when they come are skipped by the
    driver, the same way on every root.
    """
    return st.lists(_oracle_scene(), min_size=1, max_size=max_scenes).map(
        lambda scenes: [OracleStep("open"), OracleStep("retain"), OracleStep("acquire"),
                        *itertools.chain.from_iterable(scenes)])
