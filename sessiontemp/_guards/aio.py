"""asyncio: every blocking operation, run in a worker thread and seen through to the end.

Every manager operation may wait for the journal's write lock, fsync a
commit, make a directory or remove a whole tree; opening one also runs a
recovery pass.  None of that may run on an event loop, which would stall
every other task meanwhile.  So each runs in the loop's default executor.

A thread cannot be stopped part-way, so an await that simply gave up on
cancellation would return while the operation still ran: the caller could
not tell whether it had happened.  :func:`complete` holds a cancellation
until the operation has finished and raises it then: a retain, release,
rotation or close that was awaited has happened by the time the
cancellation reaches the caller.  An operation whose result the caller
would have to give back (a lease, a manager, a kept artifact) is undone
instead when the caller is cancelled before it gets it (:func:`undoable`):
the lease released, the manager closed, the artifact removed.  Each
caller hands in its own undo, so this module knows neither the manager
nor the lease: both import it, from inside their async methods.  Either way
nothing is left half done, and nothing is left that nobody holds.

When no worker thread can be started (the process is at its limit of
threads, or out of memory, or the loop's executor is shut down), the call
runs on the loop for once, blocking it meanwhile, rather than not at all.

This module, and asyncio with it, is loaded by the first async call only:
a program that never awaits the library never pays for importing asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar, cast

from sessiontemp._guards.log import logger

__all__ = ["Releasable", "acquire", "complete", "undoable"]

T = TypeVar("T")


class Releasable(Protocol):
    """What :func:`acquire` hands out: a lease, as this module sees it (never importing it)."""

    def release(self) -> None:
        """Give it back; later calls do nothing."""


R = TypeVar("R", bound=Releasable)


def _start(call: Callable[[], T]) -> asyncio.Future[T]:
    """Start *call* in a worker thread, or on the loop if none can be had: a future of its outcome.

    *call* runs once at most.  When no thread could be started, the
    executor has queued the call all the same, and the first worker it
    starts later would run it again after it ran here: each run first
    claims the call, and only the first claim runs it.
    """
    # As asyncio.to_thread does: the call sees the task's context variables
    # (structlog's bound context, for one).
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    claim = threading.Lock()

    def run() -> None:
        if not claim.acquire(blocking=False):
            return
        try:
            result = context.run(call)
        except BaseException as failure:
            # Whatever it raised is the awaiting task's to see, as from any await.
            _settle(loop, done, None, failure)
        else:
            _settle(loop, done, result, None)

    try:
        loop.run_in_executor(None, run)
    except RuntimeError as e:
        # No worker thread could be started (the process is at its limit of
        # threads, or out of memory) or the executor is shut down.  Run
        # here, on the loop, for once: a release that never ran would keep
        # its directory until the manager closes, and an acquire refused
        # for want of a thread would fail on a resource, not on the root.
        # Unless a worker already running took the call from the queue
        # meanwhile: it then settles the future as usual.
        if claim.acquire(blocking=False):
            logger.warning("asyncio.inline", reason=f"no worker thread for the call ({e}); it "
                           "ran on the event loop, which it blocked meanwhile")
            try:
                done.set_result(context.run(call))
            except (Exception, asyncio.CancelledError) as failure:
                done.set_exception(failure)
    return done


def _settle(loop: asyncio.AbstractEventLoop, done: asyncio.Future[T], result: T | None,
            failure: BaseException | None) -> None:
    """From a worker thread: give *done* the call's outcome, on the loop's thread."""
    def settle() -> None:
        if done.cancelled():
            return
        if failure is not None:
            done.set_exception(failure)
        else:
            done.set_result(cast(T, result))

    # A loop closed meanwhile has nobody left waiting for the outcome.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle)


async def _finish(future: asyncio.Future[T]) -> T:
    """Wait until *future* is done, however often the waiting task is cancelled meanwhile.

    The first cancellation is raised once the future is done, instead of
    its result or exception; asyncio.timeout and TaskGroup see it as usual.
    """
    interrupted: asyncio.CancelledError | None = None
    while not future.done():
        try:
            # asyncio.wait never cancels what it waits for, unlike a bare await.
            await asyncio.wait((future,))
        except asyncio.CancelledError as e:
            interrupted = interrupted or e
    if interrupted is not None:
        if not future.cancelled():
            # Retrieved, so that asyncio does not log it as never retrieved.
            future.exception()
        raise interrupted
    return future.result()


async def complete(call: Callable[[], T]) -> T:
    """Run *call* in a worker thread and return its result once it has finished.

    Cancelled meanwhile, it still waits for *call* to finish, then raises
    the cancellation.
    """
    return await _finish(_start(call))


async def undoable(call: Callable[[], T], undo: Callable[[T], object]) -> T:
    """Run *call* in a worker thread; a caller cancelled meanwhile gets nothing, and *undo* runs.

    When the waiting task is cancelled, *call* still finishes; if it
    succeeded, ``undo(result)`` runs (in a worker thread too) before the
    cancellation is raised, so nothing the caller never got is left held.
    """
    future = _start(call)
    try:
        return await _finish(future)
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            await complete(functools.partial(undo, future.result()))
        raise


async def acquire(call: Callable[[], R]) -> R:
    """Take a lease through *call* in a worker thread; a cancelled caller gets none.

    The lease a cancelled caller never got is released.
    """
    return await undoable(call, _release)


def _release(lease: Releasable) -> None:
    lease.release()
