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

The library's own Python children (the session holder, the measuring
child) are started here too, by :func:`python_child`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Final

__all__ = ["python_child", "running", "start_time", "state", "users"]

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


# A child's first lines: the directories it is told go after the standard
# library's (a site directory's pathlib.py from PyPI must not shadow the
# real one) and before the site directories (a copy of the library on
# PYTHONPATH is the one this process runs, not an older one installed
# beside it).
_PATHS: Final = (
    "import json, os, sys\n"
    "stdlib = os.path.dirname(os.__file__)\n"
    "at = 1 + max(i for i, p in enumerate(sys.path) if p == stdlib or "
    "p.startswith(stdlib + os.sep))\n"
    "sys.path[at:at] = [p for p in json.loads(sys.argv[1]) if p not in sys.path]\n"
)
# What a child's environment keeps of this process's: the locale, so that
# it decodes names as this process does, and the loader's path, in case the
# interpreter itself needs it.  Nothing else reaches it.
_KEPT: Final = ("LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH")


def python_child(code: str, packages: Iterable[ModuleType], *args: str
                 ) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of an isolated interpreter running *code*.

    Started isolated (``-I``: neither its working directory, nor
    PYTHONPATH, nor the user's site directory on its path), it imports the
    library and *packages* from where this process found them, and reads
    *args* as ``sys.argv[2:]``: the working directory, PYTHONPATH and the
    environment are the library's choice, not the caller's (a ``json.py``
    in a shared working directory would otherwise run as the caller's user).
    """
    options = ["-I"]
    if sys.flags.dont_write_bytecode:
        options.append("-B")
    # The same file-name decoding as this process, whatever the locale says.
    options += ["-X", f"utf8={sys.flags.utf8_mode}"]
    # Each file lies in its package's directory, which lies in the one to name.
    files = (__file__, *(package.__file__ for package in packages))
    where = list(dict.fromkeys(os.fspath(Path(os.path.abspath(f)).parents[1]) for f in files
                               if f is not None))
    command = [sys.executable, *options, "-c", _PATHS + code, json.dumps(where), *args]
    return command, {name: os.environ[name] for name in _KEPT if name in os.environ}
