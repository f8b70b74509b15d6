"""The durable steps of the library, named, and the hook that sees each one.

Every step that changes what survives a crash goes through :func:`Steps.before`
just before it happens: a journal commit, a mkdir, a rename, the removal of
one entry, a lock taken or given up, a checkpoint written, a journal segment
made, sealed or retired, a file copied.  In production the hook does nothing;
a test passes one that raises at the k-th step to fail the operation there,
or that stops the process there, to check what every crash point leaves
behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, TypeAlias

__all__ = ["STEP_KINDS", "StepHook", "Steps"]

StepKind: TypeAlias = Literal[
    "journal", "mkdir", "lock", "unlock", "rename", "unlink", "rmdir", "checkpoint", "segment",
    "copy",
]
STEP_KINDS: Final[tuple[StepKind, ...]] = (
    "journal", "mkdir", "lock", "unlock", "rename", "unlink", "rmdir", "checkpoint", "segment",
    "copy",
)
StepHook: TypeAlias = Callable[[StepKind, str], None]


class Steps:
    """Calls *hook* before each durable step; with no hook, costs one attribute test."""

    __slots__ = ("hook",)

    def __init__(self, hook: StepHook | None = None) -> None:
        self.hook = hook

    def before(self, kind: StepKind, detail: str) -> None:
        if self.hook is not None:
            self.hook(kind, detail)
