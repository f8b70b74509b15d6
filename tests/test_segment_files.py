"""Every file of the journal is checked the same way, whichever segment it belongs to.

SQLite opens a journal file by its name and follows a symbolic link there
(to the database file itself: the journal would be read and written
wherever the link points).  So the head, the segment being written, each
sealed segment, the -wal and -shm beside each, and the segment directory
are all refused the same way when one is a symbolic link, or (for a
writer) another user's: :class:`UnsafeRoot` naming that path, with the
fix, from a Manager open, ``recover()`` and ``journal-inspect``; the link's
target is left untouched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from sessiontemp import Manager, UnsafeRoot, recover
from sessiontemp.journal import Retention
from tests import zygote

JOURNAL = "journal.sqlite3"
# Every checkpoint starts a new segment, and every sealed one is kept.
KEEP_ALL = Retention(segment_bytes=0, history_bytes=1 << 30)

# Where the link goes: (which file, which of its names).
PLACES = [
    ("head", ""), ("head", "-wal"), ("head", "-shm"),
    ("sealed", ""), ("sealed", "-wal"), ("sealed", "-shm"),
    ("active", ""), ("active", "-wal"), ("active", "-shm"),
    ("directory", ""),
]


def fingerprint(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def segmented(tmp_path: Path) -> Path:
    """A root whose journal has its head, a sealed segment and the active one."""
    root = tmp_path / "root"
    for _ in range(2):
        # Each open's recovery pass checkpoints the 100 events before it,
        # and rolls over with that checkpoint.
        with Manager(root, retention=KEEP_ALL) as manager:
            manager.retain()
            for _ in range(60):
                manager.acquire().release()
    with Manager(root, retention=KEEP_ALL):
        pass
    return root


def file_at(root: Path, which: str, suffix: str) -> Path:
    folder = root / f"{JOURNAL}.d"
    if which == "head":
        return root / f"{JOURNAL}{suffix}"
    if which == "directory":
        return folder
    kept = sorted(n for n in os.listdir(folder) if n.endswith(".sqlite3"))
    assert len(kept) == 2, kept
    return folder / f"{kept[0] if which == 'sealed' else kept[-1]}{suffix}"


def plant_link(root: Path, outside: Path, which: str, suffix: str) -> Path:
    """A symlink at the name, to a copy of what was there (or to a file of the outside)."""
    name = file_at(root, which, suffix)
    if name.is_dir():
        target = outside / "moved-directory"
        shutil.move(name, target)
    elif name.exists():
        target = outside / f"moved{suffix}"
        shutil.move(name, target)
    else:
        target = outside / "precious.txt"
    name.symlink_to(target, target_is_directory=which == "directory")
    return name


@pytest.mark.parametrize(("which", "suffix"), PLACES,
                         ids=[f"{w}{s or '-file'}" for w, s in PLACES])
def test_a_symlink_at_any_journal_file_is_refused_by_name_and_its_target_untouched(
    segmented: Path, tmp_path: Path, which: str, suffix: str,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not sessiontemp's\n")
    link = plant_link(segmented, outside, which, suffix)
    before = fingerprint(outside)
    for attempt in (lambda: Manager(segmented), lambda: recover(segmented)):
        with pytest.raises(UnsafeRoot) as caught:
            attempt()
        assert caught.value.path == str(link)
        assert caught.value.reason == "is a symbolic link"
        assert caught.value.fix == "Remove it or pass another root"
    ran = zygote.journal_inspect("--root", segmented, "verify")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"{link} is a symbolic link. Remove it or pass another root" in ran.stderr
    assert fingerprint(outside) == before


@pytest.mark.parametrize("which", ["sealed", "active", "directory"])
def test_a_segment_file_of_another_user_is_refused_to_a_writer_by_name(
    segmented: Path, which: str,
) -> None:
    name = file_at(segmented, which, "")
    os.chown(name, 65534, 65534)
    for attempt in (lambda: Manager(segmented), lambda: recover(segmented)):
        with pytest.raises(UnsafeRoot) as caught:
            attempt()
        assert caught.value.path == str(name)
        assert caught.value.reason == f"is owned by uid 65534, not you (uid {os.getuid()})"
    if which != "directory":
        # A reader writes nothing: it reads a segment of another user's as it is
        # (an entry of the root itself must be the root's owner's, as every one).
        ran = zygote.journal_inspect("--root", segmented, "verify")
        assert ran.returncode == 0, ran.stdout + ran.stderr
