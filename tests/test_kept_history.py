"""What the readers say once retention retired the history that made what still lives.

Every reader starts from the checkpoint where the kept history begins and
folds the kept tail (``sessiontemp.journal.history``): a manager opened, a
generation created and a lease taken before that point are still live, and
are told as such; what the checkpoint does not hold (a lease's label, the
records of a generation created and removed before it) is said in words,
with where the kept history starts; a moment before it is answered with
"history before event N was retired", never with another moment's state.

The journals are real: a manager in this process holds a lease while
recovery passes with ``Retention(0, 0, 0)`` checkpoint, roll over and retire
every sealed segment, and ``journal-inspect`` runs in a process of its own.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from sessiontemp import HistoryRetired, Lease, Manager, recover
from sessiontemp.inspect import EventFilter, events, explain, state_at, summary
from sessiontemp.inspect.read import when
from sessiontemp.journal import Retention
from sessiontemp.space.usage import human
from tests import zygote

JOURNAL = "journal.sqlite3"
EAGER = Retention(segment_bytes=0, history_bytes=0, history_age=0)
RULE = "(the retention rule: the documentation's journal page, \"Bounded journal\")"


@attrs.frozen
class Retired:
    """A root whose history up to event ``first - 1`` was retired, and what lives on it."""

    root: Path
    manager: Manager
    lease: Lease
    gone: str  # a generation created and removed before the kept history
    first: int  # the first event of the kept history
    first_time: float

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL


@pytest.fixture
def retired(root: Path) -> Iterator[Retired]:
    """A live manager holding a lease on its current directory, whose every record is retired."""
    with Manager(root, retention=EAGER) as manager:
        manager.retain()
        with manager.acquire(label="first") as first:
            gone = first.generation
        manager.rotate()  # the first directory goes: created and removed before the kept history
        lease = manager.acquire(label="build --target all")
        acquired = lease_seq(root, lease)
        try:
            (lease.path / "data.bin").write_bytes(os.urandom(200_000))
            manager.measure()
            # Enough events for a recovery pass to write a checkpoint (and roll over);
            # the next pass retires every sealed segment.
            for _ in range(60):
                manager.acquire().release()
            for _ in range(2):
                recover(root, retention=EAGER)
            history = summary(root / JOURNAL).history
            assert history is not None
            assert history.retired_until > acquired, (
                "the lease's records were not retired: the test did not reach its case")
            # The kept history starts with this lease's two events.
            manager.acquire(label="after").release()
            start = next(events(root / JOURNAL, EventFilter(
                since_seq=history.retired_until + 1, limit=1)))
            yield Retired(root, manager, lease, gone, history.retired_until + 1, start.time)
        finally:
            lease.release()


def lease_seq(root: Path, lease: Lease) -> int:
    """The seq of the record of *lease*'s acquire."""
    (found,) = [row.seq for row in events(root / JOURNAL, EventFilter(kinds=("lease.acquired",)))
                if row.fields.get("lease") == lease.id]
    return found


def test_explain_of_a_live_generation_whose_creation_was_retired_tells_it_live_with_its_leases_holders_and_size(  # noqa: E501 (a sentence)
    retired: Retired,
) -> None:
    manager, lease = retired.manager, retired.lease
    gid = lease.generation
    generation = manager.state.generations[gid]
    assert generation.measured_at is not None
    pid = os.getpid()
    ran = zygote.journal_inspect("--root", retired.root, "explain", gid)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == f"Generation {gid} (live):"
    assert lines[1] == (
        f"  [{generation.created_seq}] Created at {when(generation.created_at)} by manager "
        f"{manager.id} (pid {pid}), before the kept history, which starts at event "
        f"{retired.first:,} on {when(retired.first_time)}: its records until then were "
        f"retired with the history before it. Lease(s) {lease.id} were taken on it before "
        "then (their labels went with that history).")
    assert lines[-1].endswith(
        f"It is still live: the current directory of manager {manager.id} (pid {pid}), held "
        f"by {lease.id}. Its size on disk: the last measurement "
        f"{human(generation.measured_bytes or 0)} in {generation.measured_inodes or 0:,} "
        f"inodes at {when(generation.measured_at)}; its peak {human(generation.peak_bytes)} "
        f"in {generation.peak_inodes:,} inodes.")
    assert (generation.measured_bytes or 0) >= 200_000
    # The lease taken in the kept history is told from its records, label and all.
    assert any("(after) was taken at" in line for line in lines[2:-1]), lines
    story = explain(retired.journal, gid, retired.root)
    assert (story.status, story.manager, story.leases) == ("live", manager.id, (lease.id,))
    assert not any("stray" in s.text or "unknown" in s.text for s in story.sentences)


def test_summary_after_retirement_counts_the_live_manager_its_generation_and_its_lease(
    retired: Retired,
) -> None:
    manager, lease = retired.manager, retired.lease
    ran = zygote.journal_inspect("--root", retired.root, "summary", "--json")
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert found["managers"] | {} == {
        "opened": 0, "closed": 0, "dead": 0, "running": 1, "live": 1, "gone": 0, "unknown": 0,
        "sealed": 0, "owners": 1, "before_history": 1,
    }
    assert found["generations"] == {
        "total": 1, "live": 1, "retired": 0, "removal_pending": 0, "removed": 0,
        "leases_held": 1, "held_by_commands": 0, "before_history": 1,
    }
    assert [(m["id"], m["current"], m["liveness"]) for m in found["running_managers"]] == [
        (manager.id, lease.generation, "live")]
    assert found["held"] == []
    assert (found["space"]["measured"], found["space"]["largest"]) == (1, lease.generation)
    text = zygote.journal_inspect("--root", retired.root).stdout
    assert ("managers     0 opened (1 opened before the kept history), 0 closed, 0 dead, 1 not "
            "ended (1 live, 0 gone, 0 liveness unknown; 0 sealed, 1 owners)\n") in text
    assert "generations  1 in all: 1 live, 0 retired, 0 removal pending, 0 removed; 1 leases "\
        "held\n" in text
    assert "of ended managers" not in text


def test_state_at_a_moment_before_the_kept_history_says_history_before_it_was_retired_exit_1(
    retired: Retired,
) -> None:
    first, journal = retired.first, retired.journal
    said = (f"journal {journal}: history before event {first:,} was retired, so the state right "
            f"after event 3 is no longer known. Ask for event {first - 1:,} or later {RULE}\n")
    for live in ((), ("--live",)):
        ran = zygote.journal_inspect("--root", retired.root, "state", "--at", "3", *live)
        assert (ran.returncode, ran.stdout, ran.stderr) == (1, said, "")
    # A time before the first kept event: the last event at or before it was retired.
    moment = dt.datetime.fromtimestamp(retired.first_time - 0.001).astimezone().isoformat()
    ran = zygote.journal_inspect("--root", retired.root, "state", "--at", moment, "--json")
    assert (ran.returncode, ran.stdout) == (1, ""), ran.stdout
    assert f"history before event {first:,} was retired" in ran.stderr
    assert "the state right after event 0 is no longer known" in ran.stderr
    with pytest.raises(HistoryRetired) as caught:
        state_at(journal, first - 2, live=True)
    assert (caught.value.seq, caught.value.retired_until) == (first - 2, first - 1)
    # Right after the last event retired, the state is the checkpoint's: it is answered.
    at = state_at(journal, first - 1, live=True)
    assert (at.seq, set(at.state.generations)) == (first - 1, {retired.lease.generation})
    assert at.state.generations[retired.lease.generation].leases == {retired.lease.id}


def test_explain_of_a_generation_whose_records_were_all_retired_says_where_the_kept_history_starts(
    retired: Retired,
) -> None:
    first = retired.first
    ran = zygote.journal_inspect("--root", retired.root, "explain", retired.gone)
    assert (ran.returncode, ran.stdout) == (1, (
        f"Generation {retired.gone} (unknown):\n"
        f"  [{first - 1}] No record of it is kept: history before event {first:,} was retired, "
        f"and the kept history, which starts at event {first:,} on "
        f"{when(retired.first_time)}, never names it. If it was created and removed before "
        "then, its story went with that history; if not, check the id (`journal-inspect events "
        "--kind generation.created` lists them).\n")), ran.stderr
