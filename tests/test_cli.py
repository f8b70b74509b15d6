"""journal-inspect through the real console script, on journals written by real managers.

One journal comes from a process killed with SIGKILL (``tests/crashchild.py``);
the JSON output is checked against the schema documented in the README.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from journal import Store, checkpoint, replay
from sessiontemp import Manager
from sessiontemp.cli import SUBCOMMANDS

SCRIPT = Path(sys.executable).with_name("journal-inspect")
CHILD = Path(__file__).with_name("crashchild.py")
README = Path(__file__).parents[1] / "README.md"


def inspect(*args: str | Path, ok: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == ok, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def inspect_json(*args: str | Path, ok: int = 0) -> Any:
    return json.loads(inspect(*args, "--json", ok=ok).stdout)


# -- the documented schema ---------------------------------------------------------


def documented_schema() -> dict[str, Any]:
    section = README.read_text().split("## journal-inspect", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None, "the README documents the JSON schema in a json block"
    schema: dict[str, Any] = json.loads(block.group(1))
    return schema


def conforms(value: Any, schema: Any, types: dict[str, Any], where: str = "$") -> list[str]:
    """Where *value* departs from *schema* in the README's small type language."""
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

    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(root)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )
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
        self.process.stdin.write(" ".join(words) + "\n")
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
        "unknown": 0, "sealed": 0, "owners": 1,
    }
    assert summary["generations"] == {"total": 3, "live": 1, "retired": 0,
                                      "removal_pending": 0, "removed": 2, "leases_held": 1,
                                          "held_by_commands": 0}
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
    assert "there is no event 99999" in inspect("--root", root, "state", "--at", "99999",
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
                 (last + 1, json.dumps({"generation": "nope", "lease": "l",
                                        "manager": manager})))
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
    assert any("which is closed" in p["message"] for p in result["problems"])
    assert "problems" in inspect(copy, "verify", ok=1).stdout


def test_fsck_finds_missing_leftover_trash_and_unknown_entries(
    used_root: tuple[Path, dict[str, Any]],
) -> None:
    root, ids = used_root
    (root / f"sessiontemp-gen-{ids['rotated']}").mkdir()
    (root / "sessiontemp-trash-zzzz").mkdir()
    (root / "notes.txt").write_text("mine")
    shutil.rmtree(ids["held_path"])
    result = inspect_json("--root", root, "fsck", ok=1)
    checks = sorted(f["check"] for f in result["findings"])
    assert checks == ["missing", "not-removed", "trash", "unknown"]
    assert "problems" in inspect("--root", root, "fsck", ok=1).stdout
    os.mkdir(ids["held_path"])  # for the fixture's own teardown


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
        extra = ["x"] if command == "explain" else []
        where = ["--root", tmp_path] if command == "fsck" else [path]
        result = inspect(*where, command, *extra, ok=2)
        assert len(result.stderr.strip().splitlines()) == 1
        assert str(path) in result.stderr


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
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
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
