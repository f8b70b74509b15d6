"""The keyword options a :class:`~sessiontemp.Manager` is opened with, named once.

:meth:`Manager.open_async <sessiontemp.Manager.open_async>` passes its options on
to ``Manager(...)`` unchanged; typed as this dict, a type checker holds a
misspelt or mistyped option there to the constructor's own signature.
A test compares the keys with the constructor's parameters, so the two
cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypedDict

from sessiontemp._guards.steps import StepHook
from sessiontemp.journal.durability import Durability
from sessiontemp.journal.segments import Retention
from sessiontemp.space.placement import Policy

__all__ = ["ManagerOptions"]


class ManagerOptions(TypedDict, total=False):
    """Every keyword option of ``Manager(root, ...)``; each is described there."""

    stale_after: float
    clock: Callable[[], float]
    busy_timeout: float
    step_hook: StepHook | None
    durability: Durability
    retention: Retention
    session: str | None
    resume: bool
    resume_window: float
    workdir: os.PathLike[str] | str | None
    workdir_policy: Policy
    max_bytes: int | None
    max_inodes: int | None
    min_free_bytes: int | None
    measure_every: float
