"""The shield: a signal handler's exception never lands inside a main-thread operation.

Real signals, raised at a point inside the operation (``signal.raise_signal``
delivers to this thread at once, ``os.kill`` to the process), real handlers,
a real fork and a real wakeup descriptor.  The process-level storms, against
a manager, are in tests/test_faults.py.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from sessiontemp._guards.shield import shielded

Handler = Callable[[int, FrameType | None], Any] | int | None


class Stop(BaseException):
    """What the application's SIGTERM handler in these tests raises."""


def stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signum)


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    """Every test starts with SIGINT's default handler and leaves the table as it found it."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    saved = {s: signal.getsignal(s) for s in signals}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def through_the_shield(error: BaseException) -> bool:
    """Whether *error* was raised by the shield, once the operation had finished."""
    return any(frame.filename.endswith(os.path.join("sessiontemp", "_guards", "shield.py"))
               for frame in traceback.extract_tb(error.__traceback__))


def test_a_ctrl_c_inside_an_operation_surfaces_once_the_operation_has_finished() -> None:
    steps: list[str] = []

    def operation() -> str:
        steps.append("before")
        signal.raise_signal(signal.SIGINT)
        steps.append("after")
        return "done"

    with pytest.raises(KeyboardInterrupt) as raised:
        shielded(operation)
    assert steps == ["before", "after"]
    assert through_the_shield(raised.value)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_sent_by_kill_is_held_as_well() -> None:
    finished = []

    def operation() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        # Delivered to the process: whichever thread the kernel picks, the
        # handler runs in this one, at a later bytecode of this function.
        for _ in range(1000):
            pass
        finished.append(True)

    with pytest.raises(KeyboardInterrupt):
        shielded(operation)
    assert finished == [True]


def test_an_operation_without_a_signal_leaves_the_handlers_as_they_were() -> None:
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    before = {s: signal.getsignal(s) for s in signal.valid_signals()}
    seen_inside: dict[int, Handler] = {}

    def operation() -> int:
        seen_inside.update({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM,
                                                             signal.SIGUSR1)})
        return 7

    assert shielded(operation) == 7
    assert {s: signal.getsignal(s) for s in signal.valid_signals()} == before
    # Inside, both Python handlers stood in for; the ignored signal was left alone.
    assert seen_inside[signal.SIGINT] is not signal.default_int_handler
    assert seen_inside[signal.SIGTERM] is not stop
    assert seen_inside[signal.SIGUSR1] == signal.SIG_IGN


def test_a_handler_the_application_installs_later_is_deferred_too() -> None:
    shielded(lambda: None)  # the table as it was, seen once
    signal.signal(signal.SIGTERM, stop)
    steps: list[str] = []

    def operation() -> None:
        signal.raise_signal(signal.SIGTERM)
        steps.append("after")

    with pytest.raises(Stop):
        shielded(operation)
    assert steps == ["after"]
    assert signal.getsignal(signal.SIGTERM) is stop


def test_a_handler_the_application_removes_is_not_put_back() -> None:
    signal.signal(signal.SIGTERM, stop)
    shielded(lambda: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    shielded(lambda: None)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_ignored_signals_stay_ignored_inside_an_operation() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    def operation() -> str:
        signal.raise_signal(signal.SIGUSR1)
        return "done"

    assert shielded(operation) == "done"


def test_handlers_that_do_not_raise_are_called_after_the_operation_in_the_order_signals_came(
) -> None:
    calls: list[tuple[str, int]] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(("handler", signum)))
    signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(("handler", signum)))

    def operation() -> str:
        signal.raise_signal(signal.SIGUSR2)
        calls.append(("operation", 0))
        signal.raise_signal(signal.SIGUSR1)
        calls.append(("operation", 1))
        return "done"

    assert shielded(operation) == "done"
    assert calls == [("operation", 0), ("operation", 1), ("handler", signal.SIGUSR2),
                     ("handler", signal.SIGUSR1)]


def test_a_handler_runs_as_the_application_put_it_back_so_its_own_changes_stand() -> None:
    # The "second Ctrl-C kills" pattern: the first signal's handler installs another.
    def first(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGUSR1, stop)

    signal.signal(signal.SIGUSR1, first)
    shielded(lambda: signal.raise_signal(signal.SIGUSR1))
    assert signal.getsignal(signal.SIGUSR1) is stop
    with pytest.raises(Stop):
        shielded(lambda: signal.raise_signal(signal.SIGUSR1))


def test_a_handler_that_runs_an_operation_itself_loses_no_signal_noted_after_its_own() -> None:
    calls: list[str] = []

    def runs_an_operation(signum: int, frame: FrameType | None) -> None:
        # An application's handler that, say, closes its manager.
        shielded(lambda: calls.append("the handler's operation"))

    signal.signal(signal.SIGUSR1, runs_an_operation)
    signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append("the second handler"))

    def operation() -> None:
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGUSR2)

    shielded(operation)
    assert calls == ["the handler's operation", "the second handler"]


def test_every_noted_signal_is_handed_on_and_the_last_exception_carries_the_first() -> None:
    signal.signal(signal.SIGTERM, stop)

    def operation() -> None:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)

    with pytest.raises(Stop) as raised:
        shielded(operation)
    assert isinstance(raised.value.__context__, KeyboardInterrupt)


def test_an_interrupted_operation_that_fails_raises_the_interrupt_on_top_of_its_error() -> None:
    def operation() -> None:
        signal.raise_signal(signal.SIGINT)
        raise ValueError("the operation's own failure")

    with pytest.raises(KeyboardInterrupt) as raised:
        shielded(operation)
    assert isinstance(raised.value.__context__, ValueError)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_failing_operation_without_a_signal_raises_its_error_alone() -> None:
    def operation() -> None:
        raise ValueError("the operation's own failure")

    with pytest.raises(ValueError, match="own failure"):
        shielded(operation)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_what_an_interrupted_operation_handed_out_is_undone_before_the_interrupt() -> None:
    undone: list[str] = []

    def operation() -> str:
        signal.raise_signal(signal.SIGINT)
        return "lease"

    def undo(lease: str) -> None:
        # Undone with the handlers still deferred: a signal now waits for it.
        signal.raise_signal(signal.SIGINT)
        undone.append(lease)

    with pytest.raises(KeyboardInterrupt):
        shielded(operation, undo)
    assert undone == ["lease"]


def test_a_handler_that_does_not_raise_undoes_nothing() -> None:
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    undone: list[str] = []

    def operation() -> str:
        signal.raise_signal(signal.SIGUSR1)
        return "lease"

    assert shielded(operation, undone.append) == "lease"
    assert undone == []


def test_a_nested_operation_runs_inside_the_outer_one_and_the_signal_waits_for_both() -> None:
    steps: list[str] = []

    def inner() -> str:
        signal.raise_signal(signal.SIGINT)
        steps.append("inner")
        return "inner done"

    def outer() -> None:
        assert shielded(inner) == "inner done"
        steps.append("outer")

    with pytest.raises(KeyboardInterrupt):
        shielded(outer)
    assert steps == ["inner", "outer"]


def test_another_thread_runs_its_operation_as_it_is() -> None:
    seen: list[Handler] = []
    thread = threading.Thread(
        target=lambda: seen.append(shielded(lambda: signal.getsignal(signal.SIGINT))))
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


def test_the_wakeup_descriptor_hears_of_a_signal_at_once() -> None:
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    previous = signal.set_wakeup_fd(w)
    try:
        def operation() -> bool:
            signal.raise_signal(signal.SIGUSR1)
            # Before the operation ends: an event loop waiting on it wakes up now.
            return bool(select.select([r], [], [], 0)[0])

        assert shielded(operation)
        assert os.read(r, 16) == bytes([signal.SIGUSR1])
    finally:
        signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)


def test_a_child_forked_during_an_operation_gets_the_applications_handlers_back() -> None:
    signal.signal(signal.SIGTERM, stop)
    r, w = os.pipe()
    forked: list[int] = []

    def fork_in_a_thread() -> None:
        pid = os.fork()
        if pid == 0:
            ok = (signal.getsignal(signal.SIGINT) is signal.default_int_handler
                  and signal.getsignal(signal.SIGTERM) is stop)
            os.write(w, b"restored" if ok else b"deferred")
            os._exit(0)
        forked.append(pid)

    def operation() -> None:
        thread = threading.Thread(target=fork_in_a_thread)
        thread.start()
        thread.join()

    try:
        shielded(operation)
        assert os.read(r, 16) == b"restored"
    finally:
        for pid in forked:
            os.waitpid(pid, 0)
        os.close(r)
        os.close(w)


def test_a_subinterpreter_runs_operations_as_they_are() -> None:
    interpreters = pytest.importorskip("_xxsubinterpreters")
    r, w = os.pipe()
    interpreter = interpreters.create()
    try:
        # Only the main interpreter runs Python-level handlers, and only it may set them.
        interpreters.run_string(interpreter, (
            "import os\n"
            "from sessiontemp._guards.shield import shielded\n"
            f"os.write({w}, shielded(lambda: b'ran'))\n"
        ))
        assert os.read(r, 16) == b"ran"
    finally:
        interpreters.destroy(interpreter)
        os.close(r)
        os.close(w)
