"""Which root a command line works on: ``--root DIR``, else ``SESSIONTEMP_ROOT``, else the default.

Every ``sessiontemp`` subcommand (``run``, ``recover``, ``session``,
``shell``) takes its root by this one rule, so that an agent CLI's hooks,
its shell prefix and the commands they start agree on the root without
repeating it on each command line.  Standard library only: the session
client (:mod:`sessiontemp.client`) imports it on every command's start.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["ROOT_VARIABLE", "chosen_root", "default_root"]

# The environment variable naming the root when --root is not given.
ROOT_VARIABLE: Final = "SESSIONTEMP_ROOT"


def default_root() -> Path:
    """The per-user root under the system temporary directory."""
    return Path(tempfile.gettempdir()) / f"sessiontemp-{os.getuid()}"


def chosen_root(given: os.PathLike[str] | str | None) -> Path:
    """*given*, else ``$SESSIONTEMP_ROOT`` (an empty value counts as unset), else the default."""
    if given is not None:
        return Path(given)
    named = os.environ.get(ROOT_VARIABLE)
    return Path(named) if named else default_root()
