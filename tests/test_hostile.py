"""Hostile file systems: whatever is planted in or around a root, nothing outside it is touched.

Each test builds a real attack with real files: symlinks at every name the
library uses, hard links, special files, unreadable and absurdly deep trees,
names that are not UTF-8, a generation swapped by a racing thread, and a
root renamed, replaced or opened to others after it was checked.  The
directory ``outside`` stands for everything the library must never touch;
its fingerprint (every entry's type, mode, owner, size, inode, times and
content, without following links) is the same after every attack.

Tests that need a second user run the library as uid 65534 (nobody) in a
child process; they are skipped unless the suite runs as root.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontemp import Manager, Unavailable, handles, recover
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import root as root_module
from sessiontemp._kernel.root import GENERATION_PREFIX, TRASH_PREFIX, Root
from sessiontemp.journal.errors import UnsafeRoot
from sessiontemp.recovery.passes import run as run_recovery
from tests.conftest import journal_state
from tests.nobody import NOBODY, as_root, nobodys_place, run_as_nobody
from tests.test_root import fingerprint

__all__ = ["nobodys_place"]  # a fixture, used by name


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Everything the library must leave alone: a file, a directory, a nested file."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "precious.txt").write_text("must survive")
    (place / "dir").mkdir()
    (place / "dir" / "nested.txt").write_text("must survive too")
    return place


def leased_dir(manager: Manager) -> Path:
    """The path of the generation a fresh lease gets (its directory's parent), released again."""
    with manager.acquire() as lease:
        return lease.path.parent


def outcomes(root: Path) -> dict[str, str | None]:
    """Each generation's removal outcome as the journal has it."""
    return {g: s.removal_outcome for g, s in journal_state(root).generations.items()}


def generations_on_disk(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))


# -- symlinks at every name the library uses -----------------------------------------------------


def test_a_symlink_put_at_a_retired_generations_name_is_unlinked_and_its_target_untouched(
    manager: Manager, root: Path, outside: Path, tmp_path: Path
) -> None:
    lease = manager.acquire()
    generation = lease.path
    manager.rotate()
    before = fingerprint(outside)
    # The attacker moves the real directory away and points the name outside.
    os.rename(generation, tmp_path / "moved-away")
    generation.symlink_to(outside, target_is_directory=True)
    lease.release()
    assert fingerprint(outside) == before
    assert not os.path.lexists(generation)
    assert generations_on_disk(root) == []


def test_a_symlink_planted_at_a_generations_trash_name_is_unlinked_and_the_removal_still_ends(
    manager: Manager, root: Path, outside: Path
) -> None:
    generation = leased_dir(manager)
    gid = generation.name.removeprefix(GENERATION_PREFIX)
    trash = root / (TRASH_PREFIX + gid)
    trash.symlink_to(outside, target_is_directory=True)
    before = fingerprint(outside)
    manager.rotate()
    assert fingerprint(outside) == before
    assert generations_on_disk(root) == []
    assert outcomes(root)[gid] == "removed"


def test_an_unknown_symlink_at_a_trash_name_is_unlinked_by_recovery_and_its_target_untouched(
    root: Path, outside: Path
) -> None:
    with Manager(root):
        pass
    (root / f"{TRASH_PREFIX}aaaaaaaaaaaaaaaa").symlink_to(outside, target_is_directory=True)
    before = fingerprint(outside)
    # Unknown to the journal: swept only once older than stale_after.
    assert recover(root).removed == ()
    report = recover(root, stale_after=0)
    assert fingerprint(outside) == before
    assert generations_on_disk(root) == []
    assert [r.generation for r in report.removed] == ["aaaaaaaaaaaaaaaa"]


@pytest.mark.parametrize("name", ["journal.sqlite3-wal", "journal.sqlite3-shm", "managers",
                                  "journal.sqlite3.d"])
def test_a_symlink_at_a_journal_side_file_or_the_lock_directory_is_refused_and_its_target_untouched(
    root: Path, outside: Path, name: str
) -> None:
    with Manager(root):
        pass
    target = outside / "dir" if name in ("managers", "journal.sqlite3.d") else (
        outside / "precious.txt")
    if name == "managers":
        os.rmdir(root / name)
    (root / name).symlink_to(target)
    before = fingerprint(outside)
    with pytest.raises(UnsafeRoot, match="symbolic link") as caught:
        Manager(root)
    assert caught.value.path == str(root / name)
    with pytest.raises(UnsafeRoot, match="symbolic link"):
        recover(root)
    assert fingerprint(outside) == before


def test_symlinks_inside_a_generation_pointing_out_are_unlinked_and_their_targets_untouched(
    manager: Manager, outside: Path
) -> None:
    with manager.acquire() as lease:
        inside = lease.path
        (inside / "to-dir").symlink_to(outside, target_is_directory=True)
        (inside / "to-file").symlink_to(outside / "precious.txt")
        (inside / "relative").symlink_to("../../outside")
        (inside / "dangling").symlink_to(outside / "nothing-here")
        (inside / "deeper").mkdir()
        (inside / "deeper" / "up").symlink_to(outside / "dir", target_is_directory=True)
        before = fingerprint(outside)
    manager.rotate()
    assert fingerprint(outside) == before
    assert not inside.exists()


def test_a_generation_replaced_by_another_directory_is_refused_journaled_and_left(
    manager: Manager, root: Path, tmp_path: Path
) -> None:
    generation = leased_dir(manager)
    gid = generation.name.removeprefix(GENERATION_PREFIX)
    os.rename(generation, tmp_path / "the-real-one")
    generation.mkdir(mode=0o700)
    (generation / "someone-elses.txt").write_text("not yours")
    before = fingerprint(generation)
    manager.rotate()
    assert fingerprint(generation) == before
    assert (outcomes(root)[gid] or "").startswith("refused: ")
    report = recover(root)
    assert [s.path for s in report.skipped] == [generation]
    assert fingerprint(generation) == before


# -- links and special files inside a generation ------------------------------------------------


def test_a_hard_link_inside_a_generation_to_an_outside_file_is_unlinked_never_truncated(
    manager: Manager, outside: Path
) -> None:
    target = outside / "precious.txt"
    with manager.acquire() as lease:
        os.link(target, lease.path / "hard")
        os.link(target, lease.path / "hard-too")
        assert target.stat().st_nlink == 3
    manager.rotate()
    assert target.read_text() == "must survive"
    assert target.stat().st_nlink == 1


def test_fifos_sockets_and_device_files_inside_a_generation_are_unlinked_without_blocking(
    manager: Manager, outside: Path
) -> None:
    with manager.acquire() as lease:
        inside = lease.path
        os.mkfifo(inside / "fifo")
        os.mknod(inside / "socket", 0o600 | stat.S_IFSOCK)
        try:
            # /dev/null and /dev/loop0's numbers: opening either would do harm.
            os.mknod(inside / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            os.mknod(inside / "disk", 0o600 | stat.S_IFBLK, os.makedev(7, 0))
        except PermissionError:
            pass  # device nodes need CAP_MKNOD; the FIFO and socket still test the rest
    done = threading.Event()

    def rotate() -> None:
        manager.rotate()
        done.set()

    worker = threading.Thread(target=rotate, daemon=True)
    worker.start()
    # A removal that opened the FIFO would block here until a writer came.
    assert done.wait(timeout=10), "removing a FIFO blocked"
    assert not inside.exists()


def test_names_that_are_not_valid_utf8_are_removed(manager: Manager) -> None:
    with manager.acquire() as lease:
        inside = os.fsencode(lease.path)
        os.mkdir(inside + b"/dir-\xff\xfe")
        for name in (b"/file-\xc3\x28", b"/dir-\xff\xfe/nested-\x80", b"/\xed\xa0\x80"):
            with open(inside + name, "wb") as f:
                f.write(b"x")
        os.symlink(b"/\xff-nowhere", inside + b"/link-\xfe")
    manager.rotate()
    assert not lease.path.exists()


# -- unreadable and deep trees -------------------------------------------------------------------


@as_root
def test_a_chmod_0_subtree_is_removed_by_its_owner_without_following_a_link_to_change_modes(
    nobodys_place: Path,
) -> None:
    # The CPython CVE path (rmtree's onerror chmod followed symlinks): a
    # directory made unreadable, holding a link to a directory its owner
    # also owns; the reset of modes must reach the former, never the latter.
    outside = nobodys_place / "outside"
    outside.mkdir(mode=0o500)
    (nobodys_place / "root").mkdir(mode=0o700)
    for path in (outside, nobodys_place / "root"):
        os.chown(path, NOBODY, NOBODY)
    result = run_as_nobody(
        f"""
        from pathlib import Path
        from sessiontemp import Manager
        m = Manager({str(nobodys_place / "root")!r})
        m.retain()
        with m.acquire() as lease:
            a = lease.path / "a"
            (a / "b" / "c").mkdir(parents=True)
            (a / "b" / "c" / "file").write_text("x")
            (a / "b" / "link").symlink_to({str(outside)!r}, target_is_directory=True)
            for d in (a / "b" / "c", a / "b", a):
                d.chmod(0)
            print(lease.path)
        m.rotate()
        m.close()
        """,
        cwd=nobodys_place,
    )
    assert result.returncode == 0, result.stderr
    assert not Path(result.stdout.strip()).exists()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o500
    assert generations_on_disk(nobodys_place / "root") == []


def make_deep_tree(top: Path, depth: int) -> None:
    """A chain of *depth* directories under *top*, made through descriptors (paths would be
    longer than PATH_MAX), a file at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_tree_5000_levels_deep_is_removed_with_only_256_descriptors_allowed(root: Path) -> None:
    # In a child: the lowered limit must not leak into the rest of the suite.
    script = f"""
        import resource
        from pathlib import Path
        from sessiontemp import Manager
        from tests.test_hostile import make_deep_tree
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        with Manager({str(root)!r}) as m:
            m.retain()
            with m.acquire() as lease:
                make_deep_tree(lease.path, 5000)
                print(lease.path)
            m.rotate()
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
        timeout=120, check=False, cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert not Path(result.stdout.strip()).exists()
    assert generations_on_disk(root) == []
    assert set(outcomes(root).values()) == {"removed"}


def test_a_deep_tree_whose_middle_is_moved_away_during_removal_is_refused_not_chased(
    open_manager: Callable[..., Manager], root: Path, tmp_path: Path
) -> None:
    # The walk lets go of shallow levels and climbs back through "..": a
    # level moved elsewhere meanwhile has another parent, which must not be
    # mistaken for the one it came from.
    armed = moved = False

    def hook(kind: str, detail: str) -> None:
        nonlocal moved
        if armed and kind == "unlink" and detail == "bottom" and not moved:
            moved = True
            trash = root / (TRASH_PREFIX + lease.generation)
            os.rename(trash / "tmp" / "d" / "d", elsewhere / "d")

    manager = open_manager(step_hook=hook)
    manager.retain()
    lease = manager.acquire()
    make_deep_tree(lease.path, 100)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    armed = True
    manager.rotate()
    lease.release()
    assert moved
    # What was moved out is emptied through the descriptors held on it, but
    # the walk does not follow it up into a parent it never walked down from.
    assert os.listdir(elsewhere) == ["d"]
    armed = False
    assert generations_on_disk(root) != []
    manager.close()  # retries the removals it started
    assert generations_on_disk(root) == []
    assert os.listdir(elsewhere) == ["d"]


# -- racing threads -------------------------------------------------------------------------


def _counted(attack: Callable[[Path, threading.Event], int], generation: Path,
             stop: threading.Event, swaps: list[int]) -> None:
    swaps.append(attack(generation, stop))


def race(
    manager: Manager, root: Path, outside: Path, iterations: int,
    attack: Callable[[Path, threading.Event], int], prepare: Callable[[Path], None],
) -> None:
    """Remove a generation *iterations* times while *attack* runs against it in a thread.

    *attack* returns how many times it planted its symlink: a race in which
    it never did would prove nothing.
    """
    before = fingerprint(outside)
    planted = 0
    for _ in range(iterations):
        lease = manager.acquire()
        prepare(lease.path)
        manager.rotate()
        stop = threading.Event()
        swaps: list[int] = []
        attacker = threading.Thread(target=_counted, args=(attack, lease.path, stop, swaps),
                                    daemon=True)
        attacker.start()
        # Let the attacker get going first, so the removal meets it mid-swap.
        time.sleep(0.001)
        lease.release()
        stop.set()
        attacker.join(timeout=10)
        assert not attacker.is_alive()
        planted += sum(swaps)
        assert fingerprint(outside) == before
    assert planted > 0, "the attacker never swapped anything in"
    # Whatever the attacker left behind under our names is cleaned up or refused,
    # still without touching outside.
    recover(root)
    assert fingerprint(outside) == before


@pytest.mark.parametrize("iterations", [
    pytest.param(30, id="short"), pytest.param(1000, id="long", marks=pytest.mark.slow),
])
def test_a_generation_swapped_for_a_symlink_while_it_is_removed_never_touches_outside(
    manager: Manager, root: Path, outside: Path, tmp_path: Path, iterations: int
) -> None:
    aside = tmp_path / "aside"

    def attack(generation: Path, stop: threading.Event) -> int:
        planted = 0
        while not stop.is_set():
            try:
                os.rename(generation, aside)
                generation.symlink_to(outside, target_is_directory=True)
                planted += 1
                generation.unlink()
                os.rename(aside, generation)
            except OSError:
                pass  # the remover got there first: try again with what is left
        if os.path.lexists(aside):
            os.rename(aside, tmp_path / f"kept-{os.urandom(4).hex()}")
        return planted

    def prepare(generation: Path) -> None:
        (generation / "f").write_text("x")

    race(manager, root, outside, iterations, attack, prepare)


@pytest.mark.parametrize("iterations", [
    pytest.param(30, id="short"), pytest.param(1000, id="long", marks=pytest.mark.slow),
])
def test_a_subdirectory_swapped_for_a_symlink_during_removal_never_touches_outside(
    manager: Manager, root: Path, outside: Path, iterations: int
) -> None:
    def prepare(generation: Path) -> None:
        (generation / "sub").mkdir()
        for i in range(50):
            (generation / "sub" / f"f{i}").write_text("x")

    def attack(generation: Path, stop: threading.Event) -> int:
        sub, spare = generation / "sub", generation / "spare"
        planted = 0
        while not stop.is_set():
            try:
                os.rename(sub, spare)
                sub.symlink_to(outside, target_is_directory=True)
                planted += 1
                sub.unlink()
                os.rename(spare, sub)
            except OSError:
                pass
        return planted

    race(manager, root, outside, iterations, attack, prepare)


# -- the root itself --------------------------------------------------------------------------


def replace_root(root: Path, tmp_path: Path, how: str) -> Path:
    """Rename *root* away and put something else at its name; returns where the original went."""
    moved = tmp_path / "moved-root"
    os.rename(root, moved)
    if how == "directory":
        root.mkdir(mode=0o700)
        (root / "theirs.txt").write_text("not yours")
    else:
        decoy = tmp_path / "decoy"
        decoy.mkdir(mode=0o700)
        root.symlink_to(decoy, target_is_directory=True)
    return moved


@pytest.mark.parametrize("how", ["directory", "symlink"])
def test_a_root_renamed_and_replaced_after_open_refuses_leases_and_recovery_and_is_not_touched(
    root: Path, tmp_path: Path, how: str
) -> None:
    manager = Manager(root)  # not the fixture's: its checks read the journal by the old name
    manager.retain()
    with manager.acquire():
        pass
    moved = replace_root(root, tmp_path, how)
    before = fingerprint(tmp_path / ("decoy" if how == "symlink" else "root"))
    with pytest.raises(Unavailable, match="was replaced after it was opened"):
        manager.acquire()
    held = Root.open(moved)
    store = handles.of(manager.id).store
    assert store is not None
    try:
        held.path = root  # as if this Root had been opened before the swap
        with pytest.raises(UnsafeRoot, match="was replaced after it was opened") as caught:
            run_recovery(held, store, stale_after=0.0, clock=lambda: 0.0,
                         steps=Steps(), wait=True)
        assert caught.value.path == str(root)
    finally:
        held.close()
    manager.close()
    assert fingerprint(tmp_path / ("decoy" if how == "symlink" else "root")) == before
    # The manager's own things were cleaned up where they really are.
    assert generations_on_disk(moved) == []
    assert os.listdir(moved / "managers") == []


def test_a_root_swapped_between_its_open_and_its_check_is_refused_and_the_swap_untouched(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root.mkdir(mode=0o700)
    real_check = root_module.check_owned_private

    def swap_then_check(path: Path, st: os.stat_result, *, root: bool = False) -> None:
        # Runs right after the root's descriptor is opened: the widest race window.
        replace_root(path, tmp_path, "directory")
        real_check(path, st, root=root)

    monkeypatch.setattr(root_module, "check_owned_private", swap_then_check)
    with pytest.raises(UnsafeRoot, match="was replaced after it was opened"):
        Manager(root)
    monkeypatch.undo()
    assert sorted(os.listdir(root)) == ["theirs.txt"]
    assert os.listdir(tmp_path / "moved-root") == []


@pytest.mark.parametrize("change", ["chmod-0777", "chown-nobody"])
@as_root
def test_a_root_opened_to_others_after_it_was_checked_refuses_leases_and_recovery(
    manager: Manager, root: Path, change: str
) -> None:
    if change == "chmod-0777":
        os.chmod(root, 0o777)  # noqa: S103 - the attack under test
        expected = "writable by group or others"
    else:
        os.chown(root, NOBODY, NOBODY)
        expected = f"owned by uid {NOBODY}"
    with pytest.raises(Unavailable, match=expected):
        manager.acquire()
    with pytest.raises(UnsafeRoot, match=expected):
        recover(root)
    os.chmod(root, 0o700)
    os.chown(root, os.getuid(), os.getgid())
    with manager.acquire():
        pass
