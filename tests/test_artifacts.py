"""The artifact store: what a copy is, what is refused, and what is left after a crash.

Real files throughout: symlinks, hard links, FIFOs and sockets are made in a
real directory; what is outside it is checked to be untouched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiontemp import Manager, recover, remove_artifact
from sessiontemp._guards.steps import StepKind, Steps
from sessiontemp._kernel.root import DIR_FLAGS, JOURNAL_NAME, Root
from sessiontemp.artifacts import (
    ARTIFACTS_DIR,
    MAX_BYTES,
    Copy,
    _copy,
    check_label,
    copy_in,
    file_name,
    id_of,
    remove_unreferenced,
    source_parts,
    unreferenced,
)
from sessiontemp.inspect import fsck
from sessiontemp.journal import ids
from sessiontemp.journal.errors import BadInput, UnsafeRoot
from tests import zygote


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[Root]:
    root = Root.open(tmp_path / "root")
    yield root
    root.close()


@pytest.fixture
def work(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A directory standing for a lease's, and a descriptor on it."""
    directory = tmp_path / "work"
    directory.mkdir()
    fd = os.open(directory, DIR_FLAGS)
    yield directory, fd
    os.close(fd)


def keep(root: Root, work: tuple[Path, int], path: str, label: str = "out.txt", *,
         max_bytes: int = MAX_BYTES) -> Copy:
    return copy_in(root, work[1], source_parts(work[0], path), ids.new_artifact(), label,
                   steps=Steps(), max_bytes=max_bytes)


def store(root: Root) -> Path:
    return root.path / ARTIFACTS_DIR


# -- what a copy is ---------------------------------------------------------------------


def test_a_copy_is_a_new_private_file_with_the_sources_digest_and_size(
    opened: Root, work: tuple[Path, int]
) -> None:
    data = os.urandom(3 * (1 << 20) + 17)
    (work[0] / "result.bin").write_bytes(data)
    copy = keep(opened, work, "result.bin", "result.bin")
    copy.done()
    path = store(opened) / copy.name
    st = path.stat()
    # Private, and sticky: an age cleaner never takes it.
    assert stat.S_IMODE(st.st_mode) == 0o1600
    assert st.st_nlink == 1
    assert (copy.sha256, copy.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert path.read_bytes() == data
    assert stat.S_IMODE(store(opened).stat().st_mode) == 0o700


def test_the_mode_is_1600_whatever_the_umask(opened: Root, work: tuple[Path, int]) -> None:
    (work[0] / "a").write_text("a")
    old = os.umask(0o777)
    try:
        copy = keep(opened, work, "a")
    finally:
        os.umask(old)
    copy.done()
    assert stat.S_IMODE((store(opened) / copy.name).stat().st_mode) == 0o1600
    assert stat.S_IMODE(store(opened).stat().st_mode) == 0o700


def test_two_copies_of_one_file_under_one_label_get_two_names(
    opened: Root, work: tuple[Path, int]
) -> None:
    (work[0] / "a").write_text("first")
    first = keep(opened, work, "a", "same")
    first.done()
    (work[0] / "a").write_text("second")
    second = keep(opened, work, "a", "same")
    second.done()
    assert first.name != second.name
    assert (store(opened) / first.name).read_text() == "first"
    assert (store(opened) / second.name).read_text() == "second"


def test_a_file_in_a_subdirectory_is_reached_by_a_relative_or_an_absolute_path(
    opened: Root, work: tuple[Path, int]
) -> None:
    (work[0] / "sub" / "deeper").mkdir(parents=True)
    (work[0] / "sub" / "deeper" / "f").write_text("x")
    keep(opened, work, "sub/deeper/f").done()
    keep(opened, work, str(work[0] / "sub" / "deeper" / "f")).done()
    assert len(os.listdir(store(opened))) == 2


def test_the_file_name_carries_the_id_and_the_label(opened: Root) -> None:
    artifact = ids.new_artifact()
    assert id_of(file_name(artifact, "report.txt")) == artifact
    assert id_of("report.txt") is None
    assert id_of(f"{artifact}-../x") is None


def test_the_copy_stays_locked_until_it_is_recorded(opened: Root, work: tuple[Path, int]) -> None:
    (work[0] / "a").write_text("a")
    copy = keep(opened, work, "a")
    fd = os.open(store(opened) / copy.name, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        copy.done()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_a_discarded_copy_leaves_nothing(opened: Root, work: tuple[Path, int]) -> None:
    (work[0] / "a").write_text("a")
    keep(opened, work, "a").discard()
    assert os.listdir(store(opened)) == []


def test_the_file_and_then_its_directory_are_synced_before_the_copy_is_handed_back(
    opened: Root, work: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    (work[0] / "a").write_text("a")
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    keep(opened, work, "a").done()
    assert synced == ["file", "dir"]


def test_a_failure_while_syncing_leaves_nothing_in_the_store(
    opened: Root, work: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    (work[0] / "a").write_text("a")

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error"):
        keep(opened, work, "a")
    assert os.listdir(store(opened)) == []


def test_the_step_before_the_copy_comes_before_the_file_exists(
    opened: Root, work: tuple[Path, int]
) -> None:
    (work[0] / "a").write_text("a")
    seen: list[str] = []

    def hook(kind: StepKind, detail: str) -> None:
        if kind == "copy":
            seen.append(detail)
            assert not (store(opened) / detail).exists()

    copy_in(opened, work[1], ("a",), ids.new_artifact(), "a", steps=Steps(hook)).done()
    assert len(seen) == 1


def test_a_file_that_grows_past_the_cap_while_copied_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"x" * 11)
    source = os.open(tmp_path / "src", os.O_RDONLY)
    target = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        # Its size was checked before the copy; what is read is checked again.
        with pytest.raises(BadInput, match="grew past the 10 bytes"):
            _copy(source, target, "src", 10)
    finally:
        os.close(source)
        os.close(target)


# -- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize("label", [
    "", "../escape", "/var/escape", "nested/name", ".lock", "a\\b", "-rf", "x" * 81, "caf\u00e9",
    "a b", "a\n",
])
def test_a_label_that_is_not_1_to_80_safe_characters_is_refused(label: str) -> None:
    with pytest.raises(ValueError, match="1 to 80 characters of A-Z, a-z, 0-9"):
        check_label(label)


@pytest.mark.parametrize("label", ["a", "report.txt", "R_1-2.tar.gz", "9" * 80])
def test_a_label_of_safe_characters_is_accepted(label: str) -> None:
    assert check_label(label) == label


@pytest.mark.parametrize("path", ["../outside", "a/../../outside", ".", "", "/etc/passwd"])
def test_a_path_that_may_lead_out_of_the_directory_is_refused(
    work: tuple[Path, int], path: str
) -> None:
    with pytest.raises(BadInput, match="lease's directory"):
        source_parts(work[0], path)


def test_a_symlink_is_refused_and_its_target_untouched(
    opened: Root, work: tuple[Path, int], tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("private")
    (work[0] / "link").symlink_to(secret)
    with pytest.raises(BadInput, match="symbolic link"):
        keep(opened, work, "link")
    assert unreferenced(opened, frozenset()) == []
    assert secret.read_text() == "private"


def test_a_symlinked_directory_on_the_way_is_refused(
    opened: Root, work: tuple[Path, int], tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("private")
    (work[0] / "dir").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BadInput, match="not a directory"):
        keep(opened, work, "dir/f")


def test_a_hard_link_is_refused(opened: Root, work: tuple[Path, int], tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("private")
    os.link(outside, work[0] / "hard")
    with pytest.raises(BadInput, match="2 links"):
        keep(opened, work, "hard")
    assert outside.read_text() == "private"


def test_a_fifo_is_refused_without_blocking(opened: Root, work: tuple[Path, int]) -> None:
    os.mkfifo(work[0] / "fifo")
    with pytest.raises(BadInput, match="not a regular file"):
        keep(opened, work, "fifo")


def test_a_socket_and_a_directory_are_refused(
    opened: Root, work: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
        # By a relative name: a socket path holds at most 107 bytes.
        monkeypatch.chdir(work[0])
        sock.bind("sock")
        with pytest.raises(BadInput, match="not a regular file"):
            keep(opened, work, "sock")
    (work[0] / "d").mkdir()
    with pytest.raises(BadInput, match="not a regular file"):
        keep(opened, work, "d")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_node_is_refused_without_being_opened(
    opened: Root, work: tuple[Path, int]
) -> None:
    try:
        os.mknod(work[0] / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("no CAP_MKNOD here")
    with pytest.raises(BadInput, match="not a regular file"):
        keep(opened, work, "null")


def test_a_file_larger_than_the_cap_is_refused(opened: Root, work: tuple[Path, int]) -> None:
    assert MAX_BYTES == 16 * 1024 * 1024
    (work[0] / "big").write_bytes(b"x" * 101)
    with pytest.raises(BadInput, match="more than the 100 an artifact may"):
        keep(opened, work, "big", max_bytes=100)
    keep(opened, work, "big", max_bytes=101).done()


def test_a_missing_file_is_bad_input_naming_its_whole_path(
    opened: Root, work: tuple[Path, int]
) -> None:
    with pytest.raises(BadInput, match=f"^{work[0]}/nothing: does not exist. Check the path"):
        keep(opened, work, "nothing")


def test_an_artifact_store_that_is_a_symlink_is_refused(
    opened: Root, work: tuple[Path, int], tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (opened.path / ARTIFACTS_DIR).symlink_to(tmp_path / "elsewhere")
    (work[0] / "a").write_text("a")
    with pytest.raises(UnsafeRoot, match="symbolic link"):
        keep(opened, work, "a")
    assert os.listdir(tmp_path / "elsewhere") == []


# -- what a crash leaves -------------------------------------------------------------------------


def test_a_file_no_record_names_is_unreferenced_and_removable(
    opened: Root, work: tuple[Path, int]
) -> None:
    (work[0] / "a").write_text("a")
    recorded = keep(opened, work, "a")
    recorded.done()
    # Stands for a keeper killed between the fsync and the record.
    orphan = keep(opened, work, "a")
    orphan._close()
    names = unreferenced(opened, frozenset({recorded.name}))
    assert names == [orphan.name]
    assert remove_unreferenced(opened, orphan.name, lambda name: True)
    assert os.listdir(store(opened)) == [recorded.name]


def test_a_file_still_being_kept_is_never_removed(opened: Root, work: tuple[Path, int]) -> None:
    (work[0] / "a").write_text("a")
    copy = keep(opened, work, "a")
    assert unreferenced(opened, frozenset()) == [copy.name]
    assert not remove_unreferenced(opened, copy.name, lambda name: True)
    copy.done()
    assert os.listdir(store(opened)) == [copy.name]


def test_a_file_recorded_meanwhile_is_not_removed(opened: Root, work: tuple[Path, int]) -> None:
    (work[0] / "a").write_text("a")
    copy = keep(opened, work, "a")
    copy.done()
    # Listed as unreferenced, but the journal, read again under its lock, names it.
    assert not remove_unreferenced(opened, copy.name, lambda name: False)
    assert os.listdir(store(opened)) == [copy.name]


# -- a fresh journal, and every sweep of what the journal does not know --------------------------

KEEPER = """
import json, sys
from sessiontemp import Manager
manager = Manager(sys.argv[1], session="chat-42")
manager.retain()
with manager.acquire() as lease:
    (lease.path / "report.txt").write_text("the only copy")
    artifact = lease.keep("report.txt", "report.txt")
manager.release()
manager.close()
print(json.dumps({"path": str(artifact.path), "id": artifact.id}))
"""


def kept_by_a_process(root: Path) -> tuple[Path, str]:
    """An artifact kept by a real process that then closed its manager: its path and id."""
    done = zygote.shared("sessiontemp").run(["-c", str(root)], script=KEEPER)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    return Path(report["path"]), report["id"]


def move_journal_aside(root: Path, to: Path) -> None:
    """The README's way out of a refused record: the journal's files moved, no manager running."""
    to.mkdir()
    for name in os.listdir(root):
        if name.startswith(JOURNAL_NAME):
            os.rename(root / name, to / name)


def test_a_fresh_journal_keeps_every_artifact_and_fsck_names_each_with_its_fix(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    path, artifact = kept_by_a_process(root)
    move_journal_aside(root, tmp_path / "aside")
    with Manager(root) as fresh:
        assert path not in [r.path for r in fresh.recovery.removed]
    report = recover(root, stale_after=0)
    assert path not in [r.path for r in report.removed]
    assert path.read_text() == "the only copy"
    [finding] = fsck(root).findings
    assert (finding.check, finding.path) == ("unreferenced", path)
    assert "no recovery removes it" in finding.message
    assert f"sessiontemp.remove_artifact({str(root)!r}, {artifact!r})" in finding.fix
    # Only the explicit call removes it.
    assert remove_artifact(root, artifact)
    assert not path.exists()
    assert fsck(root).ok
    assert not remove_artifact(root, artifact)


def test_a_file_of_the_store_still_being_kept_is_left_by_an_explicit_removal(
    opened: Root, work: tuple[Path, int]
) -> None:
    (work[0] / "a").write_text("a")
    artifact = ids.new_artifact()
    copy = copy_in(opened, work[1], ("a",), artifact, "a", steps=Steps())
    try:
        # Its keeper holds it (it is about to record it): never removed under it.
        assert not remove_artifact(opened.path, artifact)
        assert os.listdir(store(opened)) == [copy.name]
    finally:
        copy.done()


def test_an_explicit_removal_cut_short_before_its_unlink_is_finished_by_the_same_call(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    path, artifact = kept_by_a_process(root)
    saved = tmp_path / "saved"
    shutil.copy2(path, saved)
    assert remove_artifact(root, artifact)
    # As if the process had died between the journaled removal and the unlink.
    os.rename(saved, path)
    [finding] = fsck(root).findings
    assert finding.check == "unreferenced"
    assert "its removal was journaled at event" in finding.message
    recover(root, stale_after=0)
    assert path.exists(), "a recovery removed a file of the store"
    assert remove_artifact(root, artifact)
    assert not path.exists()
    assert fsck(root).ok


def test_what_sessiontemp_did_not_name_in_the_store_is_never_touched(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path, _ = kept_by_a_process(root)
    notes = path.parent / "notes.txt"
    notes.write_text("mine")
    old = time.time() - 30 * 86400
    os.utime(notes, (old, old))
    recover(root, stale_after=0)
    assert notes.read_text() == "mine"
    [finding] = fsck(root).findings
    assert (finding.check, finding.path) == ("unknown", notes)
