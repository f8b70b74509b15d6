"""A manager's write path, as the modules acting for it see it: one Protocol.

Making a generation, handing out a lease, measuring, claiming a session and
keeping an artifact each decide with the manager's state and append to its
journal; none of them owns either.  They take a :class:`WritePath` (the
manager's :class:`~sessiontemp.writer.Writer`, structurally), so that they
never import the manager, which imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sessiontemp.journal.events import Event
    from sessiontemp.journal.reducer import ManagerState, State
    from sessiontemp.journal.store import Pending

__all__ = ["WritePath"]


class WritePath(Protocol):
    """A manager's state, its own part of it, and its write path."""

    @property
    def state(self) -> State:
        """The reducer's state, including every append still queued."""

    @property
    def durable(self) -> State:
        """The reducer's state over the manager's appends committed."""

    @property
    def me(self) -> ManagerState:
        """The manager's own part of the state (or of the state it ended in)."""

    @property
    def closed(self) -> bool:
        """Whether the manager has ended, or let go of its handles after a failure."""

    def append(self, *events: Event, wait: bool = True) -> Pending:
        """Decide and queue *events*; with *wait*, return once they are durable."""

    def wait(self, pending: Pending) -> None:
        """Return once *pending* is durable; on failure, fall back to the durable state."""
