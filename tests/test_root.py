"""Bad roots and bad journals: refused with an error that says what, where and how to fix it.

Every refusal raises the right :class:`SessionTempError` subclass, names the
path, the reason and the fix in its message, and leaves what it found exactly
as it was: same bytes, same owner, same mode, same entries.
"""

from __future__ import annotations

import os
import random
import sqlite3
import stat
import tempfile
from pathlib import Path

import pytest

from sessiontemp import (
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalReadOnly,
    JournalVersionError,
    Manager,
    SessionTempError,
    Unavailable,
    UnsafeRoot,
    default_root,
    recover,
)

NOBODY = 65534
JOURNAL = "journal.sqlite3"

Fingerprint = tuple[object, ...]


def fingerprint(path: Path) -> dict[str, Fingerprint]:
    """Everything about *path* and what lies under it, without following any link.

    Access times are left out: reading a file may update them.
    """
    found: dict[str, Fingerprint] = {}

    def visit(p: Path, key: str) -> None:
        st = os.lstat(p)
        meta = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        if stat.S_ISLNK(st.st_mode):
            found[key] = (*meta, os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            found[key] = meta
            for name in sorted(os.listdir(p)):
                visit(p / name, f"{key}/{name}")
        else:
            found[key] = (*meta, p.read_bytes())

    visit(path, ".")
    return found


def assert_explains(error: SessionTempError, path: Path, reason: str, fix: str) -> None:
    """The message names the path, the reason and the fix, and so do the attributes."""
    message = str(error)
    assert str(path) in message
    assert reason in message
    assert fix in message
    assert getattr(error, "path", None) == str(path)
    assert reason in getattr(error, "reason", "")
    assert fix in getattr(error, "fix", "")


def private_root(root: Path) -> Path:
    root.mkdir(mode=0o700)
    return root


def make_journal(root: Path) -> Path:
    """A real journal with a little history, its manager closed."""
    with Manager(root) as m:
        m.retain()
        with m.acquire():
            pass
    return root / JOURNAL


# -- the root ------------------------------------------------------------------------------


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-directory", "dangling"])
def test_a_root_that_is_a_symlink_is_refused_and_its_target_untouched(
    tmp_path: Path, target_exists: bool
) -> None:
    target = tmp_path / "target"
    if target_exists:
        target.mkdir(mode=0o700)
        (target / "theirs.txt").write_text("someone else's")
    root = tmp_path / "root"
    root.symlink_to(target, target_is_directory=True)
    before = fingerprint(tmp_path)
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert fingerprint(tmp_path) == before
    assert target.exists() is target_exists
    assert_explains(caught.value, root, "is a symbolic link", "Remove it or pass another root")


def test_recover_refuses_a_symlinked_root_too(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    root = tmp_path / "root"
    root.symlink_to(target, target_is_directory=True)
    before = fingerprint(tmp_path)
    with pytest.raises(UnsafeRoot) as caught:
        recover(root)
    assert fingerprint(tmp_path) == before
    assert_explains(caught.value, root, "is a symbolic link", "Remove it or pass another root")


def test_a_root_owned_by_another_user_is_refused(root: Path) -> None:
    private_root(root)
    os.chown(root, NOBODY, NOBODY)
    before = fingerprint(root)
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert fingerprint(root) == before
    assert_explains(caught.value, root, f"is owned by uid {NOBODY}",
                    "Remove it or pass another root")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_root_writable_by_group_or_others_is_refused_with_the_chmod_that_fixes_it(
    root: Path, mode: int
) -> None:
    private_root(root)
    os.chmod(root, mode)
    before = fingerprint(root)
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert fingerprint(root) == before
    assert isinstance(caught.value, PermissionError)
    assert_explains(caught.value, root, f"writable by group or others (mode {mode:04o})",
                    f"chmod 700 {root}")


def test_a_root_that_is_a_regular_file_is_refused_and_left_as_it_was(root: Path) -> None:
    root.write_bytes(b"a file where the root should be")
    before = fingerprint(root)
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert fingerprint(root) == before
    assert_explains(caught.value, root, "is not a directory", "Remove it or pass another root")


def test_a_negative_stale_after_is_refused_before_anything_is_created(root: Path) -> None:
    with pytest.raises(ValueError, match="stale_after must be a finite number of seconds >= 0"):
        Manager(root, stale_after=-1)
    assert not root.exists()


# -- the journal ---------------------------------------------------------------------------


def test_a_journal_that_is_not_sqlite_is_refused_as_corrupt_and_left_byte_for_byte(
    root: Path,
) -> None:
    journal = private_root(root) / JOURNAL
    journal.write_bytes(b"not a journal\n" + random.Random(0).randbytes(8192))
    before = fingerprint(journal)
    with pytest.raises(JournalCorrupt) as caught:
        Manager(root)
    assert fingerprint(journal) == before
    assert sorted(os.listdir(root)) == [JOURNAL, "managers"]
    assert_explains(caught.value, journal, "is not a SQLite database", "Move it aside")


def test_a_sqlite_database_of_another_program_is_refused_as_corrupt_and_left_byte_for_byte(
    root: Path,
) -> None:
    journal = private_root(root) / JOURNAL
    with sqlite3.connect(journal) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('someone else''s data')")
    db.close()
    before = fingerprint(journal)
    with pytest.raises(JournalCorrupt) as caught:
        Manager(root)
    assert fingerprint(journal) == before
    assert sorted(os.listdir(root)) == [JOURNAL, "managers"]
    assert_explains(caught.value, journal, "another program", "Move it aside")


def test_a_journal_with_a_newer_schema_version_is_refused_and_left_byte_for_byte(
    root: Path,
) -> None:
    journal = make_journal(root)
    db = sqlite3.connect(journal)
    try:
        db.execute("PRAGMA user_version=99")
    finally:
        db.close()
    entries = sorted(os.listdir(root))
    assert entries == [JOURNAL, "managers", "recovery.lock"]
    before = fingerprint(journal)
    with pytest.raises(JournalVersionError) as caught:
        Manager(root)
    assert fingerprint(journal) == before
    assert sorted(os.listdir(root)) == entries
    assert_explains(caught.value, journal, "schema version 99", "Upgrade sessiontemp")


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-journal", "dangling"])
def test_a_journal_that_is_a_symlink_is_refused_and_its_target_untouched(
    tmp_path: Path, root: Path, target_exists: bool
) -> None:
    elsewhere = tmp_path / "elsewhere"
    target = make_journal(elsewhere) if target_exists else elsewhere / JOURNAL
    journal = private_root(root) / JOURNAL
    journal.symlink_to(target)
    before = fingerprint(journal), fingerprint(elsewhere) if target_exists else None
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert (fingerprint(journal), fingerprint(elsewhere) if target_exists else None) == before
    assert target.exists() is target_exists
    # Refused before anything is made.
    assert sorted(os.listdir(root)) == [JOURNAL]
    assert_explains(caught.value, journal, "is a symbolic link", "Remove it or pass another root")


def test_a_journal_owned_by_another_user_is_refused_and_left_as_it_was(root: Path) -> None:
    journal = make_journal(root)
    os.chown(journal, NOBODY, NOBODY)
    before = fingerprint(root)
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert fingerprint(root) == before
    assert_explains(caught.value, journal, f"is owned by uid {NOBODY}",
                    "Remove it or pass another root")


# -- the default root and the error tree ----------------------------------------------------


def test_the_default_root_is_a_private_directory_under_the_system_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # tempfile caches its answer; forget it so TMPDIR is read again (restored after).
    monkeypatch.setattr(tempfile, "tempdir", None)
    expected = tmp_path / f"sessiontemp-{os.getuid()}"
    assert default_root() == expected
    with Manager() as m:
        assert m.root == expected
        m.retain()
        with m.acquire() as lease:
            assert lease.path.parent == expected
    st = os.lstat(expected)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.getuid()
    assert recover().ran


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (UnsafeRoot, PermissionError),
        (JournalBusy, TimeoutError),
        (Unavailable, RuntimeError),
        (JournalReadOnly, PermissionError),
        (JournalError, OSError),
        (JournalCorrupt, JournalError),
        (JournalVersionError, JournalError),
    ],
)
def test_every_error_is_a_session_temp_error_and_its_nearest_builtin(
    error: type[SessionTempError], builtin: type[BaseException]
) -> None:
    assert issubclass(error, SessionTempError)
    assert issubclass(error, builtin)
