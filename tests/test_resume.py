"""Named sessions across a crash, with real processes: refusal, resume, removal, artifacts.

Each owner is a real Python process running a named ``Manager``; it is
killed with SIGKILL, never asked to stop.  Commands are real processes
started through ``lease.popen``.  Time is moved by passing a clock, never by
patching one.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import (
    BadInput,
    Manager,
    SessionOwned,
    Unavailable,
    UnsafeRoot,
    recover,
    remove_artifact,
    remove_session,
)
from sessiontemp.inspect import fsck
from sessiontemp.journal.events import (
    ArtifactKept,
    ArtifactRemoved,
    RemovalFinished,
    SessionAdopted,
    SessionDiscarded,
)
from tests import zygote
from tests.commands import exited, journaled, wait_until

TIMEOUT = 20.0
DAY = 86400.0
SLEEP = "/bin/sleep"

OWNER = textwrap.dedent("""
    import json, os, sys, time
    from sessiontemp import Manager
    root, name, mode, window = sys.argv[1:5]
    manager = Manager(root, session=name, resume_window=float(window))
    manager.retain()
    report = {"pid": os.getpid()}
    if mode == "retired":
        # A command on a generation the owner then rotates away from.
        old = manager.acquire(label="old")
        report["retired"] = str(old.path)
        report["old_command"] = old.popen(["sleep", "600"]).pid
        old.release()
        manager.rotate()
    lease = manager.acquire(label="work")
    (lease.path / "notes.txt").write_text("draft 1")
    report["path"] = str(lease.path)
    if mode == "command":
        report["command"] = lease.popen(["sleep", "600"]).pid
    print(json.dumps(report), flush=True)
    time.sleep(600)
""")


class Owner:
    """A real process owning a named session, with its current directory (and commands)."""

    def __init__(self, root: Path, name: str, mode: str = "plain", window: float = DAY) -> None:
        # Forked from a process that has imported the library (tests/zygote.py).
        self.process = zygote.shared("sessiontemp").start(
            None, [str(root), name, mode, str(window)], script=OWNER, stderr=2)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the owner died before it reported"
        self.report: dict[str, Any] = json.loads(line)
        self.pid: int = self.report["pid"]
        self.path = Path(self.report["path"])

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(TIMEOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()
        for key in ("command", "old_command"):
            if key in self.report:
                kill_command(self.report[key])


def kill_command(pid: int) -> None:
    """Kill a command an owner started; it is not our child, so wait for it to vanish."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_until(lambda: exited(pid), f"command {pid} to exit")


@pytest.fixture
def owners(root: Path) -> Iterator[Callable[..., Owner]]:
    started: list[Owner] = []

    def start(name: str = "chat-42", mode: str = "plain", window: float = DAY) -> Owner:
        owner = Owner(root, name, mode, window)
        started.append(owner)
        return owner

    yield start
    for owner in started:
        owner.stop()


def later(seconds: float) -> Callable[[], float]:
    """A clock *seconds* ahead of the real one."""
    return lambda: time.time() + seconds


# -- one live owner ------------------------------------------------------------------------


def test_a_second_live_owner_is_refused_naming_the_first_owners_pid(
    root: Path, owners: Callable[..., Owner]
) -> None:
    first = owners()
    with pytest.raises(SessionOwned) as excinfo:
        Manager(root, session="chat-42")
    assert excinfo.value.pid == first.pid
    assert f"process {first.pid}" in str(excinfo.value)
    # Refused before anything was journaled or touched.
    assert (first.path / "notes.txt").read_text() == "draft 1"


def test_other_names_and_unnamed_managers_work_beside_a_live_owner(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owners()
    for manager in (open_manager(session="chat-43"), open_manager()):
        manager.retain()
        with manager.acquire() as lease:
            assert lease.path.is_dir()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 65, "chat 42"])
def test_an_invalid_name_is_refused_before_anything_is_made(root: Path, name: str) -> None:
    with pytest.raises(ValueError, match="1 to 64 characters"):
        Manager(root, session=name)
    assert not root.exists()


# -- crash and resume ------------------------------------------------------------------------


def test_after_the_owner_is_killed_a_resume_finds_its_files(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners()
    owner.kill()
    manager = open_manager(session="chat-42")
    assert manager.resumed
    assert manager.current_dir == owner.path
    manager.retain()
    with manager.acquire() as lease:
        assert lease.path == owner.path
        assert (lease.path / "notes.txt").read_text() == "draft 1"
    [adopted] = journaled(root, SessionAdopted)
    assert (adopted.session, adopted.previous) == ("chat-42", manager.recovery.dead[0])


def test_a_resume_within_the_window_after_an_earlier_recovery_still_finds_them(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners()
    owner.kill()
    assert recover(root).dead  # the death is journaled now; the window runs from here
    assert owner.path.is_dir()
    manager = open_manager(session="chat-42", clock=later(DAY - 60))
    assert manager.resumed
    assert (owner.path / "notes.txt").read_text() == "draft 1"


def test_a_start_after_the_window_finds_the_generation_removed(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners()
    owner.kill()
    recover(root)
    manager = open_manager(session="chat-42", clock=later(DAY + 1))
    assert not manager.resumed
    assert not owner.path.exists()
    [discarded] = journaled(root, SessionDiscarded)
    assert discarded.reason == "its resume window of 86400 s passed"
    manager.retain()
    with manager.acquire() as lease:
        assert lease.path != owner.path
        assert not (lease.path / "notes.txt").exists()


def test_the_window_is_the_one_the_dead_owner_was_opened_with(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners(window=60.0)
    owner.kill()
    recover(root)
    assert owner.path.is_dir()
    # Whatever window the successor asks for its own crash.
    manager = open_manager(session="chat-42", resume_window=DAY, clock=later(61))
    assert not manager.resumed
    assert not owner.path.exists()
    manager.close()
    second = owners(window=60.0)
    second.kill()
    recover(root)
    successor = open_manager(session="chat-42", resume_window=0.0, clock=later(59))
    assert successor.resumed
    assert successor.current_dir == second.path


@pytest.mark.parametrize("window", [-1.0, float("nan"), float("inf")])
def test_a_window_that_is_not_a_finite_number_of_seconds_is_refused(
    root: Path, window: float
) -> None:
    with pytest.raises(ValueError, match="resume_window must be a finite number"):
        Manager(root, session="chat-42", resume_window=window)
    assert not root.exists()


def test_a_start_with_resume_false_finds_the_generation_removed(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners()
    owner.kill()
    manager = open_manager(session="chat-42", resume=False)
    assert not manager.resumed
    assert not owner.path.exists()
    [discarded] = journaled(root, SessionDiscarded)
    assert "resume=False" in discarded.reason
    assert any(r.path == owner.path.parent for r in manager.recovery.removed)


def test_a_recovery_after_the_window_removes_it_with_nobody_claiming(
    root: Path, owners: Callable[..., Owner]
) -> None:
    owner = owners()
    owner.kill()
    recover(root)
    assert owner.path.is_dir()
    report = recover(root, clock=later(DAY + 1))
    assert [r.path for r in report.removed] == [owner.path.parent]
    assert not owner.path.exists()


def test_an_orderly_close_keeps_nothing_for_a_resume(
    root: Path, open_manager: Callable[..., Manager]
) -> None:
    first = Manager(root, session="chat-42")
    first.retain()
    path = first.acquire().path
    first.close()
    assert not path.exists()
    assert not open_manager(session="chat-42").resumed


def test_an_unnamed_managers_directory_is_never_kept(root: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from sessiontemp import Manager
        m = Manager({str(root)!r})
        m.retain()
        print(m.acquire().path, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    path = Path(child.stdout.readline().strip())
    child.kill()
    child.wait(TIMEOUT)
    recover(root)
    assert not path.exists()


# -- a running command's lease -------------------------------------------------------------------


def test_a_running_command_keeps_its_directory_when_the_session_is_resumed(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners(mode="command")
    owner.kill()
    assert not exited(owner.report["command"])
    manager = open_manager(session="chat-42")
    assert manager.resumed
    assert manager.current_dir == owner.path
    manager.retain()
    manager.rotate()
    # Retired by its new owner, it is still held by the dead owner's command.
    assert owner.path.is_dir()
    kill_command(owner.report["command"])
    manager.release()
    manager.close()
    recover(root)
    assert not owner.path.exists()


def test_a_running_command_keeps_its_directory_when_the_session_starts_afresh(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners(mode="command")
    owner.kill()
    manager = open_manager(session="chat-42", resume=False)
    assert owner.path.is_dir()
    assert any(s.path == owner.path.parent and "still in use" in s.reason
               for s in manager.recovery.skipped)
    kill_command(owner.report["command"])
    assert [r.path for r in recover(root).removed] == [owner.path.parent]


def test_the_dead_owners_retired_generations_follow_the_orphan_rules(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners(mode="retired")
    retired = Path(owner.report["retired"])
    owner.kill()
    manager = open_manager(session="chat-42")
    # Its current one is resumed; the retired one is kept by its command only.
    assert manager.resumed
    assert manager.current_dir == owner.path
    assert retired.is_dir()
    kill_command(owner.report["old_command"])
    assert [r.path for r in recover(root).removed] == [retired.parent]
    assert owner.path.is_dir()


# -- remove_session ------------------------------------------------------------------------------


def test_remove_session_is_refused_while_a_live_owner_holds_it(
    root: Path, owners: Callable[..., Owner]
) -> None:
    owner = owners()
    with pytest.raises(SessionOwned, match=f"process {owner.pid}"):
        remove_session(root, "chat-42")
    assert (owner.path / "notes.txt").read_text() == "draft 1"


def test_remove_session_removes_what_a_dead_owner_left_journaled(
    root: Path, owners: Callable[..., Owner], open_manager: Callable[..., Manager]
) -> None:
    owner = owners()
    owner.kill()
    report = remove_session(root, "chat-42")
    assert owner.path.parent in [r.path for r in report.removed]
    assert not owner.path.exists()
    [discarded] = journaled(root, SessionDiscarded)
    assert "remove_session" in discarded.reason
    assert any(f.generation == owner.path.parent.name.rsplit("-", 1)[1]
               for f in journaled(root, RemovalFinished))
    assert not open_manager(session="chat-42").resumed


def test_remove_session_of_a_name_never_used_does_nothing(root: Path) -> None:
    Manager(root).close()
    report = remove_session(root, "never-used")
    assert (report.removed, report.skipped) == ((), ())


def test_remove_session_refuses_an_invalid_name(root: Path) -> None:
    with pytest.raises(ValueError, match="1 to 64 characters"):
        remove_session(root, "../x")


# -- artifacts -----------------------------------------------------------------------------------


def test_an_artifact_outlives_rotate_release_and_close_with_its_digest_and_mode(
    root: Path,
) -> None:
    manager = Manager(root, session="chat-42")
    manager.retain()
    with manager.acquire() as lease:
        (lease.path / "out").mkdir()
        (lease.path / "out" / "report.txt").write_bytes(b"all green\n")
        artifact = lease.keep("out/report.txt", "report.txt")
        directory = lease.path
    manager.rotate()
    manager.release()
    manager.close()
    assert not directory.exists()
    recover(root)
    assert artifact.path.read_bytes() == b"all green\n"
    assert artifact.sha256 == hashlib.sha256(b"all green\n").hexdigest()
    # Private, and sticky: an age cleaner never takes it.
    assert stat.S_IMODE(artifact.path.stat().st_mode) == 0o1600
    [kept] = journaled(root, ArtifactKept)
    assert (kept.sha256, kept.size, kept.label) == (artifact.sha256, 10, "report.txt")
    assert hashlib.sha256(artifact.path.read_bytes()).hexdigest() == kept.sha256
    assert fsck(root).ok


def test_an_artifact_outlives_its_owners_crash_and_a_fresh_start(
    root: Path, owners: Callable[..., Owner]
) -> None:
    manager = Manager(root, session="a")
    manager.retain()
    with manager.acquire() as lease:
        (lease.path / "f").write_text("x")
        artifact = lease.keep(lease.path / "f", "f")
    manager.close()
    remove_session(root, "a")
    assert artifact.path.read_text() == "x"


def test_an_artifact_goes_only_by_its_explicit_journaled_removal(root: Path) -> None:
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "f").write_text("x")
            artifact = lease.keep("f", "f")
    assert remove_artifact(root, artifact)
    assert not artifact.path.exists()
    [removed] = journaled(root, ArtifactRemoved)
    assert removed.artifact == artifact.id
    assert not remove_artifact(root, artifact.id)
    with pytest.raises(ValueError, match="not an artifact id"):
        remove_artifact(root, "../x")


def test_keep_after_the_lease_is_released_is_unavailable(
    root: Path, open_manager: Callable[..., Manager]
) -> None:
    manager = open_manager()
    manager.retain()
    lease = manager.acquire()
    (lease.path / "f").write_text("x")
    lease.release()
    with pytest.raises(Unavailable, match="already released"):
        lease.keep("f", "f")
    with pytest.raises(BadInput, match="lease's directory"):
        manager.acquire().keep("../f", "f")


CRASH_KEEPER = textwrap.dedent("""
    import os, sys
    from sessiontemp import Manager
    def hook(kind, detail):
        if kind == "journal" and detail == "artifact.kept":
            os._exit(9)  # between the fsync and the record
    manager = Manager(sys.argv[1], step_hook=hook)
    manager.retain()
    lease = manager.acquire()
    (lease.path / "f").write_text("unrecorded")
    lease.keep("f", "f")
""")


def test_a_crash_before_the_record_leaves_a_file_fsck_reports_and_only_remove_artifact_removes(
    root: Path,
) -> None:
    child = subprocess.run([sys.executable, "-c", CRASH_KEEPER, str(root)], timeout=TIMEOUT,
                           check=False)
    assert child.returncode == 9
    [left] = os.listdir(root / "artifacts")
    assert (root / "artifacts" / left).read_text() == "unrecorded"
    assert journaled(root, ArtifactKept) == []
    [finding] = [f for f in fsck(root).findings if f.check == "unreferenced"]
    assert finding.path.name == left
    artifact = left.partition("-")[0]
    assert f"remove_artifact({str(root)!r}, {artifact!r})" in finding.fix
    # A complete, fsynced copy: the user's data, which no recovery removes.
    removed = recover(root, stale_after=0).removed
    assert root / "artifacts" / left not in [r.path for r in removed]
    assert (root / "artifacts" / left).read_text() == "unrecorded"
    assert remove_artifact(root, artifact)
    assert os.listdir(root / "artifacts") == []
    assert fsck(root).ok


# -- placement -----------------------------------------------------------------------------------


def test_a_root_inside_the_workdir_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with pytest.raises(UnsafeRoot, match="inside the workdir"):
        Manager(workdir / ".sessiontemp", workdir=workdir)
    assert os.listdir(workdir) == []


def test_a_root_outside_the_workdir_is_accepted(
    tmp_path: Path, open_manager: Callable[..., Manager]
) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    open_manager(workdir=workdir).retain()


def test_with_the_warn_policy_a_root_inside_the_workdir_is_used_with_a_warning(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with pytest.warns(UserWarning, match="inside the workdir"):
        manager = Manager(workdir / ".sessiontemp", workdir=workdir, workdir_policy="warn")
    manager.close()
