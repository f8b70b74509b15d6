"""The append-only SQLite journal that holds the events, behind one :class:`Store`.

The package is split by concept; callers use only what this module exports.
:mod:`sessiontemp.journal.store.facade` is the :class:`Store` itself, which composes the
others.
"""

from __future__ import annotations

from .facade import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    SEGMENTED_VERSION,
    History,
    Keeper,
    Pending,
    SegmentInfo,
    Settle,
    Store,
    chain,
)

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SEGMENTED_VERSION", "History", "Keeper",
           "Pending", "SegmentInfo", "Settle", "Store", "chain"]
