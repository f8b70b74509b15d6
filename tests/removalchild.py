"""A driver process for the removal tests: a manager run as another user, step by step.

Run as ``python -m tests.removalchild ROOT [--uid UID]``.  With ``--uid`` the
process drops to that uid and gid before it opens anything (the library is
imported first, as the caller: the interpreter's own files may not be
readable by the other user).  It reads one JSON command a line on stdin and
answers each with one JSON line on stdout, so the test (as root) can change
the file system between two steps: mount something inside a generation, or
plant a subtree owned by a third user.

Commands (``{"do": NAME, ...}``)::

    open                  open a Manager on ROOT and retain it -> {"manager"}
    acquire               -> {"lease", "generation", "path"}
    tree LEASE OPS        apply OPS in the lease's directory, in order: each
                          ["mkdir", REL, MODE], ["file", REL, MODE],
                          ["chmod", REL, MODE], ["symlink", REL, TARGET] or
                          ["link", REL, TARGET] (a hard link)
    release LEASE | rotate | close
    hold LEASE            start ``sleep 600`` on the lease (it inherits the
                          lease's lock) -> {"pid"}
    fail NTH              the NTH unlink from now on raises OSError(EIO)
    recover               sessiontemp.recover(ROOT) -> the report
    logs                  the warnings and errors logged since the last ``logs``
    crash                 end the process at once (os._exit), the manager open

Every log event is captured (structlog.testing.capture_logs) from the start.
A failing command answers ``{"error": ...}`` and the process goes on.
"""

from __future__ import annotations

import argparse
import errno
import importlib.metadata  # noqa: F401 - imported while the files are still readable
import json
import os
import subprocess
import sys
import traceback
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import sqlite_utils.plugins
from structlog.testing import capture_logs

from sessiontemp import Lease, Manager, recover
from sessiontemp._guards.steps import StepKind
from tests.childio import emit, report_json

sqlite_utils.plugins.ensure_plugins_loaded()


class Failer:
    """The step hook: raise OSError(EIO) just before the N-th unlink once armed."""

    def __init__(self) -> None:
        self.left = 0

    def __call__(self, kind: StepKind, detail: str) -> None:
        if kind != "unlink" or self.left <= 0:
            return
        self.left -= 1
        if self.left == 0:
            raise OSError(errno.EIO, "failed on purpose before an unlink", detail)


class Driver:
    def __init__(self, root: Path, logs: list[MutableMapping[str, Any]]) -> None:
        self.root = root
        self.logs = logs
        self.failer = Failer()
        self.manager: Manager | None = None
        self.leases: dict[str, Lease] = {}

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        do = command.pop("do")
        result: dict[str, Any] = getattr(self, f"do_{do}")(**command)
        return result

    def do_open(self) -> dict[str, Any]:
        self.manager = Manager(self.root, step_hook=self.failer)
        self.manager.retain()
        return {"manager": self.manager.id}

    def do_acquire(self) -> dict[str, Any]:
        assert self.manager is not None
        lease = self.manager.acquire()
        self.leases[lease.id] = lease
        return {"lease": lease.id, "generation": lease.generation, "path": str(lease.path)}

    def do_tree(self, lease: str, ops: list[list[Any]]) -> dict[str, Any]:
        top = self.leases[lease].path
        for op, rel, arg in ops:
            path = top / rel
            if op == "mkdir":
                path.mkdir()
                path.chmod(arg)
            elif op == "file":
                path.write_text(f"{rel}\n")
                path.chmod(arg)
            elif op == "chmod":
                path.chmod(arg)
            elif op == "symlink":
                path.symlink_to(arg)
            elif op == "link":
                os.link(arg, path)
            else:
                raise ValueError(f"unknown tree op {op!r}")
        return {}

    def do_hold(self, lease: str) -> dict[str, Any]:
        command = self.leases[lease].popen(["sleep", "600"], stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL)
        return {"pid": command.pid}

    def do_release(self, lease: str) -> dict[str, Any]:
        self.leases.pop(lease).release()
        return {}

    def do_rotate(self) -> dict[str, Any]:
        assert self.manager is not None
        self.manager.rotate()
        return {}

    def do_close(self) -> dict[str, Any]:
        assert self.manager is not None
        self.manager.close()
        return {}

    def do_fail(self, nth: int) -> dict[str, Any]:
        self.failer.left = nth
        return {}

    def do_recover(self) -> dict[str, Any]:
        return report_json(recover(self.root, busy_timeout=10.0))

    def do_logs(self) -> dict[str, Any]:
        said = [{k: str(v) for k, v in e.items()} for e in self.logs
                if e.get("log_level") in ("warning", "error")]
        self.logs.clear()
        return {"logs": said}

    def do_crash(self) -> dict[str, Any]:
        sys.stdout.flush()
        os._exit(0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", type=Path)
    parser.add_argument("--uid", type=int, default=None,
                        help="drop to this uid (and the same gid) first")
    args = parser.parse_args(argv)
    if args.uid is not None:
        os.setgroups([])
        os.setgid(args.uid)
        os.setuid(args.uid)
    with capture_logs() as logs:
        driver = Driver(args.root, logs)
        emit({"pid": os.getpid(), "uid": os.getuid()})
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            try:
                reply = driver.run(command)
            except Exception as e:  # answered, so the test sees what went wrong
                emit({"error": f"{command}: {e!r}", "traceback": traceback.format_exc()})
            else:
                emit(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
