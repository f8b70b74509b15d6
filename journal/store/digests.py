"""The digest chain: each record's digest covers its predecessor's, and its check.

A changed, removed or reordered record breaks the chain from there on, which
is what :meth:`sessiontemp.journal.store.Store.verify` reports.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

__all__ = ["GENESIS", "chain", "check"]

# The digest the first event chains from.
GENESIS: Final = bytes(16)
_blake2b: Final = hashlib.blake2b


def chain(previous: bytes, seq: int, time: float, kind: str, payload: str) -> bytes:
    """The digest of one record, linking it to the digest of the one before."""
    return _blake2b(previous + f"{seq}\x1f{time!r}\x1f{kind}\x1f{payload}".encode(),
                    digest_size=16).digest()


def check(rows: Iterable[tuple[int, float, str, str, bytes]], *, first: int,
          digest: bytes, problems: list[str]) -> list[str]:
    """Add to *problems* those of the sequence and the chain of *rows*, which start at *first*.

    *digest*: that of the event before *first* (:data:`GENESIS` for event 1).
    Each is added as found: what was found before an error reading *rows*
    stays in *problems*.
    """
    expected_seq = first
    for seq, time, kind, payload, stored in rows:
        if seq != expected_seq:
            problems.append(f"sequence: expected event {expected_seq}, found {seq}")
        digest = chain(digest, seq, time, kind, payload)
        if stored != digest:
            problems.append(f"event {seq}: digest does not match its predecessors")
            digest = stored
        expected_seq = seq + 1
    return problems
