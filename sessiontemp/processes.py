"""Commands that use a generation without holding its lock.

The lease's lock descriptors are the first liveness signal, but a command can
close them: sudo, ssh and daemonizing tools close every descriptor they
inherit (``closerange(3, ...)``) and run on.  So each command a lease
starts is journaled by pid *and start time* (the pair names one process for
good, where a pid alone is soon reused), and before a generation is
removed its recorded commands are looked up in ``/proc``; when none runs
any more but some were recorded, ``/proc`` is also scanned for a process
whose working directory lies in the generation or whose environment points
TMPDIR, TMP or TEMP at it (a daemon the command left behind).

What stays undefended: a process that closed the descriptor, was not
started through a lease, and neither works in the directory nor names it in
its initial environment; and processes of other users, whose ``/proc``
entries cannot be read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

__all__ = ["running", "start_time", "state", "users"]

_TEMP_VARIABLES: Final = (b"TMPDIR=", b"TMP=", b"TEMP=")


def start_time(pid: int) -> int | None:
    """The start time of process *pid* in clock ticks since boot; None if it does not run."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: fields
    # are counted after its last ")".  The state is field 3, starttime 22.
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X") and not _threads_left(pid):
        # Exited, waiting only to be reaped: it uses nothing any more.
        return None
    return int(fields[19])


def state(pid: int) -> str | None:
    """The state letter of process *pid* (``R`` running, ``S`` sleeping, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(b")") + 2:].split()[0].decode()


def _threads_left(pid: int) -> bool:
    """Whether threads of *pid* still run though its main thread has exited.

    A main thread that ends on its own (``pthread_exit``) shows the whole
    process as a zombie in ``/proc/PID/stat`` while its other threads work
    on; the process is gone only when its thread list holds the main thread
    alone.
    """
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (FileNotFoundError, ProcessLookupError):
        return False


def running(commands: Iterable[str]) -> list[int]:
    """The pids of the recorded ``"pid:started"`` commands that still run."""
    alive = []
    for key in commands:
        pid, _, started = key.partition(":")
        if start_time(int(pid)) == int(started):
            alive.append(int(pid))
    return alive


def users(path: str, *, exclude: int) -> list[int]:
    """Processes other than *exclude* working in *path* or pointing their temp variables at it.

    Reads ``/proc/*/cwd`` and ``/proc/*/environ``: tens of microseconds a
    process (BENCHMARKS.md, "The /proc scan"), which is why it runs only
    when a removal is due and the generation had commands recorded.
    """
    targets = {os.fsencode(path), os.fsencode(os.path.realpath(path))}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == exclude:
            continue
        try:
            cwd = os.fsencode(os.readlink(f"/proc/{entry.name}/cwd"))
            if any(cwd == t or cwd.startswith(t + b"/") for t in targets):
                found.append(int(entry.name))
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            # Gone meanwhile, or another user's: neither can be told apart
            # from the outside, and neither is ours to wait for.  Any other
            # error (out of descriptors, say) tells nothing of the process:
            # raised, so that the removal waits for a later pass.
            continue
        if any(
            var.startswith(prefix) and (value := var[len(prefix):]) and any(
                value == t or value.startswith(t + b"/") for t in targets
            )
            for var in environ
            for prefix in _TEMP_VARIABLES
        ):
            found.append(int(entry.name))
    return found
