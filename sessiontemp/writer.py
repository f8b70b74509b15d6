"""A manager's write path: its events to its ledger, and what the manager is in its state.

The manager decides nothing here: it hands its events to :meth:`Writer.append`,
which hands them to the manager's :class:`~journal.ledger.Ledger` (where
the folded state lives, and only there: it decides with the reducer, folds
ahead and queues).  The writer adds what only a manager has: the step hook before
each append, its clock, the manager's own part of the state once the state
has let go of it, and stopping the manager when its journal breaks.
Whatever acts for the manager (its generations, its meter, its leases, a
claim, a kept file) appends through the same writer, which each of them
names ``writer`` and sees as a :class:`~sessiontemp.writepath.WritePath`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from sessiontemp._guards.steps import Steps
from sessiontemp.handles import Handles
from sessiontemp.journal.durability import Durability
from sessiontemp.journal.errors import JournalError, RuleViolation
from sessiontemp.journal.events import Event
from sessiontemp.journal.ledger import Ledger
from sessiontemp.journal.reducer import EMPTY, ManagerState, State, replay
from sessiontemp.journal.store import Pending, Store

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger

__all__ = ["Writer"]


class Writer:
    """The write path of manager *manager*, and the reducer's state over what it appended."""

    def __init__(self, manager: str, handles: Handles, *, durability: Durability,
                 clock: Callable[[], float], steps: Steps, mutex: threading.RLock,
                 log: BoundLogger) -> None:
        self.manager = manager
        self._handles = handles
        self._durability = durability
        self._clock = clock
        self._steps = steps
        self._mutex = mutex
        self._log = log
        # Made once the journal is open (see keep).
        self._ledger: Ledger[State] | None = None
        # This manager as the state last held it (see _track_me): the state
        # forgets it once it has ended and has nothing left to remove.
        self._ended: ManagerState | None = None

    def keep(self, store: Store) -> Ledger[State]:
        """Keep the state of this manager's appends to *store*, from nothing appended yet."""
        self._ledger = Ledger(store, replay, EMPTY, durability=self._durability)
        return self._ledger

    @property
    def state(self) -> State:
        """The reducer's state over this manager's appends, including every one queued."""
        ledger = self._ledger
        return EMPTY if ledger is None else ledger.state

    @state.setter
    def state(self, state: State) -> None:
        # What the next append builds on: only a test planting a write-path
        # fault (memory ahead of the journal) sets it.
        assert self._ledger is not None
        self._ledger.state = state

    @property
    def durable(self) -> State:
        """That state over the appends committed."""
        ledger = self._ledger
        return EMPTY if ledger is None else ledger.durable

    def seed(self, state: State) -> None:
        """Start from *state*: the part of the journal's state a claim names."""
        assert self._ledger is not None
        self._ledger.reset(state)

    def find_me(self, state: State) -> ManagerState | None:
        """The manager's own part of *state*, or of the state it ended in; None before."""
        return state.managers.get(self.manager, self._ended)

    @property
    def me(self) -> ManagerState:
        """The manager's own part of the state (or of the state it ended in)."""
        me = self.find_me(self.state)
        assert me is not None, "a manager's state holds it from its first event on"
        return me

    @property
    def closed(self) -> bool:
        """Whether the manager has ended, or let go of its handles after a failure."""
        return self._handles.closed or self.me.ended is not None

    def append(self, *events: Event, wait: bool = True) -> Pending:
        """Queue *events* for the journal's next group commit; with *wait*, until durable.

        The reducer decides first, on the state including every append
        still queued (an event it refuses raises, and nothing is queued),
        and :attr:`state` becomes that speculative state at once:
        the next operation builds on it (see :meth:`Ledger.submit`).  When
        an append fails, the state falls back to what is
        durable (:meth:`Ledger.resync`).  Without *wait* the caller must
        :meth:`wait` before any effect the events must precede, or before
        it returns; a caller holding the manager's mutex may wait outside it, so that
        other threads' appends join the same commit.
        """
        if self._steps.hook is not None:
            # Only then: the detail is built for the hook alone.
            self._steps.before("journal", ",".join(e.kind for e in events))
        store = self._handles.store
        ledger = self._ledger
        assert store is not None
        assert ledger is not None
        if ledger.moved:
            self._resync(ledger)
        try:
            pending = ledger.submit(events, time=self._clock())
        except JournalError:
            if store.broken is not None:
                self._break(store.broken)
            raise
        self._track_me()
        if wait:
            self.wait(pending)
        return pending

    def wait(self, pending: Pending) -> None:
        """Return once *pending* is durable; on failure, fall back to the durable state.

        Called with the manager's mutex held, or without it (it is then taken to
        catch up with a failure).
        """
        store = self._handles.store
        ledger = self._ledger
        assert store is not None
        assert ledger is not None
        try:
            ledger.wait(pending)
        except (JournalError, RuleViolation):
            with self._mutex:
                if store.broken is not None:
                    self._break(store.broken)
                self._resync(ledger)
            raise
        if ledger.moved:
            with self._mutex:
                self._resync(ledger)

    def _resync(self, ledger: Ledger[State]) -> None:
        """Catch up with the ledger after an append was folded again or failed.

        The caller holds the manager's mutex.
        """
        ledger.resync()
        self._track_me()

    def _track_me(self) -> None:
        """Remember this manager as the state last held it, or as it ended once let go of.

        The state forgets a manager once it has ended with nothing left to
        remove (see :mod:`sessiontemp.journal.reducer`); only its own close ends it here.
        """
        me = self.state.managers.get(self.manager)
        if me is not None:
            self._ended = me
        elif self._ended is not None:
            # Let go of: it ended, and the last of its generations is removed.
            self._ended = attrs.evolve(self._ended, sealed=True, current=None,
                                       generations=frozenset(),
                                       ended=self._ended.ended or "closed",
                                       ended_by=self._ended.ended_by or self.manager)

    def _break(self, reason: str) -> None:
        """Stop: the journal cannot be trusted to say what this manager did.

        Every handle is let go as if the process had died, so a recovery
        finds the manager dead and finishes its work from the journal.
        """
        self._log.error("manager.broken", reason=reason)
        self._handles.close_all()
