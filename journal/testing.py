"""Test support: what a test of the journal may look at, or stand in for, inside a Store.

Not for use outside tests.  Each helper answers one question a test asks of a
store's insides (which connection appends go through, whether the reader over
the sealed segments is open, what this process remembers of sealed files), so
that the tests name what they check and the store can move its internals
freely: only this module follows them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .ledger import Ledger
from .segments import Segment
from .store import Store

__all__ = [
    "commits",
    "connection",
    "forget_sealed",
    "holding",
    "listing",
    "maintenance_thread",
    "remembered",
    "replaced_connection",
    "sleeping",
    "spanning",
    "spans",
    "stale_listing",
    "statements",
    "synced_commits",
]


def connection(store: Store) -> sqlite3.Connection:
    """The connection *store* appends through (the active segment's)."""
    return store._link.conn


@contextlib.contextmanager
def replaced_connection(store: Store, wrap: Callable[[sqlite3.Connection], Any]) -> Iterator[Any]:
    """Append through ``wrap(connection)`` inside the block, then through the real one again.

    A store that reconnected inside the block (after a failure the wrapper
    raised) keeps its new connection.
    """
    link = store._link
    real = link.conn
    stand_in = wrap(real)
    link.conn = stand_in
    try:
        yield stand_in
    finally:
        if link.conn is stand_in:
            link.conn = real


@contextlib.contextmanager
def holding(store: Store) -> Iterator[None]:
    """Hold *store*'s connection lock, as an append in another thread does while it writes."""
    with store._link.lock:
        yield


def maintenance_thread(store: Store) -> threading.Thread | None:
    """The thread running the maintenance of *store*'s ledger, if one was started and not let go
    of (None when no ledger keeps the store)."""
    keeper = store.keeper
    return keeper.maintenance_thread if isinstance(keeper, Ledger) else None


def sleeping(store: Store) -> int:
    """How many queued appends of *store* sleep behind a running commit."""
    return store._sleeping()


@contextlib.contextmanager
def commits(record: Callable[[int], None]) -> Iterator[None]:
    """Call *record* with the number of appends of each group commit, in the leading thread."""
    real = record_commits(record)
    try:
        yield
    finally:
        from .store import commit

        commit.GroupCommit.commit_batch = real  # type: ignore[method-assign]


def record_commits(record: Callable[[int], None]) -> Callable[..., None]:
    """:func:`commits` for the rest of the process (a child process's driver); returns what
    it stands in front of."""
    from .store import commit

    real = commit.GroupCommit.commit_batch

    def recording(self: commit.GroupCommit, batch: list[commit.Pending],
                  own: commit.Pending) -> None:
        record(len(batch))
        real(self, batch, own)

    commit.GroupCommit.commit_batch = recording  # type: ignore[method-assign]
    return real


@contextlib.contextmanager
def synced_commits(record: Callable[[Path], None]) -> Iterator[None]:
    """Call *record* with the segment file after each synced group commit, in any store.

    Called in the leading thread once the commit returned: what its -wal
    file holds then is on the disk, and stays there across a power loss.
    A commit that raised records nothing.
    """
    from .store import commit

    real = commit.GroupCommit.commit_batch

    def recording(self: commit.GroupCommit, batch: list[commit.Pending],
                  own: commit.Pending) -> None:
        real(self, batch, own)
        if any(p.durable for p in batch):
            record(Path(self._link.active.file))

    commit.GroupCommit.commit_batch = recording  # type: ignore[method-assign]
    try:
        yield
    finally:
        commit.GroupCommit.commit_batch = real  # type: ignore[method-assign]


def spanning(store: Store) -> bool:
    """Whether *store* has the reader over its kept segments open (sealed ones attached)."""
    return store._reader.spanning


@contextlib.contextmanager
def spans() -> Iterator[list[list[Path]]]:
    """Record the segments each reader over kept segments is built for, in any store."""
    from .store import reading

    built: list[list[Path]] = []
    real = reading.Reader.span

    def recording(self: reading.Reader, kept: list[Segment], *, again: bool = True
                  ) -> sqlite3.Connection:
        built.append([segment.path for segment in kept])
        return real(self, kept, again=again)

    reading.Reader.span = recording  # type: ignore[method-assign]
    try:
        yield built
    finally:
        reading.Reader.span = real  # type: ignore[method-assign]


def listing(store: Store) -> list[Segment]:
    """*store*'s listing of its kept segments, as a reader makes it (removing nothing)."""
    return store._link.resolve(remove=False)


def stale_listing(store: Store, stale: list[Segment]) -> Callable[..., list[Segment]]:
    """Make *store*'s next listing *stale*, as if made before another process changed it.

    Returns the store's own way of listing, which lists the segments as they are.
    """
    link = store._link
    listings = [stale]
    resolve = link.resolve

    def once(*, remove: bool = True) -> list[Segment]:
        return listings.pop() if listings else resolve(remove=remove)

    link.resolve = once  # type: ignore[method-assign]
    return resolve


def remembered(journal: Path) -> dict[int, bool]:
    """What this process remembers of *journal*'s sealed segments: by base, whether read."""
    from .store import sealed

    return sealed.remembered(journal)


def forget_sealed() -> None:
    """Forget everything this process remembered of sealed segments (it is read again)."""
    from .store import sealed

    sealed.forget_all()


@contextlib.contextmanager
def statements(hook: Callable[[str], None]) -> Iterator[None]:
    """Call *hook* with each SQL statement, as it starts, of every store opened in the block.

    Every connection a store makes inside the block (to the head, to a
    segment, the reader over the kept segments) calls *hook* before each
    statement it runs, in the thread that runs it: a test stops a reader
    there, between two of its steps, and lets another process act.  What
    *hook* raises is lost (SQLite's trace callbacks cannot raise): record
    failures and assert after.
    """
    from .store import link, reading

    real_head, real_segment = link.Link.connect_head, link.Link.connect_segment
    real_span = reading.Reader.span

    def head(self: link.Link) -> sqlite3.Connection:
        conn = real_head(self)
        conn.set_trace_callback(hook)
        return conn

    def segment(self: link.Link, file: Any) -> sqlite3.Connection:
        conn = real_segment(self, file)
        conn.set_trace_callback(hook)
        return conn

    def span(self: reading.Reader, kept: list[Segment], *, again: bool = True
             ) -> sqlite3.Connection:
        conn = real_span(self, kept, again=again)
        conn.set_trace_callback(hook)
        return conn

    link.Link.connect_head = head  # type: ignore[method-assign]
    link.Link.connect_segment = segment  # type: ignore[method-assign]
    reading.Reader.span = span  # type: ignore[method-assign]
    try:
        yield
    finally:
        link.Link.connect_head = real_head  # type: ignore[method-assign]
        link.Link.connect_segment = real_segment  # type: ignore[method-assign]
        reading.Reader.span = real_span  # type: ignore[method-assign]
