"""Driving the session holder as a harness does: ``sessiontemp`` processes, owners, kills.

Every test that starts a holder uses :func:`served` (or the ``served_root``
fixture), which kills the holder and every owner it made when the test
ends, so no test leaves a process behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX

SCRIPT = Path(sys.executable).parent / "sessiontemp"
INSPECT = Path(sys.executable).parent / "journal-inspect"


def environ(root: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SESSIONTEMP_ROOT", "SESSIONTEMP_SESSION", "CLAUDE_CODE_SESSION_ID")}
    if root is not None:
        env["SESSIONTEMP_ROOT"] = os.fspath(root)
    return {**env, **extra}


def st(*args: str, root: Path | None = None, env: dict[str, str] | None = None,
       **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``sessiontemp ARGS`` (with SESSIONTEMP_ROOT=*root*), to its end."""
    if not SCRIPT.exists():
        pytest.skip(f"{SCRIPT} is not installed: run `pip install -e .`")
    return subprocess.run([os.fspath(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env=environ(root) if env is None else env, **kwargs)


def leftovers(root: Path) -> list[str]:
    """Generation and trash entries under *root*."""
    return sorted(n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))


def wait_gone(pid: int, timeout: float = 60.0) -> None:
    """Wait (by pidfd) until process *pid*, not our child, has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"process {pid} did not end within {timeout} s"
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    try:
        os.close(os.pidfd_open(pid))
    except ProcessLookupError:
        return False
    return True


class Served:
    """A root with its holder: owners made here, every process killed at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.owners: list[subprocess.Popen[bytes]] = []
        self.holders: set[int] = set()

    def owner(self) -> subprocess.Popen[bytes]:
        """A process to own sessions, killed at the end."""
        process = subprocess.Popen(["sleep", "3600"])
        self.owners.append(process)
        return process

    def start(self, name: str, owner: subprocess.Popen[bytes] | None = None,
              *extra: str) -> dict[str, Any]:
        owner = owner or self.owner()
        done = st("session", "start", name, "--owner-pid", str(owner.pid), "--json", *extra,
                  root=self.root)
        assert done.returncode == 0, done.stderr
        reply: dict[str, Any] = json.loads(done.stdout)
        self.holders.add(reply["holder_pid"])
        return reply

    def sessions(self) -> dict[str, Any]:
        done = st("session", "list", "--json", root=self.root)
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    def run(self, name: str, script: str) -> subprocess.CompletedProcess[str]:
        return st("run", "--session", name, "--", "sh", "-c", script, root=self.root)

    def holder(self) -> int | None:
        pid: int | None = self.sessions()["holder_pid"]
        if pid is not None:
            self.holders.add(pid)
        return pid

    def kill_holder(self) -> int:
        pid = self.holder()
        assert pid is not None, "a holder serves the root"
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        return pid

    def close(self) -> None:
        for pid in self.holders:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid)
        for process in self.owners:
            process.kill()
            process.wait()


@contextmanager
def served(root: Path) -> Iterator[Served]:
    place = Served(root)
    try:
        yield place
    finally:
        place.close()


@pytest.fixture
def served_root(tmp_path: Path) -> Iterator[Served]:
    with served(tmp_path / "root") as place:
        yield place
