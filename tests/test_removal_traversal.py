"""Removal's walk: it makes its own way through its owner's modes, and never leaves its file system.

Two families, each with real processes and real files:

- Modes.  A command leaves read-only directories (``chmod 555``, what the Go
  module cache and many tarballs leave), ``chmod 0`` ones, unreadable files,
  the generation directory itself closed: as a non-root user (a child
  process run as uid 65534 on a root it owns, since permission bits do not
  stop root), each is removed by a rotate, a close and a recovery, and
  nothing outside the generation changes mode.  A subtree of a third user
  that uid 65534 cannot remove is reported once, with its path and the fix;
  everything else goes, the generation stays journaled as due, and the
  first pass after the fix finishes it.
- Mounts.  A tmpfs, a bind mount of a real directory elsewhere, a file
  bind-mounted over a file, a mount on the generation directory itself or
  on a stray trash name: removal stops at the mount point, touches nothing
  under it, reports it with the fix (unmount it), keeps the generation due,
  and finishes once it is unmounted.

The tests that need root (a second user, mount, chattr) are skipped without it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sessiontemp import Manager, recover
from sessiontemp._kernel import nodes, processes
from sessiontemp._kernel.root import GENERATION_PREFIX, TRASH_PREFIX
from sessiontemp.inspect import state_at
from sessiontemp.journal.segments import Retention
from tests.conftest import journal_state
from tests.nobody import NOBODY, as_root
from tests.test_hostile import generations_on_disk, outcomes
from tests.test_root import fingerprint

REPO = Path(__file__).parent.parent
# A third user, neither root nor the manager's: the owner of what it may not remove.
STRANGER = 4242


# -- a manager run as uid 65534, step by step -----------------------------------------------


class Child:
    """A ``tests.removalchild`` process: one JSON command a line, one JSON answer each."""

    def __init__(self, root: Path, uid: int | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.removalchild", str(root),
             *([] if uid is None else ["--uid", str(uid)])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO,
        )
        self.read()

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=30)
            assert self.process.stderr is not None
            raise AssertionError(f"the child ended: {self.process.stderr.read()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise AssertionError(answer["traceback"])
        return answer

    def __call__(self, do: str, **arguments: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"do": do, **arguments}) + "\n")
        self.process.stdin.flush()
        return self.read()

    def crash(self) -> None:
        """End the child at once, its manager and leases open: a recovery finds it dead."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"do": "crash"}) + "\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=30) == 0

    def end(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0


@pytest.fixture
def children() -> Iterator[Callable[..., Child]]:
    """Start removal children; any still running at teardown is ended."""
    started: list[Child] = []

    def start(root: Path, uid: int | None = NOBODY) -> Child:
        child = Child(root, uid)
        started.append(child)
        return child

    yield start
    for child in started:
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait(timeout=30)


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory that uid 65534 can reach, holding its root and its ``outside``.

    ``root`` and ``outside`` are nobody's: a walk that followed a symlink
    there could change their modes, which a root-owned directory would hide.
    """
    top = Path(tempfile.mkdtemp(prefix="sessiontemp-traversal-"))
    os.chmod(top, 0o755)  # noqa: S103 - uid 65534 must reach the root inside it
    try:
        yield top
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(top)], check=True)


def nobodys(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(mode=mode)
    os.chown(path, NOBODY, NOBODY)
    return path


def make_outside(place: Path) -> Path:
    """Nobody's own directories and a file outside its root: what its walk may never chmod."""
    outside = nobodys(place / "outside", 0o755)
    nobodys(outside / "dir", 0o500)
    (outside / "file").write_text("outside\n")
    os.chown(outside / "file", NOBODY, NOBODY)
    os.chmod(outside / "file", 0o444)
    os.chmod(outside, 0o555)  # noqa: S103 - nobody's own, read-only
    linked = nobodys(place / "linked", 0o755)
    (linked / "file").write_text("hard-linked\n")
    os.chown(linked / "file", NOBODY, NOBODY)
    os.chmod(linked / "file", 0o444)
    return outside


def chain(names: list[str], modes: list[int]) -> list[list[Any]]:
    """Directories nested in the order of *names*, a file in each, then each given its
    mode from the deepest up (a read-only parent would refuse the next mkdir)."""
    ops: list[list[Any]] = []
    path = ""
    paths = []
    for name in names:
        path = f"{path}/{name}" if path else name
        paths.append(path)
        ops += [["mkdir", path, 0o700], ["file", f"{path}/in-{name}", 0o644]]
    return ops + [["chmod", p, m] for p, m in reversed(list(zip(paths, modes, strict=True)))]


# Each tree, as a command leaves it in its TMPDIR; a link out of it is added to each.
TREES: dict[str, list[list[Any]]] = {
    "a 0555 directory holding files (a Go module cache)": [
        ["mkdir", "pkg@v1", 0o755], ["file", "pkg@v1/go.mod", 0o444],
        ["mkdir", "pkg@v1/sub", 0o755], ["file", "pkg@v1/sub/a.go", 0o444],
        ["chmod", "pkg@v1/sub", 0o555], ["chmod", "pkg@v1", 0o555],
    ],
    "a 0000 directory holding a 0000 directory": [
        ["mkdir", "d", 0o700], ["file", "d/f", 0o600], ["mkdir", "d/e", 0o700],
        ["file", "d/e/g", 0o600], ["chmod", "d/e", 0], ["chmod", "d", 0],
    ],
    "0444 and 0000 files": [
        ["file", "read-only", 0o444], ["file", "no-access", 0], ["mkdir", "d", 0o755],
        ["file", "d/no-access", 0], ["file", "d/read-only", 0o444], ["chmod", "d", 0o555],
    ],
    "a 0555 directory eight levels deep": chain(
        [f"level{i}" for i in range(8)], [0o755] * 7 + [0o555]),
    "a mode its owner must change at every level, TMPDIR itself too": [
        *chain(["r-x", "r-x-owner", "wx", "x", "r", "none", "sticky"],
               [0o555, 0o500, 0o300, 0o100, 0o400, 0o000, 0o1555]),
        ["chmod", ".", 0o500],
    ],
    "TMPDIR itself chmod 0": [
        ["file", "f", 0o644], ["mkdir", "d", 0o555], ["chmod", ".", 0],
    ],
}


def with_links(ops: list[list[Any]], outside: Path, linked: Path) -> list[list[Any]]:
    """*ops* with a symlink to *outside* and a hard link to *linked* put in first."""
    return [["symlink", "to-outside", str(outside)], ["symlink", "to-dir", str(outside / "dir")],
            ["link", "hard", str(linked)], *ops]


@as_root
@pytest.mark.parametrize("tree", list(TREES))
def test_a_tree_its_owner_made_read_only_is_removed_by_rotate_close_and_recovery(
    place: Path, children: Callable[..., Child], tree: str
) -> None:
    root = nobodys(place / "root")
    outside = make_outside(place)
    linked = place / "linked" / "file"
    before = fingerprint(outside)
    ops = with_links(TREES[tree], outside, linked)
    child = children(root)
    child("open")
    gone = []
    for remover in ("rotate", "close"):
        lease = child("acquire")
        child("tree", lease=lease["lease"], ops=ops)
        child("release", lease=lease["lease"])
        child(remover)
        assert generations_on_disk(root) == [], remover
        gone.append(lease["generation"])
    assert child("logs")["logs"] == []
    child.end()
    # A manager that dies with the tree in place: recovery removes it.
    dying = children(root)
    dying("open")
    lease = dying("acquire")
    dying("tree", lease=lease["lease"], ops=ops)
    dying.crash()
    report = children(root)("recover")
    assert [r[1] for r in report["removed"]] == [lease["generation"]]
    assert report["skipped"] == []
    assert generations_on_disk(root) == []
    assert {g: outcomes(root)[g] for g in [*gone, lease["generation"]]} == dict.fromkeys(
        [*gone, lease["generation"]], "removed")
    # Nothing outside changed mode, or anything else; the hard link's file
    # lost only the links.
    assert fingerprint(outside) == before
    assert linked.read_text() == "hard-linked\n"
    assert stat.S_IMODE(linked.stat().st_mode) == 0o444
    assert linked.stat().st_nlink == 1


def plant_strangers(inside: Path) -> list[Path]:
    """Two subtrees of another user in *inside*: one uid 65534 may read, one it may not."""
    readable = inside / "theirs"
    (readable / "sub").mkdir(parents=True)
    (readable / "file").write_text("theirs\n")
    (readable / "sub" / "file").write_text("theirs too\n")
    closed = inside / "closed"
    closed.mkdir()
    (closed / "file").write_text("closed\n")
    for path in (readable, readable / "sub", readable / "file", readable / "sub" / "file",
                 closed, closed / "file"):
        os.chown(path, STRANGER, STRANGER)
    for path in (readable, readable / "sub"):
        os.chmod(path, 0o755)  # noqa: S103 - readable by uid 65534, not writable
    os.chmod(closed, 0o700)
    return [readable, closed]


@as_root
def test_another_users_subtree_is_reported_once_the_rest_removed_and_finished_once_fixed(
    place: Path, children: Callable[..., Child]
) -> None:
    root = nobodys(place / "root")
    child = children(root)
    child("open")
    lease = child("acquire")
    gid = lease["generation"]
    child("tree", lease=lease["lease"], ops=[
        ["mkdir", "mine", 0o755], ["file", "mine/f", 0o644], *TREES["0444 and 0000 files"],
        *TREES["a 0555 directory holding files (a Go module cache)"],
    ])
    strangers = plant_strangers(Path(lease["path"]))
    prints = {p.name: fingerprint(p) for p in strangers}
    child("release", lease=lease["lease"])
    child("rotate")

    trash = root / (TRASH_PREFIX + gid) / "tmp"
    stays = [trash / p.name for p in strangers]
    # All of its own is gone; the strangers' subtrees are untouched, mode and owner too.
    assert sorted(os.listdir(trash)) == sorted(p.name for p in strangers)
    assert {p.name: fingerprint(p) for p in stays} == prints
    warned = child("logs")["logs"]
    assert sorted(e["path"] for e in warned) == sorted(map(str, stays))
    for event in warned:
        assert event["event"] == "generation.blocked"
        assert f"owned by uid {STRANGER}" in event["reason"]
        assert f"rm -rf --one-file-system {event['path']}" in event["fix"]
        assert f"chown -R {NOBODY} {event['path']}" in event["fix"]
    assert journal_state(root).generations[gid].removal == "started"
    child("close")
    assert child("logs")["logs"] == [], "each obstacle is warned of once"
    child.end()

    # Another manager's leftovers in the same pass are removed all the same.
    dying = children(root)
    dying("open")
    other = dying("acquire")["generation"]
    dying.crash()
    report = children(root)("recover")
    assert [r[1] for r in report["removed"]] == [other]
    assert sorted(path for path, _ in report["skipped"]) == sorted(map(str, stays))
    for _, reason in report["skipped"]:
        assert f"owned by uid {STRANGER}" in reason
        assert "rm -rf --one-file-system" in reason
    assert journal_state(root).generations[gid].removal == "started"
    assert {p.name: fingerprint(p) for p in stays} == prints

    # The fixes the report names: one subtree given to uid 65534, one removed by its owner.
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(stays[0])], check=True)
    subprocess.run(["rm", "-rf", "--one-file-system", str(stays[1])], check=True)
    report = children(root)("recover")
    assert [r[1] for r in report["removed"]] == [gid]
    assert report["skipped"] == []
    assert generations_on_disk(root) == []
    assert outcomes(root)[gid] == "removed"


@as_root
def test_a_tmpdir_made_unreadable_by_a_command_that_still_runs_keeps_its_mode_and_is_left(
    place: Path, children: Callable[..., Child]
) -> None:
    # Recovery must open it to try its lock, and gives its owner's read bit
    # for that: the lock says the command still holds it, so the mode the
    # command chose is put back and nothing else is touched.
    root = nobodys(place / "root")
    child = children(root)
    child("open")
    lease = child("acquire")
    child("tree", lease=lease["lease"], ops=[["file", "f", 0o644], ["chmod", ".", 0]])
    holder = child("hold", lease=lease["lease"])["pid"]
    child.crash()
    path = Path(lease["path"])
    before = fingerprint(path)
    try:
        report = children(root)("recover")
        # Reports name the generation, the leased directory's parent.
        assert [p for p, _ in report["skipped"]] == [str(path.parent)]
        assert "still in use" in report["skipped"][0][1]
        # Its mode is the command's again (its change time tells of the
        # moment it was not), and what it holds is untouched.
        assert stat.S_IMODE(path.stat().st_mode) == 0
        after = fingerprint(path)
        assert after.pop(".")[:7] == before.pop(".")[:7]
        assert after == before
    finally:
        os.kill(holder, signal.SIGKILL)
        # Its parent is gone: it may stay a zombie, which holds no lock.
        while processes.start_time(holder) is not None:
            time.sleep(0.01)
    report = children(root)("recover")
    assert [r[1] for r in report["removed"]] == [lease["generation"]]
    assert generations_on_disk(root) == []


@as_root
def test_a_tmpdir_made_unreadable_and_immutable_is_reported_and_removed_once_cleared(
    place: Path, children: Callable[..., Child]
) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    root = nobodys(place / "root")
    child = children(root)
    child("open")
    lease = child("acquire")
    child("tree", lease=lease["lease"], ops=[["file", "f", 0o644], ["chmod", ".", 0]])
    child.crash()
    # The generation itself (the leased directory's parent) made unreadable
    # and immutable as well: its remover can neither open nor rename it.
    path = Path(lease["path"]).parent
    path.chmod(0)
    chattr("+i", path)
    try:
        report = children(root)("recover")
        assert [p for p, _ in report["skipped"]] == [str(path)]
        assert f"chattr -i -a {path}" in report["skipped"][0][1]
        assert stat.S_IMODE(path.stat().st_mode) == 0
    finally:
        chattr("-i", path)
    report = children(root)("recover")
    assert [r[1] for r in report["removed"]] == [lease["generation"]]
    assert generations_on_disk(root) == []


@as_root
def test_a_removal_failing_half_way_through_a_read_only_tree_is_finished_by_the_next_pass(
    place: Path, children: Callable[..., Child]
) -> None:
    root = nobodys(place / "root")
    child = children(root)
    child("open")
    lease = child("acquire")
    child("tree", lease=lease["lease"],
          ops=TREES["a mode its owner must change at every level, TMPDIR itself too"])
    child("release", lease=lease["lease"])
    child("fail", nth=4)
    child("rotate")
    assert [e["event"] for e in child("logs")["logs"]] == ["generation.removal_failed"]
    assert generations_on_disk(root) == [TRASH_PREFIX + lease["generation"]]
    child("close")
    assert generations_on_disk(root) == []
    assert outcomes(root)[lease["generation"]] == "removed"


@as_root
def test_a_thousand_read_only_levels_are_removed_with_64_descriptors(
    place: Path, children: Callable[..., Child]
) -> None:
    root = nobodys(place / "root")
    child = children(root)
    child("open")
    lease = child("acquire")
    # Every level 0555, every tenth 0000: the walk opens each one more
    # time (as a path, to change its mode), and must still let them go.
    # Made as root, which modes do not stop, and given to uid 65534.
    fd = os.open(lease["path"], os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(1000):
            os.mkdir("d", dir_fd=fd)
            child_fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child_fd
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o444, dir_fd=fd))
            os.chown("f", NOBODY, NOBODY, dir_fd=fd)
            os.fchown(fd, NOBODY, NOBODY)
            os.fchmod(fd, 0 if i % 10 == 9 else 0o555)
    finally:
        os.close(fd)
    child("release", lease=lease["lease"])
    child.end()
    script = f"""
        import os, resource, sqlite_utils.plugins
        sqlite_utils.plugins.ensure_plugins_loaded()
        from sessiontemp import Manager
        os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        with Manager({str(root)!r}) as m:
            print(m.recovery)
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert generations_on_disk(root) == []
    assert outcomes(root)[lease["generation"]] == "removed"


# -- as root: entries only the kernel stops ------------------------------------------------------


def chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@as_root
@pytest.mark.parametrize(("flag", "pinned"), [
    ("+i", "d/b"), ("+i", "d"), ("+a", "d"),
], ids=["an immutable file", "an immutable directory", "an append-only directory"])
def test_what_a_flag_keeps_stays_reported_once_the_rest_goes_and_it_ends_once_cleared(
    root: Path, flag: str, pinned: str
) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    manager = Manager(root)
    manager.retain()
    lease = manager.acquire()
    gid = lease.generation
    (lease.path / "d").mkdir()
    for name in ("a", "b", "c"):
        (lease.path / "d" / name).write_text(name)
    (lease.path / "other").write_text("x")
    chattr(flag, lease.path / pinned)
    trash = root / (TRASH_PREFIX + gid) / "tmp"
    try:
        lease.release()
        with capture_logs() as logs:
            manager.rotate()
            manager.close()
        assert os.listdir(trash) == ["d"]
        assert sorted(os.listdir(trash / "d")) == (["b"] if pinned == "d/b" else ["a", "b", "c"])
        [warned] = blocked_events(logs)
        assert warned["path"] == str(trash / pinned)
        assert "Operation not permitted" in warned["reason"]
        assert f"chattr -i -a {trash / pinned}" in warned["fix"]
        report = recover(root)
        assert [(s.path, "chattr -i" in s.reason) for s in report.skipped] == [
            (trash / pinned, True)]
    finally:
        chattr(flag.replace("+", "-"), trash / pinned)
    report = recover(root)
    assert [r.generation for r in report.removed] == [gid]
    assert generations_on_disk(root) == []
    assert outcomes(root)[gid] == "removed"


@as_root
def test_entries_removed_by_someone_else_during_the_walk_are_simply_gone(
    open_manager: Callable[..., Manager], root: Path
) -> None:
    # An age cleaner, or a person, deleting what the walk was about to.
    armed = taken = False

    def hook(kind: str, detail: str) -> None:
        nonlocal taken
        if armed and kind == "unlink" and not taken:
            taken = True
            for name in os.listdir(trash / "sub"):
                shutil.rmtree(trash / "sub" / name)

    manager = open_manager(step_hook=hook)
    manager.retain()
    lease = manager.acquire()
    for name in ("a", "b", "c", "d"):
        (lease.path / "sub" / name).mkdir(parents=True)
        (lease.path / "sub" / name / "f").write_text(name)
    trash = root / (TRASH_PREFIX + lease.generation) / "tmp"
    lease.release()
    armed = True
    manager.rotate()
    assert taken
    assert generations_on_disk(root) == []
    assert outcomes(root)[lease.generation] == "removed"


# -- mounts -------------------------------------------------------------------------------


def mount_points() -> dict[int, str]:
    """Every mount of this process's namespace: its mount id, and where it is now."""
    points = {}
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            # Octal escapes (a space is \040) undone for the path.
            points[int(fields[0])] = fields[4].encode().decode("unicode_escape")
    return points


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount a tmpfs (or bind-mount *source*) at a path; unmount what is left at the end.

    Each is found again by its mount id: a removal renames the generation a
    mount lies in, and the mount moves with it.
    """
    if os.getuid() != 0:
        pytest.skip("needs root to mount")
    mounted: list[int] = []

    def mount_at(target: Path, source: Path | None = None) -> Path:
        command = (["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)]
                   if source is None else ["mount", "--bind", str(source), str(target)])
        subprocess.run(command, check=True, capture_output=True)
        fd = os.open(target, os.O_PATH)
        try:
            mount_id = nodes.of(fd).mount
        finally:
            os.close(fd)
        assert mount_id is not None
        mounted.append(mount_id)
        return target

    yield mount_at
    points = mount_points()
    for mount_id in reversed(mounted):
        # Only where it still lies under this test's directory: a mount
        # unmounted by the test frees its id for another process's mount (a
        # parallel test's), which must not be taken for it.
        if mount_id in points and Path(points[mount_id]).is_relative_to(tmp_path):
            subprocess.run(["umount", "-l", points[mount_id]], check=False, capture_output=True)


def umount(target: Path) -> None:
    subprocess.run(["umount", str(target)], check=True, capture_output=True)


def fill(top: Path) -> None:
    (top / "on-the-mount.txt").write_text("must survive\n")
    (top / "dir").mkdir()
    (top / "dir" / "nested.txt").write_text("must survive too\n")


def assert_only(trash: Path, chain_names: list[str]) -> None:
    """*trash* holds nothing but the chain of directories down to the mount point."""
    here = trash
    for name in chain_names:
        assert os.listdir(here) == [name], here
        here = here / name


def blocked_events(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "generation.blocked" and e["log_level"] == "warning"]


@pytest.mark.parametrize("kind", ["tmpfs", "bind mount of a directory outside the root"])
def test_a_file_system_mounted_inside_a_generation_is_never_entered_and_removed_once_unmounted(
    root: Path, tmp_path: Path, mount: Callable[..., Path], kind: str
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    fill(real)
    manager = Manager(root)
    manager.retain()
    lease = manager.acquire()
    gid = lease.generation
    (lease.path / "mine" / "deeper").mkdir(parents=True)
    (lease.path / "mine" / "deeper" / "f").write_text("x")
    (lease.path / "deep" / "er" / "mnt").mkdir(parents=True)
    (lease.path / "deep" / "er" / "file").write_text("x")
    point = mount(lease.path / "deep" / "er" / "mnt",
                  None if kind == "tmpfs" else real)
    if kind == "tmpfs":
        fill(point)
    before = fingerprint(point)
    real_before = fingerprint(real)
    lease.release()
    with capture_logs() as logs:
        manager.rotate()

    trash = root / (TRASH_PREFIX + gid) / "tmp"
    stays = trash / "deep" / "er" / "mnt"
    assert_only(trash, ["deep", "er", "mnt"])
    assert fingerprint(stays) == before
    [warned] = blocked_events(logs)
    assert warned["path"] == str(stays)
    assert "mount point" in warned["reason"]
    assert f"umount {stays}" in warned["fix"]
    assert journal_state(root).generations[gid].removal == "started"

    with capture_logs() as logs:
        manager.close()
    assert blocked_events(logs) == [], "warned of once"
    report = recover(root)
    assert [s.path for s in report.skipped] == [stays]
    assert f"umount {stays}" in report.skipped[0].reason
    assert fingerprint(stays) == before
    assert fingerprint(real) == real_before

    umount(stays)
    report = recover(root)
    assert [r.generation for r in report.removed] == [gid]
    assert generations_on_disk(root) == []
    assert outcomes(root)[gid] == "removed"
    assert fingerprint(real) == real_before


def test_a_file_bind_mounted_over_a_file_in_a_generation_stays_and_its_source_is_intact(
    manager: Manager, root: Path, tmp_path: Path, mount: Callable[..., Path]
) -> None:
    source = tmp_path / "precious.txt"
    source.write_text("must survive\n")
    lease = manager.acquire()
    gid = lease.generation
    (lease.path / "over").write_text("covered\n")
    (lease.path / "beside").write_text("x")
    mount(lease.path / "over", source)
    lease.release()
    with capture_logs() as logs:
        manager.rotate()
    trash = root / (TRASH_PREFIX + gid) / "tmp"
    assert os.listdir(trash) == ["over"]
    assert source.read_text() == "must survive\n"
    assert [e["path"] for e in blocked_events(logs)] == [str(trash / "over")]
    umount(trash / "over")
    manager.close()
    assert generations_on_disk(root) == []
    assert source.read_text() == "must survive\n"
    assert outcomes(root)[gid] == "removed"


def test_a_file_system_mounted_on_the_generation_itself_keeps_it_due_until_unmounted(
    manager: Manager, root: Path, mount: Callable[..., Path]
) -> None:
    lease = manager.acquire()
    gid = lease.generation
    (lease.path / "under-the-mount").write_text("x")
    point = mount(lease.path.parent)
    fill(point)
    before = fingerprint(point)
    lease.release()
    with capture_logs() as logs:
        manager.rotate()
    [warned] = blocked_events(logs)
    assert warned["path"] == str(root / (GENERATION_PREFIX + gid))
    assert fingerprint(point) == before
    generation = journal_state(root).generations[gid]
    assert generation.retired
    assert generation.removal is None
    umount(point)
    # The manager's next operation finishes what it owes.
    with manager.acquire() as other:
        assert other.generation != gid
    assert outcomes(root)[gid] == "removed"
    assert not (root / (GENERATION_PREFIX + gid)).exists()


def test_a_file_system_mounted_at_a_stray_trash_name_is_left_by_the_sweep_until_unmounted(
    root: Path, mount: Callable[..., Path]
) -> None:
    with Manager(root):
        pass
    stray = root / f"{TRASH_PREFIX}aaaaaaaaaaaaaaaa"
    stray.mkdir()
    point = mount(stray)
    fill(point)
    before = fingerprint(point)
    # A trash name no record knows waits for the age guard like any unknown entry.
    report = recover(root, stale_after=0)
    assert [s.path for s in report.skipped] == [stray]
    assert "umount" in report.skipped[0].reason
    assert fingerprint(point) == before
    umount(stray)
    report = recover(root, stale_after=0)
    assert [r.generation for r in report.removed] == ["aaaaaaaaaaaaaaaa"]
    assert generations_on_disk(root) == []


def test_a_removal_blocked_by_a_mount_outlives_checkpoints_and_retired_segments(
    root: Path, mount: Callable[..., Path]
) -> None:
    # Its start may be in a segment long deleted: the checkpoint must carry it.
    eager = Retention(segment_bytes=0, history_bytes=0)
    with Manager(root, retention=eager) as manager:
        manager.retain()
        lease = manager.acquire()
        gid = lease.generation
        (lease.path / "mnt").mkdir()
        fill(mount(lease.path / "mnt"))
        lease.release()
        manager.rotate()
    for _ in range(3):
        with Manager(root, retention=eager) as busy:
            busy.retain()
            for _ in range(40):
                with busy.acquire():
                    pass
                busy.rotate()
    # The inspector, from the newest checkpoint, sees the removal owed.
    owed = state_at(root / "journal.sqlite3", live=True).state.generations[gid]
    assert owed.removal == "started"
    report = recover(root, retention=eager)
    assert [s.path for s in report.skipped] == [root / (TRASH_PREFIX + gid) / "tmp" / "mnt"]
    umount(root / (TRASH_PREFIX + gid) / "tmp" / "mnt")
    report = recover(root, retention=eager)
    assert [r.generation for r in report.removed] == [gid]
    assert generations_on_disk(root) == []


@as_root
def test_a_mount_in_a_dead_managers_generation_stays_while_the_pass_removes_the_rest(
    place: Path, children: Callable[..., Child], mount: Callable[..., Path]
) -> None:
    root = place / "root"
    first = children(root, uid=None)
    first("open")
    blocked = first("acquire")
    free = first("acquire")
    assert blocked["generation"] == free["generation"]
    first("rotate")
    other = first("acquire")
    (Path(blocked["path"]) / "mnt").mkdir()
    point = mount(Path(blocked["path"]) / "mnt")
    fill(point)
    before = fingerprint(point)
    first.crash()
    report = children(root, uid=None)("recover")
    assert sorted(r[1] for r in report["removed"]) == [other["generation"]]
    trash = root / (TRASH_PREFIX + blocked["generation"]) / "tmp"
    assert [s[0] for s in report["skipped"]] == [str(trash / "mnt")]
    assert fingerprint(trash / "mnt") == before
    umount(trash / "mnt")
    report = children(root, uid=None)("recover")
    assert [r[1] for r in report["removed"]] == [blocked["generation"]]
    assert generations_on_disk(root) == []


# -- how a mount is told -------------------------------------------------------------------


def test_statx_and_fdinfo_tell_the_same_node_and_mount_for_plain_and_mounted_directories(
    tmp_path: Path, mount: Callable[..., Path]
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    for name in ("plain", "tmpfs", "bind"):
        (tmp_path / name).mkdir()
    mount(tmp_path / "tmpfs")
    mount(tmp_path / "bind", real)
    top_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        top = nodes.of(top_fd)
        assert top.mount is not None
        for name, same in (("plain", True), ("tmpfs", False), ("bind", False)):
            for flags in (os.O_RDONLY | os.O_DIRECTORY, os.O_PATH | os.O_DIRECTORY):
                fd = os.open(tmp_path / name, flags)
                try:
                    by_statx = nodes.by_statx(fd)
                    assert by_statx == nodes.by_fdinfo(fd), name
                    st = os.fstat(fd)
                    assert by_statx is not None
                    assert (by_statx.dev, by_statx.ino, by_statx.mode, by_statx.uid) == (
                        st.st_dev, st.st_ino, st.st_mode, st.st_uid)
                    assert nodes.same_mount(by_statx, top) is same, name
                finally:
                    os.close(fd)
        # The bind mount is of the same file system: only the mount id tells.
        fd = os.open(tmp_path / "bind", os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert os.fstat(fd).st_dev == top.dev
        finally:
            os.close(fd)
    finally:
        os.close(top_fd)
