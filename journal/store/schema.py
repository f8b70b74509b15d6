"""Every table of a journal file, its triggers and indexes: made and checked here.

Each journal file, the head and every segment, has the same ``events`` and
``checkpoints`` tables; the segment bookkeeping (``segment``, ``sealed``,
``retired``) comes with the first rollover.  The tables are declared once,
in :data:`TABLES`, and made through sqlite-utils.  Raw SQL stays where
sqlite-utils cannot say it (the triggers, the partial expression indexes),
and where a journal that exists is only looked at: an open of one must not
import sqlite-utils (a quarter of the package's import), so that look is a
query of ``sqlite_master``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

__all__ = [
    "APPLICATION_ID",
    "GENERATION_LIFE",
    "INDEXES",
    "INSERT",
    "INSERT_UNSEALED",
    "MANAGER_LIFE",
    "SCHEMA_VERSION",
    "SEGMENTED_VERSION",
    "SQLITE_MAGIC",
    "SYNCHRONOUS",
    "TABLES",
    "add_indexes",
    "add_segment_tables",
    "any_kind",
    "create_file",
    "has_table",
    "header",
    "index_sql",
    "missing_indexes",
]

SCHEMA_VERSION: Final = 1
# A journal that has rolled over to a second segment: a sessiontemp that
# does not know segments would append to the sealed first file, so it must
# refuse the journal instead.
SEGMENTED_VERSION: Final = 2
# "STMP": marks the file as a sessiontemp journal in SQLite's header.
APPLICATION_ID: Final = 0x53544D50
SQLITE_MAGIC: Final = b"SQLite format 3\x00"

# Name: (columns, primary key, columns that are NOT NULL).
TABLES: Final[dict[str, tuple[dict[str, type], str | None, frozenset[str]]]] = {
    "events": ({"seq": int, "time": float, "kind": str, "payload": str, "digest": bytes},
               "seq", frozenset({"time", "kind", "payload", "digest"})),
    # digest: the chain digest of event seq, which ties the row to one
    # history; a journal whose event seq differs ignores it.
    "checkpoints": ({"seq": int, "digest": bytes, "format": int, "state": bytes},
                    "seq", frozenset({"digest", "format", "state"})),
    # Segment bookkeeping, in every file once the journal rolled over: where
    # its events start (the seq and digest of the event before its first),
    # whether a newer segment took over, and (read in the head only) up to
    # which event history was retired.
    "segment": ({"base": int, "digest": bytes}, None, frozenset({"base", "digest"})),
    "sealed": ({"next": str, "seq": int, "time": float}, None,
               frozenset({"next", "seq", "time"})),
    "retired": ({"seq": int, "time": float}, None, frozenset({"seq", "time"})),
}
_SEGMENT_TABLES: Final = ("segment", "sealed", "retired")

# Triggers: sqlite-utils makes none of this kind.  {base}: the seq of the
# event before the file's first, so the next event must be exactly the one
# after it.
_TRIGGERS: Final = (
    "CREATE TRIGGER events_no_update BEFORE UPDATE ON events "
    "BEGIN SELECT RAISE(ABORT, 'sessiontemp events are append-only'); END",
    "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
    "BEGIN SELECT RAISE(ABORT, 'sessiontemp events are append-only'); END",
    # REPLACE deletes without firing DELETE triggers, and a hand-made seq
    # could leave a gap: the next event must be exactly the one after the last.
    "CREATE TRIGGER events_in_sequence BEFORE INSERT ON events "
    "WHEN NEW.seq IS NOT (SELECT coalesce(max(seq), {base}) + 1 FROM events) "
    "BEGIN SELECT RAISE(ABORT, 'sessiontemp events are append-only, each one right "
    "after the last'); END",
)

# The kinds of the records that tell a generation's life apart from its
# leases, and of those that open and end a manager: what the two expression
# indexes below cover.  Partial indexes: a lease's acquire and release (most
# of the journal) are not indexed, so they cost an append nothing more.
GENERATION_LIFE: Final = ("generation.created", "generation.ready", "command.started",
                          "removal.started", "removal.finished", "generation.reappeared")
MANAGER_LIFE: Final = ("manager.opened", "manager.closed", "manager.dead")
# Name, indexed expression, and the kinds it covers.  A query uses one only
# when its WHERE holds the very same expression and kind condition.
INDEXES: Final = (
    ("events_by_generation", "json_extract(payload, '$.generation')", GENERATION_LIFE),
    ("events_by_manager", "json_extract(payload, '$.manager')", MANAGER_LIFE),
)

INSERT: Final = "INSERT INTO events (seq, time, kind, payload, digest) VALUES (?, ?, ?, ?, ?)"
# An append alone: its own transaction (SQLite's autocommit), with the seal
# checked in the statement, so it writes nothing into a sealed file.
INSERT_UNSEALED: Final = ("INSERT INTO events (seq, time, kind, payload, digest) "
                          "SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM sealed)")
SYNCHRONOUS: Final = {True: "PRAGMA synchronous=FULL", False: "PRAGMA synchronous=NORMAL"}


def any_kind(kinds: Sequence[str]) -> str:
    """``(kind = ... OR ...)`` over fixed kind names: the indexes' condition.

    Not ``kind IN (...)``: SQLite evaluates an index's condition on every
    INSERT, and builds a temporary table for an IN list of more than two
    values each time, which cost every append a third of its INSERT.
    """
    return "(" + " OR ".join(f"kind = '{kind}'" for kind in kinds) + ")"


def index_sql() -> list[tuple[str, str]]:
    """``(name, CREATE INDEX ...)`` for each read index (fixed names and kinds: nothing to bind)."""
    # Raw SQL: sqlite-utils makes neither an index on an expression nor a partial one.
    return [(name, f"CREATE INDEX IF NOT EXISTS {name} ON events ({expression}) "
                   f"WHERE {any_kind(kinds)}") for name, expression, kinds in INDEXES]


def _create(conn: sqlite3.Connection, *names: str, if_not_exists: bool = False) -> None:
    """Make the tables *names* of :data:`TABLES` (inside the caller's transaction, if any)."""
    # Imported here, where a schema is made: every other process (one
    # opening an existing root, `sessiontemp run`, journal-inspect) is
    # spared a quarter of the package's import.
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    for name in names:
        columns, pk, not_null = TABLES[name]
        db.table(name).create(columns, pk=pk, not_null=set(not_null),
                              if_not_exists=if_not_exists)


def create_file(conn: sqlite3.Connection, *, base: int, segment: bool,
                indexes: Sequence[str] = ()) -> None:
    """Make a new journal file's schema: its events, starting after *base*, and checkpoints.

    *segment*: with the segment tables (a rollover's new file), and then
    *indexes*, made while the file is empty.  The head gets its segment
    tables with the first rollover, and its read indexes at the open.
    """
    _create(conn, "events")
    for sql in _TRIGGERS:
        conn.execute(sql.format(base=int(base)))
    _create(conn, "checkpoints")
    if segment:
        _create(conn, *_SEGMENT_TABLES)
        for sql in indexes:
            conn.execute(sql)


def add_segment_tables(conn: sqlite3.Connection) -> None:
    """Add the segment tables to the head, at its first rollover (an empty sealed may exist)."""
    _create(conn, *_SEGMENT_TABLES, if_not_exists=True)


def header(conn: sqlite3.Connection) -> tuple[int, int, bool]:
    """The application id, the schema version and whether any table exists.

    Read at one moment: another process may be creating the schema, and
    tables seen without the version it commits with them would look like
    another program's database.
    """
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    finally:
        if own and conn.in_transaction:
            conn.execute("COMMIT")
    return int(app_id), int(version), bool(tables)


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the file of *conn* has table *name* (a look, at an open: no sqlite-utils)."""
    return bool(conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()[0])


def missing_indexes(conn: sqlite3.Connection) -> list[str]:
    """The read indexes and ``sealed`` table a file being written lacks, or has otherwise.

    Read from ``sqlite_master`` as SQL: what makes an index usable is its
    condition, which sqlite-utils' view of indexes does not show.
    """
    present = dict(conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'table')").fetchall())
    missing = [name for name, _, kinds in INDEXES if name not in present or (
        not str(present[name]).endswith(any_kind(kinds)))]
    if "sealed" not in present:
        missing.append("sealed")
    return missing


def add_indexes(conn: sqlite3.Connection) -> None:
    """Add the read indexes and an empty ``sealed`` table to a new head (in its transaction)."""
    for _name, sql in index_sql():
        conn.execute(sql)
    # After the indexes: a new file's first pages are laid out as they always were.
    _create(conn, "sealed", if_not_exists=True)
