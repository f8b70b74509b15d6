"""journal-inspect on journals written by real managers, each run a process of its own.

One journal comes from a process killed with SIGKILL (``tests/crashchild.py``);
the JSON output is checked against the schema documented in docs/reference/json.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from sessiontemp import Manager
from sessiontemp.cli.journal_inspect import SUBCOMMANDS
from sessiontemp.journal import Store, checkpoint, replay
from sessiontemp.journal.events import LeaseReleased
from tests import zygote
from tests.childio import terminal_output
from tests.test_crash import Command
from tests.zygote import journal_inspect

SCRIPT = Path(sys.executable).with_name("journal-inspect")
CHILD = Path(__file__).with_name("crashchild.py")
JSON_DOC = Path(__file__).parents[1] / "docs" / "reference" / "json.md"


def inspect(*args: str | Path, ok: int = 0) -> subprocess.CompletedProcess[str]:
    # The console script's function, in a process forked for the run from one that has
    # imported it: the start-up of a process per run was most of these tests' time.
    # The script itself runs where it matters: on a terminal, following a journal, with
    # arguments that are not UTF-8.
    result = journal_inspect(*args)
    assert result.returncode == ok, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def inspect_json(*args: str | Path, ok: int = 0) -> Any:
    return json.loads(inspect(*args, "--json", ok=ok).stdout)


# -- the documented schema ---------------------------------------------------------


def documented_schema() -> dict[str, Any]:
    section = JSON_DOC.read_text().split("## journal-inspect --json", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None, "the JSON reference documents the schema in a json block"
    schema: dict[str, Any] = json.loads(block.group(1))
    return schema


def conforms(value: Any, schema: Any, types: dict[str, Any], where: str = "$") -> list[str]:
    """Where *value* departs from *schema* in the documented small type language."""
    if isinstance(schema, str):
        for alternative in schema.split("|"):
            if alternative in types:
                if not conforms(value, types[alternative], types, where):
                    return []
                continue
            if {
                "string": isinstance(value, str),
                "integer": isinstance(value, int) and not isinstance(value, bool),
                "number": isinstance(value, int | float) and not isinstance(value, bool),
                "boolean": isinstance(value, bool),
                "null": value is None,
            }[alternative]:
                return []
        return [f"{where}: {value!r} is not {schema}"]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [p for i, item in enumerate(value) for p in conforms(item, schema[0], types,
                                                                     f"{where}[{i}]")]
    if not isinstance(value, dict):
        return [f"{where}: {value!r} is not an object"]
    if "*" in schema:
        return [p for k, v in value.items() for p in conforms(v, schema["*"], types,
                                                                f"{where}.{k}")]
    problems = [f"{where}: keys {sorted(value)} are not {sorted(schema)}"] if (
        value.keys() != schema.keys()) else []
    return problems + [p for k in schema.keys() & value.keys()
                       for p in conforms(value[k], schema[k], types, f"{where}.{k}")]


def assert_documented(kind: str, value: Any) -> None:
    types = documented_schema()
    assert conforms(value, types[kind], types) == []


# -- journals written by real managers -------------------------------------------------


@pytest.fixture
def used_root(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A root whose manager leased, rotated, released and closed; one more left running."""
    root = tmp_path / "root"
    done = Manager(root)
    done.retain()
    first = done.acquire()
    first_generation = first.generation
    first.release()
    done.rotate()
    second = done.acquire()
    second.release()
    done.release()
    done.close()
    running = Manager(root)
    running.retain()
    held = running.acquire()
    yield root, {"closed": done.id, "running": running.id, "rotated": first_generation,
                 "held": held.generation, "lease": held.id, "held_path": held.path}
    held.release()
    running.close()


class Child:
    """A tests/crashchild.py process: a manager in another process that the test kills."""

    def __init__(self, root: Path, pass_fds: tuple[int, ...] = ()) -> None:
        # Forked from a process that has imported the library (tests/zygote.py).
        self.process = zygote.shared("sessiontemp", "tests.childio").start(
            CHILD, [str(root)], stderr=2, pass_fds=pass_fds)
        self.hello = self.read()

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the child answered"
        reply: dict[str, Any] = json.loads(line)
        assert "error" not in reply, reply
        return reply

    def ask(self, *words: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((" ".join(words) + "\n").encode())
        self.process.stdin.flush()
        return self.read()

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()


@pytest.fixture
def killed_root(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A root whose manager process was killed with SIGKILL while holding a lease."""
    root = tmp_path / "root"
    child = Child(root)
    child.ask("retain")
    lease = child.ask("acquire")
    child.kill()
    return root, {"manager": child.hello["manager"], "pid": child.hello["pid"], **lease}


# -- every subcommand --------------------------------------------------------------------


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help(command: str) -> None:
    assert "--json" in inspect(command, "--help").stdout


def test_the_script_has_help_naming_every_subcommand() -> None:
    out = inspect("--help").stdout
    assert all(command in out for command in SUBCOMMANDS)


def test_summary_counts_managers_generations_and_events(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    summary = inspect_json("--root", root)
    assert_documented("summary", summary)
    assert summary["managers"] | {} == {
        "opened": 2, "closed": 1, "dead": 0, "running": 1, "live": 1, "gone": 0,
        "unknown": 0, "sealed": 0, "owners": 1, "before_history": 0,
    }
    assert summary["generations"] == {"total": 3, "live": 1, "retired": 0,
                                      "removal_pending": 0, "removed": 2, "leases_held": 1,
                                      "held_by_commands": 0, "before_history": 0}
    assert [m["id"] for m in summary["running_managers"]] == [ids["running"]]
    assert summary["events"] == summary["last_seq"] > 10
    assert summary["verify"]["ok"] is True
    assert "2 opened, 1 closed" in inspect("--root", root).stdout


def test_summary_names_the_checkpoint_replays_start_from(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    journal = root / "journal.sqlite3"
    assert inspect_json("--root", root)["checkpoint"] is None
    assert "none: replays start from event 1" in inspect("--root", root).stdout
    store = Store(journal)
    try:
        saved = replay(store.records()).seq
        checkpoint.save(store, replay(store.records(until=saved - 1)))
        checkpoint.save(store, replay(store.records(until=saved)))
    finally:
        store.close()
    summary = inspect_json("--root", root)
    assert_documented("summary", summary)
    assert summary["checkpoint"] == saved
    assert (f"at event {saved:,}: replays fold the {summary['last_seq'] - saved:,} events "
            "after it") in inspect("--root", root).stdout
    # In another process: closing a plain connection here would drop the
    # running manager's SQLite locks on the file.
    subprocess.run([sys.executable, "-c", "import sqlite3, sys; sqlite3.connect(sys.argv[1], "
                    "isolation_level=None).execute('UPDATE checkpoints SET format = 0 WHERE "
                    "seq = ?', (int(sys.argv[2]),))", str(journal), str(saved)], check=True)
    assert inspect_json("--root", root)["checkpoint"] == saved - 1


def test_summary_is_the_default_and_takes_a_journal_path(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    by_path = inspect_json(root / "journal.sqlite3")
    assert by_path["root"] is None
    assert by_path["managers"]["unknown"] == 1  # a bare file: liveness cannot be told
    assert by_path["events"] == inspect_json("--root", root, "summary")["events"]


def test_events_lists_every_event_and_filters_them(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    lines = inspect("--root", root, "events", "--json").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    for row in rows:
        assert_documented("event", row)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    leases = inspect("--root", root, "events", "--kind", "lease.acquired", "--json").stdout
    assert len(leases.splitlines()) == 3
    mine = [json.loads(x) for x in inspect("--root", root, "events", "--manager", ids["closed"],
                                           "--json").stdout.splitlines()]
    assert mine[-1]["kind"] == "manager.closed"
    assert all(ids["closed"] in json.dumps(r) for r in mine)
    window = [json.loads(x) for x in inspect("--root", root, "events", "--since", "3",
                                             "--until", "6", "--json").stdout.splitlines()]
    assert [r["seq"] for r in window] == [3, 4, 5, 6]
    assert len(inspect("--root", root, "events", "--limit", "2", "--json").stdout
               .splitlines()) == 2
    gen = inspect("--root", root, "events", "--generation", str(ids["held_path"])).stdout
    assert ids["held"] in gen
    assert "lease.acquired" in gen


def test_events_since_a_time_leaves_out_older_events(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    later = time.time() + 3600
    assert inspect("--root", root, "events", "--since", f"{later:.3f}", "--json").stdout == ""


def test_events_follow_prints_events_other_processes_append(tmp_path: Path) -> None:
    root = tmp_path / "root"
    manager = Manager(root)
    process = subprocess.Popen(
        [str(SCRIPT), "--root", str(root), "events", "--follow", "--json", "--kind", "retain"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        manager.retain()
        assert process.stdout is not None
        line = process.stdout.readline()
        assert json.loads(line)["fields"] == {"manager": manager.id}
        manager.retain()
        assert json.loads(process.stdout.readline())["kind"] == "retain"
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        manager.close()


def test_state_at_a_sequence_number_is_the_state_right_after_that_event(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    at_two = inspect_json("--root", root, "state", "--at", "2")
    assert_documented("state", at_two)
    assert at_two["seq"] == 2
    assert at_two["managers"][ids["closed"]]["owners"] == 1
    assert at_two["generations"] == {}
    end = inspect_json("--root", root, "state")
    assert end["managers"][ids["closed"]]["ended"] == "closed"
    assert end["generations"][ids["held"]]["leases"] == [ids["lease"]]
    assert "generations" in inspect("--root", root, "state", "--at", "2").stdout


def test_state_live_lists_only_what_is_alive_or_owes_work(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    end = inspect_json("--root", root, "state")
    live = inspect_json("--root", root, "state", "--live")
    assert_documented("state", live)
    assert live["seq"] == end["seq"]
    assert ids["closed"] in end["managers"]
    assert ids["closed"] not in live["managers"]
    assert live["generations"][ids["held"]] == end["generations"][ids["held"]]
    assert inspect_json("--root", root, "state", "--live", "--at", "2")["managers"] == (
        inspect_json("--root", root, "state", "--at", "2")["managers"])


def test_state_at_a_time_before_the_first_event_is_empty(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    state = inspect_json("--root", root, "state", "--at", "2001-01-01T00:00:00")
    assert (state["seq"], state["managers"], state["generations"]) == (0, {}, {})


def test_state_at_an_event_past_the_end_is_bad_input(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    assert "event 99999: is not in the journal" in inspect("--root", root, "state", "--at", "99999",
                                                ok=2).stderr


def test_explain_tells_a_rotated_directory_was_removed_by_its_own_manager(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    story = inspect_json("--root", root, "explain", ids["rotated"])
    assert_documented("explain", story)
    assert story["status"] == "removed"
    text = " ".join(s["text"] for s in story["story"])
    assert f"by manager {ids['closed']} (pid {os.getpid()})" in text
    assert "its manager" in text
    assert "rotated" in text
    assert f"its own manager {ids['closed']}, in normal use" in text


def test_explain_tells_a_live_directory_and_who_holds_it(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    out = inspect("--root", root, "explain", ids["held_path"]).stdout
    assert "still live" in out
    assert ids["running"] in out
    assert ids["lease"] in out


def test_a_killed_manager_shows_as_gone_until_fsck_repair_recovers_it(
    killed_root: tuple[Path, dict[str, Any]],
) -> None:
    root, killed = killed_root
    summary = inspect_json("--root", root)
    assert summary["running_managers"][0]["liveness"] == "gone"
    before = inspect_json("--root", root, "fsck", ok=1)
    assert_documented("fsck", before)
    # The dead manager, and its directory that no command holds any more.
    assert [f["check"] for f in before["findings"]] == ["unrecovered", "removable"]
    assert before["findings"][1]["generation"] == killed["generation"]
    assert all("fsck --repair" in f["fix"] for f in before["findings"])
    repaired = inspect_json("--root", root, "fsck", "--repair")
    assert_documented("fsck", repaired)
    assert repaired["repair"]["dead"] == [killed["manager"]]
    assert [r["generation"] for r in repaired["repair"]["removed"]] == [killed["generation"]]
    assert repaired["findings"] == []
    assert inspect("--root", root, "fsck").returncode == 0
    assert inspect_json("--root", root, "verify")["ok"] is True


def test_explain_tells_a_directory_removed_by_recovery_after_its_manager_was_killed(
    killed_root: tuple[Path, dict[str, Any]],
) -> None:
    root, killed = killed_root
    inspect("--root", root, "fsck", "--repair")
    story = inspect_json("--root", root, "explain", killed["path"])
    assert story["status"] == "removed"
    texts = [s["text"] for s in story["story"]]
    assert texts[0].startswith("Created at")
    assert f"(pid {killed['pid']})" in texts[0]
    assert any(f"Lease {killed['lease']} was taken" in t for t in texts)
    assert any("a recovery found its manager" in t and "dead" in t for t in texts)
    assert any("was found dead by recovery" in t and killed["lease"] in t for t in texts)
    removal = next(t for t in texts if t.startswith("Removal was started"))
    assert "by recovery" in removal
    assert f"after manager {killed['manager']} (pid {killed['pid']}) was found dead" in removal
    assert texts[-1].startswith("Removal finished")


def test_verify_passes_on_a_journal_written_by_a_killed_process(
    killed_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = killed_root
    result = inspect_json("--root", root, "verify")
    assert_documented("verify", result)
    assert result["ok"] is True
    assert result["mode"] == "full"


def tampered(root: Path, tmp_path: Path) -> Path:
    """A copy of the journal with a forbidden lease after its manager closed and a bad payload."""
    copy = tmp_path / "tampered.sqlite3"
    shutil.copy(root / "journal.sqlite3", copy)
    conn = sqlite3.connect(copy)
    conn.execute("DROP TRIGGER events_no_update")
    last, closed = conn.execute(
        "SELECT max(seq), (SELECT payload FROM events WHERE kind = 'manager.closed') FROM events"
    ).fetchone()
    manager = json.loads(closed)["manager"]
    conn.execute("INSERT INTO events VALUES (?, 0.0, 'lease.acquired', ?, x'00')",
                 (last + 1, json.dumps({"generation": "nopenopenopenope",
                                        "lease": "0123456789abcdef", "manager": manager})))
    conn.execute("UPDATE events SET payload = '{\"manager\": 7}' WHERE seq = 2")
    conn.commit()
    conn.close()
    return copy


def test_verify_lists_every_problem_and_exits_1(
    used_root: tuple[Path, dict[str, Any]], tmp_path: Path,
) -> None:
    root, _ = used_root
    copy = tampered(root, tmp_path)
    result = inspect_json(copy, "verify", ok=1)
    assert_documented("verify", result)
    checks = {p["check"] for p in result["problems"]}
    assert {"digest", "schema", "rules"} <= checks
    # Closed, and with nothing left to remove: the state has let it go.
    assert any("which is not open" in p["message"] for p in result["problems"])
    assert "problems" in inspect(copy, "verify", ok=1).stdout


def test_fsck_finds_missing_leftover_trash_and_unknown_entries(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    (root / f"sessiontemp-gen-{ids['rotated']}").mkdir()
    (root / "sessiontemp-trash-zzzzzzzzzzzzzzzz").mkdir()
    (root / "notes.txt").write_text("mine")
    # The generation, the leased directory's parent.
    held = Path(ids["held_path"]).parent
    shutil.rmtree(held)
    result = inspect_json("--root", root, "fsck", ok=1)
    checks = sorted(f["check"] for f in result["findings"])
    assert checks == ["missing", "not-removed", "trash", "unknown"]
    assert "problems" in inspect("--root", root, "fsck", ok=1).stdout
    os.makedirs(ids["held_path"])  # for the fixture's own teardown


def test_fsck_of_a_bare_journal_file_asks_for_the_root(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    assert "--root" in inspect(root / "journal.sqlite3", "fsck", ok=2).stderr


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 10, b"SQLite format 3\x00"])
def test_a_corrupt_or_foreign_file_is_one_clear_line_and_exit_2(
    tmp_path: Path, content: bytes,
) -> None:
    path = tmp_path / "journal.sqlite3"
    path.write_bytes(content)
    for command in SUBCOMMANDS:
        extras: dict[str, list[str | Path]] = {"explain": ["x"],
                                               "timeline": ["-o", tmp_path / "t.svg"]}
        extra = extras.get(command, [])
        where = ["--root", tmp_path] if command in ("fsck", "usage") else [path]
        result = inspect(*where, command, *extra, ok=2)
        assert len(result.stderr.strip().splitlines()) == 1
        assert str(path) in result.stderr


def test_a_users_file_given_as_the_journal_is_answered_with_the_path_to_pass(
    tmp_path: Path,
) -> None:
    """Advice to move a file aside is for a root's journal.sqlite3 alone, and nothing is
    printed before the journal is opened."""
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    for command in SUBCOMMANDS:
        if command in ("fsck", "explain", "timeline", "usage"):
            continue
        result = inspect(readme, command, ok=2)
        assert result.stdout == ""
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1
        assert f"journal {readme}: is not a SQLite database. Check the path" in line
        assert "--root DIR" in line
        assert "Move it aside" not in line
    assert readme.read_text() == "# my project\n"
    misplaced = tmp_path / "root" / "journal.sqlite3"
    misplaced.parent.mkdir()
    misplaced.write_text("# my project\n")
    assert "Move it aside" in inspect(misplaced, "events", ok=2).stderr


def test_a_foreign_sqlite_database_is_refused_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    err = inspect(path, ok=2).stderr
    assert str(path) in err
    assert "sessiontemp journal" in err


def test_a_missing_journal_is_exit_2_naming_the_path(tmp_path: Path) -> None:
    assert str(tmp_path / "nope") in inspect(tmp_path / "nope", "events", ok=2).stderr
    assert "journal.sqlite3" in inspect("--root", tmp_path / "nothing", ok=2).stderr
    assert not (tmp_path / "nothing").exists()


def test_inspecting_never_writes_the_journal(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    journal = root / "journal.sqlite3"
    before = journal.read_bytes()
    for command in ("summary", "events", "state", "verify", "fsck"):
        inspect("--root", root, command, ok=0)
    inspect("--root", root, "explain", ids["held"])
    assert journal.read_bytes() == before


def journal_files(root: Path) -> dict[str, tuple[int, int, int]]:
    """The journal's files in *root*: name -> (size, permission bits, owner).

    The bits alone: whether the sticky bit is set on them (which keeps an age
    cleaner off) is the writer's business, not what SQLite makes for a reader.
    """
    return {p.name: (p.stat().st_size, p.stat().st_mode & 0o777, p.stat().st_uid)
            for p in sorted(root.iterdir()) if p.name.startswith("journal.sqlite3")}


def test_inspecting_a_root_no_writer_has_open_leaves_only_sqlites_empty_wal_and_its_index(
    tmp_path: Path,
) -> None:
    """What SQLite itself makes for a read-only reader, and why it is harmless: an empty
    -wal and the -shm index, made as the journal is, which the next writer's close removes."""
    root = tmp_path / "root"
    with Manager(root) as manager:
        manager.retain()
        manager.acquire().release()
    before = journal_files(root)
    assert list(before) == ["journal.sqlite3"]  # the last close removed its -wal and -shm
    content = (root / "journal.sqlite3").read_bytes()
    for command in ("summary", "events", "state", "verify", "fsck"):
        inspect("--root", root, command)
    inspect("--root", root, "timeline", "-o", tmp_path / "t.svg")
    after = journal_files(root)
    size, mode, owner = before["journal.sqlite3"]
    assert after == {"journal.sqlite3": (size, mode, owner),
                     "journal.sqlite3-shm": (32768, mode, owner),
                     "journal.sqlite3-wal": (0, mode, owner)}
    assert (root / "journal.sqlite3").read_bytes() == content
    # A writer takes them as its own and, as the last to close, removes them.
    with Manager(root) as manager:
        manager.retain()
        manager.acquire().release()
    assert list(journal_files(root)) == ["journal.sqlite3"]
    assert inspect_json("--root", root, "verify")["ok"] is True


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to inspect another user's root")
def test_root_inspecting_a_users_root_leaves_the_files_sqlite_made_to_that_user() -> None:
    from tests.nobody import NOBODY, run_as_nobody

    # Not under pytest's temporary directory, which only root may enter.
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-inspect-"))
    try:
        os.chmod(place, 0o755)  # noqa: S103 - nobody must reach the root inside it
        os.chown(place, NOBODY, NOBODY)
        use = "from sessiontemp import Manager\nwith Manager('root') as m:\n    m.retain()\n"
        assert run_as_nobody(use, cwd=place).returncode == 0
        inspect("--root", place / "root")
        files = journal_files(place / "root")
        assert set(files) == {"journal.sqlite3", "journal.sqlite3-shm", "journal.sqlite3-wal"}
        assert {owner for _, _, owner in files.values()} == {NOBODY}
        # So its owner's next manager, which refuses a -wal of another owner, opens it.
        again = run_as_nobody(use, cwd=place)
        assert again.returncode == 0, again.stderr
        assert list(journal_files(place / "root")) == ["journal.sqlite3"]
    finally:
        shutil.rmtree(place)


def test_a_copy_without_its_wal_and_whose_shm_cannot_be_made_is_still_read(
    used_root: tuple[Path, dict[str, Any]], tmp_path: Path,
) -> None:
    root, _ = used_root
    copy = tmp_path / "copy"
    copy.mkdir()
    conn = sqlite3.connect(root / "journal.sqlite3")
    conn.execute(f"VACUUM INTO '{copy / 'journal.sqlite3'}'")
    conn.close()
    conn = sqlite3.connect(copy / "journal.sqlite3")
    conn.execute("PRAGMA journal_mode=WAL")  # as the original: reading needs a -shm file
    conn.close()
    (copy / "journal.sqlite3-shm").mkdir()  # SQLite cannot open its shared memory
    summary = inspect_json(copy / "journal.sqlite3")
    assert summary["events"] == inspect_json("--root", root)["events"]
    assert inspect_json(copy / "journal.sqlite3", "verify")["ok"] is True


def test_long_replays_show_progress_on_a_terminal_only(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    import pty

    root, _ = used_root
    assert "%" not in inspect("--root", root, "verify").stderr
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([str(SCRIPT), "--root", str(root), "verify"], stderr=follower,
                              stdout=subprocess.PIPE, timeout=60, check=True)
        os.close(follower)
        follower = -1
        shown = terminal_output(leader)
        assert b"100%" in shown
        assert done.returncode == 0
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)


def test_events_and_state_of_a_killed_manager_show_it_open_then_dead_after_recovery(
    killed_root: tuple[Path, dict[str, Any]],
) -> None:
    root, killed = killed_root
    before = inspect_json("--root", root, "state")
    assert before["managers"][killed["manager"]]["ended"] is None
    assert before["generations"][killed["generation"]]["leases"] == [killed["lease"]]
    inspect("--root", root, "fsck", "--repair")
    dead = [json.loads(line) for line in inspect(
        "--root", root, "events", "--kind", "manager.dead", "--json").stdout.splitlines()]
    assert [d["fields"]["manager"] for d in dead] == [killed["manager"]]
    after = inspect_json("--root", root, "state")
    assert after["managers"][killed["manager"]]["ended"] == "dead"
    assert after["generations"][killed["generation"]]["removal"] == "finished"
    at_death = inspect_json("--root", root, "state", "--at", str(dead[0]["seq"]))
    assert at_death["managers"][killed["manager"]]["ended"] == "dead"
    assert at_death["generations"][killed["generation"]]["removal"] is None


def test_inspecting_a_journal_while_a_manager_appends_sees_a_consistent_journal(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    child = Child(root)
    try:
        child.ask("retain")
        child.ask("loop", "4")  # answers after its first round, then keeps going
        for _ in range(3):
            summary = inspect_json("--root", root)
            assert summary["verify"]["ok"] is True
            assert min(summary["generations"].values()) >= 0
            assert summary["running_managers"][0]["liveness"] == "live"
            assert inspect_json("--root", root, "verify")["ok"] is True
            state = inspect_json("--root", root, "state")
            assert state["seq"] >= summary["events"]
        assert child.read()["rounds"] > 0
    finally:
        child.kill()


# -- answers that lead somewhere ---------------------------------------------------------


@pytest.fixture
def outlived_root(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], Command, int]]:
    """A root whose manager was killed while a command it started still holds its directory.

    Recovery has run (the manager is declared dead, the directory kept); the
    command runs until the test closes the pipe it reads (the last value).
    """
    root = tmp_path / "root"
    r, w = os.pipe()
    child = Child(root, pass_fds=(r,))
    try:
        child.ask("retain")
        lease = child.ask("acquire")
        command = Command(child.ask("popen", lease["lease"], str(r))["pid"])
    finally:
        os.close(r)
    child.kill()
    Manager(root).close()  # its recovery declares the killed manager dead
    try:
        yield root, {"manager": child.hello["manager"], **lease}, command, w
    finally:
        with contextlib.suppress(OSError):
            os.close(w)
        command.end()


def test_a_directory_a_running_command_holds_after_its_manager_died_is_counted_and_listed(
    outlived_root: tuple[Path, dict[str, Any], Command, int],
) -> None:
    root, ids, command, _ = outlived_root
    summary = inspect_json("--root", root)
    # The journal dropped the lease with the manager; the kernel lock says it is held.
    assert summary["generations"]["leases_held"] == 0
    assert summary["generations"]["held_by_commands"] == 1
    assert summary["held"] == [ids["generation"]]
    assert "1 directories of ended managers still held by running commands" in inspect(
        "--root", root).stdout
    report = inspect_json("--root", root, "fsck")
    assert report["ok"] is True
    assert report["findings"] == []
    assert [(f["check"], f["generation"]) for f in report["held"]] == [
        ("held", ids["generation"])]
    # The command's pid, journaled when the lease started it.
    assert report["held"][0]["message"].endswith(
        f"died, and a command started on one of its leases (pid {command.pid}) still runs")
    assert command.running()


def test_fsck_says_what_recovery_would_still_remove_once_the_command_exits(
    outlived_root: tuple[Path, dict[str, Any], Command, int],
) -> None:
    root, ids, command, w = outlived_root
    os.close(w)
    command.wait_exited()
    report = inspect_json("--root", root, "fsck", ok=1)
    assert_documented("fsck", report)
    assert [(f["check"], f["generation"]) for f in report["findings"]] == [
        ("removable", ids["generation"])]
    finding = report["findings"][0]
    assert f"its manager {ids['manager']}" in finding["message"]
    assert "the next recovery removes it" in finding["message"]
    assert finding["fix"] == f"Run `journal-inspect --root {root} fsck --repair` to do it now"
    text = inspect("--root", root, "fsck", ok=1).stdout
    assert "fix: Run `journal-inspect" in text
    repaired = inspect_json("--root", root, "fsck", "--repair")
    assert [r["generation"] for r in repaired["repair"]["removed"]] == [ids["generation"]]
    assert repaired["ok"] is True
    assert repaired["held"] == []


def test_the_unrecovered_finding_is_a_whole_sentence_with_its_fix(
    killed_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = killed_root
    finding = inspect_json("--root", root, "fsck", ok=1)["findings"][0]
    assert finding["check"] == "unrecovered"
    assert finding["message"].endswith("recovery would declare it dead and remove its "
                                       "directories that no command holds")
    assert "fsck --repair" in finding["fix"]
    assert not finding["message"].endswith("would")


@pytest.mark.parametrize("words", [["sumary"], ["--root", "{root}", "sumary"],
                                   ["{journal}", "evnts"]])
def test_a_mistyped_subcommand_is_answered_with_did_you_mean(
    used_root: tuple[Path, dict[str, Any]], words: list[str],
) -> None:
    root, _ = used_root
    args = [w.format(root=root, journal=root / "journal.sqlite3") for w in words]
    err = inspect(*args, ok=2).stderr
    assert "Did you mean" in err
    assert "'summary'" in err or "'events'" in err
    assert "does not exist" not in err


@pytest.mark.parametrize(("words", "said"), [
    (["--jsn"], "'--jsn': is not an option of summary. Did you mean '--json'?"),
    (["--rot", "{root}"], "'--rot': is not an option. Did you mean '--root'?"),
    (["--root", "{root}", "events", "--kindd", "x"], "Did you mean '--kind'?"),
    (["--root", "{root}", "state", "--folow"],
     "'--folow': is not an option of state. Did you mean '--follow' (an option of events)?"),
    (["--root", "{root}", "summary", "extra"], "'extra': is not an argument of summary"),
    (["--root", "{root}", "state", "--follow"],
     "'--follow': is not an option of state; it is an option of events. See"),
])
def test_a_mistyped_option_is_one_line_naming_the_nearest_option(
    used_root: tuple[Path, dict[str, Any]], words: list[str], said: str,
) -> None:
    root, _ = used_root
    result = inspect(*(w.format(root=root) for w in words), ok=2)
    assert said in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


def test_a_word_that_is_neither_a_subcommand_nor_a_file_is_not_read_as_a_journal() -> None:
    err = inspect("frobnicate", ok=2).stderr
    assert "'frobnicate': is neither a subcommand" in err
    assert "summary, events" in err


def test_a_root_that_is_a_file_is_bad_input_naming_it_and_the_fix(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    err = inspect("--root", afile, ok=2).stderr
    assert f"{afile}: is not a directory" in err
    assert "--root DIR" in err
    assert "Not a directory" not in err
    err = inspect("--root", tmp_path / "nowhere", ok=2).stderr
    assert f"{tmp_path / 'nowhere'}: does not exist" in err


def test_a_root_given_as_the_journal_path_suggests_root(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    err = inspect(root, ok=2).stderr
    assert f"Pass it as --root {root}" in err
    assert "Move it aside" not in err


def test_explain_of_a_path_that_is_no_generation_is_bad_input(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    err = inspect("--root", root, "explain", "/etc", ok=2).stderr
    assert "/etc: is not a sessiontemp generation" in err
    assert "journal-inspect events" in err


def test_explain_of_an_id_the_journal_never_names_exits_1(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = used_root
    assert "never names generation nosuchid" in inspect("--root", root, "explain", "nosuchid",
                                                        ok=1).stdout


@pytest.mark.parametrize(("words", "said"), [
    (["--limit", "-1"], "'-1' is not a whole number of 0 or more"),
    (["--limit", "many"], "'many' is not a whole number of 0 or more"),
    (["--kind", "manager.ded"], "Did you mean 'manager.dead'?"),
    (["--since", "yesterday"], "neither a sequence number nor a time"),
])
def test_a_bad_events_argument_is_exit_2_saying_why_and_what_to_pass(
    used_root: tuple[Path, dict[str, Any]], words: list[str], said: str,
) -> None:
    root, _ = used_root
    result = inspect("--root", root, "events", *words, ok=2)
    assert said in result.stderr
    assert result.stdout == ""


def test_an_events_limit_of_0_lists_nothing(used_root: tuple[Path, dict[str, Any]]) -> None:
    root, _ = used_root
    assert inspect("--root", root, "events", "--limit", "0", "--json").stdout == ""


def test_version_names_the_package_version_and_the_json_schema() -> None:
    from sessiontemp.inspect import SCHEMA

    out = inspect("--version").stdout
    assert out.startswith("journal-inspect (sessiontemp) 0.")
    assert f"JSON schema {SCHEMA}" in out


def test_every_json_document_carries_the_schema_version(
    used_root: tuple[Path, dict[str, Any]], tmp_path: Path,
) -> None:
    from sessiontemp.inspect import SCHEMA

    root, ids = used_root
    documents = {
        "summary": inspect_json("--root", root),
        "state": inspect_json("--root", root, "state"),
        "explain": inspect_json("--root", root, "explain", ids["held_path"]),
        "verify": inspect_json("--root", root, "verify"),
        "fsck": inspect_json("--root", root, "fsck"),
        "timeline": inspect_json("--root", root, "timeline", "-o", tmp_path / "t.svg"),
    }
    lines = inspect("--root", root, "events", "--json").stdout.splitlines()
    documents |= {f"event {i}": json.loads(line) for i, line in enumerate(lines)}
    for name, document in documents.items():
        assert document["schema"] == SCHEMA, name
        assert_documented(name.split()[0], document)


def test_a_root_and_a_journal_whose_paths_are_not_utf8_are_read_and_printed_as_they_are(
    tmp_path: Path,
) -> None:
    odd = os.fsdecode(b"r\xffoot-\xe9")
    root = tmp_path / odd
    with Manager(root) as manager:
        manager.retain()
        manager.acquire().release()
    raw = os.fsencode(root)
    for args in ([b"--root", raw], [raw + b"/journal.sqlite3", b"verify"],
                 [b"--root", raw, b"fsck"]):
        result = subprocess.run([os.fsencode(SCRIPT), *args], capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert raw in result.stdout
    document = json.loads(subprocess.run(
        [os.fsencode(SCRIPT), b"--root", raw, b"--json"], capture_output=True, timeout=120,
        check=True).stdout)
    assert os.fsencode(document["root"]) == raw
    svg = tmp_path / "t.svg"
    inspect("--root", root, "timeline", "-o", svg)
    ElementTree.parse(svg)  # noqa: S314 (our own output) still well-formed XML


# -- what the fault-tolerant core records, told -----------------------------------------


def test_explain_names_a_leases_label_and_the_commands_it_started(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Manager(root) as manager:
        manager.retain()
        lease = manager.acquire(label="make test")
        # It waits for its input, so it still runs when its start is journaled.
        command = lease.popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        command.communicate()
        lease.release()
        texts = [s["text"] for s in inspect_json("--root", root, "explain", lease.path)["story"]]
    assert f"Lease {lease.id} (make test) was taken at" in " ".join(texts)
    assert any(t.startswith(f"Command pid {command.pid} was started under lease {lease.id}")
               for t in texts)
    title = (tmp_path / "t.svg")
    inspect("--root", root, "timeline", "-o", title)
    assert f"lease {lease.id}: make test\ntaken at event" in title.read_text()
    assert f"command pid {command.pid} started at event" in title.read_text()


@pytest.fixture
def refused_root(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A root whose journal holds a record the rules refuse, naming a live generation."""
    root = tmp_path / "root"
    manager = Manager(root)
    manager.retain()
    lease = manager.acquire()
    manager.rotate()
    store = Store(root / "journal.sqlite3")
    try:
        # Written behind the manager's back: a release of a lease never granted.
        (record,) = store.append([LeaseReleased(manager.id, lease.generation, "0" * 16)],
                                 time=time.time())
    finally:
        store.close()
    yield root, {"seq": record.seq, "generation": lease.generation, "path": lease.path}
    lease.release()
    manager.close()


def test_a_record_the_rules_refuse_is_a_finding_and_what_it_names_is_kept(
    refused_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = refused_root
    report = inspect_json("--root", root, "fsck", ok=1)
    assert_documented("fsck", report)
    checks = {f["check"]: f for f in report["findings"]}
    assert checks["refused"]["message"].startswith(f"event {ids['seq']} releases lease")
    assert "journal-inspect" in checks["refused"]["fix"]
    assert checks["kept"]["generation"] == ids["generation"]
    assert f"event {ids['seq']}, which the lifecycle rules refuse" in checks["kept"]["message"]
    assert "rm -r" in checks["kept"]["fix"]


def test_state_explain_and_timeline_read_past_a_refused_record(
    refused_root: tuple[Path, dict[str, Any]], tmp_path: Path,
) -> None:
    root, ids = refused_root
    state = inspect_json("--root", root, "state")
    assert_documented("state", state)
    assert state["refused"] == [ids["seq"]]
    assert state["held"][ids["generation"]] == ids["seq"]
    story = inspect_json("--root", root, "explain", ids["path"])
    assert story["story"][-1]["text"].startswith(f"It is kept: event {ids['seq']}")
    drawn = inspect_json("--root", root, "timeline", "-o", tmp_path / "t.svg")
    assert drawn["refused"] == [ids["seq"]]
    assert drawn["ended"]["refused"] == 1
