"""A recovery pass decides from the journal as it is at its tail, whatever it retires.

A pass replays the journal, then checkpoints, rolls it over and (under
``Retention(0, 0, 0)``) retires the segment it replayed.  Other processes
append all the while.  These tests step real processes (``tests/crashchild.py``
managers, SIGKILLed) in between the pass's replay and its rollover, through
the pass's own step hook, and check that the pass acts on what they appended:

- a directory a command started with ``lease.popen`` still uses (a command
  that closed the lease's lock, as sudo and ssh do) is never removed once its
  manager dies;
- a generation its own manager removed is not "removed" again by the pass
  (records the rules refuse, which ``journal-inspect verify`` would find);
- a manager that closed meanwhile is not reported as having lost its
  liveness lock.

And a pass reports each directory it leaves once: a dead manager's
generation replaced by a copy of itself (a new inode) is one entry, however
many such directories there are.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sessiontemp
from sessiontemp import Report
from sessiontemp._guards.steps import StepKind
from sessiontemp.inspect import verify
from sessiontemp.journal import Retention, Store
from tests.conftest import live_state
from tests.test_crash import TIMEOUT, Child, Lab

JOURNAL = "journal.sqlite3"
# Every checkpoint starts a new segment; every sealed one is deleted once covered.
EAGER = Retention(segment_bytes=0, history_bytes=0, history_age=0)


@pytest.fixture
def lab(root: Path, tmp_path: Path) -> Iterator[Lab]:
    started = Lab(root, tmp_path)
    try:
        yield started
    finally:
        started.shutdown()


def pass_meanwhile(root: Path, meanwhile: Callable[[], None],
                   retention: Retention = EAGER) -> Report:
    """A recovery pass on *root* that retires what it replayed; *meanwhile* runs in between.

    Between its replay and its checkpoint, rollover and retirement (its
    first ``checkpoint`` step), as another process's appends may land.
    """
    met: list[str] = []

    def hook(kind: StepKind, detail: str) -> None:
        if kind == "checkpoint" and not met:
            met.append(detail)
            meanwhile()

    report = sessiontemp.recover(root, retention=retention, step_hook=hook,
                                 busy_timeout=TIMEOUT)
    assert met, "the pass wrote no checkpoint"
    if retention != EAGER:
        return report
    store = Store(root / JOURNAL, readonly=True)
    try:
        # Everything the pass replayed, and what others appended before its rollover.
        assert store.history().retired_until > int(met[0].split()[-1]), "nothing was retired"
    finally:
        store.close()
    return report


def busy(manager: Child) -> None:
    """Enough events that the pass writes a checkpoint (and, at 0 bytes, rolls over)."""
    manager.ask("cycle", "60")


def test_a_directory_a_command_uses_is_kept_when_its_start_was_appended_during_a_pass(
    root: Path, lab: Lab
) -> None:
    daemonizing = lab.child()
    daemonizing.ask("retain")
    used = daemonizing.ask("acquire")
    busy(daemonizing)
    commands = []

    def meanwhile() -> None:
        # A command that lets go of the lease's lock, then its manager dies.
        commands.append(lab.command(
            daemonizing.ask("popen-closing", used["lease"], "120")["pid"]))
        daemonizing.kill()

    report = pass_meanwhile(root, meanwhile)
    (command,) = commands
    assert command.running()
    assert Path(used["path"]).is_dir(), "removed while a command it started still runs"
    assert report.dead == (daemonizing.manager,)
    assert [s.path for s in report.skipped] == [Path(used["path"]).parent]
    assert verify(root / JOURNAL).problems == ()

    # Once the command has exited, the next pass removes what it used.
    command.kill()
    command.wait_exited()
    after = sessiontemp.recover(root, retention=EAGER, busy_timeout=TIMEOUT)
    assert [r.path for r in after.removed] == [Path(used["path"]).parent]
    assert verify(root / JOURNAL).problems == ()
    assert live_state(root).generations == {}


@pytest.mark.parametrize("retention", [EAGER, Retention()], ids=["retired", "kept"])
def test_a_pass_journals_nothing_the_rules_refuse_of_what_others_did_during_it(
    retention: Retention, root: Path, lab: Lab
) -> None:
    self_cleaning = lab.child()
    self_cleaning.ask("retain")
    own = self_cleaning.ask("acquire")
    closing = lab.child()
    closing.ask("retain")
    # Killed as it closes: its end journaled, its liveness lock file still there.
    killed_closing = lab.child("--at", "unlock")
    killed_closing.ask("retain")
    busy(closing)

    def meanwhile() -> None:
        # A manager removes its own generation, then dies.
        self_cleaning.ask("rotate")
        self_cleaning.ask("release-lease", own["lease"])
        assert not Path(own["path"]).exists()
        self_cleaning.kill()
        # A manager closes, and its liveness lock file goes with it.
        closing.ask("release")
        closing.ask("close")
        killed_closing.ask("arm")
        assert killed_closing.step("close") is None

    report = pass_meanwhile(root, meanwhile, retention)
    checked = verify(root / JOURNAL)
    assert checked.problems == (), checked.problems[:5]
    assert report.removed == ()
    assert report.skipped == ()
    assert report.dead == (self_cleaning.manager,)
    assert live_state(root).managers == {}


def replace_by_a_copy(directory: Path) -> None:
    """Copy *directory* aside, remove it and put the copy at its name: a new inode."""
    copy = directory.with_name(directory.name + ".copy")
    subprocess.run(["cp", "-a", str(directory), str(copy)], check=True)
    subprocess.run(["rm", "-rf", str(directory)], check=True)
    os.rename(copy, directory)


@pytest.mark.parametrize("count", [1, 12])
def test_a_dead_managers_generation_replaced_by_a_copy_is_reported_once(
    count: int, root: Path, lab: Lab
) -> None:
    victim = lab.child()
    victim.ask("retain")
    paths = []
    for _ in range(count):
        # The generation (the command's directory is the one entry inside it).
        paths.append(Path(victim.ask("acquire")["path"]).parent)
        victim.ask("rotate")
    victim.kill()
    for path in paths:
        replace_by_a_copy(path)

    report = sessiontemp.recover(root, busy_timeout=TIMEOUT)

    assert report.dead == (victim.manager,)
    assert report.removed == ()
    assert sorted(s.path for s in report.skipped) == sorted(paths)
    assert all(path.is_dir() for path in paths)
    # A later pass reports each of them once again, and journals nothing.
    seq = live_state(root).seq
    again = sessiontemp.recover(root, busy_timeout=TIMEOUT)
    assert sorted(s.path for s in again.skipped) == sorted(paths)
    assert live_state(root).seq == seq
