"""Steps that an exception raised by a signal handler cannot cut in two.

Python runs signal handlers in the main thread only, between any two
bytecodes: a Ctrl-C (KeyboardInterrupt), or a SIGTERM handler that raises,
can land between a journal commit and the state change it records, between
BEGIN and COMMIT, or inside a ``finally`` that was releasing a lock.
Masking the signal does not help once any other thread exists: the kernel
hands it to an unmasked thread and the main thread still raises at its next
bytecode.

So while an operation called from the main thread runs, every Python-level
handler (each signal whose handler is a Python callable: SIGINT's
``default_int_handler``, whatever the application installed) is replaced by
one that only notes the signal.  Once the operation has finished (committed
and applied, or failed and undone), the handlers are put back and the noted
signals handed to them in the order they came: an exception one raises
surfaces only then, so memory, journal and disk agree whenever the caller
sees it.  An operation that handed something out (a lease) is undone first,
since the caller never receives it.  Handlers set to ``SIG_DFL`` or
``SIG_IGN``, and the wakeup descriptor (:func:`signal.set_wakeup_fd`, which
asyncio reads), are left alone: the C-level handler still writes to it at
once.  Calls from other threads run as they are: no handler interrupts them.

The cost is two ``sigaction`` calls per handler and one look at the handler
table per operation (a few microseconds), where handing the operation to a
worker thread cost two thread switches.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub: typed where it is used below
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Final, TypeVar

__all__ = ["shielded"]

T = TypeVar("T")
_Handler = Callable[[int, FrameType | None], Any] | int | None

# The C functions behind signal.getsignal and signal.signal: the public
# wrappers turn every result into an enum member when they can, and for a
# Python handler that lookup fails with an exception, about 6 us a call,
# where the table is read once per signal on every operation.
_getsignal: Final[Callable[[int], _Handler]] = _signal.getsignal
_setsignal: Final[Callable[[int, _Handler], _Handler]] = _signal.signal
_get_ident: Final = threading.get_ident
# Fixed for the platform, and slow to ask (a set of enum members, ~100 us).
_SIGNALS: Final = tuple(sorted(int(s) for s in signal.valid_signals()))

# All of it belongs to the main thread: only it runs handlers or changes them.
_main: int | None = threading.main_thread().ident
# Whether a main-thread operation is under way (a nested one then runs as it is).
_open = False
# Every signal whose handler is _note now, with the handler to put back.
_originals: dict[int, _Handler] = {}
# The signals noted while the operation ran, with the frame each landed in.
_noted: list[tuple[int, FrameType | None]] = []
# The handler table as the last operation left it deferred, and the signals
# it deferred: the next operation defers those first, then checks the table.
_expected: tuple[_Handler, ...] = ()
_deferred: tuple[int, ...] = ()


def _note(signum: int, frame: FrameType | None) -> None:
    """The stand-in handler: note the signal while an operation runs."""
    if _open:
        _noted.append((signum, frame))
        return
    # Left installed after the put-back was itself cut short by a signal:
    # it then does what the application's handler does, at once.
    original = _originals.get(signum)
    if callable(original):
        original(signum, frame)


def _defer(signum: int) -> None:
    """Make _note the handler of *signum*, remembering the one it replaces."""
    handler = _getsignal(signum)
    if handler is _note or not callable(handler):
        return
    # Written down before the swap: if a signal cuts in right after it,
    # the returned handler is lost, and this says what to put back.
    _originals[signum] = handler
    try:
        replaced = _setsignal(signum, _note)
    except ValueError:
        # Refused outside the main interpreter: only the main one runs
        # Python-level handlers, so an operation here has none to fear.
        del _originals[signum]
        raise _Elsewhere from None
    if replaced is not _note:
        # A handler that ran just before the swap may have changed it.
        _originals[signum] = replaced


class _Elsewhere(Exception):
    """This thread is the main one of an interpreter other than the main interpreter."""


def _begin() -> bool:
    """Defer every Python-level handler; raise, leaving them as they were, if one cuts in.

    False, with nothing deferred, in an interpreter whose handlers never run.
    """
    global _open, _expected, _deferred, _main
    _noted.clear()
    _open = True
    try:
        for signum in _deferred:
            _defer(signum)
        table = tuple(map(_getsignal, _SIGNALS))
        while table != _expected:
            # A handler was set, changed or removed since the last operation:
            # defer whatever is callable now, and look again (one more may
            # have been set by a handler that ran meanwhile).
            for signum, handler in zip(_SIGNALS, table, strict=True):
                if handler is not _note and callable(handler):
                    _defer(signum)
            settled = tuple(map(_getsignal, _SIGNALS))
            if settled == table:
                _expected = table
                _deferred = tuple(s for s, h in zip(_SIGNALS, table, strict=True) if h is _note)
            table = settled
    except _Elsewhere:
        _main = None
        _end()
        return False
    except BaseException as e:
        # Before the operation began: nothing to protect yet, but a signal
        # noted meanwhile came first.
        raise _latest([*_end(), e])  # noqa: B904 - e is among them, with its context
    return True


def _end() -> list[BaseException]:
    """Put the handlers back and hand them the noted signals; what they raised, in order.

    Never raises itself, unless a second signal's exception lands in the
    few bytecodes of its own exception handling: the handlers then stay as
    _note, which passes signals straight on, and the next operation puts
    them back.
    """
    global _open, _noted
    _open = False
    # Taken whole: a handler may itself run an operation, whose window
    # starts a list of its own.
    noted, _noted = _noted, []
    raised: list[BaseException] = []
    late: list[BaseException] = []
    while _originals:
        try:
            while _originals:
                signum = next(iter(_originals))
                # Only a handler this module set: one the application set since is kept.
                if _getsignal(signum) is _note:
                    _setsignal(signum, _originals[signum])
                del _originals[signum]
        except BaseException as e:
            # A put-back handler ran for a signal that came just now.
            late += (e,)
    while noted:
        try:
            while noted:
                signum, frame = noted.pop(0)
                # The handler in force now, as Python itself would call it.
                handler = _getsignal(signum)
                if callable(handler):
                    handler(signum, frame)
        except BaseException as e:
            raised += (e,)
    return raised + late


def _latest(raised: list[BaseException]) -> BaseException:
    """The last exception raised, the ones before it as its context, as Python chains them."""
    last = raised[0]
    for e in raised[1:]:
        if e is not last and e.__context__ is None:
            e.__context__ = last
        last = e
    return last


def shielded(operation: Callable[[], T], undo: Callable[[T], object] | None = None) -> T:
    """Run *operation* so that no signal handler's exception lands inside it.

    If a handler raises for a signal that came while it ran, the exception
    is raised once *operation* has finished, after ``undo(result)`` gave
    back what *operation* returned.
    """
    if _get_ident() != _main or _open or not _begin():
        return operation()
    try:
        result = operation()
    except BaseException:
        raised = _end()
        if raised:
            raise _latest(raised)  # noqa: B904 - its context is the operation's error already
        raise
    raised = _end()
    if not raised:
        return result
    if undo is not None:
        try:
            shielded(lambda: undo(result))
        except BaseException as e:
            raised += (e,)
    raise _latest(raised)


def _forget() -> None:
    # A forked child has only the thread that forked, now its main thread,
    # and no operation under way: its handlers go back to the application's.
    global _main, _open
    _main = _get_ident()
    _open = False
    _noted.clear()
    for signum, handler in list(_originals.items()):
        if _getsignal(signum) is _note:
            _setsignal(signum, handler)
    _originals.clear()


os.register_at_fork(after_in_child=_forget)
