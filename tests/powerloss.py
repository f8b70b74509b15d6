"""A power loss, modelled on a root: what the disk keeps, and what recovery must make of it.

SQLite in WAL mode appends each commit's frames to the segment's -wal file;
a synced commit (``synchronous=FULL``) fdatasyncs that file, which makes
every frame before it durable too, whoever wrote them.  A commit without a
sync (``NORMAL``) is in the file for every process to read, but only in the
page cache: a power loss may drop it, and every later frame with it.

:class:`SyncedWal` is called (through :func:`journal.testing.synced_commits`)
after every synced commit and notes, per segment, how far the -wal file is
durable: its salt (which changes when a checkpoint restarts the file) and
its number of frames up to the last commit frame.  :func:`lose_power` then
cuts every -wal file back to that: the frames of the last synced commit are
kept, every later frame is dropped; a -wal file restarted since its last
synced commit, or never synced, loses every frame (what a checkpoint moved
into the database file before that stays there).  The -shm index lives in
memory and is gone: SQLite rebuilds it from the -wal file.  The database
files are given new inodes, so that no connection this process still holds
on the old ones (SQLite keeps them past a close for its POSIX locks) shares
their in-memory index.

Directory operations are not fsynced, so a power loss may keep or lose each
of them; the write-ahead rule only promises that none was made before its
record was synced.  :func:`lose_directories` models three cases: every
directory effect kept (a directory whose creation record was dropped is
then one the journal does not name: a leak, and the write-ahead rule's
breach); every generation directory's mkdir lost (none of them, nor what
was in them, reached the disk); every rename into the trash undone.  A
removal's rmdir undone (a directory back on disk after its removal was
journaled, under its own inode) is tests/test_power_loss.py's.

Every process is gone with the power: every manager dies (its locks with
it), and recovery runs on what the disk kept.  :func:`judge` says what it
must have made of it: no leak (a generation or trash directory the journal
does not keep), no wrongful removal (an artifact whose record survived
missing, a generation the journal keeps for a resume missing: each one
that was on disk before the pass; an artifact whose keep returned that the
journal lost), and a second pass that finds nothing
to do.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Set
from pathlib import Path
from typing import Literal, TypeAlias

import attrs

from sessiontemp import recover
from sessiontemp._kernel.root import (
    GENERATION_PREFIX,
    JOURNAL_NAME,
    TRASH_PREFIX,
    generation_name,
)
from sessiontemp.artifacts import ARTIFACTS_DIR, artifact_of
from sessiontemp.inspect import verify
from sessiontemp.journal import State
from tests.conftest import live_state

Directories: TypeAlias = Literal["kept", "made lost", "renames undone"]
DIRECTORIES: tuple[Directories, ...] = ("kept", "made lost", "renames undone")

WAL_HEADER = 32
FRAME_HEADER = 24


def wal_of(segment: Path) -> Path:
    return segment.with_name(segment.name + "-wal")


def wal_end(wal: Path) -> tuple[bytes, int]:
    """(salt, frames): the -wal file's salt and its frames up to its last commit frame."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return b"", 0
    if len(data) < WAL_HEADER:
        return b"", 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salt = data[16:24]
    frame = FRAME_HEADER + page_size
    frames = committed = 0
    offset = WAL_HEADER
    while offset + frame <= len(data):
        header = data[offset:offset + FRAME_HEADER]
        if header[8:16] != salt:
            break  # a frame of before the file restarted: not part of it
        frames += 1
        if struct.unpack(">I", header[4:8])[0]:
            committed = frames  # a commit frame: the database's size after it
        offset += frame
    return salt, committed


@attrs.define
class SyncedWal:
    """How far each segment's -wal file is durable: noted after each synced commit."""

    durable: dict[Path, tuple[bytes, int]] = attrs.field(factory=dict)
    syncs: int = 0

    def __call__(self, segment: Path) -> None:
        self.syncs += 1
        self.durable[segment.resolve()] = wal_end(wal_of(segment))


def segments(root: Path) -> list[Path]:
    """The journal's SQLite files under *root*: the head and every segment."""
    head = root / JOURNAL_NAME
    found = [head] if head.exists() else []
    directory = root / f"{JOURNAL_NAME}.d"
    if directory.is_dir():
        found += sorted(p for p in directory.iterdir()
                        if p.is_file() and not p.name.endswith(("-wal", "-shm", "-journal")))
    return found


@attrs.frozen
class Cut:
    """What the disk keeps of a root's journal files at the moment the power goes."""

    files: dict[Path, bytes]
    dropped: int

    def restore(self) -> None:
        """Put the kept files back, each under a new inode, with no -shm index."""
        for path, data in self.files.items():
            tmp = path.with_name(path.name + ".kept")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            if not path.name.endswith("-wal"):
                path.with_name(path.name + "-shm").unlink(missing_ok=True)


def lose_power(root: Path, synced: SyncedWal) -> Cut:
    """What the disk keeps of *root*'s journal now: every -wal cut back to what was synced.

    Taken while the processes still hold their connections (a connection's
    close would checkpoint its -wal into the database file, synced), and
    put back with :meth:`Cut.restore` once they are all gone.
    """
    files: dict[Path, bytes] = {}
    dropped = 0
    for segment in segments(root):
        files[segment] = segment.read_bytes()
        wal = wal_of(segment)
        try:
            data = wal.read_bytes()
        except FileNotFoundError:
            files[wal] = b""
            continue
        salt, frames = wal_end(wal)
        kept_salt, kept = synced.durable.get(segment.resolve(), (b"", 0))
        keep = min(kept, frames) if kept_salt == salt else 0
        page_size = struct.unpack(">I", data[8:12])[0] if len(data) >= WAL_HEADER else 0
        dropped += frames - keep
        files[wal] = data[:WAL_HEADER + keep * (FRAME_HEADER + page_size)] if keep else b""
    return Cut(files, dropped)


def lose_directories(root: Path, how: Directories) -> None:
    """What a power loss undid of the directory effects under *root* (see the module)."""
    if how == "kept":
        return
    for name in on_disk(root):
        if how == "made lost":
            shutil.rmtree(root / name)
        elif name.startswith(TRASH_PREFIX):
            back = generation_name(name.removeprefix(TRASH_PREFIX))
            if not (root / back).exists():
                os.rename(root / name, root / back)


@attrs.define
class PowerLoss:
    """:func:`lose_power` on *root* when :meth:`goes` is called: at the crash point."""

    root: Path
    synced: SyncedWal
    cut: Cut | None = None

    def goes(self) -> None:
        self.cut = lose_power(self.root, self.synced)


@attrs.define
class Verdict:
    """What recovery made of one power loss."""

    leaked: set[str]
    wrongful: set[str]
    problems: list[str]


def on_disk(root: Path) -> set[str]:
    return {n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX))}


def judge(root: Path, promised: Set[str] = frozenset()) -> Verdict:
    """Recover *root* after a power loss (nobody alive), and what it left wrong.

    *promised*: the artifacts whose keep returned before the power went.
    """
    problems: list[str] = []
    before = on_disk(root)
    kept_files = set(os.listdir(root / ARTIFACTS_DIR)) if (root / ARTIFACTS_DIR).is_dir() else set()
    recover(root)
    state: State = live_state(root)
    kept = {generation_name(g) for g in state.generations}
    found = on_disk(root)
    wrongful = {name for name in (kept & before) - found}
    wrongful |= {a for a, artifact in state.artifacts.items()
                 if (path := artifact_of(root, artifact).path).name in kept_files
                 and not path.is_file()}
    wrongful |= {f"artifact {a} (its keep returned, its record is lost)"
                 for a in promised - set(state.artifacts)}
    again = recover(root)
    if again.removed:
        problems.append(f"a second recovery removed {[str(r.path) for r in again.removed]}")
    checked = verify(root / JOURNAL_NAME)
    if checked.problems:
        problems.append(f"verify: {checked.problems[:3]}")
    return Verdict(found - kept, wrongful, problems)
