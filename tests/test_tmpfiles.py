"""systemd-tmpfiles' age clean against a root under the directory it cleans.

Each test writes a tmpfiles.d line of its own (``d DIR - - - AGE``) for a
directory holding the root and runs the real ``systemd-tmpfiles --clean``
on it.  Age 0 ages everything at once; 1s needs everything to be older
than a second, which the test waits for.

* While a manager lives, it holds a shared flock on the root directory,
  which tmpfiles probes and honours for the whole subtree: nothing of the
  root goes (journal, ``-wal``, ``-shm``, ``managers/``, ``recovery.lock``,
  generations).
* With no live manager, the clean removes the root's own files and every
  generation no command holds; a generation a running command holds (the
  lease's lock, inherited) stays, and so does the root directory around
  it.  The next manager starts a fresh journal and works; the kept
  generation, unknown to that journal, is swept once its command exited
  and it is older than ``stale_after``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from journal import Store
from sessiontemp import Manager, recover
from tests.model import simulate_kill

TMPFILES = shutil.which("systemd-tmpfiles")
pytestmark = pytest.mark.skipif(TMPFILES is None, reason="systemd-tmpfiles is not installed")

ROOT_FILES = {"journal.sqlite3", "journal.sqlite3-wal", "journal.sqlite3-shm", "managers",
              "recovery.lock"}


def age_clean(directory: Path, age: str, config_dir: Path) -> None:
    """Run ``systemd-tmpfiles --clean`` with one line aging everything under *directory*."""
    assert TMPFILES is not None
    config = config_dir / "sessiontemp-test.conf"
    config.write_text(f"d {directory} - - - {age}\n")
    if age != "0":
        # Everything must be older than the age, by every timestamp tmpfiles reads.
        time.sleep(1.2)
    done = subprocess.run([TMPFILES, "--clean", str(config)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def tree(top: Path) -> set[str]:
    return {str(Path(here, name).relative_to(top))
            for here, dirs, files in os.walk(top) for name in dirs + files}


def events(root: Path) -> int:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return store.last_seq()
    finally:
        store.close()


def spared_while_live(tmp_path: Path, age: str) -> None:
    """A live manager, a current generation and a leased one with a file: all survive a clean."""
    cleaned = tmp_path / "tmp"
    root = cleaned / "root"
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "made-by-a-command.txt").write_text("output")
        manager.rotate()
        leased = manager.acquire()
        (leased.path / "in-use.txt").write_text("output")
        before = tree(root)
        assert {name for name in os.listdir(root) if not name.startswith("sessiontemp-")} == (
            ROOT_FILES)
        count = events(root)
        age_clean(cleaned, age, tmp_path)
        assert tree(root) == before, "the clean removed part of a live root"
        assert events(root) == count
        leased.release()
        with manager.acquire() as lease:
            assert lease.popen([sys.executable, "-c", "pass"]).wait() == 0
    report = recover(root)
    assert report.removed == ()
    assert report.skipped == ()


@pytest.mark.parametrize("age", ["0", "1s"])
def test_an_age_clean_removes_nothing_of_a_root_a_live_manager_holds(
    tmp_path: Path, age: str,
) -> None:
    spared_while_live(tmp_path, age)


def test_without_the_roots_lock_the_same_clean_takes_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test above can fail: a manager that does not lock the root loses its journal."""
    from sessiontemp import manager

    monkeypatch.setattr(manager, "hold_root", lambda fd, *, patience: True)
    with pytest.raises(AssertionError, match="the clean removed part of a live root"):
        spared_while_live(tmp_path, "0")


@pytest.mark.parametrize("how", ["close", "kill"])
def test_with_no_live_manager_a_clean_takes_the_roots_files_but_not_a_running_commands_directory(
    tmp_path: Path, how: str,
) -> None:
    cleaned = tmp_path / "tmp"
    root = cleaned / "root"
    manager = Manager(root)
    manager.retain()
    with manager.acquire() as lease:
        pass
    manager.rotate()
    lease = manager.acquire()
    command = lease.popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE)
    running = lease.path
    (running / "in-use.txt").write_text("output")
    lease.release()
    manager.rotate()
    unused = manager.acquire()
    unused.release()
    try:
        if how == "close":
            manager.close()
        else:
            simulate_kill(manager)
        age_clean(cleaned, "0", tmp_path)
        # The running command's directory (locked) and the root around it stay;
        # the journal, its -wal and -shm, managers/, recovery.lock and every
        # unlocked generation go.
        assert tree(root) == {running.name, f"{running.name}/in-use.txt"}
        with Manager(root) as fresh:
            fresh.retain()
            with fresh.acquire() as lease:
                assert lease.path != running
            assert fresh.recovery.removed == ()
        assert events(root) > 0
        assert running.is_dir()
    finally:
        assert command.stdin is not None
        command.stdin.close()
        command.wait()
    # Unknown to the fresh journal: swept once older than stale_after.
    assert [r.path for r in recover(root, stale_after=0).removed] == [running]
    assert sorted(n for n in os.listdir(root) if n.startswith("sessiontemp-")) == []


def test_a_root_nothing_holds_is_removed_whole_and_made_again_by_the_next_manager(
    tmp_path: Path,
) -> None:
    cleaned = tmp_path / "tmp"
    root = cleaned / "root"
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire():
            pass
    age_clean(cleaned, "0", tmp_path)
    assert not root.exists()
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire() as lease:
            assert lease.path.is_dir()
    assert oct(root.stat().st_mode & 0o777) == oct(0o700)
