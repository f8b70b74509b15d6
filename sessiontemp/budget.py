"""A manager's space limits, checked, and the refusals they make, worded.

``max_bytes`` and ``max_inodes`` bound what the session's current
directory may hold; ``min_free_bytes`` what its root's file system keeps
free (None: :func:`sessiontemp.disk.default_min_free`); ``measure_every``
how often, at most, the directory is measured.  A budget fails closed:
once a measurement finds the directory over it, the next acquire is
refused with :class:`~sessiontemp.OverBudget`.  A command that is running
is never killed, stopped or touched: only new ones are refused, with a
message that says what is big and what to do.

Everything here is pure: checking values, comparing a measurement with a
budget, wording the two errors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from sessiontemp import disk
from sessiontemp.journal.errors import JournalFull, LowDisk, OverBudget
from sessiontemp.journal.reducer import GenerationState
from sessiontemp.usage import Usage, human

__all__ = ["DEFAULT_MEASURE_EVERY", "Limits", "check_limits", "described", "low_disk", "over",
           "over_budget", "over_generation"]

DEFAULT_MEASURE_EVERY: Final = 30.0


@attrs.frozen
class Limits:
    """What a manager was given: budgets (None: none), the free-space floor, the pace."""

    max_bytes: int | None = None
    max_inodes: int | None = None
    min_free_bytes: int | None = None
    measure_every: float = DEFAULT_MEASURE_EVERY

    @property
    def budgeted(self) -> bool:
        return self.max_bytes is not None or self.max_inodes is not None


def _count(name: str, value: object) -> int | None:
    # bool is an int to Python, and True bytes is never what was meant.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number of at least 0, or None, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be at least 0, not {value}")
    return value


def check_limits(max_bytes: object, max_inodes: object, min_free_bytes: object,
                 measure_every: object) -> Limits:
    """The limits, checked: ValueError naming the first negative, NaN, bool or non-number."""
    if isinstance(measure_every, bool) or not isinstance(measure_every, (int, float)) or (
        math.isnan(measure_every) or measure_every < 0
    ):
        raise ValueError(f"measure_every must be a number of seconds of at least 0 (inf: "
                         f"never on its own), not {measure_every!r}")
    return Limits(_count("max_bytes", max_bytes), _count("max_inodes", max_inodes),
                  _count("min_free_bytes", min_free_bytes), float(measure_every))


def over(limits: Limits, size: int | None, inodes: int | None) -> bool:
    """Whether a measurement of *size* bytes and *inodes* inodes exceeds *limits*' budget."""
    return (limits.max_bytes is not None and size is not None and size > limits.max_bytes) or (
        limits.max_inodes is not None and inodes is not None and inodes > limits.max_inodes)


def over_generation(limits: Limits, generation: GenerationState) -> bool:
    """Whether *generation*'s last measurement is over *limits*' budget."""
    return over(limits, generation.measured_bytes, generation.measured_inodes)


def over_budget(limits: Limits, usage: Usage) -> OverBudget:
    """The refusal of a directory whose measurement *usage* is over *limits*' budget."""
    parts = []
    if limits.max_bytes is not None:
        parts.append(f"{human(usage.bytes)} of a {human(limits.max_bytes)} budget")
    if limits.max_inodes is not None:
        parts.append(f"{usage.inodes} inodes of {limits.max_inodes}")
    unread = (f" ({usage.unread_count} entries could not be read, so it holds at least "
              "this)") if usage.unread_count else ""
    reason = (f"it holds {' and '.join(parts)}{unread}; its largest entries: "
              f"{usage.describe_largest()}")
    fix = ("Rotate (manager.rotate()) to start the next command in a fresh directory, "
           "remove files from this one (then manager.measure()), or raise the budget "
           "(max_bytes=, max_inodes=); commands running in it are not touched")
    return OverBudget(usage.path, reason, fix, bytes=usage.bytes, inodes=usage.inodes,
                      max_bytes=limits.max_bytes, max_inodes=limits.max_inodes,
                      largest=usage.largest)


def low_disk(root: os.PathLike[str] | str, free: int, floor: int,
             largest: Sequence[tuple[Path, int]]) -> LowDisk:
    """The refusal on a file system with *free* bytes left, below *floor*.

    *largest* names the biggest live directories under the root, as last
    measured, largest first.
    """
    named = ", ".join(f"{path} ({human(size)})" for path, size in largest) or (
        "none measured yet")
    reason = (f"its file system has {human(free)} free, less than the {human(floor)} "
              f"kept free (min_free_bytes); the largest directories under it: {named}")
    fix = ("Free space (remove what is big, or rotate and close sessions that are done), "
           "pass a root on a larger file system, or lower min_free_bytes; see "
           "`journal-inspect --root ROOT usage`")
    return LowDisk(root, reason, fix, free_bytes=free, min_free_bytes=floor)


def journal_full(root: os.PathLike[str] | str, fd: int, min_free_bytes: int | None,
                 error: JournalFull) -> LowDisk:
    """The refusal of a manager whose journal could not be opened on the full file system of
    the root *root* (open as *fd*), keeping *min_free_bytes* free (None: the default).

    A :class:`LowDisk`, as any refusal for space: no directory is handed out,
    and ``sessiontemp run`` exits 75 (try again once space is freed).
    """
    try:
        space = disk.space_of(fd)
    except OSError:
        space = disk.Space(0, 0, 0)
    floor = disk.default_min_free(space.total) if min_free_bytes is None else min_free_bytes
    reason = (f"its file system has {human(space.free)} free, too little for the journal to "
              f"be opened even with the reserve's blocks ({error.reason})")
    fix = ("Free space (remove what is big; `sessiontemp recover` removes what killed runs "
           "left), or pass a root on a larger file system; nothing already committed was "
           "lost")
    return LowDisk(root, reason, fix, free_bytes=space.free, min_free_bytes=floor)


def described(cause: str, found: int, limit: int) -> str:
    """Why a journaled refusal (``space.refused``) was made, in words, for the inspector."""
    if cause == "max_bytes":
        return f"the directory held {human(found)}, over its budget of {human(limit)} (max_bytes)"
    if cause == "max_inodes":
        return f"the directory held {found:,} inodes, over its budget of {limit:,} (max_inodes)"
    return (f"the root's file system had {human(found)} free, less than the {human(limit)} "
            "kept free (min_free_bytes)")
