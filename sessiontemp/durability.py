"""Durability, under the manager's package: :mod:`journal.durability`, which the ledger applies."""

from __future__ import annotations

from sessiontemp.journal.durability import DURABILITY, Durability, check, synced

__all__ = ["DURABILITY", "Durability", "check", "synced"]
