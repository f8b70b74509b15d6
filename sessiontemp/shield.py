"""Steps that an exception raised by a signal handler cannot cut in two.

Python runs signal handlers in the main thread only, between any two
bytecodes: a Ctrl-C (KeyboardInterrupt), or a SIGTERM handler that raises,
can land between a journal commit and the state change it records, between
BEGIN and COMMIT, or inside a ``finally`` that was releasing a lock.
Masking the signal does not help once any other thread exists: the kernel
hands it to an unmasked thread and the main thread still raises at its next
bytecode.

So an operation called from the main thread runs whole in a worker thread,
which no handler ever interrupts, while the main thread waits.  An
exception raised in the main thread meanwhile is held until the operation
has finished (committed and applied, or failed and undone), then raised:
memory, journal and disk agree whenever the caller sees it.  An operation
that handed something out (a lease) is undone first, since the caller
never receives it.  Calls from other threads run where they are: no
handler interrupts them.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["shielded"]

T = TypeVar("T")

# Imported by name, not reached lazily through concurrent.futures: a process
# that drops its privileges after importing may no longer read the stdlib.
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _worker() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            # One thread: only the main thread submits, one call at a time.
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiontemp")
        return _executor


def _forget_worker() -> None:
    # A forked child has no worker thread, only the parent's executor
    # object: it starts its own if it opens managers of its own.
    global _executor, _executor_lock
    _executor = None
    _executor_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)


def shielded(operation: Callable[[], T], undo: Callable[[T], object] | None = None) -> T:
    """Run *operation* so that no signal handler's exception lands inside it.

    If one is raised while it runs, it is re-raised once *operation* has
    finished, after ``undo(result)`` gave back what *operation* returned.
    """
    if threading.current_thread() is not threading.main_thread():
        return operation()
    future = _worker().submit(operation)
    interrupt = _wait(future)
    if interrupt is None:
        return future.result()
    if undo is not None and future.exception() is None:
        follow_up = _worker().submit(undo, future.result())
        _wait(follow_up)
    raise interrupt


def _wait(future: concurrent.futures.Future[T]) -> BaseException | None:
    """Wait for *future* to finish; return the first exception raised here meanwhile."""
    interrupt: BaseException | None = None
    while True:
        try:
            while not future.done():
                concurrent.futures.wait((future,))
            return interrupt
        except BaseException as e:
            interrupt = interrupt or e
