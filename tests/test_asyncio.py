"""asyncio: leases taken and given back off the loop, never leaked by a cancelled task.

Every test runs a real event loop (``asyncio.run``) against a real root.
Where a test must catch an operation half-way, a step hook parks the worker
thread at a named step until the test lets it go: no sleeps decide the
outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontemp import Manager, Unavailable
from sessiontemp._guards.steps import StepKind
from sessiontemp.journal.events import CommandStarted, LeaseAcquired
from tests.commands import SH, WRITER, assert_still_writing, journaled, wait_until, writer_env
from tests.faults import Gate


def no_leases(manager: Manager) -> bool:
    return all(not g.leases for g in manager.state.generations.values())


def test_acquire_async_returns_a_lease_that_async_with_gives_back(manager: Manager) -> None:
    async def main() -> None:
        async with await manager.acquire_async() as lease:
            assert not lease.released
            assert lease.path.is_dir()
            assert lease.env()["TMPDIR"] == os.fspath(lease.path)
        assert lease.released

    asyncio.run(main())
    assert no_leases(manager)


def test_acquire_async_journals_the_label_it_is_given(manager: Manager) -> None:
    async def main() -> None:
        async with await manager.acquire_async(label="agent turn 7: make test") as lease:
            assert lease.label == "agent turn 7: make test"

    asyncio.run(main())
    (acquired,) = journaled(manager.root, LeaseAcquired)
    assert acquired.label == "agent turn 7: make test"


def test_a_task_cancelled_inside_async_with_gives_the_lease_back(manager: Manager) -> None:
    async def main() -> None:
        lease = await manager.acquire_async()
        inside = asyncio.Event()

        async def hold() -> None:
            async with lease:
                inside.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lease.released

    asyncio.run(main())
    assert no_leases(manager)


def test_a_release_cancelled_again_half_way_finishes_before_the_task_ends(
    open_manager: Callable[..., Manager],
) -> None:
    """A second cancellation while the release is journaling does not cut it short."""
    gate = Gate("journal")
    manager = open_manager(step_hook=gate)
    manager.retain()

    async def main() -> None:
        lease = await manager.acquire_async()

        async def hold() -> None:
            async with lease:
                gate.armed = True
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.to_thread(gate.reached.wait, 60)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        gate.opened.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lease.released

    asyncio.run(main())
    assert no_leases(manager)


def test_a_task_cancelled_while_acquiring_leaves_no_lease_behind(
    open_manager: Callable[..., Manager],
) -> None:
    """The worker thread cannot be stopped: the lease it makes is released before the task ends."""
    gate = Gate("lock")
    manager = open_manager(step_hook=gate)
    manager.retain()

    async def main() -> None:
        gate.armed = True
        task = asyncio.create_task(manager.acquire_async())
        await asyncio.to_thread(gate.reached.wait, 60)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        gate.opened.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert manager.state.generations
    assert no_leases(manager)


def test_a_timeout_around_acquire_async_still_raises_timeout_error(
    open_manager: Callable[..., Manager],
) -> None:
    """Holding the cancellation back does not hide it from asyncio.timeout."""
    gate = Gate("lock")
    manager = open_manager(step_hook=gate)
    manager.retain()

    async def main() -> None:
        gate.armed = True
        def open_when_reached() -> None:
            gate.reached.wait(60)
            gate.opened.set()

        threading.Thread(target=open_when_reached).start()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await manager.acquire_async()

    asyncio.run(main())
    assert no_leases(manager)


def test_acquire_async_raises_unavailable_as_acquire_does(
    open_manager: Callable[..., Manager],
) -> None:
    manager = open_manager()

    async def main() -> None:
        with pytest.raises(Unavailable, match="no owner"):
            await manager.acquire_async()

    asyncio.run(main())


def test_create_subprocess_exec_runs_the_command_in_the_lease_directory(
    manager: Manager,
) -> None:
    async def main() -> None:
        async with await manager.acquire_async() as lease:
            process = await lease.create_subprocess_exec(
                SH, "-c", 'printf "%s|%s|%s\\n" "$TMPDIR" "$TMP" "$EXTRA"; mktemp',
                env={"EXTRA": "kept"}, stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await process.communicate()
            assert process.returncode == 0
            first, made = out.decode().splitlines()
            assert first == f"{lease.path}|{lease.path}|kept"
            assert Path(made).parent == lease.path

    asyncio.run(main())


def test_create_subprocess_exec_journals_the_child_it_started(manager: Manager) -> None:
    """Tracked by pid and start time, so removal waits for it even if it closes the descriptor."""
    async def main() -> None:
        async with await manager.acquire_async() as lease:
            # It runs until its standard input closes, so it is alive when tracked.
            process = await lease.create_subprocess_exec(
                SH, "-c", "read line", stdin=asyncio.subprocess.PIPE
            )
            (started,) = journaled(manager.root, CommandStarted)
            assert (started.lease, started.pid) == (lease.id, process.pid)
            await process.communicate(b"\n")
            assert process.returncode == 0

    asyncio.run(main())


def test_a_command_from_create_subprocess_exec_keeps_writing_through_release_and_rotation(
    manager: Manager, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"

    async def main() -> Path:
        async with await manager.acquire_async() as lease:
            process = await lease.create_subprocess_exec(SH, "-c", WRITER, env=writer_env(stop))
            await asyncio.to_thread(
                wait_until, lambda: (lease.path / "count").exists(), "the first write"
            )
        assert lease.released
        await asyncio.to_thread(manager.rotate)
        try:
            assert lease.path.is_dir()
            await asyncio.to_thread(assert_still_writing, lease.path)
        finally:
            stop.touch()
            assert await process.wait() == 0
        return lease.path

    path = asyncio.run(main())
    assert (path / "final").is_file()
    manager.rotate()
    assert not path.exists()


def test_create_subprocess_exec_on_a_released_lease_raises_unavailable_and_starts_nothing(
    manager: Manager, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"

    async def main() -> None:
        lease = await manager.acquire_async()
        async with lease:
            pass
        with pytest.raises(Unavailable, match="released"):
            await lease.create_subprocess_exec(SH, "-c", f"touch {marker}")

    asyncio.run(main())
    assert not marker.exists()


def test_no_journal_write_lock_or_removal_runs_on_the_event_loop_thread(
    open_manager: Callable[..., Manager],
) -> None:
    """A burst of acquire, start, release and rotation: every durable step is on a worker thread."""
    threads: dict[StepKind, set[int]] = {}

    def record(kind: StepKind, detail: str) -> None:
        threads.setdefault(kind, set()).add(threading.get_ident())

    manager = open_manager(step_hook=record)
    manager.retain()
    threads.clear()

    async def one() -> None:
        async with await manager.acquire_async() as lease:
            process = await lease.create_subprocess_exec("true")
            await process.wait()

    async def main() -> int:
        for _ in range(5):
            await asyncio.gather(*(one() for _ in range(6)))
            await asyncio.to_thread(manager.rotate)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert {"journal", "mkdir", "lock", "unlock", "rename", "rmdir"} <= set(threads)
    assert all(loop_thread not in seen for seen in threads.values())


# -- no worker thread to be had -----------------------------------------------------------

# Run as nobody (uid 65534), at a limit of one process for that user: root is not held to
# RLIMIT_NPROC, nobody is, and the kernel then refuses every new thread (EAGAIN).
WITHOUT_THREADS = """
import asyncio, concurrent.futures.thread, json, os, resource, sys
import sqlite_utils.plugins
from sessiontemp import Manager
# Every module the program uses is loaded while it is root: the checkout may lie
# where nobody cannot read (a clone in a 0700 temporary directory), and the
# library loads its asyncio half only when an async method is first awaited.
import sessiontemp._guards.aio
sqlite_utils.plugins.ensure_plugins_loaded()
os.setgroups([]); os.setgid(65534); os.setuid(65534)
manager = Manager(sys.argv[1])
manager.retain()
held = manager.acquire(label="released from the loop")
resource.setrlimit(resource.RLIMIT_NPROC, (1, resource.getrlimit(resource.RLIMIT_NPROC)[1]))
seen = {}

async def main():
    try:
        lease = await manager.acquire_async(label="acquired from the loop")
        async with lease:
            seen["path"] = str(lease.path)
        seen["released"] = lease.released
    except BaseException as e:
        seen["acquire"] = repr(e)
    try:
        async with held:
            pass
    except BaseException as e:
        seen["release"] = repr(e)
    seen["held_released"] = held.released
    seen["leases"] = sorted(
        lease for g in manager.state.generations.values() for lease in g.leases)

try:
    asyncio.run(main())
except RuntimeError:
    pass  # asyncio.run's own shutdown of its executor starts a thread too
manager.close()
print(json.dumps(seen))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")
def test_with_no_worker_thread_to_be_had_a_lease_is_still_taken_and_given_back() -> None:
    """The call runs on the loop for once, rather than failing or leaving a lease held."""
    # Not under pytest's tmp_path, which is root's alone (0700).
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-nothreads-"))
    try:
        os.chmod(place, 0o755)  # noqa: S103 - nobody must reach the root inside it
        (place / "root").mkdir(mode=0o700)
        os.chown(place / "root", 65534, 65534)
        done = subprocess.run([sys.executable, "-c", WITHOUT_THREADS, str(place / "root")],
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(place)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "acquire" not in seen, seen
    assert "release" not in seen, seen
    assert seen["released"]
    assert seen["held_released"]
    assert seen["leases"] == []
