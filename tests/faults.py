"""Faults a process lives through, injected just before the library's durable steps.

:class:`Faults` is one step hook shared by every manager and recovery pass
of a test.  It does nothing until armed for the next operation; then it
fires once, just before the k-th durable step counted from the arming (or
the k-th step of one kind), and every later step proceeds as usual:

* :func:`raising` raises an exception there: an error like the journal
  store's own (:func:`store_error`: a full disk, a journal held by another
  process, a read-only journal) at a "journal" step, or a plain
  ``Exception`` at any step, which the process catches and carries on from;
* :func:`interrupting` delivers SIGINT to this process there, as a Ctrl-C
  would: the step itself still runs, and the KeyboardInterrupt surfaces
  wherever Python delivers it.

A process killed at a step is another matter: see ``FaultLayer`` in
``tests/test_crashpoints.py``.

:class:`Gate` is the step hook that parks a thread at a step until the test
lets it go: how an asyncio test cancels an operation half-way without a
sleep deciding the outcome.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeAlias

import attrs

from sessiontemp._guards.steps import StepKind
from sessiontemp.journal.errors import JournalBusy, JournalError, JournalFull, JournalReadOnly

__all__ = [
    "STORE_FAILURES",
    "Action",
    "Faults",
    "Gate",
    "Injected",
    "StoreFailure",
    "interrupting",
    "raising",
    "store_error",
]

Action: TypeAlias = Callable[[StepKind, str], None]
StoreFailure: TypeAlias = Literal["full", "busy", "readonly"]
STORE_FAILURES: tuple[StoreFailure, ...] = ("full", "busy", "readonly")


class Injected(Exception):
    """The plain exception raised at a step: something the process catches and lives on from."""


def store_error(failure: StoreFailure, journal: Path) -> JournalError:
    """The error the store raises for *failure*, with its path, reason and fix."""
    if failure == "full":
        return JournalFull(journal, "database or disk is full (SQLITE_FULL)",
                           "Free space on its file system; nothing committed is lost")
    if failure == "busy":
        return JournalBusy(journal, "another process held its write lock past busy_timeout",
                           "Retry once that process has finished its write")
    return JournalReadOnly(journal, "attempt to write a readonly database (SQLITE_READONLY)",
                           "Make the journal and its directory writable")


def raising(error: BaseException) -> Action:
    def act(kind: StepKind, detail: str) -> None:
        raise error

    return act


def interrupting(how: Literal["kill", "raise_signal"] = "kill") -> Action:
    """SIGINT to this process: ``kill`` as a terminal sends it, ``raise_signal`` to this thread."""
    def act(kind: StepKind, detail: str) -> None:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGINT)
        else:
            signal.raise_signal(signal.SIGINT)

    return act


@attrs.define
class Faults:
    """The step hook: disarmed, or armed to act once before the *at*-th step (of kind *only*)."""

    action: Action | None = None
    at: int = 0
    only: StepKind | None = None
    count: int = 0
    fired: tuple[StepKind, str] | None = None
    steps: int = 0

    def arm(self, action: Action, at: int = 1, only: StepKind | None = None) -> None:
        self.action, self.at, self.only = action, at, only
        self.count, self.fired, self.steps = 0, None, 0

    def disarm(self) -> tuple[StepKind, str] | None:
        """Stop; say where the fault fired, if it did."""
        self.action = None
        return self.fired

    def __call__(self, kind: StepKind, detail: str) -> None:
        if self.action is None:
            return
        self.steps += 1
        if self.fired is not None or (self.only is not None and kind != self.only):
            return
        self.count += 1
        if self.count == self.at:
            self.fired = (kind, detail)
            self.action(kind, detail)


class Gate:
    """A step hook that, once armed, parks the thread reaching step *kind* until opened.

    With *detail*, only a step whose detail contains it parks the thread.
    """

    def __init__(self, kind: StepKind, detail: str = "") -> None:
        self.kind = kind
        self.detail = detail
        self.armed = False
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __call__(self, kind: StepKind, detail: str) -> None:
        if self.armed and kind == self.kind and self.detail in detail:
            self.armed = False
            self.reached.set()
            if not self.opened.wait(60):
                raise AssertionError("the gate was never opened")
