"""The retention oracle: retiring history changes no decision and no answer about the present.

One workload of real processes (``tests/oracle.py``: managers named or not,
with budgets, leases, files, commands that close their descriptors,
artifacts, SIGKILLs and closes at fixed steps, recovery passes, one paused
at its checkpoint while other steps run) is played twice, on two fresh
roots: once with the journal's retention off (the default retention, which
a workload this small never reaches), once with ``Retention(0, 0, 0)``
(every checkpoint rolls over, every sealed segment is deleted at once).
Every recovery pass must report the same decisions (removed, skipped, dead)
and every reader (``journal-inspect summary``, ``state``, ``state --live``,
``usage``, ``verify``, ``fsck``, ``explain`` of each live directory) must say
the same about the present, at every ``inspect`` step and at the end.
Hypothesis draws the workloads (``tests/strategies.py`` ``oracle_workloads``);
the default run takes a small sample, ``-m slow`` a large one.
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given

from tests.oracle import Step, Transcript, run_workload
from tests.strategies import oracle_workloads, scaled


def first_difference(off: Transcript, eager: Transcript) -> str:
    """Where two transcripts part, with what each said there."""
    for i, (a, b) in enumerate(zip(off, eager, strict=False)):
        if a != b:
            left = json.dumps(a, indent=1, sort_keys=True).splitlines()
            right = json.dumps(b, indent=1, sort_keys=True).splitlines()
            diff = "\n".join(difflib.unified_diff(left, right, "retention off",
                                                  "Retention(0, 0, 0)", lineterm="", n=2))
            return f"step {i + 1}, {a[0]}:\n{diff}"
    return f"one transcript is longer: {len(off)} and {len(eager)} entries"


def play_both(tmp_path: Path, steps: list[Step]) -> None:
    roots = tmp_path / "off", tmp_path / "eager"
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
    try:
        off = run_workload(roots[0], "off", steps)
        eager = run_workload(roots[1], "eager", steps)
        assert off == eager, ("the same workload decided or answered differently once "
                              "history was retired: " + first_difference(off, eager)
                              + "\nthe workload: " + ", ".join(map(str, steps)))
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


@scaled(0.2, minimum=5)
@given(steps=oracle_workloads(max_scenes=5))
def test_retiring_history_changes_no_recovery_decision_and_no_answer_about_the_present(
        tmp_path_factory: pytest.TempPathFactory, steps: list[Step]) -> None:
    play_both(tmp_path_factory.mktemp("oracle"), steps)


@pytest.mark.slow
def test_retiring_history_changes_nothing_over_many_long_workloads(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # The property is run from inside the test, not as the test: CI's
    # `-m hypothesis` run (tests/conftest.py's ci profile) selects every test
    # Hypothesis drives, and this large sample is for `-m slow` alone.
    @scaled(2.0, minimum=60)
    @given(oracle_workloads(max_scenes=12))
    def long_workloads(steps: list[Step]) -> None:
        play_both(tmp_path_factory.mktemp("oracle"), steps)

    long_workloads()


def test_a_live_directorys_size_is_told_the_same_after_the_history_that_measured_it_was_retired(
        tmp_path: Path) -> None:
    # Found by the property above: explain counted the measurements it read,
    # and dated the peak from them, which retiring history changes.
    three = [Step("open", 0, 0, False), Step("retain", 0, 0, False),
             Step("acquire", 0, 0, False)] * 3
    play_both(tmp_path, [*three, Step("churn", 0, 5, False), Step("pause", 0, 0, False),
                         Step("measure", 0, 0, False), Step("resume", 0, 0, False)])
