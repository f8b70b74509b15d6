"""The one check that this platform has what sessiontemp needs from the kernel.

sessiontemp runs on Linux only: it takes ``flock`` on directories (fcntl),
opens directories with ``O_PATH`` and changes modes through
``/proc/self/fd``.  macOS has flock and ``O_NOFOLLOW`` but neither
``O_PATH`` nor ``/proc``, and Windows has none of them; a fallback would
have to give up the guarantee that a symlink swapped in is never followed.
So :mod:`sessiontemp` imports this module first and refuses at once with
:class:`Unsupported`, instead of a ``ModuleNotFoundError`` on the way or an
``AttributeError`` in the middle of a removal.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from journal.errors import Unsupported

__all__ = ["missing", "require"]


def missing(platform: str, *, has_fcntl: bool, has_o_path: bool, proc: Path) -> str | None:
    """What this platform lacks, in words, or None when it has everything."""
    if not platform.startswith("linux"):
        return f"{platform} is not Linux"
    if not has_fcntl:
        return "there is no fcntl module, so no flock"
    if not has_o_path:
        return "os.O_PATH is missing"
    if not proc.is_dir():
        return f"{proc} is not there (is /proc mounted?)"
    return None


def require() -> None:
    """Raise :class:`Unsupported` (an ImportError) naming what this platform lacks."""
    lack = missing(sys.platform, has_fcntl=importlib.util.find_spec("fcntl") is not None,
                   has_o_path=hasattr(os, "O_PATH"), proc=Path("/proc/self/fd"))
    if lack is not None:
        raise Unsupported(lack)


require()
