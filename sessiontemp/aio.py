"""asyncio: the manager's blocking work, run in a worker thread and seen through to the end.

Every manager operation may wait for the journal's write lock, fsync a
commit, or remove a whole directory tree; none of that may run on an event
loop, which would stall every other task meanwhile.  So each runs in the
loop's default executor.

A thread cannot be stopped part-way, so an await that simply gave up on
cancellation would return while the operation still ran: the caller could
not tell whether its lease was taken or given back.  :func:`complete` holds
a cancellation until the operation has finished and raises it then, and
:func:`acquire` gives back a lease made for a caller that was cancelled
meanwhile.  A cancelled task therefore never leaks a lease, and a released
one is released for good by the time the cancellation reaches the caller.
When no worker thread can be started (the process is at its limit of
threads, or out of memory), the call runs on the loop for once, blocking
it meanwhile, rather than not at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sessiontemp.log import logger

if TYPE_CHECKING:
    from sessiontemp.lease import Lease

__all__ = ["acquire", "complete"]

T = TypeVar("T")


def _start(call: Callable[[], T]) -> asyncio.Future[T]:
    # As asyncio.to_thread does: the call sees the task's context variables
    # (structlog's bound context, for one).
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    try:
        return loop.run_in_executor(None, functools.partial(context.run, call))
    except RuntimeError as e:
        # No worker thread could be started (the process is at its limit of
        # threads, or out of memory) or the executor is shut down.  Run
        # here, on the loop, for once: a release that never ran would keep
        # its directory until the manager closes, and an acquire refused
        # for want of a thread would fail on a resource, not on the root.
        logger.warning("asyncio.inline", reason=f"no worker thread for the call ({e}); it "
                       "ran on the event loop, which it blocked meanwhile")
        done: asyncio.Future[T] = loop.create_future()
        try:
            done.set_result(context.run(call))
        except (Exception, asyncio.CancelledError) as failure:
            done.set_exception(failure)
        return done


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


async def acquire(call: Callable[[], Lease]) -> Lease:
    """Take a lease through *call* in a worker thread; a cancelled caller gets none.

    When the waiting task is cancelled, the lease the thread still makes is
    released (in a worker thread too) before the cancellation is raised.
    """
    future = _start(call)
    try:
        return await _finish(future)
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            await complete(future.result().release)
        raise
