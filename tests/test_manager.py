"""The manager's contract, as the Go seed states it: one shared private directory per session.

Each test is one behaviour: leases share a generation, rotate retires it,
the last owner seals the manager, failures fail closed, commands started
from a lease keep their directory alive, and recovery's stale sweep removes
exactly the leftovers nobody can be using.  Real directories, real locks and
real processes throughout; time is passed in as a clock or set with utime.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import (
    GENERATION_PREFIX,
    TRASH_PREFIX,
    Lease,
    Manager,
    Unavailable,
    recover,
)

SH = shutil.which("sh") or "/bin/sh"
SLEEP = shutil.which("sleep") or "/bin/sleep"
DAY = 86400.0


def on_disk(root: Path) -> list[str]:
    """The generation and trash entries present under *root*, sorted."""
    return sorted(
        name for name in os.listdir(root)
        if name.startswith((GENERATION_PREFIX, TRASH_PREFIX))
    )


def outside(root: Path) -> tuple[list[str], list[str]]:
    """What a fallback would touch: the root's siblings and the system temp dir's generations."""
    system_temp = tempfile.gettempdir()
    return (
        sorted(os.listdir(root.parent)),
        sorted(n for n in os.listdir(system_temp) if n.startswith(GENERATION_PREFIX)),
    )


@contextmanager
def running(lease: Lease, *args: str) -> Iterator[subprocess.Popen[Any]]:
    """A command started from *lease* (default: a long sleep), killed and reaped on exit."""
    child = lease.popen(list(args) or [SLEEP, "60"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def make_old(path: Path, now: float) -> None:
    """Set *path*'s own mtime (not a link's target) two days before *now*."""
    old = now - 2 * DAY
    os.utime(path, (old, old), follow_symlinks=False)


# -- one generation, shared ------------------------------------------------------------


def test_concurrent_leases_share_one_private_generation_directly_under_the_root(
    manager: Manager, root: Path
) -> None:
    threads = 8
    barrier = threading.Barrier(threads)
    leases: list[Lease] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            barrier.wait()
            leases.append(manager.acquire())
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=take) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    try:
        assert errors == []
        paths = {lease.path for lease in leases}
        assert len(leases) == threads
        assert len(paths) == 1
        (path,) = paths
        # The commands' directory, one level below the generation's own.
        assert path.parent.parent == root
        assert path.name == "tmp"
        assert path.parent.name.startswith(GENERATION_PREFIX)
        assert len(path.parent.name) > len(GENERATION_PREFIX)
        st = os.lstat(path)
        assert stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == os.getuid()
        assert on_disk(root) == [path.parent.name]
    finally:
        for lease in leases:
            lease.release()


def test_current_dir_is_none_before_the_first_acquire_the_generation_after_and_none_after_rotate(
    manager: Manager,
) -> None:
    assert manager.current_dir is None
    with manager.acquire() as lease:
        assert manager.current_dir == lease.path
    assert manager.current_dir == lease.path
    manager.rotate()
    assert manager.current_dir is None


# -- rotate ------------------------------------------------------------------------------


def test_rotate_gives_new_commands_a_fresh_directory_that_does_not_see_old_files(
    manager: Manager, root: Path
) -> None:
    old = manager.acquire()
    (old.path / "secret.txt").write_text("from the old conversation")
    manager.rotate()
    with manager.acquire() as new:
        assert new.path != old.path
        assert new.path.parent.parent == root
        assert os.listdir(new.path) == []
        # The old generation lives on for the command still holding it.
        assert (old.path / "secret.txt").read_text() == "from the old conversation"
        old.release()
        assert not old.path.exists()
        assert new.path.is_dir()
        assert on_disk(root) == [new.path.parent.name]


def test_the_last_of_several_leases_on_a_retired_generation_removes_it(
    manager: Manager, root: Path
) -> None:
    first = manager.acquire()
    second = manager.acquire()
    manager.rotate()
    first.release()
    assert second.path.is_dir()
    second.release()
    assert not second.path.exists()
    assert on_disk(root) == []


def test_rotate_with_no_lease_removes_the_current_generation_at_once(
    manager: Manager, root: Path
) -> None:
    with manager.acquire() as lease:
        pass
    assert lease.path.is_dir()
    manager.rotate()
    assert not lease.path.exists()
    assert on_disk(root) == []


# -- owners: hot rebuild and seal ----------------------------------------------------------


def test_hot_rebuild_keeps_the_same_generation_and_the_manager_unsealed(manager: Manager) -> None:
    """Retaining for the new controller before releasing the old one never seals."""
    with manager.acquire() as lease:
        (lease.path / "kept.txt").write_text("still here")
    manager.retain()
    manager.release()
    assert manager.owners == 1
    assert not manager.sealed
    assert manager.current_dir == lease.path
    with manager.acquire() as again:
        assert again.path == lease.path
        assert (again.path / "kept.txt").read_text() == "still here"


def test_acquire_after_the_last_release_fails_closed(manager: Manager, root: Path) -> None:
    with manager.acquire() as lease:
        pass
    manager.release()
    assert manager.sealed
    assert manager.owners == 0
    with pytest.raises(Unavailable, match="sealed"):
        manager.acquire()
    # The last owner's release retired the unleased generation: it is gone.
    assert not lease.path.exists()
    assert on_disk(root) == []


def test_retain_after_seal_does_not_reopen_the_manager(manager: Manager, root: Path) -> None:
    manager.release()
    manager.retain()
    assert manager.owners == 0
    assert manager.sealed
    with pytest.raises(Unavailable):
        manager.acquire()
    assert on_disk(root) == []


def test_acquire_without_any_owner_fails_closed(
    open_manager: Callable[..., Manager], root: Path
) -> None:
    m = open_manager()
    assert m.owners == 0
    with pytest.raises(Unavailable, match="retain"):
        m.acquire()
    assert m.current_dir is None
    assert on_disk(root) == []


def test_a_lease_held_across_the_seal_keeps_its_directory_until_released(
    manager: Manager, root: Path
) -> None:
    lease = manager.acquire()
    manager.release()
    assert manager.sealed
    assert lease.path.is_dir()
    lease.release()
    assert not lease.path.exists()
    assert on_disk(root) == []


def test_rotate_on_a_sealed_manager_changes_nothing(manager: Manager) -> None:
    lease = manager.acquire()
    manager.release()
    me = manager.state.managers[manager.id]
    generations = dict(manager.state.generations)
    manager.rotate()
    assert manager.state.managers[manager.id] == me
    assert dict(manager.state.generations) == generations
    assert manager.sealed
    assert lease.path.is_dir()
    lease.release()


# -- failing closed when the directory cannot be made --------------------------------------


class FailMkdir:
    """A step hook that makes every generation mkdir fail with ENOSPC while armed."""

    def __init__(self) -> None:
        self.armed = True
        self.failed: list[str] = []

    def __call__(self, kind: str, detail: str) -> None:
        if self.armed and kind == "mkdir":
            self.failed.append(detail)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), detail)


def test_a_failed_mkdir_raises_unavailable_creates_nothing_and_leaves_the_manager_usable(
    open_manager: Callable[..., Manager], root: Path
) -> None:
    hook = FailMkdir()
    m = open_manager(step_hook=hook)
    m.retain()
    before = outside(root)
    with pytest.raises(Unavailable) as caught:
        m.acquire()
    assert hook.failed != []
    assert str(root) in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.ENOSPC
    assert outside(root) == before
    assert on_disk(root) == []
    assert m.current_dir is None
    assert not m.sealed

    hook.armed = False
    with m.acquire() as lease:
        assert lease.path.is_dir()
        assert lease.path.parent.parent == root


def test_a_real_mkdir_failure_in_an_immutable_root_raises_unavailable_and_recovers(
    manager: Manager, root: Path
) -> None:
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("chattr is not installed, so mkdir cannot be made to fail for root")
    before = outside(root)
    made = subprocess.run([chattr, "+i", str(root)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not supported on {root}: {made.stderr.strip()}")
    try:
        with pytest.raises(Unavailable) as caught:
            manager.acquire()
        assert on_disk(root) == []
    finally:
        subprocess.run([chattr, "-i", str(root)], check=True)
    assert str(root) in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    assert outside(root) == before
    assert manager.current_dir is None
    with manager.acquire() as lease:
        assert lease.path.is_dir()
        assert lease.path.parent.parent == root


# -- leases and the commands they run ------------------------------------------------------


def test_lease_env_points_every_temporary_variable_at_the_lease_directory(
    manager: Manager,
) -> None:
    with manager.acquire() as lease:
        path = os.fspath(lease.path)
        assert lease.env() == {"TMPDIR": path, "TMP": path, "TEMP": path}


def test_popen_runs_a_real_command_whose_tmpdir_is_the_lease_directory_and_writable(
    manager: Manager,
) -> None:
    with manager.acquire() as lease:
        child = lease.popen(
            [SH, "-c", 'printf "%s\\n%s\\n" "$TMPDIR" "$TEMP"; mktemp'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        out, err = child.communicate(timeout=30)
        assert child.returncode == 0, err
        tmpdir, temp, made = out.splitlines()
        assert tmpdir == os.fspath(lease.path)
        assert temp == os.fspath(lease.path)
        assert Path(made).parent == lease.path
        assert Path(made).is_file()


def test_popen_with_an_empty_env_gives_the_command_only_the_temporary_variables(
    manager: Manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``env={}`` replaces os.environ as the base, as documented; nothing of ours leaks."""
    monkeypatch.setenv("SESSIONTEMP_TEST_LEAK", "leaked")
    with manager.acquire() as lease:
        child = lease.popen(
            [SH, "-c", 'printf "%s|%s" "${SESSIONTEMP_TEST_LEAK-unset}" "$TMPDIR"'],
            env={}, stdout=subprocess.PIPE, text=True,
        )
        out, _ = child.communicate(timeout=30)
        assert out == f"unset|{lease.path}"


def test_popen_on_a_released_lease_raises_unavailable_and_starts_nothing(
    manager: Manager, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    lease = manager.acquire()
    lease.release()
    with pytest.raises(Unavailable, match="released"):
        lease.popen([SH, "-c", f"touch {marker}"])
    assert not marker.exists()


def test_a_running_command_keeps_its_retired_generation_until_it_exits(
    manager: Manager, root: Path
) -> None:
    """The child inherits the lease's lock; the next operation after its exit removes it."""
    lease = manager.acquire()
    with running(lease) as child:
        manager.rotate()
        lease.release()
        assert lease.released
        assert lease.path.is_dir()
        manager.rotate()
        assert lease.path.is_dir()
        assert child.poll() is None
    assert child.returncode is not None
    with manager.acquire() as fresh:
        assert fresh.path != lease.path
    assert not lease.path.exists()
    manager.rotate()
    assert on_disk(root) == []


def test_lease_release_is_idempotent(manager: Manager) -> None:
    lease = manager.acquire()
    lease.release()
    assert lease.released
    assert manager.state.generations[lease.generation].leases == frozenset()
    seq = manager.state.seq
    lease.release()
    lease.release()
    assert manager.state.seq == seq
    assert lease.released


def test_a_with_block_releases_its_lease_on_exit(manager: Manager) -> None:
    with manager.acquire() as lease:
        assert not lease.released
        assert lease.id in manager.state.generations[lease.generation].leases
    assert lease.released
    assert manager.state.generations[lease.generation].leases == frozenset()


def _fail_inside(manager: Manager, held: list[Lease]) -> None:
    with manager.acquire() as lease:
        held.append(lease)
        raise LookupError("the command failed")


def test_a_with_block_releases_its_lease_when_the_block_raises(manager: Manager) -> None:
    held: list[Lease] = []
    with pytest.raises(LookupError):
        _fail_inside(manager, held)
    (lease,) = held
    assert lease.released
    assert manager.state.generations[lease.generation].leases == frozenset()


# -- close -------------------------------------------------------------------------------


def test_close_seals_the_manager_and_refuses_new_leases(manager: Manager) -> None:
    manager.close()
    assert manager.closed
    assert manager.sealed
    with pytest.raises(Unavailable):
        manager.acquire()
    manager.close()
    assert manager.closed


def test_a_lease_released_after_close_does_nothing(manager: Manager) -> None:
    lease = manager.acquire()
    manager.close()
    seq = manager.state.seq
    lease.release()
    assert lease.released
    assert manager.state.seq == seq


def test_close_removes_generations_no_command_is_using(manager: Manager, root: Path) -> None:
    retired = manager.acquire()
    manager.rotate()
    current = manager.acquire()
    assert retired.path != current.path
    manager.close()
    assert not retired.path.exists()
    assert not current.path.exists()
    assert on_disk(root) == []


def test_a_generation_a_command_holds_outlives_close_and_recover_removes_it_after_exit(
    root: Path,
) -> None:
    # Opened directly, not through open_manager: the recovery below rightly
    # journals the removal after close, which the closed manager never sees.
    m = Manager(root)
    try:
        m.retain()
        lease = m.acquire()
        (lease.path / "output.log").write_text("written by the command")
        with running(lease) as child:
            m.close()
            assert lease.path.is_dir()
            while_running = recover(root)
            assert lease.path.is_dir()
            assert (lease.path / "output.log").read_text() == "written by the command"
            # Reports name the generation, the leased directory's parent.
            assert [s.path for s in while_running.skipped] == [lease.path.parent]
            assert while_running.removed == ()
            assert child.poll() is None
        report = recover(root)
    finally:
        m.close()
    assert [r.path for r in report.removed] == [lease.path.parent]
    assert report.removed[0].generation == lease.generation
    assert not lease.path.exists()
    assert on_disk(root) == []


# -- many threads --------------------------------------------------------------------------


def test_many_threads_acquiring_rotating_and_releasing_race_cleanly(
    manager: Manager, root: Path
) -> None:
    threads, iterations = 32, 50
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    missing: list[Path] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            barrier.wait()
            for i in range(iterations):
                lease = manager.acquire()
                try:
                    if not lease.path.is_dir():
                        missing.append(lease.path)
                    (lease.path / f"t{seed}-{i}").write_text("x")
                    if rng.random() < 0.2:
                        manager.rotate()
                finally:
                    lease.release()
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not any(w.is_alive() for w in workers)
    assert errors == []
    assert missing == []
    manager.rotate()
    assert on_disk(root) == []
    assert manager.state.managers[manager.id].generations == frozenset()
    assert all(not g.leases for g in manager.state.generations.values())


# -- the stale sweep -----------------------------------------------------------------------


@pytest.fixture
def swept(root: Path) -> Path:
    """An existing, empty root for the sweep to find entries in."""
    root.mkdir(mode=0o700)
    return root


def make_generation_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(mode=0o700)
    (path / "file.txt").write_text("left by a crashed manager")
    (path / "sub").mkdir()
    (path / "sub" / "deep.txt").write_text("deep")
    return path


def test_the_sweep_keeps_a_fresh_unknown_generation(swept: Path) -> None:
    path = make_generation_dir(swept, GENERATION_PREFIX + "freshaaaaaaaaaa")
    report = recover(swept, stale_after=3600)
    assert path.is_dir()
    assert (path / "file.txt").read_text() == "left by a crashed manager"
    assert report.removed == ()
    assert report.skipped == ()


@pytest.mark.parametrize("aged_by", ["utime", "clock"])
def test_the_sweep_removes_an_old_unlocked_unknown_generation(swept: Path, aged_by: str) -> None:
    path = make_generation_dir(swept, GENERATION_PREFIX + "oldaaaaaaaaaaaaa")
    now = time.time()
    if aged_by == "utime":
        make_old(path, now)
        report = recover(swept, stale_after=DAY)
    else:
        report = recover(swept, stale_after=DAY, clock=lambda: now + 2 * DAY)
    assert not os.path.lexists(path)
    assert on_disk(swept) == []
    assert [(r.path, r.generation) for r in report.removed] == [(path, "oldaaaaaaaaaaaaa")]


def test_the_sweep_keeps_an_old_unknown_generation_while_someone_holds_its_lock(
    swept: Path,
) -> None:
    path = make_generation_dir(swept, GENERATION_PREFIX + "lockedaaaaaaaaaa")
    make_old(path, time.time())
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        report = recover(swept, stale_after=DAY)
        assert path.is_dir()
        assert (path / "sub" / "deep.txt").read_text() == "deep"
        assert report.removed == ()
        assert [s.path for s in report.skipped] == [path]
    finally:
        os.close(fd)
    # The lock was all that kept it.
    assert [r.path for r in recover(swept, stale_after=DAY).removed] == [path]
    assert not path.exists()


def test_the_sweep_keeps_unrelated_names_however_old(swept: Path) -> None:
    other = swept / "other-dir"
    other.mkdir()
    (other / "inside.txt").write_text("mine")
    notes = swept / "notes.txt"
    notes.write_text("not a generation")
    prefixed_file = swept / (GENERATION_PREFIX + "fileaaaaaaaaaaaa")
    prefixed_file.write_text("a file, not a directory")
    now = time.time()
    for path in (other, notes, prefixed_file):
        make_old(path, now)
    report = recover(swept, stale_after=DAY, clock=lambda: now + 30 * DAY)
    assert (other / "inside.txt").read_text() == "mine"
    assert notes.read_text() == "not a generation"
    assert prefixed_file.read_text() == "a file, not a directory"
    assert report.removed == ()


def test_the_sweep_removes_an_old_prefixed_symlink_without_touching_its_target(
    swept: Path, tmp_path: Path
) -> None:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "precious.txt").write_text("do not delete")
    link = swept / (GENERATION_PREFIX + "linkaaaaaaaaaaaa")
    link.symlink_to(target, target_is_directory=True)
    make_old(link, time.time())
    report = recover(swept, stale_after=DAY)
    assert not os.path.lexists(link)
    assert [r.path for r in report.removed] == [link]
    assert target.is_dir()
    assert os.listdir(target) == ["precious.txt"]
    assert (target / "precious.txt").read_text() == "do not delete"


def test_the_sweep_removes_unknown_unlocked_trash_only_once_older_than_stale_after(
    swept: Path,
) -> None:
    """Trash the journal does not know is no more the library's than an unknown generation."""
    trash = make_generation_dir(swept, TRASH_PREFIX + "trashaaaaaaaaaaa")
    assert recover(swept, stale_after=DAY).removed == ()
    assert (trash / "file.txt").read_text() == "left by a crashed manager"
    make_old(trash, time.time())
    report = recover(swept, stale_after=DAY)
    assert not os.path.lexists(trash)
    assert [r.path for r in report.removed] == [trash]


def test_the_sweep_keeps_unknown_trash_while_someone_holds_its_lock(swept: Path) -> None:
    trash = make_generation_dir(swept, TRASH_PREFIX + "trashlocked00000")
    fd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        report = recover(swept, stale_after=0)
        assert (trash / "file.txt").read_text() == "left by a crashed manager"
        assert report.removed == ()
    finally:
        os.close(fd)


def test_the_sweep_never_touches_a_live_managers_generation_however_old(
    manager: Manager, root: Path
) -> None:
    lease = manager.acquire()
    lease.release()
    make_old(lease.path, time.time())
    report = recover(root, stale_after=0, clock=lambda: time.time() + 365 * DAY)
    assert lease.path.is_dir()
    assert lease.path not in [r.path for r in report.removed]
    with manager.acquire() as again:
        assert again.path == lease.path


def test_opening_a_manager_sweeps_old_unknown_generations_and_keeps_fresh_ones(
    swept: Path, open_manager: Callable[..., Manager]
) -> None:
    old = make_generation_dir(swept, GENERATION_PREFIX + "oldaaaaaaaaaaaaa")
    fresh = make_generation_dir(swept, GENERATION_PREFIX + "freshaaaaaaaaaa")
    trash = make_generation_dir(swept, TRASH_PREFIX + "trashaaaaaaaaaaa")
    now = time.time()
    make_old(old, now)
    make_old(trash, now)
    m = open_manager(stale_after=DAY, clock=lambda: now)
    assert not old.exists()
    assert not trash.exists()
    assert fresh.is_dir()
    assert sorted(r.path for r in m.recovery.removed) == sorted([old, trash])



def test_a_label_longer_than_the_journal_accepts_is_refused_before_anything_is_written(
    manager: Manager,
) -> None:
    seq = manager.state.seq
    with pytest.raises(ValueError, match="at most 4096 characters"):
        manager.acquire(label="x" * 4097)
    assert manager.state.seq == seq
    with manager.acquire(label="x" * 4096) as lease:
        assert lease.label == "x" * 4096
