"""A small driver process for the crash tests: a manager that can be killed at any step.

Run as ``python tests/crashchild.py ROOT [options]``.  It opens a
:class:`sessiontemp.Manager` on ROOT (none with ``--bare``: then the process
holds no journal connection of its own), prints one JSON line saying so, then
reads commands from stdin, one per line, and answers each with one JSON line
on stdout.  The parent therefore always knows what this process holds (its
manager, leases, generation paths, the pids of commands it started) before
it kills it, without guessing with sleeps.

The step hook acts just before the N-th durable step matching ``--at KIND``
(and ``--detail``, a substring of the step's detail, and ``--after``, the kind
of the step just before it).  With ``--then kill`` (the default) it prints
``{"crash": {...}}`` naming the step and kills this process with SIGKILL, from
inside the library.  With ``--then pause`` it prints ``{"paused": {...}}`` and
waits, in the middle of the library's operation, until the parent sends the
line ``go``: the parent interleaves another process's work at that very step.
The hook counts only once armed: by the ``arm`` command, or from the start
with ``--armed`` (then the recovery that opening runs is counted too).

Commands (words separated by spaces)::

    arm                       start counting steps for the crash
    retain | release | rotate | close
    acquire                   -> {"lease", "generation", "path"}
    write LEASE NAME          write a file NAME into the lease's directory
    fill LEASE N              write N files (a third of them in a subdirectory)
    popen LEASE FD            start a command that holds the lease's lock and
                              reads its stdin (the inherited descriptor FD)
                              until end of file  -> {"pid"}
    popen-sleep LEASE SECONDS start ``sleep SECONDS`` under the lease -> {"pid"}
    popen-closing LEASE SECONDS
                              start a command under the lease that closes every
                              descriptor it inherited (the lease's lock with them,
                              as sudo and ssh do), then sleeps SECONDS -> {"pid"}
    cycle N                   acquire and release a lease N times (2N events)
    release-lease LEASE
    recover                   sessiontemp.recover(ROOT) -> the report
    open                      open (and close) another Manager -> its recovery report
                              (both with the same step hook)
    loop SECONDS              acquire, write, rotate, release in a loop for at
                              most SECONDS; answers once after the first round
    exit

A failing command answers ``{"error": "..."}`` and the process goes on.  End of
file on stdin ends the process, so a parent that dies never leaves it behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sessiontemp import Lease, Manager, recover
from sessiontemp._guards.steps import STEP_KINDS, StepKind
from tests.childio import emit, report_json, serve

# A command that holds its inherited descriptors until its stdin reaches end of file.
WAIT_FOR_EOF = "import sys; sys.stdin.buffer.read()"
# A command that lets go of every descriptor it inherited, then runs on.
CLOSE_AND_SLEEP = "import os, sys, time; os.closerange(3, 1024); time.sleep(float(sys.argv[1]))"


class Crasher:
    """The step hook: SIGKILL this process (or pause it) just before the N-th matching step."""

    def __init__(self, kind: StepKind | None, detail: str, after: str | None, nth: int,
                 armed: bool, then: str) -> None:
        self.kind = kind
        self.detail = detail
        self.after = after
        self.nth = nth
        self.armed = armed
        self.then = then
        self.seen = 0
        self.previous: str | None = None

    def __call__(self, kind: StepKind, detail: str) -> None:
        previous, self.previous = self.previous, kind
        if not self.armed or kind != self.kind or self.detail not in detail:
            return
        if self.after is not None and previous != self.after:
            return
        self.seen += 1
        if self.seen != self.nth:
            return
        step = {"kind": kind, "detail": detail, "previous": previous, "nth": self.seen}
        if self.then == "pause":
            emit({"paused": step})
            # The main loop is inside a command, so this thread owns stdin now.
            if sys.stdin.readline().strip() != "go":
                os._exit(3)
            return
        emit({"crash": step})
        os.kill(os.getpid(), signal.SIGKILL)


class Driver:
    def __init__(self, root: Path, crasher: Crasher, *, bare: bool) -> None:
        self.root = root
        self.crasher = crasher
        self._manager = None if bare else Manager(root, step_hook=crasher)
        self.leases: dict[str, Lease] = {}
        self.commands: list[subprocess.Popen[bytes]] = []

    @property
    def manager(self) -> Manager:
        if self._manager is None:
            raise RuntimeError("started with --bare: no manager")
        return self._manager

    def hello(self) -> dict[str, Any]:
        if self._manager is None:
            return {"manager": None, "pid": os.getpid(), "recovery": None}
        return {"manager": self._manager.id, "pid": os.getpid(),
                "recovery": report_json(self._manager.recovery)}

    def lease(self, lease_id: str) -> Lease:
        return self.leases[lease_id]

    def run(self, words: list[str]) -> dict[str, Any]:
        handler: Callable[..., dict[str, Any]] = getattr(self, "do_" + words[0].replace("-", "_"))
        return handler(*words[1:])

    def do_arm(self) -> dict[str, Any]:
        self.crasher.armed = True
        return {}

    def do_retain(self) -> dict[str, Any]:
        self.manager.retain()
        return {}

    def do_release(self) -> dict[str, Any]:
        self.manager.release()
        return {}

    def do_rotate(self) -> dict[str, Any]:
        self.manager.rotate()
        return {}

    def do_close(self) -> dict[str, Any]:
        self.manager.close()
        return {}

    def do_acquire(self) -> dict[str, Any]:
        lease = self.manager.acquire()
        self.leases[lease.id] = lease
        return {"lease": lease.id, "generation": lease.generation, "path": str(lease.path)}

    def do_write(self, lease_id: str, name: str) -> dict[str, Any]:
        path = self.lease(lease_id).path / name
        path.write_text(f"written by {os.getpid()}\n")
        return {"file": str(path)}

    def do_fill(self, lease_id: str, count: str) -> dict[str, Any]:
        top = self.lease(lease_id).path
        sub = top / "sub"
        sub.mkdir(exist_ok=True)
        n = int(count)
        for i in range(n):
            (sub if i % 3 == 0 else top).joinpath(f"file-{i}").write_bytes(b"x" * 64)
        return {"files": n}

    def do_popen(self, lease_id: str, fd: str) -> dict[str, Any]:
        command = self.lease(lease_id).popen([sys.executable, "-c", WAIT_FOR_EOF],
                                             stdin=int(fd), stdout=subprocess.DEVNULL)
        # This process keeps no copy of the pipe: only the command reads it.
        os.close(int(fd))
        self.commands.append(command)
        return {"pid": command.pid}

    def do_popen_sleep(self, lease_id: str, seconds: str) -> dict[str, Any]:
        command = self.lease(lease_id).popen(["sleep", seconds], stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL)
        self.commands.append(command)
        return {"pid": command.pid}

    def do_popen_closing(self, lease_id: str, seconds: str) -> dict[str, Any]:
        command = self.lease(lease_id).popen([sys.executable, "-c", CLOSE_AND_SLEEP, seconds],
                                             stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL)
        self.commands.append(command)
        return {"pid": command.pid}

    def do_cycle(self, count: str) -> dict[str, Any]:
        for _ in range(int(count)):
            self.manager.acquire().release()
        return {}

    def do_release_lease(self, lease_id: str) -> dict[str, Any]:
        self.leases.pop(lease_id).release()
        return {}

    def do_recover(self) -> dict[str, Any]:
        return report_json(recover(self.root, busy_timeout=10.0, step_hook=self.crasher))

    def do_open(self) -> dict[str, Any]:
        with Manager(self.root, busy_timeout=10.0, step_hook=self.crasher) as other:
            return {"manager": other.id, **report_json(other.recovery)}

    def do_loop(self, seconds: str) -> dict[str, Any]:
        deadline = time.monotonic() + float(seconds)
        rounds = 0
        while time.monotonic() < deadline:
            kept = self.manager.acquire()
            for i in range(5):
                (kept.path / f"file-{i}").write_bytes(b"y" * 128)
            if rounds % 2:
                self.manager.rotate()
            second = self.manager.acquire()
            kept.release()
            second.release()
            rounds += 1
            if rounds == 1:
                emit({"looping": True})
        return {"rounds": rounds}

    def do_exit(self) -> dict[str, Any]:
        emit({})
        sys.stdout.flush()
        os._exit(0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", type=Path)
    parser.add_argument("--at", choices=STEP_KINDS, default=None,
                        help="the kind of step to kill (or pause) this process at")
    parser.add_argument("--detail", default="", help="substring of the step's detail")
    parser.add_argument("--after", choices=STEP_KINDS, default=None,
                        help="only count steps right after a step of this kind")
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--armed", action="store_true",
                        help="count steps from the start, the open's recovery included")
    parser.add_argument("--then", choices=("kill", "pause"), default="kill")
    parser.add_argument("--bare", action="store_true",
                        help="open no manager: only recover and open work")
    args = parser.parse_args(argv)
    crasher = Crasher(args.at, args.detail, args.after, args.nth, args.armed, args.then)
    driver = Driver(args.root, crasher, bare=args.bare)
    emit(driver.hello())
    serve(driver.run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
