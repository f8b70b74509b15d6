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

A module that cannot be imported because this process may not read its
files (a privilege drop after start, with Python or sessiontemp installed
where the new user may not read) is not a platform's lack:
:func:`unreadable` finds the path and says so
(:class:`~sessiontemp.PackageUnreadable`), for ``fcntl`` here and for the
library's own modules where :mod:`sessiontemp` loads them.
"""

from __future__ import annotations

import os
import stat
import sys

from sessiontemp.journal import errors
from sessiontemp.journal.errors import PackageUnreadable, Unsupported

# Neither pathlib nor typing at run time: the session client imports this
# module on every command's start (checkers take the name as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["SUPPORTED_PLATFORMS", "exit_if_unsupported", "lacking", "missing", "require",
           "unreadable"]

SUPPORTED_PLATFORMS: Final = "Linux (it needs flock on directories, O_PATH and /proc)"


def missing(platform: str, *, has_fcntl: bool, has_o_path: bool,
            proc: os.PathLike[str] | str) -> str | None:
    """What this platform lacks, in words, or None when it has everything."""
    if not platform.startswith("linux"):
        return f"{platform} is not Linux"
    if not has_fcntl:
        return "there is no fcntl module, so no flock"
    if not has_o_path:
        return "os.O_PATH is missing"
    if not os.path.isdir(proc):
        return f"{proc} is not there (is /proc mounted?)"
    return None


def _fcntl_error() -> ImportError | None:
    try:
        import fcntl  # noqa: F401 (only whether it can be imported)
    except ImportError as e:
        return e
    return None


_FIX: Final = ("Import what you use of sessiontemp before dropping privileges (`from "
               "sessiontemp import Manager` loads its modules and the Python modules they "
               "need), or install Python and sessiontemp where uid {uid} can read them")


def unreadable(module: str, error: BaseException | None = None) -> PackageUnreadable | None:
    """The error for *module* not imported because this process cannot read its files, or None.

    Looks where it would have come from: the file *error* names, the
    library's own directories, Python's standard library (and its
    ``lib-dynload``, where ``fcntl`` is), then every ``sys.path`` entry; the
    first that exists but cannot be read (or reached) is named.  None when
    every one of them can be read: then the import failed for another
    reason, which is left to say itself.
    """
    uid = os.getuid()
    filename = getattr(error, "filename", None)
    stdlib = os.path.dirname(os.__file__)
    # Extension modules (fcntl) live in lib-dynload, the others beside os.
    dynload = os.path.join(stdlib, "lib-dynload")
    python = [dynload, stdlib] if module == "fcntl" else [stdlib, dynload]
    own = [os.path.dirname(os.path.abspath(__file__)),
           os.path.dirname(os.path.abspath(errors.__file__ or ""))]
    places = [filename] if isinstance(filename, str) else []
    places += (own + python) if module.startswith("sessiontemp") else (python + own)
    places += [p for p in sys.path if p]
    for place in places:
        try:
            st = os.stat(place)
        except PermissionError as e:
            why = (f"cannot be reached by this process (uid {uid}): a directory above it may "
                   f"not be searched ({e.strerror})")
        except (OSError, ValueError):
            continue
        else:
            wanted = os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)
            if os.access(place, wanted):
                continue
            why = f"cannot be read by this process (uid {uid}, mode {stat.S_IMODE(st.st_mode):04o})"
        return PackageUnreadable(place, f"{why}, so Python could not import {module}",
                                 _FIX.format(uid=uid), module)
    return None


def _problem() -> Unsupported | PackageUnreadable | None:
    """Why sessiontemp cannot run in this process, or None."""
    fcntl_error = _fcntl_error()
    lack = missing(sys.platform, has_fcntl=fcntl_error is None,
                   has_o_path=hasattr(os, "O_PATH"), proc="/proc/self/fd")
    if lack is None:
        return None
    if fcntl_error is not None and sys.platform.startswith("linux"):
        # Every Linux build of CPython has fcntl: not importing it means its
        # file could not be read, not that the platform lacks flock.
        found = unreadable("fcntl", fcntl_error)
        if found is not None:
            return found
    return Unsupported(lack)


def lacking() -> str | None:
    """What keeps sessiontemp from running here, in words (what the platform lacks), or None."""
    problem = _problem()
    if problem is None:
        return None
    return problem.missing if isinstance(problem, Unsupported) else str(problem)


def require() -> None:
    """Raise :class:`Unsupported` (an ImportError) naming what this platform lacks.

    Or :class:`~sessiontemp.PackageUnreadable` when what is missing is only
    unreadable to this process.
    """
    problem = _problem()
    if problem is not None:
        raise problem


def exit_if_unsupported(script: str) -> None:
    """For a console script: on a platform sessiontemp refuses, one line on stderr and exit 2."""
    problem = _problem()
    if isinstance(problem, PackageUnreadable):
        sys.stderr.write(f"{script}: {problem}\n")
        raise SystemExit(2)
    if problem is not None:
        sys.stderr.write(f"{script}: not supported on this platform ({problem.missing}); "
                         f"sessiontemp runs on {SUPPORTED_PLATFORMS} only\n")
        raise SystemExit(2)
