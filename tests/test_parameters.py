"""Parameters are checked at the edge, before anything is created.

``stale_after`` must be a finite number of seconds >= 0 for both
``Manager`` and ``recover`` (NaN compares false to everything, so a bare
``<`` check would let it through and sweep nothing, or everything), and an
empty root path is refused instead of meaning the current directory.
Each refusal is a ValueError raised before the root, its journal or any
file exists.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import Manager, recover

BAD_AGES = [math.nan, -math.nan, math.inf, -math.inf, -1.0, -1e-9, -1]
OPENERS: dict[str, Callable[..., Any]] = {"Manager": Manager, "recover": recover}


@pytest.mark.parametrize("opener", OPENERS.values(), ids=OPENERS.keys())
@pytest.mark.parametrize("stale_after", BAD_AGES, ids=repr)
def test_a_stale_after_that_is_not_a_finite_age_is_refused_before_anything_is_created(
    root: Path, opener: Callable[..., Any], stale_after: float,
) -> None:
    with pytest.raises(ValueError, match="stale_after: must be a finite number of seconds >= 0"):
        opener(root, stale_after=stale_after)
    assert not root.exists()


@pytest.mark.parametrize("opener", OPENERS.values(), ids=OPENERS.keys())
@pytest.mark.parametrize("stale_after", [0, 0.0, 1e-9, 86400.0, 10**12])
def test_finite_ages_from_zero_up_are_accepted(
    root: Path, opener: Callable[..., Any], stale_after: float,
) -> None:
    if opener is recover:
        # Recovery never makes a root: a manager does.
        Manager(root).close()
    result = opener(root, stale_after=stale_after)
    if isinstance(result, Manager):
        result.close()
    assert (root / "journal.sqlite3").exists()


@pytest.mark.parametrize("opener", OPENERS.values(), ids=OPENERS.keys())
@pytest.mark.parametrize("stale_after", ["60", None, [60]], ids=repr)
def test_a_stale_after_that_is_not_a_number_is_refused(
    root: Path, opener: Callable[..., Any], stale_after: object,
) -> None:
    with pytest.raises(ValueError, match="stale_after"):
        opener(root, stale_after=stale_after)
    assert not root.exists()


@pytest.mark.parametrize("opener", OPENERS.values(), ids=OPENERS.keys())
def test_an_empty_root_path_is_refused_instead_of_using_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opener: Callable[..., Any],
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="root"):
        opener("")
    assert os.listdir(tmp_path) == []


def test_without_the_check_a_nan_age_would_open_the_root(
    root: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tests above can fail: with the check gone, NaN goes through and the root is made."""
    from sessiontemp.recovery import passes as recovery

    monkeypatch.setattr(recovery, "check_stale_after", lambda stale_after: None)
    Manager(root, stale_after=math.nan).close()
    assert root.exists()


@pytest.mark.parametrize("durability", ["", "FULL", "normal", "off", None, 1])
def test_a_durability_other_than_full_or_relaxed_is_refused_naming_both(
    root: Path, durability: object,
) -> None:
    with pytest.raises(ValueError, match="durability: must be one of 'full', 'relaxed', not"):
        Manager(root, durability=durability)  # type: ignore[arg-type]
    assert not root.exists()


@pytest.mark.parametrize("durability", ["full", "relaxed"])
def test_both_durabilities_are_accepted(root: Path, durability: Any) -> None:
    with Manager(root, durability=durability) as manager:
        assert manager.durability == durability
