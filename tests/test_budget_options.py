"""``sessiontemp run --max-bytes`` and the plugin's ``--sessiontemp-max-bytes``: loud, never a kill.

Real wrappers run real commands that write real files: a command that
leaves its directory over the budget runs to its end, and then the run
fails (exit 75) with a line naming the directory, its size, the budget,
its largest entries and the fix; a root with too little free space refuses
the command before it starts.  Inner pytest runs (``pytester``) check the
plugin's option the same way.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sessiontemp._kernel.root import WORK_DIR
from sessiontemp.journal.events import GenerationMeasured, SpaceRefused
from sessiontemp.space.usage import human
from tests.commands import journaled
from tests.test_run import launcher, sessiontemp

pytest_plugins = ["pytester"]

MIB = 1 << 20
WRITE = 'head -c {size} /dev/zero > "$TMPDIR/big.bin"; echo ran > {marker}; exit {status}'


def run(root: Path, *options: str, size: int, marker: Path, status: int = 0
        ) -> subprocess.CompletedProcess[str]:
    script = WRITE.format(size=size, marker=marker, status=status)
    return sessiontemp(launcher("script"), "run", "--root", os.fspath(root), *options, "--",
                       "sh", "-c", script)


def test_a_run_that_ends_over_max_bytes_fails_loudly_after_its_command_ran(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    result = run(tmp_path / "root", "--max-bytes", "100K", size=500_000, marker=marker)
    assert result.returncode == 75, result.stderr
    assert marker.read_text() == "ran\n"
    (line,) = result.stderr.splitlines()
    assert line.startswith("sessiontemp run: ")
    assert "sessiontemp-gen-" in line
    assert "of a 100.0 KiB budget" in line
    assert "big.bin (" in line
    assert "raise the budget" in line
    assert "nothing was stopped" in line
    # The measurement is journaled: the size stays in the history.
    (measured,) = journaled(tmp_path / "root", GenerationMeasured)
    assert measured.bytes >= 500_000


def test_a_run_within_its_budget_passes_its_status_through(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ok = run(tmp_path / "root", "--max-bytes", "10M", "--max-inodes", "10", size=1000,
             marker=marker)
    assert (ok.returncode, ok.stderr) == (0, "")
    failed = run(tmp_path / "root", "--max-bytes", "10M", size=1000, marker=marker, status=3)
    assert failed.returncode == 3


def test_a_failing_command_over_its_budget_keeps_its_own_status(tmp_path: Path) -> None:
    result = run(tmp_path / "root", "--max-bytes", "1000", size=200_000,
                 marker=tmp_path / "ran", status=4)
    assert result.returncode == 4
    assert "budget" in result.stderr
    assert "big.bin" in result.stderr


def test_max_inodes_counts_files(tmp_path: Path) -> None:
    script = 'for i in 1 2 3 4 5 6; do touch "$TMPDIR/f$i"; done'
    result = sessiontemp(launcher("script"), "run", "--root", os.fspath(tmp_path / "root"),
                         "--max-inodes", "5", "--", "sh", "-c", script)
    assert result.returncode == 75
    assert "7 inodes of 5" in result.stderr


def test_too_little_free_space_refuses_the_command_before_it_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = run(tmp_path / "root", "--min-free-bytes", str(2**62), size=10, marker=marker)
    assert result.returncode == 75, result.stderr
    assert not marker.exists()
    assert "the command was not started" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    # The journal says so too: which limit, how much was free.
    [refusal] = journaled(tmp_path / "root", SpaceRefused)
    assert (refusal.cause, refusal.limit) == ("min_free_bytes", 2**62)


def test_too_little_free_space_is_said_with_the_option_and_its_value_as_the_command_line_gave_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    result = run(root, "--min-free-bytes", "1000T", size=10, marker=tmp_path / "ran")
    assert result.returncode == 75, result.stderr
    [refusal] = journaled(root, SpaceRefused)
    assert result.stderr == (
        f"sessiontemp run: no private directory in {root}: its file system has "
        f"{human(refusal.found)} free, less than the 1000.0 TiB kept free (--min-free-bytes "
        "1000T); the largest directories under it: none measured yet. Free space (remove "
        "what is big, or rotate and close sessions that are done), pass a root on a larger "
        "file system, or lower the floor (--min-free-bytes 0 turns it off); see "
        "`journal-inspect --root ROOT usage` (the command was not started)\n")


@pytest.mark.parametrize("value", ["-5", "lots", "1.5G", ""])
def test_a_size_that_is_no_size_is_bad_input(tmp_path: Path, value: str) -> None:
    result = sessiontemp(launcher("script"), "run", "--root", os.fspath(tmp_path / "root"),
                         "--max-bytes", value, "--", "true")
    assert result.returncode == 2
    assert "is not a size" in result.stderr
    assert "500M" in result.stderr
    assert not (tmp_path / "root").exists()


# What a command leaves: 1 MiB in one file, a short note, and 500 empty files
# in cache/ (501 inodes with cache/ itself).
CACHE = ('head -c 1048576 /dev/zero > "$TMPDIR/big.bin"; echo hi > "$TMPDIR/notes.txt"; '
         'mkdir "$TMPDIR/cache"; i=0; while [ $i -lt 500 ]; do i=$((i + 1)); '
         ': > "$TMPDIR/cache/f$i"; done')


def over_line(root: Path, *options: str, script: str) -> str:
    """The one line ``sessiontemp run`` says of a directory it leaves over its budget."""
    result = sessiontemp(launcher("script"), "run", "--root", os.fspath(root), *options,
                         "--", "sh", "-c", script)
    assert result.returncode == 75, result.stderr
    (line,) = result.stderr.splitlines()
    (measured,) = journaled(root, GenerationMeasured)
    return line.replace(f"sessiontemp-gen-{measured.generation}", "GEN")


def test_a_run_over_max_bytes_names_its_largest_entries_and_the_option_with_the_value_given(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    line = over_line(root, "--max-bytes", "1K",
                     script='head -c 1048576 /dev/zero > "$TMPDIR/big.bin"')
    assert line == (
        f"sessiontemp run: {root}/GEN/tmp is over its budget: it holds 1.0 MiB of a 1.0 KiB "
        "budget; its largest entries: big.bin (1.0 MiB). Have the command leave less in its "
        "directory ($TMPDIR), or raise the budget (given: --max-bytes 1K); the command ran "
        "to its end, and nothing was stopped")


def test_a_run_over_max_inodes_names_the_entries_holding_the_most_inodes_not_the_largest(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    line = over_line(root, "--max-bytes", "100M", "--max-inodes", "100", script=CACHE)
    assert line == (
        f"sessiontemp run: {root}/GEN/tmp is over its budget: it holds {over_bytes(root)} of a "
        "100.0 MiB budget and 504 inodes of 100; the entries holding the most inodes: cache "
        "(501 inodes), big.bin (1 inode), notes.txt (1 inode). Have the command leave less "
        "in its directory ($TMPDIR), or raise the budget (given: --max-inodes 100); the "
        "command ran to its end, and nothing was stopped")


def over_bytes(root: Path) -> str:
    """What the one measurement journaled under *root* found, as the message words it."""
    (measured,) = journaled(root, GenerationMeasured)
    return f"{measured.bytes / MIB:.1f} MiB"


def test_an_empty_directory_over_its_budget_says_what_it_holds_is_its_own_entry(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    line = over_line(root, "--max-inodes", "0", script="true")
    assert line == (
        f"sessiontemp run: {root}/GEN/tmp is over its budget: it holds 1 inode of 0; it is empty: "
        "what it holds is the directory's own entry, counted as `du -s` counts it. Have the "
        "command leave less in its directory ($TMPDIR), or raise the budget (given: "
        "--max-inodes 0); the command ran to its end, and nothing was stopped")


INNER = """
def test_small(sessiontemp_path):
    (sessiontemp_path / "small").write_bytes(b"x" * 10)

def test_big(sessiontemp_path):
    (sessiontemp_path / "big.bin").write_bytes(b"x" * 500_000)

def test_after(sessiontemp_path):
    assert list(sessiontemp_path.iterdir()) == []
"""


def test_the_plugin_fails_the_test_whose_directory_ends_over_its_budget(
    pytester: pytest.Pytester, root: Path,
) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root),
                                "--sessiontemp-max-bytes", "100000")
    # test_big ran to its end and passed; its teardown is the error. The next test is fresh.
    result.assert_outcomes(passed=3, errors=1)
    text = result.stdout.str()
    assert "ERROR at teardown of test_big" in text
    assert "OverBudget" in text
    assert "big.bin (" in text
    assert "97.7 KiB budget" in text
    # Each test's directory measured as it ended (the manager may measure more on its own).
    assert len(journaled(root, GenerationMeasured)) >= 3


def test_the_plugins_budget_takes_a_size_as_run_does_and_its_refusal_names_the_option_with_the_value_given(  # noqa: E501
    pytester: pytest.Pytester, root: Path,
) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root),
                                "--sessiontemp-max-bytes", "100K")
    result.assert_outcomes(passed=3, errors=1)
    big = [m for m in journaled(root, GenerationMeasured) if m.bytes > 100 * 1024]
    # The error's own line ("E   ..."); the short summary may repeat it, cut to the terminal.
    (line,) = [line for line in result.stdout.lines
               if line.startswith("E ") and "is over its budget" in line]
    generation = f"sessiontemp-gen-{big[-1].generation}"
    assert line.removeprefix("E").strip() == (
        f"sessiontemp.journal.errors.OverBudget: {root / generation / WORK_DIR} is over its "
        "budget: "
        f"it holds {big[-1].bytes / 1024:.1f} KiB of a 100.0 KiB budget; its largest "
        f"entries: big.bin (492.0 KiB). Have the test leave less in its directory, or raise "
        "the budget (given: --sessiontemp-max-bytes 100K)")


def test_the_plugin_refuses_a_budget_that_is_no_number(pytester: pytest.Pytester, root: Path
                                                       ) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest("--sessiontemp-root", os.fspath(root),
                                "--sessiontemp-max-bytes", "lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # The same words as run's --max-bytes: one parser of sizes.
    assert ("argument --sessiontemp-max-bytes: 'lots' is not a size: pass a whole number, or "
            "one with K, M, G or T (binary units), such as 500M") in result.stderr.str()
