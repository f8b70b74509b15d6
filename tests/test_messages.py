"""Each message a newcomer meets names the real reason and the fix that works, word for word.

Every scenario is the one a user met: a mistyped generation given to
``explain``, ``--root`` on a directory that holds no journal, a root
under ``/proc``, a root owned by another user.  The whole line is
compared, so a reason that stops fitting its scenario fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sessiontemp import Manager, default_root
from tests.nobody import NOBODY, as_root, outcome
from tests.zygote import journal_inspect


def test_explain_of_a_generation_name_with_a_mistyped_id_says_the_id_is_wrong(
    root: Path,
) -> None:
    with Manager(root) as manager:
        manager.retain()
    target = root / "sessiontemp-gen-doesnotexist"
    result = journal_inspect("--root", root, "explain", target)
    assert result.returncode == 2
    assert result.stderr == (
        f"journal-inspect: {target}: is not a sessiontemp generation ('doesnotexist' is not "
        "a generation id: sessiontemp names each generation with 16 characters of a-z and "
        "2-7). Name a generation directory of the root, or a generation id (journal-inspect "
        "events --kind generation.created lists them)\n")


def test_journal_inspect_root_on_a_directory_without_a_journal_names_the_right_directory(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = journal_inspect("--root", empty, "summary")
    assert result.returncode == 2
    assert result.stderr == (
        f"journal-inspect: {empty}: holds no journal (journal.sqlite3): no Manager has made "
        "it a root. Check the path: pass the directory a Manager made its root (the "
        f"per-user default is {default_root()}), or name a journal file as PATH\n")
    assert list(empty.iterdir()) == []


def test_a_root_under_proc_is_refused_as_a_virtual_file_system_not_as_removed_meanwhile(
) -> None:
    result = subprocess.run([sys.executable, "-m", "sessiontemp", "run", "--root", "/proc/st",
                             "--", "true"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == (
        "sessiontemp run: /proc/st cannot be created (No such file or directory): /proc takes "
        "no new directories (a virtual file system, as /proc and /sys are). Pass a root on a "
        f"disk's file system, such as the per-user default ({default_root()})\n")


@as_root
def test_a_root_owned_by_another_user_names_the_owner_and_the_users_own_default_root() -> None:
    # Root's root, in a directory any user may pass through (pytest's own is 0700).
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-others-"))
    try:
        # The second user must reach the root to be refused it.
        place.chmod(0o755)
        root = place / "root"
        Manager(root).close()
        expected = (f"{root} cannot be opened (Permission denied): it is owned by uid 0 (root), "
                    f"not by you (uid {NOBODY}). Use a root of your own: the per-user default "
                    f"(/tmp/sessiontemp-{NOBODY}), or pass a directory you own")
        for call in (f"sessiontemp.Manager({str(root)!r})",
                     f"sessiontemp.recover({str(root)!r})"):
            found = outcome(call, cwd=Path("/"))
            assert found["raised"][:3] == ["RootReadOnly", "RootUnusable", "SessionTempError"]
            assert found["message"] == expected
    finally:
        shutil.rmtree(place)
