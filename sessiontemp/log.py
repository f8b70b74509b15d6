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

import structlog

__all__ = ["logger"]

_stdlib = logging.getLogger("sessiontemp")
# Without a handler of its own, logging's last-resort handler would print
# warnings to stderr of applications that never asked for them.
_stdlib.addHandler(logging.NullHandler())

logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
    _stdlib, wrapper_class=structlog.stdlib.BoundLogger
)
