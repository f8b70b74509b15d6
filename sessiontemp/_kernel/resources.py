"""A process short of descriptors or memory: an error to report, never a directory gone.

An ``open``, a ``flock`` or a ``mkdir`` that fails with EMFILE (the
process's descriptor limit), ENFILE (the system's file table), ENOMEM,
ENOBUFS, EINTR or EAGAIN says that the process could not do it *now*; it
says nothing about what it was done to.  Only ENOENT (and ENOTDIR or ELOOP
for an entry replaced by something else) or an identity that no longer
matches say that a directory is gone.  Taking a shortage for a vanished
directory would retire a live generation, or discard what a named
session's dead owner left, for the want of one descriptor for a moment.

So every place that decides "gone" from an OSError asks :func:`gone`, and
a shortage reaches the caller as an :class:`Unavailable` that names the
reason and the fix (:func:`unavailable`), with nothing retired, removed or
discarded: the same call works once the shortage is over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from collections.abc import Iterator
from typing import Final

from sessiontemp.journal.errors import SessionTempError, Unavailable

__all__ = ["GONE", "SHORTAGES", "fix", "gone", "shortage", "translated", "unavailable"]

# What says an entry is not (or no longer) there under its name.
GONE: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
# What says the process could not do it now, whatever it was done to.  EAGAIN
# is EWOULDBLOCK on Linux: from a non-blocking flock it means "held", which
# the lock's own caller reads first (see sessiontemp._kernel.locks.lock_shared).
SHORTAGES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS,
                              errno.EINTR, errno.EAGAIN})


def gone(error: OSError) -> bool:
    """Whether *error* says the entry is not there (or not what its name used to be)."""
    return error.errno in GONE


def shortage(error: BaseException) -> bool:
    """Whether *error* is a plain OSError saying the process ran short of something."""
    return (isinstance(error, OSError) and not isinstance(error, SessionTempError)
            and error.errno in SHORTAGES)


def fix(error: OSError) -> str:
    """What to do about the shortage *error* reports."""
    if error.errno == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (f"Close descriptors this process no longer needs, or raise its limit "
                f"(`ulimit -n`, now {soft}); then retry: nothing was retired or removed")
    if error.errno == errno.ENFILE:
        return ("The system's file table is full: close files in other processes, or raise "
                "fs.file-max; then retry: nothing was retired or removed")
    if error.errno in (errno.ENOMEM, errno.ENOBUFS):
        return "Free memory; then retry: nothing was retired or removed"
    return "Retry: nothing was retired or removed"


def unavailable(path: os.PathLike[str] | str, what: str, error: OSError) -> Unavailable:
    """The error a caller gets when *what* failed for the shortage *error*."""
    return Unavailable(path, f"{what}: {error.strerror or os.strerror(error.errno or 0)}",
                       fix(error))


@contextlib.contextmanager
def translated(path: os.PathLike[str] | str, what: str) -> Iterator[None]:
    """Turn a shortage raised inside the block into :func:`unavailable`'s error."""
    try:
        yield
    except OSError as e:
        if not shortage(e):
            raise
        raise unavailable(path, what, e) from e
