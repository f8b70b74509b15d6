"""A manager's space limits, checked, and the refusals they make, worded.

``max_bytes`` and ``max_inodes`` bound what the session's current
directory may hold; ``min_free_bytes`` what its root's file system keeps
free (None: :func:`sessiontemp.space.disk.default_min_free`); ``measure_every``
how often, at most, the directory is measured.  A budget fails closed:
once a measurement finds the directory over it, the next acquire is
refused with :class:`~sessiontemp.OverBudget`.  A command that is running
is never killed, stopped or touched: only new ones are refused, with a
message that says what is big and what to do.

Everything here is pure: checking values, comparing a measurement with a
budget, wording the two errors.  A refusal's fix names each limit as the
person who set it wrote it, with its value (:class:`Surface`):
``max_bytes=1048576`` for a Python caller, ``--max-bytes 1M`` on
``sessiontemp run``'s command line, ``--sessiontemp-max-bytes 1M`` for the
pytest plugin.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Final

import attrs

from sessiontemp.journal.errors import BadInput, JournalFull, LowDisk, OverBudget
from sessiontemp.journal.reducer import GenerationState
from sessiontemp.space import disk, sizes
from sessiontemp.space.usage import Usage, human

__all__ = ["DEFAULT_MEASURE_EVERY", "PYTEST", "PYTHON", "RUN", "Limits", "Surface",
           "check_limits", "described", "low_disk", "over", "over_budget", "over_generation"]

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
        raise BadInput(name, f"must be a whole number of at least 0, or None, not {value!r}",
                       "Pass a count, or None for no limit")
    if value < 0:
        raise BadInput(name, f"must be at least 0, not {value}",
                       "Pass a count, or None for no limit")
    return value


def check_limits(max_bytes: object, max_inodes: object, min_free_bytes: object,
                 measure_every: object) -> Limits:
    """The limits, checked: BadInput naming the first negative, NaN, bool or non-number."""
    if isinstance(measure_every, bool) or not isinstance(measure_every, (int, float)) or (
        math.isnan(measure_every) or measure_every < 0
    ):
        raise BadInput("measure_every", f"must be a number of seconds of at least 0 (inf: "
                       f"never on its own), not {measure_every!r}",
                       "Pass a number of seconds, such as 30")
    return Limits(_count("max_bytes", max_bytes), _count("max_inodes", max_inodes),
                  _count("min_free_bytes", min_free_bytes), float(measure_every))


def over(limits: Limits, size: int | None, inodes: int | None) -> bool:
    """Whether a measurement of *size* bytes and *inodes* inodes exceeds *limits*' budget."""
    return (limits.max_bytes is not None and size is not None and size > limits.max_bytes) or (
        limits.max_inodes is not None and inodes is not None and inodes > limits.max_inodes)


def over_generation(limits: Limits, generation: GenerationState) -> bool:
    """Whether *generation*'s last measurement is over *limits*' budget."""
    return over(limits, generation.measured_bytes, generation.measured_inodes)


@attrs.frozen
class Surface:
    """Where the limits were set, as a refusal's fix names them and what else to do there.

    *remedy* comes first in the fix, then "or raise the budget (given:
    ...)" naming each limit it is over with its value, then *after*.  *options*
    maps a limit (``max_bytes``) to the command-line option that sets it
    (``--max-bytes``), spelled as the option reads it back (``1M``);
    without one, a limit is named as the keyword it is (``max_bytes=1048576``).
    """

    remedy: str
    options: tuple[tuple[str, str], ...] = ()
    after: str = ""

    def setting(self, limit: str, value: int) -> str:
        """*limit* set to *value*, as it was written on this surface."""
        option = dict(self.options).get(limit)
        if option is None:
            return f"{limit}={value}"
        return f"{option} {sizes.spelled(value)}"


PYTHON: Final = Surface(
    "Rotate (manager.rotate()) to start the next command in a fresh directory, "
    "remove files from this one (then manager.measure())",
    after="; commands running in it are not touched")
RUN: Final = Surface(
    "Have the command leave less in its directory ($TMPDIR)",
    (("max_bytes", "--max-bytes"), ("max_inodes", "--max-inodes"),
     ("min_free_bytes", "--min-free-bytes")),
    after="; the command ran to its end, and nothing was stopped")
PYTEST: Final = Surface(
    "Have the test leave less in its directory",
    (("max_bytes", "--sessiontemp-max-bytes"), ("max_inodes", "--sessiontemp-max-inodes")))


def _inodes(count: int) -> str:
    return f"{count:,} inode" + ("" if count == 1 else "s")


def over_budget(limits: Limits, usage: Usage, surface: Surface = PYTHON) -> OverBudget:
    """The refusal of a directory whose measurement *usage* is over *limits*' budget.

    It names what the directory holds against each budget set, and what
    takes the most of each budget it is over: its largest entries for
    bytes, the entries holding the most inodes for inodes (a subdirectory
    counts itself and everything under it).  *surface* is where the
    limits were set (:data:`PYTHON`, :data:`RUN`, :data:`PYTEST`).
    """
    bytes_over = limits.max_bytes is not None and usage.bytes > limits.max_bytes
    inodes_over = limits.max_inodes is not None and usage.inodes > limits.max_inodes
    parts, raised = [], []
    if limits.max_bytes is not None:
        parts.append(f"{human(usage.bytes)} of a {human(limits.max_bytes)} budget")
        if bytes_over or not inodes_over:
            raised.append(surface.setting("max_bytes", limits.max_bytes))
    if limits.max_inodes is not None:
        parts.append(f"{_inodes(usage.inodes)} of {limits.max_inodes:,}")
        if inodes_over or not bytes_over:
            raised.append(surface.setting("max_inodes", limits.max_inodes))
    unread = (f" ({usage.unread_count} entries could not be read, so it holds at least "
              "this)") if usage.unread_count else ""
    if not usage.largest and not usage.unread_count:
        # An empty directory takes a block (and an inode) of its own, counted
        # as `du -s` counts it: over a budget smaller than that, it says so.
        named = ("it is empty: what it holds is the directory's own entry, counted as "
                 "`du -s` counts it")
    else:
        named = "; ".join(
            ([f"its largest entries: {usage.describe_largest()}"]
             if bytes_over or not inodes_over else [])
            + (["the entries holding the most inodes: " + ", ".join(
                f"{name} ({_inodes(count)})" for name, count in usage.most_inodes)]
               if inodes_over else []))
    reason = f"it holds {' and '.join(parts)}{unread}; {named}"
    fix = f"{surface.remedy}, or raise the budget (given: {', '.join(raised)}){surface.after}"
    return OverBudget(usage.path, reason, fix, bytes=usage.bytes, inodes=usage.inodes,
                      max_bytes=limits.max_bytes, max_inodes=limits.max_inodes,
                      largest=usage.largest)


def low_disk(root: os.PathLike[str] | str, free: int, floor: int,
             largest: Sequence[tuple[os.PathLike[str] | str, int]],
             surface: Surface = PYTHON) -> LowDisk:
    """The refusal on a file system with *free* bytes left, below *floor*.

    *largest* names the biggest live directories under the root, as last
    measured, largest first; *surface* is where the floor was set.
    """
    named = ", ".join(f"{os.fspath(path)} ({human(size)})" for path, size in largest) or (
        "none measured yet")
    reason = (f"its file system has {human(free)} free, less than the {human(floor)} "
              f"kept free ({surface.setting('min_free_bytes', floor)}); the largest "
              f"directories under it: {named}")
    fix = ("Free space (remove what is big, or rotate and close sessions that are done), "
           "pass a root on a larger file system, or lower the floor "
           f"({surface.setting('min_free_bytes', 0)} turns it off); see "
           "`journal-inspect --root ROOT usage`")
    return LowDisk(root, reason, fix, free_bytes=free, min_free_bytes=floor,
                   largest=tuple((os.fspath(path), size) for path, size in largest))


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
