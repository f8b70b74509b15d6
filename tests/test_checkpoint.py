"""Checkpoints: a replay that starts from one ends exactly where a replay from event 1 ends.

A checkpoint is a cache of the reducer's state.  These tests pin what makes
it safe to use: it decodes to exactly what was encoded; a damaged one, one of
another format and one of another history are skipped, saying why, and the
replay falls back to an older one or to event 1; recovery writes one when it
is due and works from it; a process killed while writing one leaves the
journal whole; and ``journal-inspect`` gives the same answers with or
without them.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontemp import Manager, inspect
from sessiontemp._kernel.root import GENERATION_PREFIX
from sessiontemp.journal import (
    EMPTY,
    CheckpointInvalid,
    JournalVersionError,
    ManagerState,
    Record,
    State,
    Store,
    checkpoint,
    replay,
)
from sessiontemp.journal.events import (
    Event,
    ManagerClosed,
    ManagerOpened,
    Released,
    Retained,
    Rotated,
)
from sessiontemp.journal.reducer import Forgotten
from tests.strategies import (
    Lifecycle,
    generation_states,
    legal_records,
    lifecycles,
    live_part,
    manager_id,
    scaled,
    session_histories,
    snapshot_of,
)

JOURNAL = "journal.sqlite3"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / JOURNAL


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    s = Store(path)
    yield s
    s.close()


def write(store: Store, records: list[Record], *, batch: int = 7) -> None:
    """Append *records*' events, a few per transaction, so seqs match."""
    for i in range(0, len(records), batch):
        chunk = records[i:i + batch]
        store.append([r.event for r in chunk], time=chunk[0].time)


def state_at(store: Store, seq: int | None = None) -> State:
    """The state after event *seq*, replayed from event 1."""
    return replay(store.records(until=seq))


def state_from_checkpoint(store: Store, seq: int | None = None) -> State:
    start = checkpoint.restore(store, until=seq).state
    return replay(store.records(after=start.seq, until=seq), start)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def rewrite_body(data: bytes, change: Any) -> bytes:
    """*data* with its JSON body changed by *change* and a digest that matches again."""
    body = json.loads(zlib.decompress(data[16:]))
    change(body)
    compressed = zlib.compress(json.dumps(body).encode())
    return hashlib.blake2b(compressed, digest_size=16).digest() + compressed


def closed_lives(count: int) -> list[Event]:
    """*count* managers that open, retain, rotate, release and close: legal filler."""
    events: list[Event] = []
    for i in range(count):
        m = manager_id(f"filler{i}")
        events += [ManagerOpened(m, 1000 + i), Retained(m), Rotated(m), Released(m),
                   ManagerClosed(m)]
    return events


# -- encoding -------------------------------------------------------------------


@scaled(0.5)
@given(lc=lifecycles(max_steps=30))
def test_every_state_of_a_legal_history_decodes_to_exactly_itself(lc: Lifecycle) -> None:
    for seq in range(len(lc.records) + 1):
        state = replay(lc.records[:seq])
        assert checkpoint.decode(checkpoint.encode(state)) == state


@given(generations=st.lists(generation_states().filter(lambda g: g.removal != "finished"),
                            max_size=5), seq=st.integers(0, 10**9))
def test_any_generation_state_with_any_ids_survives_encoding(
    generations: list[Any], seq: int
) -> None:
    state = State(generations={g.id: g for g in generations}, seq=seq)
    assert checkpoint.decode(checkpoint.encode(state)) == state


@given(data=st.data())
def test_a_checkpoint_with_any_byte_changed_is_refused_as_damaged(data: st.DataObject) -> None:
    lc = data.draw(lifecycles(max_steps=10))
    encoded = bytearray(checkpoint.encode(replay(lc.records)))
    at = data.draw(st.integers(0, len(encoded) - 1))
    encoded[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CheckpointInvalid, match="is damaged"):
        checkpoint.decode(bytes(encoded))


def _state_with_a_lease() -> State:
    lc = Lifecycle()
    m = lc.open_manager()
    lc.retain(m)
    lc.acquire(m)
    return replay(lc.records)


@pytest.mark.parametrize(("change", "says"), [
    (lambda b: b.update(seq=-1), "names no valid event"),
    (lambda b: b.update(seq=True), "names no valid event"),
    (lambda b: b.pop("managers"), "not a checkpoint of this format"),
    (lambda b: b["managers"].pop("owners"), "fields that do not fit"),
    (lambda b: b["generations"].update(extra=[1]), "fields that do not fit"),
    (lambda b: b["generations"]["ready"].append(True), "malformed GenerationState column"),
    (lambda b: b["managers"].update(owners="3"), "malformed ManagerState column 'owners'"),
    (lambda b: b["managers"].update(owners=[True]), "field 'owners' of the wrong type"),
    (lambda b: b["managers"].update(sealed=[0]), "field 'sealed' of the wrong type"),
    (lambda b: b["generations"].update(created_at=[5]), "'created_at' of the wrong type"),
    (lambda b: b["generations"].update(leases=[[7]]), "'leases' of the wrong type"),
    (lambda b: b["generations"].update(leases=["l"]), "'leases' of the wrong type"),
    (lambda b: [b["managers"][k].append(b["managers"][k][0]) for k in b["managers"]],
     "names one ManagerState twice"),
    (lambda b: b["generations"].update(removal=["finished"]), "holds a removed generation"),
], ids=["negative-seq", "bool-seq", "no-managers", "missing-field", "extra-field",
        "uneven-columns", "column-not-a-list", "bool-for-int", "int-for-bool", "int-for-float",
        "int-in-a-set", "str-for-a-set", "same-id-twice", "removed-generation"])
def test_a_checkpoint_whose_digest_fits_but_whose_contents_do_not_is_refused_saying_what(
    change: Any, says: str
) -> None:
    bad = rewrite_body(checkpoint.encode(_state_with_a_lease()), change)
    with pytest.raises(CheckpointInvalid, match=says):
        checkpoint.decode(bad)


@pytest.mark.parametrize("data", [b"", b"short", bytes(16) + b"not zlib"],
                         ids=["empty", "short", "not-zlib"])
def test_bytes_that_are_no_checkpoint_are_refused_not_raised_as_something_else(
    data: bytes
) -> None:
    with pytest.raises(CheckpointInvalid):
        checkpoint.decode(data)


def test_a_body_that_is_not_json_is_refused_as_not_decoding() -> None:
    compressed = zlib.compress(b"{not json")
    data = hashlib.blake2b(compressed, digest_size=16).digest() + compressed
    with pytest.raises(CheckpointInvalid, match="does not decode"):
        checkpoint.decode(data)


# -- when one is due --------------------------------------------------------------


def test_a_checkpoint_is_due_after_every_events_or_a_quarter_of_the_states_size() -> None:
    small = State(seq=25_000)
    assert not checkpoint.due(small, 5_001)
    assert checkpoint.due(small, 5_000)
    lc = Lifecycle()
    for _ in range(40):
        lc.open_manager()
    big = replay(lc.records)  # 40 managers at seq 40: a quarter is 10 events
    assert not checkpoint.due(big, 31, every=4)
    assert checkpoint.due(big, 30, every=4)
    assert not checkpoint.due(big, 26, every=15)
    assert checkpoint.due(big, 25, every=15)


# -- restoring from the store ------------------------------------------------------------


@scaled(0.25)
@given(records=st.one_of(legal_records(max_steps=30), session_histories(max_steps=30)),
       data=st.data())
def test_restoring_and_replaying_the_rest_equals_a_replay_from_the_first_event_at_every_seq(
    tmp_path_factory: pytest.TempPathFactory, records: list[Record], data: st.DataObject
) -> None:
    store = Store(tmp_path_factory.mktemp("j") / JOURNAL)
    try:
        write(store, records)
        marks = data.draw(st.sets(st.integers(1, len(records)), max_size=4)) if records else set()
        for seq in sorted(marks):
            checkpoint.save(store, state_at(store, seq), keep=10)
        for seq in range(len(records) + 1):
            assert state_from_checkpoint(store, seq) == state_at(store, seq)
    finally:
        store.close()


@scaled(0.25)
@given(lc=lifecycles(max_steps=40), data=st.data())
def test_a_checkpoint_holds_only_the_live_part_of_the_history_and_resumes_to_a_full_replay(
    tmp_path_factory: pytest.TempPathFactory, lc: Lifecycle, data: st.DataObject
) -> None:
    # The model keeps the whole history; a checkpoint (like the state) holds
    # what is alive or owes work, and the tail after it still replays to
    # exactly what a replay from event 1 gives.
    store = Store(tmp_path_factory.mktemp("j") / JOURNAL)
    try:
        write(store, lc.records)
        n = len(lc.records)
        marks = data.draw(st.sets(st.integers(1, n), max_size=3), label="marks") if n else set()
        for seq in sorted(marks):
            checkpoint.save(store, state_at(store, seq), keep=10)
            restored = checkpoint.restore(store, until=seq)
            assert restored.checkpoint == seq
            assert snapshot_of(restored.state) == live_part(lc.snapshots[seq - 1])
        assert state_from_checkpoint(store) == state_at(store)
        assert snapshot_of(state_at(store)) == snapshot_of(replay(lc.records))
    finally:
        store.close()


def test_restore_starts_from_the_newest_checkpoint_at_or_before_the_seq_asked_for(
    store: Store,
) -> None:
    store.append(closed_lives(4), time=1.0)
    for seq in (5, 10, 15):
        checkpoint.save(store, state_at(store, seq), keep=10)
    assert checkpoint.restore(store).checkpoint == 15
    assert checkpoint.restore(store, until=14).checkpoint == 10
    assert checkpoint.restore(store, until=10).checkpoint == 10
    restored = checkpoint.restore(store, until=4)
    assert (restored.checkpoint, restored.state) == (None, EMPTY)


def test_only_the_newest_checkpoints_are_kept(store: Store) -> None:
    store.append(closed_lives(4), time=1.0)
    for seq in range(1, 21):
        checkpoint.save(store, state_at(store, seq), keep=3)
    assert [seq for seq, _, _ in store.checkpoints()] == [20, 19, 18]


def test_older_checkpoints_are_thinned_to_the_newest_of_each_run_of_spacing_events(
    store: Store,
) -> None:
    store.append(closed_lives(20), time=1.0)  # events 1 to 100
    state = checkpoint.encode(state_at(store, 1))
    for seq in range(3, 101, 4):
        store.save_checkpoint(seq, checkpoint.FORMAT, state, keep=3, spacing=20)
    # The newest three, and the newest of each of the newest three runs of
    # 20 (seqs 80-99, 60-79, 40-59; 100 is alone in its run and among the three).
    assert [seq for seq, _, _ in store.checkpoints()] == [99, 95, 91, 79, 59]
    store.save_checkpoint(100, checkpoint.FORMAT, state, keep=3, spacing=20)
    assert [seq for seq, _, _ in store.checkpoints()] == [100, 99, 95, 79]


def test_saving_a_checkpoint_of_an_event_not_in_the_journal_is_refused(store: Store) -> None:
    store.append(closed_lives(1), time=1.0)
    with pytest.raises(ValueError, match="holds no event 9 to checkpoint"):
        store.save_checkpoint(9, checkpoint.FORMAT, b"", keep=3)
    assert store.checkpoints() == []


def test_a_damaged_checkpoint_is_skipped_for_the_next_older_saying_why(
    path: Path, store: Store
) -> None:
    store.append(closed_lives(4), time=1.0)
    checkpoint.save(store, state_at(store, 5))
    checkpoint.save(store, state_at(store, 10))
    conn = raw(path)
    conn.execute("UPDATE checkpoints SET state = ? WHERE seq = 10", (b"\0" * 40,))
    conn.close()
    restored = checkpoint.restore(store)
    assert restored.checkpoint == 5
    assert restored.skipped == ((10, "is damaged: its digest does not match its contents"),)
    assert state_from_checkpoint(store) == state_at(store)


def test_a_checkpoint_of_another_format_is_skipped(path: Path, store: Store) -> None:
    store.append(closed_lives(2), time=1.0)
    checkpoint.save(store, state_at(store, 7))
    conn = raw(path)
    conn.execute("UPDATE checkpoints SET format = ?", (checkpoint.FORMAT + 1,))
    conn.close()
    restored = checkpoint.restore(store)
    assert (restored.checkpoint, restored.state) == (None, EMPTY)
    assert restored.skipped == ((7, f"is of format {checkpoint.FORMAT + 1}, which this "
                                 "version does not read"),)


def test_a_checkpoint_copied_from_another_history_is_skipped(tmp_path: Path) -> None:
    mine, theirs = Store(tmp_path / "mine.sqlite3"), Store(tmp_path / "theirs.sqlite3")
    try:
        mine.append(closed_lives(2), time=1.0)
        theirs.append([ManagerOpened(manager_id("other"), 7), *closed_lives(2)], time=1.0)
        checkpoint.save(theirs, state_at(theirs, 6))
        conn = raw(tmp_path / "mine.sqlite3")
        conn.execute("ATTACH ? AS theirs", (str(tmp_path / "theirs.sqlite3"),))
        conn.execute("INSERT INTO checkpoints SELECT * FROM theirs.checkpoints")
        conn.close()
        restored = checkpoint.restore(mine)
        assert restored.checkpoint is None
        assert restored.skipped == ((6, "was derived from another history (event 6 differs)"),)
        assert state_from_checkpoint(mine) == state_at(mine)
    finally:
        mine.close()
        theirs.close()


def test_a_checkpoint_that_says_it_is_of_another_seq_is_skipped(
    path: Path, store: Store
) -> None:
    store.append(closed_lives(2), time=1.0)
    store.save_checkpoint(8, checkpoint.FORMAT, checkpoint.encode(state_at(store, 3)), keep=3)
    restored = checkpoint.restore(store)
    assert restored.checkpoint is None
    assert restored.skipped == ((8, "holds the state after event 3, not 8"),)


def test_checkpoints_may_be_deleted_while_events_may_not(path: Path, store: Store) -> None:
    store.append(closed_lives(2), time=1.0)
    checkpoint.save(store, state_at(store))
    conn = raw(path)
    conn.execute("DELETE FROM checkpoints")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()
    assert checkpoint.restore(store).state == EMPTY
    assert state_from_checkpoint(store) == state_at(store)


def test_a_journal_from_before_checkpoints_is_refused_with_the_fix_and_left_as_it_is(
    path: Path,
) -> None:
    store = Store(path)
    store.append(closed_lives(3), time=1.0)
    store.close()
    conn = raw(path)
    conn.execute("DROP TABLE checkpoints")
    conn.close()
    content = path.read_bytes()
    for readonly in (True, False):
        with pytest.raises(JournalVersionError) as excinfo:
            Store(path, readonly=readonly)
        assert excinfo.value.path == str(path)
        assert "checkpoints" in excinfo.value.reason
        assert "aside" in excinfo.value.fix
    assert "checkpoints" not in {name for (name,) in raw(path).execute(
        "SELECT name FROM sqlite_master")}
    assert path.read_bytes() == content


# -- recovery works from checkpoints -----------------------------------------------------


def fill(root: Path, events: list[Event]) -> None:
    store = Store(root / JOURNAL)
    try:
        for i in range(0, len(events), 5_000):
            store.append(events[i:i + 5_000], time=1_700_000_000.0 + i)
    finally:
        store.close()


def checkpoint_seqs(root: Path) -> list[int]:
    store = Store(root / JOURNAL, readonly=True)
    try:
        return [seq for seq, _, _ in store.checkpoints()]
    finally:
        store.close()


def test_a_manager_open_writes_a_checkpoint_once_enough_events_follow_the_last(
    root: Path,
) -> None:
    Manager(root).close()
    fill(root, closed_lives(checkpoint.ON_OPEN // 5))
    assert checkpoint_seqs(root) == []

    first = Manager(root)
    first.close()
    written = checkpoint_seqs(root)
    assert len(written) == 1
    store = Store(root / JOURNAL, readonly=True)
    try:
        # Written from the replay the open did, before its own events.
        assert written[0] < store.last_seq()
        assert checkpoint.restore(store).state == state_at(store, written[0])
    finally:
        store.close()

    Manager(root).close()
    assert checkpoint_seqs(root) == written, "not due again after a handful of events"


def test_an_open_replays_at_most_a_bounded_tail_whatever_the_maintenance_interval(
    root: Path,
) -> None:
    # A long-lived appender checkpoints every EVERY events; an open that
    # finds fewer than ON_OPEN after the newest checkpoint replays them and
    # writes none, one that finds more leaves one for the next open.
    Manager(root).close()
    fill(root, closed_lives(checkpoint.ON_OPEN // 5 - 2))
    Manager(root).close()
    assert checkpoint_seqs(root) == []
    fill(root, closed_lives(4))
    Manager(root).close()
    (written,) = checkpoint_seqs(root)
    assert checkpoint.ON_OPEN <= written < checkpoint.EVERY
    store = Store(root / JOURNAL, readonly=True)
    try:
        assert checkpoint.restore(store).state == state_at(store, written)
        assert store.last_seq() - written < checkpoint.ON_OPEN
    finally:
        store.close()


CHILD = textwrap.dedent("""
    import os, sys, time
    from sessiontemp import Manager
    m = Manager(sys.argv[1])
    m.retain()
    lease = m.acquire()
    (lease.path / "work").write_text("in use")
    print(lease.path, flush=True)
    time.sleep(60)
""")


def test_recovery_from_a_checkpoint_removes_what_a_killed_manager_left(root: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    # The generation, the leased directory's parent.
    left = Path(child.stdout.readline().strip()).parent
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert left.is_dir()
    assert left.name.startswith(GENERATION_PREFIX)
    fill(root, closed_lives(checkpoint.EVERY // 5))
    store = Store(root / JOURNAL)
    try:
        # The dead manager is in the checkpoint, alive as far as it knows.
        checkpoint.save(store, state_at(store))
    finally:
        store.close()

    survivor = Manager(root)
    survivor.close()
    assert not left.exists()
    assert [r.generation for r in survivor.recovery.removed] == [
        left.name[len(GENERATION_PREFIX):]]
    reader = Store(root / JOURNAL, readonly=True)
    try:
        assert state_from_checkpoint(reader) == state_at(reader)
        assert reader.verify() == []
    finally:
        reader.close()


WRITER = textwrap.dedent("""
    import sys
    from sessiontemp.journal import Store, checkpoint, replay
    store = Store(sys.argv[1])
    state = replay(store.records())
    print("ready", flush=True)
    while True:
        checkpoint.save(store, state, keep=2)
""")


def test_a_process_killed_while_writing_checkpoints_leaves_the_events_and_a_usable_one(
    path: Path,
) -> None:
    store = Store(path)
    store.append(closed_lives(2_000), time=1.0)
    before = state_at(store)
    store.close()
    rng = random.Random(2026)
    for _ in range(8):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        reader = Store(path)  # writable: the quick check runs too
        try:
            assert reader.verify() == []
            restored = checkpoint.restore(reader)
            assert restored.skipped == ()
            assert state_from_checkpoint(reader) == before
            assert state_at(reader) == before
        finally:
            reader.close()


# -- journal-inspect gives the same answers with or without them -------------------------


def test_inspect_state_and_fsck_answer_the_same_with_and_without_checkpoints(
    root: Path, tmp_path: Path
) -> None:
    with Manager(root) as m:
        m.retain()
        for _ in range(6):
            with m.acquire():
                pass
            m.rotate()
        m.acquire()
    store = Store(root / JOURNAL)
    try:
        last = store.last_seq()
        for seq in (3, last // 2, last):
            checkpoint.save(store, state_at(store, seq), keep=10)
    finally:
        store.close()
    bare = tmp_path / "bare.sqlite3"
    source, copy = raw(root / JOURNAL), raw(bare)
    source.backup(copy)
    source.close()
    copy.execute("DELETE FROM checkpoints")
    copy.close()
    for seq in range(last + 1):
        assert inspect.state_at(root / JOURNAL, seq).state == inspect.state_at(bare, seq).state
    assert inspect.fsck(root).findings == ()


def test_verify_reports_a_checkpoint_that_disagrees_with_the_events(
    path: Path, store: Store
) -> None:
    store.append(closed_lives(3), time=1.0)
    checkpoint.save(store, state_at(store, 5), keep=10)
    assert inspect.verify(path).ok
    wrong = state_at(store, 10)
    # A manager the events have closed (and the state forgotten), claimed alive.
    lying = State(managers={**wrong.managers, manager_id("filler0"): ManagerState(
        manager_id("filler0"), 1000, 1, 1.0, owners=5)},
        generations=wrong.generations, seq=10)
    checkpoint.save(store, lying, keep=10)
    result = inspect.verify(path)
    assert [(p.seq, p.check) for p in result.problems] == [(10, "checkpoints")]
    assert "does not match the state replayed from the events" in result.problems[0].message


def test_verify_reports_a_damaged_checkpoint(path: Path, store: Store) -> None:
    store.append(closed_lives(2), time=1.0)
    checkpoint.save(store, state_at(store, 4), keep=10)
    conn = raw(path)
    conn.execute("UPDATE checkpoints SET state = ?", (b"\1" * 32,))
    conn.close()
    result = inspect.verify(path)
    assert [(p.seq, p.check) for p in result.problems] == [(4, "checkpoints")]
    assert "is damaged" in result.problems[0].message


def test_verify_does_not_hold_a_checkpoint_of_another_format_against_the_journal(
    path: Path, store: Store
) -> None:
    store.append(closed_lives(2), time=1.0)
    checkpoint.save(store, state_at(store, 4))
    conn = raw(path)
    conn.execute("UPDATE checkpoints SET format = 0, state = x'00'")
    conn.close()
    assert inspect.verify(path).ok



def test_explain_tells_the_same_story_whichever_checkpoint_it_starts_from(root: Path) -> None:
    killed = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE,
                              text=True)
    assert killed.stdout is not None
    killed.stdout.readline()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    # A stray, first named by the recovery pass that removes it, well after
    # that pass started: its story needs the pass's pid from before.
    (root / (GENERATION_PREFIX + "straystraystrays")).mkdir()
    # Its open's recovery removes what the killed one left, and the stray.
    with Manager(root, stale_after=0) as m:
        m.retain()
        for _ in range(3):
            with m.acquire():
                pass
            m.rotate()
        m.acquire()
    alive = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert alive.stdout is not None
        alive.stdout.readline()
        journal = root / JOURNAL
        store = Store(journal, readonly=True)
        try:
            last = store.last_seq()
            # Every generation the journal names, removed ones included.
            forgotten = Forgotten()
            generations = sorted(forgotten.whole(
                replay(store.records(), history=forgotten)).generations)
        finally:
            store.close()
        stories = {gid: inspect.explain(journal, gid, root) for gid in generations}
        assert {s.status for s in stories.values()} == {"removed", "live"}
        stray = stories["straystraystrays"]
        assert "as a stray the journal did not know" in stray.sentences[0].text
        for seq in range(1, last + 1):
            conn = raw(journal)
            conn.execute("DELETE FROM checkpoints")
            conn.close()
            store = Store(journal)
            try:
                checkpoint.save(store, state_at(store, seq))
            finally:
                store.close()
            for gid in generations:
                assert inspect.explain(journal, gid, root) == stories[gid], f"from {seq}"
        assert inspect.explain(journal, "no-such-generation", root).status == "unknown"
    finally:
        alive.send_signal(signal.SIGKILL)
        alive.wait()
