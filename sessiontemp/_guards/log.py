"""The library's logger: structlog, bound to the standard ``logging`` module, imported when needed.

Events go to ``logging.getLogger("sessiontemp")``, which carries a
NullHandler: an application that configures nothing sees nothing, on stdout
or stderr.  (An unconfigured structlog logger prints to stdout, which would
corrupt the output of every program embedding this library.)  The library
never configures logging; processors come from the application's structlog
configuration, and ``structlog.testing.capture_logs`` sees every event.

structlog is imported only for an event something would see: an
application that has configured structlog has imported it, so while
``structlog`` is not in :data:`sys.modules` nothing can be configured, and
an event below the standard logger's level reaches nobody.  That is the one
device here; it earns 29 % of ``sessiontemp run -- true``'s start-up
against a plain structlog logger made at import (BENCHMARKS.md, "Start-up:
the logger and filelock").

Other threads are inside the library while the first seen event imports
structlog, and :data:`sys.modules` holds the module from the moment its
import starts: read from there, it is half made, and asking it anything
raises AttributeError.  So structlog is only ever reached through an
``import`` statement, which makes a thread wait until another thread's
import of the same module has finished (the import system's own lock per
module, which a fork leaves free in the child).

Stable keys: ``manager``, ``generation``, ``lease``, ``seq``, ``recovery``,
``path``, ``reason``.  Event names are dotted, e.g. ``generation.removed``.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from sessiontemp._guards.forks import Mutex

if TYPE_CHECKING:
    import logging

    import structlog

__all__ = ["BoundLogger", "bound", "logger"]

# logging's own numbers, so that asking for a level imports nothing.
_DEBUG: Final = 10
_INFO: Final = 20
_WARNING: Final = 30
_ERROR: Final = 40
_CRITICAL: Final = 50
_NAME: Final = "sessiontemp"


_logger: list[logging.Logger] = []
# Held while the stdlib logger is given its handler: two threads logging
# their first event at once would each add one.  A Mutex, free in a child
# forked while a thread of the parent held it.
_first = Mutex()


def _stdlib() -> logging.Logger:
    """``logging.getLogger("sessiontemp")``, given its NullHandler the first time."""
    if not _logger:
        import logging

        with _first:
            if not _logger:
                stdlib = logging.getLogger(_NAME)
                # Without a handler of its own, logging's last-resort handler would
                # print warnings to stderr of applications that never asked for them.
                stdlib.addHandler(logging.NullHandler())
                _logger.append(stdlib)
    return _logger[0]


def _structlog() -> ModuleType:
    """structlog, whole: an import under way in another thread is waited for, never half read.

    Raises ImportError where it cannot be imported, and AttributeError in
    the one case the import system cannot wait: this very thread is
    importing it (a finalizer that logs, run by the garbage collector in
    the middle of that import).
    """
    import structlog

    structlog.is_configured  # noqa: B018 (half made only where this thread is making it)
    return structlog


def _configured() -> bool:
    """Whether structlog is configured; False while it is not even imported."""
    if "structlog" not in sys.modules:
        return False
    try:
        return bool(_structlog().is_configured())
    except (ImportError, AttributeError):
        # Nothing half imported can have been configured yet.
        return False


def _enabled(level: int) -> bool:
    """Whether the standard logger takes *level*: logging's defaults (WARNING) until it is imported.

    Nothing can have configured logging without importing it, and a
    process that never does is spared importing it for events nobody sees.
    """
    if "logging" not in sys.modules:
        return level >= _WARNING
    return _stdlib().isEnabledFor(level)


def _unseen(level: int) -> bool:
    """Whether an event at *level* would reach nobody: structlog unconfigured, stdlib below it."""
    return not _configured() and not _enabled(level)


class BoundLogger:
    """The library's logger with its bound context: a structlog ``BoundLogger`` made when needed.

    Each method drops at once an event nothing would see; any other goes to
    structlog's own ``BoundLogger``, made on the first such event and lazy
    as structlog's are, so each event is built with the structlog
    configuration of its moment (an application that configures structlog
    after opening a manager, or a test's ``capture_logs``, still sees it).
    Nothing private of structlog's is replaced.
    """

    __slots__ = ("_context", "_structlog")

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context
        self._structlog: structlog.stdlib.BoundLogger | None = None

    def bind(self, **context: Any) -> BoundLogger:
        """This logger with *context* bound as well."""
        return BoundLogger({**self._context, **context})

    def _real(self) -> structlog.stdlib.BoundLogger:
        real = self._structlog
        if real is None:
            structlog = _structlog()
            real = self._structlog = structlog.wrap_logger(
                _stdlib(), wrapper_class=structlog.stdlib.BoundLogger, **self._context)
        return real

    def _emit(self, method: str, level: int, event: str, args: tuple[Any, ...],
              kw: dict[str, Any]) -> Any:
        if _unseen(level):
            return None
        try:
            real = self._real()
        except (ImportError, AttributeError):
            # A process that can no longer import it (it gave up its
            # privileges or changed its root since it started), or this
            # thread in the middle of importing it: logging an event must
            # never fail the operation that logs it.
            return _plain(level, event, {**self._context, **kw})
        return getattr(real, method)(event, *args, **kw)

    def debug(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("debug", _DEBUG, event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("info", _INFO, event, args, kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("warning", _WARNING, event, args, kw)

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("error", _ERROR, event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("exception", _ERROR, event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("critical", _CRITICAL, event, args, kw)


def _plain(level: int, event: str, fields: dict[str, Any]) -> None:
    """*event* as one ``key=value`` line to the stdlib logger, without structlog.

    Only where logging is imported already: where it is not, nothing can
    have given it a handler, and the event would reach nobody.
    """
    if "logging" in sys.modules:
        line = " ".join([event, *(f"{k}={v!r}" for k, v in sorted(fields.items()))])
        _stdlib().log(level, "%s", line)


logger: BoundLogger = BoundLogger({})


def bound(**context: Any) -> BoundLogger:
    """The library's logger with *context* bound once, for every event of one owner."""
    return BoundLogger(context)
