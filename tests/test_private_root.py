"""Nothing under a root is another user's to read: every file 0600, every directory 0700.

The journal holds every lease's label (a command line, with whatever
secret it carries): a root another user can enter is refused, and what
the library makes in a root is private whatever the umask, the journal's
files included, which SQLite makes (a new database 0644 less the umask,
its -wal and -shm with the database's mode).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sessiontemp import Manager, UnsafeRoot, recover
from sessiontemp._kernel.root import GENERATION_PREFIX, TRASH_PREFIX
from tests.nobody import as_root, run_as_nobody
from tests.test_root import SCRIPT, assert_explains, fingerprint

SECRET = "SECRET123"  # noqa: S105 - what a command line may carry, to be kept private

# A busy root, as a process leaves it while it runs: a named session's
# manager with a budget, a lease held by a command line with a secret, a file
# kept as an artifact, a measurement journaled, and history rolled over and
# retired by other managers' recovery passes (Retention(0, 0, 0)).
BUSY = f"""
import os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
from sessiontemp import Manager, Retention
from sessiontemp.inspect import summary
root = Path(sys.argv[1])
NONE = Retention(segment_bytes=0, history_bytes=0, history_age=0)
m = Manager(root, retention=NONE, session="chat-1", max_bytes=1 << 30)
m.retain()
lease = m.acquire(label="curl --token={SECRET} https://example.org")
(lease.path / "out.txt").write_text("{SECRET}")
lease.keep(lease.path / "out.txt", "result")
m.measure()
for _ in range(2):
    for _ in range(60):
        m.acquire(label="churn --token={SECRET}").release()
    Manager(root, retention=NONE).close()
print(summary(root / "journal.sqlite3", root).history.retired_until, flush=True)
sys.stdin.read()
lease.release()
m.close()
"""

READ_ALL = """
import json, os
found = []
for path, directory in json.loads({paths!r}):
    try:
        if directory:
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(1)
    except PermissionError:
        continue
    found.append(path)
print(json.dumps(found))
"""


@pytest.fixture
def open_place() -> Iterator[Path]:
    """A directory of ours that every user may enter (as /tmp is), to hold a root."""
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-open-"))
    os.chmod(place, 0o755)  # noqa: S103 - another user must reach the root's door
    try:
        yield place
    finally:
        shutil.rmtree(place)


def library_entries(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under *root* the library made (a generation's contents are its command's)."""
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(directory) / name
            yield path, os.lstat(path)
        if Path(directory) != root:
            continue
        dirs[:] = [d for d in dirs if not d.startswith((GENERATION_PREFIX, TRASH_PREFIX))]


def assert_private(root: Path) -> None:
    modes = {str(path): stat.S_IMODE(st.st_mode) for path, st in library_entries(root)}
    wrong = {path: f"{mode:04o}" for path, mode in modes.items()
             if mode not in ((0o700,) if Path(path).is_dir() else (0o600, 0o1600))}
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert wrong == {}


@as_root
@pytest.mark.parametrize("umask", [0o000, 0o022], ids=["umask-0", "umask-022"])
def test_nothing_under_a_busy_root_is_readable_by_another_user_whatever_the_umask(
    open_place: Path, umask: int,
) -> None:
    root = open_place / "root"
    busy = subprocess.Popen([sys.executable, "-c", BUSY, str(root), f"{umask:o}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None
        assert busy.stdin is not None
        retired = busy.stdout.readline()
        assert int(retired) > 0, "history was retired"
        segments = os.listdir(root / "journal.sqlite3.d")
        assert any(n.endswith(".sqlite3") for n in segments), segments
        assert any(n.endswith("-shm") for n in os.listdir(root)), "the journal is open"
        assert_private(root)
        everything = [(str(root), True)] + [
            (str(path), stat.S_ISDIR(st.st_mode))
            for path, st in ((p, os.lstat(p)) for p in root.rglob("*"))]
        assert len(everything) > 15
        done = run_as_nobody(READ_ALL.format(paths=json.dumps(everything)), cwd=open_place)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == []
        busy.stdin.close()
        assert busy.wait(timeout=120) == 0
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.wait()
    assert_private(root)


@pytest.mark.parametrize("used", [False, True], ids=["made-with-mkdir", "used-then-opened"])
@pytest.mark.parametrize("mode", [0o755, 0o750, 0o711, 0o705, 0o701, 0o740, 0o710],
                         ids=lambda m: f"{m:04o}")
def test_a_root_others_can_read_or_enter_is_refused_and_left_as_it_was(
    tmp_path: Path, mode: int, used: bool,
) -> None:
    root = tmp_path / "root"
    if used:
        Manager(root).close()
    else:
        root.mkdir()
    os.chmod(root, mode)
    before = fingerprint(root)
    # An empty directory is no root to recover: only a manager is refused there.
    calls: list[Callable[[], object]] = [lambda: Manager(root)]
    if used:
        calls.append(lambda: recover(root))
    for call in calls:
        with pytest.raises(UnsafeRoot) as caught:
            call()
        assert_explains(caught.value, root, f"is readable or searchable by group or others "
                        f"(mode {mode:04o})", f"Run `chmod 700 {root}`")
    assert fingerprint(root) == before


def test_sessiontemp_run_refuses_a_root_made_with_mkdir_p_naming_the_chmod(
    tmp_path: Path,
) -> None:
    root = tmp_path / "made" / "root"
    subprocess.run(["sh", "-c", f"umask 022; mkdir -p {root}"], check=True)
    before = fingerprint(root)
    done = subprocess.run([str(SCRIPT), "run", "--root", str(root), "--", "true"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done
    assert f"{root} is readable or searchable by group or others (mode 0755)" in done.stderr
    assert f"chmod 700 {root}" in done.stderr
    assert fingerprint(root) == before


def test_a_journal_an_earlier_version_left_readable_is_made_private_by_the_next_open(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    with Manager(root) as manager:
        manager.retain()
        manager.acquire(label=f"--token={SECRET}").release()
    journal = root / "journal.sqlite3"
    os.chmod(journal, 0o1644)
    with Manager(root) as manager:
        assert stat.S_IMODE(journal.stat().st_mode) == 0o1600
        assert_private(root)
    assert_private(root)
