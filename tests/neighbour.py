"""Another process on the same root, stepping in between two steps of an operation.

A :class:`Neighbour` is a real process (``tests/faultchild.py`` in
``neighbour`` mode, forked from the zygote) that the test tells what to do
and waits for: roll the journal over at a checkpoint and retire every
sealed segment (:meth:`Neighbour.interleave`, ``Retention(0, 0, 0)``), or
one of those moves alone (:meth:`Neighbour.move`: a checkpoint that rolls
nothing over, a retirement of what an earlier rollover sealed, a
long-lived manager's maintenance, a whole recovery pass), or take the
journal's write lock and keep it (:meth:`Neighbour.hold`) until told to
let go.  :func:`stepping_in` and :func:`holding_the_journal` make
step actions of them (:mod:`tests.faults`): the operation stops just
before one of its durable steps, the neighbour acts, and the operation
carries on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeAlias

from sessiontemp._guards.steps import StepKind
from tests.faults import Action
from tests.test_faults import Child

__all__ = ["MANAGER_STEPS", "MOVES", "Move", "Neighbour", "deleted_descriptors",
           "holding_the_journal", "stepping_in"]

# The steps of a manager's operations, between which another process may act.
# Not the store's own ("segment": inside a write transaction of this
# process, where the neighbour would wait for the lock held here) nor a
# recovery pass's checkpoint (written in such a transaction too).
MANAGER_STEPS: frozenset[StepKind] = frozenset(
    {"journal", "lock", "unlock", "mkdir", "rename", "rmdir", "copy", "unlink"})

# What another process may do between two steps of an operation, one thing at a
# time (``rollover`` is :meth:`Neighbour.interleave`: checkpoint, rollover and
# retirement at once):
#   checkpoint  a checkpoint of the whole journal, no rollover, nothing retired;
#   retire      every sealed segment a checkpoint covers deleted, nothing written
#               (the test has the neighbour seal one first: :meth:`Neighbour.seal`);
#   maintain    a long-lived manager's maintenance (checkpoint, rollover, retirement);
#   recover     a whole recovery pass (dead managers buried, their directories removed).
Move: TypeAlias = Literal["rollover", "checkpoint", "retire", "maintain", "recover"]
MOVES: tuple[Move, ...] = ("rollover", "checkpoint", "retire", "maintain", "recover")


class Neighbour(Child):
    """A faultchild neighbour process, with the interleavings it performs."""

    def __init__(self) -> None:
        super().__init__("neighbour", "-")
        self.read("starting")
        self.holding = False
        self.interleaved = 0
        self.retired = 0
        # Managers a recovery pass of the neighbour's found dead.
        self.buried = 0

    def interleave(self, root: Path) -> dict[str, Any]:
        """Checkpoint, roll over, and retire every sealed segment (unless a pass holds the root)."""
        done = self.ask("interleave", str(root))
        assert "error" not in done, done
        self.interleaved += 1
        self.retired += len(done["retired"])
        return done

    def seal(self, root: Path) -> None:
        """Checkpoint and roll over, retiring nothing: a sealed segment for a later retirement."""
        done = self.ask("seal", str(root))
        assert "error" not in done, done

    def move(self, how: Move, root: Path) -> dict[str, Any]:
        """Do *how* on *root* now (see :data:`Move`)."""
        if how == "rollover":
            return self.interleave(root)
        command = {"checkpoint": "checkpoint", "retire": "retire-sealed",
                   "maintain": "maintenance", "recover": "recover"}[how]
        done = self.ask(command, str(root))
        assert "error" not in done, done
        self.interleaved += 1
        self.retired += len(done.get("retired", ()))
        self.buried += len(done.get("dead", ()))
        return done

    def hold(self, root: Path) -> None:
        """Take the write lock of *root*'s journal and keep it until :meth:`let_go`."""
        assert "holding" in self.ask("hold", str(root))
        self.holding = True

    def let_go(self) -> None:
        if self.holding:
            self.ask("let-go")
            self.holding = False


def stepping_in(act: Callable[[], object]) -> Action:
    """A step action: *act* (the neighbour's move) runs there, at a manager's step only."""
    def step(kind: StepKind, detail: str) -> None:
        if kind in MANAGER_STEPS:
            act()

    return step


def holding_the_journal(neighbour: Neighbour, root: Path) -> Action:
    """A step action: from there on the neighbour holds the journal's write lock."""
    return stepping_in(lambda: neighbour.hold(root))


def deleted_descriptors(root: Path) -> list[str]:
    """This process's descriptors to files of *root* that were deleted ("... (deleted)").

    A retired segment's file is deleted: a connection still open to it holds
    its blocks.  Only the root's files count: SQLite's own temporary files
    (in /tmp, unlinked at once by design) are not the journal's.
    """
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{root}/") and target.endswith(" (deleted)"):
                found.append(target)
    return found
