"""The retention oracle's driver: one workload of real processes, run the same way on any root.

A workload is a list of :class:`Step` (drawn by ``tests/strategies.py``
``oracle_workloads``).  :func:`run_workload` plays it on a fresh root with
the journal's retention off (the default retention, which a workload this
small never reaches) or eager (``Retention(0, 0, 0)``: every checkpoint
rolls over and every sealed segment is deleted at once), stepping its
processes (``tests/oraclechild.py``) one at a time in the workload's order:
up to three managers (named sessions or not, with a budget or not), a bare
process for standalone recovery passes, and the commands the managers start
with ``lease.popen``, which close every descriptor they inherit.  Nothing
runs concurrently except where a step says so: a recovery pass paused just
before its first checkpoint while later steps run, until ``resume``.  The
clock is the test's (each step is ten seconds), so both runs journal the
same times.

What it gives is a transcript: per step, what the processes answered
(every recovery pass's report among them) and, at each ``inspect`` step and
at the end, what every reader says about the present (:func:`present`).
Ids, pids and paths differ between two roots; the transcript names each by
the order it was first learned in (``M1``, ``G2``, ``L3``, ``P1``,
``A1``, ``ROOT``), so two runs of one workload give equal transcripts when
they made the same decisions and say the same things.  A step that cannot
apply (no such worker, no lease to write into, a paused pass that a named
open would wait for) is skipped, the same way in both runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import attrs

from tests import zygote
from tests.childio import CutShort, JsonLines

__all__ = ["KINDS", "SESSIONS", "RetentionMode", "Step", "Transcript", "run_workload"]

CHILD: Final = Path(__file__).with_name("oraclechild.py")
TIMEOUT: Final = 60.0
SLOTS: Final = 3
SESSIONS: Final = ("s0", "s1")
# The test's clock: where it starts (a moment in 2027), and how far each step
# moves it.  Steps of ten seconds keep the resume window (50 s) a few steps long
# and history far younger than the default retention's 30 days.
EPOCH: Final = 1_800_000_000.0
TICK: Final = 10.0
# A budget a few written files exceed, once measured.
BUDGET: Final = 64 * 1024

Kind: TypeAlias = Literal[
    "open", "retain", "release", "rotate", "acquire", "write", "measure", "command",
    "end-command", "release-lease", "keep", "remove-artifact", "kill", "close", "churn",
    "recover", "pause", "resume", "remove-session", "wait", "inspect",
]
KINDS: Final[tuple[Kind, ...]] = (
    "open", "retain", "release", "rotate", "acquire", "write", "measure", "command",
    "end-command", "release-lease", "keep", "remove-artifact", "kill", "close", "churn",
    "recover", "pause", "resume", "remove-session", "wait", "inspect",
)
RetentionMode: TypeAlias = Literal["off", "eager"]
Transcript: TypeAlias = list[tuple[str, Any]]


@attrs.frozen
class Step:
    """One step: *kind* on worker *slot*, with a number *n* (a lease's, a size, a session's)."""

    kind: Kind
    slot: int = 0
    n: int = 0
    flag: bool = False

    def __str__(self) -> str:
        return f"{self.kind}(slot={self.slot}, n={self.n}, flag={self.flag})"


# -- naming what differs between two roots ----------------------------------------------

_TOKEN = re.compile(r"\b(?:[0-9a-f]{32}|[0-9a-f]{16}|[a-z2-7]{16})\b")
_NAME = re.compile(r"[A-Z]\d+")
# A list of names in a sentence ("held by L3, L1, L4"): in the order of their ids.
_NAMES_LISTED = re.compile(r"[A-Z]\d+(?:, [A-Z]\d+)+")


class Names:
    """Each id, pid and path learned, named by its kind and the order it was learned in."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def learn(self, kind: str, raw: object) -> str:
        key = str(raw)
        if key not in self.names:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.names[key] = f"{kind}{self.counts[kind]}"
        return self.names[key]

    def text(self, text: str) -> str:
        text = text.replace(self.root, "ROOT")
        # An id nobody learned (a recovery pass's) is named by its kind alone.
        text = _TOKEN.sub(lambda m: self.names.get(m.group(0), "?"), text)
        for raw, name in self.names.items():
            if raw.isdigit():
                text = re.sub(rf"\b{raw}\b", name, text)
        return _NAMES_LISTED.sub(lambda m: ", ".join(sorted(m.group(0).split(", "))), text)

    def json(self, value: Any) -> Any:
        """*value* with every id, pid and path named, and every dict key too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            named = [self.json(v) for v in value]
            # A list of ids (a generation's leases, a manager's generations) is
            # in the order of the ids: in the order of their names here.
            if named and all(isinstance(v, str) and _NAME.fullmatch(v) for v in named):
                return sorted(named)
            return named
        if isinstance(value, dict):
            return {self.text(k): self.json(v) for k, v in value.items()}
        return value


# -- the processes --------------------------------------------------------------------


class Process:
    """One oraclechild, and the line-by-line conversation with it."""

    def __init__(self, args: list[str]) -> None:
        self.proc = zygote.shared("sessiontemp", "tests.childio").start(CHILD, args)
        assert self.proc.stdout is not None
        self.lines = JsonLines(self.proc.stdout.fileno())
        self.hello = self.read("starting")

    def read(self, doing: str) -> dict[str, Any]:
        try:
            message = self.lines.read(TIMEOUT)
        except (TimeoutError, CutShort) as e:
            raise AssertionError(f"oraclechild {self.proc.pid}: {e} while {doing}: "
                                 f"{self.stderr()}") from e
        if message is None or "traceback" in message:
            raise AssertionError(f"oraclechild {self.proc.pid} failed while {doing}: "
                                 f"{message}\n{self.stderr()}")
        return message

    def stderr(self) -> str:
        self.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-4000:]

    def tell(self, now: float, *words: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((" ".join([repr(now), *words]) + "\n").encode())
        self.proc.stdin.flush()

    def ask(self, now: float, *words: str) -> dict[str, Any]:
        self.tell(now, *words)
        return self.read(" ".join(words))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def end(self) -> None:
        """End of input (a paused pass takes it as its cue to stop), then reaped."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@attrs.define
class Worker:
    process: Process
    manager: str
    session: str | None
    # Held leases, in the order acquired: (lease id, generation id).
    leases: list[tuple[str, str]] = attrs.Factory(list)


@attrs.define
class Command:
    pid: int
    pidfd: int
    # The worker that started it while it lives (it reaps it), else None.
    parent: Worker | None


class Run:
    """One workload played on one root."""

    def __init__(self, root: Path, retention: RetentionMode) -> None:
        self.root = root
        self.retention = retention
        self.names = Names(root)
        self.step_index = 0
        self.workers: dict[int, Worker] = {}
        self.commands: list[Command] = []
        self.artifacts: list[str] = []
        self.bare: Process | None = None
        self.paused = False
        self.transcript: Transcript = []

    @property
    def now(self) -> float:
        return EPOCH + TICK * self.step_index

    def note(self, what: str, answer: Any) -> None:
        self.transcript.append((what, self.names.json(answer)))

    def start_bare(self) -> Process:
        if self.bare is None:
            self.bare = Process([str(self.root), self.retention, repr(self.now), "--bare"])
        return self.bare

    def report(self, answer: dict[str, Any]) -> dict[str, Any]:
        """A pass's report, its lists in an order that does not depend on ids."""
        return {"ran": answer["ran"], "dead": sorted(self.names.json(answer["dead"])),
                "removed": sorted(self.names.json(answer["removed"])),
                "skipped": sorted(self.names.json(answer["skipped"]))}

    # -- the steps --------------------------------------------------------------------

    def play(self, step: Step) -> None:
        self.step_index += 1
        handler = getattr(self, "step_" + step.kind.replace("-", "_"))
        answer = handler(step)
        if answer is not None:
            self.note(str(step), answer)

    def worker(self, step: Step) -> Worker | None:
        return self.workers.get(step.slot % SLOTS)

    def lease(self, worker: Worker, step: Step) -> str | None:
        if not worker.leases:
            return None
        return worker.leases[step.n % len(worker.leases)][0]

    def step_open(self, step: Step) -> Any:
        slot = step.slot % SLOTS
        if slot in self.workers:
            return None
        session = None if step.n % 3 == 0 else SESSIONS[step.n % 3 - 1]
        if session is not None and self.paused:
            return None  # its pass would wait for the paused one
        args = [str(self.root), self.retention, repr(self.now)]
        if session is not None:
            args += ["--session", session] + (["--fresh"] if step.flag else [])
        elif step.flag:
            args += ["--max-bytes", str(BUDGET)]
        process = Process(args)
        hello = process.hello
        if "refused" in hello:
            process.end()
            return {"refused": hello["refused"]}
        manager = self.names.learn("M", hello["manager"])
        self.names.learn("P", hello["pid"])
        self.workers[slot] = Worker(process, hello["manager"], session)
        return {"manager": manager, "resumed": hello["resumed"],
                "recovery": self.report(hello["recovery"])}

    def simple(self, step: Step, *words: str) -> Any:
        worker = self.worker(step)
        if worker is None:
            return None
        return worker.process.ask(self.now, *words)

    def step_retain(self, step: Step) -> Any:
        return self.simple(step, "retain")

    def step_release(self, step: Step) -> Any:
        return self.simple(step, "release")

    def step_rotate(self, step: Step) -> Any:
        return self.simple(step, "rotate")

    def step_measure(self, step: Step) -> Any:
        return self.simple(step, "measure")

    def step_churn(self, step: Step) -> Any:
        # 10 to 60 rounds of two events: enough for a pass's checkpoint to fall due.
        return self.simple(step, "churn", str(10 * (1 + step.n % 6)))

    def step_acquire(self, step: Step) -> Any:
        worker = self.worker(step)
        if worker is None:
            return None
        answer = worker.process.ask(self.now, "acquire")
        if "lease" in answer:
            self.names.learn("G", answer["generation"])
            self.names.learn("L", answer["lease"])
            worker.leases.append((answer["lease"], answer["generation"]))
        return answer

    def step_write(self, step: Step) -> Any:
        worker = self.worker(step)
        lease = None if worker is None else self.lease(worker, step)
        if worker is None or lease is None:
            return None
        return worker.process.ask(self.now, "write", lease, str(4096 * (1 + step.n % 8)))

    def step_command(self, step: Step) -> Any:
        worker = self.worker(step)
        lease = None if worker is None else self.lease(worker, step)
        if worker is None or lease is None or len(self.commands) >= 4:
            return None
        answer = worker.process.ask(self.now, "command", lease)
        if "pid" not in answer:
            return answer
        pid = answer["pid"]
        # Opened while its parent has not reaped it: the pid is the command's.
        self.commands.append(Command(pid, os.pidfd_open(pid), worker))
        return {"command": self.names.learn("C", pid)}

    def step_end_command(self, step: Step) -> Any:
        if not self.commands:
            return None
        command = self.commands.pop(step.n % len(self.commands))
        self.end_command(command)
        return {"ended": self.names.text(str(command.pid))}

    def end_command(self, command: Command) -> None:
        """SIGKILL the command, and wait until it is reaped (by its worker, or by init)."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(command.pidfd, signal.SIGKILL)
        os.close(command.pidfd)
        if command.parent is not None:
            command.parent.process.ask(self.now, "reap", str(command.pid))
            return
        # Orphaned: init reaps it.  Until then it is a zombie whose start
        # time a recovery pass could still match, so wait for it to go.
        deadline = time.monotonic() + TIMEOUT
        while os.path.exists(f"/proc/{command.pid}"):
            assert time.monotonic() < deadline, f"command {command.pid} was never reaped"
            time.sleep(0.005)

    def step_release_lease(self, step: Step) -> Any:
        worker = self.worker(step)
        lease = None if worker is None else self.lease(worker, step)
        if worker is None or lease is None:
            return None
        worker.leases = [held for held in worker.leases if held[0] != lease]
        return worker.process.ask(self.now, "release-lease", lease)

    def step_keep(self, step: Step) -> Any:
        worker = self.worker(step)
        lease = None if worker is None else self.lease(worker, step)
        if worker is None or lease is None:
            return None
        answer = worker.process.ask(self.now, "keep", lease, f"step-{self.step_index}")
        if "artifact" in answer:
            self.names.learn("A", answer["artifact"])
            self.artifacts.append(answer["artifact"])
        return answer

    def step_remove_artifact(self, step: Step) -> Any:
        if not self.artifacts or self.paused:
            return None
        artifact = self.artifacts.pop(step.n % len(self.artifacts))
        return self.start_bare().ask(self.now, "remove-artifact", artifact)

    def step_kill(self, step: Step) -> Any:
        worker = self.workers.get(step.slot % SLOTS)
        if worker is None:
            return None
        worker.process.kill()
        self.leave(step.slot % SLOTS)
        return {"killed": self.names.text(worker.manager)}

    def leave(self, slot: int) -> None:
        """Worker *slot*'s process ends (killed, or at the end of its input)."""
        worker = self.workers.pop(slot)
        worker.process.end()
        for command in self.commands:
            if command.parent is worker:
                command.parent = None

    def step_close(self, step: Step) -> Any:
        worker = self.worker(step)
        if worker is None:
            return None
        answer = worker.process.ask(self.now, "close")
        # The process ends with its manager; its commands run on, orphaned.
        self.leave(step.slot % SLOTS)
        return answer

    def step_recover(self, step: Step) -> Any:
        if self.paused:
            return None
        return self.report(self.start_bare().ask(self.now, "recover"))

    def step_pause(self, step: Step) -> Any:
        if self.paused:
            return None
        answer = self.start_bare().ask(self.now, "recover", "pause")
        if "paused" in answer:
            self.paused = True
            return {"paused": True}
        return {"paused": False, "report": self.report(answer)}

    def step_resume(self, step: Step) -> Any:
        if not self.paused:
            return None
        self.paused = False
        assert self.bare is not None
        return self.report(self.bare.ask(self.now, "go"))

    def step_remove_session(self, step: Step) -> Any:
        if self.paused:
            return None
        answer = self.start_bare().ask(self.now, "remove-session", SESSIONS[step.n % 2])
        return answer if "refused" in answer else self.report(answer)

    def step_wait(self, step: Step) -> Any:
        # Past every resume window.
        self.step_index += 10
        return None

    def step_inspect(self, step: Step) -> Any:
        return present(self.root, self.names)

    def finish(self) -> None:
        """Let a paused pass go, end every command and process."""
        if self.paused:
            self.note("resumed at the end", self.step_resume(Step("resume")))
        for command in self.commands:
            self.end_command(command)
        self.commands.clear()
        for worker in self.workers.values():
            worker.process.kill()
            worker.process.end()
        self.workers.clear()
        if self.bare is not None:
            self.bare.end()
            self.bare = None

    def abandon(self) -> None:
        """After a failure: SIGKILL every process and command left, asking nothing of them."""
        for command in self.commands:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(command.pidfd, signal.SIGKILL)
            os.close(command.pidfd)
        self.commands.clear()
        processes = [w.process for w in self.workers.values()]
        if self.bare is not None:
            processes.append(self.bare)
        for process in processes:
            process.kill()
            process.end()
        self.workers.clear()
        self.bare = None


# -- what the readers say about the present ------------------------------------------


def inspect_json(*args: str | Path) -> tuple[int, Any]:
    done = zygote.journal_inspect(*args)
    assert done.returncode in (0, 1), f"journal-inspect {args}: {done.stderr}"
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def present(root: Path, names: Names) -> dict[str, Any]:
    """What every reader says of the present, in a form that does not depend on ids.

    Only what the present decides is kept: history a retention may retire
    (event counts, managers that ended, removals that finished, first
    times) and what differs between roots (pids, free space) is left out.
    """
    seen: dict[str, Any] = {}
    status, summary = inspect_json("--root", root, "summary", "--json")
    seen["summary"] = {
        "status": status,
        "managers": {k: summary["managers"][k] for k in
                     ("running", "live", "gone", "unknown", "sealed", "owners")},
        "running": sorted(
            ({k: v for k, v in m.items() if k not in ("pid", "opened_at", "opened_seq")}
             for m in names.json(summary["running_managers"])), key=repr),
        "generations": {k: summary["generations"][k] for k in
                        ("live", "retired", "removal_pending", "leases_held",
                         "held_by_commands")},
        "held": sorted(names.json(summary["held"])),
        "verify": summary["verify"]["ok"],
        "artifacts": summary["artifacts"]["kept"],
        "space": {k: names.json(summary["space"][k]) for k in
                  ("measured", "bytes", "inodes", "largest", "largest_bytes")},
    }
    status, live = inspect_json("--root", root, "state", "--live", "--json")
    seen["state --live"] = {"status": status, **_state_present(names, live, whole=False)}
    status, whole = inspect_json("--root", root, "state", "--json")
    seen["state"] = {"status": status, **_state_present(names, whole, whole=True)}
    status, usage = inspect_json("--root", root, "usage", "--json")
    seen["usage"] = {
        "status": status,
        "directories": sorted(
            # Not the leases ever taken on it nor their labels, nor its refusals:
            # counts of events, which retired history no longer holds; nor whether
            # its creation predates the kept history, which is where retention left it.
            ({k: v for k, v in d.items()
              if k not in ("pid", "leases", "labels", "refused", "refused_at",
                           "before_history")}
             for d in names.json(usage["directories"])), key=repr),
        "problems": sorted(p["check"] for p in usage["problems"]),
    }
    status, verify = inspect_json("--root", root, "verify", "--json")
    seen["verify"] = {"status": status, "ok": verify["ok"],
                      "problems": sorted(p["check"] for p in verify["problems"])}
    status, fsck = inspect_json("--root", root, "fsck", "--json")
    seen["fsck"] = {"status": status, "ok": fsck["ok"], **{
        part: sorted((f["check"], names.text(f["path"]), names.json(f["generation"]))
                     for f in fsck[part]) for part in ("findings", "held")}}
    explained = {}
    for generation in sorted(live["generations"]):
        status, told = inspect_json("--root", root, "explain", generation, "--json")
        explained[names.text(generation)] = {
            "status": status, **({"error": names.text(told)} if isinstance(told, str) else {
                "path": names.json(told["path"]), "status": told["status"],
                "manager": names.json(told["manager"]),
                "leases": sorted(names.json(told["leases"])),
                "now": [names.text(s["text"]) for s in told["story"] if s["kind"] == "now"]})}
    seen["explain"] = dict(sorted(explained.items()))
    return seen


def _state_present(names: Names, state: dict[str, Any], *, whole: bool) -> dict[str, Any]:
    """Of a ``state --json`` answer, what is not finished: managers not ended, directories
    not removed, the sessions they own or keep, artifacts; fields that name a recovery
    pass are left out.

    Of the *whole* state (every manager and directory seen, from where the kept
    history starts) a session's adoptions and discard are left out too: they are
    counted across every owner the session had, forgotten ones included.
    """
    managers = {names.text(k): {f: names.json(v) for f, v in m.items()
                                if f not in ("pid", "ended_by")}
                for k, m in state["managers"].items() if m["ended"] is None}
    generations = {names.text(k): {f: names.json(v) for f, v in g.items()
                                   if f not in ("removal_by", "commands", "device", "inode")}
                   | {"commands": len(g["commands"])}
                   for k, g in state["generations"].items() if g["removal_outcome"] is None}
    history = ("adoptions", "adopted_seq", "adopted_from", "discarded_seq",
               "discarded_reason", "used_at") if whole else ()
    sessions = {
        k: {f: names.json(v) for f, v in s.items() if f not in history}
        for k, s in sorted(state["sessions"].items())
        if names.text(s["owner"]) in managers or names.text(s["kept"] or "") in generations}
    return {
        "managers": dict(sorted(managers.items())),
        "generations": dict(sorted(generations.items())),
        "sessions": sessions,
        "artifacts": dict(sorted((names.text(k), names.json(a))
                                 for k, a in state["artifacts"].items())),
        "refused": len(state["refused"]),
    }


# -- a whole run ------------------------------------------------------------------------


def run_workload(root: Path, retention: RetentionMode, steps: list[Step]) -> Transcript:
    """Play *steps* on a fresh *root*; the transcript of answers and readers' views."""
    run = Run(root, retention)
    done = False
    try:
        for step in steps:
            run.play(step)
        run.finish()
        run.note("every process killed", present(root, run.names))
        run.note("a last recovery", run.report(run.start_bare().ask(run.now, "recover")))
        run.note("after it", present(root, run.names))
        if retention == "off":
            _, summary = inspect_json("--root", root, "summary", "--json")
            assert summary["history"]["retired_until"] == 0, (
                f"the default retention retired history up to event "
                f"{summary['history']['retired_until']}: the workload is too large to stand "
                "for retention off")
        done = True
    finally:
        if done:
            run.finish()
        else:
            run.abandon()
    return run.transcript
