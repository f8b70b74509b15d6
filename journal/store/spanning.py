"""The spanning connection: every kept segment attached, and shown as one history.

A connection of its own (in memory) attaches each kept segment file read-only
and defines temporary views ``events``, ``checkpoints`` and ``bases`` over
them all, so that every query reads the kept history as one table.  The
:class:`~sessiontemp.journal.store.reading.Reader` decides when one is built and when it is
let go of; this module only builds it.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

import attrs

from .. import segments
from ..errors import JournalCorrupt
from ..segments import MAX_KEPT, Segment
from .link import Link

__all__ = ["Span", "attach", "table_names"]


@attrs.frozen
class Span:
    """A spanning connection and what it attached: each file's schema name, each one's tables."""

    conn: sqlite3.Connection
    # The first attached file's schema version: a change there means the layout moved.
    schema: int
    attached: dict[str, str]
    tables: tuple[frozenset[str], ...]


def attach(link: Link, kept: list[Segment], *, again: bool = True) -> Span:
    """A new connection that attaches every segment of *kept* and shows them as one.

    A segment retired by another process since *kept* was listed makes it list
    again, once (*again*); missing a second time, it is the journal's damage.
    """
    conn = sqlite3.connect("file::memory:", uri=True, isolation_level=None,
                           check_same_thread=False, timeout=link.busy_timeout)
    try:
        mode = "ro&immutable=1" if link.immutable else "ro"
        events, checkpoints, bases = [], [], []
        made: list[frozenset[str]] = []
        for i, segment in enumerate(kept):
            if not os.path.exists(segment.file) and again and segment is not kept[-1]:
                # Retired by another process since the listing: list again.
                conn.close()
                return attach(link, link.resolve(remove=False)[-MAX_KEPT:], again=False)
            if not os.path.exists(segment.file):
                raise JournalCorrupt(segment.path, "is missing", link.segment_fix(
                    segment.path))
            link.check_files(segment.file)
            uri = "file:" + quote(os.fsencode(os.path.abspath(segment.file))) + "?mode=" + mode
            conn.execute(f"ATTACH DATABASE ? AS s{i}", (uri,))
            tables = table_names(conn, f"s{i}")
            # The first read of the file made its -wal and -shm: retired since
            # the look above, nothing else would remove them.
            segments.tidy(segment.file)
            made.append(tables)
            if "events" in tables:
                # Only schema names made here go into the SQL, never input.
                events.append(
                    f"SELECT seq, time, kind, payload, digest FROM s{i}.events")  # noqa: S608
            if "checkpoints" in tables:
                checkpoints.append(
                    f"SELECT seq, digest, format, state FROM s{i}.checkpoints")  # noqa: S608
            if "segment" in tables:
                bases.append(f"SELECT base, digest FROM s{i}.segment")  # noqa: S608
        # Empty views keep their column names: a retired head has no
        # events, and a journal that never rolled over no bases.
        conn.execute("CREATE TEMP VIEW events AS " + (
            " UNION ALL ".join(events) or "SELECT NULL AS seq, NULL AS time, NULL AS kind, "
            "NULL AS payload, NULL AS digest WHERE 0"))
        conn.execute("CREATE TEMP VIEW checkpoints AS " + (
            " UNION ALL ".join(checkpoints) or "SELECT NULL AS seq, NULL AS digest, "
            "NULL AS format, NULL AS state WHERE 0"))
        conn.execute("CREATE TEMP VIEW bases AS " + (
            " UNION ALL ".join(bases) or "SELECT NULL AS base, NULL AS digest WHERE 0"))
        (schema,) = conn.execute("PRAGMA s0.schema_version").fetchone()
    except sqlite3.Error as e:
        conn.close()
        raise link.translate(e, "read") from e
    except BaseException:
        conn.close()
        raise
    return Span(conn, schema, {segment.file: f"s{i}" for i, segment in enumerate(kept)},
                tuple(made))


def table_names(conn: sqlite3.Connection, schema: str) -> frozenset[str]:
    """The tables of *schema* in *conn* (a name made by :func:`attach`, never input)."""
    return frozenset(name for (name,) in conn.execute(
        f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'"))  # noqa: S608
