"""Verify: SQLite's integrity of every kept file, the sequence and the digest chain.

What :meth:`sessiontemp.journal.store.Store.verify` reports: each problem as one line,
and where damage stops the reading, that too, after what was found.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import JournalCorrupt
from .digests import GENESIS, check
from .link import Link
from .reading import Reader

__all__ = ["verify"]


def verify(link: Link, reader: Reader) -> list[str]:
    """Check SQLite's integrity, the sequence and the digest chain; return the problems.

    All of it in one snapshot (the caller's, if one is open): every file
    it checks is the one whose events it then reads, whatever another
    process rolls over or retires meanwhile.
    """
    with reader.snapshot():
        return _verify(link, reader)


def _verify(link: Link, reader: Reader) -> list[str]:
    problems: list[str] = []
    with link.lock:
        try:
            conn = reader.connection()
            if not reader.spans(conn):
                files = [("main", link.path)]
            else:
                # The files the span has attached, by the names it gave them:
                # never a listing of its own, which another process's
                # rollover or retirement may have changed since.
                files = sorted(((schema, Path(file)) for file, schema in
                                reader.attached(conn).items()), key=lambda f: int(f[0][1:]))
            for schema, path in files:
                for (line,) in conn.execute(f"PRAGMA {schema}.integrity_check"):
                    if line != "ok":
                        problems.append(f"integrity: {line}" if schema == "main"
                                        else f"integrity of {path}: {line}")
            bases: dict[int, bytes] = {}
            if reader.spans(conn):
                bases = {int(b): bytes(d) for b, d in conn.execute(
                    "SELECT base, digest FROM bases")}
                for b, d in conn.execute("SELECT e.seq, e.digest FROM events e "
                                         "JOIN bases ON bases.base = e.seq"):
                    if bytes(d) != bases[int(b)]:
                        problems.append(f"event {b}: the segment after it records another "
                                        "digest for it")
            first = conn.execute("SELECT min(seq) FROM events").fetchone()[0]
        except sqlite3.Error as e:
            if problems:
                # The damage is found and named; what it hides cannot be read.
                return [*problems, f"reading stopped at the damage: {e}"]
            raise link.translate(e, "read") from e
    try:
        return _check_chain(reader, problems, first, bases)
    except JournalCorrupt as e:
        if not problems:
            raise
        return [*problems, f"reading stopped at the damage: {e.reason}"]


def _check_chain(reader: Reader, problems: list[str], first: int | None,
                 bases: dict[int, bytes]) -> list[str]:
    """Check the sequence and the digest chain of every kept event, after *problems*."""
    expected_seq, digest = 1, GENESIS
    if first is not None and first > 1 and bases:
        # History before the first kept segment was retired: the chain
        # starts from the digest that segment records for its base.
        expected_seq = int(first)
        if first - 1 in bases:
            digest = bases[first - 1]
        else:
            problems.append(f"sequence: events before {first} are missing, and no segment "
                            "says where they were retired")
    return check(reader.rows(after=expected_seq - 1), first=expected_seq, digest=digest,
                 problems=problems)
