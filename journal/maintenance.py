"""The maintenance a long-lived writer runs every so many events, in a thread of its own.

Scheduled by whoever owns the folded state (a :class:`journal.ledger.Ledger`,
which calls :meth:`Maintenance.due` with the last seq of each commit it is
told of), never by the store: the store only waits for the thread before it
closes.  What the maintenance does (checkpoint, roll over, retire) is its
caller's, set as :attr:`Maintenance.run`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Maintenance"]


class Maintenance:
    """When to run the maintenance of one store, and the thread running it."""

    def __init__(self) -> None:
        # Called with the last seq after each append when maintenance is due;
        # set by whoever can write checkpoints.
        self.run: Callable[[int], None] | None = None
        self.thread: threading.Thread | None = None
        self._maintained = 0

    @property
    def running(self) -> bool:
        """Whether a maintenance thread is still at work."""
        thread = self.thread
        return thread is not None and thread.is_alive()

    def due(self, seq: int, every: int) -> None:
        """Run :attr:`run` once every *every* events, outside any transaction.

        The one check on the append path: an integer comparison.  A manager
        that lives for millions of events so still writes checkpoints, rolls
        over and retires history, which otherwise happen only at an open.
        """
        maintenance = self.run
        if maintenance is None:
            return
        if not self._maintained:
            self._maintained = seq
        elif seq - self._maintained >= every:
            self._maintained = seq
            # In a thread of its own: the append has committed and must
            # return as such, whatever the maintenance meets (a signal, a
            # full disk); and every step of it is safe to stop anywhere.
            if self.running:
                return
            self.thread = threading.Thread(
                target=self._run, args=(maintenance, seq), daemon=True,
                name="sessiontemp-journal-maintenance")
            self.thread.start()

    def _run(self, maintenance: Callable[[int], None], seq: int) -> None:
        """Run *maintenance* in its thread, then let go of the thread.

        A finished thread still referenced keeps its locks and conditions
        (some 1.5 kB) for as long as the store lives.
        """
        try:
            maintenance(seq)
        finally:
            # Only this thread's own: a newer one is started only once this
            # one is no longer alive, which is after this line.
            if self.thread is threading.current_thread():
                self.thread = None

    def join(self) -> None:
        """Wait for a running maintenance to end, unless this is its thread."""
        running = self.thread
        if running is not None and running is not threading.current_thread():
            running.join()
