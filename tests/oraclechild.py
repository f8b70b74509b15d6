"""A worker of the retention oracle (tests/oracle.py): one real process, stepped by the test.

Run as ``python tests/oraclechild.py ROOT RETENTION TIME [options]`` (forked
from the zygote).  RETENTION is ``off`` (the default retention, which a
workload this small never reaches) or ``eager`` (``Retention(0, 0, 0)``);
TIME is the clock's first reading.  The clock is the test's: every command
starts with the time it is to read (``T WORD ARGS...``), so the events both
runs of a workload journal carry the same times, and a resume window or a
space refusal's repeat falls at the same step in both.

With ``--bare`` it opens no manager and runs the passes a program runs on a
root it has no manager of: ``recover``, ``remove-session``,
``remove-artifact``.  ``recover pause`` stops the pass just before its first
checkpoint (the point where, under ``Retention(0, 0, 0)``, it rolls over and
retires the segment it replayed), answers ``{"paused": ...}`` and waits for
the line ``go``: the test steps other workers meanwhile.  A pass that writes
no checkpoint does not stop; both runs of a workload write theirs at the
same events (every 100), so both stop, or neither.

Otherwise it opens a :class:`sessiontemp.Manager` (``--session NAME``,
``--fresh`` for ``resume=False``, ``--max-bytes N``), answers with its id,
its recovery pass's report and whether it resumed, then serves commands,
one JSON line each: ``retain``, ``release``, ``rotate``, ``acquire``,
``write LEASE BYTES``, ``measure``, ``command LEASE`` (a command started
with ``lease.popen`` that closes every inherited descriptor, as sudo or a
daemon does, and says so before this answers: ``{"pid"}``), ``reap PID``,
``release-lease LEASE``, ``keep LEASE LABEL``, ``churn ROUNDS`` (an acquire
and a release per round), ``close``.  A refusal by the library is an answer
(``{"refused": "OverBudget"}``), not a failure.  End of file on stdin ends
the process.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sessiontemp import (
    DEFAULT_RETENTION,
    Lease,
    Manager,
    Retention,
    SessionTempError,
    recover,
    remove_artifact,
    remove_session,
)
from sessiontemp._guards.steps import StepKind
from tests.childio import commands, emit, report_json

RETENTIONS = {"off": DEFAULT_RETENTION, "eager": Retention(0, 0, 0)}
# A named session's dead owner's directory is kept this long (test seconds).
RESUME_WINDOW = 50.0
# Closes every descriptor it inherited (the lease's lock among them), says so on
# its stdout, and runs until it is killed.
CLOSING_COMMAND = ("import os, sys, time; os.closerange(3, 1 << 16); "
                   "sys.stdout.write('closed\\n'); sys.stdout.flush(); time.sleep(3600)")


class Clock:
    """The test's time: set by each command, read by the library."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class PauseAtCheckpoint:
    """A step hook that stops a recovery pass just before its first checkpoint, when armed."""

    def __init__(self, clock: Clock) -> None:
        self.armed = False
        self.clock = clock

    def __call__(self, kind: StepKind, detail: str) -> None:
        if not self.armed or kind != "checkpoint":
            return
        self.armed = False
        emit({"paused": detail})
        # The main loop is inside the command: this thread owns stdin now.
        # The line is ``TIME go``: the pass goes on at the test's time.
        words = sys.stdin.readline().split()
        if words[1:] != ["go"]:
            os._exit(3)
        self.clock.now = float(words[0])


class Worker:
    def __init__(self, args: argparse.Namespace, clock: Clock) -> None:
        self.root: Path = args.root
        self.retention = RETENTIONS[args.retention]
        self.clock = clock
        self.pause = PauseAtCheckpoint(clock)
        self.leases: dict[str, Lease] = {}
        self.commands: dict[int, subprocess.Popen[bytes]] = {}
        self.manager: Manager | None = None
        if not args.bare:
            self.manager = Manager(
                self.root, clock=clock, retention=self.retention, session=args.session,
                resume=not args.fresh, resume_window=RESUME_WINDOW, max_bytes=args.max_bytes,
                measure_every=math.inf, busy_timeout=30.0)

    def hello(self) -> dict[str, Any]:
        if self.manager is None:
            return {"pid": os.getpid()}
        return {"pid": os.getpid(), "manager": self.manager.id, "resumed": self.manager.resumed,
                "recovery": report_json(self.manager.recovery)}

    def run(self, words: list[str]) -> dict[str, Any]:
        self.clock.now = float(words[0])
        handler: Callable[..., dict[str, Any]] = getattr(self, "do_" + words[1].replace("-", "_"))
        try:
            return handler(*words[2:])
        except SessionTempError as e:
            return {"refused": type(e).__name__}

    @property
    def own(self) -> Manager:
        assert self.manager is not None, "started with --bare"
        return self.manager

    def do_retain(self) -> dict[str, Any]:
        self.own.retain()
        return {}

    def do_release(self) -> dict[str, Any]:
        self.own.release()
        return {}

    def do_rotate(self) -> dict[str, Any]:
        self.own.rotate()
        return {}

    def do_acquire(self) -> dict[str, Any]:
        lease = self.own.acquire(label=f"step-{self.clock.now:g}")
        self.leases[lease.id] = lease
        return {"lease": lease.id, "generation": lease.generation}

    def do_write(self, lease: str, size: str) -> dict[str, Any]:
        directory = self.leases[lease].path
        name = f"file-{len(os.listdir(directory))}"
        (directory / name).write_bytes(b"x" * int(size))
        return {}

    def do_measure(self) -> dict[str, Any]:
        usage = self.own.measure()
        return {"bytes": usage.bytes, "inodes": usage.inodes}

    def do_command(self, lease: str) -> dict[str, Any]:
        command = self.leases[lease].popen([sys.executable, "-c", CLOSING_COMMAND],
                                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL)
        # Answered only once the command let go of the lock it inherited:
        # from here on only the journal's record of it protects the directory.
        assert command.stdout is not None
        assert command.stdout.readline() == b"closed\n"
        command.stdout.close()
        self.commands[command.pid] = command
        return {"pid": command.pid}

    def do_reap(self, pid: str) -> dict[str, Any]:
        self.commands.pop(int(pid)).wait()
        return {}

    def do_release_lease(self, lease: str) -> dict[str, Any]:
        self.leases.pop(lease).release()
        return {}

    def do_keep(self, lease: str, label: str) -> dict[str, Any]:
        held = self.leases[lease]
        (held.path / "result.bin").write_bytes(label.encode() * 10)
        artifact = held.keep("result.bin", label)
        return {"artifact": artifact.id}

    def do_churn(self, rounds: str) -> dict[str, Any]:
        for _ in range(int(rounds)):
            self.own.acquire(label="churn").release()
        return {}

    def do_close(self) -> dict[str, Any]:
        self.own.close()
        return {}

    def do_recover(self, how: str = "") -> dict[str, Any]:
        self.pause.armed = how == "pause"
        try:
            return report_json(recover(self.root, clock=self.clock, retention=self.retention,
                                       step_hook=self.pause, busy_timeout=30.0))
        finally:
            self.pause.armed = False

    def do_remove_session(self, name: str) -> dict[str, Any]:
        return report_json(remove_session(self.root, name, clock=self.clock,
                                          busy_timeout=30.0))

    def do_remove_artifact(self, artifact: str) -> dict[str, Any]:
        return {"removed": remove_artifact(self.root, artifact, clock=self.clock,
                                           busy_timeout=30.0)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", type=Path)
    parser.add_argument("retention", choices=sorted(RETENTIONS))
    parser.add_argument("time", type=float)
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--session", default=None)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--max-bytes", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        worker = Worker(args, Clock(args.time))
    except SessionTempError as e:
        emit({"refused": type(e).__name__})
        return 0
    emit(worker.hello())
    for words in commands():
        try:
            reply = worker.run(words)
        except Exception as e:  # answered, so the test shows what went wrong in here
            emit({"error": f"{words[1]}: {e!r}", "traceback": traceback.format_exc()})
        else:
            emit(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
