"""No single record bricks the root: forged ids and records the rules refuse.

Every record here is committed straight into a real journal with sqlite3,
with a correct digest, the way a buggy version, a hand edit or a forger
would leave it.  Then the root is opened by a Manager, recovered, and
repaired with ``journal-inspect fsck --repair`` in another process, and
checked:

* an id that would name a path outside the root (``../../../outside``,
  ``abc/def``) touches nothing there, or anywhere but the root's own
  entries, even with directories staged so that the path would resolve;
* a record the lifecycle rules refuse holds what it names (kept on disk,
  reported with the record's seq, logged as ``journal.refused``) while
  everything else is recovered as usual, and the two documented ways out
  work.

``journal-inspect verify`` names each such record.  The tests marked
"without ..." break the defence (id validation) and show the same test
then fails.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sessiontemp import Manager, Report, recover
from sessiontemp._kernel.root import generation_name
from sessiontemp.journal import State, Store, events, ids, replay
from sessiontemp.journal.events import (
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    ManagerOpened,
    RemovalStarted,
    Rotated,
)
from sessiontemp.journal.store import chain
from tests.conftest import journal_state
from tests.model import simulate_kill
from tests.zygote import journal_inspect

JOURNAL = "journal.sqlite3"


def forge(root: Path, event: events.Event) -> int:
    """Commit *event* as it is, unchecked, with a correct digest; return its seq.

    The event classes check nothing when built: decoding is where a
    journal's ids are checked, so any id can be forged this way.
    """
    kind, payload = events.encode(event)
    conn = sqlite3.connect(root / JOURNAL, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        seq, digest = conn.execute(
            "SELECT seq, digest FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        time_ = 1.0
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                     (seq + 1, time_, kind, payload, chain(digest, seq + 1, time_, kind, payload)))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return int(seq) + 1


def inspect(*args: str | Path, ok: tuple[int, ...] = (0, 1)) -> subprocess.CompletedProcess[str]:
    result = journal_inspect(*args)
    assert result.returncode in ok, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def verify_problems(root: Path) -> list[dict[str, Any]]:
    result = inspect("--root", root, "verify", "--json")
    problems: list[dict[str, Any]] = json.loads(result.stdout)["problems"]
    assert (result.returncode == 1) == bool(problems)
    return problems


def snapshot(top: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under *top* (itself included): inode, mode and content digest."""
    seen: dict[str, tuple[int, int, str]] = {}
    for here, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            path = Path(here, name)
            st = path.lstat()
            content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            seen[str(path.relative_to(top))] = (st.st_ino, st.st_mode, content)
    return seen


def with_generations(root: Path) -> tuple[Manager, list[Path], str]:
    """A manager with two generations on disk: one retired but leased, one current.

    Returns it, the two generations' directories (each its leases' path's parent), and
    the retired one's generation id.
    """
    manager = Manager(root)
    manager.retain()
    first = manager.acquire()
    manager.rotate()
    second = manager.acquire()
    return manager, [first.path.parent, second.path.parent], first.generation


def dead_manager(root: Path) -> tuple[str, list[Path], str]:
    """:func:`with_generations`, killed: its id, directories and retired generation."""
    manager, directories, retired = with_generations(root)
    simulate_kill(manager)
    return manager.id, directories, retired


def tolerant_state(root: Path) -> State:
    """The journal's state the way recovery reads it: refused records held, not raised."""
    store = Store(root / JOURNAL, readonly=True)
    try:
        return replay(store.records(tolerant=True), tolerant=True)
    finally:
        store.close()


def still_usable(root: Path) -> None:
    """A new manager on *root* hands out a directory, runs a command in it and cleans up."""
    with Manager(root) as m:
        m.retain()
        with m.acquire() as lease:
            assert lease.popen([sys.executable, "-c", "pass"]).wait() == 0
            path = lease.path
        m.rotate()
        assert not path.exists()


# -- forged ids that name paths outside the root ---------------------------------------------


# Generation names are "sessiontemp-gen-" + id: with a directory named
# "sessiontemp-gen-.." staged in the root, "../../../outside" resolves to
# a sibling of the root; "abc/def" to a directory inside a staged one.
FORGED_IDS: dict[str, Callable[[Path], Path]] = {
    "../../../outside": lambda root: root.parent / "outside",
    "../../outside": lambda root: root / "outside",
    "abc/def": lambda root: root / "sessiontemp-gen-abc" / "def",
}


@pytest.fixture
def staged(root: Path) -> dict[str, Path]:
    """A root with a dead manager, and the directories forged ids would reach, filled."""
    dead_manager(root)
    for prefix in ("sessiontemp-gen-", "sessiontemp-trash-"):
        (root / f"{prefix}..").mkdir()
        (root / f"{prefix}abc" / "def").mkdir(parents=True)
    targets = {gid: where(root) for gid, where in FORGED_IDS.items()}
    for target in targets.values():
        (target / "keep").mkdir(parents=True, exist_ok=True)
        (target / "precious.txt").write_text("not sessiontemp's")
        (target / "keep" / "deep.txt").write_text("nor this")
    assert {gid: os.path.realpath(root / generation_name(gid)) for gid in targets} == {
        gid: str(t) for gid, t in targets.items()}
    return targets


def forge_walk_out(root: Path, manager: str, gid: str, target: Path) -> list[int]:
    """Records that, if believed, would make recovery remove *target* as generation *gid*.

    Returns the seqs of those naming *gid*; valid rotates surround them, so
    that only the id keeps them from being applied.
    """
    st = target.stat()
    recovery = ids.new_recovery()
    forge(root, Rotated(manager))
    created = [forge(root, GenerationCreated(manager, gid)),
               forge(root, GenerationReady(manager, gid, st.st_dev, st.st_ino))]
    forge(root, Rotated(manager))
    return [*created, forge(root, RemovalStarted(gid, recovery, "forged"))]


def _seq(message: str) -> int:
    """The seq a problem's message starts with ("event N ...")."""
    return int(message.split()[1])


def protected(tree: dict[str, tuple[int, int, str]]) -> dict[str, tuple[int, int, str]]:
    """The entries of a snapshot of tmp_path that are not the library's own under ``root``."""
    return {k: v for k, v in tree.items() if not _library_owns(k)}


def _library_owns(relative: str) -> bool:
    parts = Path(relative).parts
    if len(parts) < 2 or parts[0] != "root":
        return False
    name = parts[1]
    return name.startswith(JOURNAL) or name in ("managers", "recovery.lock") or (
        name.startswith(("sessiontemp-gen-", "sessiontemp-trash-"))
        and bool(ids.is_generation(name.split("-", 2)[2])))


def test_forged_generation_ids_that_walk_out_of_the_root_touch_nothing_and_verify_names_them(
    root: Path, tmp_path: Path, staged: dict[str, Path],
) -> None:
    manager = next(iter(journal_state(root).managers))
    forged = {gid: forge_walk_out(root, manager, gid, target) for gid, target in staged.items()}
    before = protected(snapshot(tmp_path))
    with capture_logs() as logs:
        still_usable(root)
        recover(root)
    fsck = json.loads(inspect("--root", root, "fsck", "--repair", "--json").stdout)
    assert fsck["repair"]["ran"]
    assert protected(snapshot(tmp_path)) == before
    assert {seq for seqs in forged.values() for seq in seqs} <= {
        _seq(f["message"]) for f in fsck["findings"] if f["check"] == "refused"}
    refused = {e["seq"] for e in logs if e["event"] == "journal.refused"}
    # The digests are right, so the chain check alone finds nothing ...
    store = Store(root / JOURNAL, readonly=True)
    try:
        assert store.verify() == []
    finally:
        store.close()
    # ... and journal-inspect verify names every forged record.
    problems = verify_problems(root)
    for gid, seqs in forged.items():
        assert set(seqs) <= refused, gid
        assert set(seqs) <= {p["seq"] for p in problems}, gid
        assert any(p["seq"] == seqs[0] and "'generation' that is not a canonical" in p["message"]
                   for p in problems), problems
    still_usable(root)


def test_without_id_validation_the_same_forgery_empties_a_directory_outside_the_root(
    root: Path, tmp_path: Path, staged: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test above can fail: accept any generation id and the sibling of the root is emptied."""
    monkeypatch.setitem(events._CHECKS, "generation", lambda value: None)
    gid = "../../../outside"
    manager = next(iter(journal_state(root).managers))
    forge_walk_out(root, manager, gid, staged[gid])
    before = protected(snapshot(tmp_path))
    recover(root)
    assert not staged[gid].exists()
    assert protected(snapshot(tmp_path)) != before


# -- a record the rules refuse -----------------------------------------------------------------


@pytest.fixture
def refused(root: Path) -> dict[str, Any]:
    """Two dead managers' generations, and a lease for the first's retired one, refused."""
    # Both opened before either dies: an open's recovery would bury the other.
    held, held_dirs, retired = with_generations(root)
    other, other_dirs, _ = with_generations(root)
    simulate_kill(held)
    simulate_kill(other)
    seq = forge(root, LeaseAcquired(held.id, retired, ids.new_lease(), "forged"))
    return {"seq": seq, "held": held.id, "held_dirs": held_dirs, "retired": retired,
            "other": other.id, "other_dirs": other_dirs}


def recover_by(how: str, root: Path) -> Report:
    if how == "recover":
        return recover(root)
    with Manager(root) as m:
        m.retain()
        with m.acquire():
            pass
        return m.recovery


KEPT = "kept: event {seq}, which the lifecycle rules refuse, names it or its manager"
DOCS = Path(__file__).parents[1] / "docs"
WAY_OUT = "A record the rules refuse"


@pytest.mark.parametrize("how", ["recover", "open"])
def test_a_refused_record_holds_what_it_names_and_recovery_proceeds_for_the_rest(
    root: Path, refused: dict[str, Any], how: str,
) -> None:
    seq = refused["seq"]
    with capture_logs() as logs:
        report = recover_by(how, root)
    # Everything the record does not name is recovered as usual.
    assert {r.path for r in report.removed} == set(refused["other_dirs"])
    assert not any(d.exists() for d in refused["other_dirs"])
    # What it names is kept, and reported by path with the record's seq.
    assert all(d.is_dir() for d in refused["held_dirs"])
    assert {s.path for s in report.skipped} == set(refused["held_dirs"])
    assert all(s.reason.startswith(KEPT.format(seq=seq)) for s in report.skipped)
    assert [e["seq"] for e in logs if e["event"] == "journal.refused"] == [seq]
    state = tolerant_state(root)
    assert state.held == {refused["held"]: seq, refused["retired"]: seq}
    # Dead, and its generations removed: the state has let it go.
    assert refused["other"] not in state.managers
    assert all(state.generations[d.name.removeprefix("sessiontemp-gen-")].removal is None
               for d in refused["held_dirs"])
    # And it stays so: the next pass keeps the same, and removes nothing.
    again = recover(root)
    assert again.removed == ()
    assert {s.path for s in again.skipped} == set(refused["held_dirs"])
    problems = verify_problems(root)
    assert [(p["seq"], p["check"]) for p in problems] == [(seq, "rules")]
    assert "which is not current" in problems[0]["message"]
    # The first step out: explain says each held directory is held, and why.
    for directory in refused["held_dirs"]:
        story = json.loads(inspect("--root", root, "explain", directory, "--json").stdout)
        assert story["story"][-1]["kind"] == "now"
        assert story["story"][-1]["text"].startswith(f"It is kept: event {seq}, which the "
                                                     "lifecycle rules refuse")
    fsck = json.loads(inspect("--root", root, "fsck", "--json").stdout)
    assert [(f["check"], _seq(f["message"])) for f in fsck["findings"]
            if f["check"] == "refused"] == [("refused", seq)]
    # Both point at the section of the documentation that says the way out.
    assert f"## {WAY_OUT}" in (DOCS / "concepts" / "faults.md").read_text()
    assert all(f"faults page, '{WAY_OUT}'" in s.reason for s in report.skipped)
    assert all(f'faults page, "{WAY_OUT}"' in f["fix"] for f in fsck["findings"]
               if f["check"] == "refused")
    assert {f["path"] for f in fsck["findings"] if f["check"] == "kept"} == {
        str(d) for d in refused["held_dirs"]}
    still_usable(root)


def test_held_directories_removed_by_hand_let_recovery_carry_on_quietly(
    root: Path, refused: dict[str, Any],
) -> None:
    recover(root)
    for directory in refused["held_dirs"]:
        shutil.rmtree(directory)
    with capture_logs() as logs:
        report = recover(root)
    assert report.removed == ()
    assert report.skipped == ()
    assert not [e for e in logs if e["event"] == "generation.skipped"]
    # The record itself is still there, and still named on every replay.
    assert [e["seq"] for e in logs if e["event"] == "journal.refused"] == [refused["seq"]]
    still_usable(root)


def test_a_journal_moved_aside_starts_a_fresh_history_that_sweeps_all_but_locked_directories(
    root: Path, refused: dict[str, Any], tmp_path: Path,
) -> None:
    recover(root)
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in os.listdir(root):
        if name.startswith(JOURNAL):
            os.rename(root / name, aside / name)
    kept, swept = refused["held_dirs"]
    fd = os.open(kept, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        report = recover(root, stale_after=0)
        assert {r.path for r in report.removed} == {swept}
        assert [s.path for s in report.skipped] == [kept]
    finally:
        os.close(fd)
    assert {r.path for r in recover(root, stale_after=0).removed} == {kept}
    assert sorted(n for n in os.listdir(root) if n.startswith("sessiontemp-")) == []
    assert verify_problems(root) == []
    still_usable(root)


# A manager's liveness lock is ROOT/managers/<id>.lock, probed, and unlinked
# once the manager is found dead: this id would reach a sibling of the root.
FORGED_MANAGER = "../../outside/victim"


@pytest.mark.parametrize("validated", [True, False], ids=["validated", "without-validation"])
def test_a_forged_manager_id_never_reaches_a_lock_file_outside_the_root(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, validated: bool,
) -> None:
    """Without id validation a recovery would find the victim's file unlocked and unlink it."""
    dead_manager(root)
    victim = tmp_path / "outside" / "victim.lock"
    victim.parent.mkdir()
    victim.write_text("someone else's")
    assert os.path.realpath(root / "managers" / f"{FORGED_MANAGER}.lock") == str(victim)
    if not validated:
        monkeypatch.setitem(events._CHECKS, "manager", lambda value: None)
    seq = forge(root, ManagerOpened(FORGED_MANAGER, 1))
    with capture_logs() as logs:
        recover(root)
        still_usable(root)
    assert victim.exists() == validated
    if validated:
        assert victim.read_text() == "someone else's"
        assert seq in {e["seq"] for e in logs if e["event"] == "journal.refused"}
        assert seq in {p["seq"] for p in verify_problems(root)}
