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

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from sessiontemp import Manager, UnsafeRoot, recover
from sessiontemp.journal import Retention
from sessiontemp.journal.segments import name_of
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


# -- anything but a regular file at a segment's name ----------------------------------------------

# A process of its own for each call, under a timeout: a call that opened a
# FIFO would wait for a writer to it for ever, and must fail its test, not
# hang the suite.
TIMEOUT = 30.0
OPENS = textwrap.dedent("""
    import sys
    from sessiontemp import Manager, UnsafeRoot, recover
    try:
        if sys.argv[2] == "Manager":
            Manager(sys.argv[1]).close()
        else:
            recover(sys.argv[1])
    except UnsafeRoot as e:
        print(e.path, e.reason, e.fix, sep="\\n")
    else:
        print("opened")
""")
SUBCOMMANDS = [["summary"], ["events"], ["state"], ["verify"], ["fsck"],
               ["timeline", "-o", os.devnull], ["explain", "aaaaaaaaaaaaaaaa"], ["usage"],
               ["usage", "--measure"]]
# Where a FIFO goes: (which file, which of its names); "newer" is a name after the active one.
FIFO_PLACES = [("sealed", ""), ("sealed", "-wal"), ("sealed", "-shm"), ("active", ""),
               ("active", "-wal"), ("newer", "")]


def opens(root: Path, call: str) -> list[str]:
    """What ``Manager(root)`` or ``recover(root)`` (*call*) did in a process of its own."""
    ran = zygote.shared("sessiontemp").run(["-c", str(root), call], script=OPENS,
                                           timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout.splitlines()


def inspects(root: Path, *words: str) -> subprocess.CompletedProcess[str]:
    """``journal-inspect --root ROOT WORDS...`` in a process of its own."""
    return zygote.shared("sessiontemp.cli.journal_inspect").run(
        [str(zygote.JOURNAL_INSPECT), "--root", str(root), *words],
        entry="sessiontemp.cli.journal_inspect:run",
        timeout=TIMEOUT)


def place_at(root: Path, which: str, suffix: str) -> Path:
    if which == "newer":
        return root / f"{JOURNAL}.d" / name_of(10**12)
    return file_at(root, which, suffix)


def plant_fifo(root: Path, which: str, suffix: str) -> Path:
    name = place_at(root, which, suffix)
    with contextlib.suppress(FileNotFoundError):
        name.unlink()
    os.mkfifo(name)
    return name


@pytest.mark.parametrize(("which", "suffix"), FIFO_PLACES,
                         ids=[f"{w}{s or '-file'}" for w, s in FIFO_PLACES])
def test_a_fifo_at_a_segment_file_is_refused_by_name_without_blocking_manager_recover_or_verify(
    segmented: Path, which: str, suffix: str,
) -> None:
    fifo = plant_fifo(segmented, which, suffix)
    for call in ("Manager", "recover"):
        assert opens(segmented, call) == [
            str(fifo), "is not a regular file (a FIFO)", "Remove it or pass another root"], call
    ran = inspects(segmented, "verify")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"{fifo} is not a regular file (a FIFO). Remove it or pass another root" in ran.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=[" ".join(w) for w in SUBCOMMANDS])
def test_a_fifo_at_a_sealed_segment_is_refused_by_every_journal_inspect_subcommand(
    segmented: Path, words: list[str],
) -> None:
    fifo = plant_fifo(segmented, "sealed", "")
    ran = inspects(segmented, *words)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"{fifo} is not a regular file (a FIFO). Remove it or pass another root" in ran.stderr


@pytest.mark.parametrize("which", ["sealed", "newer"])
def test_a_directory_at_a_segment_name_is_refused_alike_by_a_writer_and_a_reader(
    segmented: Path, which: str,
) -> None:
    """One rule for both: a Manager failed with a JournalError where journal-inspect read past
    it as if it were not there."""
    name = place_at(segmented, which, "")
    with contextlib.suppress(FileNotFoundError):
        name.unlink()
    name.mkdir()
    for call in ("Manager", "recover"):
        assert opens(segmented, call) == [
            str(name), "is not a regular file (a directory)", "Remove it or pass another root"]
    for words in (["verify"], ["summary"]):
        ran = inspects(segmented, *words)
        assert ran.returncode == 2, ran.stdout + ran.stderr
        assert (f"{name} is not a regular file (a directory). Remove it or pass another root"
                in ran.stderr)
    assert name.is_dir()
    name.rmdir()
    if which == "newer":
        # Nothing else was wrong: gone, the journal opens and reads as before.
        Manager(segmented).close()
        assert inspects(segmented, "verify").returncode == 0
