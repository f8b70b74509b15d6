"""A forked child never hangs, whatever the parent's other threads were doing at the fork.

A hung child keeps every lock descriptor it inherited, so the directories
they guard could never be removed: each child here must release its copy
of a lease, close its copies of the managers and exit within a deadline,
by ``os._exit`` (forked from a thread) or by ``sys.exit`` (forked from the
main thread, through the interpreter's whole shutdown), while threads of
the parent open and close managers, acquire, rotate and release, start
commands with ``lease.popen`` and keep artifacts; then
processes started with multiprocessing's ``fork`` method do the same.  The
parent goes on: its manager works and agrees with the journal, and once
all is closed a recovery leaves nothing behind.  The storm runs in a
process of its own (``tests/forkstorm.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parents[1]
DRIVER = Path(__file__).with_name("forkstorm.py")


def storm(root: Path, *options: str, timeout: float = 900) -> dict[str, Any]:
    # A process of its own, not one forked from the zygote: the children that
    # exit by sys.exit must run a real interpreter's shutdown, which the
    # zygote's children end early with os._exit.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(DRIVER), str(root), *options], cwd=HERE,
                          env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, (f"the storm's driver failed ({done.returncode}):\n"
                                  f"{done.stdout}\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def assert_calm(result: dict[str, Any], forks: int, main_forks: int, pool: int) -> None:
    # A forking thread that raised says why its count fell short.
    assert result["forker_raised"] == "", result["forker_raised"]
    assert (result["forks"], result["main_forks"], result["pool"]) == (forks, main_forks, pool)
    assert (result["hung"], result["pool_hung"]) == (0, 0), result
    assert (result["failed"], result["pool_failed"]) == (0, 0), result
    assert result["errors"] == [], result["errors"]
    # Every worker kept working through the storm.
    assert all(n > 0 for n in result["rounds"].values()), result["rounds"]
    assert result["works"] == ""
    assert result["journal"] == "agrees"
    assert result["left"] == [], result
    assert result["skipped"] == [], result
    assert result["problems"] == []


def test_children_forked_among_busy_threads_release_close_and_exit(tmp_path: Path) -> None:
    result = storm(tmp_path / "root", "--forks", "200", "--main-forks", "50", "--pool", "20")
    assert_calm(result, 200, 50, 20)


@pytest.mark.slow
def test_a_storm_of_two_thousand_forks_and_two_hundred_fork_processes_leaves_none_hung(
    tmp_path: Path,
) -> None:
    result = storm(tmp_path / "root", "--forks", "2000", "--main-forks", "500", "--pool",
                   "200")
    assert_calm(result, 2000, 500, 200)


def test_the_storm_catches_a_child_handler_that_waits_for_a_lock_of_the_parent(
    tmp_path: Path,
) -> None:
    # It stops at the first child that hangs.
    result = storm(tmp_path / "root", "--forks", "200", "--main-forks", "0", "--pool", "0",
                   "--deadline", "2", "--planted")
    assert result["hung"] == 1
