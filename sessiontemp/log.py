"""The library's logger: structlog, bound to the standard ``logging`` module.

Events go to ``logging.getLogger("sessiontemp")``, which carries a
NullHandler: an application that configures nothing sees nothing, on stdout
or stderr.  (An unconfigured structlog logger prints to stdout, which would
corrupt the output of every program embedding this library.)  The library
never configures logging; processors come from the application's structlog
configuration, and ``structlog.testing.capture_logs`` sees every event.

Stable keys: ``manager``, ``generation``, ``lease``, ``seq``, ``recovery``,
``path``, ``reason``.  Event names are dotted, e.g. ``generation.removed``.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["bound", "debugging", "logger"]

_stdlib = logging.getLogger("sessiontemp")
# Without a handler of its own, logging's last-resort handler would print
# warnings to stderr of applications that never asked for them.
_stdlib.addHandler(logging.NullHandler())

class _BoundLogger(structlog.stdlib.BoundLogger):
    """Drops at once an event that nothing would see.

    When the application has not configured structlog, an event goes
    through structlog's default processors (a timestamp, a rendered line)
    only for the stdlib logger to drop it below its level: about a tenth
    of a millisecond, on every lease.  Configured structlog (and
    ``capture_logs``) sees every event as before.  Each public method the
    library calls asks first and hands on to structlog's own; nothing
    private of structlog's is replaced.
    """

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return None if _unseen(logging.DEBUG) else super().debug(event, *args, **kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return None if _unseen(logging.INFO) else super().info(event, *args, **kw)

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return None if _unseen(logging.WARNING) else super().warning(event, *args, **kw)

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return None if _unseen(logging.ERROR) else super().error(event, *args, **kw)

    def exception(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return None if _unseen(logging.ERROR) else super().exception(event, *args, **kw)

    def critical(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return None if _unseen(logging.CRITICAL) else super().critical(event, *args, **kw)


def _unseen(level: int) -> bool:
    """Whether an event at *level* would reach nobody: structlog unconfigured, stdlib below it."""
    return not structlog.is_configured() and not _stdlib.isEnabledFor(level)


def debugging() -> bool:
    """Whether a debug event would be seen: cheaper than the bound logger's own test."""
    return structlog.is_configured() or _stdlib.isEnabledFor(logging.DEBUG)


logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
    _stdlib, wrapper_class=_BoundLogger
)


def bound(**context: Any) -> structlog.stdlib.BoundLogger:
    """The library's logger with *context* bound once, for every event of one owner.

    Lazy, as :data:`logger` is: each event is built with the structlog
    configuration of its moment, so an application that configures
    structlog after opening a manager (or a test's ``capture_logs``) still
    sees it.
    """
    bound_logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        _stdlib, wrapper_class=_BoundLogger, **context)
    return bound_logger
