"""The rule of protection: a command is protected while it holds the lease's descriptor.

Commands started by any API that passes ``lease.pass_fds`` keep their
directory through a release and a rotation, exactly as ``lease.popen``'s
do; the same command started without the descriptor loses it.  Real shell
processes write into their real ``TMPDIR`` throughout.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import Lease, Manager, Unavailable
from tests.commands import (
    LOST,
    SH,
    WRITER,
    assert_still_writing,
    exited,
    wait_until,
    writer_env,
)


def start_popen(lease: Lease, env: dict[str, str]) -> Callable[[], int]:
    child: subprocess.Popen[Any] = subprocess.Popen(
        [SH, "-c", WRITER], env={**env, **lease.env()}, pass_fds=lease.pass_fds
    )
    return lambda: child.wait(timeout=60)


def start_posix_spawn(lease: Lease, env: dict[str, str]) -> Callable[[], int]:
    # A dup2 of a descriptor onto itself clears its close-on-exec flag.
    actions = [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in lease.pass_fds]
    pid = os.posix_spawn(SH, [SH, "-c", WRITER], {**env, **lease.env()}, file_actions=actions)
    return lambda: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("start", [start_popen, start_posix_spawn], ids=["Popen", "posix_spawn"])
def test_a_command_given_pass_fds_keeps_writing_through_release_and_rotation(
    manager: Manager, tmp_path: Path, start: Callable[[Lease, dict[str, str]], Callable[[], int]]
) -> None:
    """Protected as lease.popen's command is; its directory goes at the next step after it exits."""
    stop = tmp_path / "stop"
    lease = manager.acquire()
    wait = start(lease, writer_env(stop))
    try:
        wait_until(lambda: (lease.path / "count").exists(), "the first write")
        lease.release()
        manager.rotate()
        assert lease.path.is_dir()
        assert_still_writing(lease.path)
        manager.rotate()
        assert_still_writing(lease.path)
    finally:
        stop.touch()
        status = wait()
    assert status == 0
    assert (lease.path / "final").is_file()
    manager.rotate()
    assert not lease.path.exists()


def test_the_same_command_without_the_descriptor_loses_its_directory(
    manager: Manager, tmp_path: Path
) -> None:
    """The rule cuts both ways: env() alone points TMPDIR at a directory nothing protects."""
    stop = tmp_path / "stop"
    lease = manager.acquire()
    child = subprocess.Popen([SH, "-c", WRITER], env={**writer_env(stop), **lease.env()})
    try:
        wait_until(lambda: (lease.path / "count").exists(), "the first write")
        lease.release()
        manager.rotate()
        assert not lease.path.exists()
    finally:
        stop.touch()
        status = child.wait(timeout=60)
    assert status == LOST


def test_a_grandchild_handed_the_descriptor_keeps_the_directory_after_its_parent_exits(
    manager: Manager, tmp_path: Path
) -> None:
    """Whatever the command hands the descriptor to is protected too: a backgrounded writer."""
    stop = tmp_path / "stop"
    script = tmp_path / "writer.sh"
    script.write_text(WRITER)
    lease = manager.acquire()
    parent = subprocess.Popen(
        [SH, "-c", f"{SH} {script} >/dev/null & echo $!"], env={**writer_env(stop), **lease.env()},
        pass_fds=lease.pass_fds, stdout=subprocess.PIPE, text=True,
    )
    out, _ = parent.communicate(timeout=60)
    grandchild = int(out)
    try:
        lease.release()
        manager.rotate()
        assert lease.path.is_dir()
        assert_still_writing(lease.path)
    finally:
        stop.touch()
    wait_until(lambda: (lease.path / "final").exists(), f"process {grandchild} to finish")
    wait_until(lambda: exited(grandchild), f"process {grandchild} to exit")
    manager.rotate()
    assert not lease.path.exists()


def test_pass_fds_are_the_lock_descriptors_and_inherited_by_no_other_child(
    manager: Manager,
) -> None:
    with manager.acquire() as lease:
        # The leased directory's and its generation's.
        work, generation = lease.pass_fds
        assert os.path.samefile(f"/proc/self/fd/{work}", lease.path)
        assert os.path.samefile(f"/proc/self/fd/{generation}", lease.path.parent)
        # Close-on-exec: a command started without pass_fds does not hold them.
        assert not os.get_inheritable(work)
        assert not os.get_inheritable(generation)


def test_pass_fds_of_a_released_lease_raises_unavailable(manager: Manager) -> None:
    lease = manager.acquire()
    lease.release()
    with pytest.raises(Unavailable, match="released"):
        _ = lease.pass_fds
