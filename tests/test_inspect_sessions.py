"""journal-inspect on a root with named sessions and artifacts: every subcommand shows them.

The root is made by real processes: an owner of session "chat" is SIGKILLed
with a file in its directory, its successor resumes it and keeps an
artifact; an owner of session "other" is SIGKILLed and nobody resumes it.
The JSON output is checked against the schema the JSON reference documents.
"""

from __future__ import annotations

import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import Manager, inspect, recover
from tests import zygote
from tests.test_cli import assert_documented, inspect_json
from tests.test_cli import inspect as run_inspect

TIMEOUT = 20.0

KILLED_OWNER = textwrap.dedent("""
    import os, signal, sys
    from sessiontemp import Manager
    manager = Manager(sys.argv[1], session=sys.argv[2], resume_window=3600.0)
    manager.retain()
    lease = manager.acquire(label="work")
    (lease.path / "notes.txt").write_text("draft")
    print(lease.path, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def killed_owner(root: Path, session: str) -> Path:
    """Run an owner of *session* until it has a file in its directory, then SIGKILL it.

    It kills itself, a process forked from the zygote (tests/zygote.py).
    """
    child = zygote.shared("sessiontemp").run(["-c", str(root), session], script=KILLED_OWNER,
                                             timeout=TIMEOUT)
    assert child.returncode == -signal.SIGKILL, child.stderr
    return Path(child.stdout.strip())


@pytest.fixture
def session_root(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    root = tmp_path / "root"
    resumed = killed_owner(root, "chat")
    successor = Manager(root, session="chat")
    assert successor.resumed
    successor.retain()
    with successor.acquire() as lease:
        artifact = lease.keep("notes.txt", "notes.txt")
    left = killed_owner(root, "other")
    recover(root)
    yield root, {"resumed": resumed, "left": left, "artifact": artifact,
                 "successor": successor.id}
    successor.close()


def test_state_lists_each_session_with_its_owner_window_touch_and_kept_directory(
    session_root: tuple[Path, dict[str, Any]],
) -> None:
    root, made = session_root
    state = inspect.state_at(root / "journal.sqlite3").state
    chat, other = state.sessions["chat"], state.sessions["other"]
    assert (chat.owner, chat.adoptions, chat.kept) == (made["successor"], 1, None)
    assert chat.used_at is not None
    assert (other.window, other.kept) == (3600.0, made["left"].parent.name.rsplit("-", 1)[1])
    [artifact] = state.artifacts.values()
    assert (artifact.sha256, artifact.label, artifact.session) == (
        made["artifact"].sha256, "notes.txt", "chat")
    text = run_inspect("--root", root, "state").stdout
    assert "sessions\n" in text
    assert "3600 s" in text
    assert made["artifact"].sha256 in text


def test_the_json_of_every_subcommand_fits_the_documented_schema(
    session_root: tuple[Path, dict[str, Any]],
) -> None:
    root, made = session_root
    state = inspect_json("--root", root, "state")
    assert_documented("state", state)
    assert state["sessions"]["chat"]["adoptions"] == 1
    assert state["artifacts"][made["artifact"].id]["size"] == 5
    summary = inspect_json("--root", root, "summary")
    assert_documented("summary", summary)
    assert summary["sessions"] == {"claims": 3, "resumed": 1, "discarded": 0}
    assert summary["artifacts"] == {"kept": 1, "removed": 0}
    assert [m["session"] for m in summary["running_managers"]] == ["chat"]
    # An adoption is read whole: the quick check finds nothing wrong with it.
    assert summary["verify"]["ok"]
    fsck = inspect_json("--root", root, "fsck")
    assert_documented("fsck", fsck)
    explain = inspect_json("--root", root, "explain", made["resumed"])
    assert_documented("explain", explain)


def test_explain_tells_the_directory_was_kept_then_adopted(
    session_root: tuple[Path, dict[str, Any]],
) -> None:
    root, made = session_root
    story = inspect.explain(root / "journal.sqlite3", str(made["resumed"]), root)
    kinds = [s.kind for s in story.sentences]
    assert "session.adopted" in kinds
    assert any(s.kind == "manager.dead" and "Kept" in s.text and "session chat" in s.text
               for s in story.sentences)
    assert story.manager == made["successor"]
    kept = inspect.explain(root / "journal.sqlite3", str(made["left"]), root)
    assert "kept for session other's resume" in kept.sentences[-1].text


def test_fsck_lists_a_kept_directory_as_resumable_not_as_a_problem(
    session_root: tuple[Path, dict[str, Any]],
) -> None:
    root, made = session_root
    report = inspect.fsck(root)
    assert report.ok
    # Found by generation, the leased directory's parent.
    assert [(f.check, f.path) for f in report.held] == [("resumable", made["left"].parent)]


def test_fsck_reports_an_artifact_whose_file_is_gone(
    session_root: tuple[Path, dict[str, Any]],
) -> None:
    root, made = session_root
    made["artifact"].path.unlink()
    report = inspect.fsck(root)
    assert [(f.check, f.path) for f in report.findings] == [("lost", made["artifact"].path)]


def test_state_lists_a_session_whose_owner_closed_though_the_live_state_forgot_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    for _ in range(2):
        with Manager(root, session="done") as manager:
            assert not manager.resumed
            manager.retain()
            with manager.acquire():
                pass
            manager.release()
    journal = root / "journal.sqlite3"
    # Both owners closed and their directories are gone: nothing of it is left.
    assert "done" not in inspect.state_at(journal, live=True).state.sessions
    with Manager(root) as manager:
        assert "done" not in manager.state.sessions
    told = inspect.state_at(journal).state.sessions["done"]
    assert told.used_at is not None
    assert "done" in run_inspect("--root", root, "state").stdout
    assert inspect_json("--root", root, "summary")["sessions"]["claims"] == 2
