"""The ledger: the one owner of a writer's folded state, and of when its journal is maintained.

    caller  --append(events)-->  Ledger: the fold decides on .state, numbers and folds ahead
    Ledger  --submit(rows)----->  Store: one transaction, one sync, for every thread's appends
    Store   --settle(records)-->  Ledger: inside it, fold again only where the numbers moved
    Store   --committed/failed->  Ledger: .durable moves on, or .state falls back to it
    Ledger  --due-------------->  maintain(seq, whole state): checkpoint what it holds

A ledger of the journal's *whole* state (``whole`` given: a recovery pass,
a maintenance) decides from the journal at its tail instead:

    caller  --catch_up()------->  Ledger: others' records folded in, tolerantly
    caller  --append(events)--->  Store: inside the transaction, the records
                                  committed since the state, then the events,
                                  folded (the events by the rules) before COMMIT
    rollover --catch_up_with()->  Ledger: what the new segment starts from is the state

A :class:`Ledger` holds the state over what its writer appended (``state``,
including every append still queued; ``durable``, what is committed), the
durability of each append (:mod:`journal.durability`), and the schedule of
the journal's maintenance.  The store holds none of it: it commits the rows
it is handed, and says which were committed and which numbers they got
(other processes append to the same journal: the store learns the real tail
inside its write transaction, and an append numbered ahead on a stale one
is folded again there).  The ledger never imports ``sessiontemp``, so a
recovery on a root with no manager keeps one too.

A whole ledger is the one place a writer folds the journal: nothing decides
from a state that is behind the journal's tail, and a checkpoint that rolls
the journal over starts the new segment from the very state the writer goes
on deciding from (records others appended meanwhile included), so that what
the retirement after it deletes was folded in first.  It is no keeper of the
store: it appends one transaction at a time and waits for it, and the store
it shares may be a manager's, whose ledger keeps it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .durability import Durability, synced
from .errors import JournalError, RuleViolation
from .events import Event, Record
from .maintenance import Maintenance
from .store import Pending, Store

__all__ = ["Follower", "Ledger"]

class Sequenced(Protocol):
    """A state: it says the last event folded into it."""

    @property
    def seq(self) -> int: ...


S = TypeVar("S", bound=Sequenced)
S_co = TypeVar("S_co", covariant=True)


class Follower(Protocol[S_co]):
    """A fold kept open over the whole journal (a tolerant :class:`~.reducer.Fold`).

    ``refused`` lists the rule violations of the records it held on to.
    """

    refused: list[RuleViolation]

    def step(self, record: Record) -> None:
        """Fold *record*, the next the journal holds, in place."""

    def state(self) -> S_co:
        """The state after the records stepped so far (a copy: stepping on leaves it be)."""


class _Ahead(Generic[S]):
    """One append of a ledger's, folded ahead: the commit's :class:`~.store.Settle`."""

    __slots__ = ("base", "first", "folded", "ledger")

    def __init__(self, ledger: Ledger[S], base: S, first: int, folded: S) -> None:
        self.ledger = ledger
        self.base = base
        self.first = first
        self.folded = folded

    def holds(self, first: int) -> bool:
        return first == self.first and self.base is self.ledger._committing

    def settle(self, records: list[Record]) -> None:
        ledger = self.ledger
        if records[0].seq == self.first and self.base is ledger._committing:
            ledger._committing = self.folded
            return
        # Numbered or based otherwise than folded ahead (another process
        # appended, or an append before this one failed): fold again on what
        # did commit; a refusal fails this append alone.
        ledger.epoch += 1
        ledger._committing = ledger._fold(records, ledger._committing)


class _AtTail(Generic[S]):
    """One append of a whole ledger's, decided inside its transaction: its :class:`~.store.Settle`.

    Never folded ahead (it :meth:`holds` nowhere): the commit hands it the
    records others committed after *base*, then the append's own.
    """

    __slots__ = ("base", "count", "fold", "ledger", "state")

    def __init__(self, ledger: Ledger[S], base: S, count: int) -> None:
        self.ledger = ledger
        self.base = base
        self.count = count
        self.fold: Follower[S] | None = None
        self.state: S | None = None

    def holds(self, first: int) -> bool:
        return False

    def settle(self, records: list[Record]) -> None:
        own = len(records) - self.count
        fold = self.ledger._tolerant(self.base)
        for record in records[:own]:
            fold.step(record)
        # The rules decide: a refusal rolls the transaction back.
        self.state = self.ledger._fold(records[own:], fold.state())
        self.fold = fold


class Ledger(Generic[S]):
    """The folded state of one writer's appends to *store*, from *state* on, through *fold*.

    ``fold(records, state)`` is the state after *records* (the reducer's
    :func:`~sessiontemp.journal.reducer.replay`); it raises to refuse them.
    *durability* says which appends are synced before they return.
    With *whole* (``whole(state)`` opens a tolerant fold there), the state
    is the journal's whole state: see :meth:`catch_up` and :meth:`append`.
    """

    def __init__(self, store: Store, fold: Callable[[list[Record], S], S], state: S, *,
                 durability: Durability = "full",
                 whole: Callable[[S], Follower[S]] | None = None) -> None:
        self._store = store
        self._fold = fold
        self._opens = whole
        # What the records others appended broke, for the whole ledger's
        # writer to report (see catch_up): taken and cleared by it.
        self.refused: list[RuleViolation] = []
        self.durability: Durability = durability
        # The state including every append queued (what the next append
        # builds on); what is committed; and, inside a transaction, what
        # it has settled so far (the leader's thread alone moves it).
        self.state: S = state
        self.durable: S = state
        self._committing: S = state
        # Counts the times a state folded ahead had to be folded again or
        # was thrown away: a writer that saw it move calls resync().
        self.epoch = 0
        self._seen = 0
        # Called with the last seq and the journal's whole state, when this
        # ledger holds it, every store.maintenance_every events.
        self.maintain: Callable[[int, S | None], None] | None = None
        self._maintenance = Maintenance()
        self._maintenance.run = self._run_maintenance
        # The journal's whole state, folded up to the record before
        # _expected (see follow): guarded by _lock.
        self._lock = threading.Lock()
        self._whole: Follower[S] | None = None
        self._expected = 0
        if whole is None:
            store.keep(self)

    # -- the write path ----------------------------------------------------------

    def submit(self, events: tuple[Event, ...], *, time: float) -> Pending:
        """Decide and queue *events*; :attr:`state` becomes the state after them at once.

        The fold decides on the state including every append still queued
        (a refusal raises, and nothing is queued).  :meth:`wait` for the
        append before any effect it must precede.
        """
        return self._store.submit(events, time=time, durable=synced(self.durability, events),
                                  ahead=self._ahead)

    def _ahead(self, records: list[Record]) -> _Ahead[S]:
        # Under the store's queue lock: the states follow the queue's order.
        base = self.state
        folded = self._fold(records, base)
        self.state = folded
        return _Ahead(self, base, records[0].seq, folded)

    def wait(self, pending: Pending) -> list[Record]:
        """*pending*'s records once durable; raises why they are not."""
        return self._store.wait(pending)

    @property
    def moved(self) -> bool:
        """Whether a state folded ahead was folded again or thrown away since :meth:`resync`."""
        return self.epoch != self._seen

    def resync(self) -> None:
        """Take what is durable as the state, once nothing queued is left (after a failure).

        The caller makes sure no other thread appends through this ledger meanwhile.
        """
        self._store.drain()
        self._seen = self.epoch
        self.state = self.durable

    def reset(self, state: S) -> None:
        """Start over at *state* (nothing of this ledger's may be queued)."""
        self.state = self.durable = self._committing = state

    # -- a writer that decides from the journal's whole state ---------------------

    def catch_up(self) -> S:
        """Fold every record the journal holds after :attr:`state` into it, and return it.

        Tolerantly: what a record the rules refuse names is held, and the
        refusal added to :attr:`refused`.  Raises :class:`JournalError` when
        history after the state was retired: a fold that passed over it
        would decide from a state that never was.  The empty state is the
        exception: a writer starts there when no checkpoint of the kept
        history could be used, and the tolerant fold holds whatever the
        kept records name that it does not know.
        """
        seq = self.state.seq
        fold = self._tolerant(self.state)
        records = self._store.records(after=seq, tolerant=True)
        try:
            first = next(records, None)
            if seq and first is not None and first.seq != seq + 1 and (
                    self._store.history().retired_until > seq):
                raise JournalError(
                    self._store.path, f"a fold at event {seq} would go on at event "
                    f"{first.seq}: the history between was retired",
                    "Nothing was lost; run the recovery again")
            if first is not None:
                fold.step(first)
                for record in records:
                    fold.step(record)
        finally:
            records.close()
        return self._take(fold)

    def catch_up_with(self, records: list[Record]) -> S:
        """Fold *records*, the journal's next after :attr:`state`, into it, and return it.

        A rollover's catch-up: what others appended after the state, read
        under the write lock, which the new segment starts from.
        """
        fold = self._tolerant(self.state)
        for record in records:
            fold.step(record)
        return self._take(fold)

    def append(self, events: tuple[Event, ...], *, time: float) -> list[Record]:
        """Decide *events* on the journal's state at its tail, and commit them; return them.

        Inside the write transaction, the records others committed after
        :attr:`state` are folded in (tolerantly), then *events* by the
        rules: a refusal (:class:`RuleViolation`) writes nothing, and the
        state stays as it was.  Durable when it returns.
        """
        base = self.state
        tail = _AtTail(self, base, len(events))
        records = self._store.append(events, time=time, ahead=lambda _: tail, after=base.seq)
        assert tail.fold is not None
        assert tail.state is not None
        self.refused.extend(tail.fold.refused)
        self.state = self.durable = self._committing = tail.state
        return records

    def _tolerant(self, state: S) -> Follower[S]:
        if self._opens is None:
            raise TypeError("only a ledger of the journal's whole state (whole=) catches up")
        return self._opens(state)

    def _take(self, fold: Follower[S]) -> S:
        self.refused.extend(fold.refused)
        self.state = self.durable = self._committing = fold.state()
        return self.state

    # -- the store's Keeper --------------------------------------------------------

    def committed(self, records: list[Record]) -> None:
        """What one transaction committed, in order (the committing thread)."""
        self.durable = self._committing
        if self._whole is not None:
            with self._lock:
                whole = self._whole
                if whole is not None:
                    if records[0].seq != self._expected:
                        # Another process appended between: the maintenance reads it.
                        self._whole = None
                    else:
                        try:
                            # Folded here, a record at a time in place (about a
                            # microsecond each): nothing is held but the state.
                            for record in records:
                                whole.step(record)
                        except Exception:
                            # The records are committed whatever this fold
                            # makes of them: only the held state is let go.
                            self._whole = None
                        self._expected = records[-1].seq + 1
        if self.maintain is not None:
            self._maintenance.due(records[-1].seq, self._store.maintenance_every)

    def failed(self) -> None:
        """A transaction failed: what it settled is thrown away."""
        self._committing = self.durable
        self.epoch += 1

    @property
    def busy(self) -> bool:
        """Whether the maintenance thread is at work."""
        return self._maintenance.running

    def join(self) -> None:
        """Wait for a running maintenance to end, unless this is its thread."""
        self._maintenance.join()

    @property
    def maintenance_thread(self) -> threading.Thread | None:
        """The thread running the maintenance, if one was started and not let go of."""
        return self._maintenance.thread

    # -- the journal's whole state, for its maintenance ------------------------------

    def follow(self, whole: Follower[S], seq: int) -> None:
        """Fold every record committed after event *seq* into *whole*, the journal's state.

        From then on each maintenance is handed the journal's state without
        reading it back, for as long as every record committed follows the
        last one seen; the first that does not (another process's between)
        lets it go, and the maintenance reads the journal again.
        """
        with self._lock:
            self._whole = whole
            self._expected = seq + 1

    def whole(self) -> S | None:
        """The journal's whole state up to the last record committed, or None if not held."""
        with self._lock:
            return None if self._whole is None else self._whole.state()

    def _run_maintenance(self, seq: int) -> None:
        maintain = self.maintain
        if maintain is not None:
            maintain(seq, self.whole())
