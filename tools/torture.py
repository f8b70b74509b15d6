"""Kill torture: real processes share one root while a driver SIGKILLs them at random.

Run ``python tools/torture.py --processes 4 --kills 600 --seconds 3600``.

The driver starts PROCESSES workers (this script with ``--worker``), each in
its own process group.  A worker loops: open a Manager on the shared root
(which runs recovery): half the time as the owner of a named session, one of
three shared by every worker, resuming what its dead owner left or (one time
in four) starting afresh, and unnamed when another worker owns that name;
retain it, then at random acquire leases and write a marker file into each,
start child commands with ``lease.popen`` that hold the lease's lock and
check, every 20 ms until they exit, that their marker is still there, release
leases (checking their marker first), keep a file of a lease as an artifact,
remove an artifact (its own or another worker's), read an artifact back,
rotate, run a standalone recovery, remove a named session (refused while it
is owned), write a checkpoint of the journal, run a long-lived manager's
maintenance; then release and close the manager and start over.  Every
journal is opened with ``Retention(segment_bytes=0, history_bytes=0,
history_age=0)``: every checkpoint (each recovery pass that replayed 100
events or more, each maintenance, each checkpoint written) starts a new
segment, and every sealed segment a checkpoint covers is deleted at once.

An artifact's lifecycle is written to a ledger outside the root, each line
before the call it announces returns or starts: ``keeping LABEL`` before
``lease.keep``, ``kept ID LABEL SHA256`` after it, ``removing ID`` before
``remove_artifact``.  A kept artifact that is not being removed must hold
its content; a worker that finds one gone or changed (and not announced for
removal meanwhile) writes a violation.

Meanwhile the driver waits a random moment (20-300 ms), picks a worker and
SIGKILLs it (with probability 0.3 its whole process group, so its running
children die too; otherwise the children outlive it, holding their
directories), and starts a new worker in its place.  It stops after KILLS
kills or SECONDS seconds, whichever comes first, then kills every process
group it started, reaps everything (it is the children's subreaper), removes
each named session (every owner is dead, so what they kept for a resume
goes), runs a final recovery and checks:

* leaks: no generation or trash directory is left on disk, and the journal
  has finished the removal of every generation it names;
* wrongful removals: no worker found its lease's directory gone before it
  released it, and no child found its directory gone while it ran (each
  writes a line to a violations file outside the root);
* artifacts lost: every artifact the ledger says was kept and not announced
  for removal is in the journal and its file holds the recorded SHA-256;
  an artifact file no record names must be one a killed worker was keeping
  or removing (it is then removed with ``remove_artifact``, as a user
  would); any other is a failure;
* ``journal-inspect verify``, run every second during the run (as a
  ``watch`` would), should exit 0 every time: each time it does not is
  counted (``inspector_wrong_answers``, with the first few answers), and
  fails the run with ``--inspector-must-agree``;
* with ``--readers``, the reader in that loop runs ``verify``, ``summary``
  and ``state`` (``--json``) in turn, and each answer is checked against
  what the workers hold (each writes to a facts file outside the root when
  its manager opened, before it closes, when a lease was acquired and before
  it is released; the driver notes each kill before it sends it): a manager
  open from before the reader started until after it ended is listed as
  running (``summary``, with liveness ``live``) and not ended (``state``), a
  lease its manager held throughout is counted (``summary``) and listed on
  its directory, not removed (``state``); ``verify`` and ``summary``'s quick
  check find nothing, and every command exits 0.  Each answer that breaks
  one is a wrong answer (``reader_wrong_answers``), and any fails the run;
  so does a file a reader left (``reader_files_left``): a ``-wal`` or
  ``-shm`` in ``journal.sqlite3.d/`` whose segment is gone, after the run;
* the journal verifies (``Store.verify()``); the newest checkpoint is
  usable and, with the events after it, gives the same state as the replay
  from where the kept history starts; ``journal-inspect verify`` and
  ``journal-inspect fsck`` (the console script) exit 0.

It prints one JSON object with the figures and exits 1 when any check fails
or a worker ended by itself (an exception: its log is kept in the work
directory).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import hashlib
import json
import math
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sessiontemp import (
    GENERATION_PREFIX,
    TRASH_PREFIX,
    Lease,
    Manager,
    SessionOwned,
    recover,
    remove_artifact,
    remove_session,
)
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel.liveness import RecoveryLock
from sessiontemp._kernel.root import JOURNAL_NAME, Root
from sessiontemp.inspect import fsck
from sessiontemp.journal import Retention, Store, checkpoint, replay
from sessiontemp.recovery.passes import maintain

# A command that holds its lease's directory and watches its marker file.
CHILD = """
import os, sys, time
path, violations, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    if not os.path.isfile(os.path.join(path, "marker")):
        with open(violations, "a") as f:
            f.write(f"child {os.getpid()}: {path} vanished while it ran\\n")
        break
    time.sleep(0.02)
"""

# The longest any start, death or final step may take before the run fails.
TIMEOUT = 30.0
PR_SET_CHILD_SUBREAPER = 36
# Every checkpoint starts a new segment; every sealed segment a checkpoint covers goes.
EAGER = Retention(segment_bytes=0, history_bytes=0, history_age=0)
# The named sessions every worker may own, resume, start afresh or remove.
SESSIONS = ("s0", "s1", "s2")


# -- a worker ---------------------------------------------------------------------------


def note(stats: Path, what: str) -> None:
    with open(stats, "a") as f:
        f.write(what + "\n")


def fact(workdir: Path, *words: str) -> None:
    """What this worker holds, for the readers' judge: one line, after or before the call.

    One short line in one write to an O_APPEND file, stamped with the
    system-wide monotonic clock the driver's reader reads too.
    """
    with open(workdir / "facts", "a") as f:
        f.write(" ".join([*words, str(os.getpid()), repr(time.monotonic())]) + "\n")


def violation(violations: Path, text: str) -> None:
    with open(violations, "a") as f:
        f.write(f"worker {os.getpid()}: {text}\n")


class Ledger:
    """The artifacts' lifecycle, in a file outside the root that every process appends to."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, *words: str) -> None:
        # One short line in one write to an O_APPEND file: never torn between writers.
        with open(self.path, "a") as f:
            f.write(" ".join(words) + "\n")

    def read(self) -> tuple[dict[str, tuple[str, str]], set[str], set[str]]:
        """(kept: id -> (label, sha256), ids announced for removal, labels being kept)."""
        kept: dict[str, tuple[str, str]] = {}
        removing: set[str] = set()
        keeping: set[str] = set()
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["keeping"] and len(words) == 2:
                    keeping.add(words[1])
                elif words[:1] == ["kept"] and len(words) == 4:
                    kept[words[1]] = (words[2], words[3])
                elif words[:1] == ["removing"] and len(words) == 2:
                    removing.add(words[1])
        return kept, removing, keeping


def sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def open_manager(root: Path, rng: random.Random, stats: Path) -> Manager:
    """A manager on *root*: half the time a named session's owner, unnamed when it is owned."""
    if rng.random() < 0.5:
        session = rng.choice(SESSIONS)
        resume = rng.random() < 0.75
        try:
            manager = Manager(root, busy_timeout=TIMEOUT, retention=EAGER, session=session,
                              resume=resume)
        except SessionOwned:
            note(stats, "session_owned")
        else:
            note(stats, "resumed" if manager.resumed else
                 "started_afresh" if not resume else "session_new")
            return manager
    return Manager(root, busy_timeout=TIMEOUT, retention=EAGER)


def check_artifact(root: Path, ledger: Ledger, rng: random.Random, violations: Path) -> bool:
    """Read back one kept artifact not announced for removal; False if there was none."""
    kept, removing, _ = ledger.read()
    candidates = sorted(set(kept) - removing)
    if not candidates:
        return False
    artifact = rng.choice(candidates)
    label, digest = kept[artifact]
    found = sha256_of(root / "artifacts" / f"{artifact}-{label}")
    if found != digest and artifact not in ledger.read()[1]:
        violation(violations, f"artifact {artifact} ({label}) "
                  f"{'is gone' if found is None else 'changed'} while nothing removed it")
    return True


def work(root: Path, workdir: Path, seed: int) -> None:
    violations = workdir / "violations.log"
    stats = workdir / "stats"
    ledger = Ledger(workdir / "artifacts.ledger")
    rng = random.Random(seed)
    announced = False
    keeps = 0
    while True:
        manager = open_manager(root, rng, stats)
        fact(workdir, "open", manager.id)
        note(stats, "manager")
        if not announced:
            # The driver's handshake: this worker has a manager on the root.
            sys.stdout.write("ready\n")
            sys.stdout.flush()
            announced = True
        manager.retain()
        leases: list[Lease] = []
        children: list[subprocess.Popen[bytes]] = []
        for _ in range(rng.randint(5, 40)):
            roll = rng.random()
            if roll < 0.30 and len(leases) < 3:
                lease = manager.acquire()
                fact(workdir, "lease", lease.id, lease.generation, manager.id)
                (lease.path / "marker").write_text(f"{os.getpid()}\n")
                leases.append(lease)
                note(stats, "lease")
            elif roll < 0.42 and leases and len(children) < 3:
                lease = rng.choice(leases)
                children.append(lease.popen(
                    [sys.executable, "-c", CHILD, str(lease.path), str(violations),
                     f"{rng.uniform(0.1, 2.0):.2f}"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                ))
                note(stats, "command")
            elif roll < 0.60 and leases:
                lease = leases.pop(rng.randrange(len(leases)))
                if not (lease.path / "marker").is_file():
                    violation(violations, f"{lease.path} vanished under a live lease")
                fact(workdir, "unlease", lease.id)
                lease.release()
            elif roll < 0.66 and leases:
                lease = rng.choice(leases)
                keeps += 1
                label = f"w{os.getpid()}-{keeps}"
                content = rng.randbytes(rng.randint(1, 4096))
                (lease.path / "result.bin").write_bytes(content)
                digest = hashlib.sha256(content).hexdigest()
                ledger.write("keeping", label)
                artifact = lease.keep("result.bin", label)
                ledger.write("kept", artifact.id, label, artifact.sha256)
                if artifact.sha256 != digest or sha256_of(artifact.path) != digest:
                    violation(violations, f"artifact {artifact.id} kept other bytes than given")
                note(stats, "keep")
            elif 0.66 <= roll < 0.675:
                # Only here: the rolls above that fell through (no lease) are not removals.
                kept, removing, _ = ledger.read()
                candidates = sorted(set(kept) - removing)
                if candidates:
                    artifact_id = rng.choice(candidates)
                    ledger.write("removing", artifact_id)
                    remove_artifact(root, artifact_id, busy_timeout=TIMEOUT)
                    note(stats, "remove_artifact")
            elif roll < 0.74:
                if check_artifact(root, ledger, rng, violations):
                    note(stats, "artifact_read")
            elif roll < 0.84:
                manager.rotate()
                note(stats, "rotate")
            elif roll < 0.89:
                recover(root, busy_timeout=TIMEOUT, retention=EAGER)
                note(stats, "recover")
            elif roll < 0.90:
                try:
                    remove_session(root, rng.choice(SESSIONS), busy_timeout=TIMEOUT)
                except SessionOwned:
                    note(stats, "remove_session_refused")
                else:
                    note(stats, "remove_session")
            elif roll < 0.94:
                write_checkpoint(root)
                note(stats, "checkpoint")
            elif roll < 0.97:
                run_maintenance(root)
                note(stats, "maintenance")
            children = [c for c in children if c.poll() is None]
        for lease in leases:
            if not (lease.path / "marker").is_file():
                violation(violations, f"{lease.path} vanished under a live lease")
            fact(workdir, "unlease", lease.id)
            lease.release()
        manager.release()
        fact(workdir, "closing", manager.id)
        manager.close()


def write_checkpoint(root: Path) -> None:
    """What a recovery pass does when one is due, here whenever asked (a rollover with it).

    Under the recovery lock, as every writer of checkpoints in the library
    is: retirement runs under it too, so the events after the checkpoint
    restored here stay until they are read.
    """
    opened = Root.open(root)
    try:
        lock = RecoveryLock.take(opened, wait=True)
        assert lock is not None
        try:
            store = Store(opened.journal_path, busy_timeout=TIMEOUT, retention=EAGER)
            try:
                start = checkpoint.restore(store).state
                checkpoint.save(store, replay(store.records(after=start.seq), start))
            finally:
                store.close()
        finally:
            lock.release()
    finally:
        opened.close()


def run_maintenance(root: Path) -> None:
    """What a long-lived manager's maintenance thread does, here whenever asked.

    A checkpoint (due whatever was appended since the last), which rolls
    over, then every sealed segment it covers retired; skipped while a
    recovery pass holds the root.
    """
    opened = Root.open(root)
    try:
        store = Store(opened.journal_path, busy_timeout=TIMEOUT, retention=EAGER)
        try:
            store.maintenance_every = 0
            maintain(opened, store, clock=time.time, steps=Steps(None))
        finally:
            store.close()
    finally:
        opened.close()


# -- the driver ---------------------------------------------------------------------------


class Worker:
    def __init__(self, root: Path, workdir: Path, seed: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(root), "--workdir", str(workdir),
             "--seed", str(seed)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=open(workdir / f"worker-{seed}.log", "wb"),  # noqa: SIM115
            start_new_session=True,
        )
        self.pid = self.process.pid
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        if not ready or self.process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"worker {self.pid} did not open its manager "
                               f"within {TIMEOUT:g} s; see {workdir}")

    def kill(self, *, children: bool) -> bool:
        """SIGKILL the worker; False if it had already ended by itself (a failure: see its log)."""
        alive = self.process.poll() is None
        # A worker that ended by itself is reaped already: its pid is no longer its own.
        if children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        elif alive:
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=TIMEOUT)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return alive


def become_subreaper() -> None:
    """Adopt the orphaned commands of killed workers, so they can be reaped and counted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_everything(groups: list[int]) -> None:
    """Kill every process group started, and wait for all of them, bounded."""
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)
    raise TimeoutError(f"processes still running {TIMEOUT:g} s after SIGKILL")


def journal_inspect(root: Path, *command: str) -> tuple[int, str]:
    """Run the console script on *root*; its exit status and what it printed (a JSON
    answer whole, anything else its last 2,000 characters)."""
    script = Path(sys.executable).parent / "journal-inspect"
    done = subprocess.run([str(script), "--root", str(root), *command], capture_output=True,
                          text=True, timeout=TIMEOUT * 4, check=False)
    if "--json" in command and done.returncode == 0:
        return done.returncode, done.stdout
    return done.returncode, (done.stdout + done.stderr)[-2000:]


class Facts:
    """What the workers hold, as their facts file and the driver's kills say, over time."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "facts"
        # Worker pid -> the monotonic time just before the driver sent its SIGKILL.
        # Stamped and stored under the lock the judge reads them under: a kill
        # stamped before a read ended is always seen by its judge.
        self.killed: dict[int, float] = {}
        self.lock = threading.Lock()

    def kill(self, pid: int) -> None:
        """Note that worker *pid* is about to be killed (call before sending the signal)."""
        with self.lock:
            self.killed[pid] = time.monotonic()

    def held_throughout(self, start: float, end: float
                        ) -> tuple[set[str], dict[str, tuple[str, str]]]:
        """The managers open, and the leases held (lease -> (generation, manager)), from
        before *start* until after *end*: what any answer read in between must show."""
        opened: dict[str, tuple[int, float]] = {}
        closing: dict[str, float] = {}
        leased: dict[str, tuple[str, str, int, float]] = {}
        released: dict[str, float] = {}
        with contextlib.suppress(FileNotFoundError), open(self.path) as f:
            for line in f:
                words = line.split()
                if not line.endswith("\n") or not words:
                    continue  # a line being written
                at, pid = float(words[-1]), int(words[-2])
                if words[0] == "open":
                    opened[words[1]] = (pid, at)
                elif words[0] == "closing":
                    closing[words[1]] = at
                elif words[0] == "lease":
                    leased[words[1]] = (words[2], words[3], pid, at)
                elif words[0] == "unlease":
                    released[words[1]] = at

        with self.lock:
            killed = dict(self.killed)

        def alive(pid: int) -> bool:
            return killed.get(pid, math.inf) > end

        managers = {m for m, (pid, at) in opened.items()
                    if at < start and closing.get(m, math.inf) > end and alive(pid)}
        leases = {lease: (generation, manager)
                  for lease, (generation, manager, pid, at) in leased.items()
                  if at < start and released.get(lease, math.inf) > end and alive(pid)
                  and manager in managers}
        return managers, leases


def stray_reader_files(root: Path) -> list[str]:
    """``-wal`` and ``-shm`` files in the segment directory whose segment is gone."""
    segments = root / f"{JOURNAL_NAME}.d"
    try:
        names = set(os.listdir(segments))
    except FileNotFoundError:
        return []
    return sorted(name for name in names if name.endswith(("-wal", "-shm"))
                  and name[:-4] not in names)


class Inspector(threading.Thread):
    """``journal-inspect verify`` on the root in a loop while workers append, roll over,
    retire and die: a healthy journal, so every run must exit 0.

    With *facts* (``--readers``), ``verify``, ``summary`` and ``state`` in turn,
    each answer judged against what the workers held throughout the read
    (:meth:`judge`).
    """

    def __init__(self, root: Path, every: float, facts: Facts | None = None) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.every = every
        self.facts = facts
        self.runs = 0
        self.asked: collections.Counter[str] = collections.Counter()
        self.wrong: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        commands = ("verify", "summary", "state") if self.facts is not None else ("verify",)
        while not self.stop.wait(self.every):
            command = commands[self.runs % len(commands)]
            start = time.monotonic()
            if self.facts is None:
                status, output = journal_inspect(self.root, command)
            else:
                status, output = journal_inspect(self.root, command, "--json")
            end = time.monotonic()
            self.runs += 1
            self.asked[command] += 1
            if status != 0:
                self.wrong.append(f"journal-inspect {command} exited {status} during the run: "
                                  f"{output}")
            elif self.facts is not None:
                self.wrong += self.judge(command, json.loads(output), start, end)

    def judge(self, command: str, answer: dict[str, Any], start: float, end: float
              ) -> list[str]:
        """What *answer*, read between *start* and *end*, gets wrong about the present."""
        assert self.facts is not None
        managers, leases = self.facts.held_throughout(start, end)
        wrong: list[str] = []
        if command == "verify":
            if not answer["ok"]:
                wrong.append(f"verify found problems: {answer['problems'][:3]}")
        elif command == "summary":
            if not answer["verify"]["ok"]:
                wrong.append(f"summary's check found problems: "
                             f"{answer['verify']['problems'][:3]}")
            running = {m["id"]: m for m in answer["running_managers"]}
            for manager in sorted(managers):
                if manager not in running:
                    wrong.append(f"summary lists manager {manager} as not running; it was "
                                 f"open throughout the read")
                elif running[manager]["liveness"] != "live":
                    wrong.append(f"summary says manager {manager} is "
                                 f"{running[manager]['liveness']}; it was open throughout")
            if answer["generations"]["leases_held"] < len(leases):
                wrong.append(f"summary counts {answer['generations']['leases_held']} leases "
                             f"held; {len(leases)} were held throughout the read")
        else:
            for manager in sorted(managers):
                record = answer["managers"].get(manager)
                if record is None or record["ended"] is not None:
                    wrong.append(f"state shows manager {manager} "
                                 f"{'absent' if record is None else 'ended'}; it was open "
                                 f"throughout the read")
            for lease, (generation, manager) in sorted(leases.items()):
                found = answer["generations"].get(generation)
                if found is None or lease not in found["leases"] or found["removal"]:
                    wrong.append(f"state does not show lease {lease} of manager {manager} "
                                 f"held on {generation}; it was held throughout the read")
        return [f"journal-inspect {command}: {w}" for w in wrong]


def check_artifacts(root: Path, ledger: Ledger) -> dict[str, Any]:
    """What the ledger says of the artifact store, against the journal and the files.

    An artifact file no record names must be one a killed worker was keeping
    (copied, not yet recorded) or removing (recorded as removed, not yet
    unlinked); it is removed as a user would, by ``remove_artifact``.
    """
    kept, removing, keeping = ledger.read()
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        start = checkpoint.origin(store).state
        journaled = replay(store.records(after=start.seq), start).artifacts
    finally:
        store.close()
    lost = []
    for artifact, (label, digest) in sorted(kept.items()):
        if artifact in removing and artifact not in journaled:
            continue
        # Not announced for removal, or announced and still journaled (the
        # remover was killed before its record): the file must be intact.
        found = sha256_of(root / "artifacts" / f"{artifact}-{label}")
        if artifact not in journaled or found != digest:
            what = ("not in the journal" if artifact not in journaled else
                    "its file is gone" if found is None else "its file changed")
            lost.append(f"{artifact} ({label}): {what}")
    labels = {artifact: label for artifact, (label, _) in kept.items()}
    unrecorded = unexplained = 0
    for finding in fsck(root).findings:
        if finding.check != "unreferenced":
            continue
        artifact, _, label = finding.path.name.partition("-")
        if label in keeping and (artifact not in kept or artifact in removing) and (
                labels.get(artifact, label) == label):
            unrecorded += 1
            remove_artifact(root, artifact, busy_timeout=TIMEOUT)
        else:
            unexplained += 1
            lost.append(f"{finding.path}: unreferenced, yet no worker was keeping or removing it")
    return {
        "artifacts_kept": len(kept),
        "artifacts_removed": len(removing & set(kept)),
        "artifacts_left": len(journaled),
        "artifact_files_unrecorded": unrecorded,
        "artifacts_lost": len(lost),
        "lost": lost[:10],
    }


def drive(args: argparse.Namespace) -> dict[str, Any]:
    become_subreaper()
    workdir = Path(tempfile.mkdtemp(prefix="sessiontemp-torture-"))
    root = workdir / "root"
    violations = workdir / "violations.log"
    violations.touch()
    rng = random.Random(args.seed)
    seeds = iter(range(args.seed * 100_000, args.seed * 100_000 + 10_000_000))
    started = time.monotonic()
    workers = [Worker(root, workdir, next(seeds)) for _ in range(args.processes)]
    groups = [w.pid for w in workers]
    facts = Facts(workdir) if args.readers else None
    inspector = Inspector(root, args.inspect_every, facts)
    if args.inspect_every > 0:
        inspector.start()
    kills = with_children = failed_workers = 0
    while kills < args.kills and time.monotonic() - started < args.seconds:
        # A random moment, not a handshake: the point is to land anywhere.
        time.sleep(rng.uniform(0.02, 0.3))
        i = rng.randrange(len(workers))
        children = rng.random() < 0.3
        if facts is not None:
            facts.kill(workers[i].pid)
        if workers[i].kill(children=children):
            kills += 1
        else:
            failed_workers += 1
        with_children += children
        workers[i] = Worker(root, workdir, next(seeds))
        groups.append(workers[i].pid)
    failed_workers += sum(w.process.poll() is not None for w in workers)
    if facts is not None:
        # Killed below: no answer read from here on may count on them.
        for w in workers:
            facts.kill(w.pid)
    inspector.stop.set()
    if inspector.is_alive():
        inspector.join(TIMEOUT * 4)
    reap_everything(groups)
    elapsed = time.monotonic() - started

    # Every owner is dead: what they kept for a resume goes with its session.
    for session in SESSIONS:
        remove_session(root, session, busy_timeout=TIMEOUT)
    report = recover(root, busy_timeout=TIMEOUT, retention=EAGER)
    artifacts = check_artifacts(root, Ledger(workdir / "artifacts.ledger"))
    on_disk = sorted(n for n in os.listdir(root)
                     if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        problems = store.verify()
        # Retired history is gone: the replay starts where the kept history does.
        origin = checkpoint.origin(store)
        state = replay(store.records(after=origin.state.seq), origin.state)
        restored = checkpoint.restore(store)
        if restored.skipped:
            problems.append(f"checkpoints skipped: {list(restored.skipped)}")
        if replay(store.records(after=restored.state.seq), restored.state) != state:
            problems.append(f"the replay from checkpoint {restored.checkpoint} differs")
        checkpoints = len(store.checkpoints())
        segments = len(store.segments())
        history_from = origin.state.seq + 1
    finally:
        store.close()
    if args.inspector_must_agree and not args.readers:
        problems += inspector.wrong
    for command in ("verify", "fsck"):
        status, output = journal_inspect(root, command)
        if status != 0:
            problems.append(f"journal-inspect {command} exited {status}: {output}")
    unfinished = sorted(g.id for g in state.generations.values() if g.removal != "finished")
    wrongful = [line for line in violations.read_text().splitlines() if line]
    lost = [line for line in wrongful if " artifact " in line]
    wrongful = [line for line in wrongful if " artifact " not in line]
    done = collections.Counter((workdir / "stats").read_text().split()) if (
        workdir / "stats").exists() else collections.Counter()
    figures = {
        "processes": args.processes,
        "kills": kills,
        "kills_with_children": with_children,
        "workers_started": len(groups),
        "seconds": round(elapsed, 1),
        "managers_opened": done["manager"],
        "sessions_resumed": done["resumed"],
        "sessions_started_afresh": done["started_afresh"],
        "sessions_new": done["session_new"],
        "sessions_refused_as_owned": done["session_owned"],
        "sessions_removed": done["remove_session"],
        "session_removals_refused": done["remove_session_refused"],
        "leases": done["lease"],
        "commands": done["command"],
        "rotations": done["rotate"],
        "recoveries": done["recover"],
        "checkpoints_written": done["checkpoint"],
        "maintenances": done["maintenance"],
        "artifacts_read_back": done["artifact_read"],
        **{k: v for k, v in artifacts.items() if k != "lost"},
        "checkpoints_left": checkpoints,
        "segments_left": segments,
        "history_from_event": history_from,
        "events": state.seq,
        "generations_live": len(state.generations),
        "final_recovery_removed": len(report.removed),
        "final_recovery_skipped": len(report.skipped),
        "leaks": len(on_disk) + len(unfinished),
        "leaked": on_disk + unfinished,
        "wrongful_removals": len(wrongful),
        "wrongful": wrongful[:10],
        "lost": (lost + artifacts["lost"])[:10],
        "inspections_during_the_run": inspector.runs,
        "inspector_wrong_answers": len(inspector.wrong),
        "inspector_wrong": inspector.wrong[:5],
        **({"readers": dict(inspector.asked), "reader_wrong_answers": len(inspector.wrong),
            "reader_wrong_by_command": dict(collections.Counter(
                w.split(":")[0].removeprefix("journal-inspect ").split()[0]
                for w in inspector.wrong)),
            "reader_files_left": len(stray_reader_files(root)),
            "reader_files": stray_reader_files(root)[:10]} if args.readers else {}),
        "journal_problems": problems,
        "failed_workers": failed_workers,
        "workdir": str(workdir),
    }
    figures["artifacts_lost"] += len(lost)
    if not args.keep and not failed(figures):
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


def failed(figures: dict[str, Any]) -> bool:
    return bool(figures["leaks"] or figures["wrongful_removals"] or figures["artifacts_lost"]
                or figures["journal_problems"] or figures["failed_workers"]
                or figures.get("reader_wrong_answers") or figures.get("reader_files_left"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--inspect-every", type=float, default=1.0, metavar="SECONDS",
                        help="run journal-inspect verify this often during the run (0: never)")
    parser.add_argument("--inspector-must-agree", action="store_true",
                        help="fail the run when a verify during the run finds a problem")
    parser.add_argument("--readers", action="store_true",
                        help="in that loop, run verify, summary and state (--json) in turn, "
                        "each answer checked against what the workers held throughout it; "
                        "a wrong answer, or a -wal or -shm a reader left beside a deleted "
                        "segment, fails the run")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        work(args.worker, args.workdir, args.seed)
        return 0
    figures = drive(args)
    print(json.dumps(figures, indent=2))
    return 1 if failed(figures) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
