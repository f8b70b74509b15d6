"""Named sessions: valid names, one live owner per name, and how the journal folds them.

The owner lock is tested with real processes: a child holds a session,
another process is refused naming the child's pid, and once the child is
SIGKILLed the kernel has freed the lock and the name is free again, whatever
pid its lock file still names.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given

from sessiontemp._kernel.root import Root
from sessiontemp.journal import Record, RuleViolation, checkpoint, replay
from sessiontemp.journal.errors import SessionOwned, SessionTempError, UnsafeRoot
from sessiontemp.journal.events import (
    ArtifactKept,
    ArtifactRemoved,
    Event,
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    RemovalFinished,
    RemovalStarted,
    Retained,
    SessionAdopted,
    SessionClaimed,
    SessionDiscarded,
)
from sessiontemp.journal.reducer import Fold, Forgotten, State, kept_for_resume
from sessiontemp.sessions import (
    SESSIONS_DIR,
    Resumable,
    SessionLock,
    check_name,
    lock_name,
    resumable,
)
from tests.strategies import NAMED_FIELD_VALUES, generation_id, hex_id, manager_id

TIMEOUT = 20.0

# -- names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "chat-42", "A.b_c-9", "...", ".hidden", "x" * 64])
def test_a_name_of_1_to_64_safe_characters_is_valid(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", [
    "", ".", "..", "x" * 65, "a/b", "../up", "a b", "caf\u00e9", "a\n", "a\x00", "*", "~x",
])
def test_any_other_name_is_refused_with_a_value_error_naming_the_rule(name: str) -> None:
    with pytest.raises(ValueError, match=r"1 to 64 characters of A-Z, a-z, 0-9, '\.', '_' and "
                       r"'-', and is neither '\.' nor '\.\.'"):
        check_name(name)


@pytest.mark.parametrize("name", [None, 42, b"chat"])
def test_a_name_that_is_not_a_string_is_refused_too(name: object) -> None:
    with pytest.raises(ValueError, match="is not valid"):
        check_name(name)


@given(name=NAMED_FIELD_VALUES["session"])
def test_every_name_the_journal_accepts_is_a_valid_name(name: str) -> None:
    assert check_name(name) == name


# -- the owner lock, with real processes ----------------------------------------------------


HOLDER = textwrap.dedent("""
    import sys, time
    from sessiontemp._kernel.root import Root
    from sessiontemp.sessions import SessionLock
    root = Root.open(sys.argv[1])
    lock = SessionLock.take(root, sys.argv[2])
    print("ready", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A real process holding session "chat-42" under ``tmp_path / "root"``."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "root"), "chat-42"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait(TIMEOUT)


def test_a_second_owner_is_refused_naming_the_first_owners_pid(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    root = Root.open(tmp_path / "root")
    try:
        with pytest.raises(SessionOwned) as excinfo:
            SessionLock.take(root, "chat-42")
    finally:
        root.close()
    error = excinfo.value
    assert (error.pid, error.session) == (holder.pid, "chat-42")
    assert f"process {holder.pid}" in str(error)
    assert str(tmp_path / "root") in str(error)
    assert isinstance(error, SessionTempError)
    assert isinstance(error, RuntimeError)


def test_another_name_is_not_refused_while_one_is_owned(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    root = Root.open(tmp_path / "root")
    try:
        SessionLock.take(root, "chat-43").close()
    finally:
        root.close()


def test_the_name_is_free_once_its_owner_is_killed_whatever_pid_its_file_names(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait(TIMEOUT)
    lock_file = tmp_path / "root" / SESSIONS_DIR / lock_name("chat-42")
    # The dead owner's pid is still written there: it is never trusted.
    assert lock_file.read_text() == f"{holder.pid}\n"
    root = Root.open(tmp_path / "root")
    try:
        lock = SessionLock.take(root, "chat-42")
        assert lock_file.read_text() == f"{os.getpid()}\n"
        lock.close()
    finally:
        root.close()


def test_a_live_owner_is_refused_even_when_its_file_names_a_dead_pid(tmp_path: Path) -> None:
    root = Root.open(tmp_path / "root")
    try:
        lock = SessionLock.take(root, "chat-42")
        (tmp_path / "root" / SESSIONS_DIR / lock_name("chat-42")).write_text("999999999\n")
        with pytest.raises(SessionOwned, match="process 999999999"):
            SessionLock.take(root, "chat-42")
        lock.close()
        SessionLock.take(root, "chat-42").close()
    finally:
        root.close()


def test_the_lock_file_is_private(tmp_path: Path) -> None:
    root = Root.open(tmp_path / "root")
    try:
        SessionLock.take(root, "chat-42").close()
    finally:
        root.close()
    assert (tmp_path / "root" / SESSIONS_DIR).stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "root" / SESSIONS_DIR / "chat-42.lock").stat().st_mode & 0o777 == 0o600


def test_a_sessions_directory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = Root.open(tmp_path / "root")
    try:
        (tmp_path / "root" / SESSIONS_DIR).symlink_to(elsewhere)
        with pytest.raises(UnsafeRoot, match="a symbolic link"):
            SessionLock.take(root, "chat-42")
    finally:
        root.close()
    assert os.listdir(elsewhere) == []


def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    root = Root.open(tmp_path / "root")
    try:
        SessionLock.take(root, "other").close()
        lock = tmp_path / "root" / SESSIONS_DIR / "chat-42.lock"
        lock.symlink_to(target)
        with pytest.raises(UnsafeRoot, match="is a symbolic link") as caught:
            SessionLock.take(root, "chat-42")
        assert caught.value.path == str(lock)
    finally:
        root.close()
    assert target.read_text() == "keep"


# -- the journal's rules ----------------------------------------------------------------------

M1, M2, M3 = manager_id("first"), manager_id("second"), manager_id("third")
G1, G2 = generation_id("g1"), generation_id("g2")
RECOVERY = hex_id("recovery")
WINDOW_MS = 60_000


def fold(*events: Event, start: float = 1000.0) -> State:
    return replay([Record(seq, start + seq, event) for seq, event in enumerate(events, 1)])


def owner_with_a_directory(manager: str = M1, generation: str = G1) -> list[Event]:
    return [
        ManagerOpened(manager, 11), SessionClaimed(manager, "chat", WINDOW_MS),
        Retained(manager), GenerationCreated(manager, generation),
        GenerationReady(manager, generation, 1, 2),
        LeaseAcquired(manager, generation, hex_id("lease")),
    ]


def test_a_claim_names_the_owner_and_its_window() -> None:
    state = fold(ManagerOpened(M1, 11), SessionClaimed(M1, "chat", 1500))
    session = state.sessions["chat"]
    assert (session.owner, session.window, session.kept) == (M1, 1.5, None)


def test_each_lease_of_the_owner_is_a_usage_touch() -> None:
    events = owner_with_a_directory()
    state = fold(*events)
    assert state.sessions["chat"].used_at == 1000.0 + len(events)


def test_a_claim_supersedes_an_owner_whose_death_is_not_journaled_yet() -> None:
    # The claimer holds the session's kernel lock: the journal's owner is gone,
    # whatever the journal says yet.  Its later death keeps nothing.
    state = fold(*owner_with_a_directory(), ManagerOpened(M2, 12),
                 SessionClaimed(M2, "chat", 0), ManagerDied(M1, RECOVERY))
    assert (state.sessions["chat"].owner, state.sessions["chat"].kept) == (M2, None)


def test_a_manager_claims_at_most_one_session_and_before_it_made_generations() -> None:
    with pytest.raises(RuleViolation, match="owns session chat already"):
        fold(ManagerOpened(M1, 11), SessionClaimed(M1, "chat", 0), SessionClaimed(M1, "b", 0))
    with pytest.raises(RuleViolation, match="after it made generations"):
        fold(ManagerOpened(M1, 11), Retained(M1), GenerationCreated(M1, G1),
             SessionClaimed(M1, "chat", 0))


def test_the_owners_death_keeps_its_current_generation_for_the_window() -> None:
    events = [*owner_with_a_directory(), ManagerDied(M1, RECOVERY)]
    state = fold(*events)
    session = state.sessions["chat"]
    assert (session.kept, session.kept_seq, session.kept_at) == (G1, len(events),
                                                                  1000.0 + len(events))
    assert kept_for_resume(state, state.generations[G1]) == session
    # Retired as any dead manager's generation, but kept.
    assert state.generations[G1].retired


def test_an_orderly_close_keeps_nothing() -> None:
    state = fold(*owner_with_a_directory(), ManagerClosed(M1))
    assert state.sessions["chat"].kept is None
    assert kept_for_resume(state, state.generations[G1]) is None


def test_a_successor_adopts_the_kept_generation_with_its_files() -> None:
    state = fold(*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
                 ManagerOpened(M2, 12), SessionClaimed(M2, "chat", WINDOW_MS),
                 SessionAdopted(M2, "chat", G1, M1))
    generation = state.generations[G1]
    assert (generation.manager, generation.retired, generation.leases) == (M2, False,
                                                                           frozenset())
    assert state.managers[M2].current == G1
    assert G1 in state.managers[M2].generations
    # The dead owner, with nothing left, is let go.
    assert M1 not in state.managers
    session = state.sessions["chat"]
    assert (session.owner, session.kept, session.adoptions, session.adopted_from) == (
        M2, None, 1, M1)


def test_a_successor_that_does_not_adopt_leaves_the_generation_to_the_orphan_rules() -> None:
    state = fold(*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
                 ManagerOpened(M2, 12), SessionClaimed(M2, "chat", WINDOW_MS))
    assert kept_for_resume(state, state.generations[G1]) is None


@pytest.mark.parametrize("adoption", [
    SessionAdopted(M2, "chat", G2, M1),   # not what was left
    SessionAdopted(M2, "chat", G1, M3),   # not from whom
    SessionAdopted(M2, "other", G1, M1),  # a session it does not own
])
def test_adopting_anything_but_what_the_dead_owner_left_is_a_violation(
    adoption: SessionAdopted
) -> None:
    with pytest.raises(RuleViolation):
        fold(*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
             ManagerOpened(M2, 12), SessionClaimed(M2, "chat", WINDOW_MS),
             *([ManagerOpened(M3, 13)] if adoption.previous == M3 else []), adoption)


def test_adopting_a_discarded_generation_is_a_violation() -> None:
    with pytest.raises(RuleViolation, match="did not leave"):
        fold(*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
             SessionDiscarded("chat", RECOVERY, "window passed"),
             ManagerOpened(M2, 12), SessionClaimed(M2, "chat", WINDOW_MS),
             SessionAdopted(M2, "chat", G1, M1))


def test_a_discard_gives_the_generation_up_and_says_why() -> None:
    state = fold(*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
                 SessionDiscarded("chat", RECOVERY, "window passed"))
    session = state.sessions["chat"]
    assert (session.kept, session.discarded_reason) == (None, "window passed")
    assert kept_for_resume(state, state.generations[G1]) is None


def test_discarding_a_session_its_owner_still_holds_is_a_violation() -> None:
    with pytest.raises(RuleViolation, match="still owns"):
        fold(*owner_with_a_directory(), SessionDiscarded("chat", RECOVERY, "no"))
    with pytest.raises(RuleViolation, match="never claimed"):
        fold(SessionDiscarded("chat", RECOVERY, "no"))


def test_an_artifact_is_kept_until_its_removal_and_names_its_session() -> None:
    kept = ArtifactKept(M1, hex_id("a"), "report.txt", "0" * 64, 5)
    state = fold(*owner_with_a_directory(), kept, ManagerClosed(M1))
    artifact = state.artifacts[hex_id("a")]
    assert (artifact.label, artifact.size, artifact.manager, artifact.session) == (
        "report.txt", 5, M1, "chat")
    assert fold(*owner_with_a_directory(), kept, ManagerClosed(M1),
                ArtifactRemoved(hex_id("a"), RECOVERY)).artifacts == {}


def test_keeping_an_id_twice_or_removing_an_unknown_one_is_a_violation() -> None:
    kept = ArtifactKept(M1, hex_id("a"), "x", "0" * 64, 5)
    with pytest.raises(RuleViolation, match="a second time"):
        fold(ManagerOpened(M1, 11), kept, kept)
    with pytest.raises(RuleViolation, match="which is not kept"):
        fold(ArtifactRemoved(hex_id("a"), RECOVERY))


def test_a_checkpoint_holds_sessions_and_artifacts_as_the_replay_has_them() -> None:
    state = fold(*owner_with_a_directory(), ArtifactKept(M1, hex_id("a"), "r.txt", "0" * 64, 5),
                 ManagerDied(M1, RECOVERY), ManagerOpened(M2, 12),
                 SessionClaimed(M2, "chat", WINDOW_MS), SessionAdopted(M2, "chat", G1, M1),
                 ManagerOpened(M3, 13), SessionClaimed(M3, "other", 0))
    restored = checkpoint.decode(checkpoint.encode(state))
    assert restored == state
    assert restored.sessions["chat"].adoptions == 1
    assert restored.artifacts[hex_id("a")].size == 5
    # A fold resumed from it knows who owns what.
    assert Fold(restored).owned == {M2: "chat", M3: "other"}


# -- forgetting what is finished --------------------------------------------------------------


def removed(generation: str) -> list[Event]:
    return [RemovalStarted(generation, RECOVERY, "retired and no lease left"),
            RemovalFinished(generation, RECOVERY, "removed")]


def test_a_session_is_forgotten_once_its_owner_closed_and_its_directories_are_removed() -> None:
    closed = [*owner_with_a_directory(), ManagerClosed(M1)]
    # The closed owner's directory is still being removed: the session stays.
    assert fold(*closed).sessions["chat"].owner == M1
    state = fold(*closed, *removed(G1))
    assert state.sessions == {}
    assert Fold(state).owned == {}
    # An owner that closes with nothing left takes its session along at once.
    assert fold(ManagerOpened(M2, 12), SessionClaimed(M2, "other", 0),
                ManagerClosed(M2)).sessions == {}


def test_a_dead_owners_session_stays_while_its_directory_is_kept_and_goes_with_the_directory(
) -> None:
    died = [*owner_with_a_directory(), ManagerDied(M1, RECOVERY)]
    assert fold(*died).sessions["chat"].kept == G1
    discarded = [*died, SessionDiscarded("chat", RECOVERY, "window passed")]
    assert fold(*discarded).sessions["chat"].discarded_reason == "window passed"
    assert fold(*discarded, *removed(G1)).sessions == {}


def test_an_adopted_session_stays_with_its_new_owner_while_the_old_one_is_forgotten() -> None:
    state = fold(*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
                 ManagerOpened(M2, 12), SessionClaimed(M2, "chat", WINDOW_MS),
                 SessionAdopted(M2, "chat", G1, M1))
    assert M1 not in state.managers
    assert state.sessions["chat"].owner == M2


def test_a_forgotten_session_claimed_again_starts_afresh_and_its_history_tells_it_as_one(
) -> None:
    first = [*owner_with_a_directory(), ManagerDied(M1, RECOVERY),
             ManagerOpened(M2, 12), SessionClaimed(M2, "chat", WINDOW_MS),
             SessionAdopted(M2, "chat", G1, M1), Retained(M2),
             LeaseAcquired(M2, G1, hex_id("lease2")), ManagerClosed(M2), *removed(G1)]
    again = [*first, ManagerOpened(M3, 13), SessionClaimed(M3, "chat", 0)]
    records = [Record(seq, 1000.0 + seq, event) for seq, event in enumerate(again, 1)]
    state = replay(records)
    session = state.sessions["chat"]
    assert (session.owner, session.adoptions, session.used_at, session.adopted_from) == (
        M3, 0, None, None)
    # A claim of a name nothing is left of resumes nothing.
    assert resumable(state, "chat") == Resumable(session, state.managers[M3], None)
    # The history (journal-inspect state) tells what a fold that never forgets would.
    history = Forgotten()
    whole = history.whole(replay(records, history=history))
    told = whole.sessions["chat"]
    assert (told.owner, told.adoptions, told.adopted_from, told.used_at) == (
        M3, 1, M1, 1000.0 + first.index(LeaseAcquired(M2, G1, hex_id("lease2"))) + 1)
    partial = Forgotten()
    assert partial.whole(replay(records[:len(first)], history=partial)).sessions[
        "chat"].owner == M2
