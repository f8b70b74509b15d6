"""Liveness beyond a lease's lock: recorded commands, the /proc scan, the manager's lock file.

A command that closes the descriptors it inherited (sudo, ssh, a daemon)
drops the lease's lock and runs on.  Each test here starts a real command
through ``lease.popen`` (``tests/leased_command.py``) that closes every
descriptor and keeps writing into its directory for two seconds while the
lease is released and the session rotated, and checks after every
operation meanwhile that the directory is still there; the command itself
checks that none of its files vanished.  Once it has exited (and is still
an unreaped zombie) its directory goes: by the manager's next operation, or
by a recovery once the manager has closed or died.

The tests marked "without ..." take one signal away (monkeypatching
:mod:`sessiontemp._kernel.processes`) and show that the same scenario then loses
the directory under the running command: each signal is needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from structlog.testing import capture_logs

from sessiontemp import Manager, recover
from sessiontemp._kernel import liveness, locks, processes
from sessiontemp._kernel.liveness import is_locked
from sessiontemp._kernel.root import DIR_FLAGS
from sessiontemp.journal import Store
from sessiontemp.journal.events import CommandStarted
from tests.conftest import journal_state, locked_by_another
from tests.model import simulate_kill

COMMAND = Path(__file__).with_name("leased_command.py")
# The longest a command may take to start, or to end once told to.
TIMEOUT = 20.0
# How long each command keeps writing into its directory.
SECONDS = 2.0
PR_SET_CHILD_SUBREAPER = 36


# -- processes --------------------------------------------------------------------------


@attrs.define
class Worker:
    """The process doing a command's work, followed through a pidfd so it is never mixed up."""

    pid: int
    pidfd: int
    result: Path

    def running(self) -> bool:
        return not select.select([self.pidfd], [], [], 0)[0]

    def wait_exited(self) -> None:
        assert select.select([self.pidfd], [], [], TIMEOUT)[0], f"{self.pid} did not end"

    def outcome(self) -> str:
        return self.result.read_text() if self.result.exists() else "no result written"

    def zombie(self) -> bool:
        """Exited but not yet reaped: /proc still lists it, with state Z."""
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            stat = Path(f"/proc/{self.pid}/stat").read_bytes()
            return stat[stat.rindex(b")") + 2:].split()[0] == b"Z"
        return False


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Workers of the test; killed at teardown if a failure left them running."""
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.running():
            signal.pidfd_send_signal(worker.pidfd, signal.SIGKILL)
            worker.wait_exited()
        os.close(worker.pidfd)


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Make this process the reaper of daemons its commands leave, so none stays a zombie."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def start(lease_popen: Callable[..., subprocess.Popen[bytes]], mode: str, scratch: Path,
          workers: list[Worker]) -> tuple[subprocess.Popen[bytes], Worker]:
    """Start leased_command.py in *mode*; return it, and its worker once that dropped the lock."""
    ready, result = scratch / f"{mode}.ready", scratch / f"{mode}.result"
    child = lease_popen([sys.executable, str(COMMAND), mode, str(ready), str(result),
                         str(SECONDS)], cwd=scratch, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while not ready.exists():
        assert child.poll() in (None, 0), f"{mode} command failed with {child.returncode}"
        assert time.monotonic() < deadline, f"{mode} command never announced its worker"
        time.sleep(0.01)
    pid = int(ready.read_text())
    worker = Worker(pid, os.pidfd_open(pid), result)
    workers.append(worker)
    return child, worker


def root_fd(root: Path) -> int:
    return os.open(root, DIR_FLAGS)


def unlocked(root: Path, directory: Path) -> bool:
    """Whether nobody holds the lock of the generation whose work directory is *directory*."""
    fd = root_fd(root)
    try:
        return not is_locked(fd, directory.parent.name)
    finally:
        os.close(fd)


# -- a command that drops the lease's lock keeps its directory ------------------------------


@attrs.frozen
class Run:
    """What happened to one command's directory."""

    directory: Path
    worker: Worker
    busy_reasons: tuple[str, ...]
    # The worker's initial environment, read while it ran (None: unreadable).
    environ: bytes | None
    # Kept referenced: a collected Popen reaps its child, which must stay a zombie here.
    child: subprocess.Popen[bytes]


def run_while_rotating(manager: Manager, mode: str, scratch: Path, workers: list[Worker],
                       *, end: str) -> Run:
    """Start *mode* on a lease, release it, rotate, keep the manager busy until the work ends.

    *end* says what happens to the manager once the lease is released and
    the session rotated: "alive" (it keeps working), "close" or "kill".
    Asserts that the directory is there after every operation while the
    worker runs, and that nobody holds its lock meanwhile: what keeps it is
    the second signal, not the lock.
    """
    lease = manager.acquire(label=mode)
    directory = lease.path
    child, worker = start(lease.popen, mode, scratch, workers)
    environ = None
    with contextlib.suppress(ProcessLookupError):  # unreadable once the main thread exited
        environ = Path(f"/proc/{worker.pid}/environ").read_bytes()
    if mode.startswith("daemon"):
        # The recorded command is gone: only the /proc scan can find the worker.
        assert child.wait(timeout=TIMEOUT) == 0
    busy: list[str] = []
    with capture_logs() as logs:
        lease.release()
        manager.rotate()
        assert directory.is_dir(), f"{directory} was removed while its command ran"
        assert unlocked(manager.root, directory), "the command still holds the lease's lock"
        if end == "close":
            manager.close()
        elif end == "kill":
            simulate_kill(manager)
        while worker.running():
            assert directory.is_dir(), f"{directory} was removed while its command ran"
            if end == "alive":
                with manager.acquire():
                    pass
                manager.rotate()
            else:
                busy += [s.reason for s in recover(manager.root).skipped
                         if s.path == directory.parent]
            time.sleep(0.05)
    busy += [e["reason"] for e in logs if e["event"] == "generation.busy"]
    return Run(directory, worker, tuple(busy), environ, child)


def finish(manager: Manager, run: Run, *, end: str) -> None:
    """The work has ended: the directory goes at the next chance, the zombie notwithstanding."""
    assert run.worker.outcome() == "ok"
    # The last operation while it ran may already have seen it exit.
    waiting = run.directory.exists()
    if end == "alive":
        with manager.acquire():
            pass
    else:
        report = recover(manager.root)
        assert not waiting or run.directory.parent in [r.path for r in report.removed]
    assert not run.directory.exists(), f"{run.directory} was kept after its command exited"


@pytest.mark.parametrize("end", ["alive", "close", "kill"])
def test_a_command_that_closes_its_descriptors_keeps_its_directory_until_it_exits(
    root: Path, tmp_path: Path, workers: list[Worker], end: str,
) -> None:
    manager = Manager(root)
    manager.retain()
    run = run_while_rotating(manager, "closerange", tmp_path, workers, end=end)
    # Matched by pid (and start time) first: the /proc scan is not needed.
    assert any(f"command pid {run.worker.pid} " in reason for reason in run.busy_reasons)
    assert run.worker.zombie(), "the test meant to check that a zombie does not count"
    finish(manager, run, end=end)
    manager.close()


def test_a_command_that_also_resets_its_environment_is_kept_by_its_recorded_pid_alone(
    manager: Manager, tmp_path: Path, workers: list[Worker],
) -> None:
    """Like sudo: nothing in /proc names the directory any more, only the journaled pid does."""
    run = run_while_rotating(manager, "reset-env", tmp_path, workers, end="alive")
    assert run.environ == b""
    assert any(f"command pid {run.worker.pid} " in reason for reason in run.busy_reasons)
    finish(manager, run, end="alive")


def test_a_command_whose_main_thread_exits_keeps_its_directory_while_another_thread_works(
    manager: Manager, tmp_path: Path, workers: list[Worker],
) -> None:
    """Its /proc entry says zombie (state Z) all the while: the threads left still count."""
    run = run_while_rotating(manager, "leader-exits", tmp_path, workers, end="alive")
    assert any(f"command pid {run.worker.pid} " in reason for reason in run.busy_reasons)
    finish(manager, run, end="alive")


@pytest.mark.parametrize("mode", ["daemon-env", "daemon-cwd"])
@pytest.mark.parametrize("end", ["alive", "kill"])
def test_a_daemon_a_command_left_behind_keeps_its_directory_while_it_runs(
    root: Path, tmp_path: Path, workers: list[Worker], subreaper: None, mode: str, end: str,
) -> None:
    """The recorded command exits at once; its grandchild works on without any descriptor."""
    manager = Manager(root)
    manager.retain()
    run = run_while_rotating(manager, mode, tmp_path, workers, end=end)
    # Found by the scan, and said so: the worker's pid is in no journal.
    assert any(f"pid {run.worker.pid} works in it or points TMPDIR" in reason
               for reason in run.busy_reasons)
    assert not any("command pid" in reason for reason in run.busy_reasons)
    assert run.worker.zombie()
    finish(manager, run, end=end)
    os.waitpid(run.worker.pid, 0)
    manager.close()


@pytest.mark.parametrize(("mode", "broken"), [
    pytest.param("closerange", ("running", "users"), id="closerange-without-both"),
    pytest.param("reset-env", ("running",), id="reset-env-without-the-pid-record"),
    pytest.param("daemon-env", ("users",), id="daemon-env-without-the-scan"),
    pytest.param("daemon-cwd", ("users",), id="daemon-cwd-without-the-scan"),
])
def test_without_its_signal_the_same_command_loses_its_directory(
    manager: Manager, tmp_path: Path, workers: list[Worker], subreaper: None,
    monkeypatch: pytest.MonkeyPatch, mode: str, broken: tuple[str, ...],
) -> None:
    """Each test above can fail: take its liveness signal away and the directory goes."""
    for name in broken:
        monkeypatch.setattr(processes, name, lambda *args, **kwargs: [])
    with pytest.raises(AssertionError, match="was removed while its command ran"):
        run_while_rotating(manager, mode, tmp_path, workers, end="alive")
    workers[-1].wait_exited()
    assert workers[-1].outcome() != "ok"
    if mode.startswith("daemon"):
        os.waitpid(workers[-1].pid, 0)


# -- processes.py with values passed in ------------------------------------------------------


def own_start() -> int:
    started = processes.start_time(os.getpid())
    assert started is not None
    return started


def test_a_recorded_command_runs_only_while_its_pid_has_the_recorded_start_time() -> None:
    me, started = os.getpid(), own_start()
    assert processes.running([f"{me}:{started}"]) == [me]
    # The same pid, another start time: a process that reused the pid.
    assert processes.running([f"{me}:{started + 1}"]) == []
    assert processes.running([f"{me}:{started - 1}", f"{me}:{started}"]) == [me]


def test_a_command_that_exited_does_not_run_whether_reaped_or_a_zombie() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        started = processes.start_time(child.pid)
        assert started is not None
        key = f"{child.pid}:{started}"
        assert processes.running([key]) == [child.pid]
        pidfd = os.pidfd_open(child.pid)
        assert child.stdin is not None
        child.stdin.close()
        assert select.select([pidfd], [], [], TIMEOUT)[0]
        os.close(pidfd)
        stat = Path(f"/proc/{child.pid}/stat").read_bytes()
        assert stat[stat.rindex(b")") + 2:].split()[0] == b"Z"
        assert processes.start_time(child.pid) is None
        assert processes.running([key]) == []
    finally:
        child.kill()
        child.wait()
    assert processes.running([key]) == []


def test_a_command_name_with_spaces_and_parentheses_does_not_confuse_the_start_time(
    tmp_path: Path,
) -> None:
    odd = tmp_path / "a) b (c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        assert processes.start_time(child.pid) == int(stat.rsplit(")", 1)[1].split()[19])
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


@contextlib.contextmanager
def sleeping(cwd: Path | None = None, env: dict[str, str] | None = None) -> Iterator[int]:
    """A process waiting on its stdin, in *cwd* with *env*; yields its pid."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, cwd=cwd, env=env)
    try:
        yield child.pid
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def test_the_scan_finds_a_process_working_inside_the_directory_or_naming_it(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "sessiontemp-gen-abcdefghijklmnop"
    (directory / "deep").mkdir(parents=True)
    beside = tmp_path / "sessiontemp-gen-abcdefghijklmnopq"
    beside.mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TMP", "TEMP")}
    with sleeping(cwd=directory / "deep", env=clean) as in_it, \
            sleeping(cwd=tmp_path, env={**clean, "TEMP": str(directory)}) as naming_it, \
            sleeping(cwd=tmp_path, env={**clean, "TMP": f"{directory}/deep"}) as below_it, \
            sleeping(cwd=beside, env={**clean, "TMPDIR": str(beside)}) as beside_it, \
            sleeping(cwd=tmp_path, env={**clean, "TMPDIR": ""}) as empty:
        found = processes.users(str(directory), exclude=os.getpid())
        assert in_it in found
        assert naming_it in found
        assert below_it in found
        # A name that merely starts with the directory's is another directory.
        assert beside_it not in found
        assert empty not in found
        assert processes.users(str(directory), exclude=in_it).count(in_it) == 0


def test_the_scan_matches_a_directory_reached_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with sleeping(cwd=real) as pid:
        assert pid in processes.users(str(link), exclude=os.getpid())


# -- a recorded pid reused by another process ----------------------------------------------------


@pytest.mark.parametrize("shift", [0, 1], ids=["same-start-time", "pid-reused"])
def test_a_recorded_pid_counts_only_with_its_start_time_when_recovery_removes(
    root: Path, shift: int,
) -> None:
    """The dead manager's command pid is this (running) test process: kept only if it is the one."""
    manager = Manager(root)
    manager.retain()
    lease = manager.acquire()
    store = Store(root / "journal.sqlite3")
    try:
        store.append([CommandStarted(manager.id, lease.generation, lease.id, os.getpid(),
                                     own_start() + shift)], time=time.time())
    finally:
        store.close()
    # The generation: reports name it, the leased directory's parent.
    directory = lease.path.parent
    simulate_kill(manager)
    report = recover(root)
    if shift == 0:
        assert directory.is_dir()
        assert [s.path for s in report.skipped] == [directory]
        assert f"command pid {os.getpid()} " in report.skipped[0].reason
    else:
        assert not directory.exists()
        assert [r.path for r in report.removed] == [directory]
    assert journal_state(root).managers[manager.id].ended == "dead"


# -- the manager's own liveness lock file ------------------------------------------------------


def lock_file(manager: Manager) -> Path:
    return manager.root / "managers" / f"{manager.id}.lock"


RECOVER = textwrap.dedent("""
    import json, sys
    from sessiontemp import recover
    report = recover(sys.argv[1])
    print(json.dumps({"dead": list(report.dead), "skipped": [s.reason for s in report.skipped]}))
""")


def recover_elsewhere(root: Path) -> dict[str, list[str]]:
    """One recovery pass in another process."""
    import json

    done = subprocess.run([sys.executable, "-c", RECOVER, str(root)], capture_output=True,
                          text=True, timeout=TIMEOUT, check=True)
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("removed", ["file", "directory"])
@pytest.mark.parametrize("operation", ["retain", "rotate", "acquire"])
def test_a_deleted_liveness_lock_file_is_back_and_held_after_the_next_operation(
    manager: Manager, operation: str, removed: str,
) -> None:
    """Deleted alone, or with the whole ``managers`` directory (``rm -r ROOT/managers``)."""
    with manager.acquire():
        pass
    current = manager.current_dir
    path = lock_file(manager)
    assert locked_by_another(path)
    if removed == "file":
        path.unlink()
    else:
        shutil.rmtree(path.parent)
    meanwhile = recover_elsewhere(manager.root)
    assert meanwhile["dead"] == []
    assert any("liveness lock" in reason and "missing" in reason
               for reason in meanwhile["skipped"])
    with capture_logs() as logs:
        if operation == "acquire":
            manager.acquire().release()
        else:
            getattr(manager, operation)()
    assert path.exists()
    assert locked_by_another(path)
    assert [e["event"] for e in logs].count("manager.lock_recreated") == 1
    after = recover_elsewhere(manager.root)
    assert after == {"dead": [], "skipped": []}
    assert journal_state(manager.root).managers[manager.id].ended is None
    # Nothing of it was removed but what the operation itself retired.
    assert current is not None
    assert current.is_dir() == (operation != "rotate")
    with manager.acquire():
        pass


def test_a_liveness_lock_file_replaced_by_an_unlocked_one_is_replaced_again(
    manager: Manager,
) -> None:
    path = lock_file(manager)
    spare = path.with_name("impostor")
    spare.write_text("")
    os.replace(spare, path)
    assert not locked_by_another(path)
    manager.retain()
    assert locked_by_another(path)
    assert recover_elsewhere(manager.root)["dead"] == []


def test_without_putting_it_back_a_manager_whose_lock_file_was_deleted_would_look_dead(
    manager: Manager, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test above can fail: skip the check and the file stays gone."""
    from sessiontemp._kernel.liveness import LivenessLock

    monkeypatch.setattr(LivenessLock, "check", lambda self: False)
    lock_file(manager).unlink()
    manager.retain()
    assert not lock_file(manager).exists()


def test_lock_files_deleted_over_and_over_never_make_a_recovery_declare_the_manager_dead(
    manager: Manager,
) -> None:
    """A loop deletes the file while the manager works and recoveries run in another process."""
    path = lock_file(manager)
    recoveries = [subprocess.Popen(
        [sys.executable, "-c", "import sys, sessiontemp\n"
         "for _ in range(15): assert not sessiontemp.recover(sys.argv[1]).dead",
         str(manager.root)]) for _ in range(2)]
    try:
        while any(r.poll() is None for r in recoveries):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            with manager.acquire():
                pass
            manager.rotate()
    finally:
        codes = [r.wait(timeout=TIMEOUT) for r in recoveries]
    assert codes == [0, 0]
    assert journal_state(manager.root).managers[manager.id].ended is None


def test_a_liveness_lock_file_renamed_away_is_put_back_by_the_next_operation(
    manager: Manager,
) -> None:
    """Renamed, the file keeps its link (and its lock) but no longer stands under its name."""
    path = lock_file(manager)
    path.rename(path.with_name(path.name + ".moved"))
    with capture_logs() as logs:
        manager.retain()
    assert locked_by_another(path)
    assert [e["event"] for e in logs].count("manager.lock_recreated") == 1
    assert recover_elsewhere(manager.root)["dead"] == []


def test_a_probe_that_wins_the_lock_of_a_lock_file_replaced_since_it_opened_it_looks_again(
    manager: Manager, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race a recovery in another process can meet, played in one, step by step.

    The probe opens the manager's lock file; before it tries the lock, the
    file is deleted and the manager, at its next operation, puts a new one
    in place, locks it and lets go of the old.  The lock the probe then
    wins is that of a file no longer named: it must look again by name
    and find the manager alive.
    """
    path = lock_file(manager)
    real = locks.try_exclusive
    raced: list[int] = []

    def deleted_and_put_back_meanwhile(fd: int) -> bool:
        if not raced:
            raced.append(fd)
            path.unlink()
            manager.retain()  # puts a new file in place, held
            assert locked_by_another(path)
        return real(fd)

    monkeypatch.setattr(locks, "try_exclusive", deleted_and_put_back_meanwhile)
    managers_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        held = liveness.take_liveness(managers_fd, manager.id)
    finally:
        os.close(managers_fd)
    assert raced, "the probe never tried a lock"
    if held is not None:
        os.close(held)
    assert held is None
