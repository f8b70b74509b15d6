"""systemd-tmpfiles' age clean against a root: a line on the root itself, or on its parent.

Each test writes a tmpfiles.d line of its own (``d DIR - - - AGE``) naming
the root, or the directory holding it, and runs the real
``systemd-tmpfiles --clean`` on it.  Age 0 ages everything at once; 1s needs
everything to be older than a second, which the test waits for; a manager
that has lived for weeks is stood for by setting every time under the root
weeks back (``os.utime``).

tmpfiles skips a subdirectory it cannot flock, but never probes the
directory its line names, nor any plain file; it skips a regular file with
the sticky bit.  So:

* every plain file the library makes in the root is sticky (the journal,
  its -wal and -shm, ``recovery.lock``, every lock file, every artifact):
  none is ever aged, with or without a live manager;
* a live manager share-locks the root (which a line on the parent probes)
  and each of the root's directories (which a line on the root probes):
  nothing of a live root goes, generations included;
* with no live manager, only the generations no command holds are aged
  (what is in them, then they); the root, its journal, the session's lock
  and the artifacts stay, and the next manager carries on with the journal.

The session's owner is a real process (forked from the zygote), killed with
a real SIGKILL where the test says so; its command is a real process too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import GENERATION_PREFIX, Manager, SessionOwned, recover
from sessiontemp.inspect import fsck, verify
from sessiontemp.journal import Store
from tests import zygote
from tests.commands import exited, wait_until
from tests.conftest import journal_state

TMPFILES = shutil.which("systemd-tmpfiles")
pytestmark = pytest.mark.skipif(TMPFILES is None, reason="systemd-tmpfiles is not installed")

TIMEOUT = 60.0
WEEKS = 21 * 86400.0
SESSION = "chat-42"

OWNER = textwrap.dedent("""
    import json, os, sys, time
    from sessiontemp import Manager
    root, name = sys.argv[1:3]
    manager = Manager(root, session=name)
    manager.retain()
    report = {"pid": os.getpid(), "manager": manager.id}
    with manager.acquire() as lease:
        (lease.path / "report.txt").write_text("all green")
        artifact = lease.keep("report.txt", "report.txt")
    report.update(artifact=str(artifact.path), artifact_id=artifact.id, sha256=artifact.sha256)
    old = manager.acquire(label="old")
    (old.path / "in-use.txt").write_text("used by a command")
    report["retired"] = str(old.path)
    report["command"] = old.popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid
    old.release()
    manager.rotate()
    with manager.acquire(label="current") as lease:
        (lease.path / "notes.txt").write_text("draft")
        report["current"] = str(lease.path)
    print(json.dumps(report), flush=True)
    for line in sys.stdin:
        if line.strip() == "use":
            with manager.acquire() as lease:
                (lease.path / "more.txt").write_text("more")
                print(json.dumps({"used": str(lease.path)}), flush=True)
        elif line.strip() == "close":
            manager.release()
            manager.close()
            print(json.dumps({"closed": True}), flush=True)
""")


class Owner:
    """A real process owning a named session, with an artifact, a command and a current dir."""

    def __init__(self, root: Path) -> None:
        self.process = zygote.shared("sessiontemp").start(
            None, [str(root), SESSION], script=OWNER, stderr=2)
        self.report: dict[str, Any] = self.answer()
        self.pid: int = self.report["pid"]
        self.artifact = Path(self.report["artifact"])
        self.retired = Path(self.report["retired"])
        self.current = Path(self.report["current"])

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the owner died before it answered"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, what: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{what}\n".encode())
        self.process.stdin.flush()
        return self.answer()

    def end(self, how: str) -> None:
        """"close" it (then it exits), or "kill" it with SIGKILL; "live" leaves it running."""
        if how == "close":
            assert self.ask("close") == {"closed": True}
            assert self.process.stdin is not None
            self.process.stdin.close()
            assert self.process.wait(TIMEOUT) == 0
        elif how == "kill":
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(TIMEOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(TIMEOUT)
        stop_command(self.report["command"])


def stop_command(pid: int) -> None:
    """Kill the owner's command (not our child): wait for it to vanish."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_until(lambda: exited(pid), f"command {pid} to exit")


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    started = Owner(tmp_path / "tmp" / "root")
    try:
        yield started
    finally:
        started.stop()


def age_clean(directory: Path, age: str, config_dir: Path, *, wait: bool = True) -> None:
    """Run ``systemd-tmpfiles --clean`` with one line aging everything under *directory*."""
    assert TMPFILES is not None
    config = config_dir / "sessiontemp-test.conf"
    config.write_text(f"d {directory} - - - {age}\n")
    if wait and age.endswith("1s"):
        # Everything must be older than the age, by every timestamp tmpfiles reads.
        time.sleep(1.2)
    done = subprocess.run([TMPFILES, "--clean", str(config)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def snapshot(top: Path) -> dict[str, tuple[str, int, bytes | None]]:
    """Every entry under *top*: its kind, its inode, and a regular file's bytes.

    Not those of a -shm file: any reader of the journal writes to it.
    """
    found: dict[str, tuple[str, int, bytes | None]] = {}
    for here, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(here, name)
            st = os.lstat(path)
            kind = "dir" if path.is_dir() and not path.is_symlink() else "file"
            found[str(path.relative_to(top))] = (kind, st.st_ino, path.read_bytes() if (
                kind == "file" and not name.endswith("-shm")) else None)
    return found


def plain_files(top: Path) -> dict[str, tuple[str, int, bytes | None]]:
    """The root's own plain files (everything but the generations), as :func:`snapshot`."""
    return {name: entry for name, entry in snapshot(top).items()
            if entry[0] == "file" and not name.startswith("sessiontemp-")}


def events(root: Path) -> int:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return store.last_seq()
    finally:
        store.close()


def make_old(top: Path, by: float) -> None:
    """Set the access and modification times of *top* and all under it *by* seconds back."""
    then = time.time() - by
    # Listed first, set after: listing a directory refreshes its access time.
    paths = [Path(here, name) for here, dirs, files in os.walk(top) for name in dirs + files]
    for path in [*paths, top]:
        os.utime(path, (then, then), follow_symlinks=False)


def assert_sound(root: Path) -> None:
    """The journal verifies and replays, and the root agrees with it."""
    assert verify(root / "journal.sqlite3").ok
    report = fsck(root)
    assert report.findings == (), report.findings


# -- a live manager -----------------------------------------------------------------------


@pytest.mark.parametrize("age", ["0", "1s"])
@pytest.mark.parametrize("where", ["root", "parent"])
def test_a_clean_takes_nothing_of_a_live_named_session_and_a_second_owner_is_still_refused(
    tmp_path: Path, owner: Owner, where: str, age: str,
) -> None:
    root = owner.artifact.parent.parent
    before = snapshot(root)
    count = events(root)
    age_clean(root if where == "root" else root.parent, age, tmp_path)
    assert snapshot(root) == before, "the clean removed part of a live root"
    assert events(root) == count
    with pytest.raises(SessionOwned) as refused:
        Manager(root, session=SESSION)
    assert refused.value.pid == owner.pid
    # The owner goes on as before, in the same directory.
    assert owner.ask("use") == {"used": str(owner.current)}
    owner.end("close")
    assert owner.artifact.read_text() == "all green"
    assert_sound(root)


def test_a_live_roots_directories_are_skipped_whole_even_for_files_made_without_the_bit(
    tmp_path: Path, owner: Owner,
) -> None:
    """The second guard: files an earlier version made (not sticky) in a directory a live
    root share-locks are skipped with it."""
    root = owner.artifact.parent.parent
    unmarked = [root / "managers" / f"{owner.report['manager']}.lock",
                root / "sessions" / f"{SESSION}.lock", owner.artifact]
    for path in unmarked:
        path.chmod(0o600)
    before = snapshot(root)
    age_clean(root, "0", tmp_path)
    assert snapshot(root) == before, "the clean went into a directory a live root holds"
    with pytest.raises(SessionOwned):
        Manager(root, session=SESSION)
    owner.end("close")
    assert owner.artifact.read_text() == "all green"


@pytest.mark.parametrize("age", ["10d", "amAM:10d"])
@pytest.mark.parametrize("where", ["root", "parent"])
def test_a_manager_live_for_weeks_keeps_everything_against_a_ten_day_clean(
    tmp_path: Path, owner: Owner, where: str, age: str,
) -> None:
    """Nothing of a live root relies on a time: its lock files may be weeks old.

    ``amAM:10d`` ages by the access and modification times alone, the ones
    the test can set weeks back: a manager weeks old as far as tmpfiles
    can tell.
    """
    root = owner.artifact.parent.parent
    before = snapshot(root)
    make_old(root, WEEKS)
    age_clean(root if where == "root" else root.parent, age, tmp_path)
    assert snapshot(root) == before, "the clean removed part of a root live for weeks"
    with pytest.raises(SessionOwned):
        Manager(root, session=SESSION)
    assert owner.ask("use") == {"used": str(owner.current)}
    owner.end("close")
    assert_sound(root)


# -- no live manager ----------------------------------------------------------------------


@pytest.mark.parametrize("age", ["0", "1s", "amAM:10d"])
@pytest.mark.parametrize("where", ["root", "parent"])
@pytest.mark.parametrize("how", ["close", "kill"])
def test_with_no_live_manager_a_clean_takes_only_the_directories_no_command_holds(
    tmp_path: Path, owner: Owner, where: str, age: str, how: str,
) -> None:
    root = owner.artifact.parent.parent
    owner.end(how)
    # What a killed owner left in the -wal is committed: it must survive.
    assert (root / "journal.sqlite3-wal").exists() == (how == "kill")
    count = events(root)
    files = plain_files(root)
    held = snapshot(owner.retired)
    if age.endswith("10d"):
        # Last: listing a directory makes it look used.
        make_old(root, WEEKS)
    age_clean(root if where == "root" else root.parent, age, tmp_path)
    assert plain_files(root) == files, "the clean removed a file of the root's own"
    assert events(root) == count
    # The running command's directory is held; the dead owner's current one is not.
    assert snapshot(owner.retired) == held
    assert not owner.current.exists()
    with Manager(root, session=SESSION) as fresh:
        # Its directory was aged away: nothing to resume, and nothing lost of the journal.
        assert not fresh.resumed
        assert owner.report["artifact_id"] in journal_state(root).artifacts
        with pytest.raises(SessionOwned):
            Manager(root, session=SESSION)
        fresh.retain()
        with fresh.acquire() as lease:
            assert lease.popen(["true"]).wait() == 0
    recover(root)
    assert owner.artifact.read_text() == "all green"
    stop_command(owner.report["command"])
    # A removal names the generation, the leased directory's parent.
    assert [r.path for r in recover(root).removed] == [owner.retired.parent]
    assert_sound(root)


def test_a_root_no_manager_ever_held_long_keeps_its_journal_and_is_used_again(
    tmp_path: Path,
) -> None:
    """A clean of the parent with nothing held: the root stays, around its sticky files."""
    cleaned = tmp_path / "tmp"
    root = cleaned / "root"
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire():
            pass
    count = events(root)
    age_clean(cleaned, "0", tmp_path)
    assert (root / "journal.sqlite3").is_file()
    assert events(root) == count
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire() as lease:
            assert lease.path.is_dir()
    assert oct(root.stat().st_mode & 0o777) == oct(0o700)
    assert_sound(root)


# -- a leased directory, whatever line names it ---------------------------------------------

LESSEE = textwrap.dedent("""
    import json, os, signal, sys
    from sessiontemp import Manager
    manager = Manager(sys.argv[1])
    manager.retain()
    lease = manager.acquire(label="work")
    (lease.path / "a.txt").write_text("a")
    (lease.path / "nested").mkdir()
    (lease.path / "nested" / "b.txt").write_text("b")
    (lease.path / "empty").mkdir()
    command = lease.popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(json.dumps({"pid": os.getpid(), "path": str(lease.path), "generation": lease.generation,
                      "command": command.pid}), flush=True)
    for line in sys.stdin:
        if line.strip() == "finish":
            # The command exits, the lease is given back, the generation is retired.
            command.send_signal(signal.SIGKILL)
            command.wait()
            lease.release()
            manager.rotate()
            print(json.dumps({"finished": True}), flush=True)
""")

# Each line an administrator may write over a root, at each level, as tmpfiles.d(5)
# spells it: GEN stands for a generation's directory, ROOT for the root.  A glob
# (``e``, ``X``) matches every generation; ``d``, ``D`` and ``x`` name one path.
LINES = {
    "d-parent": "d PARENT",
    "d-root": "d ROOT",
    "e-root": "e ROOT",
    "e-generation": "e GEN",
    "d-generation": "d GEN",
    "D-generation": "D GEN",
    "x-generation": "x GEN",
    "e-glob": "e ROOT/*",
    "X-glob": "X ROOT/*",
}


class Lessee:
    """A real process holding a lease, with a real command running under it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process = zygote.shared("sessiontemp").start(None, [str(root)], script=LESSEE,
                                                          stderr=2)
        self.report: dict[str, Any] = self.answer()
        self.path = Path(self.report["path"])
        self.command: int = self.report["command"]
        # The generation's own directory, by its name in the root.
        self.generation = root / (GENERATION_PREFIX + self.report["generation"])

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the lessee died before it answered"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def finish(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"finish\n")
        self.process.stdin.flush()
        assert self.answer() == {"finished": True}

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(TIMEOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(TIMEOUT)
        stop_command(self.command)


@pytest.fixture
def lessee(tmp_path: Path) -> Iterator[Lessee]:
    started = Lessee(tmp_path / "tmp" / "root")
    try:
        yield started
    finally:
        started.stop()


def clean_line(line: str, lessee: Lessee, age: str, config_dir: Path) -> None:
    """Run ``systemd-tmpfiles --clean`` on *line* (a :data:`LINES` value) with *age*."""
    assert TMPFILES is not None
    kind, where = line.split()
    where = (where.replace("PARENT", str(lessee.root.parent))
             .replace("ROOT", str(lessee.root)).replace("GEN", str(lessee.generation)))
    config = config_dir / "sessiontemp-test.conf"
    config.write_text(f"{kind} {where} - - - {age}\n")
    if age == "1s":
        # Everything older than the age by every time tmpfiles reads, the change and
        # birth times included, which no utime can set back.
        time.sleep(1.2)
    done = subprocess.run([TMPFILES, "--clean", str(config)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("age", ["0", "1s"])
@pytest.mark.parametrize("line", list(LINES.values()), ids=list(LINES))
@pytest.mark.parametrize("manager", ["live", "killed"])
def test_no_age_clean_takes_a_file_of_a_leased_directory_whatever_line_names_it(
    tmp_path: Path, lessee: Lessee, line: str, age: str, manager: str,
) -> None:
    if manager == "killed":
        lessee.kill()
    held = snapshot(lessee.path)
    make_old(lessee.path, WEEKS)
    clean_line(line, lessee, age, tmp_path)
    assert snapshot(lessee.path) == held, "the clean removed part of a leased directory"
    assert (lessee.path / "nested" / "b.txt").read_text() == "b"
    # Once its command has exited and its lease is gone, it goes.
    if manager == "live":
        lessee.finish()
    else:
        stop_command(lessee.command)
        recover(lessee.root)
    assert not lessee.generation.exists()
    assert not lessee.path.exists()
    assert_sound(lessee.root)


@pytest.mark.parametrize("line", ["e GEN", "e ROOT/*"])
def test_an_age_clean_takes_the_old_files_of_a_directory_no_process_holds_any_more(
    tmp_path: Path, lessee: Lessee, line: str,
) -> None:
    """The other side: the same line reaches a directory whose manager and command are gone."""
    lessee.kill()
    stop_command(lessee.command)
    make_old(lessee.path, WEEKS)
    clean_line(line, lessee, "0", tmp_path)
    assert not (lessee.path / "a.txt").exists()
    assert not (lessee.path / "nested").exists()
    recover(lessee.root)
    assert not lessee.generation.exists()
    assert_sound(lessee.root)
