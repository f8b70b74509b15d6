"""Which root a command line works on: ``--root DIR``, else ``SESSIONTEMP_ROOT``, else the default.

Every ``sessiontemp`` subcommand (``run``, ``recover``, ``session``,
``shell``) takes its root by this one rule, so that an agent CLI's hooks,
its shell prefix and the commands they start agree on the root without
repeating it on each command line.

The default root is ``sessiontemp-UID`` in the system temporary directory,
found as :func:`tempfile.gettempdir` finds it (``$TMPDIR``, ``$TEMP``,
``$TMP``, then ``/tmp``, ``/var/tmp``, ``/usr/tmp``, then the working
directory: the first that is a directory this process may write), without
importing :mod:`tempfile`, whose imports cost the session client more than
its own work; a program that set ``tempfile.tempdir`` gets that.  Nothing
here imports pathlib or typing at run time, for the same reason.
"""

from __future__ import annotations

import os
import sys

# Checkers take the name as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    # By its module's name: the documentation reads the annotation as written.
    import pathlib
    from typing import Final

__all__ = ["HOLDER_LOCK", "HOLDER_SOCKET", "ROOT_VARIABLE", "chosen_root", "default_root",
           "root_text"]

# The environment variable naming the root when --root is not given.
ROOT_VARIABLE: Final = "SESSIONTEMP_ROOT"
# The session holder's entries in the root (sessiontemp.holder.serve): its socket,
# and the lock it holds for its whole life (a socket without it is a dead
# holder's).  Named here, where the client finds them without importing the
# root's module.
HOLDER_SOCKET: Final = "holder.sock"
HOLDER_LOCK: Final = "holder.lock"


def _tempdir() -> str:
    """The directory :func:`tempfile.gettempdir` returns, found the same way."""
    loaded = sys.modules.get("tempfile")
    chosen = None if loaded is None else getattr(loaded, "tempdir", None)
    if isinstance(chosen, str) and chosen:
        return chosen
    candidates = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]  # noqa: S108 (tempfile's own list)
    for candidate in candidates:
        if not candidate:
            continue
        place = os.path.abspath(candidate)
        if os.path.isdir(place) and os.access(place, os.W_OK | os.X_OK):
            return place
    return os.getcwd()


def root_text(given: os.PathLike[str] | str | None) -> str:
    """*given*, else ``$SESSIONTEMP_ROOT`` (an empty value counts as unset), else the default."""
    if given is not None:
        return os.fspath(given)
    named = os.environ.get(ROOT_VARIABLE)
    return named if named else os.path.join(_tempdir(), f"sessiontemp-{os.getuid()}")


def chosen_root(given: os.PathLike[str] | str | None) -> pathlib.Path:
    """:func:`root_text` as a :class:`~pathlib.Path`."""
    from pathlib import Path

    return Path(root_text(given))


def default_root() -> pathlib.Path:
    """The per-user root under the system temporary directory."""
    from pathlib import Path

    return Path(_tempdir()) / f"sessiontemp-{os.getuid()}"
