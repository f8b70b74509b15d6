"""The journal file: its schema, atomic appends, concurrent writers, verification, refusals."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import resource
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontemp.journal import (
    SCHEMA_VERSION,
    SEGMENTED_VERSION,
    Event,
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalReadOnly,
    JournalVersionError,
    Record,
    Store,
    testing,
)
from sessiontemp.journal.events import ManagerOpened, RecoveryStarted, Retained, Rotated
from sessiontemp.journal.ledger import Ledger
from sessiontemp.journal.reducer import EMPTY, replay
from sessiontemp.journal.store import APPLICATION_ID
from tests.strategies import events, manager_id, scaled, times

SQLITE_MAGIC = b"SQLite format 3\x00"

batches = st.lists(st.lists(events(), min_size=1, max_size=4), min_size=1, max_size=5)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    s = Store(path)
    yield s
    s.close()


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection in autocommit mode, outside the Store."""
    return sqlite3.connect(path, isolation_level=None)


def fill(store: Store, count: int = 5, *, time_: float = 1_700_000_000.5) -> list[Record]:
    return store.append([Retained(manager_id(f"m{i}")) for i in range(count)], time=time_)


def drop_trigger(path: Path, action: str) -> None:
    """Drop the trigger that refuses *action* ("UPDATE" or "DELETE") on the events table."""
    conn = raw(path)
    try:
        names = [
            name for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'"
            ) if f"BEFORE {action}" in sql.upper()
        ]
        assert names, f"no trigger refuses {action}"
        for name in names:
            conn.execute(f'DROP TRIGGER "{name}"')
    finally:
        conn.close()


def mentions(problems: list[str], seq: int) -> bool:
    return any(re.search(rf"\b{seq}\b", problem) for problem in problems)


# -- the schema -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = '{\"manager\":\"x\"}' WHERE seq = 2",
        "UPDATE events SET time = 0 WHERE seq = 1",
        "UPDATE events SET kind = 'release' WHERE seq = 3",
        "UPDATE events SET digest = x'00' WHERE seq = 5",
        "UPDATE events SET seq = seq + 100",
        "INSERT INTO events (seq, time, kind, payload, digest) "
        "VALUES (2, 0, 'retain', '{\"manager\":\"x\"}', x'00') "
        "ON CONFLICT(seq) DO UPDATE SET payload = excluded.payload",
    ],
)
def test_the_events_table_refuses_update_with_the_triggers_message(
    store: Store, path: Path, statement: str
) -> None:
    before = fill(store)
    conn = raw(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="sessiontemp events are append-only"):
            conn.execute(statement)
    finally:
        conn.close()
    assert list(store.records()) == before
    assert store.verify() == []


@pytest.mark.parametrize(
    "statement",
    ["DELETE FROM events WHERE seq = 3", "DELETE FROM events", "DELETE FROM events WHERE seq = 5"],
)
def test_the_events_table_refuses_delete_with_the_triggers_message(
    store: Store, path: Path, statement: str
) -> None:
    before = fill(store)
    conn = raw(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="sessiontemp events are append-only"):
            conn.execute(statement)
    finally:
        conn.close()
    assert list(store.records()) == before


@pytest.mark.parametrize("verb", ["INSERT OR REPLACE", "REPLACE"])
def test_the_events_table_refuses_to_replace_a_committed_event(
    store: Store, path: Path, verb: str
) -> None:
    # REPLACE deletes the old row without firing DELETE triggers (SQLite
    # runs them for REPLACE only with recursive_triggers on): "nothing
    # written is ever rewritten" needs a guard against it too.
    before = fill(store)
    conn = raw(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(
                f"{verb} INTO events (seq, time, kind, payload, digest) "
                "VALUES (2, 0, 'retain', '{\"manager\":\"x\"}', x'00')"
            )
    finally:
        conn.close()
    assert list(store.records()) == before


@pytest.mark.parametrize("seq", [7, 100, 0, -1], ids=["gap", "far", "zero", "negative"])
def test_the_events_table_refuses_an_insert_out_of_sequence(
    store: Store, path: Path, seq: int
) -> None:
    before = fill(store)
    conn = raw(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(
                "INSERT INTO events (seq, time, kind, payload, digest) "
                "VALUES (?, 0, 'retain', '{\"manager\":\"x\"}', x'00')",
                (seq,),
            )
    finally:
        conn.close()
    assert list(store.records()) == before
    assert [r.seq for r in fill(store, 1)] == [6]


def test_the_store_connection_uses_wal_with_full_synchronous_commits(store: Store) -> None:
    conn = testing.connection(store)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_a_new_journal_carries_the_schema_version_and_the_application_id(
    store: Store, path: Path
) -> None:
    fill(store, 1)
    conn = raw(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        assert application_id == APPLICATION_ID
        assert application_id != 0
        # WAL is a property of the file, so every later connection gets it too.
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_reopening_a_journal_keeps_everything_and_continues_the_sequence(path: Path) -> None:
    first = Store(path)
    before = fill(first, 3)
    first.close()
    second = Store(path)
    try:
        after = fill(second, 2)
        assert [r.seq for r in after] == [4, 5]
        assert list(second.records()) == before + after
        assert second.verify() == []
    finally:
        second.close()


def test_only_creating_a_journal_imports_sqlite_utils(tmp_path: Path) -> None:
    """A process that opens a root made before (a command's wrapper, journal-inspect) skips it.

    sqlite_utils and what it imports are about a quarter of the package's
    import time, and only the creation of a journal's schema uses them.
    """
    script = textwrap.dedent("""
        import sys
        from sessiontemp import Manager
        with Manager(sys.argv[1]) as manager:
            manager.retain()
            manager.acquire().release()
            manager.release()
        print("sqlite_utils" in sys.modules)
    """)

    def imported(root: Path) -> str:
        return subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()

    root = tmp_path / "root"
    assert imported(root) == "True"  # made the journal
    assert imported(root) == "False"


# -- appending ----------------------------------------------------------------------------


@scaled(0.15)
@given(batches=batches, time_=times())
def test_append_returns_records_with_consecutive_seqs_and_records_reads_them_back(
    batches: list[list[Event]], time_: float
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = Store(Path(directory) / "journal.sqlite3")
        try:
            written: list[Record] = []
            for batch in batches:
                records = store.append(batch, time=time_)
                assert [r.event for r in records] == batch
                assert [r.seq for r in records] == list(
                    range(len(written) + 1, len(written) + len(batch) + 1)
                )
                assert all(r.time == time_ for r in records)
                written += records
                assert store.last_seq() == len(written)
            assert list(store.records()) == written
            middle = len(written) // 2
            assert list(store.records(after=middle)) == written[middle:]
            assert store.verify() == []
        finally:
            store.close()


def test_an_empty_journal_has_no_records_and_last_seq_zero(store: Store) -> None:
    assert list(store.records()) == []
    assert store.last_seq() == 0
    assert store.verify() == []
    assert store.append([], time=1.0) == []
    assert store.last_seq() == 0


@pytest.mark.parametrize(
    "bad",
    [
        cast(Any, ManagerOpened("m", cast(Any, object()))),  # a field JSON cannot hold
        cast(Any, object()),  # not an event at all
    ],
    ids=["unencodable-field", "not-an-event"],
)
def test_a_batch_with_an_event_that_cannot_be_encoded_commits_nothing(
    store: Store, bad: Event
) -> None:
    before = fill(store, 3)
    with pytest.raises((TypeError, AttributeError, ValueError, JournalError)):
        store.append([Retained(manager_id("a")), bad, Retained(manager_id("b"))], time=2.0)
    assert list(store.records()) == before
    assert [r.seq for r in fill(store, 1)] == [4]
    assert store.verify() == []


def test_a_sqlite_failure_mid_transaction_commits_nothing(store: Store, path: Path) -> None:
    before = fill(store, 3)
    conn = raw(path)
    try:
        conn.execute(
            "CREATE TRIGGER test_refuse_rotate BEFORE INSERT ON events "
            "WHEN NEW.kind = 'rotate' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    finally:
        conn.close()
    a, b, c = (manager_id(name) for name in "abc")
    with pytest.raises(JournalError, match="refused by the test"):
        store.append([Retained(a), Retained(b), Rotated(a), Retained(c)], time=2.0)
    assert list(store.records()) == before
    assert [r.seq for r in fill(store, 2)] == [4, 5]
    assert store.verify() == []


def test_an_interruption_mid_transaction_commits_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessiontemp.journal.store import commit, digests

    before = fill(store, 3)
    real_chain = digests.chain
    calls = 0

    def interrupted_chain(*args: Any) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return real_chain(*args)

    monkeypatch.setattr(commit, "chain", interrupted_chain)
    with pytest.raises(KeyboardInterrupt):
        store.append([Retained(manager_id(f"x{i}")) for i in range(5)], time=2.0)
    monkeypatch.undo()
    assert calls == 3
    assert list(store.records()) == before
    assert [r.seq for r in fill(store, 1)] == [4]
    assert store.verify() == []


def test_a_time_sqlite_cannot_store_commits_nothing(store: Store) -> None:
    before = fill(store, 2)
    with pytest.raises(JournalError):
        store.append([Retained(manager_id("a")), Retained(manager_id("b"))], time=float("nan"))
    assert list(store.records()) == before


# -- several writers ------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sessiontemp.journal import Store
    from sessiontemp.journal.events import RecoveryStarted

    path, name, count, open_first = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ready, go = Path(path + "." + name + ".ready"), Path(path + ".go")
    store = Store(path) if open_first == "1" else None
    ready.touch()
    while not go.exists():
        time.sleep(0.001)
    if store is None:
        store = Store(path)
    for i in range(count):
        # Batches of one and two events, numbered per writer.
        batch = [RecoveryStarted(name, 2 * i + k + 1) for k in range(1 + i % 2)]
        records = store.append(batch, time=time.time())
        first = records[0].seq
        assert [r.seq for r in records] == list(range(first, first + len(batch)))
    store.close()
    """
)


def run_writers(path: Path, writers: int, appends: int, *, open_first: bool) -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"{n:016x}", str(appends),
             "1" if open_first else "0"],
            stderr=subprocess.PIPE,
        )
        for n in range(writers)
    ]
    try:
        deadline = time.monotonic() + 30
        while not all(Path(f"{path}.{n:016x}.ready").exists() for n in range(writers)):
            assert all(p.poll() is None for p in processes), "a writer died before starting"
            assert time.monotonic() < deadline, "the writers did not start"
            time.sleep(0.005)
        Path(f"{path}.go").touch()
        for p in processes:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err.decode()
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()


OPENER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sessiontemp.journal import Store

    # One round after another: say it is ready, wait for the word, open that round's
    # new journal.  Starting once for every round keeps the start-up out of the race.
    directory, rounds = Path(sys.argv[1]), int(sys.argv[2])
    for n in range(rounds):
        path = directory / f"journal{n}.sqlite3"
        go = Path(f"{path}.go")
        print(n, flush=True)
        while not go.exists():
            time.sleep(0.0005)
        Store(path, busy_timeout=10).close()
    """
)


@pytest.mark.parametrize("rounds", [
    pytest.param(30, id="short"), pytest.param(200, id="long", marks=pytest.mark.slow),
])
def test_processes_creating_one_new_journal_at_the_same_moment_all_open_it(
    tmp_path: Path, rounds: int
) -> None:
    # One of them writes the first header while the others switch to WAL;
    # SQLite reports that conflict as busy without waiting, so the store waits.
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), str(rounds)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(6)]
    try:
        for n in range(rounds):
            path = tmp_path / f"journal{n}.sqlite3"
            # Each one has opened the previous round's journal and waits for this one.
            for p in openers:
                line = p.stdout.readline() if p.stdout else ""
                if line != f"{n}\n":
                    p.kill()
                    pytest.fail(f"round {n}: {line!r} {p.communicate(timeout=60)[1]}")
            Path(f"{path}.go").touch()
        for p in openers:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
        for n in range(rounds):
            store = Store(tmp_path / f"journal{n}.sqlite3", readonly=True)
            try:
                assert store.last_seq() == 0
            finally:
                store.close()
    finally:
        for p in openers:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("open_first", [True, False], ids=["opened-first", "created-at-once"])
def test_concurrent_writer_processes_get_a_gap_free_sequence_each_in_its_own_order(
    tmp_path: Path, open_first: bool
) -> None:
    path = tmp_path / "journal.sqlite3"
    if open_first:
        Store(path).close()
    writers, appends = 4, 200
    run_writers(path, writers, appends, open_first=open_first)

    store = Store(path, readonly=True)
    try:
        records = list(store.records())
        assert store.verify() == []
    finally:
        store.close()
    per_writer = appends + appends // 2
    assert len(records) == writers * per_writer
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    for n in range(writers):
        mine = [r.event for r in records if cast(RecoveryStarted, r.event).recovery == f"{n:016x}"]
        expected = [2 * i + k + 1 for i in range(appends) for k in range(1 + i % 2)]
        assert [cast(RecoveryStarted, e).pid for e in mine] == expected
    # Each batch is contiguous: the second event of a batch follows its first.
    for first, second in itertools.pairwise(records):
        event = cast(RecoveryStarted, second.event)
        if event.pid % 2 == 0:
            assert first.event == RecoveryStarted(event.recovery, event.pid - 1)


@pytest.mark.parametrize("stores", [1, 2], ids=["one-store", "two-stores"])
def test_threads_appending_at_once_get_a_gap_free_sequence_each_in_its_own_order(
    path: Path, stores: int
) -> None:
    opened = [Store(path) for _ in range(stores)]
    threads_, appends = 4, 50
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(appends):
                opened[n % stores].append([RecoveryStarted(f"{n:016x}", i + 1)], time=float(i))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads_)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
        assert errors == []
        records = list(opened[0].records())
        assert [r.seq for r in records] == list(range(1, threads_ * appends + 1))
        for n in range(threads_):
            mine = [cast(RecoveryStarted, r.event) for r in records]
            assert [e.pid for e in mine if e.recovery == f"{n:016x}"] == list(range(1, appends + 1))
        assert opened[-1].verify() == []
    finally:
        for s in opened:
            s.close()


def test_closing_a_store_twice_is_harmless(path: Path) -> None:
    store = Store(path)
    fill(store, 1)
    store.close()
    store.close()
    again = Store(path)
    try:
        assert again.last_seq() == 1
    finally:
        again.close()


# -- verification -------------------------------------------------------------------------


@scaled(0.1)
@given(batches=batches, time_=times())
def test_verify_finds_nothing_wrong_in_a_journal_the_store_wrote(
    batches: list[list[Event]], time_: float
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = Store(Path(directory) / "journal.sqlite3")
        try:
            for batch in batches:
                store.append(batch, time=time_)
            assert store.verify() == []
        finally:
            store.close()


@pytest.mark.parametrize("time_", [1_700_000_000, 0, -0.0], ids=["int", "int-zero", "minus-zero"])
def test_verify_finds_nothing_wrong_whatever_number_the_time_was_given_as(
    store: Store, time_: float
) -> None:
    # An int is a float to the type system, and a clock such as
    # ``lambda: 1_700_000_000`` gives one; SQLite keeps the value, so the
    # digest must not depend on how the number was spelled.
    store.append([Retained(manager_id("a")), Retained(manager_id("b"))], time=time_)
    fill(store, 2)
    assert store.verify() == []


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("UPDATE events SET payload = ? WHERE seq = ?", '{"manager":"mallory"}'),
        ("UPDATE events SET kind = ? WHERE seq = ?", "release"),
        ("UPDATE events SET time = ? WHERE seq = ?", 12.0),
        ("UPDATE events SET digest = ? WHERE seq = ?", b"\x00" * 16),
    ],
    ids=["payload", "kind", "time", "digest"],
)
@pytest.mark.parametrize("seq", [1, 3, 5])
def test_verify_reports_a_record_changed_behind_the_stores_back(
    store: Store, path: Path, change: str, value: object, seq: int
) -> None:
    fill(store, 5)
    assert store.verify() == []
    drop_trigger(path, "UPDATE")
    conn = raw(path)
    try:
        conn.execute(change, (value, seq))
    finally:
        conn.close()
    problems = store.verify()
    assert problems
    assert mentions(problems, seq)


def test_verify_reports_records_swapped_behind_the_stores_back(store: Store, path: Path) -> None:
    fill(store, 5)
    drop_trigger(path, "UPDATE")
    conn = raw(path)
    try:
        conn.execute("UPDATE events SET seq = -2 WHERE seq = 2")
        conn.execute("UPDATE events SET seq = 2 WHERE seq = 4")
        conn.execute("UPDATE events SET seq = 4 WHERE seq = -2")
    finally:
        conn.close()
    problems = store.verify()
    assert mentions(problems, 2)
    assert mentions(problems, 4)


@pytest.mark.parametrize("seq", [1, 3])
def test_verify_reports_a_record_deleted_behind_the_stores_back(
    store: Store, path: Path, seq: int
) -> None:
    fill(store, 5)
    drop_trigger(path, "DELETE")
    conn = raw(path)
    try:
        conn.execute("DELETE FROM events WHERE seq = ?", (seq,))
    finally:
        conn.close()
    problems = store.verify()
    assert problems
    assert mentions(problems, seq)


def test_records_refuse_a_gap_in_the_sequence_naming_the_file_and_the_seq(
    store: Store, path: Path
) -> None:
    fill(store, 5)
    drop_trigger(path, "DELETE")
    conn = raw(path)
    try:
        conn.execute("DELETE FROM events WHERE seq = 3")
    finally:
        conn.close()
    with pytest.raises(JournalCorrupt) as excinfo:
        list(store.records())
    assert str(path) in str(excinfo.value)
    assert mentions([excinfo.value.reason], 4)


def test_records_refuse_a_payload_that_does_not_decode_naming_the_file_and_the_seq(
    store: Store, path: Path
) -> None:
    fill(store, 5)
    drop_trigger(path, "UPDATE")
    conn = raw(path)
    try:
        conn.execute("UPDATE events SET payload = '{\"manager\": 7}' WHERE seq = 4")
    finally:
        conn.close()
    got: list[Record] = []
    with pytest.raises(JournalCorrupt) as excinfo:
        got.extend(store.records())
    assert str(path) in str(excinfo.value)
    assert excinfo.value.reason.startswith("event 4 ")
    assert [r.seq for r in got] == [1, 2, 3]


# -- reading only ---------------------------------------------------------------------------


def file_bytes(path: Path) -> dict[str, bytes | None]:
    """The bytes of the database and of its -wal file (None when absent)."""
    return {
        suffix: (Path(f"{path}{suffix}").read_bytes() if Path(f"{path}{suffix}").exists()
                 else None)
        for suffix in ("", "-wal")
    }


def test_a_readonly_store_opens_while_a_writer_is_active_and_writes_nothing(
    store: Store, path: Path
) -> None:
    written = fill(store, 4)
    before = file_bytes(path)
    reader = Store(path, readonly=True)
    try:
        assert list(reader.records()) == written
        assert reader.last_seq() == 4
        assert reader.verify() == []
    finally:
        reader.close()
    assert file_bytes(path) == before


def test_a_readonly_store_sees_what_a_writer_commits_while_it_is_open(
    store: Store, path: Path
) -> None:
    written = fill(store, 2)
    reader = Store(path, readonly=True)
    try:
        assert list(reader.records()) == written
        later = fill(store, 3)
        assert list(reader.records(after=2)) == later
    finally:
        reader.close()


def test_a_readonly_store_refuses_to_append_and_changes_nothing(
    store: Store, path: Path
) -> None:
    written = fill(store, 2)
    before = file_bytes(path)
    reader = Store(path, readonly=True)
    try:
        with pytest.raises(JournalReadOnly):
            reader.append([Retained(manager_id("x"))], time=1.0)
        assert list(reader.records()) == written
    finally:
        reader.close()
    assert file_bytes(path) == before


def test_a_readonly_store_reads_a_closed_journal_without_changing_it(path: Path) -> None:
    writer = Store(path)
    written = fill(writer, 3)
    writer.close()
    before = path.read_bytes()
    reader = Store(path, readonly=True)
    try:
        assert list(reader.records()) == written
    finally:
        reader.close()
    assert path.read_bytes() == before


def test_a_readonly_store_of_a_missing_file_raises_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(JournalError):
        Store(tmp_path / "missing.sqlite3", readonly=True)
    assert list(tmp_path.iterdir()) == []


# -- files that are not (our) journals ------------------------------------------------------


@scaled(0.1)
@given(
    content=st.binary(min_size=1, max_size=2048).filter(lambda b: not b.startswith(SQLITE_MAGIC))
    | st.integers(1, len(SQLITE_MAGIC) - 1).map(lambda n: SQLITE_MAGIC[:n]),
    readonly=st.booleans(),
)
def test_a_file_that_is_not_sqlite_raises_corrupt_and_stays_as_it_was(
    content: bytes, readonly: bool
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "journal.sqlite3"
        path.write_bytes(content)
        with pytest.raises(JournalCorrupt):
            Store(path, readonly=readonly)
        assert path.read_bytes() == content
        assert sorted(p.name for p in Path(directory).iterdir()) == ["journal.sqlite3"]


@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize(
    "content",
    [SQLITE_MAGIC, SQLITE_MAGIC + bytes(range(256)) * 16, b"SQLite format 2\x00" + bytes(100)],
    ids=["magic-only", "magic-then-garbage", "other-magic"],
)
def test_a_damaged_sqlite_file_raises_corrupt_and_stays_as_it_was(
    path: Path, content: bytes, readonly: bool
) -> None:
    path.write_bytes(content)
    with pytest.raises(JournalCorrupt):
        Store(path, readonly=readonly)
    assert path.read_bytes() == content


@pytest.mark.parametrize("readonly", [False, True])
def test_a_fifo_in_place_of_the_journal_raises_corrupt_without_blocking(
    path: Path, readonly: bool
) -> None:
    os.mkfifo(path)
    raised: list[BaseException] = []

    def open_store() -> None:
        try:
            Store(path, readonly=readonly).close()
        except BaseException as e:  # examined by the main thread
            raised.append(e)

    opener = threading.Thread(target=open_store, daemon=True)
    opener.start()
    opener.join(timeout=5)
    if opener.is_alive():
        # Opening the FIFO blocked: a writer on the other end releases it.
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        opener.join(timeout=5)
        pytest.fail("opening a FIFO as the journal blocked")
    assert len(raised) == 1
    assert isinstance(raised[0], JournalCorrupt)


def test_a_directory_in_place_of_the_journal_raises_corrupt(path: Path) -> None:
    path.mkdir()
    for readonly in (False, True):
        with pytest.raises(JournalCorrupt):
            Store(path, readonly=readonly)
    assert list(path.iterdir()) == []


def make_database(path: Path, *statements: str) -> bytes:
    """A SQLite database made by plain sqlite3, closed; returns its bytes."""
    conn = raw(path)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_journal_of_a_newer_schema_raises_a_version_error_and_stays_as_it_was(
    path: Path, readonly: bool
) -> None:
    writer = Store(path)
    fill(writer, 2)
    writer.close()
    content = make_database(path, f"PRAGMA user_version = {SEGMENTED_VERSION + 1}")
    with pytest.raises(JournalVersionError) as excinfo:
        Store(path, readonly=readonly)
    assert str(SEGMENTED_VERSION + 1) in str(excinfo.value)
    assert path.read_bytes() == content


@pytest.mark.parametrize("readonly", [False, True])
def test_a_database_of_another_program_raises_corrupt_and_stays_as_it_was(
    path: Path, readonly: bool
) -> None:
    content = make_database(
        path, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('keep me')"
    )
    with pytest.raises(JournalCorrupt):
        Store(path, readonly=readonly)
    assert path.read_bytes() == content
    conn = raw(path)
    try:
        assert conn.execute("SELECT body FROM notes").fetchall() == [("keep me",)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_database_with_another_application_id_raises_corrupt(
    path: Path, readonly: bool
) -> None:
    content = make_database(
        path, "CREATE TABLE events (x)", "PRAGMA application_id = 1234",
        f"PRAGMA user_version = {SCHEMA_VERSION}",
    )
    with pytest.raises(JournalCorrupt):
        Store(path, readonly=readonly)
    assert path.read_bytes() == content


def test_an_empty_file_becomes_a_new_journal(path: Path) -> None:
    path.touch()
    store = Store(path)
    try:
        assert [r.seq for r in fill(store, 2)] == [1, 2]
    finally:
        store.close()


def test_an_empty_file_opened_readonly_holds_no_journal(path: Path) -> None:
    path.touch()
    with pytest.raises(JournalCorrupt):
        Store(path, readonly=True)
    assert path.read_bytes() == b""


# -- a busy journal -------------------------------------------------------------------------


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another connection (usable from any thread) in the middle of a write."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_an_append_blocked_longer_than_busy_timeout_raises_journal_busy(path: Path) -> None:
    store = Store(path, busy_timeout=0.2)
    try:
        before = fill(store, 3)
        blocker = hold_write_lock(path)
        try:
            started = time.monotonic()
            with pytest.raises(JournalBusy) as excinfo:
                store.append([Retained(manager_id("late"))], time=2.0)
            waited = time.monotonic() - started
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert isinstance(excinfo.value, TimeoutError)
        assert 0.15 <= waited < 5.0
        assert list(store.records()) == before
        assert [r.seq for r in fill(store, 1)] == [4]
        assert store.verify() == []
    finally:
        store.close()


def test_an_append_waits_for_a_writer_that_finishes_within_busy_timeout(path: Path) -> None:
    store = Store(path, busy_timeout=10.0)
    try:
        before = fill(store, 2)
        blocker = hold_write_lock(path)

        def release() -> None:
            blocker.execute("COMMIT")
            blocker.close()

        timer = threading.Timer(0.2, release)
        timer.start()
        try:
            records = store.append([Retained(manager_id("patient"))], time=2.0)
        finally:
            timer.join()
        assert [r.seq for r in records] == [3]
        assert list(store.records()) == [*before, *records]
    finally:
        store.close()


def test_stores_appending_in_turn_each_continue_after_the_others_last_event(
    path: Path,
) -> None:
    """Each store starts its next commit after the last event it wrote, unread: when another
    store appended meanwhile, the first row is refused by the sequence and the commit is
    made again after the real last event, never failed and never forked from the chain."""
    first, second = Store(path), Store(path)
    try:
        turns = [first, second, second, first, first, second, first]
        for n, store in enumerate(turns):
            records = store.append([Retained(manager_id(str(n)))], time=float(n))
            assert [r.seq for r in records] == [n + 1]
        assert first.verify() == []
        assert [cast(Retained, r.event).manager for r in first.records()] == [
            manager_id(str(n)) for n in range(len(turns))]
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("descriptors", ["to spare", "used up"])
def test_a_store_appends_while_its_read_of_more_than_a_batch_is_half_done_and_another_wrote(
    path: Path, descriptors: str
) -> None:
    """A read streamed a batch at a time holds a read snapshot until its end; were that on the
    connection appends go through, the next append after another writer's commit would fail
    at once (SQLITE_BUSY_SNAPSHOT). It reads on a connection of its own, or, out of
    descriptors, whole at once; either way the append commits and the read sees its one
    snapshot."""
    first, second = Store(path), Store(path)
    held: list[int] = []
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        fill(first, 10)
        rows = first.rows(batch=3)
        if descriptors == "used up":
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (max(map(int, os.listdir("/proc/self/fd"))) + 8, limits[1]))
            with contextlib.suppress(OSError):
                while True:
                    held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        seen = [next(rows)[0]]
        for fd in held:
            os.close(fd)
        held = []
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        second.append([Retained(manager_id("other"))], time=1.0)
        [record] = first.append([Retained(manager_id("mine"))], time=2.0)
        assert record.seq == 12
        seen += [seq for seq, *_ in rows]
        assert seen == list(range(1, 11))
        assert first.verify() == []
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        first.close()
        second.close()


def test_a_maintenance_once_finished_leaves_no_thread_behind(store: Store) -> None:
    # A finished thread still referenced keeps its locks and conditions for
    # as long as the store lives: memory a long-lived manager would carry.
    ran: list[int] = []
    ledger = Ledger(store, replay, EMPTY)
    ledger.maintain = lambda seq, whole: ran.append(seq)
    store.maintenance_every = 1
    m = manager_id("a")
    ledger.wait(ledger.submit((ManagerOpened(m, 1),), time=1.0))
    ledger.wait(ledger.submit((Retained(m),), time=2.0))
    running = testing.maintenance_thread(store)
    if running is not None:
        running.join()
    assert ran == [2]
    assert testing.maintenance_thread(store) is None
