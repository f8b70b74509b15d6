"""Children forked while other threads use the library never hang, and the parent goes on.

A hung child keeps every lock descriptor it inherited (a lease's, a
manager's liveness lock), so what they guard could never be removed.  The
storm (``tests/forkchild.py``, run as a program of its own so that its
children end the way a program does) forks again and again while threads
open and close managers, acquire, rotate and release, start commands with
``lease.popen`` and keep artifacts; each child releases its copies, closes
its managers and exits within a deadline, by ``os._exit``, by the
interpreter's whole end, or as a process of multiprocessing's 'fork' start
method.  The parent's threads keep working, its manager agrees with the
journal and the disk, and once everything is closed a recovery leaves
nothing behind.  A planted variant whose child waits for a lease's lock, as
the parent's release does, is caught.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX, recover
from tests.forkchild import CHILD_FAILURES

DRIVER = Path(__file__).with_name("forkchild.py")
FORKS = 200


def storm(root: Path, *options: str, timeout: float = 900) -> dict[str, Any]:
    """Run the storm on *root*; its answer."""
    done = subprocess.run([sys.executable, str(DRIVER), "storm", str(root), *options],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=DRIVER.parent.parent)
    assert done.returncode == 0, f"the storm's driver failed:\n{done.stdout}\n{done.stderr}"
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def assert_calm(answer: dict[str, Any], root: Path, forks: int) -> None:
    """Every child exited as asked, the parent went on, and nothing is left behind."""
    # A forking thread that raised says why its count fell short.
    assert answer["forker_raised"] == "", answer["forker_raised"]
    statuses = {CHILD_FAILURES.get(int(code), f"exit status {code}"): n
                for code, n in answer["statuses"].items()}
    assert statuses == {CHILD_FAILURES[0]: forks}, statuses
    assert answer["failures"] == [], answer["failures"]
    assert answer["stuck"] == [], f"threads of the parent stuck: {answer['stuck']}"
    assert all(n > 0 for n in answer["rounds"].values()), answer["rounds"]
    assert answer["works"] == ""
    assert answer["journal"] == "agrees"
    assert answer["disk"] == "agrees"
    report = recover(root)
    assert report.skipped == ()
    assert [n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX))] == []
    assert os.listdir(root / "managers") == []


@pytest.mark.parametrize(("forker", "how"), [
    ("thread", "os._exit"), ("main", "sys.exit"),
    pytest.param("thread", "sys.exit", marks=pytest.mark.slow),
])
def test_children_forked_among_busy_threads_let_go_of_their_copies_and_exit(
    tmp_path: Path, forker: str, how: str,
) -> None:
    root = tmp_path / "root"
    answer = storm(root, "--forks", str(FORKS), "--forker", forker, "--exit", how)
    assert_calm(answer, root, FORKS)


def test_processes_of_multiprocessings_fork_method_among_busy_threads_let_go_and_exit(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    answer = storm(root, "--forks", str(FORKS), "--multiprocessing")
    assert answer["forker_raised"] == "", answer["forker_raised"]
    assert answer["multiprocessing"] == FORKS // 2
    assert_calm(answer, root, FORKS)


@pytest.mark.slow
@pytest.mark.parametrize(("forker", "how"), [("thread", "os._exit"), ("main", "sys.exit")])
def test_a_storm_of_two_thousand_forks_leaves_no_child_hung(
    tmp_path: Path, forker: str, how: str,
) -> None:
    root = tmp_path / "root"
    answer = storm(root, "--forks", "2000", "--forker", forker, "--exit", how,
                   "--multiprocessing")
    assert_calm(answer, root, 2000)


def test_the_storm_finds_a_child_that_waits_for_a_lock_a_thread_of_its_parent_held(
    tmp_path: Path,
) -> None:
    answer = storm(tmp_path / "root", "--forks", "60", "--deadline", "1", "--planted")
    hung = sum(n for code, n in answer["statuses"].items()
               if int(code) in (-signal.SIGALRM, -signal.SIGKILL))
    assert hung > 0, answer["statuses"]
