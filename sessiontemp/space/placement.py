"""Where a root may live: never inside the workdir that sandboxed commands may write.

A command that can write to the root can rewrite the journal, delete other
sessions' directories, or hold their locks forever.  A sandbox usually lets
its commands write to one working directory; a root placed inside it (say
``./.sessiontemp`` of a project) hands all of that to every command.
``Manager(root, workdir=PATH)`` checks for this before anything is created.

Both paths are compared as the kernel would resolve them: the longest
prefix of each that exists has its symbolic links resolved, and the rest is
appended, so a root that does not exist yet, or one reached through a
symlink, is judged by where it would really be.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Final, Literal, TypeAlias

from sessiontemp._guards.log import logger
from sessiontemp._kernel.entries import check_path
from sessiontemp.journal.errors import BadInput, UnsafeRoot

__all__ = ["InsideWorkdir", "Policy", "check", "inside", "resolve"]

Policy: TypeAlias = Literal["refuse", "warn"]
POLICIES: Final[tuple[Policy, ...]] = ("refuse", "warn")


class InsideWorkdir(UserWarning):
    """The root lies inside the workdir sandboxed commands may write (policy "warn")."""


def resolve(path: os.PathLike[str] | str) -> Path:
    """*path* made absolute, with symlinks resolved in the longest prefix that exists.

    The part that does not exist yet cannot hold a symlink; it is appended
    as it is, with ``..`` applied to what was resolved before it.
    """
    # realpath(strict=False) resolves component by component and keeps the
    # missing tail, applying ".." after resolving what precedes it, which is
    # what the kernel will do once the tail is made.
    return Path(os.path.realpath(path))


def inside(path: os.PathLike[str] | str, workdir: os.PathLike[str] | str) -> bool:
    """Whether *path*, resolved, is *workdir* (resolved) or lies below it."""
    return resolve(path).is_relative_to(resolve(workdir))


def check(root: os.PathLike[str] | str, workdir: os.PathLike[str] | str, *,
          policy: Policy = "refuse") -> bool:
    """Refuse (or, with *policy* "warn", warn about) a root inside *workdir*.

    The journal, the lock files and the artifact store live in the root, so
    one check covers them all.  Returns whether the root is inside.  Raises
    :class:`UnsafeRoot` under "refuse"; under "warn" issues an
    :class:`InsideWorkdir` warning and logs ``root.inside_workdir``.
    """
    if policy not in POLICIES:
        raise BadInput("workdir_policy", f"must be one of {', '.join(POLICIES)}, not {policy!r}",
                       "Pass one of them")
    check_path(workdir, "workdir", "Pass the directory sandboxed commands may write, as a "
               "str or Path, or None")
    if not os.fspath(workdir):
        raise BadInput("workdir", "is an empty path", "Pass the directory sandboxed commands "
                       "may write, or None")
    if not inside(root, workdir):
        return False
    reason = (f"lies inside the workdir {resolve(workdir)} that sandboxed commands may "
              "write, so any command could rewrite its journal and remove or hold other "
              "sessions' directories")
    fix = "Pass a root outside the workdir (the default per-user root is)"
    if policy == "refuse":
        raise UnsafeRoot(resolve(root), reason, fix)
    logger.warning("root.inside_workdir", path=str(resolve(root)), reason=reason)
    warnings.warn(f"{resolve(root)} {reason}. {fix}", InsideWorkdir, stacklevel=3)
    return True
