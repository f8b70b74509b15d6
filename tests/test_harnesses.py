"""Harnesses in other languages, and the holder killed under a storm of them."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.holding import (
    INSPECT,
    SCRIPT,
    Served,
    alive,
    environ,
    leftovers,
    served_root,
    st,
    wait_gone,
)

__all__ = ["served_root"]  # a fixture
HARNESS = Path(__file__).with_name("harness.js")


def verified(root: Path) -> None:
    done = subprocess.run([os.fspath(INSPECT), "--root", os.fspath(root), "verify"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_node_harness_drives_fifty_commands_through_shell_and_nothing_leaks(
        served_root: Served) -> None:
    place = served_root
    owner = place.owner()
    holder = place.start("node-chat", owner)["holder_pid"]
    done = subprocess.run(["node", os.fspath(HARNESS)], capture_output=True, text=True,
                          timeout=600, env=environ(place.root, SESSIONTEMP_BIN=os.fspath(SCRIPT),
                                                   SESSIONTEMP_SESSION="node-chat"))
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    background = outcome["background"]
    try:
        commands = outcome["commands"]
        assert len(commands) == 50
        by_turn: dict[int, set[str]] = {}
        for command in commands:
            expected = 128 + signal.SIGKILL if command["n"] == 7 else 0
            assert command["status"] == expected, command
            by_turn.setdefault(command["turn"], set()).add(command["directory"])
        # One directory a turn, a fresh one after each rotate.
        directories = [d for turn in sorted(by_turn) for d in by_turn[turn]]
        assert all(len(d) == 1 for d in by_turn.values())
        assert len(set(directories)) == 5
        # Each a generation's work directory, one level below the generation.
        assert all(Path(d).parent.parent == place.root for d in directories)
        # Rotated, ended: only the directory the background process still holds is left.
        ended = st("session", "end", "node-chat", "--owner-pid", str(owner.pid),
                   root=place.root)
        assert ended.returncode == 0, ended.stderr
        wait_gone(holder)
        assert alive(background["pid"])
        assert leftovers(place.root) == [Path(background["directory"]).parent.name]
        assert json.loads(st("recover", "--json", root=place.root).stdout)["removed"] == []
        assert os.path.isdir(background["directory"])
    finally:
        os.kill(background["pid"], signal.SIGKILL)
    wait_gone(background["pid"])
    recovered = json.loads(st("recover", "--json", root=place.root).stdout)
    assert [r["path"] for r in recovered["removed"]] == [
        os.fspath(Path(background["directory"]).parent)]
    assert leftovers(place.root) == []
    verified(place.root)


CLIENT = ('touch "$TMPDIR/mine.$$"; echo "$TMPDIR"; sleep 0.05; '
          'test -f "$TMPDIR/mine.$$" || exit 99; rm "$TMPDIR/mine.$$"')


def storm(place: Served, kills: int, clients: int, seed: int) -> None:
    """Start the session, start *clients* commands, SIGKILL the holder among them; *kills* times.

    Every client ran its command in the session's one directory (and found
    its file there when it ended) or exited 2 saying why.
    """
    schedule = random.Random(seed)
    owner = place.owner()
    env = environ(place.root)
    # Every holder after a kill resumes the one directory: a single one, throughout.
    directories: set[str] = set()
    for _ in range(kills):
        holder = place.start("storm", owner)["holder_pid"]
        running = [subprocess.Popen(
            [os.fspath(SCRIPT), "run", "--session", "storm", "--", "sh", "-c", CLIENT],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(clients)]
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].wait(timeout=schedule.uniform(0.0, 0.15))
        os.kill(holder, signal.SIGKILL)
        wait_gone(holder)
        for client in running:
            out, err = client.communicate(timeout=120)
            if client.returncode == 0:
                assert Path(out.strip()).parent.parent == place.root, out
                assert Path(out.strip()).parent.name.startswith("sessiontemp-gen-")
                directories.add(out.strip())
            else:
                assert client.returncode == 2, (client.returncode, out, err)
                (line,) = err.splitlines()
                assert line.startswith("sessiontemp run: no private directory in "), line
                assert "'storm'" in line
    assert len(directories) <= 1, directories
    holder = place.start("storm", owner)["holder_pid"]
    assert st("session", "end", "storm", "--owner-pid", str(owner.pid),
              root=place.root).returncode == 0
    wait_gone(holder)
    st("recover", root=place.root)
    assert leftovers(place.root) == []
    verified(place.root)


def test_the_holder_killed_among_its_clients_leaks_nothing_and_removes_nothing_live(
        served_root: Served) -> None:
    storm(served_root, kills=6, clients=3, seed=31)


@pytest.mark.slow
def test_the_holder_killed_two_hundred_times_among_its_clients(served_root: Served) -> None:
    storm(served_root, kills=200, clients=4, seed=2026)
