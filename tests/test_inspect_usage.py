"""journal-inspect usage: what each directory holds, checked against du on real files.

The journals are written by real managers that measure real directories
through the public API (``Manager.measure``); the sizes the inspector
reports are compared with ``du -sk`` of the same directories, the JSON with
its documented schema, and ``--measure`` is checked to write nothing: not
the journal, not the directories.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import Lease, Manager, inspect
from tests.childio import terminal_output
from tests.test_cli import assert_documented, inspect_json
from tests.test_cli import inspect as run_inspect
from tests.test_root import small_file_system


def du_kib(paths: list[Path]) -> dict[Path, int]:
    """``du -sk`` of each of *paths*, one process for them all."""
    out = subprocess.run(["du", "-sk", *map(os.fspath, paths)], capture_output=True,
                         text=True, check=True).stdout
    sizes = {}
    for line in out.splitlines():
        kib, _, path = line.partition("\t")
        sizes[Path(path)] = int(kib)
    return sizes


def fill(path: Path, i: int) -> None:
    """Files of sizes that differ from one directory to the next (and a subdirectory)."""
    (path / "a").write_bytes(b"a" * (1000 + 4096 * (i % 7)))
    if i % 3 == 0:
        (path / "sub").mkdir()
        (path / "sub" / "b").write_bytes(b"b" * (i * 37 % 20_000))
    if i % 5 == 0:
        (path / "empty").touch()


def grown(root: Path, n: int, session: str | None = None) -> tuple[Manager, list[Lease]]:
    """A manager that made *n* generations, each leased, filled and measured, then rotated
    (the leases held keep them all on disk)."""
    manager = Manager(root, durability="relaxed", session=session, measure_every=math.inf)
    manager.retain()
    leases = []
    for i in range(n):
        lease = manager.acquire(label=f"job {i}")
        fill(lease.path, i)
        manager.measure()
        leases.append(lease)
        if i + 1 < n:
            manager.rotate()
    return manager, leases


@pytest.fixture(params=[100, pytest.param(1000, marks=pytest.mark.slow)])
def generations(request: pytest.FixtureRequest, tmp_path: Path
                ) -> Iterator[tuple[Path, Manager, list[Lease]]]:
    """A root of 100 generations, or (with the slow tests) 1,000, all on disk."""
    root = tmp_path / "root"
    manager, leases = grown(root, request.param)
    yield root, manager, leases
    for lease in leases:
        lease.release()
    manager.close()


def journal_files(root: Path) -> dict[str, str]:
    """The SHA-256 of each of the journal's files (the -shm index aside: readers use it)."""
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(root))
            if name.startswith("journal") and not name.endswith("-shm")
            and (root / name).is_file()}


def test_usage_of_every_generation_agrees_with_du_for_each_directory(
    generations: tuple[Path, Manager, list[Lease]],
) -> None:
    root, manager, leases = generations
    n = len(leases)
    report = inspect_json("--root", root, "usage")
    directories = report["directories"]
    assert len(directories) == n
    du = du_kib([lease.path for lease in leases])
    walked = {d["path"]: d for d in inspect_json("--root", root, "usage", "--measure")[
        "directories"]}
    for d in directories:
        # du -k rounds the allocated bytes up to whole KiB.
        # Reported by generation, measured in its work directory (the leases' path).
        kib = du[Path(d["path"]) / "tmp"]
        assert kib * 1024 - 1024 < d["bytes"] <= kib * 1024, d
        assert (walked[d["path"]]["bytes"], walked[d["path"]]["inodes"]) == (
            d["bytes"], d["inodes"])
        assert d["measured_at"] is not None
        assert d["peak_bytes"] == d["bytes"]
        assert d["manager"] == manager.id
        assert d["pid"] == os.getpid()
    sizes = [d["bytes"] for d in directories]
    assert sizes == sorted(sizes, reverse=True)
    assert {d["labels"][0] for d in directories} == {f"job {i}" for i in range(n)}
    assert [d["status"] for d in directories].count("live") == 1
    assert report["bytes"] == sum(sizes)


def test_usage_json_has_the_documented_schema_and_names_the_file_system(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    manager, leases = grown(root, 3, session="chat")
    try:
        report = inspect_json("--root", root, "usage")
        assert_documented("usage", report)
        measured = inspect_json("--root", root, "usage", "--measure")
        assert_documented("usage", measured)
        st = os.statvfs(root)
        # Free space moves under a busy machine: the same order of magnitude is enough.
        assert abs(report["free_bytes"] - st.f_bavail * st.f_frsize) < 2**30
        assert report["tmpfs"] is False
        assert measured["measured"] is True
        assert {d["session"] for d in report["directories"]} == {"chat"}
        for d in report["directories"]:
            # ISO 8601 in UTC, the same moment as the epoch seconds beside it.
            moment = dt.datetime.fromisoformat(d["measured_at"])
            assert moment.utcoffset() == dt.timedelta(0)
            assert moment.timestamp() == pytest.approx(d["measured_time"], abs=0.001)
        assert [d["bytes"] for d in measured["directories"]] == [
            d["bytes"] for d in report["directories"]]
    finally:
        for lease in leases:
            lease.release()
        manager.close()


def test_measure_walks_the_directories_now_and_never_writes_the_journal(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    manager, leases = grown(root, 4)
    try:
        # Grown since its manager measured it: only --measure sees it.
        (leases[0].path / "late").write_bytes(b"z" * 300_000)
        before = journal_files(root)
        stamps = {p: p.stat().st_mtime_ns for lease in leases for p in
                  [lease.path, *lease.path.rglob("*")]}
        events = inspect.summary(root / "journal.sqlite3").events
        journaled = inspect_json("--root", root, "usage")
        now = inspect_json("--root", root, "usage", "--measure")
        text = run_inspect("--root", root, "usage", "--measure").stdout
        assert journal_files(root) == before
        assert inspect.summary(root / "journal.sqlite3").events == events
        assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
        generation = str(leases[0].path.parent)
        first = {d["path"]: d for d in now["directories"]}[generation]
        old = {d["path"]: d for d in journaled["directories"]}[generation]
        assert first["bytes"] >= old["bytes"] + 300_000
        assert first["measured_now"]
        assert now["directories"][0]["path"] == generation
        assert du_kib([leases[0].path])[leases[0].path] * 1024 == first["bytes"]
        assert "measured now" in text
        assert generation in text
    finally:
        for lease in leases:
            lease.release()
        manager.close()


def test_usage_lists_largest_first_with_session_manager_pid_and_labels(tmp_path: Path
                                                                     ) -> None:
    root = tmp_path / "root"
    manager = Manager(root, session="build")
    manager.retain()
    small = manager.acquire(label="make lint")
    (small.path / "f").write_bytes(b"x" * 10)
    manager.measure()
    manager.rotate()
    big = manager.acquire(label="make test")
    (big.path / "f").write_bytes(b"x" * 2_000_000)
    manager.measure()
    try:
        lines = run_inspect("--root", root, "usage").stdout.splitlines()
        rows = [line for line in lines if "sessiontemp-gen-" in line]
        assert len(rows) == 2
        assert str(big.path.parent) in rows[0]
        assert "make test" in rows[0]
        assert "live" in rows[0]
        assert str(small.path.parent) in rows[1]
        assert "make lint" in rows[1]
        assert "retired" in rows[1]
        for row in rows:
            assert "build" in row
            assert manager.id[:8] in row
            assert str(os.getpid()) in row
        assert any("free of" in line for line in lines)
        assert any(line.startswith("size") and "inodes" in line for line in lines)
    finally:
        small.release()
        big.release()
        manager.close()


def test_a_root_on_tmpfs_is_said_to_be_in_memory(tmp_path: Path) -> None:
    with small_file_system(tmp_path) as fs:
        manager = Manager(fs / "root")
        try:
            report: dict[str, Any] = inspect_json("--root", fs / "root", "usage")
            assert report["tmpfs"] is True
            assert 0 < report["free_bytes"] <= 2 * 2**20
            text = run_inspect("--root", fs / "root", "usage").stdout
            assert "RAM-backed" in text
            assert "pass a root on disk" in text
        finally:
            manager.close()


def test_usage_needs_a_root_and_a_journal_file_alone_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    Manager(root).close()
    result = run_inspect(root / "journal.sqlite3", "usage", ok=2)
    assert "--root" in result.stderr
    assert result.stdout == ""
    assert json.loads(run_inspect("--root", root, "usage", "--json").stdout)[
        "directories"] == []


def test_measure_never_follows_a_symlink_out_of_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge").write_bytes(b"h" * 2_000_000)
    root = tmp_path / "root"
    manager, (lease,) = grown(root, 1)
    try:
        (lease.path / "link").symlink_to(outside, target_is_directory=True)
        (lease.path / "file-link").symlink_to(outside / "huge")
        (d,) = inspect_json("--root", root, "usage", "--measure")["directories"]
        assert d["bytes"] < 100_000
        # du, which does not follow symlinks either, agrees to the KiB.
        assert d["bytes"] == du_kib([lease.path])[lease.path] * 1024
    finally:
        lease.release()
        manager.close()


def test_measure_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    import pty

    root = tmp_path / "root"
    manager, leases = grown(root, 3)
    script = Path(sys.executable).with_name("journal-inspect")
    try:
        assert "measuring" not in run_inspect("--root", root, "usage", "--measure").stderr
        leader, follower = pty.openpty()
        try:
            done = subprocess.run([str(script), "--root", str(root), "usage", "--measure"],
                                  stderr=follower, stdout=subprocess.PIPE, timeout=60,
                                  check=True)
            os.close(follower)
            follower = -1
            shown = terminal_output(leader)
            assert b"measuring: 100% (3 / 3 directories)" in shown
            assert b"sessiontemp-gen-" in done.stdout
        finally:
            if follower >= 0:
                os.close(follower)
            os.close(leader)
    finally:
        for lease in leases:
            lease.release()
        manager.close()
