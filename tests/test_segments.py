"""The journal in segments: rollover, seals, retirement, and reading across them.

A rollover starts a new segment file when a checkpoint is written into an
active segment over its size; retirement deletes the oldest sealed
segments a later checkpoint covers, beyond the retention budget.  These
tests pin that what is kept always replays to what the whole history
does, that several processes appending through rollovers lose nothing,
that a crash between any two steps leaves a usable journal, and that a
damaged or missing segment is reported by its path, with the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontemp import Manager, handles, recover
from sessiontemp._guards.steps import Steps
from sessiontemp.journal import (
    EMPTY,
    JournalCorrupt,
    JournalVersionError,
    Record,
    Retention,
    State,
    Store,
    checkpoint,
    replay,
    testing,
)
from sessiontemp.journal.events import (
    Event,
    ManagerClosed,
    ManagerOpened,
    Released,
    Retained,
    Rotated,
)
from sessiontemp.journal.segments import ROLL_FLOOR, Segment, directory, size_of
from sessiontemp.recovery.passes import maintain
from tests import zygote
from tests.strategies import legal_records, manager_id, scaled, session_histories

JOURNAL = "journal.sqlite3"
# Every checkpoint starts a new segment; nothing retired is kept.
EAGER = Retention(segment_bytes=0, history_bytes=0)
HERE = Path(__file__).parents[1]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / JOURNAL


def write(store: Store, records: list[Record], *, batch: int = 7) -> None:
    for i in range(0, len(records), batch):
        chunk = records[i:i + batch]
        store.append([r.event for r in chunk], time=chunk[0].time)


def lives(count: int, tag: str) -> list[Event]:
    """*count* managers that open, retain, rotate, release and close: legal filler."""
    events: list[Event] = []
    for i in range(count):
        m = manager_id(f"{tag}{i}")
        events += [ManagerOpened(m, 1000 + i), Retained(m), Rotated(m), Released(m),
                   ManagerClosed(m)]
    return events


def checkpoint_now(store: Store) -> State:
    """Write a checkpoint of the whole journal's state, as recovery does."""
    start = checkpoint.restore(store)
    state = replay(store.records(after=start.state.seq), start.state)
    checkpoint.save(store, state)
    return state


def rolled_over(path: Path, *, rounds: int, managers: int) -> Store:
    """A store keeping all history, after *rounds* of *managers* lives and a rollover each."""
    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=1 << 30))
    for round in range(rounds):
        store.append(lives(managers, f"r{round}-"), time=1.0)
        checkpoint_now(store)
    return store


def kept_state(store: Store) -> State:
    """The state a replay of what is kept gives: from the newest checkpoint on."""
    start = checkpoint.restore(store)
    return replay(store.records(after=start.state.seq), start.state)


def segment_files(path: Path) -> list[str]:
    """The segment files beside *path*, without SQLite's -wal and -shm files."""
    folder = directory(path)
    names = os.listdir(folder) if folder.exists() else []
    return sorted(n for n in names if not n.endswith(("-wal", "-shm")))


@pytest.fixture
def retired(path: Path) -> Iterator[Store]:
    """A journal of 3 rollovers whose sealed segments (the head too) are all retired."""
    store = Store(path, retention=EAGER)
    for round in range(3):
        store.append(lives(4, f"r{round}-"), time=1_700_000_000.0 + round)
        checkpoint_now(store)
    store.append(lives(2, "tail"), time=1_700_000_010.0)
    assert store.retire(now=1_700_000_020.0)
    yield store
    store.close()


# -- what is kept replays to what the whole history gives ---------------------------------


@scaled(0.1)
@given(records=st.one_of(legal_records(max_steps=30), session_histories(max_steps=30)),
       data=st.data())
def test_retired_segments_and_the_kept_history_replay_to_what_a_full_replay_gives(
    tmp_path_factory: pytest.TempPathFactory, records: list[Record], data: st.DataObject
) -> None:
    path = tmp_path_factory.mktemp("j") / JOURNAL
    budget = data.draw(st.sampled_from([0, 1 << 20]), label="history_bytes")
    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=budget))
    try:
        cuts = sorted(data.draw(st.sets(st.integers(0, len(records)), max_size=5)))
        done = 0
        for cut in [*cuts, len(records)]:
            write(store, records[done:cut], batch=1)
            done = max(done, cut)
            if store.last_seq() and data.draw(st.booleans(), label="checkpoint"):
                checkpoint_now(store)
            if data.draw(st.booleans(), label="retire"):
                store.retire(now=2e9)
        assert kept_state(store) == replay(records)
        assert store.verify() == []
        first = store.history().first
        start = len(records) + 1 if first is None else first
        assert list(store.records(after=start - 1)) == records[start - 1:]
    finally:
        store.close()
    reopened = Store(path)
    try:
        assert kept_state(reopened) == replay(records)
    finally:
        reopened.close()


# -- rollover ------------------------------------------------------------------------------


def test_a_checkpoint_over_the_segment_size_starts_a_new_segment_holding_it(path: Path) -> None:
    store = Store(path, retention=EAGER)
    try:
        store.append(lives(3, "a"), time=1.0)
        state = checkpoint_now(store)
        assert segment_files(path) == ["00000000000000000016.sqlite3"]
        store.append(lives(1, "b"), time=2.0)
        assert [r.seq for r in store.records(after=14)] == list(range(15, 21))
        assert store.checkpoints()[0][:3] == (15, checkpoint.FORMAT, True)
        assert kept_state(store) == replay(store.records())
        assert state.seq == 15
    finally:
        store.close()
    conn = sqlite3.connect(directory(path) / "00000000000000000016.sqlite3")
    try:
        assert conn.execute("SELECT min(seq), max(seq) FROM events").fetchone() == (16, 20)
        assert conn.execute("SELECT seq FROM checkpoints").fetchall() == [(15,)]
    finally:
        conn.close()


def test_a_checkpoint_under_the_segment_size_keeps_one_file(path: Path) -> None:
    store = Store(path)
    try:
        store.append(lives(3, "a"), time=1.0)
        checkpoint_now(store)
        assert not directory(path).exists()
    finally:
        store.close()


def test_a_writer_holding_the_old_segment_finds_the_seal_and_appends_to_the_new_one(
    path: Path,
) -> None:
    first, second = Store(path, retention=EAGER), Store(path, retention=EAGER)
    try:
        first.append(lives(2, "a"), time=1.0)
        checkpoint_now(first)
        # second still holds its connection to the sealed head.
        records = second.append(lives(1, "b"), time=2.0)
        assert [r.seq for r in records] == list(range(11, 16))
        assert first.append(lives(1, "c"), time=3.0)[0].seq == 16
        assert second.verify() == []
        assert len(list(second.records())) == 20
    finally:
        first.close()
        second.close()
    head = sqlite3.connect(path)
    try:
        assert head.execute("SELECT max(seq) FROM events").fetchone() == (10,)
    finally:
        head.close()


# -- retirement ----------------------------------------------------------------------------


def test_retired_segments_are_deleted_and_history_says_where_it_starts(
    path: Path, retired: Store
) -> None:
    history = retired.history()
    assert history.retired_until == 60
    assert history.first == 61
    assert history.retired_at == 1_700_000_020.0
    assert retired.extent() == (61, 70, 10)
    assert segment_files(path) == ["00000000000000000061.sqlite3"]
    # The head keeps only how to find the rest.
    head = sqlite3.connect(path)
    try:
        tables = {n for (n,) in head.execute("SELECT name FROM sqlite_master")}
    finally:
        head.close()
    assert "events" not in tables
    assert {"sealed", "retired"} <= tables
    assert retired.verify() == []


def test_retired_history_is_kept_while_under_the_size_budget_and_younger_than_the_age(
    path: Path,
) -> None:
    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=1 << 30,
                                            history_age=100.0))
    try:
        for round in range(3):
            store.append(lives(2, f"r{round}-"), time=1.0)
            checkpoint_now(store)
        store.append(lives(1, "tail"), time=2.0)
        sealed = [s.sealed for s in store.segments() if s.sealed is not None]
        assert store.retire(now=min(sealed) + 50.0) == []
        assert store.extent()[0] == 1
        removed = store.retire(now=max(sealed) + 101.0)
        assert path in removed
        assert store.history().first == 31
    finally:
        store.close()


def test_a_segment_no_checkpoint_covers_is_never_retired(path: Path) -> None:
    first = Store(path, retention=EAGER)
    try:
        first.append(lives(2, "a"), time=1.0)
        checkpoint_now(first)
        first.append(lives(2, "b"), time=2.0)
        # A checkpoint of an older seq, saved after the rollover (by a store
        # whose segments are never full: no rollover), covers nothing new.
        late = Store(path)
        try:
            checkpoint.save(late, replay(late.records(until=5)))
        finally:
            late.close()
        first.retire(now=2e9)
        # The head's events are covered by the checkpoint the new segment began with.
        assert first.extent()[0] == 11
        assert kept_state(first) == replay(first.records(after=10), checkpoint.restore(
            first, until=10).state)
    finally:
        first.close()


def test_a_manager_that_lives_long_checkpoints_and_rolls_over_as_it_appends(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    with Manager(root, retention=EAGER) as manager:
        store = handles.of(manager.id).store
        assert store is not None
        store.maintenance_every = 30
        manager.retain()
        for _ in range(40):
            with manager.acquire():
                pass
            manager.rotate()
        manager.release()
    assert segment_files(root / JOURNAL)
    store = Store(root / JOURNAL, readonly=True)
    try:
        assert store.verify() == []
        assert store.history().first is not None
    finally:
        store.close()


# -- a retirement pass rolls over the active segment ------------------------------------


def history_root(tmp_path: Path, managers: int) -> Path:
    """A root whose journal holds *managers* ended lives after its own, all in the head."""
    root = tmp_path / "root"
    Manager(root).close()
    store = Store(root / JOURNAL)
    try:
        store.append(lives(managers, "h"), time=1.0)
    finally:
        store.close()
    return root


def journal_bytes(root: Path) -> int:
    files = [root / JOURNAL, *(directory(root / JOURNAL) / n
                               for n in segment_files(root / JOURNAL))]
    return sum(size_of(f) for f in files)


def test_a_pass_keeping_no_history_seals_the_active_segment_and_retires_it_whole(
    tmp_path: Path,
) -> None:
    """The events since the last rollover are history too: none outlives a pass keeping none."""
    root = history_root(tmp_path, 800)
    assert journal_bytes(root) > ROLL_FLOOR
    whole = journal_state_of(root)
    recover(root, retention=Retention(history_bytes=0))
    store = Store(root / JOURNAL, readonly=True)
    try:
        # Everything before the pass's own checkpoint left, the head first.
        assert store.history().retired_until >= whole.seq
        assert store.extent()[2] <= 5
        assert store.verify() == []
        assert kept_state(store).managers == whole.managers
    finally:
        store.close()
    assert journal_bytes(root) < ROLL_FLOOR
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire():
            pass


def test_a_pass_keeping_history_or_under_the_floor_leaves_the_active_segment_be(
    tmp_path: Path,
) -> None:
    big = history_root(tmp_path / "big", 800)
    recover(big, retention=Retention(history_bytes=1 << 30))
    small = history_root(tmp_path / "small", 20)
    recover(small, retention=Retention(history_bytes=0))
    for root in (big, small):
        assert segment_files(root / JOURNAL) == []
        store = Store(root / JOURNAL, readonly=True)
        try:
            assert store.history().retired_until == 0
        finally:
            store.close()


def test_a_wal_file_that_once_grew_does_not_make_every_pass_roll_over(tmp_path: Path) -> None:
    """What counts is what the segment holds, not the size its -wal file once reached."""
    root = history_root(tmp_path, 800)
    recover(root, retention=Retention(history_bytes=0))
    # Open throughout, as a live manager's is: the -wal file stays as large as it grew.
    store = Store(root / JOURNAL)
    try:
        for i in range(150):  # one commit each: the -wal file grows, the history barely
            store.append(lives(1, f"w{i}"), time=2.0)
        [active] = segment_files(root / JOURNAL)
        assert size_of(directory(root / JOURNAL) / active) > ROLL_FLOOR
        recover(root, retention=Retention(history_bytes=0))
        assert segment_files(root / JOURNAL) == [active]
    finally:
        store.close()


def test_a_segment_left_behind_sealed_keeps_nothing_in_its_wal(path: Path) -> None:
    """Its pages move into the database file: a process that first reads it has no log to index."""
    store = rolled_over(path, rounds=2, managers=40)
    try:
        store.append(lives(1, "next-"), time=1.0)  # moves on to the newest segment
        first, *_ = segment_files(path)
        wal = directory(path) / f"{first}-wal"
        assert not wal.exists() or wal.stat().st_size == 0
        assert store.verify() == []
    finally:
        store.close()


def journal_state_of(root: Path) -> State:
    store = Store(root / JOURNAL, readonly=True)
    try:
        return replay(store.records())
    finally:
        store.close()


# A child's step hook: it prints each step's detail and dies by SIGKILL at the k-th.
KILL_AT_STEP = textwrap.dedent("""
    import os, signal, sys
    k = int(sys.argv[2])
    seen = []
    def hook(kind, detail):
        seen.append(detail)
        print(detail, flush=True)
        if len(seen) == k:
            os.kill(os.getpid(), signal.SIGKILL)
""")

PASS_CRASHER = KILL_AT_STEP + textwrap.dedent("""
    from sessiontemp.journal import Retention
    from sessiontemp import recover
    recover(sys.argv[1], retention=Retention(history_bytes=0), step_hook=hook)
""")


def test_a_pass_killed_at_any_step_of_its_rollover_leaves_a_usable_journal(
    tmp_path: Path,
) -> None:
    # Forked from a process that has imported the library: a process per k.
    crashers = zygote.shared("sessiontemp", "tests.test_segments")
    template = history_root(tmp_path / "template", 800)
    whole = journal_state_of(template)
    k, stopped = 0, []
    while True:
        k += 1
        root = tmp_path / f"k{k}"
        shutil.copytree(template, root)
        result = crashers.run(["-c", str(root), str(k)], script=PASS_CRASHER, cwd=HERE)
        if result.returncode == 0:
            break
        assert result.returncode == -signal.SIGKILL, result.stderr
        stopped.append(result.stdout.splitlines()[-1])
        recover(root, retention=Retention(history_bytes=0))
        store = Store(root / JOURNAL, readonly=True)
        try:
            assert store.verify() == []
            assert kept_state(store).managers == whole.managers
            assert store.history().retired_until >= whole.seq
        finally:
            store.close()
        assert not [n for n in segment_files(root / JOURNAL) if n.endswith(".tmp")]
        assert journal_bytes(root) < ROLL_FLOOR
    kinds = {detail.split()[0] for detail in stopped}
    assert kinds >= {"event", "create", "seal", "record", "vacuum"}, stopped


# -- threads -------------------------------------------------------------------------------


def test_listing_segments_never_reads_through_the_connection_another_thread_holds(
    path: Path,
) -> None:
    """A maintenance lists segments while its manager appends: one connection, one at a time."""
    store = Store(path, retention=EAGER)
    try:
        store.append(lives(2, "a"), time=1.0)
        # Sealed, and not yet moved on from: the store's own connection is the
        # one that can tell whether the segment before the newest is sealed.
        checkpoint.save(store, replay(store.records()), roll_over=True)
        assert segment_files(path)
        meanwhile: list[str] = []
        conn = testing.connection(store)
        listed: list[object] = []
        lister = threading.Thread(target=lambda: listed.append(store.segments()))
        with testing.holding(store):  # as an append in another thread holds it
            conn.set_trace_callback(meanwhile.append)
            lister.start()
            lister.join(0.5)
            conn.set_trace_callback(None)
        lister.join()
        assert meanwhile == []
        assert listed
    finally:
        store.close()


def overtake_listing(store: Store, path: Path) -> Callable[..., list[Segment]]:
    """Give *store*'s next listing as made just before another process retired segments.

    Returns the store's own listing, which lists the segments as they are.
    """
    listing = testing.listing(store)
    retirer = Store(path, retention=EAGER)
    try:
        assert retirer.retire(now=2e9)
    finally:
        retirer.close()
    return testing.stale_listing(store, listing)


def test_a_reader_whose_listing_another_process_retired_meanwhile_lists_again(
    path: Path,
) -> None:
    store = rolled_over(path, rounds=3, managers=2)
    try:
        store.append(lives(1, "tail"), time=2.0)
        overtake_listing(store, path)
        store.release_history()
        assert store.last_seq() == 35
        assert store.history().retired_until == 30
    finally:
        store.close()


# -- several processes ---------------------------------------------------------------------

APPENDER = textwrap.dedent("""
    import sys
    from sessiontemp.journal import Retention, Store, checkpoint, replay
    from tests.test_segments import lives
    path, tag, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=0))
    for i in range(rounds):
        for record in store.append(lives(2, f"{tag}{i}-"), time=1.0):
            print(record.seq)
        if i % 5 == 4:
            start = checkpoint.restore(store)
            checkpoint.save(store, replay(store.records(after=start.state.seq), start.state))
            store.retire(now=2e9)
    store.close()
""")


def test_two_processes_appending_through_rollovers_lose_nothing_and_keep_the_chain(
    path: Path,
) -> None:
    Store(path).close()
    rounds = 20
    children = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), tag, str(rounds)],
                                 cwd=HERE, stdout=subprocess.PIPE, text=True)
                for tag in ("x", "y")]
    seqs: list[int] = []
    for child in children:
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        seqs += map(int, out.split())
    # Every append got its own seqs, and together they are the whole sequence.
    assert sorted(seqs) == list(range(1, 2 * rounds * 10 + 1))
    store = Store(path, readonly=True)
    try:
        assert store.verify() == []
        first, last, count = store.extent()
        history = store.history()
        assert history.retired_until > 0
        assert (last or history.retired_until) == 2 * rounds * 10
        assert count == 0 or first == history.retired_until + 1
    finally:
        store.close()
    # Appending goes on from where both left off.
    store = Store(path)
    try:
        assert store.append(lives(1, "z"), time=2.0)[0].seq == 2 * rounds * 10 + 1
        assert store.verify() == []
    finally:
        store.close()


# -- crashes -------------------------------------------------------------------------------

CRASHER = KILL_AT_STEP + textwrap.dedent("""
    from sessiontemp.journal import Retention, Store, checkpoint, replay
    from tests.test_segments import lives
    path = sys.argv[1]
    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=0), step_hook=hook)
    for i in range(3):
        store.append(lives(2, f"c{i}-"), time=1.0)
        start = checkpoint.restore(store)
        checkpoint.save(store, replay(store.records(after=start.state.seq), start.state))
        store.retire(now=2e9)
    store.close()
""")


def test_a_process_killed_at_any_step_of_rollover_or_retirement_leaves_a_usable_journal(
    tmp_path: Path,
) -> None:
    # Forked from a process that has imported the library: a process per k.
    crashers = zygote.shared("sessiontemp", "tests.test_segments")
    k, stopped = 0, []
    while True:
        k += 1
        path = tmp_path / f"k{k}" / JOURNAL
        path.parent.mkdir()
        result = crashers.run(["-c", str(path), str(k)], script=CRASHER, cwd=HERE)
        if result.returncode == 0:
            break
        assert result.returncode == -signal.SIGKILL, result.stderr
        stopped.append(result.stdout.splitlines()[-1])
        store = Store(path, retention=EAGER)
        try:
            assert store.verify() == []
            # Whole appends only, wherever the kill came.
            last = store.extent()[1] or store.history().retired_until
            assert last > 0
            assert last % 10 == 0
            before = kept_state(store)
            store.append(lives(1, "after"), time=2.0)
            assert kept_state(store).seq == before.seq + 5
            checkpoint_now(store)
            store.retire(now=2e9)
            assert store.verify() == []
            assert not [n for n in segment_files(path) if n.endswith(".tmp")]
        finally:
            store.close()
    kinds = {detail.split()[0] for detail in stopped}
    assert kinds >= {"create", "seal", "record", "retire", "vacuum"}, stopped


def test_a_reader_that_looked_before_a_seal_committed_reads_the_new_segment_after_it(
    path: Path,
) -> None:
    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=10**9))
    for round in range(2):
        store.append(lives(2, f"r{round}-"), time=1_700_000_000.0 + round)
        checkpoint_now(store)
    store.append(lives(1, "tail"), time=1_700_000_010.0)
    last = store.last_seq()
    store.close()
    before = directory(path) / segment_files(path)[-2]
    # Held open throughout, so that its -wal file stays: nothing in the
    # directory changes when the seal comes back.
    raw = sqlite3.connect(before, isolation_level=None)
    (seal,) = raw.execute("SELECT next, seq, time FROM sealed").fetchall()
    # As between a rollover's rename of the new file and the commit of its seal.
    raw.execute("DELETE FROM sealed")
    reader = Store(path, readonly=True)
    try:
        assert reader.last_seq() < last
        raw.execute("INSERT INTO sealed (next, seq, time) VALUES (?, ?, ?)", seal)
        assert reader.last_seq() == last
        assert reader.records(after=last - 1).__next__().seq == last
    finally:
        reader.close()
        raw.close()


# -- read indexes --------------------------------------------------------------------------


def indexes_of(file: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
    try:
        return {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        conn.close()


READ_INDEXES = {"events_by_generation", "events_by_manager"}


def test_a_segment_is_made_with_the_read_indexes_and_lookups_by_id_find_what_it_holds(
    path: Path, retired: Store
) -> None:
    for name in segment_files(path):
        assert indexes_of(directory(path) / name) == READ_INDEXES
    tail = manager_id("tail0")
    assert tail in retired.manager_ends([tail])


def test_a_segment_being_written_without_the_read_indexes_is_refused_with_the_fix(
    path: Path, retired: Store
) -> None:
    retired.close()
    active = directory(path) / segment_files(path)[-1]
    conn = sqlite3.connect(active, isolation_level=None)
    for name in READ_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.close()
    for readonly in (False, True):
        with pytest.raises(JournalVersionError) as excinfo:
            Store(path, readonly=readonly)
        assert excinfo.value.path == str(active)
        assert "events_by_generation" in excinfo.value.reason
        assert "aside" in excinfo.value.fix
    # Refused as it is: nothing is added.
    assert indexes_of(active) == set()


# -- damage --------------------------------------------------------------------------------


def test_a_missing_segment_is_named_with_the_reason_and_the_fix(
    path: Path, retired: Store
) -> None:
    retired.close()
    newest = directory(path) / segment_files(path)[-1]
    newest.unlink()
    for readonly in (False, True):
        with pytest.raises(JournalCorrupt) as excinfo:
            Store(path, readonly=readonly)
        message = str(excinfo.value)
        assert str(newest) in message
        assert "missing" in message
        assert "Restore" in message
        assert "aside" in message


def test_a_segment_that_is_not_a_database_is_named_with_the_reason_and_the_fix(
    path: Path, retired: Store
) -> None:
    retired.close()
    newest = directory(path) / segment_files(path)[-1]
    for suffix in ("-wal", "-shm"):
        Path(f"{newest}{suffix}").unlink(missing_ok=True)
    newest.write_bytes(b"not a database at all" * 300)
    with pytest.raises(JournalCorrupt) as excinfo:
        Store(path)
    assert excinfo.value.path == str(newest)
    assert "not a SQLite database" in excinfo.value.reason
    assert "Restore" in excinfo.value.fix


def test_opening_checks_only_the_active_segment_and_verify_finds_damage_in_history(
    path: Path,
) -> None:
    rolled_over(path, rounds=2, managers=40).close()
    sealed = directory(path) / segment_files(path)[0]
    with sqlite3.connect(sealed) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        # Leaf pages of the events table between its first and its last:
        # opening reads neither, only a full check (and a full read) does.
        leaves = [n for (n,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' "
            "ORDER BY path")]
    pages = leaves[1:-1]
    assert pages, leaves
    data = bytearray(sealed.read_bytes())
    for n in pages:
        data[(n - 1) * page + 8:n * page] = os.urandom(page - 8)
    sealed.write_bytes(bytes(data))
    writer = Store(path)
    try:
        writer.append(lives(1, "x"), time=2.0)
        problems = writer.verify()
    finally:
        writer.close()
    assert any(str(sealed) in p for p in problems), problems


# -- journal-inspect -----------------------------------------------------------------------


def inspect(*args: str | Path) -> subprocess.CompletedProcess[str]:
    result = zygote.journal_inspect(*args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def test_journal_inspect_reads_a_journal_whose_old_segments_are_retired(
    path: Path, retired: Store
) -> None:
    retired.close()
    text = inspect(path, "summary").stdout
    assert "history      starts at event 61" in text
    assert "retired" in text
    # The line names the section of the documentation that states the rule.
    assert 'the documentation\'s journal page, "Bounded journal"' in text
    page = HERE / "docs" / "concepts" / "journal.md"
    assert "## Bounded journal" in page.read_text()
    summary = json.loads(inspect(path, "summary", "--json").stdout)
    assert summary["history"]["first"] == 61
    assert summary["history"]["retired_until"] == 60
    verified = json.loads(inspect(path, "verify", "--json").stdout)
    assert verified["ok"], verified
    events = inspect(path, "events", "--json").stdout.splitlines()
    assert json.loads(events[0])["seq"] == 61
    state = json.loads(inspect(path, "state", "--json").stdout)
    assert state["seq"] == 70


def test_a_replay_of_an_empty_journal_needs_no_segments(path: Path) -> None:
    store = Store(path, readonly=False)
    try:
        assert kept_state(store) == EMPTY
        assert store.history().first is None
    finally:
        store.close()


@pytest.mark.parametrize("field", ["segment_bytes", "history_bytes", "history_age"])
@pytest.mark.parametrize("value", [-1, float("nan"), "10"])
def test_a_retention_that_is_not_a_number_of_at_least_zero_is_refused_naming_the_field(
    field: str, value: object
) -> None:
    with pytest.raises(ValueError, match=f"Retention.{field}: must be a number >= 0"):
        Retention(**{field: value})  # type: ignore[arg-type]


# -- what an open reads --------------------------------------------------------------------


def test_the_newest_checkpoint_and_the_events_after_it_are_read_from_the_active_segment_alone(
    path: Path,
) -> None:
    rolled_over(path, rounds=3, managers=2).close()
    store = Store(path)
    try:
        start = checkpoint.restore(store)
        state = replay(store.records(after=start.state.seq), start.state)
        assert start.checkpoint == 30
        assert store.last_seq() == 30
        # No sealed segment was attached for it.
        assert not testing.spanning(store)
        # Older history is still there for whoever asks: attached then.
        assert state == replay(store.records())
        assert testing.spanning(store)
        assert [r.seq for r in store.records(after=5, until=7)] == [6, 7]
        assert checkpoint.restore(store, until=15).checkpoint == 10
    finally:
        store.close()


def test_an_unusable_checkpoint_in_the_active_segment_sends_the_restore_to_older_segments(
    path: Path,
) -> None:
    rolled_over(path, rounds=3, managers=2).close()
    active = directory(path) / segment_files(path)[-1]
    raw = sqlite3.connect(active, isolation_level=None)
    try:
        raw.execute("UPDATE checkpoints SET state = x'00'")
    finally:
        raw.close()
    store = Store(path)
    try:
        start = checkpoint.restore(store)
        assert start.checkpoint == 20
        assert [seq for seq, _ in start.skipped] == [30]
        assert replay(store.records(after=20), start.state) == replay(store.records())
    finally:
        store.close()


def test_a_read_streaming_from_the_active_segment_carries_on_past_the_stores_own_rollover(
    path: Path,
) -> None:
    store = Store(path, retention=EAGER)
    try:
        store.append(lives(4, "a"), time=1.0)
        rows = store.rows(after=0, batch=2)
        assert next(rows)[0] == 1
        # The store moves on to a new segment while the read is under way.
        checkpoint_now(store)
        assert segment_files(path)
        assert [row[0] for row in rows] == list(range(2, 21))
    finally:
        store.close()


KEEP_ALL = Retention(segment_bytes=0, history_bytes=1 << 30)


def rolled_over_root(root: Path) -> None:
    """A root whose journal rolled over three times, by real managers, keeping all history."""
    for _ in range(3):
        with Manager(root, retention=KEEP_ALL) as manager:
            manager.retain()
            manager.acquire().release()
            manager.release()
        recover(root, retention=KEEP_ALL)
        store = Store(root / JOURNAL, retention=KEEP_ALL)
        try:
            checkpoint.save(store, kept_state(store))
        finally:
            store.close()
    assert len(segment_files(root / JOURNAL)) >= 3


def test_a_second_open_of_a_rolled_over_root_attaches_no_sealed_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rolled_over_root(tmp_path)
    with Manager(tmp_path, retention=KEEP_ALL):
        pass
    # What the first open read of the sealed segments holds for the next one.
    with testing.spans() as spans, Manager(tmp_path, retention=KEEP_ALL) as manager:
        assert spans == []
        opened = handles.of(manager.id).store
        assert opened is not None
        assert manager.state == replay(opened.records())
        assert spans, "reading every record attaches the sealed segments"


def test_a_pass_leaves_the_store_it_ran_on_without_the_sealed_segments_attached(
    tmp_path: Path,
) -> None:
    rolled_over_root(tmp_path)
    with Manager(tmp_path, retention=KEEP_ALL) as manager:
        store = handles.of(manager.id).store
        assert store is not None
        assert min(record.seq for record in store.records()) == 1
        assert testing.spanning(store)
        maintain(handles.of(manager.id).root, store, clock=time.time, steps=Steps(None))
        assert not testing.spanning(store)
        # The next read of older history attaches them again.
        assert min(record.seq for record in store.records()) == 1


def test_what_is_remembered_of_sealed_segments_is_what_the_journal_still_lists(
    path: Path,
) -> None:
    store = rolled_over(path, rounds=4, managers=1)
    try:
        store.segments()
        remembered = testing.remembered(path)
        assert sum(remembered.values()) >= 2
        retirer = Store(path, retention=EAGER)
        try:
            assert retirer.retire(now=2e9)
        finally:
            retirer.close()
        store.segments()
        listed = {segment.base for segment in store.segments()}
        assert set(testing.remembered(path)) <= listed
        assert len(testing.remembered(path)) < len(remembered)
    finally:
        store.close()


def test_what_is_remembered_of_sealed_segments_reads_as_what_their_files_hold(
    path: Path,
) -> None:
    store = rolled_over(path, rounds=3, managers=1)
    try:
        # Sealed segments with events, then a retired head (its facts mostly None).
        for _ in range(2):
            read = store.segments()
            assert testing.remembered(path)
            assert store.segments() == read
            testing.forget_sealed()
            assert store.segments() == read
            retirer = Store(path, retention=EAGER)
            try:
                retirer.retire(now=2e9)
            finally:
                retirer.close()
        assert not read[0].has_events
    finally:
        store.close()


def test_rolling_over_listing_and_reading_segments_parses_none_of_their_names(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pathlib interns every name it parses: a store lists its segments on
    # every read across them and every retirement pass, each time with the
    # names of newer ones, for as long as its process runs.
    interned: set[str] = set()
    intern = sys.intern

    def recording(name: str) -> str:
        interned.add(name)
        return intern(name)

    store = Store(path, retention=Retention(segment_bytes=0, history_bytes=1 << 30))
    try:
        monkeypatch.setattr(sys, "intern", recording)
        for round in range(3):
            store.append(lives(1, f"r{round}-"), time=1.0)
            checkpoint_now(store)
            store.segments()
            assert [r.seq for r in store.records()] == list(range(1, 5 * round + 6))
        names = set(segment_files(path))
        assert len(names) == 3
        assert not interned & names
        # Retirement returns the Paths of the segments it removed: those only.
        retirer = Store(path, retention=EAGER)
        try:
            removed = retirer.retire(now=2e9)
        finally:
            retirer.close()
        assert removed
        # When a name of a returned Path is interned depends on pathlib: 3.11
        # parses (and interns) a path when it is made, 3.12 and later the
        # first time its parts are read.  Either way, only those names.
        at_return = interned & names
        removed_names = {p.name for p in removed} & names
        assert removed_names
        if sys.version_info < (3, 12):
            assert at_return == removed_names
        else:
            assert at_return == set()
        assert interned & names == removed_names
    finally:
        store.close()


def test_segments_listed_before_another_process_retired_some_are_listed_again(
    path: Path,
) -> None:
    store = rolled_over(path, rounds=2, managers=2)
    try:
        store.append(lives(1, "tail"), time=2.0)
        resolve = overtake_listing(store, path)
        # Nothing remembered of them: the segments are read, and one is gone.
        testing.forget_sealed()
        kept = store.segments()
        assert [s.path for s in kept] == [s.path for s in resolve(remove=False)]
        assert not kept[0].has_events
        assert kept[-1].first == 21
    finally:
        store.close()
