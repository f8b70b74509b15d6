"""Bad roots and bad journals: refused with an error that says what, where and how to fix it.

Every refusal raises the right :class:`SessionTempError` subclass, names the
path, the reason and the fix in its message, and leaves what it found exactly
as it was: same bytes, same owner, same mode, same entries.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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
    remove_artifact,
    remove_session,
)
from sessiontemp.cli import journal_inspect as cli
from sessiontemp.inspect import fsck
from sessiontemp.journal.errors import NoSuchRoot, RootReadOnly
from tests import zygote
from tests.nobody import NOBODY, as_root, nobodys_place, outcome

SCRIPT = Path(sys.executable).parent / "sessiontemp"
__all__ = ["nobodys_place"]  # a fixture, used by name
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
        elif stat.S_ISREG(st.st_mode):
            found[key] = (*meta, p.read_bytes())
        else:
            # A FIFO would block a read; a socket cannot be read.
            found[key] = meta

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
    assert_explains(caught.value, root, "is a symbolic link",
                    "Pass the directory itself (not a link to it) as the root")


def test_recover_refuses_a_symlinked_root_too(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    root = tmp_path / "root"
    root.symlink_to(target, target_is_directory=True)
    before = fingerprint(tmp_path)
    with pytest.raises(UnsafeRoot) as caught:
        recover(root)
    assert fingerprint(tmp_path) == before
    assert_explains(caught.value, root, "is a symbolic link",
                    "Pass the directory itself (not a link to it) as the root")


def test_a_root_owned_by_another_user_is_refused(root: Path) -> None:
    private_root(root)
    os.chown(root, NOBODY, NOBODY)
    before = fingerprint(root)
    with pytest.raises(UnsafeRoot) as caught:
        Manager(root)
    assert fingerprint(root) == before
    # Its owner named, and the user's own root as the fix: removing it is none.
    assert_explains(caught.value, root, f"is owned by uid {NOBODY} (nobody), not you",
                    f"Use a root of your own: the per-user default ({default_root()}), or "
                    "pass a directory you own")


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
    assert_explains(caught.value, root, "is not a directory",
                    "Pass the path of a directory as the root")


def test_a_negative_stale_after_is_refused_before_anything_is_created(root: Path) -> None:
    with pytest.raises(ValueError, match="stale_after: must be a finite number of seconds >= 0"):
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
    assert entries == [JOURNAL, "managers", "recovery.lock", "space.reserve"]
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
            assert lease.path.parent.parent == expected
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


# -- every entry of the layout, planted as something else -----------------------------------------

ENTRIES = ["managers", "sessions", "artifacts", "journal.sqlite3.d"]
PLANTED = {
    "symlink": "is a symbolic link",
    "file": "is not a directory (a regular file)",
    "fifo": "is not a directory (a FIFO)",
}
SUBCOMMANDS = [["summary"], ["events"], ["state"], ["verify"], ["fsck"],
               ["timeline", "-o", os.devnull],
               ["explain", "aaaaaaaaaaaaaaaa"], ["usage"], ["usage", "--measure"]]
ARTIFACT = "0123456789abcdef"


def plant(path: Path, kind: str, outside: Path) -> None:
    """Put *kind* at *path* in place of whatever was there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    if kind == "symlink":
        path.symlink_to(outside, target_is_directory=True)
    elif kind == "file":
        path.write_text("planted")
    else:
        os.mkfifo(path)


def every_call(root: Path) -> dict[str, Callable[[], object]]:
    """Each public call that opens a root, by name."""
    return {
        "Manager": lambda: Manager(root).close(),
        "recover": lambda: recover(root),
        "remove_session": lambda: remove_session(root, "chat-42"),
        "remove_artifact": lambda: remove_artifact(root, ARTIFACT),
    }


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "outside"
    place.mkdir()
    (place / "precious.txt").write_text("must survive")
    return place


@pytest.mark.parametrize("kind", sorted(PLANTED))
@pytest.mark.parametrize("entry", ENTRIES)
def test_an_entry_of_the_layout_planted_as_something_else_is_refused_by_every_call(
    root: Path, outside: Path, entry: str, kind: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """Manager(), recover(), remove_session(), remove_artifact() and every journal-inspect
    subcommand: UnsafeRoot naming the entry's full path, the reason and the fix."""
    make_journal(root)
    plant(root / entry, kind, outside)
    before = fingerprint(root.parent)
    for name, call in every_call(root).items():
        with pytest.raises(UnsafeRoot) as caught:
            call()
        assert_explains(caught.value, root / entry, PLANTED[kind],
                        "Remove it or pass another root")
        assert fingerprint(root.parent) == before, name
    for words in SUBCOMMANDS:
        assert cli.main(["--root", str(root), *words]) == 2, words
        shown = capsys.readouterr().err
        assert f"{root / entry} {PLANTED[kind]}. Remove it or pass another root" in shown, words
    assert fingerprint(root.parent) == before


@pytest.mark.parametrize("name", ["recovery.lock", "journal.sqlite3-wal", "journal.sqlite3-shm"])
@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_plain_file_of_the_root_planted_as_something_else_is_refused_and_nothing_followed(
    root: Path, outside: Path, name: str, kind: str,
) -> None:
    """A symlink at recovery.lock was followed, and its target truncated, by each recovery."""
    make_journal(root)
    path = root / name
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if kind == "symlink":
        path.symlink_to(outside / "precious.txt")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    reason = {"symlink": "is a symbolic link", "fifo": "is not a regular file (a FIFO)",
              "directory": "is not a regular file (a directory)"}[kind]
    before = fingerprint(root.parent)
    for call in every_call(root).values():
        with pytest.raises(UnsafeRoot) as caught:
            call()
        assert_explains(caught.value, path, reason, "Remove it or pass another root")
    assert fingerprint(root.parent) == before
    assert (outside / "precious.txt").read_text() == "must survive"


@as_root
@pytest.mark.parametrize("entry", ["artifacts", "sessions", "recovery.lock",
                                   "sessions/chat-42.lock"])
def test_an_entry_of_another_user_is_refused_naming_its_owner(root: Path, entry: str) -> None:
    make_journal(root)
    with Manager(root, session="chat-42"):
        pass
    (root / "artifacts").mkdir(mode=0o700, exist_ok=True)
    os.chown(root / entry, NOBODY, NOBODY)
    before = fingerprint(root)
    calls = every_call(root)
    calls["Manager"] = lambda: Manager(root, session="chat-42").close()
    if entry == "sessions/chat-42.lock":
        # Only the session's owner and remove_session open its lock file.
        del calls["recover"], calls["remove_artifact"]
    for call in calls.values():
        with pytest.raises(UnsafeRoot) as caught:
            call()
        assert_explains(caught.value, root / entry, f"is owned by uid {NOBODY}",
                        "Remove it or pass another root")
    assert fingerprint(root) == before


# -- a root its owner cannot use ----------------------------------------------------------------

CALLS_AS_NOBODY = {
    "Manager": "sessiontemp.Manager(ROOT, session='chat-42').close()",
    "recover": "sessiontemp.recover(ROOT)",
    "remove_session": "sessiontemp.remove_session(ROOT, 'chat-42')",
    "remove_artifact": f"sessiontemp.remove_artifact(ROOT, {ARTIFACT!r})",
}


@as_root
@pytest.mark.parametrize(("entry", "mode", "reason"), [
    ("", 0o500, "is not readable, writable and searchable by you (mode 0500)"),
    ("artifacts", 0o500, "is not readable, writable and searchable by you (mode 0500)"),
    ("sessions", 0o300, "is not readable, writable and searchable by you (mode 0300)"),
    ("recovery.lock", 0o000, "cannot be opened (Permission denied)"),
])
def test_an_entry_its_owner_may_not_use_is_root_read_only_naming_it_and_the_fix(
    nobodys_place: Path, entry: str, mode: int, reason: str,
) -> None:
    root = nobodys_place / "root"
    made = outcome("sessiontemp.Manager(ROOT, session='chat-42').close(); "
                   "sessiontemp.Manager(ROOT).close()".replace("ROOT", repr(str(root))),
                   cwd=nobodys_place)
    assert made == {"raised": None}
    (root / "artifacts").mkdir(mode=0o700, exist_ok=True)
    os.chown(root / "artifacts", NOBODY, NOBODY)
    target = root / entry if entry else root
    os.chmod(target, mode)
    for name, call in CALLS_AS_NOBODY.items():
        if entry == "recovery.lock" and name == "Manager":
            call = "sessiontemp.Manager(ROOT).close()"
        got = outcome(call.replace("ROOT", repr(str(root))), cwd=nobodys_place)
        assert got["raised"] is not None, name
        assert "RootReadOnly" in got["raised"], got
        assert "PermissionError" in got["raised"], got
        assert got["path"] == str(target), got
        assert reason in got["message"], got
        assert ("chmod" in got["message"]) or ("access" in got["message"]), got
    os.chmod(target, 0o700 if target.is_dir() else 0o600)
    assert outcome("sessiontemp.recover(ROOT)".replace("ROOT", repr(str(root))),
                   cwd=nobodys_place) == {"raised": None}


@as_root
def test_an_empty_root_on_a_read_only_file_system_is_root_read_only_naming_what_it_must_make(
    tmp_path: Path,
) -> None:
    with small_file_system(tmp_path) as fs:
        root = fs / "root"
        root.mkdir(mode=0o700)
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        try:
            for name, call in every_call(root).items():
                if name != "Manager":
                    # An empty directory is no root yet: nothing to recover or remove.
                    with pytest.raises(NoSuchRoot):
                        call()
                    continue
                with pytest.raises(RootReadOnly) as caught:
                    call()
                assert_explains(caught.value, root / "managers",
                                "cannot be created (Read-only file system)",
                                "remount it read-write, or pass a root on a writable file "
                                "system")
                assert caught.value.errno == errno.EROFS
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(fs)], check=True)
        assert os.listdir(root) == []


@contextlib.contextmanager
def small_file_system(tmp_path: Path, options: str = "") -> Iterator[Path]:
    """A 2 MB tmpfs (with *options*) under *tmp_path*; skips where mounting is not permitted."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=2m,mode=0700{options and ','}"
                           f"{options}", "tmpfs", str(mount)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


EMFILE_SWEEP = """
import json, resource, sys
import sessiontemp
root = sys.argv[1]
sessiontemp.Manager(root, session="chat-42").close()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
seen = []
for limit in range(4, 40):
    for call in ("open", "recover", "remove_session", "remove_artifact"):
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        try:
            if call == "open":
                sessiontemp.Manager(root, session="chat-42").close()
            elif call == "recover":
                sessiontemp.recover(root)
            elif call == "remove_session":
                sessiontemp.remove_session(root, "chat-42")
            else:
                sessiontemp.remove_artifact(root, "0123456789abcdef")
            what = None
        except sessiontemp.SessionTempError as e:
            what = ["SessionTempError", str(e)]
        except BaseException as e:
            what = [type(e).__name__, str(e)]
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        seen.append([limit, call, what])
print(json.dumps(seen))
"""


def test_too_few_descriptors_at_every_step_give_a_session_temp_error_and_leave_the_root_usable(
    root: Path,
) -> None:
    """RLIMIT_NOFILE lowered step by step: Manager(), recover(), remove_session() and
    remove_artifact() each work, or raise the library's error naming the path and the fix."""
    done = zygote.shared("sessiontemp").run(["-c", str(root)], script=EMFILE_SWEEP)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    bare = [(limit, call, what) for limit, call, what in seen
            if what is not None and what[0] != "SessionTempError"]
    assert bare == []
    unnamed = [what for _, _, what in seen if what is not None and str(root) not in what[1]]
    assert unnamed == [], "an error that does not name where it happened"
    assert any(what is not None for _, _, what in seen), "no limit was low enough to fail"
    assert any(what is None for _, _, what in seen), "no limit was high enough to work"
    assert [what for _, _, what in seen][-1] is None
    with Manager(root, session="chat-42") as m:
        m.retain()
        with m.acquire() as lease:
            assert lease.path.is_dir()
    assert recover(root).skipped == ()


# -- a mistyped root ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["no-such-root", "no/such/root"])
def test_recovery_and_removal_of_a_root_that_does_not_exist_create_nothing(
    tmp_path: Path, where: str,
) -> None:
    missing = tmp_path / where
    before = fingerprint(tmp_path)
    for call in (lambda: recover(missing), lambda: remove_session(missing, "chat-42"),
                 lambda: remove_artifact(missing, ARTIFACT)):
        with pytest.raises(NoSuchRoot) as caught:
            call()
        assert isinstance(caught.value, FileNotFoundError)
        assert_explains(caught.value, missing, "does not exist",
                        "only a Manager creates a root, recovery and removal never do")
        assert f"the default root is {default_root()}" in str(caught.value)
    assert fingerprint(tmp_path) == before


@pytest.mark.parametrize("form", ["text", "json"])
def test_sessiontemp_recover_of_a_missing_root_exits_0_saying_so_and_creates_nothing(
    tmp_path: Path, form: str,
) -> None:
    before = fingerprint(tmp_path)
    done = subprocess.run([str(SCRIPT), "recover", "--root", "./no-such-root",
                           *(["--json"] if form == "json" else [])], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done
    said = f"sessiontemp recover: nothing to recover: {tmp_path / 'no-such-root'} does not exist"
    assert done.stderr.startswith(said), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert str(default_root()) in done.stderr
    if form == "json":
        report = json.loads(done.stdout)
        assert report["no_journal"] == done.stderr.split("nothing to recover: ", 1)[1].strip()
        assert (report["ran"], report["removed"], report["skipped"], report["dead"]) == (
            False, [], [], [])
    else:
        assert done.stdout == ""
    assert fingerprint(tmp_path) == before


def plain_directory(place: Path, mode: int) -> Path:
    """A directory of someone's own, never a root: a docs/ tree, a file, *mode* (0755: mkdir)."""
    plain = place / "plain"
    (plain / "docs" / "guide").mkdir(parents=True)
    (plain / "docs" / "guide" / "index.md").write_text("# Guide\n")
    (plain / "notes.txt").write_text("mine\n")
    os.chmod(plain, mode)
    return plain


@pytest.mark.parametrize("mode", [0o755, 0o700], ids=["0755", "0700"])
def test_recovery_and_removal_of_a_directory_that_never_was_a_root_write_nothing_to_it(
    tmp_path: Path, mode: int,
) -> None:
    plain = plain_directory(tmp_path, mode)
    before = fingerprint(plain)
    for call in (lambda: recover(plain), lambda: remove_session(plain, "chat-42"),
                 lambda: remove_artifact(plain, ARTIFACT)):
        with pytest.raises(NoSuchRoot) as caught:
            call()
        assert_explains(caught.value, plain, "holds no sessiontemp journal (journal.sqlite3)",
                        "only a Manager makes a root, recovery and removal never do, and "
                        "nothing was written to it")
    assert fingerprint(plain) == before


@pytest.mark.parametrize("form", ["text", "json"])
def test_sessiontemp_recover_of_a_plain_directory_exits_0_saying_so_and_writes_nothing(
    tmp_path: Path, form: str,
) -> None:
    plain = plain_directory(tmp_path, 0o755)
    before = fingerprint(plain)
    done = subprocess.run([str(SCRIPT), "recover", "--root", str(plain),
                           *(["--json"] if form == "json" else [])],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done
    assert done.stderr.startswith(f"sessiontemp recover: nothing to recover: {plain} holds no "
                                  "sessiontemp journal"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    if form == "json":
        assert "holds no sessiontemp journal" in json.loads(done.stdout)["no_journal"]
    else:
        assert done.stdout == ""
    assert fingerprint(plain) == before


@pytest.mark.parametrize("words", [[s] for s in cli.SUBCOMMANDS if s not in ("explain", "timeline")]
                         + [["fsck", "--repair"], ["usage", "--measure"], ["events", "--follow"],
                            ["explain", "sessiontemp-gen-0123456789abcdef"],
                            ["timeline", "-o", "-"]])
def test_journal_inspect_of_a_plain_directory_writes_nothing_to_it(
    tmp_path: Path, words: list[str],
) -> None:
    plain = plain_directory(tmp_path, 0o755)
    before = fingerprint(plain)
    done = zygote.journal_inspect("--root", plain, *words)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert fingerprint(plain) == before


def test_a_root_whose_journal_was_moved_aside_is_still_recovered(tmp_path: Path) -> None:
    """The way out of a journal that cannot be used: the next recovery starts a fresh one."""
    root = tmp_path / "root"
    Manager(root).close()
    for name in os.listdir(root):
        if name.startswith(JOURNAL):
            os.rename(root / name, tmp_path / name)
    assert recover(root).ran
    assert (root / JOURNAL).is_file()


def test_sessiontemp_run_makes_a_missing_root_and_its_parents_0700_whatever_the_umask(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        ["sh", "-c", f"umask 0; exec {SCRIPT} run --root ./p1/p2/root -- true"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    for made in ("p1", "p1/p2", "p1/p2/root"):
        assert stat.S_IMODE((tmp_path / made).stat().st_mode) == 0o700, made


def test_a_manager_makes_missing_parents_0700_and_leaves_existing_ones_as_they_are(
    tmp_path: Path,
) -> None:
    os.chmod(tmp_path, 0o755)  # noqa: S103 - an existing parent, left as it is
    root = tmp_path / "a" / "b" / "root"
    old = os.umask(0o022)
    try:
        Manager(root).close()
    finally:
        os.umask(old)
    for made in (tmp_path / "a", tmp_path / "a" / "b", root):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755


# -- what the journal does not know: a fresh journal's sweeps -----------------------------------


KILLED_OWNER = """
import os, sys
from sessiontemp import Manager
m = Manager(sys.argv[1], session="chat-42")
m.retain()
m.acquire().release()
print(m.id, flush=True)
os.kill(os.getpid(), 9)
"""


def test_after_a_fresh_journal_only_the_librarys_own_lock_names_are_swept_and_only_once_stale(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    done = zygote.shared("sessiontemp").run(["-c", str(root)], script=KILLED_OWNER)
    assert done.returncode == -9, done.stderr
    lock = root / "managers" / f"{done.stdout.strip()}.lock"
    assert lock.is_file()
    notes = root / "managers" / "notes.txt"
    notes.write_text("not the library's")
    old = time.time() - 30 * 86400
    os.utime(notes, (old, old))
    (tmp_path / "aside").mkdir()
    for name in os.listdir(root):
        if name.startswith(JOURNAL):
            os.rename(root / name, tmp_path / "aside" / name)
    # Unknown to the fresh journal, and fresh: kept.
    recover(root)
    assert lock.is_file()
    # Older than stale_after and free: litter, which goes; what the library never names stays.
    recover(root, stale_after=0)
    assert not lock.exists()
    assert notes.read_text() == "not the library's"
    # The dead owner's directory, unknown now, went the same way; the session's lock stays.
    assert [n for n in os.listdir(root) if n.startswith("sessiontemp-")] == []
    assert (root / "sessions" / "chat-42.lock").is_file()


@as_root
def test_a_full_disk_at_every_step_of_a_new_roots_making_gives_a_session_temp_error(
    tmp_path: Path,
) -> None:
    """Inodes run out at each step in turn (a tmpfs of 40): the library's error naming the
    entry, never a bare OSError; once there is room, the same root works."""
    with small_file_system(tmp_path, "nr_inodes=40") as fs:
        fillers: list[Path] = []
        with contextlib.suppress(OSError):
            while True:
                fillers.append(fs / f"filler-{len(fillers)}")
                fillers[-1].touch()
        root = fs / "root"
        failed: list[SessionTempError] = []
        while True:
            try:
                Manager(root, session="chat-42").close()
                break
            except SessionTempError as e:
                failed.append(e)
            fillers.pop().unlink(missing_ok=True)
        assert [e for e in failed if str(root) not in str(e)] == []
        assert "RootUnusable" in [type(e).__name__ for e in failed]
        for filler in fillers:
            filler.unlink(missing_ok=True)
        assert recover(root).skipped == ()
        with Manager(root, session="chat-42") as m:
            m.retain()
            with m.acquire() as lease:
                assert lease.path.is_dir()
        assert fsck(root).ok


FORKING_RECOVERY = """
import os, sys
from sessiontemp import recover
root, fifo = sys.argv[1:3]
def hook(kind, detail):
    if kind == "journal" and os.environ.get("FORKED") is None:
        os.environ["FORKED"] = "1"
        if os.fork() == 0:
            # A child forked meanwhile keeps a copy of every descriptor: it only waits.
            os.open(fifo, os.O_RDONLY)
            os._exit(0)
recover(root, step_hook=hook)
print("done", flush=True)
"""


def test_a_child_forked_during_a_recovery_pass_never_keeps_the_next_pass_waiting(
    tmp_path: Path,
) -> None:
    """The pass's lock is unlocked, not only closed: the child's copy holds nothing."""
    root = tmp_path / "root"
    killed = zygote.shared("sessiontemp").run(["-c", str(root)], script=KILLED_OWNER)
    assert killed.returncode == -9
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = zygote.shared("sessiontemp").run(["-c", str(root), str(fifo)], script=FORKING_RECOVERY)
    assert done.returncode == 0, done.stderr
    try:
        fd = os.open(root / "recovery.lock", os.O_RDONLY | os.O_NOFOLLOW)
        try:
            # Free at once, while the forked child still lives with its copy.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert recover(root).ran
    finally:
        # Lets the child go (it waits for a writer); none is waiting if it is gone.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
