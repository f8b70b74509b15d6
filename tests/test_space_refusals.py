"""A refusal for space is journaled: which session was turned away, why, and when.

An acquire refused with OverBudget or LowDisk records ``space.refused``
(the limit that refused it, what was found, the limit's value) before it
raises.  A refusal that repeats the last one is not recorded again until
``REFUSALS_EVERY`` seconds have passed on the manager's clock, or an
acquire was let through in between.  On a full disk the record borrows
from the reserve, never its last half.  A journal that refuses the record,
a Ctrl-C, or a SIGKILL at any step of a refused acquire leaves memory,
journal and disk agreeing and the refusal raised as it would have been.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from structlog.testing import capture_logs

from sessiontemp import LowDisk, Manager, OverBudget, Unavailable, recover
from sessiontemp._kernel.root import JOURNAL_NAME, RESERVE
from sessiontemp.inspect import explain, fsck, summary, timeline, verify
from sessiontemp.inspect.json import moment
from sessiontemp.inspect.read import when
from sessiontemp.journal import Record, RuleViolation, Store
from sessiontemp.journal.errors import JournalFull
from sessiontemp.journal.events import (
    GenerationMeasured,
    GenerationReady,
    ManagerClosed,
    RemovalStarted,
    Rotated,
    SpaceRefused,
)
from sessiontemp.meter import REFUSALS_EVERY
from sessiontemp.space.reserve import RESERVE_BYTES
from tests.commands import journaled
from tests.conftest import live_state, own_view
from tests.faults import STORE_FAILURES, Faults, StoreFailure, interrupting, raising, store_error
from tests.test_bad_journal import fill, small_file_system
from tests.test_cli import assert_documented, inspect_json
from tests.test_cli import inspect as run_inspect
from tests.test_space import G1, KIB, M1, M2, MIB, fold, fs, made
from tests.test_timeline import SVG, legend_of, marks, parse

__all__ = ["fs"]  # a fixture, used by name



class Clock:
    """A wall clock the test moves on by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def records_of(root: Path) -> list[Record]:
    """Every record of the journal under *root*, read-only."""
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        return list(store.records())
    finally:
        store.close()


def over_budget(root: Path, **options: object) -> tuple[Manager, str]:
    """A manager whose current directory was measured holding 3 inodes, over a budget of 1."""
    manager = Manager(root, max_inodes=1, measure_every=math.inf, **options)  # type: ignore[arg-type]
    manager.retain()
    with manager.acquire() as lease:
        (lease.path / "a").write_text("a")
        (lease.path / "b").write_text("b")
    assert manager.measure().inodes == 3
    return manager, lease.generation


def refused(manager: Manager) -> OverBudget:
    with pytest.raises(OverBudget) as raised:
        manager.acquire(label="turned away")
    return raised.value


def test_an_over_budget_refusal_is_journaled_naming_the_directory_the_limit_and_what_was_found(
    fs: Path,
) -> None:
    with Manager(fs / "root", max_bytes=1 * MIB, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "big").write_bytes(b"b" * (2 * MIB))
        found = manager.measure().bytes
        refused(manager)
        assert journaled(fs / "root", SpaceRefused) == [
            SpaceRefused(manager.id, lease.generation, "max_bytes", found, 1 * MIB)]


def test_an_inode_budget_refusal_names_max_inodes(tmp_path: Path) -> None:
    manager, generation = over_budget(tmp_path / "root")
    with manager:
        refused(manager)
        assert journaled(tmp_path / "root", SpaceRefused) == [
            SpaceRefused(manager.id, generation, "max_inodes", 3, 1)]


def test_refusals_retried_with_measure_every_zero_walk_each_time_but_journal_a_measurement_only_when_it_changed(  # noqa: E501
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    with Manager(root, max_inodes=1, measure_every=0) as manager:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "a").write_text("a")
            (lease.path / "b").write_text("b")
        manager.measure()
        before = len(journaled(root, GenerationMeasured))
        for _ in range(300):
            refused(manager)
        assert len(journaled(root, GenerationMeasured)) == before
        assert len(journaled(root, SpaceRefused)) == 1
        # What a refusal's walk finds new is journaled (or was, by the
        # background measurement, which measures every 0.1 s here).
        (lease.path / "c").write_text("c")
        assert refused(manager).inodes == 4
        assert [m.inodes for m in journaled(root, GenerationMeasured)[before:]] == [4]


def test_a_repeated_refusal_is_journaled_again_only_after_its_interval_or_once_an_acquire_was_let_through(  # noqa: E501
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    clock = Clock()
    manager, generation = over_budget(root, clock=clock)
    with manager:
        for _ in range(5):
            refused(manager)
        assert len(journaled(root, SpaceRefused)) == 1
        clock.now += REFUSALS_EVERY - 1
        refused(manager)
        assert len(journaled(root, SpaceRefused)) == 1
        clock.now += 1
        refused(manager)
        assert len(journaled(root, SpaceRefused)) == 2
        # A clock set back counts as time gone by: never a silence for as long.
        clock.now -= 3600
        refused(manager)
        assert len(journaled(root, SpaceRefused)) == 3
        # Cleaned up and let through: the next refusal is news again, at once.
        for name in ("a", "b"):
            (root / f"sessiontemp-gen-{generation}" / "tmp" / name).unlink()
        manager.measure()
        with manager.acquire() as lease:
            (lease.path / "c").write_text("c")
            (lease.path / "d").write_text("d")
        manager.measure()
        refused(manager)
        assert len(journaled(root, SpaceRefused)) == 4


def test_a_low_disk_refusal_is_journaled_with_the_free_space_and_the_floor(fs: Path) -> None:
    root = fs / "root"
    with Manager(root, min_free_bytes=64 * MIB, measure_every=math.inf) as manager:
        manager.retain()
        with pytest.raises(LowDisk) as raised:
            manager.acquire()
        # None current yet: the manager never made a directory.
        [record] = journaled(root, SpaceRefused)
        assert record == SpaceRefused(manager.id, "", "min_free_bytes",
                                      raised.value.free_bytes, 64 * MIB)
        assert 0 < record.found < 8 * MIB


def test_on_a_full_disk_refusals_borrow_from_the_reserve_until_half_is_left_then_are_only_logged_and_removal_still_works(  # noqa: E501
    fs: Path,
) -> None:
    root = fs / "root"
    clock = Clock()
    manager = Manager(root, measure_every=math.inf, clock=clock)
    try:
        manager.retain()
        held = manager.acquire()
        (held.path / "data").write_bytes(b"d" * MIB)
        manager.rotate()
        (fs / "more").mkdir()
        filler = fill(fs)
        recorded = []
        with capture_logs() as logs:
            for _ in range(RESERVE_BYTES // (16 * KIB)):
                clock.now += REFUSALS_EVERY
                fill(fs / "more").rename(fs / "more" / f"filler-{clock.now}")
                assert os.statvfs(fs).f_bavail == 0
                with pytest.raises(LowDisk):
                    manager.acquire()
                recorded.append(len(journaled(root, SpaceRefused)))
        # Some were recorded, then the rest only logged: half the reserve is kept.
        assert recorded[0] == 1
        assert recorded[-1] == recorded[-2] < len(recorded)
        assert [e for e in logs if e["event"] == "space.refusal_unrecorded"]
        assert (root / RESERVE).stat().st_blocks * 512 >= RESERVE_BYTES // 2
        # The removal the reserve was kept for: journaled, and done, on the full disk.
        assert os.statvfs(fs).f_bavail == 0
        held.release()
        assert not held.path.exists()
        manager.close()
        filler.unlink()
    finally:
        manager.close()
    assert verify(root / JOURNAL_NAME).ok


# -- opening a journal on a full disk -----------------------------------------------------------

# The pages left free once the disk is filled: SQLite's files fail at
# different steps for different amounts (its -shm grows by 32 KiB).
FREE_PAGES = [0, 1, 4]
PAGE = 4 * KIB


@pytest.fixture
def fs32(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 32 MiB: its default floor (1%, 328 KiB) is more than the reserve gives back."""
    with small_file_system(tmp_path, "32m") as mounted:
        yield mounted


def closed_then_filled(fs: Path, pages: int, *, reserve: bool) -> tuple[Path, Path, int]:
    """A root whose journal was cleanly closed (no -wal, no -shm), on a file system then
    filled to *pages* pages free; with *reserve* False, its reserve spent first.  Returns the
    root, the filler and the journal's record count."""
    root = fs / "root"
    with Manager(root, measure_every=math.inf) as manager:
        manager.retain()
        with manager.acquire():
            pass
    # Counted by a writer, whose close (the last connection) deletes the -wal
    # and -shm: a read-only connection would leave them for the next open.
    store = Store(root / JOURNAL_NAME)
    try:
        count = len(list(store.records()))
    finally:
        store.close()
    assert not (root / f"{JOURNAL_NAME}-shm").exists()
    assert (root / RESERVE).stat().st_blocks * 512 >= RESERVE_BYTES
    if not reserve:
        os.truncate(root / RESERVE, 0)
    filler = fill(fs)
    os.truncate(filler, filler.stat().st_size - pages * PAGE)
    assert os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize <= max(pages * PAGE, 16 * KIB)
    return root, filler, count


def run_true(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessiontemp", "run", "--root", str(root), "--",
                           "true"], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("pages", FREE_PAGES)
def test_a_journal_cleanly_closed_opens_on_a_full_disk_through_the_reserve_and_a_run_is_refused_for_space(  # noqa: E501
    fs32: Path, pages: int,
) -> None:
    """The journal's -shm could not be made again: Manager(root) raised JournalFull and
    ``sessiontemp run`` exited 2 (bad input), the reserve untouched."""
    root, filler, count = closed_then_filled(fs32, pages, reserve=True)
    ran = run_true(root)
    assert ran.returncode == 75, ran.stderr
    assert f"no private directory in {root}: its file system has" in ran.stderr
    assert "(the command was not started)" in ran.stderr
    # The journal opens (the -shm made of the reserve's blocks); the lease is refused.
    with Manager(root, measure_every=math.inf) as manager:
        manager.retain()
        with pytest.raises(LowDisk):
            manager.acquire()
    filler.unlink()
    assert len(records_of(root)) > count
    assert verify(root / JOURNAL_NAME).ok


def test_a_recovery_on_a_full_disk_opens_the_journal_through_the_reserve(fs32: Path) -> None:
    """A recovery is what frees space: it raised JournalFull at its open, the reserve untouched."""
    root, filler, count = closed_then_filled(fs32, 0, reserve=True)
    report = recover(root)
    assert report.ran
    filler.unlink()
    # Nothing to recover: nothing journaled.
    assert len(records_of(root)) == count
    assert verify(root / JOURNAL_NAME).ok


@pytest.mark.parametrize("pages", [0, 1])
def test_a_journal_that_cannot_open_on_a_full_disk_refuses_the_manager_as_low_disk_and_a_run_exits_75(  # noqa: E501
    fs32: Path, pages: int,
) -> None:
    """With the reserve spent, what is left is a refusal for space (an Unavailable), whose
    cause is the journal's; nothing committed is lost."""
    root, filler, count = closed_then_filled(fs32, pages, reserve=False)
    with pytest.raises(LowDisk) as refused:
        Manager(root)
    error = refused.value
    assert isinstance(error, Unavailable)
    assert isinstance(error.__cause__, JournalFull)
    assert error.path == str(root)
    assert error.free_bytes <= max(pages * PAGE, 16 * KIB)
    assert "too little for the journal to be opened" in error.reason
    assert "Free space" in error.fix
    ran = run_true(root)
    assert ran.returncode == 75, ran.stderr
    assert "too little for the journal to be opened" in ran.stderr
    filler.unlink()
    assert len(records_of(root)) == count
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire():
            pass
    assert verify(root / JOURNAL_NAME).ok


@pytest.mark.parametrize("fault", [*STORE_FAILURES, "sigint"])
def test_a_journal_refusing_the_record_or_a_ctrl_c_at_any_step_of_a_refused_acquire_leaves_it_refused_and_memory_agreeing(  # noqa: E501
    tmp_path: Path, fault: StoreFailure | Literal["sigint"],
) -> None:
    """The journal refusing the record (full, busy, read-only): the refusal is raised, the
    record missing and logged, and the next refusal recorded at once; a SIGINT: the record
    is written whole, then the KeyboardInterrupt raised.  Memory is the journal."""
    root = tmp_path / "root"
    clock = Clock()
    faults = Faults()
    manager, generation = over_budget(root, clock=clock, step_hook=faults)
    with manager:
        action = interrupting("raise_signal") if fault == "sigint" else raising(
            store_error(fault, root / JOURNAL_NAME))
        k = 0
        while True:
            k += 1
            clock.now += REFUSALS_EVERY
            before = len(journaled(root, SpaceRefused))
            faults.arm(action, at=k)
            with capture_logs() as logs, pytest.raises((OverBudget, KeyboardInterrupt)) as raised:
                manager.acquire()
            fired = faults.disarm()
            assert own_view(manager.state, manager.id) == own_view(live_state(root), manager.id)
            if fired is None:
                assert isinstance(raised.value, OverBudget)
                assert len(journaled(root, SpaceRefused)) == before + 1
                break
            if fault == "sigint":
                # Written whole, and known to be: the same refusal at once is not again.
                assert isinstance(raised.value, KeyboardInterrupt), fired
                assert len(journaled(root, SpaceRefused)) == before + 1
            else:
                # Missing, and known to be: the same refusal at once is recorded.
                assert isinstance(raised.value, OverBudget), fired
                assert [e for e in logs if e["event"] == "space.unrecorded"], fired
                assert len(journaled(root, SpaceRefused)) == before
            refused(manager)
            assert len(journaled(root, SpaceRefused)) == before + 1
        assert k > 1, "the refusal's record took no step"
        # The manager goes on: rotated, it leases a fresh directory.
        manager.rotate()
        with manager.acquire() as lease:
            assert lease.generation != generation


# A child that opens a budgeted manager, fills its directory past the budget,
# measures, then is killed by its own step hook at the k-th step of a refused
# acquire; it exits 0 when the acquire raised before the k-th step.
CHILD = """
import math, os, signal, sys
from sessiontemp import Manager, OverBudget
k, seen = int(sys.argv[2]), 0
armed = False
def hook(kind, detail):
    global seen
    if armed:
        seen += 1
        if seen == k:
            os.kill(os.getpid(), signal.SIGKILL)
manager = Manager(sys.argv[1], max_inodes=1, measure_every=math.inf, step_hook=hook)
manager.retain()
lease = manager.acquire()
(lease.path / "a").write_text("a")
(lease.path / "b").write_text("b")
manager.measure()
print(lease.path, flush=True)
armed = True
try:
    manager.acquire()
except OverBudget:
    sys.exit(0)
sys.exit(1)
"""


def test_a_sigkill_at_any_step_of_a_refused_acquire_leaves_a_journal_that_verifies_and_recovery_removes_what_was_left(  # noqa: E501
    tmp_path: Path,
) -> None:
    killed = 0
    for k in range(1, 50):
        root = tmp_path / f"root-{k}"
        child = subprocess.run([sys.executable, "-c", CHILD, str(root), str(k)],
                               capture_output=True, text=True, check=False)
        path = Path(child.stdout.split("\n")[0])
        if child.returncode == 0:
            break
        assert child.returncode == -signal.SIGKILL, child.stderr
        killed += 1
        assert path.exists(), "a directory was removed under a refused acquire"
        report = recover(root)
        assert [r.path for r in report.removed] == [path.parent]
        assert verify(root / JOURNAL_NAME).ok
        assert fsck(root).findings == ()
        assert live_state(root).generations == {}
    else:
        raise AssertionError("the refused acquire never finished")
    assert killed >= 1, "the refused acquire took no step"
    # Unkilled, the refusal is in the journal, and summary counts it.
    assert len(journaled(root, SpaceRefused)) == 1
    assert summary(root / JOURNAL_NAME).space["refused"] == 1


def test_a_refusal_names_a_live_managers_own_directory_not_being_removed_or_none_for_a_low_disk(
) -> None:
    ready = made(GenerationReady(M1, G1, 1, 2))
    fold(*ready, SpaceRefused(M1, G1, "max_bytes", 2, 1))
    fold(*ready, SpaceRefused(M1, "", "min_free_bytes", 2, 3))
    with pytest.raises(RuleViolation, match="without naming a directory"):
        fold(*ready, SpaceRefused(M1, "", "max_inodes", 2, 1))
    with pytest.raises(RuleViolation, match=f"of manager {M1}, not of {M2}"):
        fold(*ready, SpaceRefused(M2, G1, "max_bytes", 2, 1))
    with pytest.raises(RuleViolation, match="not open"):
        fold(*ready, ManagerClosed(M2), SpaceRefused(M2, "", "min_free_bytes", 2, 3))
    with pytest.raises(RuleViolation, match="being removed"):
        fold(*ready, Rotated(M1), RemovalStarted(G1, M1, "retired"),
             SpaceRefused(M1, G1, "max_bytes", 2, 1))


# -- the inspector ----------------------------------------------------------------------------


@pytest.fixture
def turned_away(tmp_path: Path) -> tuple[Path, str, str]:
    """A root whose one manager was refused twice: over its budget, then for a low disk."""
    root = tmp_path / "root"
    manager, generation = over_budget(root)
    with manager:
        refused(manager)
    with Manager(root, min_free_bytes=2**62, measure_every=math.inf) as low:
        low.retain()
        with pytest.raises(LowDisk):
            low.acquire()
    return root, manager.id, generation


def test_explain_tells_a_refusal_of_the_directory_with_the_budget_and_what_was_found(
    turned_away: tuple[Path, str, str],
) -> None:
    root, _, generation = turned_away
    story = explain(root / JOURNAL_NAME, generation)
    told = [s for s in story.sentences if s.kind == "space.refused"]
    assert [s.text for s in told] == [
        f"An acquire was refused at {when(told[0].time)}, and no command started: the "
        "directory held 3 inodes, over its budget of 1 (max_inodes)."]
    # Only the refusal naming it: the low disk's, of another manager, named none.
    [record] = [r for r in records_of(root) if isinstance(r.event, SpaceRefused)
                and r.event.generation == generation]
    assert told[0].seq == record.seq


def test_summary_counts_refusals_and_says_how_to_list_them(
    turned_away: tuple[Path, str, str],
) -> None:
    root, _, _ = turned_away
    document = inspect_json("--root", root, "summary")
    assert_documented("summary", document)
    assert document["space"]["refused"] == 2
    text = run_inspect("--root", root, "summary").stdout
    assert "2 acquires refused for space were journaled" in text
    listed = [json.loads(line) for line in run_inspect(
        "--root", root, "events", "--kind", "space.refused", "--json").stdout.splitlines()]
    assert [e["fields"]["cause"] for e in listed] == ["max_inodes", "min_free_bytes"]


def test_the_timeline_marks_each_refusal_in_its_managers_lane_titled_with_why_and_names_it_in_the_legend(  # noqa: E501
    turned_away: tuple[Path, str, str], tmp_path: Path,
) -> None:
    root, budgeted, _ = turned_away
    drawn = timeline(root / JOURNAL_NAME, tmp_path / "t.svg")
    assert drawn.space_refused == 2
    svg = parse(tmp_path / "t.svg")
    signs = marks(svg, "space-refused")
    titles = [sign.find(f"{SVG}title") for sign in signs]
    texts = [t.text or "" for t in titles if t is not None]
    assert len(texts) == 2
    assert f"manager {budgeted} was refused for space: the directory held 3 inodes" in texts[0]
    assert "kept free (min_free_bytes)" in texts[1]
    # Each in the lane of its own manager: the low disk's manager made no directory, and
    # has a lane for its refusal all the same.
    assert drawn.lanes == 2
    heights = {circle.get("cy") for sign in signs for circle in sign.iter(f"{SVG}circle")}
    assert len(heights) == 2
    assert "acquire refused for space" in legend_of(svg)
    captions = " ".join(e.text or "" for e in marks(svg, "caption"))
    assert "2 acquires refused for space" in captions


def test_usage_counts_each_live_directorys_refusals_and_says_when_the_last_was(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    manager, generation = over_budget(root)
    with manager:
        refused(manager)
        document = inspect_json("--root", root, "usage")
        text = run_inspect("--root", root, "usage").stdout
    assert_documented("usage", document)
    (row,) = document["directories"]
    assert row["generation"] == generation
    [at] = [r.time for r in records_of(root) if isinstance(r.event, SpaceRefused)]
    assert (row["refused"], row["refused_at"]) == (1, moment(at))
    assert f"sessiontemp-gen-{generation}: 1 acquire refused for space, the last at" in text


def test_a_resumed_directory_over_budget_is_refused_once_owned_and_a_manager_without_owner_says_so_first(  # noqa: E501
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    died = subprocess.run([sys.executable, "-c", (
        "import math, os, signal, sessiontemp\n"
        f"m = sessiontemp.Manager({str(root)!r}, session='chat', max_inodes=1, "
        "measure_every=math.inf)\n"
        "m.retain(); lease = m.acquire()\n"
        "(lease.path / 'a').write_text('a'); (lease.path / 'b').write_text('b')\n"
        "m.measure()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")], check=False)
    assert died.returncode == -signal.SIGKILL
    with Manager(root, session="chat", max_inodes=1, measure_every=math.inf) as manager:
        assert manager.resumed
        # No owner yet: that is what is wrong first, and no refusal for space is said.
        with pytest.raises(Unavailable, match="has no owner") as raised:
            manager.acquire()
        assert not isinstance(raised.value, OverBudget)
        assert journaled(root, SpaceRefused) == []
        # Owned: the directory it resumed is over budget, as its last measurement said.
        manager.retain()
        refused(manager)
        [record] = journaled(root, SpaceRefused)
        assert (record.manager, record.cause, record.found) == (manager.id, "max_inodes", 3)
