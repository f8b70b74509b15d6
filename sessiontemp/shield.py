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

import os
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["shielded"]

T = TypeVar("T")


class _Call(Generic[T]):
    """One operation handed to the worker; ``finished`` is released when it has run."""

    __slots__ = ("done", "error", "finished", "operation", "result")

    def __init__(self, operation: Callable[[], T]) -> None:
        self.operation = operation
        self.result: T | None = None
        self.error: BaseException | None = None
        self.done = False
        self.finished = threading.Lock()
        self.finished.acquire()

    def run(self) -> None:
        try:
            self.result = self.operation()
        except BaseException as e:
            self.error = e
        finally:
            self.done = True
            self.finished.release()

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


# One thread: only the main thread hands work over, one call at a time.  A
# bare queue and a lock per call, not an executor and its futures: the
# hand-off is on every main-thread operation (about 15 us against 40).
_requests: queue.SimpleQueue[_Call[object]] | None = None
_worker_lock = threading.Lock()


def _serve(requests: queue.SimpleQueue[_Call[object]]) -> None:
    while True:
        requests.get().run()


def _submit(call: _Call[T]) -> None:
    global _requests
    with _worker_lock:
        if _requests is None:
            _requests = queue.SimpleQueue()
            # A daemon: the main thread never leaves while a call it made runs.
            threading.Thread(target=_serve, args=(_requests,), name="sessiontemp",
                             daemon=True).start()
        requests = _requests
    requests.put(call)  # type: ignore[arg-type]


def _forget_worker() -> None:
    # A forked child has no worker thread, only the parent's queue: it
    # starts its own if it opens managers of its own.
    global _requests, _worker_lock
    _requests = None
    _worker_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)


def shielded(operation: Callable[[], T], undo: Callable[[T], object] | None = None) -> T:
    """Run *operation* so that no signal handler's exception lands inside it.

    If one is raised while it runs, it is re-raised once *operation* has
    finished, after ``undo(result)`` gave back what *operation* returned.
    """
    if threading.current_thread() is not threading.main_thread():
        return operation()
    call = _Call(operation)
    _submit(call)
    interrupt = _wait(call)
    if interrupt is None:
        return call.outcome()
    if undo is not None and call.error is None:
        result = call.result
        follow_up = _Call(lambda: undo(result))  # type: ignore[arg-type]
        _submit(follow_up)
        _wait(follow_up)
    raise interrupt


def _wait(call: _Call[T]) -> BaseException | None:
    """Wait for *call* to finish; return the first exception raised here meanwhile."""
    interrupt: BaseException | None = None
    while True:
        try:
            # done, not the lock alone: an exception may land just after
            # the lock was taken, and the lock is released only once.
            while not call.done:
                call.finished.acquire()
            return interrupt
        except BaseException as e:
            interrupt = interrupt or e
