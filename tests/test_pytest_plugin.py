"""The pytest plugin, run through ``pytester``: a private directory per test, and nothing else.

Inner runs are real pytest runs (in process, or in a subprocess where a run
is killed or spread over xdist workers) against a real root; each inner test
writes what it saw to a file the outer test reads.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX
from sessiontemp.journal.events import GenerationCreated, LeaseAcquired
from tests.commands import journaled

pytest_plugins = ["pytester"]

# Each inner test records its directory's path and mode.
RECORDING = """
import json, os, stat, pytest

def record(path):
    mode = stat.S_IMODE(os.stat(path).st_mode)
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps({"path": str(path), "mode": mode}) + "\\n")
"""


def seen(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def leftovers(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the inner tests write what they saw (through $SEEN)."""
    path = tmp_path / "seen.jsonl"
    path.touch()
    monkeypatch.setenv("SEEN", os.fspath(path))
    return path


def test_each_test_gets_its_own_private_directory_removed_after_it(
    pytester: pytest.Pytester, root: Path, log: Path
) -> None:
    pytester.makepyfile(RECORDING + """
@pytest.mark.parametrize("n", range(3))
def test_writes(sessiontemp_path, n):
    record(sessiontemp_path)
    (sessiontemp_path / "data").write_text("x" * 1000)
    assert os.listdir(sessiontemp_path) == ["data"]
""")
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root))
    result.assert_outcomes(passed=3)
    records = seen(log)
    paths = [Path(str(r["path"])) for r in records]
    assert len(set(paths)) == 3
    # Each inside a generation of the root: journaled, and removed by recovery if pytest dies.
    assert all(p.relative_to(root).parts[0].startswith(GENERATION_PREFIX) for p in paths)
    assert all(r["mode"] == 0o700 for r in records)
    assert not any(p.exists() for p in paths)
    assert leftovers(root) == []


def test_sessiontemp_lease_is_the_lease_behind_the_path_labelled_with_the_node_id(
    pytester: pytest.Pytester, root: Path, log: Path
) -> None:
    pytester.makepyfile(RECORDING + """
def test_starts_a_command(sessiontemp_lease, sessiontemp_path):
    assert sessiontemp_lease.path == sessiontemp_path
    child = sessiontemp_lease.popen(["sh", "-c", 'touch "$TMPDIR/made"'])
    assert child.wait() == 0
    assert (sessiontemp_path / "made").is_file()
    record(sessiontemp_path)
""")
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root))
    result.assert_outcomes(passed=1)
    (acquired,) = journaled(root, LeaseAcquired)
    assert acquired.label == "pytest test_sessiontemp_lease_is_the_lease_behind_the_path_" \
        "labelled_with_the_node_id.py::test_starts_a_command"
    assert leftovers(root) == []


def test_tests_asking_only_for_the_path_journal_one_lease_per_pytest_process_not_one_per_test(
    pytester: pytest.Pytester, root: Path, log: Path
) -> None:
    """Each such test's directory is made and removed without a journal commit of its own."""
    pytester.makepyfile(RECORDING + """
@pytest.mark.parametrize("n", range(5))
def test_writes(sessiontemp_path, n):
    # The directories of the tests before this one are gone already, full or empty.
    with open(os.environ["SEEN"]) as f:
        assert not any(os.path.exists(json.loads(line)["path"]) for line in f)
    record(sessiontemp_path)
    if n % 2:
        (sessiontemp_path / "deep" / "er").mkdir(parents=True)
        (sessiontemp_path / "deep" / "er" / "data").write_text("x")
""")
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root))
    result.assert_outcomes(passed=5)
    paths = {Path(str(r["path"])) for r in seen(log)}
    assert len(paths) == 5
    (acquired,) = journaled(root, LeaseAcquired)
    assert acquired.label == "pytest: the tests' directories"
    assert len(journaled(root, GenerationCreated)) == 1
    assert leftovers(root) == []


def test_a_failing_test_still_has_its_directory_removed(
    pytester: pytest.Pytester, root: Path, log: Path
) -> None:
    pytester.makepyfile(RECORDING + """
def test_fails(sessiontemp_path):
    record(sessiontemp_path)
    raise RuntimeError("boom")
""")
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root))
    result.assert_outcomes(failed=1)
    (record,) = seen(log)
    assert not Path(str(record["path"])).exists()
    assert leftovers(root) == []


def test_a_suite_that_never_asks_for_the_fixtures_opens_nothing_and_creates_no_root(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the given root, nor the default one under the system temporary directory."""
    system_temp = tmp_path / "system-temp"
    system_temp.mkdir()
    monkeypatch.setenv("TMPDIR", os.fspath(system_temp))
    given = tmp_path / "given-root"
    pytester.makepyfile("""
def test_plain(tmp_path):
    assert tmp_path.is_dir()
""")
    for args in ((), ("--sessiontemp-root", os.fspath(given))):
        result = pytester.runpytest_subprocess(*args)
        result.assert_outcomes(passed=1)
    assert not given.exists()
    assert [n for n in os.listdir(system_temp) if n.startswith("sessiontemp")] == []


def test_the_option_defaults_to_the_per_user_root(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: Path
) -> None:
    system_temp = tmp_path / "system-temp"
    system_temp.mkdir()
    monkeypatch.setenv("TMPDIR", os.fspath(system_temp))
    pytester.makepyfile(RECORDING + """
def test_writes(sessiontemp_path):
    record(sessiontemp_path)
""")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    (record,) = seen(log)
    default = system_temp / f"sessiontemp-{os.getuid()}"
    assert Path(str(record["path"])).relative_to(default).parts[0].startswith(GENERATION_PREFIX)
    assert stat.S_IMODE(default.stat().st_mode) == 0o700
    assert leftovers(default) == []


def test_a_run_sigkilled_mid_test_is_cleaned_by_the_next_run(
    pytester: pytest.Pytester, root: Path, log: Path
) -> None:
    pytester.makepyfile(test_killed=RECORDING + """
import signal

def test_killed(sessiontemp_path):
    (sessiontemp_path / "data").write_text("left behind")
    record(sessiontemp_path)
    os.kill(os.getpid(), signal.SIGKILL)
""")
    killed = pytester.runpytest_subprocess("--sessiontemp-root", os.fspath(root),
                                           "test_killed.py")
    assert killed.ret == -9
    (record,) = seen(log)
    left = Path(str(record["path"]))
    assert (left / "data").is_file()

    pytester.makepyfile(test_next=RECORDING + """
def test_next(sessiontemp_path):
    record(sessiontemp_path)
""")
    following = pytester.runpytest_subprocess("--sessiontemp-root", os.fspath(root),
                                              "test_next.py")
    following.assert_outcomes(passed=1)
    assert not left.exists()
    assert leftovers(root) == []


def test_xdist_workers_share_one_root_each_test_with_its_own_directory(
    pytester: pytest.Pytester, root: Path, log: Path
) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(RECORDING + """
@pytest.mark.parametrize("n", range(8))
def test_writes(sessiontemp_path, n):
    record(sessiontemp_path)
    (sessiontemp_path / "worker").write_text(os.environ["PYTEST_XDIST_WORKER"])
""")
    result = pytester.runpytest_subprocess("-n", "2", "--sessiontemp-root", os.fspath(root))
    result.assert_outcomes(passed=8)
    paths = {Path(str(r["path"])) for r in seen(log)}
    assert len(paths) == 8
    assert not any(p.exists() for p in paths)
    assert leftovers(root) == []


def test_the_option_is_in_pytest_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--sessiontemp-root=DIR*"])
