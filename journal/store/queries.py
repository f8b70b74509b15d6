"""The named reads: each answers one question about the kept history with one query.

So no reader outside the store writes SQL over the payload format.  Two of
them (:meth:`Queries.generation_rows`, :meth:`Queries.manager_ends`) read
through the partial indexes of :data:`sessiontemp.journal.store.schema.INDEXES`, so
their cost follows the rows found, not the journal's length.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Final

from ..errors import RuleViolation
from ..events import Record, decode
from . import errors, schema
from .reading import Reader

__all__ = ["IDS_PER_QUERY", "Queries"]

# Ids per query: well below SQLite's limit on host parameters.
IDS_PER_QUERY: Final = 500


class Queries:
    """The named reads of a :class:`~sessiontemp.journal.store.Store`, one of the classes it
    is made of: their path and :class:`.reading.Reader` are the store's."""

    path: Path
    _reader: Reader

    def extent(self) -> tuple[int | None, int | None, int]:
        """``(first seq, last seq, count)`` of the events; ``(None, None, 0)`` when empty."""
        ((first, last, count),) = self._reader.query(
            "SELECT min(seq), max(seq), count(*) FROM events")
        return first, last, int(count)

    def times_of(self, seqs: Collection[int]) -> dict[int, float]:
        """The time of each event in *seqs* that exists, by seq."""
        wanted = sorted(set(seqs))
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        return dict(self._reader.query(
            f"SELECT seq, time FROM events WHERE seq IN ({marks})",  # noqa: S608 (placeholders)
            tuple(wanted)))

    def seq_at(self, time: float) -> int:
        """The newest event written at or before *time*, 0 when none was."""
        ((found,),) = self._reader.query("SELECT max(seq) FROM events WHERE time <= ?", (time,))
        return int(found or 0)

    def kind_counts(self, *, excluding: Collection[str] = ()) -> dict[str, int]:
        """How many events there are of each kind stored (known to this version or not),
        leaving out *excluding*: grouping fewer rows is what makes it fast."""
        marks = ",".join("?" * len(excluding))
        return {kind: int(n) for kind, n in self._reader.query(
            f"SELECT kind, count(*) FROM events WHERE kind NOT IN ({marks}) "  # noqa: S608
            "GROUP BY kind", tuple(excluding))}

    def generation_count(self) -> int:
        """How many distinct generations were created or found (as strays) and removed."""
        ((n,),) = self._reader.query(
            "SELECT count(DISTINCT json_extract(payload, '$.generation')) FROM events "
            "WHERE kind IN ('generation.created', 'removal.started')")
        return int(n)

    def generation_rows(
        self, generations: Collection[str], *, until: int | None = None,
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows of the life of *generations*, in order.

        Their creation, readiness, commands, removals and reappearances: every
        record whose ``generation`` field names one of them, except leases
        (which a finished generation no longer has).  Up to *until* when
        given.  Read through an index, so its cost follows the rows found,
        not the journal's length.
        """
        yield from self._by_id(0, generations, until)

    def manager_ends(self, managers: Collection[str]) -> dict[str, int]:
        """The seq of the close or death of each of *managers* the journal has ended."""
        ends: dict[str, int] = {}
        for seq, _when, kind, payload in self._by_id(1, managers, None):
            if kind != "manager.opened":
                try:
                    ended = json.loads(payload)["manager"]
                except (ValueError, TypeError, KeyError):
                    continue
                ends.setdefault(str(ended), int(seq))
        return ends

    def _by_id(self, index: int, ids: Collection[str], until: int | None
               ) -> Iterator[tuple[int, float, str, str]]:
        """Rows whose indexed field (of ``schema.INDEXES[index]``) is one of *ids*, in order."""
        _name, expression, kinds = schema.INDEXES[index]
        wanted = sorted(set(ids))
        chunks = [wanted[i:i + IDS_PER_QUERY] for i in range(0, len(wanted), IDS_PER_QUERY)]
        rows: list[tuple[int, float, str, str]] = []
        for chunk in chunks:
            # The expression and kind condition exactly as the index has
            # them, so that SQLite uses it; every id is a parameter.
            clauses = [f"{expression} IN ({','.join('?' * len(chunk))})", schema.any_kind(kinds)]
            params: list[object] = list(chunk)
            if until is not None:
                clauses.append("seq <= ?")
                params.append(until)
            rows.extend(self._select(clauses, params))
        if len(chunks) > 1:
            rows.sort()
        yield from rows

    def rows_naming(
        self, values: Collection[str], *, after: int = 0, kinds: Collection[str] = (),
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows after *after* whose payload holds one of
        *values* as a string, in order; of *kinds* only, when given.

        A superset: a value may stand in any field, so callers decode each
        row and keep those naming it where they look.  More than 50 values
        read every row after *after*.
        """
        clauses = ["seq > ?"]
        params: list[object] = [after]
        if kinds:
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})")
            params += list(kinds)
        if len(values) <= 50:
            # instr() on the JSON string form finds the few candidate rows in C.
            clauses.append("(" + " OR ".join(["instr(payload, ?) > 0"] * len(values)) + ")")
            params += [json.dumps(v) for v in values]
        yield from self._select(clauses, params)

    def rows_where(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        since_time: float | None = None,
        until_time: float | None = None,
        kinds: Collection[str] = (),
        naming: Collection[str] = (),
    ) -> Iterator[tuple[int, float, str, str]]:
        """Raw ``(seq, time, kind, payload)`` rows after seq *after*, in order, that are at
        most *until*, written in ``[since_time, until_time]``, of one of *kinds* and whose
        payload holds every one of *naming* as a string (a superset: decode to be sure)."""
        clauses = ["seq > ?"]
        params: list[object] = [after]
        for clause, value in (("seq <= ?", until), ("time >= ?", since_time),
                              ("time <= ?", until_time)):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        if kinds:
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})")
            params += list(kinds)
        for name in naming:
            clauses.append("instr(payload, ?) > 0")
            params.append(json.dumps(name))
        yield from self._select(clauses, params)

    def _select(self, clauses: list[str], params: list[object], batch: int = 20_000
                ) -> Iterator[tuple[int, float, str, str]]:
        # Only fixed clauses with placeholders are joined: every value is a parameter.
        sql = ("SELECT seq, time, kind, payload FROM events WHERE "  # noqa: S608
               + " AND ".join(clauses) + " ORDER BY seq")
        return self._reader.stream(sql, tuple(params), batch)

    def records_of(self, kinds: Collection[str], *, until: int | None = None
                   ) -> Iterator[Record]:
        """Decoded records of *kinds* up to *until*, in order.

        Raises :class:`JournalCorrupt` for one that does not decode.
        """
        for seq, time, kind, payload in self.rows_where(until=until, kinds=kinds):
            try:
                yield Record(seq, time, decode(seq, kind, payload))
            except RuleViolation as e:
                raise errors.corrupt(self.path, e) from e
