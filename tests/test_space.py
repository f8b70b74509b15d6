"""Space: what a session's directory holds, a budget it cannot pass, a disk not left to fill.

On real file systems: small tmpfs mounts (the tests skip where mounting
is not permitted), real files, real processes writing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sessiontemp import LowDisk, Manager, OverBudget, Unavailable, Usage, recover
from sessiontemp._kernel.root import RESERVE, generation_name
from sessiontemp.journal import Record, RuleViolation, State, Store, checkpoint, replay
from sessiontemp.journal.events import (
    Event,
    GenerationCreated,
    GenerationMeasured,
    GenerationReady,
    ManagerClosed,
    ManagerOpened,
    RemovalStarted,
    Retained,
    Rotated,
    SpaceRefused,
)
from sessiontemp.space.reserve import RESERVE_BYTES
from sessiontemp.space.usage import measure_tree
from tests.commands import journaled
from tests.conftest import live_state
from tests.nobody import as_root, nobodys_place, run_as_nobody
from tests.strategies import generation_id, manager_id
from tests.test_bad_journal import fill, small_file_system

__all__ = ["nobodys_place"]  # a fixture, used by name

KIB = 1024
MIB = 1024 * KIB


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MiB."""
    with small_file_system(tmp_path, "8m") as mounted:
        yield mounted


def measured(root: Path) -> list[GenerationMeasured]:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return [r.event for r in store.records() if isinstance(r.event, GenerationMeasured)]
    finally:
        store.close()


def records(root: Path) -> int:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return len(list(store.records()))
    finally:
        store.close()


def du_bytes(path: Path) -> int:
    """What ``du`` says *path* allocates, in bytes (hard links once, symlinks not followed)."""
    done = subprocess.run(["du", "-s", "-B1", "--one-file-system", str(path)],
                          capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def writer_command(path: Path) -> list[str]:
    """A command that appends to *path* every few milliseconds until killed, and says it started."""
    return [sys.executable, "-c", (
        "import sys, time\n"
        f"f = open({str(path)!r}, 'ab', buffering=0)\n"
        "print('started', flush=True)\n"
        "while True:\n    f.write(b'w' * 4096)\n    time.sleep(0.005)\n")]


# -- budgets ------------------------------------------------------------------------------


def test_a_directory_grown_past_max_bytes_refuses_the_next_acquire_naming_its_largest_entries_while_a_running_command_keeps_writing(  # noqa: E501
    fs: Path,
) -> None:
    with Manager(fs / "root", max_bytes=1 * MIB, measure_every=math.inf) as manager:
        manager.retain()
        lease = manager.acquire(label="writer")
        (lease.path / "big.bin").write_bytes(b"b" * (2 * MIB))
        (lease.path / "cache").mkdir()
        (lease.path / "cache" / "mid.bin").write_bytes(b"m" * (512 * KIB))
        (lease.path / "small.txt").write_bytes(b"s" * 100)
        running = lease.popen(writer_command(lease.path / "log.txt"), stdout=subprocess.PIPE)
        try:
            assert running.stdout is not None
            assert running.stdout.readline() == b"started\n"
            usage = manager.measure()
            assert usage.bytes > 1 * MIB
            with pytest.raises(OverBudget) as refused:
                manager.acquire(label="next")
            error = refused.value
            assert isinstance(error, Unavailable)
            assert error.path == str(lease.path)
            assert error.max_bytes == 1 * MIB
            assert error.bytes > 1 * MIB
            names = [name for name, _ in error.largest]
            assert names[:2] == ["big.bin", "cache"]
            message = str(error)
            assert "big.bin" in message
            assert "cache" in message
            assert "budget" in message
            assert "Rotate" in message
            assert "raise the budget" in message
            # The running command was not touched: it still runs and writes.
            size = (lease.path / "log.txt").stat().st_size
            deadline = time.monotonic() + 30
            while (lease.path / "log.txt").stat().st_size == size:
                assert time.monotonic() < deadline, "the command stopped writing"
                time.sleep(0.01)
            assert running.poll() is None
        finally:
            running.kill()
            running.wait()
            assert running.stdout is not None
            running.stdout.close()
            lease.release()


def test_rotate_lets_the_session_go_on_in_a_fresh_directory_and_the_old_one_goes_with_its_last_lease(  # noqa: E501
    fs: Path,
) -> None:
    with Manager(fs / "root", max_bytes=256 * KIB, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "big.bin").write_bytes(b"b" * MIB)
            old = lease.path
        manager.measure()
        with pytest.raises(OverBudget):
            manager.acquire()
        manager.rotate()
        assert not old.exists()
        with manager.acquire() as fresh:
            assert fresh.path != old
            (fresh.path / "small").write_bytes(b"s")
        assert manager.measure().bytes < 256 * KIB


def test_files_removed_from_a_directory_refused_as_over_budget_let_the_next_acquire_through_once_measured(  # noqa: E501
    root: Path,
) -> None:
    with Manager(root, max_inodes=10, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            for i in range(20):
                (lease.path / f"f{i}").write_bytes(b"")
        manager.measure()
        with pytest.raises(OverBudget) as refused:
            manager.acquire()
        assert refused.value.inodes == 21
        assert refused.value.max_inodes == 10
        assert "21 inodes of 10" in str(refused.value)
        for i in range(15):
            (lease.path / f"f{i}").unlink()
        assert manager.measure().inodes == 6
        with manager.acquire():
            pass


def test_an_inode_budget_names_the_entries_holding_the_inodes_and_the_keyword_with_its_value(
    root: Path,
) -> None:
    with Manager(root, max_inodes=100, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "big.bin").write_bytes(b"b" * MIB)
            (lease.path / "notes.txt").write_text("notes")
            (lease.path / "cache").mkdir()
            for i in range(500):
                (lease.path / "cache" / f"f{i}").write_bytes(b"")
        manager.measure()
        with pytest.raises(OverBudget) as refused:
            manager.acquire()
        assert str(refused.value) == (
            f"{lease.path} is over its budget: it holds 504 inodes of 100; the entries "
            "holding the most inodes: cache (501 inodes), big.bin (1 inode), notes.txt (1 "
            "inode). Rotate (manager.rotate()) to start the next command in a fresh "
            "directory, remove files from this one (then manager.measure()), or raise the "
            "budget (given: max_inodes=100); commands running in it are not touched")


def test_a_byte_budget_names_the_largest_entries_and_the_keyword_with_its_value(
    root: Path,
) -> None:
    with Manager(root, max_bytes=1024, max_inodes=1000, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "big.bin").write_bytes(b"b" * MIB)
        manager.measure()
        with pytest.raises(OverBudget) as refused:
            manager.acquire()
        assert str(refused.value) == (
            f"{lease.path} is over its budget: it holds 1.0 MiB of a 1.0 KiB budget and 2 "
            "inodes of 1,000; its largest entries: big.bin (1.0 MiB). Rotate "
            "(manager.rotate()) to start the next command in a fresh directory, remove files "
            "from this one (then manager.measure()), or raise the budget (given: "
            "max_bytes=1024); commands running in it are not touched")


def test_a_budget_is_checked_against_the_last_measurement_only_so_an_unmeasured_directory_is_admitted(  # noqa: E501
    root: Path,
) -> None:
    with Manager(root, max_bytes=10, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "f").write_bytes(b"x" * 10_000)
        # Not measured yet: acquire never walks on its own to find out.
        with manager.acquire():
            pass


@pytest.mark.parametrize(("name", "value"), [
    ("max_bytes", -1), ("max_inodes", -5), ("min_free_bytes", -1), ("max_bytes", True),
    ("max_inodes", False), ("max_bytes", 1.5), ("max_bytes", float("nan")),
    ("measure_every", -1.0), ("measure_every", float("nan")), ("measure_every", True),
    ("measure_every", "30"),
])
def test_a_negative_nan_or_bool_limit_is_refused_with_value_error_naming_it(
    root: Path, name: str, value: object
) -> None:
    options: dict[str, Any] = {name: value}
    with pytest.raises(ValueError, match=name):
        Manager(root, **options)
    assert not root.exists()


# -- the rules ------------------------------------------------------------------------------

M1, M2, G1 = manager_id("m1"), manager_id("m2"), generation_id("g1")


def fold(*events: Event) -> State:
    return replay([Record(seq, 1000.0 + seq, event) for seq, event in enumerate(events, 1)])


def made(*more: Event) -> tuple[Event, ...]:
    return (ManagerOpened(M1, 11), ManagerOpened(M2, 12), Retained(M1),
            GenerationCreated(M1, G1), *more)


def test_a_measurement_keeps_the_last_size_and_the_peak_of_a_live_generation() -> None:
    state = fold(*made(GenerationReady(M1, G1, 1, 2),
                       GenerationMeasured(M1, G1, 9000, 5, 1010.5, 0),
                       GenerationMeasured(M1, G1, 4000, 7, 1011.5, 1),
                       Rotated(M1), GenerationMeasured(M1, G1, 100, 1, 1012.5, 0)))
    generation = state.generations[G1]
    assert (generation.measured_bytes, generation.measured_inodes) == (100, 1)
    assert generation.measured_at == 1012.5
    assert (generation.peak_bytes, generation.peak_inodes) == (9000, 7)


@pytest.mark.parametrize(("events", "why"), [
    (made(GenerationMeasured(M1, G1, 1, 1, 1.0, 0)), "not live"),
    (made(GenerationReady(M1, G1, 1, 2), GenerationMeasured(M2, G1, 1, 1, 1.0, 0)),
     "not of"),
    (made(GenerationReady(M1, G1, 1, 2), Rotated(M1),
          RemovalStarted(G1, M1, "retired and no lease left"),
          GenerationMeasured(M1, G1, 1, 1, 1.0, 0)), "not live"),
    (made(GenerationReady(M1, G1, 1, 2), ManagerClosed(M2),
          GenerationMeasured(M2, G1, 1, 1, 1.0, 0)), "not open"),
], ids=["not ready", "another manager's", "being removed", "by an ended manager"])
def test_a_measurement_of_a_generation_not_live_and_its_managers_is_refused(
    events: tuple[Event, ...], why: str
) -> None:
    with pytest.raises(RuleViolation, match=why):
        fold(*events)


# -- measuring ------------------------------------------------------------------------------


def test_measure_without_a_current_directory_returns_zeros(root: Path) -> None:
    with Manager(root) as manager:
        usage = manager.measure()
        assert (usage.bytes, usage.inodes) == (0, 0)
        manager.retain()
        assert manager.measure().bytes == 0
        assert measured(root) == []


def test_a_measurement_is_journaled_and_replay_and_checkpoints_carry_the_last_one_and_the_peak(
    root: Path,
) -> None:
    with Manager(root, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "f").write_bytes(b"x" * 300_000)
            first = manager.measure()
            (lease.path / "f").unlink()
            second = manager.measure()
        generation = manager.state.generations[lease.generation]
        assert (generation.measured_bytes, generation.measured_inodes) == (second.bytes,
                                                                          second.inodes)
        assert generation.peak_bytes == first.bytes > second.bytes
        assert generation.peak_inodes == 2
        assert generation.measured_at is not None
        events = measured(root)
        assert [(e.bytes, e.inodes, e.unread) for e in events] == [
            (first.bytes, 2, 0), (second.bytes, 1, 0)]
        replayed = live_state(root).generations[lease.generation]
        assert replayed == generation
        store = Store(root / "journal.sqlite3")
        try:
            state = replay(store.records())
            checkpoint.save(store, state)
            restored = checkpoint.restore(store)
        finally:
            store.close()
        assert restored.checkpoint == state.seq
        assert restored.state.generations[lease.generation] == generation


def test_the_background_thread_journals_growth_and_not_repeats(root: Path) -> None:
    with Manager(root, measure_every=0.05) as manager:
        manager.retain()
        lease = manager.acquire()
        (lease.path / "f").write_bytes(b"x" * 100_000)
        deadline = time.monotonic() + 60
        while not any(e.bytes >= 100_000 for e in measured(root)):
            assert time.monotonic() < deadline, "no measurement was journaled"
            time.sleep(0.05)
        lease.release()
        # Idle, released: a few more periods pass without another record.
        count = len(measured(root))
        time.sleep(0.5)
        assert len(measured(root)) <= count + 1


@pytest.mark.slow
def test_the_background_thread_journals_a_tree_of_ten_thousand_files_while_every_core_is_busy(
    root: Path,
) -> None:
    """The walk runs at a low priority, in a child: late on a saturated machine, never
    starved.  Two processes spinning at normal priority take both cores meanwhile."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        with Manager(root, measure_every=0.5) as manager:
            manager.retain()
            with manager.acquire() as lease:
                for i in range(100):
                    sub = lease.path / f"d{i}"
                    sub.mkdir()
                    for j in range(100):
                        (sub / f"f{j}").write_bytes(b"")
                deadline = time.monotonic() + 300
                while not any(e.inodes > 10_000 for e in measured(root)):
                    assert time.monotonic() < deadline, "no measurement of the tree journaled"
                    time.sleep(0.2)
        assert max(e.inodes for e in measured(root)) == 1 + 100 + 100 * 100
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_usage_counts_allocated_bytes_and_each_hard_link_once_never_following_a_symlink_or_leaving_the_mount(  # noqa: E501
    fs: Path, tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge").write_bytes(b"o" * MIB)
    top = fs / "tree"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "data").write_bytes(b"d" * 200_000)
    os.link(top / "a" / "b" / "data", top / "hardlink")
    os.link(top / "a" / "b" / "data", top / "a" / "another")
    (top / "to-outside").symlink_to(outside)
    (top / "a" / "to-huge").symlink_to(outside / "huge")
    with open(top / "sparse", "wb") as sparse:
        sparse.truncate(1 << 30)
        sparse.seek(1 << 20)
        sparse.write(b"x")
    inner = top / "mounted"
    inner.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(inner)], check=True)
    try:
        (inner / "elsewhere").write_bytes(b"e" * 500_000)
        usage = measure_tree(top)
        assert usage.mounts == ("mounted",)
    finally:
        subprocess.run(["umount", "-l", str(inner)], check=True)
    # du, with the mount gone, sees what the walk saw with it there.
    assert usage.bytes == du_bytes(top)
    assert usage.bytes < 300_000  # not the 1 MiB outside, the 1 GiB sparse, the mount
    # top, a, b, data (under three names), two symlinks, sparse; not the mount's root.
    assert usage.inodes == 7
    assert usage.unread == ()
    assert usage.unread_count == 0
    assert usage.largest[0][0] in ("a", "hardlink")


@as_root
def test_a_chmod_000_subdirectory_is_counted_as_the_entry_it_is_and_named_as_unread(
    nobodys_place: Path,
) -> None:
    done = run_as_nobody(f"""
        import json, os, pathlib
        from sessiontemp.space.usage import measure_tree
        top = pathlib.Path({str(nobodys_place)!r}) / "tree"
        (top / "closed" / "deep").mkdir(parents=True)
        (top / "closed" / "deep" / "f").write_bytes(b"c" * 100_000)
        (top / "open").mkdir()
        (top / "open" / "f").write_bytes(b"o" * 10_000)
        (top / "open" / "shut").mkdir()
        os.chmod(top / "closed", 0)
        os.chmod(top / "open" / "shut", 0)
        usage = measure_tree(top)
        print(json.dumps({{"unread": usage.unread, "count": usage.unread_count,
                          "inodes": usage.inodes, "bytes": usage.bytes}}))
        os.chmod(top / "closed", 0o700)
        os.chmod(top / "open" / "shut", 0o700)
    """, cwd=nobodys_place)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["unread"] == ["closed", "open/shut"]
    assert found["count"] == 2
    # top, closed, open, open/f, open/shut: nothing under a closed one.
    assert found["inodes"] == 5
    assert found["bytes"] < 100_000


def test_a_measurement_racing_a_command_that_deletes_and_makes_files_never_raises(
    root: Path,
) -> None:
    with Manager(root, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            stop = threading.Event()

            def churn() -> None:
                n = 0
                while not stop.is_set():
                    base = lease.path / f"d{n % 3}"
                    shutil.rmtree(base, ignore_errors=True)
                    for i in range(30):
                        (base / str(i % 5)).mkdir(parents=True, exist_ok=True)
                        (base / str(i % 5) / f"f{i}").write_bytes(b"x" * 5000)
                    n += 1

            worker = threading.Thread(target=churn)
            worker.start()
            try:
                for _ in range(100):
                    usage = manager.measure()
                    assert usage.path == lease.path
            finally:
                stop.set()
                worker.join()


def test_a_measurement_racing_the_removal_of_its_directory_never_raises(root: Path) -> None:
    with Manager(root, measure_every=math.inf) as manager:
        manager.retain()
        for _ in range(15):
            lease = manager.acquire()
            for i in range(300):
                (lease.path / f"f{i}").write_bytes(b"x" * 100)
            results: list[Usage] = []

            def measure_five(into: list[Usage] = results) -> None:
                into.extend(manager.measure() for _ in range(5))

            measuring = threading.Thread(target=measure_five)
            measuring.start()
            manager.rotate()
            lease.release()  # its removal, while the other thread walks it
            measuring.join()
            assert len(results) == 5
            assert not lease.path.exists()
        # Whatever was journaled was for a live directory: the journal replays.
        assert live_state(root).generations.keys() == manager.state.generations.keys()


# -- the disk -------------------------------------------------------------------------------


def fill_up(fs: Path) -> Path:
    """Fill *fs* to the last block; returns the filler."""
    filler = fill(fs)
    assert os.statvfs(fs).f_bavail == 0
    return filler


def test_a_full_file_system_refuses_with_low_disk_before_any_command_starts_and_removal_recovery_and_close_still_work(  # noqa: E501
    fs: Path,
) -> None:
    root = fs / "root"
    manager = Manager(root, measure_every=math.inf)
    try:
        # A manager that dies holding a directory full of files: recovery's work.
        dead = subprocess.run([sys.executable, "-c", (
            "import os, signal, sessiontemp\n"
            f"m = sessiontemp.Manager({str(root)!r}); m.retain(); lease = m.acquire()\n"
            "(lease.path / 'left').write_bytes(b'l' * 1_000_000)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")], check=False)
        assert dead.returncode == -signal.SIGKILL
        left = [p for p in root.iterdir() if p.name.startswith("sessiontemp-gen-")]
        assert len(left) == 1
        manager.retain()
        held = manager.acquire()
        (held.path / "data").write_bytes(b"d" * MIB)
        manager.rotate()  # retired, removed with its last lease
        assert (root / RESERVE).stat().st_blocks * 512 >= RESERVE_BYTES
        (fs / "more").mkdir()
        filler = fill_up(fs)
        try:
            before = records(root)
            with pytest.raises(LowDisk) as refused:
                manager.acquire(label="never started")
            error = refused.value
            assert isinstance(error, Unavailable)
            assert error.path == str(root)
            assert error.free_bytes == 0
            assert "free" in str(error)
            assert "min_free_bytes" in str(error)
            # Journaled (naming no directory: none is current since the rotate), on
            # room the reserve lent, of which at least half is left.
            assert records(root) == before + 1
            assert journaled(root, SpaceRefused) == [
                SpaceRefused(manager.id, "", "min_free_bytes", 0, error.min_free_bytes)]
            assert (root / RESERVE).stat().st_blocks * 512 >= RESERVE_BYTES // 2
            # Full to the last block again: the release's removal works.
            fill(fs / "more")
            assert os.statvfs(fs).f_bavail == 0
            held.release()
            assert not held.path.exists()
            # A recovery on the full disk removes what the dead manager left.
            report = recover(root)
            assert [r.path for r in report.removed] == left
            assert not left[0].exists()
            manager.close()
            state = live_state(root)
            assert state.managers.get(manager.id) is None
        finally:
            filler.unlink()
            shutil.rmtree(fs / "more", ignore_errors=True)
    finally:
        manager.close()
    # Space is back: the reserve is whole again at the next open.
    with Manager(root) as again:
        again.retain()
        with again.acquire():
            pass
    assert (root / RESERVE).stat().st_blocks * 512 >= RESERVE_BYTES


def test_a_disk_below_min_free_bytes_is_refused_naming_the_largest_directories_under_the_root(
    fs: Path,
) -> None:
    with Manager(fs / "root", measure_every=math.inf) as big, Manager(
        fs / "root", min_free_bytes=2 * MIB, measure_every=math.inf,
    ) as small:
        big.retain()
        small.retain()
        with big.acquire() as lease:
            (lease.path / "blob").write_bytes(b"b" * (6 * MIB))
            big.measure()
            with pytest.raises(LowDisk) as refused:
                small.acquire()
        assert refused.value.min_free_bytes == 2 * MIB
        assert generation_name(lease.generation) in str(refused.value)
        assert "6.0 MiB" in str(refused.value)
        assert [path for path, _ in refused.value.largest] == [str(lease.path.parent)]
        # The keyword with its value, never a bare name.
        assert "kept free (min_free_bytes=2097152)" in str(refused.value)
        assert "lower the floor (min_free_bytes=0 turns it off)" in str(refused.value)


def test_a_root_on_tmpfs_is_warned_of_once_with_the_fix(fs: Path) -> None:
    with capture_logs() as logs:
        Manager(fs / "root").close()
        Manager(fs / "root").close()
    warned = [e for e in logs if e["event"] == "root.tmpfs"]
    assert len(warned) == 1
    assert warned[0]["log_level"] == "warning"
    assert "on disk" in warned[0]["fix"]


def test_a_root_on_disk_is_not_warned_of(root: Path) -> None:
    if os.statvfs(root.parent).f_bsize and _on_ram(root.parent):
        pytest.skip("the test's temporary directory is itself on tmpfs")
    with capture_logs() as logs:
        Manager(root).close()
    assert not [e for e in logs if e["event"] == "root.tmpfs"]


def _on_ram(path: Path) -> bool:
    done = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip() in ("tmpfs", "ramfs")


def test_a_reserve_that_cannot_be_refilled_leaves_acquire_to_work(fs: Path) -> None:
    root = fs / "root"
    with Manager(root, min_free_bytes=0, measure_every=math.inf) as manager:
        manager.retain()
        filler = fill_up(fs)
        try:
            os.truncate(root / RESERVE, 0)
            # Some room, but less than a reserve and its margin: no refill, no refusal.
            os.truncate(filler, max(0, filler.stat().st_size - 64 * KIB))
            with manager.acquire():
                pass
            assert (root / RESERVE).stat().st_blocks == 0
        finally:
            filler.unlink()


def test_measure_of_a_directory_moved_away_from_its_name_returns_zeros_instead_of_raising(
    root: Path,
) -> None:
    with Manager(root, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            # The generation, the leased directory's parent.
            lease.path.parent.rename(root / "moved-away")
            try:
                usage = manager.measure()
                assert (usage.bytes, usage.inodes) == (0, 0)
            finally:
                (root / "moved-away").rename(lease.path.parent)


def test_measure_async_measures_and_journals_from_an_event_loop(root: Path) -> None:
    import asyncio

    async def main() -> Usage:
        manager = await Manager.open_async(root, measure_every=math.inf)
        try:
            await manager.retain_async()
            async with await manager.acquire_async() as lease:
                (lease.path / "f").write_bytes(b"x" * 5000)
                return await manager.measure_async()
        finally:
            await manager.close_async()

    usage = asyncio.run(main())
    assert usage.inodes == 2
    assert [e.inodes for e in measured(root)] == [2]
