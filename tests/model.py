"""A reference model of sessiontemp, and a world that drives real managers beside it.

:class:`Model` is the lifecycle written out again from the specification, in
plain dicts and counters, and shares no code with :mod:`sessiontemp.journal.reducer`:

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
  in one process no lease of a dead manager can outlive it;
* except, for a manager that owns a named session, its current generation:
  that recovery keeps it for the session, and the session's next manager
  adopts it (files and all) when it resumes, or it is removed when that
  manager starts afresh, when the session is removed, or by a recovery once
  the resume window has passed; a session has one live owner at a time;
* an artifact kept through a lease holds the file's content for good, until
  its removal, whatever happens to the session.

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

import contextlib
import copy
import hashlib
import itertools
import math
import os
import shutil
import stat
import time
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from sessiontemp import (
    Artifact,
    Lease,
    Manager,
    OverBudget,
    SessionOwned,
    Unavailable,
    Usage,
    handles,
    recover,
    remove_artifact,
    remove_session,
)
from sessiontemp._guards.steps import StepHook, StepKind
from sessiontemp._kernel.root import (
    GENERATION_PREFIX,
    JOURNAL_NAME,
    TRASH_PREFIX,
    WORK_DIR,
    generation_name,
    trash_name,
)
from sessiontemp.artifacts import ARTIFACTS_DIR
from sessiontemp.journal import State, Store, checkpoint, replay
from sessiontemp.journal.errors import ForkedCopy, JournalBusy, NoSuchRoot
from sessiontemp.journal.reducer import Fold, Forgotten, kept_for_resume, removal_due
from sessiontemp.manager import Durability
from tests.faults import Action, Faults
from tests.neighbour import MANAGER_STEPS, Move, Neighbour, stepping_in

__all__ = ["SCRATCH", "Archive", "Model", "Op", "World", "owed", "settled_view",
           "simulate_kill", "view_of_journal"]

Status: TypeAlias = Literal["live", "closed", "crashed", "dead"]
# A manager as the journal shows it: owners, sealed, current generation, how it ended.
ManagerView: TypeAlias = tuple[int, bool, str | None, str | None]
# A generation: its manager, retired, leases, removal (None or "finished").
GenerationView: TypeAlias = tuple[str | None, bool, frozenset[str], str | None]
View: TypeAlias = tuple[dict[str, ManagerView], dict[str, GenerationView]]
# An operation as the world names it: ("acquire", "m0"), ("release_lease", "l3"), ...
Op: TypeAlias = tuple[str, ...]

BUSY_TIMEOUT = 10.0
# Far enough ahead of the real clock for every resume window to have passed.
LATE = 10 * 86400.0
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
    handles.of(manager.id).close_all()


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
    session: str | None = None


@dataclass
class ModelSession:
    owner: str
    kept: str | None = None


class Model:
    """What managers, generations and leases should be, from the rules alone."""

    def __init__(self) -> None:
        self.managers: dict[str, ModelManager] = {}
        self.generations: dict[str, ModelGeneration] = {}
        # Leases whose holder is alive, and their generation.
        self.held: dict[str, str] = {}
        self.sessions: dict[str, ModelSession] = {}
        # Artifacts kept, by the world's name, and their content.
        self.artifacts: dict[str, str] = {}

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

    def owned(self, session: str) -> bool:
        """Whether a live manager owns *session* (a crashed one's lock died with it)."""
        s = self.sessions.get(session)
        return s is not None and self.managers[s.owner].status == "live"

    def open(self, name: str, session: str | None = None, resume: bool = True) -> bool:
        """A new manager; opening runs recovery first.  True when it resumed a directory."""
        assert session is None or not self.owned(session)
        self.recover()
        self.managers[name] = ModelManager(session=session)
        if session is None:
            return False
        previous = self.sessions.get(session)
        self.sessions[session] = ModelSession(name)
        kept = None if previous is None else previous.kept
        if kept is None:
            return False
        if not resume:
            self.generations[kept].removed = True
            return False
        self.generations[kept].manager = name
        self.generations[kept].retired = False
        self.managers[name].current = kept
        return True

    def recover(self, *, late: bool = False) -> None:
        """A recovery pass; *late*: past the resume window of every death journaled before it.

        A death this pass journals starts its window now: what it keeps stays.
        """
        if late:
            for s in self.sessions.values():
                if s.kept is not None:
                    self.generations[s.kept].removed = True
                    s.kept = None
        for name, m in self.managers.items():
            if m.status == "crashed":
                m.status = "dead"
                self._end(name, died=True)

    def remove_session(self, session: str) -> None:
        """Remove what *session*'s dead owner left (a recovery pass runs first)."""
        assert not self.owned(session)
        self.recover()
        s = self.sessions.get(session)
        if s is not None and s.kept is not None:
            self.generations[s.kept].removed = True
            s.kept = None

    def keep(self, artifact: str, content: str) -> None:
        self.artifacts[artifact] = content

    def remove_artifact(self, artifact: str) -> None:
        self.recover()
        self.artifacts.pop(artifact, None)

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

    def measure(self, name: str) -> None:
        """A measurement changes nothing the model holds; what it finds is checked by the world."""

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

    def _end(self, name: str, *, died: bool = False) -> None:
        m = self.managers[name]
        session = self.sessions.get(m.session or "")
        kept = (m.current if died and session is not None and session.owner == name
                else None)
        m.sealed = True
        m.current = None
        for lease in self.leases_of(name):
            del self.held[lease]
        for g, gen in self.generations.items():
            if gen.manager == name and not gen.removed:
                gen.retired = True
                gen.leases.clear()
                gen.removed = g != kept
        if session is not None and kept is not None:
            session.kept = kept

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


def owed(state: State, manager: str | None = None) -> set[str]:
    """Generations (of *manager*, or of anyone) whose removal is owed: due, begun, or never made.

    Between two operations of a manager that no fault interrupted, there is
    none: each operation finishes what it changed.  A failure between two
    steps leaves some, for the manager's next operation or for recovery.
    """
    return {
        g.id for g in state.generations.values()
        if (manager is None or g.manager == manager) and g.removal != "finished"
        and (removal_due(g) or g.removal == "started" or (not g.ready and not g.leases))
        # Kept for its session's resume: nobody owes its removal yet.
        and (g.removal is not None or kept_for_resume(state, g) is None)
    }


def settled_view(state: State) -> View:
    """The journal's view once the work it owes is done (see :func:`owed`).

    A generation whose removal is owed is as good as removed; a current
    generation never made ready is no longer current.
    """
    owing = owed(state)
    managers = {m.id: (m.owners, m.sealed, None if m.current in owing else m.current, m.ended)
                for m in state.managers.values()}
    generations: dict[str, GenerationView] = {
        g.id: (g.manager, True, frozenset(), "finished") if g.id in owing else
        (g.manager, g.retired, frozenset(g.leases), g.removal)
        for g in state.generations.values()
    }
    return managers, generations


class Archive:
    """Every event the journal ever held, folded as it was read: what retirement cannot take.

    The model keeps every manager and generation, finished ones included;
    the reducer's state lets go of what has finished (a :class:`Forgotten`
    puts it back), and once history is retired the journal itself keeps
    only what follows.  So the world folds the journal's records here as
    they come, and reads them all before anything it sets off (a
    neighbour's retirement) may retire them: a gap, history retired before
    it was read, fails loudly.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.history = Forgotten()
        self.fold = Fold(history=self.history)

    def absorb(self) -> None:
        """Fold the records appended since the last look."""
        if not (self.root / JOURNAL_NAME).exists():
            return
        store = Store(self.root / JOURNAL_NAME, readonly=True)
        try:
            for record in store.records(after=self.fold.seq):
                self.fold.step(record)
        finally:
            store.close()

    def live(self) -> State:
        """The reducer's state of the journal: what is alive or owes work."""
        self.absorb()
        return self.fold.state()

    def whole(self) -> State:
        """Every manager and generation the journal ever named, finished ones included."""
        return self.history.whole(self.live())


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

    Faults a process lives through (:meth:`failed`, :meth:`interrupted`,
    :meth:`fork`) may leave work owed (:func:`owed`): the ids of the
    managers that owe it are in ``owing`` until their next operation, or a
    recovery once they have ended, has done it.  A manager whose close
    journaled its end but stopped before letting go of its handles waits in
    ``unclosed`` for a second close.
    """

    def __init__(self, base: Path, *, manager_class: type[Manager] = Manager,
                 step_hook: StepHook | None = None, durability: Durability = "full",
                 busy_timeout: float = BUSY_TIMEOUT, neighbour: Neighbour | None = None,
                 max_inodes: int | None = None) -> None:
        self.base = base
        # A budget every manager gets, measured only by the measure operation
        # (no background thread): once a measurement journals the current
        # directory over it, the manager's acquires are refused.
        self.max_inodes = max_inodes
        # How long the managers wait for another process's write lock; short
        # where a neighbour holds it on purpose.
        self.busy_timeout = busy_timeout
        # Another process on the root, stepping in between two steps.
        self.neighbour = neighbour
        self.durability = durability
        self.root = base / "root"
        self.archive = Archive(self.root)
        self.outside = base / "outside"
        self.outside.mkdir(parents=True)
        (self.outside / "keep.txt").write_text("not sessiontemp's\n")
        self.manager_class = manager_class
        self.step_hook = step_hook
        self.model = Model()
        self.real: dict[str, Manager] = {}
        self.unclosed: dict[str, Manager] = {}
        self.leases: dict[str, Lease] = {}
        self.ids: dict[str, str] = {}
        self.lease_ids: dict[str, str] = {}
        self.owing: set[str | None] = set()
        self.artifacts: dict[str, Artifact] = {}
        # Files of the artifact store a killed keeper left unrecorded: the
        # user's data, which no recovery removes (fsck reports them).
        self.unrecorded: set[str] = set()
        self._lateness = 0.0
        self._counter = itertools.count()

    # -- names ------------------------------------------------------------------------

    def live(self) -> list[str]:
        return self.model.live()

    def held(self) -> list[str]:
        return sorted(self.leases)

    def manager_of(self, op: Op) -> str:
        """The manager whose process runs *op* (an operation on a manager or a lease)."""
        kind, *args = op
        if kind in ("release_lease", "write"):
            return self.model.generations[self.model.held[args[0]]].manager
        return args[0]

    def _name(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter)}"

    # -- operations, on the library and on the model ---------------------------------

    def open(self, session: str | None = None, *, resume: bool = True) -> str | None:
        """Open a manager (of named *session*); None when the session's owner refused it."""
        if session is not None and self.owned(session):
            try:
                self.manager_class(self.root, busy_timeout=self.busy_timeout,
                                   step_hook=self.step_hook, durability=self.durability,
                                   session=session)
            except SessionOwned:
                return None
            raise AssertionError(f"a second live owner of session {session} was let in")
        budget: dict[str, Any] = {} if self.max_inodes is None else {
            "max_inodes": self.max_inodes, "measure_every": math.inf}
        manager = self.manager_class(self.root, busy_timeout=self.busy_timeout,
                                     step_hook=self.step_hook, durability=self.durability,
                                     session=session, resume=resume, **budget)
        name = self._name("m")
        self.real[name] = manager
        self.ids[name] = manager.id
        resumed = self.model.open(name, session, resume)
        assert manager.resumed == resumed, f"{name} resumed {manager.resumed}, not {resumed}"
        self._recovered()
        return name

    def keep(self, lease_name: str) -> str:
        """Write a file through *lease_name* and keep it as an artifact; its name."""
        artifact = self._name("a")
        self.write(lease_name, "kept.txt", f"{artifact}\n")
        kept = self.leases[lease_name].keep("kept.txt", artifact)
        self.artifacts[artifact] = kept
        self.model.keep(artifact, f"{artifact}\n")
        return artifact

    def remove_artifact(self, artifact: str, *, again: bool = False) -> None:
        """Remove *artifact*; *again* after a call that failed once its removal was journaled."""
        removed = remove_artifact(self.root, self.artifacts[artifact], busy_timeout=BUSY_TIMEOUT,
                                  step_hook=self.step_hook)
        assert removed or again, f"artifact {artifact} was not kept"
        del self.artifacts[artifact]
        self.model.remove_artifact(artifact)
        self._recovered()

    def owned(self, session: str) -> bool:
        """Whether a manager holds *session*'s lock: a live one, or one whose close stopped."""
        owner = self.model.sessions.get(session)
        return self.model.owned(session) or (owner is not None and owner.owner in self.unclosed)

    def _no_root_yet(self, call: Callable[[], object]) -> bool:
        """Before any manager made the root, *call* (a recovery or a removal) is refused
        with NoSuchRoot and makes nothing: checked, and True; False once the root exists."""
        if os.path.lexists(self.root):
            return False
        try:
            call()
        except NoSuchRoot:
            assert not os.path.lexists(self.root), "a recovery or removal made the root"
            return True
        raise AssertionError("a recovery or removal of a root that does not exist ran")

    def remove_session(self, session: str) -> None:
        """Remove *session*'s leftovers; refused (and checked so) while it is owned."""
        if self._no_root_yet(lambda: remove_session(self.root, session)):
            return
        if self.owned(session):
            try:
                remove_session(self.root, session, busy_timeout=BUSY_TIMEOUT,
                               step_hook=self.step_hook)
            except SessionOwned:
                return
            raise AssertionError(f"session {session} was removed under its live owner")
        remove_session(self.root, session, busy_timeout=BUSY_TIMEOUT, step_hook=self.step_hook)
        self.model.remove_session(session)
        self._recovered()

    def recover_late(self) -> None:
        """A recovery pass once every resume window has passed."""
        # Each late pass further ahead: a death the last one journaled (at its
        # clock) is past its window for the next.
        self._lateness += LATE
        ahead = self._lateness
        if self._no_root_yet(lambda: recover(self.root)):
            return
        recover(self.root, busy_timeout=BUSY_TIMEOUT, step_hook=self.step_hook,
                clock=lambda: time.time() + ahead)
        self.model.recover(late=True)
        self._recovered()

    def retain(self, name: str) -> None:
        self._run(("retain", name))

    def release(self, name: str) -> None:
        self._run(("release", name))

    def rotate(self, name: str) -> None:
        self._run(("rotate", name))

    def over_budget(self, name: str) -> bool:
        """Whether *name* may lease but its current directory was journaled, as last
        measured, over its budget.

        The measurement itself is checked against the model's files where it
        is taken (:meth:`_measured`); whether its record was journaled, a
        fault may decide, and the journal says.
        """
        current = self.model.managers[name].current
        # One that may not lease at all is refused for that first.
        if self.max_inodes is None or current is None or not self.model.can_acquire(name):
            return False
        # The manager's memory, which the invariants hold to be the journal.
        generation = self.real[name].state.generations.get(current)
        return generation is not None and (generation.measured_inodes or 0) > self.max_inodes

    def acquire(self, name: str) -> str | None:
        """Lease from *name*; None when the model says it must refuse (and it did)."""
        manager = self.real[name]
        if self.over_budget(name):
            try:
                manager.acquire()
            except OverBudget:
                # That it leased nothing, the invariants after the step say.
                return None
            raise AssertionError(f"{name} leased from a directory measured over its budget")
        if not self.model.can_acquire(name):
            try:
                manager.acquire()
            except Unavailable:
                return None
            raise AssertionError(f"{name} leased although it is sealed or has no owner")
        return self._run(("acquire", name))

    def write(self, lease_name: str, file: str, content: str | None = None) -> None:
        content = f"{lease_name} wrote {file}\n" if content is None else content
        (self.leases[lease_name].path / file).write_text(content)
        self.model.write(lease_name, file, content)

    def release_lease(self, lease_name: str) -> None:
        self._run(("release_lease", lease_name))

    def measure(self, name: str) -> None:
        self._run(("measure", name))

    def _measured(self, name: str, found: Usage) -> None:
        """*found*, *name*'s measurement, holds the current directory and the model's files."""
        current = self.model.managers[name].current
        if current is None:
            assert (found.bytes, found.inodes) == (0, 0), f"{name} measured {found} of nothing"
            return
        files = self.model.generations[current].files
        # The directory itself and each file the model says it holds.
        assert found.inodes == 1 + len(files), f"{name} measured {found}, not {sorted(files)}"
        assert found.path == self.root / generation_name(current) / WORK_DIR

    def close(self, name: str) -> None:
        # Forgotten only once close returns: a crash inside it leaves the
        # manager to be killed.
        self._run(("close", name))

    def finish_close(self, name: str) -> None:
        """Close again a manager whose close stopped after journaling its end."""
        manager = self.unclosed[name]
        manager.close()
        self._settled(manager)
        del self.unclosed[name]

    def crash(self, name: str) -> None:
        """Kill *name*'s process (simulated: see :func:`simulate_kill`)."""
        manager = self.real.pop(name)
        simulate_kill(manager)
        self._forget_leases(manager)
        self.model.crash(name)
        store = self.root / ARTIFACTS_DIR
        if store.exists():
            recorded = {f"{a.id}-{a.label}" for a in self.journal_state().artifacts.values()}
            self.unrecorded |= set(os.listdir(store)) - recorded

    def recover(self) -> None:
        if self._no_root_yet(lambda: recover(self.root)):
            return
        recover(self.root, busy_timeout=BUSY_TIMEOUT, step_hook=self.step_hook)
        self.model.recover()
        self._recovered()

    def checkpoint(self) -> None:
        """Write a checkpoint of the journal as it ends now; later replays start from it."""
        store = Store(self.root / JOURNAL_NAME, busy_timeout=BUSY_TIMEOUT)
        try:
            start = checkpoint.origin(store).state
            checkpoint.save(store, replay(store.records(after=start.seq), start))
        finally:
            store.close()

    def _run(self, op: Op) -> str | None:
        """Run *op* on the library, then on the model; a lease's name for an acquire."""
        manager = self.real[self.manager_of(op)]
        result = self._call(manager, op)
        lease_name = self._done(op, manager, result)
        self._settled(manager, op[0])
        return lease_name

    def _call(self, manager: Manager, op: Op) -> Lease | None:
        kind, *args = op
        if kind == "acquire":
            return manager.acquire()
        if kind == "release_lease":
            self.leases[args[0]].release()
        elif kind == "measure":
            self._measured(self.manager_of(op), manager.measure())
        else:
            getattr(manager, kind)()
        return None

    def _done(self, op: Op, manager: Manager, result: Lease | None) -> str | None:
        """Take a completed *op* into the model."""
        kind, *args = op
        name = self.manager_of(op)
        if kind == "acquire":
            assert result is not None
            return self._took(name, result.generation, result)
        if kind == "release_lease":
            lease = self.leases.pop(args[0])
            assert lease.released, f"{lease} not released"
            self.model.release_lease(args[0])
        elif kind == "close":
            assert manager.closed
            del self.real[name]
            self._forget_leases(manager)
            self.model.close(name)
        else:
            getattr(self.model, kind)(name)
        return None

    def _took(self, name: str, generation: str, lease: Lease | None) -> str:
        """*name* leased *generation*; *lease* None when it was given back at once."""
        expected = self.model.managers[name].current
        if expected is not None:
            assert generation == expected, "leased another than the current generation"
        else:
            assert generation not in self.model.generations, "reused a generation"
        lease_name = self._name("l")
        self.model.acquire(name, lease_name, generation)
        if lease is None:
            self.model.release_lease(lease_name)
        else:
            self.leases[lease_name] = lease
            self.lease_ids[lease_name] = lease.id
        return lease_name

    def _forget_leases(self, manager: Manager) -> None:
        for lease_name in [n for n, lease in self.leases.items() if lease.manager is manager]:
            del self.leases[lease_name]

    def shutdown(self) -> None:
        """Close what is still open and remove *base*.

        Never raises: it runs after a failed step too, whose error it must
        not hide (closing is checked where the close rule runs it).
        """
        for manager in [*self.real.values(), *self.unclosed.values()]:
            with contextlib.suppress(Exception):
                manager.close()
        self.real.clear()
        self.unclosed.clear()
        shutil.rmtree(self.base, ignore_errors=True)

    # -- what the journal says ----------------------------------------------------------

    def journal_state(self) -> State:
        """Every manager and generation the journal ever named (see :class:`Archive`)."""
        return self.archive.whole()

    def live_journal_state(self) -> State:
        """The reducer's state of the journal: what is alive or owes work."""
        return self.archive.live()

    # -- another process steps in ------------------------------------------------------

    def interleave(self, how: Move = "rollover") -> None:
        """The neighbour makes its move *how* now (by default: rolls the journal over and
        retires every sealed segment).

        Everything the journal holds is folded into the archive first: what
        the neighbour retires is gone from the journal.
        """
        assert self.neighbour is not None
        self.archive.absorb()
        self.neighbour.move(how, self.root)

    def before_stepping_in(self, how: Move) -> None:
        """What the neighbour does before the operation: seal a segment it will retire."""
        if how == "retire":
            assert self.neighbour is not None
            if (self.root / JOURNAL_NAME).exists():
                self.neighbour.seal(self.root)

    def after_stepping_in(self, how: Move, fired: tuple[StepKind, str] | None) -> None:
        """The model follows a recovery pass the neighbour ran while the operation waited.

        It buried the managers that had crashed and removed what they held;
        the live managers it leaves alone, so its place among the steps of
        an operation of theirs changes nothing the model says of them.
        """
        if how == "recover" and fired is not None:
            self.model.recover()
            self._recovered()

    def stepped_in(self, op: Op, faults: Faults, *, at: int = 1, how: Move = "rollover"
                   ) -> tuple[StepKind, str] | None:
        """Run *op* with the neighbour making its move *how* just before its *at*-th step.

        Nothing the operation may see changes: it completes as it would have
        (or is refused as it would have been), and the model with it.
        Returns where the neighbour stepped in; None when *op* had fewer steps.
        """
        kind, *args = op
        self.before_stepping_in(how)
        faults.arm(stepping_in(lambda: self.interleave(how)), at=at)
        try:
            getattr(self, kind)(*args)
        finally:
            fired = faults.disarm()
        self.after_stepping_in(how, fired)
        return fired

    # -- faults the process lives through ---------------------------------------------

    def failed(self, op: Op, faults: Faults, error: Exception, *, at: int = 1,
               only: StepKind | None = None) -> tuple[StepKind, str] | None:
        """Run *op* with *error* raised before its *at*-th step (of kind *only*); carry on.

        The operation must raise *error*, or handle it and return; an
        acquire may refuse with :class:`Unavailable` instead (the journal
        could not record the lease, or a directory an earlier failure left
        half made could not be cleared yet).  As far as the journal says, it
        then happened entirely or not at all: the model becomes whichever of
        the two the journal shows (it must show one), with the work the
        operation left owed.  Returns where the fault fired; None when *op*
        had fewer steps and ran as usual.
        """
        def raised_as_expected(raised: BaseException | None) -> bool:
            if raised is None or raised is error or raised.__cause__ is error:
                return True
            # An acquire that met the fault finishing what an earlier failure
            # left (a directory half made) refuses to hand out a directory.
            return op[0] == "acquire" and isinstance(raised, Unavailable)

        return self._faulted(op, faults, lambda kind, detail: _raise(error), at, only,
                             raised_as_expected, interrupt=False)

    def met_a_busy_journal(self, op: Op, faults: Faults, *, at: int = 1
                           ) -> tuple[StepKind, str] | None:
        """Run *op* with the neighbour holding the journal's write lock from its *at*-th step.

        Held past the managers' ``busy_timeout``: the operation's next
        append fails with :class:`JournalBusy` (an acquire refuses with
        :class:`Unavailable`, a lease release and a close log it and carry
        on), and the model follows what the journal shows, as for any
        refused append (:meth:`failed`).  The lock is let go once the
        operation has returned.
        """
        assert self.neighbour is not None
        neighbour = self.neighbour

        def busy(kind: StepKind, detail: str) -> None:
            if kind in MANAGER_STEPS:
                neighbour.hold(self.root)

        def raised_as_expected(raised: BaseException | None) -> bool:
            return raised is None or isinstance(raised, JournalBusy) or (
                op[0] == "acquire" and isinstance(raised, Unavailable))

        try:
            return self._faulted(op, faults, busy, at, None, raised_as_expected,
                                 interrupt=False)
        finally:
            neighbour.let_go()

    def faulted(self, op: Op, faults: Faults, action: Action, *, at: int,
                expected: Callable[[BaseException | None], bool]) -> tuple[StepKind, str] | None:
        """Run *op* with *action* done before its *at*-th step; carry on, as :meth:`failed`.

        *expected* judges what the operation raised (None: nothing); as far
        as the journal says, it then happened entirely or not at all.
        """
        return self._faulted(op, faults, action, at, None, expected, interrupt=False)

    def interrupted(self, op: Op, faults: Faults, action: Action, *,
                    at: int = 1) -> tuple[StepKind, str] | None:
        """Run *op* with SIGINT delivered before its *at*-th step (by *action*).

        The operation must complete, and the KeyboardInterrupt surface after
        it; an acquire gives its lease back first, since the caller never
        receives it.  Returns where the interrupt was sent, or None.
        """
        return self._faulted(op, faults, action, at, None,
                             lambda raised: isinstance(raised, KeyboardInterrupt),
                             interrupt=True)

    def _faulted(self, op: Op, faults: Faults, action: Action, at: int,
                 only: StepKind | None, expected: Callable[[BaseException | None], bool], *,
                 interrupt: bool) -> tuple[StepKind, str] | None:
        kind = op[0]
        name = self.manager_of(op)
        manager = self.real[name]
        if kind == "acquire" and self.over_budget(name):
            return self._faulted_refusal(name, manager, faults, action, at, only, expected)
        if kind == "acquire" and not self.model.can_acquire(name):
            faults.arm(action, at, only)
            try:
                self.acquire(name)
            finally:
                assert faults.disarm() is None, "a refused acquire took a durable step"
            return None
        before = copy.deepcopy(self.model)
        result: Lease | None = None
        raised: BaseException | None = None
        faults.arm(action, at, only)
        try:
            result = self._call(manager, op)
        except (Exception, KeyboardInterrupt) as e:
            raised = e
        finally:
            fired = faults.disarm()
        if fired is None:
            if raised is not None:
                raise raised
            self._done(op, manager, result)
            self._settled(manager, op[0])
            return None
        self.memory_agrees(manager)
        assert expected(raised), f"{op} with a fault at {fired} raised {raised!r}"
        if interrupt:
            if kind == "acquire":
                current = manager.state.managers[manager.id].current
                assert current is not None
                self._took(name, current, None)
            else:
                self._done(op, manager, result)
            self._settled(manager, op[0])
            return fired
        self.owing.add(manager.id)
        if result is not None:
            # An acquire that met the fault in work an earlier one left, and went on.
            self._done(op, manager, result)
            return fired
        self._reconcile(op, manager, before)
        return fired

    def _faulted_refusal(self, name: str, manager: Manager, faults: Faults, action: Action,
                         at: int, only: StepKind | None,
                         expected: Callable[[BaseException | None], bool]
                         ) -> tuple[StepKind, str] | None:
        """An acquire of *name* over budget with a fault at a step of its refusal's record:
        refused all the same (or the fault raised), the record journaled or not, nothing
        else changed."""
        raised: BaseException | None = None
        faults.arm(action, at, only)
        try:
            manager.acquire()
        except (Exception, KeyboardInterrupt) as e:
            raised = e
        finally:
            fired = faults.disarm()
        self.memory_agrees(manager)
        # Never let through: a refusal, or what the fault raised.
        assert isinstance(raised, OverBudget) or (
            raised is not None and fired is not None and expected(raised)), (
            f"an acquire over budget with a fault at {fired} raised {raised!r}")
        return fired

    def _reconcile(self, op: Op, manager: Manager, before: Model) -> None:
        """After *op* failed: the model becomes what the journal shows, done or not done."""
        kind, *args = op
        name = self.manager_of(op)
        after = copy.deepcopy(before)
        if kind == "release_lease":
            lease = self.leases[args[0]]
            if lease.released:
                after.release_lease(args[0])
                candidates = [after]
            else:
                candidates = [before]
        elif kind == "close":
            me = manager.state.managers.get(manager.id)
            # Gone from its own state: it ended with nothing left to remove.
            ended = "closed" if me is None else me.ended
            if ended == "closed":
                after.close(name)
                candidates = [after]
            elif manager.closed:
                # It could not journal its end and let go of everything:
                # as good as dead, for the next recovery to find.
                after.crash(name)
                candidates = [after]
            else:
                candidates = [before]
        elif kind == "acquire":
            candidates = [before]
        else:
            getattr(after, kind)(name)
            candidates = [after, before]
        state = self.journal_state()
        journal = settled_view(state)
        for candidate in candidates:
            for g in state.generations.values():
                if g.manager == manager.id and g.id not in candidate.generations:
                    assert not g.ready, f"{op} left {g} unknown to the model"
                    assert not g.leases, f"{op} left {g} unknown to the model"
                    candidate.generations[g.id] = ModelGeneration(name, retired=True,
                                                                  removed=True)
            if candidate.view(self.ids, self.lease_ids) == journal:
                break
        else:
            raise AssertionError(f"{op} failed, and the journal shows it neither done nor "
                                 f"undone: {journal}")
        self.model = candidate
        if kind == "release_lease" and candidate is after:
            del self.leases[args[0]]
        if kind == "close" and candidate is after:
            del self.real[name]
            self._forget_leases(manager)
            if ended == "closed" and not handles.of(manager.id).closed:
                self.unclosed[name] = manager

    def fork(self, name: str) -> None:
        """fork() while *name* lives: the child's copy owns nothing and touches nothing."""
        manager = self.real[name]
        leases = [lease for lease in self.leases.values() if lease.manager is manager]
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = forked_copy_misbehaves(manager, leases)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        assert code == 0, f"the forked child's copy of {name}: {FORKED_COPY_FAILURES.get(code)}"
        assert handles.of(manager.id).root.manager_lock_path(manager.id).exists()

    def memory_agrees(self, manager: Manager, state: State | None = None) -> None:
        """What *manager* holds in memory is exactly what the journal says of it.

        *state* is the journal's own (live) state, as the reducer gives it.
        """
        journal = self.live_journal_state() if state is None else state
        assert own_view(manager.state, manager.id) == own_view(journal, manager.id), (
            f"{manager.id}'s memory disagrees with the journal")
        assert manager.state.seq <= journal.seq, (
            f"{manager.id}'s memory disagrees with the journal: it has folded event "
            f"{manager.state.seq}, the journal ends at {journal.seq}")

    def _settled(self, manager: Manager, kind: str = "") -> None:
        """After an operation of *manager* that no fault stopped: nothing it owed is left.

        A measurement is no such operation: it only looks (and journals
        what it saw), and leaves owed work to the next one that settles.
        """
        if kind == "measure":
            return
        if manager.id in self.owing:
            left = owed(manager.state, manager.id)
            assert not left, f"the next operation of {manager.id} left work owed: {left}"
            self.owing.discard(manager.id)

    def _recovered(self) -> None:
        """After a recovery pass: nothing owed by a manager that has ended (and let go) is left."""
        ended = {self.ids[n] for n, m in self.model.managers.items()
                 if m.status in ("closed", "dead") and n not in self.unclosed}
        waiting = self.owing & ended
        if waiting:
            state = self.journal_state()
            for manager_id in waiting:
                assert not owed(state, manager_id), f"recovery left work {manager_id} owed"
            self.owing -= waiting

    # -- the invariants ----------------------------------------------------------------

    def sessions_view(self, state: State) -> dict[str, tuple[str, str | None]]:
        """Each session's owner and the generation kept for its resume, as the journal has it."""
        view = {}
        for name, session in state.sessions.items():
            kept = state.generations.get(session.kept or "")
            view[name] = (session.owner, None if kept is None or kept.removal is not None
                          or kept_for_resume(state, kept) is None else kept.id)
        return view

    def check_artifacts(self, state: State, *, full: bool) -> None:
        """The store holds the journal's artifacts, each as recorded, 1600 (sticky), and
        besides them only what a killed keeper left unrecorded."""
        store = self.root / ARTIFACTS_DIR
        on_disk = sorted(set(os.listdir(store)) - self.unrecorded) if store.exists() else []
        recorded = {f"{a.id}-{a.label}": a for a in state.artifacts.values()}
        assert on_disk == sorted(recorded), f"artifact store {on_disk} != journal {recorded}"
        for name in self.unrecorded:
            assert (store / name).is_file(), f"{name}, left unrecorded, was removed"
        for name, a in recorded.items():
            path = store / name
            assert (_digest(path), path.stat().st_size) == (a.sha256, a.size), f"{path} changed"
            assert stat.S_IMODE(path.stat().st_mode) == 0o1600
            assert path.stat().st_nlink == 1
        if full:
            assert {a.label: (store / name).read_text() for name, a in recorded.items()} == (
                self.model.artifacts), "the artifacts are not the model's"

    def on_disk(self) -> set[str]:
        return {n for n in os.listdir(self.root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX))}

    def disk_difference(self, owing: Set[str] = frozenset()) -> tuple[set[str], set[str]]:
        """(leaked, wrongly removed): entries on disk the model lacks, and the reverse.

        Generations whose removal is *owing* may still be there, under either name.
        """
        expected = {generation_name(g) for g in self.model.live_generations()}
        allowed = {n for g in owing for n in (generation_name(g), trash_name(g))}
        found = self.on_disk()
        return found - expected - allowed, expected - found

    def check(self, *, full: bool = True) -> None:
        """Every invariant.  *full* False allows journal entries the model never saw.

        After a crash in the middle of an operation the journal may hold what
        that operation began (a generation, a lease, a manager that never
        finished opening), all of it the dead manager's; then only the live
        managers are compared and the journal must agree with the disk.
        With *full*, the journal may owe work (see :func:`owed`) only for the
        managers a fault stopped (``owing``), and is compared with the model
        as it will be once that work is done.
        """
        state = self.journal_state()
        owing = owed(state) if full else set()
        leaked, removed = self.disk_difference(owing)
        assert not leaked, f"leaked: {sorted(leaked)}"
        assert not removed, f"removed while the model keeps them: {sorted(removed)}"

        assert journal_problems(self.root) == []
        assert journal_state_from_checkpoint(self.root) == self.live_journal_state()
        model = self.model.view(self.ids, self.lease_ids)
        if full:
            stopped = {state.generations[g].manager for g in owing}
            assert stopped <= self.owing, f"work owed by managers no fault stopped: {owing}"
            assert settled_view(state) == model
        else:
            journal = view_of_journal(state)
            live_ids = {self.ids[n] for n in self.live()}
            assert {m: v for m, v in journal[0].items() if m in live_ids} == {
                m: v for m, v in model[0].items() if m in live_ids}
            assert {g: v for g, v in journal[1].items() if v[0] in live_ids} == {
                g: v for g, v in model[1].items() if v[0] in live_ids}
            kept = {generation_name(g) for g, v in journal[1].items() if v[3] != "finished"}
            assert kept == self.on_disk(), "the journal and the disk disagree"
        live = self.live_journal_state()
        for manager in [*(self.real[n] for n in self.live()), *self.unclosed.values()]:
            self.memory_agrees(manager, live)
            held = {lease.id for lease in self.leases.values() if lease.manager is manager}
            assert set(handles.of(manager.id).leases) == held, f"{manager.id} holds other leases"

        for gid in self.model.live_generations():
            # What the commands wrote, in the generation's work directory.
            path = self.root / generation_name(gid) / WORK_DIR
            assert path.is_dir()
            files = {p.name: p.read_text() for p in path.iterdir()}
            assert files == self.model.generations[gid].files, f"{path} lost or gained files"
        for lease_name, lease in self.leases.items():
            assert lease.path == self.root / generation_name(self.model.held[lease_name]) / WORK_DIR
            assert not lease.released

        self.check_artifacts(state, full=full)
        if full:
            assert self.sessions_view(state) == {
                name: (self.ids[m.owner], m.kept) for name, m in self.model.sessions.items()}

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


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def own_view(state: State, manager: str) -> tuple[object, dict[str, object]]:
    """One manager's part of *state*: its record and its generations, every field."""
    return state.managers.get(manager), {
        g.id: g for g in state.generations.values() if g.manager == manager
    }


def _raise(error: Exception) -> None:
    raise error


FORKED_COPY_FAILURES = {
    1: "an operation on it did not raise ForkedCopy",
    2: "a lease's release() did not release the child's copy",
    70: "it raised",
}


def forked_copy_misbehaves(manager: Manager, leases: list[Lease]) -> int:
    """In a forked child: 0 when its copy of *manager* owns nothing, else a failure code."""
    for operation in (manager.acquire, manager.retain, manager.release, manager.rotate):
        try:
            operation()
        except ForkedCopy:
            continue
        return 1
    for lease in leases:
        lease.release()
        if not lease.released:
            return 2
    manager.close()
    with manager:
        pass
    return 0
