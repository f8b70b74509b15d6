"""The write path of a manager, as the modules acting for it see it: one Protocol.

Making a generation, claiming a session and keeping an artifact each decide
with the manager's state and append to its journal; none of them owns
either.  They take a :class:`WritePath` (the manager's, structurally), so that
they never import the manager, which imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from journal.events import Event
    from journal.reducer import State
    from journal.store import Pending

__all__ = ["WritePath"]


class WritePath(Protocol):
    """A manager's state and write path."""

    @property
    def state(self) -> State:
        """The reducer's state, including every append still queued."""

    def append(self, *events: Event, wait: bool = True) -> Pending:
        """Decide and queue *events*; with *wait*, return once they are durable."""
