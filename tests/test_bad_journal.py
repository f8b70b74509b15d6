"""Bad journal input: each refused with a typed error naming the file, the reason and the fix,
and nothing already committed lost.

Every test starts from a real journal with history, does one bad thing to
it (an unknown event kind, truncation, damaged pages, an immutable file, a
read-only or full file system, a writer that holds the lock), checks the
error, then checks that every event committed before is still there, byte
for byte where the file was refused outright, and that the digest chain
still verifies once the cause is gone.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sessiontemp import (
    JournalBusy,
    JournalCorrupt,
    JournalFull,
    JournalReadOnly,
    Manager,
    Unavailable,
    recover,
)
from sessiontemp._kernel.root import GENERATION_PREFIX, RESERVE
from sessiontemp.journal.errors import JournalError
from sessiontemp.journal.store import Store, chain
from tests.test_root import assert_explains

JOURNAL = "journal.sqlite3"
PAGE = 4096
MOVE_ASIDE = "Move it aside (the manager then starts a new journal) or pass another root"

Row = tuple[int, float, str, str, bytes]


def committed(root: Path) -> list[Row]:
    """Every committed row, read without writing anything."""
    store = Store(root / JOURNAL, readonly=True)
    try:
        return list(store.rows())
    finally:
        store.close()


def verify(root: Path) -> list[str]:
    store = Store(root / JOURNAL, readonly=True)
    try:
        return store.verify()
    finally:
        store.close()


def with_history(root: Path, rotations: int = 40) -> list[Row]:
    """A journal with some pages of history, its managers closed; returns its rows."""
    with Manager(root) as m:
        m.retain()
        for _ in range(rotations):
            with m.acquire():
                pass
            m.rotate()
    return committed(root)


def generations(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(GENERATION_PREFIX))


def refused_both_ways(root: Path, error: type[JournalError]) -> list[JournalError]:
    """Open a manager and run a recovery on *root*; both must raise *error*."""
    raised: list[JournalError] = []
    with pytest.raises(error) as by_manager:
        Manager(root)
    raised.append(by_manager.value)
    with pytest.raises(error) as by_recovery:
        recover(root)
    raised.append(by_recovery.value)
    return raised


# -- an event kind from the future -----------------------------------------------------------


def append_unknown_kind(root: Path) -> int:
    """Commit, with a correct digest, an event of a kind no version knows; returns its seq."""
    conn = sqlite3.connect(root / JOURNAL, isolation_level=None)
    try:
        seq, digest = conn.execute(
            "SELECT seq, digest FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        time_, kind, payload = 1.0, "generation.teleported", '{"generation": "x"}'
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                     (seq + 1, time_, kind, payload, chain(digest, seq + 1, time_, kind, payload)))
    finally:
        conn.close()
    return int(seq) + 1


def test_an_event_kind_this_version_does_not_know_is_passed_over_naming_the_seq_and_the_upgrade(
    root: Path,
) -> None:
    before = with_history(root)
    seq = append_unknown_kind(root)
    with capture_logs() as logs:
        recover(root)
        with Manager(root) as m:
            m.retain()
            with m.acquire():
                pass
    refused = [e for e in logs if e["event"] == "journal.refused"]
    assert refused
    assert {e["seq"] for e in refused} == {seq}
    assert all(f"event {seq} has kind 'generation.teleported', which this version does not "
               "know" in e["reason"] and "upgrade sessiontemp" in e["reason"] for e in refused)
    rows = committed(root)
    assert rows[:len(before)] == before
    assert rows[len(before)][2] == "generation.teleported"
    assert generations(root) == []
    assert verify(root) == []


# -- a damaged file ---------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [
    pytest.param(lambda size: size // 2, id="half"),
    pytest.param(lambda size: size - PAGE, id="last-page-gone"),
    pytest.param(lambda size: PAGE + 904, id="torn-second-page"),
    pytest.param(lambda size: 100, id="header-only"),
])
def test_a_truncated_journal_is_refused_as_damaged_and_left_byte_for_byte(
    root: Path, keep: object
) -> None:
    with_history(root)
    path = root / JOURNAL
    content = path.read_bytes()
    assert callable(keep)
    cut = content[:keep(len(content))]
    path.write_bytes(cut)
    for error in refused_both_ways(root, JournalCorrupt):
        assert_explains(error, path, "is damaged", MOVE_ASIDE)
    assert path.read_bytes() == cut
    assert generations(root) == []


def damage_a_data_page(content: bytes) -> bytes:
    """Scramble the cells of the fourth page, a leaf of the events table.

    Pages 1 to 3 are the roots of the schema, of ``events`` (interior once
    the history fills more than a page) and of the small ``checkpoints``.
    """
    bad = bytearray(content)
    for i in range(3 * PAGE + 100, 3 * PAGE + 400):
        bad[i] ^= 0xFF
    return bytes(bad)


def damage_the_free_list(content: bytes) -> bytes:
    """Point the free list at a live page: SQLite only notices when it allocates from it."""
    bad = bytearray(content)
    bad[32:40] = struct.pack(">II", 3, 1)
    return bytes(bad)


@pytest.mark.parametrize("damage", [damage_a_data_page, damage_the_free_list],
                         ids=["scrambled-cells", "free-list-on-a-live-page"])
def test_a_journal_with_damaged_pages_is_refused_before_anything_is_written(
    root: Path, damage: object
) -> None:
    with_history(root)
    path = root / JOURNAL
    assert callable(damage)
    bad = damage(path.read_bytes())
    path.write_bytes(bad)
    for error in refused_both_ways(root, JournalCorrupt):
        assert_explains(error, path, "is damaged", MOVE_ASIDE)
    # Refused on open, by SQLite's quick check where reading alone does not
    # notice: an append would have allocated a live page and overwritten it.
    assert path.read_bytes() == bad


# -- a journal that refuses writes -------------------------------------------------------------


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """chattr +i: even root cannot write (a 0444 mode does not stop root)."""
    present = [p for p in paths if p.exists()]
    result = subprocess.run(["chattr", "+i", *map(str, present)], capture_output=True,
                            check=False)
    if result.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {result.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, present)], check=True)


def test_an_immutable_journal_refuses_a_new_manager_as_read_only_and_loses_nothing(
    root: Path,
) -> None:
    before = with_history(root)
    path = root / JOURNAL
    content = path.read_bytes()
    with immutable(path), pytest.raises(JournalReadOnly) as caught:
        Manager(root)
    assert_explains(caught.value, path, "does not accept writes",
                    "Make it writable, or pass a root on a writable file system")
    assert path.read_bytes() == content
    assert committed(root) == before
    with Manager(root) as m:
        m.retain()
    assert committed(root)[:len(before)] == before
    assert verify(root) == []


def test_a_journal_made_immutable_under_a_live_manager_fails_acquire_before_any_mkdir(
    root: Path,
) -> None:
    m = Manager(root)
    try:
        m.retain()
        before = committed(root)
        path = root / JOURNAL
        with immutable(path, path.with_name(JOURNAL + "-wal")):
            with pytest.raises(Unavailable) as caught:
                m.acquire()
            assert isinstance(caught.value.__cause__, JournalReadOnly)
            assert generations(root) == []
        assert committed(root) == before
        with m.acquire():
            pass
    finally:
        m.close()
    assert verify(root) == []


@contextlib.contextmanager
def small_file_system(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of *size* mounted under *tmp_path*; skips where mounting is not permitted."""
    mount = tmp_path / "fs"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                             str(mount)], capture_output=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_journal_on_a_read_only_file_system_is_refused_as_read_only_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with small_file_system(tmp_path, "4m") as fs:
        root = fs / "root"
        before = with_history(root, rotations=5)
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        for error in refused_both_ways(root, JournalReadOnly):
            assert_explains(error, root / JOURNAL, "does not accept writes",
                            "pass a root on a writable file system")
        subprocess.run(["mount", "-o", "remount,rw", str(fs)], check=True)
        assert committed(root) == before
        assert verify(root) == []


# -- a full disk -------------------------------------------------------------------------------


def fill(directory: Path) -> Path:
    """Write a file until the file system holding *directory* is full; returns it."""
    filler = directory / "filler"
    block = b"\0" * 65536
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError:
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_fails_acquire_before_any_directory_is_made_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with small_file_system(tmp_path, "1m") as fs:
        root = fs / "root"
        # No floor, and the reserve spent: the journal's own refusal, which
        # LowDisk would otherwise pre-empt (tests/test_space.py has that).
        m = Manager(root, min_free_bytes=0)
        try:
            m.retain()
            with m.acquire():
                pass
            m.rotate()
            os.truncate(root / RESERVE, 0)
            before = committed(root)
            filler = fill(fs)
            with pytest.raises(Unavailable, match="the file system is full") as caught:
                m.acquire()
            full = caught.value.__cause__
            assert isinstance(full, JournalFull)
            assert_explains(full, root / JOURNAL, "the file system is full",
                            "nothing already committed was lost")
            assert generations(root) == []
            assert committed(root) == before
            assert verify(root) == []
            filler.unlink()
            with m.acquire() as lease:
                assert lease.path.is_dir()
        finally:
            m.close()
        assert committed(root)[:len(before)] == before
        assert verify(root) == []


def test_a_journal_write_failing_at_the_step_before_mkdir_leaves_no_directory(root: Path) -> None:
    # The portable version of the full disk (no mount needed): the journal
    # step that announces a new generation fails, and nothing else happens.
    failing = {"armed": False}

    def hook(kind: str, detail: str) -> None:
        if failing["armed"] and kind == "journal" and detail == "generation.created":
            raise JournalFull(root / JOURNAL, "could not append to it: the file system is full",
                              "Free space on it; nothing already committed was lost")

    m = Manager(root, step_hook=hook)
    try:
        m.retain()
        before = committed(root)
        failing["armed"] = True
        with pytest.raises(Unavailable, match="the file system is full"):
            m.acquire()
        assert generations(root) == []
        assert committed(root) == before
        failing["armed"] = False
        with m.acquire():
            pass
    finally:
        m.close()
    assert verify(root) == []


# -- a writer that holds the lock ----------------------------------------------------------------


@contextlib.contextmanager
def lock_held_by_another_process(path: Path) -> Iterator[None]:
    """Another process in the middle of a write transaction on *path*, until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sqlite3, sys
            conn = sqlite3.connect({str(path)!r}, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            print("holding", flush=True)
            sys.stdin.read()
            conn.execute("ROLLBACK")
            """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


def test_a_writer_holding_the_lock_too_long_makes_opening_fail_in_bounded_time(
    root: Path,
) -> None:
    before = with_history(root, rotations=3)
    with lock_held_by_another_process(root / JOURNAL):
        started = time.monotonic()
        with pytest.raises(JournalBusy) as caught:
            Manager(root, busy_timeout=0.3)
        waited = time.monotonic() - started
    assert 0.25 <= waited < 5.0
    assert isinstance(caught.value, TimeoutError)
    assert_explains(caught.value, root / JOURNAL, "held its write lock for too long",
                    "Find the process with `fuser` on the file, or retry later")
    assert committed(root) == before
    with Manager(root, busy_timeout=0.3) as m:
        m.retain()
    assert verify(root) == []


def test_a_writer_holding_the_lock_too_long_fails_acquire_before_any_mkdir(root: Path) -> None:
    m = Manager(root, busy_timeout=0.3)
    try:
        m.retain()
        before = committed(root)
        with lock_held_by_another_process(root / JOURNAL), \
                pytest.raises(Unavailable, match="held its write lock") as caught:
            m.acquire()
        assert isinstance(caught.value.__cause__, JournalBusy)
        assert generations(root) == []
        assert committed(root) == before
        with m.acquire():
            pass
    finally:
        m.close()
    assert verify(root) == []
