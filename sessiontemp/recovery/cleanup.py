"""Clean-up on request: the public calls that run one recovery pass over a root.

:func:`recover`, :func:`remove_artifact` and :func:`remove_session` are what
a program (or ``sessiontemp recover``, or ``journal-inspect fsck --repair``)
calls on a root no manager of its own has open.  Each is one recovery pass
(:mod:`sessiontemp.recovery.passes`) asked to do a little more: nothing, remove an
artifact, or discard what a named session left.  They share one sequence,
:func:`_pass_over`: open the root without creating it, check its journal,
open a store, run the pass, close all of it.

This module sits above :mod:`sessiontemp.recovery.passes`,
:mod:`sessiontemp.artifacts` and :mod:`sessiontemp.sessions`, which never
import it: the pass uses the artifact store and the session lock, and the
calls that start a pass use the pass.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Sequence

from sessiontemp._guards.steps import StepHook, Steps
from sessiontemp._kernel import resources
from sessiontemp._kernel.root import Root
from sessiontemp.artifacts import ON_REQUEST, Artifact, id_of
from sessiontemp.journal import ids
from sessiontemp.journal.errors import BadInput
from sessiontemp.journal.segments import DEFAULT_RETENTION, Retention
from sessiontemp.journal.store import Store
from sessiontemp.recovery import passes as recovery
from sessiontemp.recovery.passes import DEFAULT_STALE_AFTER, Report, check_stale_after
from sessiontemp.sessions import Claim, SessionLock, check_name
from sessiontemp.space import reserve

__all__ = ["recover", "recover_async", "remove_artifact", "remove_artifact_async",
           "remove_session", "remove_session_async"]


def recover(
    root: os.PathLike[str] | str | None = None,
    *,
    stale_after: float = DEFAULT_STALE_AFTER,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
    retention: Retention = DEFAULT_RETENTION,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Run one recovery pass on *root* (None: the per-user default), waiting for any other.

    *retention* bounds the journal: how large a segment grows and how much
    retired history is kept (see :class:`sessiontemp.journal.segments.Retention`).
    *progress* is called with (directories handled, directories to remove)
    as the pass works through the generations it found orphaned.
    A root that does not exist is never created, nor is a directory that
    holds nothing of a root's (no journal, no entry of the layout) made one:
    :class:`~sessiontemp.NoSuchRoot`, and nothing is written (a mistyped
    path must not leave a new root behind).
    """
    check_stale_after(stale_after)
    # Out of descriptors part-way, the pass stops where it was, as one
    # that failed at a step: the next pass finishes it.
    return _pass_over(root, "the recovery pass stopped", stale_after=stale_after, clock=clock,
                      busy_timeout=busy_timeout, step_hook=step_hook, retention=retention,
                      progress=progress)


def remove_artifact(
    root: os.PathLike[str] | str | None,
    artifact: Artifact | str,
    *,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
) -> bool:
    """Remove a kept artifact (an :class:`Artifact` or its id) from *root*, journaled.

    The removal is journaled (``artifact.removed``) before the file is
    unlinked, by a recovery pass that also does whatever else a pass does.
    An id the journal keeps no artifact of removes the store's file of
    that id if there is one (``journal-inspect fsck`` lists such files as
    ``unreferenced``): it is no artifact of the journal's, so nothing is
    journaled, and a file a keeper still holds (being copied and
    recorded right now) is left.  Returns whether a file was removed:
    False when there was none (already removed, or never kept).  Raises
    :class:`~sessiontemp.NoSuchRoot` for a root that does not exist or was never one
    (nothing is created or written).
    *step_hook* sees every durable step, as a Manager's does.
    """
    artifact_id = artifact.id if isinstance(artifact, Artifact) else artifact
    if not isinstance(artifact_id, str) or not ids.ARTIFACT.fullmatch(artifact_id):
        raise BadInput(repr(artifact_id), "is not an artifact id (16 lower-case hex digits)",
                       "Pass the Artifact lease.keep returned, or its id")
    report = _pass_over(root, f"artifact {artifact_id} could not be removed", clock=clock,
                        busy_timeout=busy_timeout, step_hook=step_hook,
                        remove_artifacts=(artifact_id,))
    return any(id_of(removed.path.name) == artifact_id
               and removed.reason.startswith(ON_REQUEST) for removed in report.removed)


def remove_session(
    root: os.PathLike[str] | str | None,
    name: str,
    *,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
) -> Report:
    """Remove what named session *name* left under *root*, journaled; refused while it is owned.

    Raises :class:`SessionOwned` (naming the owner's pid) while a live
    manager holds the session.  Otherwise the generation its dead owner
    left for a resume is discarded and, with every other directory of its
    ended owners that no command holds, removed by a recovery pass; the
    pass's report says what was removed and what a running command still
    holds (removed by a later pass, once the command exits).  Artifacts are
    kept: they go only by :func:`sessiontemp.remove_artifact`.  Raises
    :class:`~sessiontemp.NoSuchRoot` for a root that does not exist or was never one
    (nothing is created or written).
    *step_hook* sees every durable step, as :class:`~sessiontemp.Manager`'s does.
    """
    check_name(name)
    # Out of descriptors part-way, nothing is left half done that the
    # next call (or recovery) does not finish.
    return _pass_over(root, f"session {name!r} could not be removed", clock=clock,
                      busy_timeout=busy_timeout, step_hook=step_hook,
                      removing=Claim(name, resume=False,
                                     why="the session was removed (remove_session)"))


# -- asyncio -------------------------------------------------------------------------
# Each pass fsyncs commits, renames and removes whole trees: in a worker
# thread (sessiontemp._guards.aio, imported by the first await only), and seen
# through to the end when the awaiting task is cancelled, as every async
# form of the library is.

async def recover_async(
    root: os.PathLike[str] | str | None = None,
    *,
    stale_after: float = DEFAULT_STALE_AFTER,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
    retention: Retention = DEFAULT_RETENTION,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """:func:`recover` in a worker thread; cancelled meanwhile, the pass still ends, then raises."""
    from sessiontemp._guards import aio

    return await aio.complete(functools.partial(
        recover, root, stale_after=stale_after, clock=clock, busy_timeout=busy_timeout,
        step_hook=step_hook, retention=retention, progress=progress))


async def remove_artifact_async(
    root: os.PathLike[str] | str | None,
    artifact: Artifact | str,
    *,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
) -> bool:
    """:func:`remove_artifact` in a worker thread; cancelled meanwhile, it ends, then raises."""
    from sessiontemp._guards import aio

    return await aio.complete(functools.partial(
        remove_artifact, root, artifact, clock=clock, busy_timeout=busy_timeout,
        step_hook=step_hook))


async def remove_session_async(
    root: os.PathLike[str] | str | None,
    name: str,
    *,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
) -> Report:
    """:func:`remove_session` in a worker thread; cancelled meanwhile, it ends, then raises."""
    from sessiontemp._guards import aio

    return await aio.complete(functools.partial(
        remove_session, root, name, clock=clock, busy_timeout=busy_timeout,
        step_hook=step_hook))


def _pass_over(
    root: os.PathLike[str] | str | None,
    failure: str,
    *,
    clock: Callable[[], float],
    busy_timeout: float,
    step_hook: StepHook | None,
    stale_after: float = DEFAULT_STALE_AFTER,
    retention: Retention = DEFAULT_RETENTION,
    progress: Callable[[int, int], None] | None = None,
    remove_artifacts: Sequence[str] = (),
    removing: Claim | None = None,
) -> Report:
    """Open *root* (never creating it), check its journal, run one pass, close everything.

    A shortage of descriptors or memory inside is reported as *failure*,
    with the root's path.  With *removing*, the session's owner lock is
    held for the whole pass (:class:`SessionOwned` while a live owner has
    it) and its file unlinked once the pass has discarded what the
    session left.
    """
    with contextlib.ExitStack() as stack:
        # Unwound in reverse: the store, the session's lock, the shortage
        # translation, and the root last.
        opened = Root.open(root, create=False)
        stack.callback(opened.close)
        stack.enter_context(resources.translated(opened.path, failure))
        lock = None
        if removing is not None:
            lock = SessionLock.take(opened, removing.name)
            stack.callback(lock.close)
        opened.check_journal()
        steps = Steps(step_hook)
        # On a nearly full disk the journal's -shm and -wal are made of the
        # reserve's blocks, as the pass's records are (a pass frees space).
        reserve.make_room(opened.fd)
        store = Store(opened.journal_path, busy_timeout=busy_timeout, retention=retention,
                      step_hook=steps.before)
        stack.callback(store.close)
        report = recovery.run(opened, store, stale_after=stale_after, clock=clock, steps=steps,
                              wait=True, claim=removing, remove_artifacts=remove_artifacts,
                              progress=progress)
        if lock is not None:
            # Held still: a newcomer that opened the old file finds it unnamed.
            lock.unlink()
        return report
