"""Kill torture: real processes share one root while a driver SIGKILLs them at random.

Run ``python tools/torture.py --processes 4 --kills 200 --seconds 600``.

The driver starts PROCESSES workers (this script with ``--worker``), each in
its own process group.  A worker loops: open a Manager on the shared root
(which runs recovery), retain it, then at random acquire leases and write a
marker file into each, start child commands with ``lease.popen`` that hold
the lease's lock and check, every 20 ms until they exit, that their marker is
still there, release leases (checking their marker first), rotate, run a
standalone recovery, write a checkpoint of the journal (which later opens and
recoveries start from); then release and close the manager and start over.

Meanwhile the driver waits a random moment (20-300 ms), picks a worker and
SIGKILLs it (with probability 0.3 its whole process group, so its running
children die too; otherwise the children outlive it, holding their
directories), and starts a new worker in its place.  It stops after KILLS
kills or SECONDS seconds, whichever comes first, then kills every process
group it started, reaps everything (it is the children's subreaper), runs a
final recovery and checks:

* leaks: no generation or trash directory is left on disk, and the journal
  has finished the removal of every generation it names;
* wrongful removals: no worker found its lease's directory gone before it
  released it, and no child found its directory gone while it ran (each
  writes a line to a violations file outside the root);
* the journal replays from scratch and ``Store.verify()`` finds nothing; the
  newest checkpoint is usable and, with the events after it, gives the same
  state as the replay from scratch.

It prints one JSON object with the figures and exits 1 when any check fails
or a worker ended by itself (an exception: its log is kept in the work
directory).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from journal import Store, checkpoint, replay
from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX, Lease, Manager, recover
from sessiontemp.root import JOURNAL_NAME

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


# -- a worker ---------------------------------------------------------------------------


def note(stats: Path, what: str) -> None:
    with open(stats, "a") as f:
        f.write(what + "\n")


def violation(violations: Path, text: str) -> None:
    with open(violations, "a") as f:
        f.write(f"worker {os.getpid()}: {text}\n")


def work(root: Path, violations: Path, stats: Path, seed: int) -> None:
    rng = random.Random(seed)
    announced = False
    while True:
        manager = Manager(root, busy_timeout=TIMEOUT)
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
            if roll < 0.35 and len(leases) < 3:
                lease = manager.acquire()
                (lease.path / "marker").write_text(f"{os.getpid()}\n")
                leases.append(lease)
                note(stats, "lease")
            elif roll < 0.5 and leases and len(children) < 3:
                lease = rng.choice(leases)
                children.append(lease.popen(
                    [sys.executable, "-c", CHILD, str(lease.path), str(violations),
                     f"{rng.uniform(0.1, 2.0):.2f}"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                ))
                note(stats, "command")
            elif roll < 0.75 and leases:
                lease = leases.pop(rng.randrange(len(leases)))
                if not (lease.path / "marker").is_file():
                    violation(violations, f"{lease.path} vanished under a live lease")
                lease.release()
            elif roll < 0.88:
                manager.rotate()
                note(stats, "rotate")
            elif roll < 0.93:
                recover(root, busy_timeout=TIMEOUT)
                note(stats, "recover")
            elif roll < 0.95:
                write_checkpoint(root)
                note(stats, "checkpoint")
            children = [c for c in children if c.poll() is None]
        for lease in leases:
            if not (lease.path / "marker").is_file():
                violation(violations, f"{lease.path} vanished under a live lease")
            lease.release()
        manager.release()
        manager.close()


def write_checkpoint(root: Path) -> None:
    """What a recovery pass does when one is due, here whenever asked."""
    store = Store(root / JOURNAL_NAME, busy_timeout=TIMEOUT)
    try:
        start = checkpoint.restore(store).state
        checkpoint.save(store, replay(store.records(after=start.seq), start))
    finally:
        store.close()


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
        if children:
            os.killpg(self.pid, signal.SIGKILL)
        else:
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
    kills = with_children = failed_workers = 0
    while kills < args.kills and time.monotonic() - started < args.seconds:
        # A random moment, not a handshake: the point is to land anywhere.
        time.sleep(rng.uniform(0.02, 0.3))
        i = rng.randrange(len(workers))
        children = rng.random() < 0.3
        if workers[i].kill(children=children):
            kills += 1
        else:
            failed_workers += 1
        with_children += children
        workers[i] = Worker(root, workdir, next(seeds))
        groups.append(workers[i].pid)
    failed_workers += sum(w.process.poll() is not None for w in workers)
    reap_everything(groups)
    elapsed = time.monotonic() - started

    report = recover(root, busy_timeout=TIMEOUT)
    on_disk = sorted(n for n in os.listdir(root)
                     if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        problems = store.verify()
        state = replay(store.records())
        restored = checkpoint.restore(store)
        if restored.skipped:
            problems.append(f"checkpoints skipped: {list(restored.skipped)}")
        if replay(store.records(after=restored.state.seq), restored.state) != state:
            problems.append(f"the replay from checkpoint {restored.checkpoint} differs")
        checkpoints = len(store.checkpoints())
    finally:
        store.close()
    unfinished = sorted(g.id for g in state.generations.values() if g.removal != "finished")
    wrongful = [line for line in violations.read_text().splitlines() if line]
    done = collections.Counter((workdir / "stats").read_text().split()) if (
        workdir / "stats").exists() else collections.Counter()
    figures = {
        "processes": args.processes,
        "kills": kills,
        "kills_with_children": with_children,
        "workers_started": len(groups),
        "seconds": round(elapsed, 1),
        "managers_opened": done["manager"],
        "leases": done["lease"],
        "commands": done["command"],
        "rotations": done["rotate"],
        "recoveries": done["recover"],
        "checkpoints_written": done["checkpoint"],
        "checkpoints_left": checkpoints,
        "events": state.seq,
        "generations": len(state.generations),
        "managers_dead": sum(m.ended == "dead" for m in state.managers.values()),
        "final_recovery_removed": len(report.removed),
        "final_recovery_skipped": len(report.skipped),
        "leaks": len(on_disk) + len(unfinished),
        "leaked": on_disk + unfinished,
        "wrongful_removals": len(wrongful),
        "wrongful": wrongful[:10],
        "journal_problems": problems,
        "failed_workers": failed_workers,
        "workdir": str(workdir),
    }
    if not args.keep and not (figures["leaks"] or wrongful or problems or failed_workers):
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        work(args.worker, args.workdir / "violations.log", args.workdir / "stats", args.seed)
        return 0
    figures = drive(args)
    print(json.dumps(figures, indent=2))
    failed = (figures["leaks"] or figures["wrongful_removals"] or figures["journal_problems"]
              or figures["failed_workers"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
