"""The placement check: a root inside the workdir sandboxed commands may write is refused.

Paths are judged as the kernel resolves them: through symlinks in the part
that exists, with the part not made yet appended.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sessiontemp.journal.errors import UnsafeRoot
from sessiontemp.space.placement import InsideWorkdir, check, inside, resolve


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_a_root_inside_the_workdir_is_refused_naming_both_and_the_fix(workdir: Path) -> None:
    with pytest.raises(UnsafeRoot) as excinfo:
        check(workdir / ".sessiontemp", workdir)
    message = str(excinfo.value)
    assert str(workdir / ".sessiontemp") in message
    assert f"inside the workdir {workdir}" in message
    assert "Pass a root outside the workdir" in message


def test_the_workdir_itself_as_root_is_refused(workdir: Path) -> None:
    with pytest.raises(UnsafeRoot, match="inside the workdir"):
        check(workdir, workdir)


def test_a_root_beside_the_workdir_is_accepted_even_with_a_common_prefix(
    tmp_path: Path, workdir: Path
) -> None:
    assert not check(tmp_path / "work2" / "root", workdir)
    assert not check(tmp_path / "root", workdir)


def test_a_root_reached_through_a_symlink_into_the_workdir_is_refused(
    tmp_path: Path, workdir: Path
) -> None:
    (tmp_path / "innocent").symlink_to(workdir)
    with pytest.raises(UnsafeRoot, match="inside the workdir"):
        check(tmp_path / "innocent" / "not-made-yet" / "root", workdir)


def test_a_workdir_given_through_a_symlink_is_resolved_too(
    tmp_path: Path, workdir: Path
) -> None:
    (tmp_path / "alias").symlink_to(workdir)
    with pytest.raises(UnsafeRoot, match="inside the workdir"):
        check(workdir / "root", tmp_path / "alias")


def test_dot_dot_after_a_symlink_is_applied_where_the_link_leads(
    tmp_path: Path, workdir: Path
) -> None:
    # work/deep/link -> work/deep2/x: "link/.." is work/deep2, inside, not work/deep.
    (workdir / "deep2" / "x").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(workdir / "deep2" / "x")
    assert resolve(tmp_path / "out" / "link" / ".." / "root") == workdir / "deep2" / "root"
    assert inside(str(tmp_path / "out" / "link") + "/../root", workdir)


def test_a_relative_root_is_judged_from_the_current_directory(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)
    with pytest.raises(UnsafeRoot, match="inside the workdir"):
        check("state/root", workdir)
    assert not check("../elsewhere", workdir)


def test_the_warn_policy_warns_and_logs_instead_of_refusing(workdir: Path) -> None:
    with capture_logs() as logs, pytest.warns(InsideWorkdir, match="inside the workdir"):
        assert check(workdir / "root", workdir, policy="warn")
    assert [entry["event"] for entry in logs] == ["root.inside_workdir"]


@pytest.mark.parametrize("policy", ["", "ignore", "REFUSE"])
def test_an_unknown_policy_is_refused(workdir: Path, policy: str) -> None:
    with pytest.raises(ValueError, match="workdir_policy: must be one of refuse, warn"):
        check(workdir / "root", workdir, policy=policy)  # type: ignore[arg-type]


def test_an_empty_workdir_is_refused(workdir: Path) -> None:
    # It would mean the current directory: never a choice to make by accident.
    with pytest.raises(ValueError, match="workdir: is an empty path"):
        check(workdir / "root", "")


def test_nothing_is_created_by_the_check(tmp_path: Path, workdir: Path) -> None:
    before = sorted(os.listdir(tmp_path))
    check(tmp_path / "a" / "b" / "root", workdir)
    with pytest.raises(UnsafeRoot):
        check(workdir / "a" / "root", workdir)
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(workdir) == []
