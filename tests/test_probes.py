"""Locks looked at by the inspector, and probes met by a manager: no decision comes out differently.

``journal-inspect`` (and ``fsck``) reports whether a manager's liveness
lock and a generation's directory lock are held.  Taking those locks to
find out, even for an instant, would make a manager's own try fail in that
instant: a named session's next owner would find the directory its dead
owner left "locked" and start afresh (the kept files removed by the next
recovery), a recovery pass would take a dead manager for a live one.  So
the inspector reads the kernel's lock table and takes no lock: a real
process trying the manager's locks in a tight loop, while journal-inspect
runs over and over, is never refused.

The other side: an exclusive probe by someone else (systemd-tmpfiles probes
every directory it would clean that way, and so did journal-inspect before)
is waited out by a manager that wants a shared lock, instead of being taken
for a directory gone: a named session's owner restarted again and again
while journal-inspect runs in a loop, as ``watch`` runs it, resumes every
time, and the files its predecessors wrote are all there.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import Manager, inspect
from sessiontemp._kernel.locks import PROBE_PATIENCE
from tests import zygote
from tests.conftest import journal_state

TIMEOUT = 30.0

# A process trying one lock the way a manager does, as fast as it can, until
# its stdin ends: "shared" as a lease or an adopting owner locks a directory,
# "exclusive" as a recovery pass probes a liveness lock file.  It answers how
# often it tried and how often it was refused.
CONTENDER = textwrap.dedent("""
    import fcntl, json, os, sys, threading
    path, mode = sys.argv[1], sys.argv[2]
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if mode == "shared" else 0)
    fd = os.open(path, flags)
    want = (fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX) | fcntl.LOCK_NB
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print("ready", flush=True)
    tries = refused = 0
    while not done.is_set():
        for _ in range(1000):
            tries += 1
            try:
                fcntl.flock(fd, want)
            except BlockingIOError:
                refused += 1
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
    print(json.dumps({"tries": tries, "refused": refused}), flush=True)
""")

# A named session's owner: claims, says whether it resumed, appends a line to
# notes.txt in its directory, then kills itself.
OWNER = textwrap.dedent("""
    import json, os, signal, sys
    from sessiontemp import Manager
    root, name, line = sys.argv[1:4]
    manager = Manager(root, session=name)
    manager.retain()
    lease = manager.acquire(label="work")
    with open(lease.path / "notes.txt", "a") as notes:
        notes.write(line + "\\n")
    print(json.dumps({"resumed": manager.resumed, "path": str(lease.path)}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def owner_runs(root: Path, line: str) -> dict[str, Any]:
    """A session owner's life: claim "chat", write *line*, die by SIGKILL; what it said."""
    child = zygote.shared("sessiontemp").run(["-c", str(root), "chat", line], script=OWNER,
                                             timeout=TIMEOUT)
    assert child.returncode == -signal.SIGKILL, child.stderr
    said: dict[str, Any] = json.loads(child.stdout)
    return said


class Contender:
    """A real process trying the lock of *path* in a tight loop (see CONTENDER)."""

    def __init__(self, path: Path, mode: str) -> None:
        self.process = zygote.shared().start(None, [str(path), mode], script=CONTENDER,
                                             stderr=2)
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == b"ready\n"

    def stop(self) -> dict[str, int]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        counts: dict[str, int] = json.loads(self.process.stdout.readline())
        self.process.wait(TIMEOUT)
        return counts


@pytest.fixture
def left_for_a_resume(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A root where session "chat"'s owner died, not yet found dead by any recovery.

    Yields the root, the directory it left and its liveness lock file: the
    inspector probes both (a manager not ended whose lock is free, and the
    directory of a manager that is gone).
    """
    root = tmp_path / "root"
    said = owner_runs(root, "first")
    [manager] = [m for m in journal_state(root).managers.values() if m.ended is None]
    return root, Path(said["path"]), root / "managers" / f"{manager.id}.lock"


def inspect_over_and_over(root: Path, runs: int) -> None:
    """journal-inspect summary, *runs* times in processes of its own and as many in this one."""
    for _ in range(runs):
        done = zygote.journal_inspect("--root", root, "summary")
        assert done.returncode == 0, done.stderr
        inspect.summary(root / "journal.sqlite3", root)


def test_the_inspector_never_refuses_a_lock_a_manager_tries_at_the_same_moment(
    left_for_a_resume: tuple[Path, Path, Path],
) -> None:
    root, directory, lock_file = left_for_a_resume
    found = inspect.summary(root / "journal.sqlite3", root)
    # It does look at both: the dead owner's lock is free, its directory too.
    assert [m.liveness for m in found.running] == ["gone"]
    assert found.generations["held_by_commands"] == 0
    adopter = Contender(directory, "shared")
    prober = Contender(lock_file, "exclusive")
    try:
        inspect_over_and_over(root, 40)
    finally:
        adopted, probed = adopter.stop(), prober.stop()
    assert adopted["tries"] > 0
    assert probed["tries"] > 0
    assert adopted["refused"] == 0, f"an adopting owner's shared lock was refused: {adopted}"
    assert probed["refused"] == 0, f"a recovery's probe of a liveness lock was refused: {probed}"


def test_a_session_restarted_over_and_over_while_journal_inspect_runs_in_a_loop_resumes_every_time(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    first = owner_runs(root, "0")
    stop = threading.Event()
    looked: list[int] = [0]

    def watch() -> None:
        # What `watch journal-inspect summary` does, as fast as it can.
        while not stop.is_set():
            inspect.summary(root / "journal.sqlite3", root)
            looked[0] += 1

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for i in range(1, 31):
            said = owner_runs(root, str(i))
            assert said["resumed"], f"restart {i} started afresh"
            assert said["path"] == first["path"]
    finally:
        stop.set()
        watcher.join(TIMEOUT)
    assert looked[0] > 0
    lines = (Path(first["path"]) / "notes.txt").read_text().split()
    assert lines == [str(i) for i in range(31)]


# -- a probe in progress, met by a manager -----------------------------------------------

# A session owner that stops just before it locks the directory it adopts,
# until the test says "go": the test holds an exclusive lock on it meanwhile.
PAUSED_OWNER = textwrap.dedent("""
    import json, sys
    from sessiontemp import Manager, Unavailable
    root, name = sys.argv[1:3]

    def hook(kind, detail):
        # The generation's own lock step (not its work directory's, NAME/tmp).
        if kind == "lock" and detail.startswith("sessiontemp-gen-") and "/" not in detail:
            print(json.dumps({"locking": detail}), flush=True)
            sys.stdin.readline()

    try:
        manager = Manager(root, session=name, step_hook=hook)
    except Unavailable as e:
        print(json.dumps({"refused": str(e)}), flush=True)
        sys.exit(0)
    print(json.dumps({"resumed": manager.resumed}), flush=True)
    manager.close()
""")


def claim_while_probed(root: Path, directory: Path, hold: float) -> dict[str, Any]:
    """Claim "chat" while another process holds an exclusive lock on *directory*'s generation.

    *directory* is the leased directory; its generation, its parent, is held for *hold* s.
    """
    import fcntl

    directory = directory.parent
    owner = zygote.shared("sessiontemp").start(None, [str(root), "chat"], script=PAUSED_OWNER,
                                               stderr=2)
    assert owner.stdout is not None
    assert owner.stdin is not None
    try:
        assert json.loads(owner.stdout.readline())["locking"] == directory.name
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            owner.stdin.write(b"go\n")
            owner.stdin.flush()
            time.sleep(hold)
        finally:
            os.close(fd)
        said: dict[str, Any] = json.loads(owner.stdout.readline())
    finally:
        owner.stdin.close()
        owner.wait(TIMEOUT)
    return said


def test_a_probe_in_progress_on_the_directory_a_claimer_adopts_is_waited_out(
    left_for_a_resume: tuple[Path, Path, Path],
) -> None:
    root, directory, _ = left_for_a_resume
    assert claim_while_probed(root, directory, 0.3) == {"resumed": True}


def test_a_directory_held_exclusively_past_the_patience_refuses_the_claim_and_keeps_it_for_the_next(
    left_for_a_resume: tuple[Path, Path, Path],
) -> None:
    root, directory, _ = left_for_a_resume
    said = claim_while_probed(root, directory, PROBE_PATIENCE + 1.0)
    assert "locked exclusively by" in said["refused"]
    assert (directory / "notes.txt").read_text() == "first\n"
    with Manager(root, session="chat") as next_owner:
        assert next_owner.resumed
