"""A reference model of sessiontemp, and a world that drives real managers beside it.

:class:`Model` is the lifecycle written out again from the specification, in
plain dicts and counters, and shares no code with :mod:`journal.reducer`:

* owners are a reference count; the release that takes them to zero (or a
  release with none) seals the manager for good and retires its current
  generation; retain and rotate on a sealed manager change nothing;
* rotate retires the current generation; acquire makes a generation when
  there is no current one, and is refused when sealed or without owners;
* a retired generation of a live manager is removed when its last lease is
  released; close removes all of a manager's generations (in one process
  its leases die with it);
* a crashed manager (killed, in a test: see :func:`simulate_kill`) keeps
  its generations on disk until the next recovery, which removes them all:
  in one process no lease of a dead manager can outlive it.

:class:`World` owns a root with real :class:`sessiontemp.Manager` objects on
it and the model beside them; each operation runs on both, and
:meth:`World.check` states the invariants: the directories on disk are
exactly the model's live generations, the journal replayed from scratch is
the model, every live generation holds exactly the files written into it,
nothing outside the root changed, sealed managers refuse to lease.

Names in the model are the world's own (``m0``, ``l3``); generation ids are
the ones the library chose, learnt from the lease that first names them.
"""

from __future__ import annotations

import itertools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from journal import State, Store, checkpoint, replay
from sessiontemp import Lease, Manager, Unavailable, recover
from sessiontemp.root import GENERATION_PREFIX, JOURNAL_NAME, TRASH_PREFIX, generation_name
from sessiontemp.steps import StepHook

__all__ = ["SCRATCH", "Model", "World", "simulate_kill", "view_of_journal"]

Status: TypeAlias = Literal["live", "closed", "crashed", "dead"]
# A manager as the journal shows it: owners, sealed, current generation, how it ended.
ManagerView: TypeAlias = tuple[int, bool, str | None, str | None]
# A generation: its manager, retired, leases, removal (None or "finished").
GenerationView: TypeAlias = tuple[str | None, bool, frozenset[str], str | None]
View: TypeAlias = tuple[dict[str, ManagerView], dict[str, GenerationView]]

BUSY_TIMEOUT = 10.0
# Where the many short-lived roots of the machine and the crash points go: a
# memory file system when there is one, so fsynced commits cost nothing
# (flock, rename and rmdir behave the same there); else the default.
SHM = "/dev/shm"  # noqa: S108  (each root is a fresh mkdtemp below it, 0700)
SCRATCH = SHM if os.access(SHM, os.W_OK) else None


def simulate_kill(manager: Manager) -> None:
    """Drop *manager* the way SIGKILL drops its process, in this process.

    The kernel closes a killed process's descriptors and nothing else
    happens: no event is journaled, nothing is removed, no lock file is
    unlinked.  So: close every lease's lock descriptor, the manager's shared
    locks on its generations, its liveness lock, its journal connection and
    its root descriptor, and touch nothing on disk: what the manager's
    handles do when let go.  The object is then closed, so that a stray
    call on it does nothing, as a dead process would.
    """
    manager._handles.close_all()


# -- the reference model -------------------------------------------------------------


@dataclass
class ModelGeneration:
    manager: str
    retired: bool = False
    leases: set[str] = field(default_factory=set)
    removed: bool = False
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class ModelManager:
    owners: int = 0
    sealed: bool = False
    current: str | None = None
    status: Status = "live"


class Model:
    """What managers, generations and leases should be, from the rules alone."""

    def __init__(self) -> None:
        self.managers: dict[str, ModelManager] = {}
        self.generations: dict[str, ModelGeneration] = {}
        # Leases whose holder is alive, and their generation.
        self.held: dict[str, str] = {}

    # questions

    def live(self) -> list[str]:
        return sorted(n for n, m in self.managers.items() if m.status == "live")

    def can_acquire(self, name: str) -> bool:
        m = self.managers[name]
        return m.status == "live" and not m.sealed and m.owners > 0

    def live_generations(self) -> set[str]:
        return {g for g, gen in self.generations.items() if not gen.removed}

    def leases_of(self, name: str) -> list[str]:
        return sorted(lease for lease, g in self.held.items()
                      if self.generations[g].manager == name)

    # operations

    def open(self, name: str) -> None:
        """A new manager; opening runs recovery first."""
        self.recover()
        self.managers[name] = ModelManager()

    def recover(self) -> None:
        for name, m in self.managers.items():
            if m.status == "crashed":
                m.status = "dead"
                self._end(name)

    def retain(self, name: str) -> None:
        m = self.managers[name]
        if not m.sealed:
            m.owners += 1

    def release(self, name: str) -> None:
        m = self.managers[name]
        m.owners = max(m.owners - 1, 0)
        if m.owners == 0:
            m.sealed = True
            self._retire_current(m)

    def rotate(self, name: str) -> None:
        m = self.managers[name]
        if not m.sealed:
            self._retire_current(m)

    def acquire(self, name: str, lease: str, generation: str) -> None:
        m = self.managers[name]
        assert self.can_acquire(name)
        if m.current is None:
            self.generations[generation] = ModelGeneration(name)
            m.current = generation
        assert generation == m.current
        self.generations[generation].leases.add(lease)
        self.held[lease] = generation

    def write(self, lease: str, file: str, content: str) -> None:
        self.generations[self.held[lease]].files[file] = content

    def release_lease(self, lease: str) -> None:
        self.generations[self.held.pop(lease)].leases.discard(lease)
        self._collect()

    def close(self, name: str) -> None:
        self.managers[name].status = "closed"
        self._end(name)

    def crash(self, name: str) -> None:
        """The manager's process is gone; the journal does not know yet."""
        self.managers[name].status = "crashed"
        for lease in self.leases_of(name):
            del self.held[lease]

    # rules

    def _retire_current(self, m: ModelManager) -> None:
        if m.current is not None:
            self.generations[m.current].retired = True
            m.current = None
        self._collect()

    def _collect(self) -> None:
        for gen in self.generations.values():
            if (gen.retired and not gen.leases and not gen.removed
                    and self.managers[gen.manager].status == "live"):
                gen.removed = True

    def _end(self, name: str) -> None:
        m = self.managers[name]
        m.sealed = True
        m.current = None
        for lease in self.leases_of(name):
            del self.held[lease]
        for gen in self.generations.values():
            if gen.manager == name and not gen.removed:
                gen.retired = True
                gen.leases.clear()
                gen.removed = True

    def view(self, ids: dict[str, str], lease_ids: dict[str, str]) -> View:
        """The model in the journal's terms (real manager and lease ids)."""
        ended: dict[Status, str | None] = {
            "live": None, "crashed": None, "closed": "closed", "dead": "dead",
        }
        managers = {ids[n]: (m.owners, m.sealed, m.current, ended[m.status])
                    for n, m in self.managers.items()}
        generations: dict[str, GenerationView] = {
            g: (ids[gen.manager], gen.retired, frozenset(lease_ids[x] for x in gen.leases),
                "finished" if gen.removed else None)
            for g, gen in self.generations.items()
        }
        return managers, generations


def view_of_journal(state: State) -> View:
    managers = {m.id: (m.owners, m.sealed, m.current, m.ended) for m in state.managers.values()}
    generations = {g.id: (g.manager, g.retired, frozenset(g.leases), g.removal)
                   for g in state.generations.values()}
    return managers, generations


def journal_state(root: Path) -> State:
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        return replay(store.records())
    finally:
        store.close()


def journal_state_from_checkpoint(root: Path) -> State:
    """The state from the newest checkpoint (none skipped) and the events after it."""
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        restored = checkpoint.restore(store)
        assert restored.skipped == ()
        return replay(store.records(after=restored.state.seq), restored.state)
    finally:
        store.close()


def journal_problems(root: Path) -> list[str]:
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        return store.verify()
    finally:
        store.close()


# -- the world: real managers beside the model ------------------------------------------


class World:
    """A root under *base*, real managers on it, and the model of what they should do.

    Managers are made by *manager_class* (a planted bug swaps it) and all
    get *step_hook*.  ``base/outside`` holds a file that nothing may touch.
    """

    def __init__(self, base: Path, *, manager_class: type[Manager] = Manager,
                 step_hook: StepHook | None = None) -> None:
        self.base = base
        self.root = base / "root"
        self.outside = base / "outside"
        self.outside.mkdir(parents=True)
        (self.outside / "keep.txt").write_text("not sessiontemp's\n")
        self.manager_class = manager_class
        self.step_hook = step_hook
        self.model = Model()
        self.real: dict[str, Manager] = {}
        self.leases: dict[str, Lease] = {}
        self.ids: dict[str, str] = {}
        self.lease_ids: dict[str, str] = {}
        self._counter = itertools.count()

    # -- names ------------------------------------------------------------------------

    def live(self) -> list[str]:
        return self.model.live()

    def held(self) -> list[str]:
        return sorted(self.leases)

    def _name(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter)}"

    # -- operations, on the library and on the model ---------------------------------

    def open(self) -> str:
        manager = self.manager_class(self.root, busy_timeout=BUSY_TIMEOUT,
                                     step_hook=self.step_hook)
        name = self._name("m")
        self.real[name] = manager
        self.ids[name] = manager.id
        self.model.open(name)
        return name

    def retain(self, name: str) -> None:
        self.real[name].retain()
        self.model.retain(name)

    def release(self, name: str) -> None:
        self.real[name].release()
        self.model.release(name)

    def rotate(self, name: str) -> None:
        self.real[name].rotate()
        self.model.rotate(name)

    def acquire(self, name: str) -> str | None:
        """Lease from *name*; None when the model says it must refuse (and it did)."""
        manager = self.real[name]
        if not self.model.can_acquire(name):
            try:
                manager.acquire()
            except Unavailable:
                return None
            raise AssertionError(f"{name} leased although it is sealed or has no owner")
        expected = self.model.managers[name].current
        lease = manager.acquire()
        if expected is not None:
            assert lease.generation == expected, "leased another than the current generation"
        else:
            assert lease.generation not in self.model.generations, "reused a generation"
        lease_name = self._name("l")
        self.leases[lease_name] = lease
        self.lease_ids[lease_name] = lease.id
        self.model.acquire(name, lease_name, lease.generation)
        return lease_name

    def write(self, lease_name: str, file: str) -> None:
        content = f"{lease_name} wrote {file}\n"
        (self.leases[lease_name].path / file).write_text(content)
        self.model.write(lease_name, file, content)

    def release_lease(self, lease_name: str) -> None:
        self.leases.pop(lease_name).release()
        self.model.release_lease(lease_name)

    def close(self, name: str) -> None:
        # Forgotten only once close returns: a crash inside it leaves the
        # manager to be killed.
        self.real[name].close()
        del self.real[name]
        self._forget_leases(name)
        self.model.close(name)

    def crash(self, name: str) -> None:
        """Kill *name*'s process (simulated: see :func:`simulate_kill`)."""
        simulate_kill(self.real.pop(name))
        self._forget_leases(name)
        self.model.crash(name)

    def recover(self) -> None:
        recover(self.root, busy_timeout=BUSY_TIMEOUT, step_hook=self.step_hook)
        self.model.recover()

    def checkpoint(self) -> None:
        """Write a checkpoint of the journal as it ends now; later replays start from it."""
        store = Store(self.root / JOURNAL_NAME, busy_timeout=BUSY_TIMEOUT)
        try:
            checkpoint.save(store, replay(store.records()))
        finally:
            store.close()

    def _forget_leases(self, name: str) -> None:
        for lease_name in self.model.leases_of(name):
            self.leases.pop(lease_name, None)

    def shutdown(self) -> None:
        """Close what is still open and remove *base*."""
        for name in list(self.real):
            manager = self.real.pop(name)
            if not manager.closed:
                manager.close()
        shutil.rmtree(self.base, ignore_errors=True)

    # -- the invariants ----------------------------------------------------------------

    def on_disk(self) -> set[str]:
        return {n for n in os.listdir(self.root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX))}

    def disk_difference(self) -> tuple[set[str], set[str]]:
        """(leaked, wrongly removed): entries on disk the model lacks, and the reverse."""
        expected = {generation_name(g) for g in self.model.live_generations()}
        found = self.on_disk()
        return found - expected, expected - found

    def check(self, *, full: bool = True) -> None:
        """Every invariant.  *full* False allows journal entries the model never saw.

        After a crash in the middle of an operation the journal may hold what
        that operation began (a generation, a lease, a manager that never
        finished opening), all of it the dead manager's; then only the live
        managers are compared and the journal must agree with the disk.
        """
        leaked, removed = self.disk_difference()
        assert not leaked, f"leaked: {sorted(leaked)}"
        assert not removed, f"removed while the model keeps them: {sorted(removed)}"

        state = journal_state(self.root)
        assert journal_problems(self.root) == []
        assert journal_state_from_checkpoint(self.root) == state
        journal = view_of_journal(state)
        model = self.model.view(self.ids, self.lease_ids)
        if full:
            assert journal == model
        else:
            live_ids = {self.ids[n] for n in self.live()}
            assert {m: v for m, v in journal[0].items() if m in live_ids} == {
                m: v for m, v in model[0].items() if m in live_ids}
            assert {g: v for g, v in journal[1].items() if v[0] in live_ids} == {
                g: v for g, v in model[1].items() if v[0] in live_ids}
            kept = {generation_name(g) for g, v in journal[1].items() if v[3] != "finished"}
            assert kept == self.on_disk(), "the journal and the disk disagree"
        for name in self.live():
            manager = self.real[name]
            assert view_of_journal(manager.state)[0][manager.id] == journal[0][manager.id]

        for gid in self.model.live_generations():
            path = self.root / generation_name(gid)
            assert path.is_dir()
            files = {p.name: p.read_text() for p in path.iterdir()}
            assert files == self.model.generations[gid].files, f"{path} lost or gained files"
        for lease_name, lease in self.leases.items():
            assert lease.path == self.root / generation_name(self.model.held[lease_name])
            assert not lease.released

        assert sorted(os.listdir(self.base)) == ["outside", "root"]
        assert os.listdir(self.outside) == ["keep.txt"]
        assert (self.outside / "keep.txt").read_text() == "not sessiontemp's\n"

        for name in self.live():
            if self.model.managers[name].sealed:
                assert self.real[name].sealed
                try:
                    self.real[name].acquire()
                except Unavailable:
                    continue
                raise AssertionError(f"sealed manager {name} leased")
