"""asyncio: every blocking operation has an async form, run off the loop, never split by a cancel.

``Manager.open_async``, ``retain_async``, ``release_async``, ``rotate_async``,
``close_async``, ``async with manager:``, ``lease.keep_async``,
``lease.track_async``, ``lease.release_async``, ``sessiontemp.recover_async``,
``remove_artifact_async`` and ``remove_session_async``: each is
awaited on a real event loop against a real root.  Where each of their
durable steps ran is recorded honestly, from three sources: the interpreter's
audit events (``os.mkdir``, ``os.rename``, ``os.rmdir``, ``os.remove``), a
profile hook that sees every call of ``os.fsync``, ``os.fdatasync`` and of a
SQLite connection's or cursor's methods (inside which SQLite syncs its own
files), and the library's step hook.  Where a test cancels an operation
half-way, a step hook parks the worker thread at a named step until the
test lets it go: no sleep decides the outcome.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import typing
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Final

import pytest
from structlog.testing import capture_logs

import sessiontemp
from sessiontemp import Manager, SessionOwned
from sessiontemp._guards.steps import StepKind
from sessiontemp.artifacts import ARTIFACTS_DIR
from sessiontemp.journal.events import (
    ArtifactKept,
    ArtifactRemoved,
    ManagerClosed,
    ManagerOpened,
    Released,
    RemovalFinished,
    Retained,
    Rotated,
    SessionAdopted,
)
from sessiontemp.options import ManagerOptions
from tests.commands import journaled
from tests.conftest import live_state
from tests.faults import Gate, store_error

REPOSITORY: Final = Path(__file__).resolve().parent.parent
AUDITED: Final = frozenset({"os.mkdir", "os.rename", "os.rmdir", "os.remove"})


class Threads:
    """The thread of every durable step taken while an operation is named, by what it was."""

    def __init__(self) -> None:
        self.operation: str | None = None
        self.seen: list[tuple[str, str, int]] = []

    def _note(self, what: str) -> None:
        operation = self.operation
        if operation is not None:
            self.seen.append((operation, what, threading.get_ident()))

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        if event in AUDITED:
            self._note(event)

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "c_call":
            return
        if arg is os.fsync or arg is os.fdatasync:
            self._note(f"os.{getattr(arg, '__name__', '')}")
        elif isinstance(getattr(arg, "__self__", None), sqlite3.Connection | sqlite3.Cursor):
            self._note("sqlite3")

    def step(self, kind: StepKind, detail: str) -> None:
        self._note(f"step {kind}")

    @contextlib.contextmanager
    def named(self, operation: str) -> Iterator[None]:
        self.operation = operation
        try:
            yield
        finally:
            self.operation = None

    def of(self, operation: str, *, on: int | None = None) -> set[str]:
        """What *operation* did (on thread *on* alone, if given)."""
        return {what for op, what, thread in self.seen
                if op == operation and (on is None or thread == on)}


# An audit hook cannot be removed again: one is added for the whole process,
# the first time a test records, and hands events to whichever recorder is on.
_recording: list[Threads] = []
_audit_added = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _recording and event in AUDITED:
        _recording[0].audit(event, args)


@contextlib.contextmanager
def recording() -> Iterator[Threads]:
    """Record every thread's durable steps, the current thread's and those started from now on."""
    global _audit_added
    if not _audit_added:
        sys.addaudithook(_audit)
        _audit_added = True
    threads = Threads()
    _recording.append(threads)
    # Before the loop starts its executor: threading.setprofile reaches only
    # the threads started after it, sys.setprofile this (the loop's) thread.
    threading.setprofile(threads.profile)
    sys.setprofile(threads.profile)
    try:
        yield threads
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        _recording.remove(threads)


# What each operation must at least be seen doing, so that a recorder that
# saw nothing cannot pass for one that saw nothing on the loop.
EXPECTED: Final[dict[str, set[str]]] = {
    "open_async": {"os.mkdir", "sqlite3", "step journal", "step lock"},
    "retain_async": {"sqlite3", "step journal"},
    "acquire_async": {"os.mkdir", "sqlite3", "step mkdir"},
    "keep_async": {"os.fsync", "sqlite3", "step copy"},
    "measure_async": {"sqlite3", "step journal"},
    "rotate_async": {"os.rename", "os.rmdir", "sqlite3", "step rename"},
    "release_async": {"os.rename", "os.rmdir", "sqlite3", "step rmdir"},
    "async with": {"os.remove", "sqlite3", "step unlock"},
    "close_async": {"os.remove", "sqlite3", "step journal"},
    "track_async": {"sqlite3", "step journal"},
    "lease.release_async": {"os.rename", "os.rmdir", "sqlite3", "step rmdir"},
    "recover_async": {"os.rename", "os.rmdir", "sqlite3", "step rmdir"},
    "remove_artifact_async": {"os.remove", "sqlite3", "step journal"},
    "remove_session_async": {"os.remove", "sqlite3"},
}


KILLED: Final = """
import os, signal, sys
from sessiontemp import Manager
manager = Manager(sys.argv[1]); manager.retain(); manager.acquire()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_no_fsync_rename_rmdir_mkdir_unlink_or_sqlite_call_of_an_async_method_runs_on_the_loop(
    tmp_path: Path,
) -> None:
    """Each async method's durable steps all run in worker threads, and each is seen taking some."""
    root = tmp_path / "root"
    (tmp_path / "out.txt").write_text("kept\n")

    async def main(threads: Threads) -> int:
        with threads.named("open_async"):
            manager = await Manager.open_async(root, step_hook=threads.step)
        with threads.named("retain_async"):
            await manager.retain_async()
        with threads.named("acquire_async"):
            lease = await manager.acquire_async(label="make test")
        await asyncio.to_thread(shutil.copy, tmp_path / "out.txt", lease.path / "out.txt")
        with threads.named("keep_async"):
            await lease.keep_async("out.txt", "report")
        with threads.named("measure_async"):
            await manager.measure_async()
        async with lease:
            pass
        with threads.named("rotate_async"):
            await manager.rotate_async()
        async with await manager.acquire_async():
            pass
        with threads.named("release_async"):
            await manager.release_async()
        other = await Manager.open_async(root, step_hook=threads.step)
        with threads.named("async with"):
            async with other:
                pass
        with threads.named("close_async"):
            await manager.close_async()
        assert manager.closed
        assert other.closed
        # The module-level calls and the lease's own, on a root no manager holds.
        third = await Manager.open_async(root, session="chat-1", step_hook=threads.step)
        await third.retain_async()
        await third.rotate_async()
        lease = await third.acquire_async()
        await asyncio.to_thread(shutil.copy, tmp_path / "out.txt", lease.path / "out.txt")
        kept = await lease.keep_async("out.txt", "report")
        plain = subprocess.Popen(["sleep", "60"])
        with threads.named("track_async"):
            assert await lease.track_async(plain.pid)
        plain.kill()
        plain.wait()
        await third.rotate_async()
        with threads.named("lease.release_async"):
            await lease.release_async()
        await third.close_async()
        # A manager killed holding a directory: an orphan for the pass to remove.
        killed = subprocess.run([sys.executable, "-c", KILLED, root], check=False)
        assert killed.returncode == -9
        with threads.named("recover_async"):
            await sessiontemp.recover_async(root, step_hook=threads.step)
        with threads.named("remove_artifact_async"):
            assert await sessiontemp.remove_artifact_async(root, kept, step_hook=threads.step)
        with threads.named("remove_session_async"):
            await sessiontemp.remove_session_async(root, "chat-1", step_hook=threads.step)
        return threading.get_ident()

    with recording() as threads:
        loop = asyncio.run(main(threads))
    on_loop = {operation: threads.of(operation, on=loop) for operation in EXPECTED}
    assert on_loop == {operation: set() for operation in EXPECTED}
    missing = {operation: expected - threads.of(operation)
               for operation, expected in EXPECTED.items()}
    assert missing == {operation: set() for operation in EXPECTED}


# -- cancelled half-way -------------------------------------------------------------------

async def cancelled_while_parked(gate: Gate, start: Callable[[], Awaitable[object]]) -> None:
    """Start an operation, cancel its task twice while its thread is parked at *gate*, let it go.

    The task must neither finish while the thread is parked nor end in
    anything but CancelledError once it is let go.
    """
    gate.armed = True
    task = asyncio.ensure_future(start())
    await asyncio.to_thread(gate.reached.wait, 60)
    task.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    # A second cancellation does not cut it short either.
    task.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    gate.opened.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def live_managers(root: Path) -> list[str]:
    return sorted(m for m, state in live_state(root).managers.items() if state.ended is None)


@pytest.mark.parametrize(("kind", "detail"), [("lock", "manager "),
                                              ("journal", ManagerOpened.kind)])
def test_an_open_cancelled_half_way_leaves_the_manager_it_made_closed(
    tmp_path: Path, kind: StepKind, detail: str,
) -> None:
    root = tmp_path / "root"
    gate = Gate(kind, detail)
    asyncio.run(cancelled_while_parked(
        gate, lambda: Manager.open_async(root, step_hook=gate, session="chat-1")))
    [opened] = journaled(root, ManagerOpened)
    assert [closed.manager for closed in journaled(root, ManagerClosed)] == [opened.manager]
    assert live_managers(root) == []
    assert list((root / "managers").iterdir()) == []
    # The session's name is free again: a new owner is not refused.
    Manager(root, session="chat-1").close()


def test_an_open_cancelled_again_while_it_is_being_undone_still_ends_closed(
    tmp_path: Path,
) -> None:
    """The close that undoes it is seen through as well, however often the task is cancelled."""
    root = tmp_path / "root"
    opening, undoing = Gate("journal", ManagerOpened.kind), Gate("journal", ManagerClosed.kind)

    def hook(kind: StepKind, detail: str) -> None:
        opening(kind, detail)
        undoing(kind, detail)

    async def main() -> None:
        opening.armed = undoing.armed = True
        task = asyncio.ensure_future(Manager.open_async(root, step_hook=hook))
        await asyncio.to_thread(opening.reached.wait, 60)
        task.cancel()
        opening.opened.set()
        await asyncio.to_thread(undoing.reached.wait, 60)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        undoing.opened.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    [opened] = journaled(root, ManagerOpened)
    assert [closed.manager for closed in journaled(root, ManagerClosed)] == [opened.manager]
    assert live_managers(root) == []


OWNER: Final = textwrap.dedent("""
    import os, sys
    from sessiontemp import Manager
    manager = Manager(sys.argv[1], session="chat-1")
    manager.retain()
    lease = manager.acquire()
    (lease.path / "notes.txt").write_text("draft 1")
    print(lease.path, flush=True)
    os._exit(0)  # dies with everything held, as a killed kernel does
""")


def test_an_open_that_resumed_a_session_cancelled_half_way_leaves_it_to_resume_again(
    tmp_path: Path,
) -> None:
    """Closing it would remove the adopted directory: it is let go of as a dead owner instead."""
    root = tmp_path / "root"
    died = subprocess.run([sys.executable, "-c", OWNER, str(root)], capture_output=True,
                          text=True, timeout=60, check=True, cwd=REPOSITORY)
    path = Path(died.stdout.strip())
    gate = Gate("journal", SessionAdopted.kind)
    asyncio.run(cancelled_while_parked(
        gate, lambda: Manager.open_async(root, step_hook=gate, session="chat-1")))
    assert len(journaled(root, SessionAdopted)) == 1
    assert journaled(root, ManagerClosed) == []
    with Manager(root, session="chat-1") as again:
        assert again.resumed
        assert again.current_dir == path
        assert (path / "notes.txt").read_text() == "draft 1"
    assert len(journaled(root, SessionAdopted)) == 2


def test_a_retain_cancelled_half_way_has_added_its_owner(
    open_manager: Callable[..., Manager],
) -> None:
    gate = Gate("journal", Retained.kind)
    manager = open_manager(step_hook=gate)
    asyncio.run(cancelled_while_parked(gate, manager.retain_async))
    assert manager.owners == 1
    assert len(journaled(manager.root, Retained)) == 1


@pytest.mark.parametrize("kind", ["journal", "rename", "rmdir"])
def test_a_rotation_cancelled_half_way_has_retired_and_removed_the_generation(
    open_manager: Callable[..., Manager], kind: StepKind,
) -> None:
    gate = Gate(kind)
    manager = open_manager(step_hook=gate)
    manager.retain()
    with manager.acquire() as lease:
        old = lease.path
    asyncio.run(cancelled_while_parked(gate, manager.rotate_async))
    assert len(journaled(manager.root, Rotated)) == 1
    assert manager.current_dir is None
    assert not old.exists()
    assert len(journaled(manager.root, RemovalFinished)) == 1
    with manager.acquire() as lease:
        assert lease.path != old


@pytest.mark.parametrize("kind", ["journal", "rename", "rmdir"])
def test_a_last_release_cancelled_half_way_has_sealed_the_manager_and_removed_its_directory(
    open_manager: Callable[..., Manager], kind: StepKind,
) -> None:
    gate = Gate(kind)
    manager = open_manager(step_hook=gate)
    manager.retain()
    with manager.acquire() as lease:
        old = lease.path
    asyncio.run(cancelled_while_parked(gate, manager.release_async))
    assert manager.sealed
    assert manager.owners == 0
    assert not old.exists()


@pytest.mark.parametrize(("kind", "detail"), [("journal", ManagerClosed.kind), ("rmdir", ""),
                                              ("unlock", "manager ")])
def test_a_close_cancelled_half_way_has_closed_the_manager(
    open_manager: Callable[..., Manager], kind: StepKind, detail: str,
) -> None:
    gate = Gate(kind, detail)
    manager = open_manager(step_hook=gate)
    manager.retain()
    with manager.acquire() as lease:
        old = lease.path
    asyncio.run(cancelled_while_parked(gate, manager.close_async))
    assert manager.closed
    assert not old.exists()
    assert live_managers(manager.root) == []
    assert list((manager.root / "managers").iterdir()) == []


def test_a_task_cancelled_inside_async_with_manager_has_closed_it(
    open_manager: Callable[..., Manager],
) -> None:
    manager = open_manager()

    async def main() -> None:
        inside = asyncio.Event()

        async def hold() -> None:
            async with manager as entered:
                assert entered is manager
                await entered.retain_async()
                await (await entered.acquire_async()).__aexit__(None, None, None)
                inside.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        await inside.wait()
        assert not manager.closed
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert manager.closed

    asyncio.run(main())
    assert live_managers(manager.root) == []


@pytest.mark.parametrize("kind", ["copy", "journal"])
def test_a_keep_cancelled_half_way_leaves_no_artifact_behind(
    open_manager: Callable[..., Manager], kind: StepKind,
) -> None:
    """The copy still finishes; the artifact nobody got is removed (journaled); the source stays."""
    gate = Gate(kind, "" if kind == "copy" else ArtifactKept.kind)
    manager = open_manager(step_hook=gate)
    manager.retain()
    with manager.acquire() as lease:
        (lease.path / "out.txt").write_text("kept\n")
        asyncio.run(cancelled_while_parked(gate, lambda: lease.keep_async("out.txt", "report")))
        assert (lease.path / "out.txt").read_text() == "kept\n"
    [kept] = journaled(manager.root, ArtifactKept)
    [removed] = journaled(manager.root, ArtifactRemoved)
    assert removed.artifact == kept.artifact
    assert list((manager.root / ARTIFACTS_DIR).iterdir()) == []
    assert live_state(manager.root).artifacts == {}


def test_an_artifact_a_cancelled_keep_cannot_remove_stays_recorded_and_is_warned_of(
    open_manager: Callable[..., Manager],
) -> None:
    """Nothing journaled is lost: a removal the journal refuses leaves the artifact whole."""
    gate = Gate("journal", ArtifactKept.kind)

    def hook(kind: StepKind, detail: str) -> None:
        gate(kind, detail)
        if kind == "journal" and ArtifactRemoved.kind in detail:
            raise store_error("busy", Path(detail))

    manager = open_manager(step_hook=hook)
    manager.retain()
    with manager.acquire() as lease:
        (lease.path / "out.txt").write_text("kept\n")
        with capture_logs() as logs:
            asyncio.run(cancelled_while_parked(
                gate, lambda: lease.keep_async("out.txt", "report")))
    [kept] = journaled(manager.root, ArtifactKept)
    assert journaled(manager.root, ArtifactRemoved) == []
    [warned] = [log for log in logs if log["event"] == "asyncio.not_undone"]
    assert warned["artifact"] == kept.artifact
    assert "could not be removed" in warned["reason"]
    assert Path(warned["path"]).read_text() == "kept\n"


def test_keep_async_returns_the_artifact_keep_would(open_manager: Callable[..., Manager]) -> None:
    manager = open_manager()
    manager.retain()

    async def main() -> None:
        async with await manager.acquire_async() as lease:
            await asyncio.to_thread((lease.path / "out.txt").write_text, "kept\n")
            artifact = await lease.keep_async("out.txt", "report")
            assert artifact.label == "report"
            assert await asyncio.to_thread(artifact.path.read_text) == "kept\n"

    asyncio.run(main())
    assert len(journaled(manager.root, ArtifactKept)) == 1


def test_a_timeout_around_rotate_async_raises_timeout_error_once_the_rotation_is_done(
    open_manager: Callable[..., Manager],
) -> None:
    """Holding the cancellation back does not hide it from asyncio.timeout."""
    gate = Gate("rename")
    manager = open_manager(step_hook=gate)
    manager.retain()
    with manager.acquire() as lease:
        old = lease.path

    def open_when_reached() -> None:
        gate.reached.wait(60)
        gate.opened.set()

    async def main() -> None:
        gate.armed = True
        threading.Thread(target=open_when_reached).start()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await manager.rotate_async()

    asyncio.run(main())
    assert not old.exists()


def test_open_async_raises_what_the_constructor_raises(tmp_path: Path) -> None:
    root = tmp_path / "root"

    async def main() -> None:
        async with await Manager.open_async(root, session="chat-1"):
            with pytest.raises(SessionOwned):
                await Manager.open_async(root, session="chat-1")
        with pytest.raises(ValueError, match="durability"):
            # A value its type refuses, as an untyped caller may pass it.
            await Manager.open_async(root, durability="sometimes")  # type: ignore[arg-type]

    asyncio.run(main())
    assert live_managers(root) == []


def test_open_async_of_a_subclass_opens_the_subclass(tmp_path: Path) -> None:
    class Harness(Manager):
        pass

    async def main() -> None:
        async with await Harness.open_async(tmp_path / "root") as manager:
            assert type(manager) is Harness

    asyncio.run(main())


def test_the_asyncio_example_of_the_documentation_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (REPOSITORY / "docs" / "concepts" / "commands.md").read_text()
    section = page.split("## asyncio\n", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    # The example runs its chat on a root relative to the working directory: not here.
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    names: dict[str, Any] = {}
    exec(compile(example, "commands.md", "exec"), names)  # noqa: S102 - the page's own code
    asyncio.run(names["chat"](str(tmp_path / "root")))
    [kept] = journaled(tmp_path / "root", ArtifactKept)
    assert kept.label == "turn-7-report"
    assert len(journaled(tmp_path / "root", Rotated)) == 1
    assert live_managers(tmp_path / "root") == []


# -- asyncio is not loaded until it is used -----------------------------------------------

def module_level_imports(tree: ast.Module) -> Iterator[str]:
    """The modules *tree* imports when it is imported (not those under ``if TYPE_CHECKING``)."""
    for node in tree.body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_no_module_but_aio_imports_asyncio_when_it_is_imported() -> None:
    """A program that never awaits the library pays nothing of its own for asyncio."""
    found = {}
    for package in ("sessiontemp", "journal"):
        for source in sorted((REPOSITORY / package).rglob("*.py")):
            names = set(module_level_imports(ast.parse(source.read_text())))
            wanted = {n for n in names if n == "asyncio" or n.startswith("asyncio.")
                      or n == "sessiontemp._guards.aio"}
            if wanted:
                found[str(source.relative_to(REPOSITORY))] = sorted(wanted)
    assert found == {"sessiontemp/_guards/aio.py": ["asyncio"]}


def test_importing_the_manager_and_the_lease_does_not_load_the_asyncio_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, sessiontemp.manager, sessiontemp.lease; "
         "print('sessiontemp._guards.aio' in sys.modules)"],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPOSITORY)
    assert done.stdout.strip() == "False"


# -- no worker thread to be had -----------------------------------------------------------

# As in test_asyncio.py: run as nobody (uid 65534) at a limit of one process for that user,
# which the kernel enforces on every new thread (EAGAIN).
WITHOUT_THREADS: Final = """
import asyncio, concurrent.futures.thread, json, os, resource, sys
import sqlite_utils.plugins
import structlog
from sessiontemp import Manager
# Everything loaded while still root: nobody cannot read root's interpreter.
import sessiontemp._guards.aio, sessiontemp.artifacts
sqlite_utils.plugins.ensure_plugins_loaded()
os.setgroups([]); os.setgid(65534); os.setuid(65534)
resource.setrlimit(resource.RLIMIT_NPROC, (1, resource.getrlimit(resource.RLIMIT_NPROC)[1]))
seen = {}

async def main():
    manager = await Manager.open_async(sys.argv[1], session="chat-1")
    async with manager:
        await manager.retain_async()
        async with await manager.acquire_async() as lease:
            (lease.path / "out.txt").write_text("kept")
            seen["kept"] = (await lease.keep_async("out.txt", "report")).path.read_text()
        await manager.rotate_async()
        await manager.release_async()
        seen["sealed"] = manager.sealed
    seen["closed"] = manager.closed

with structlog.testing.capture_logs() as logs:
    try:
        asyncio.run(main())
    except RuntimeError:
        pass  # asyncio.run's own shutdown of its executor starts a thread too
seen["inline"] = sum(log["event"] == "asyncio.inline" for log in logs)
print(json.dumps(seen))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")
def test_with_no_worker_thread_to_be_had_every_async_method_still_runs_on_the_loop() -> None:
    """Each runs inline, logged once as asyncio.inline, rather than failing half-way."""
    # Not under pytest's tmp_path, which is root's alone (0700).
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-nothreads-"))
    try:
        os.chmod(place, 0o755)  # noqa: S103 - nobody must reach the root inside it
        (place / "root").mkdir(mode=0o700)
        os.chown(place / "root", 65534, 65534)
        done = subprocess.run([sys.executable, "-c", WITHOUT_THREADS, str(place / "root")],
                              capture_output=True, text=True, timeout=120, check=False,
                              cwd=REPOSITORY)
        assert done.returncode == 0, done.stderr
        seen: dict[str, Any] = json.loads(done.stdout)
        assert live_managers(place / "root") == []
    finally:
        shutil.rmtree(place)
    # open, retain, acquire, keep, the lease's release, rotate, release, close.
    assert seen == {"kept": "kept", "sealed": True, "closed": True, "inline": 8}


# At the limit, then below it again: a call that ran inline must not run a second time
# in the first worker thread that can be started afterwards.
ONCE_ONLY: Final = """
import asyncio, concurrent.futures.thread, json, os, resource, sys
import sqlite_utils.plugins
from sessiontemp import Manager
import sessiontemp._guards.aio
sqlite_utils.plugins.ensure_plugins_loaded()
os.setgroups([]); os.setgid(65534); os.setuid(65534)
manager = Manager(sys.argv[1])
manager.retain()
manager.retain()
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
seen = {}

async def main():
    resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))
    await manager.release_async()  # inline: no thread to be had
    resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
    await manager.rotate_async()  # the first worker thread there is
    seen["owners"] = manager.owners
    seen["sealed"] = manager.sealed

asyncio.run(main())
manager.close()
print(json.dumps(seen))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")
def test_an_operation_run_inline_is_not_run_again_once_a_thread_can_be_started() -> None:
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-nothreads-"))
    try:
        os.chmod(place, 0o755)  # noqa: S103 - nobody must reach the root inside it
        (place / "root").mkdir(mode=0o700)
        os.chown(place / "root", 65534, 65534)
        done = subprocess.run([sys.executable, "-c", ONCE_ONLY, str(place / "root")],
                              capture_output=True, text=True, timeout=120, check=False,
                              cwd=REPOSITORY)
        assert done.returncode == 0, done.stderr
        seen: dict[str, Any] = json.loads(done.stdout)
        assert len(journaled(place / "root", Released)) == 1
    finally:
        shutil.rmtree(place)
    assert seen == {"owners": 1, "sealed": False}


def test_open_async_is_typed_with_every_option_of_the_constructor_and_no_other() -> None:
    constructor = inspect.signature(Manager.__init__).parameters.values()
    keywords = {p.name for p in constructor if p.kind is p.KEYWORD_ONLY}
    hints = typing.get_type_hints(Manager.__init__)
    typed = typing.get_type_hints(ManagerOptions)
    assert set(typed) == keywords
    assert typed == {name: hints[name] for name in keywords}
