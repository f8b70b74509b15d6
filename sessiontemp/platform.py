"""The one check that this platform has what sessiontemp needs from the kernel.

sessiontemp runs on Linux only: it takes ``flock`` on directories (fcntl),
opens directories with ``O_PATH`` and changes modes through
``/proc/self/fd``.  macOS has flock and ``O_NOFOLLOW`` but neither
``O_PATH`` nor ``/proc``, and Windows has none of them; a fallback would
have to give up the guarantee that a symlink swapped in is never followed.
So :mod:`sessiontemp` asks this module before it loads any of its names and
refuses with :class:`Unsupported`, instead of a ``ModuleNotFoundError`` on
the way or an ``AttributeError`` in the middle of a removal; the console
scripts and the pytest plugin ask it first too, so that on such a platform
they say so in one line (and the plugin stands aside) instead of breaking
their host.  Importing this module needs nothing a platform may lack.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from sessiontemp.journal.errors import Unsupported

__all__ = ["SUPPORTED_PLATFORMS", "exit_if_unsupported", "lacking", "missing", "require"]

SUPPORTED_PLATFORMS: Final = "Linux (it needs flock on directories, O_PATH and /proc)"


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


def _has_fcntl() -> bool:
    try:
        import fcntl  # noqa: F401 (only whether it can be imported)
    except ImportError:
        return False
    return True


def lacking() -> str | None:
    """What this platform lacks, in words, or None when sessiontemp runs here."""
    return missing(sys.platform, has_fcntl=_has_fcntl(), has_o_path=hasattr(os, "O_PATH"),
                   proc=Path("/proc/self/fd"))


def require() -> None:
    """Raise :class:`Unsupported` (an ImportError) naming what this platform lacks."""
    lack = lacking()
    if lack is not None:
        raise Unsupported(lack)


def exit_if_unsupported(script: str) -> None:
    """For a console script: on a platform sessiontemp refuses, one line on stderr and exit 2."""
    lack = lacking()
    if lack is not None:
        sys.stderr.write(f"{script}: not supported on this platform ({lack}); sessiontemp runs "
                         f"on {SUPPORTED_PLATFORMS} only\n")
        raise SystemExit(2)
