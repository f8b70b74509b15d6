"""Every seam a reader of the journal meets: another process acting between two of its reads.

A reader (each of journal-inspect's subcommands, as :mod:`sessiontemp.inspect`
runs them) is stopped before each SQL statement it runs, the k-th for
k = 1, 2, ... until it finishes before reaching k, and there a real
neighbour process (:mod:`tests.neighbour`) does one thing to the journal:

- ``rollover``: a checkpoint, a rollover with it, every sealed segment retired;
- ``checkpoint``: a checkpoint that rolls nothing over;
- ``retire``: the retirement of a segment sealed before the read began;
- ``maintain``: a long-lived manager's maintenance (checkpoint, rollover, retirement);
- ``recover``: a whole recovery pass, which buries a manager killed before the read;
- ``busy``: the journal's write lock taken and kept until the read has ended;
- ``fresh``: the journal moved aside (as the README's way out says) and a new
  one started by a manager's open.

Whatever it is, the reader answers for one journal at one moment: the
journal is sound throughout, so verify finds no problem, no record is
refused, and nothing fails; a reader never waits for the write lock.  The
default run walks every statement of ``verify`` (the reader that reads
most: every file's integrity, every checkpoint, the whole chain) with a
rollover and retirement, a busy journal and a fresh one; ``-m slow`` every
subcommand against every seam (49 walks, some 1,000 statements, about 7
minutes on two shared cores).
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeAlias

import pytest

from sessiontemp import Manager
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.inspect import events, explain, fsck, state_at, summary, timeline, verify
from sessiontemp.journal.errors import SessionTempError
from sessiontemp.journal.testing import statements
from tests import zygote
from tests.neighbour import Neighbour

Seam: TypeAlias = Literal["rollover", "checkpoint", "retire", "maintain", "recover", "busy",
                          "fresh"]
SEAMS: tuple[Seam, ...] = ("rollover", "checkpoint", "retire", "maintain", "recover", "busy",
                           "fresh")
Reader: TypeAlias = Literal["verify", "state", "summary", "events", "explain", "fsck",
                            "timeline"]
READERS: tuple[Reader, ...] = ("verify", "state", "summary", "events", "explain", "fsck",
                               "timeline")
# What the default run walks: verify (the reader that reads the most) against
# a rollover with retirement, a journal held busy and a journal started afresh.
DEFAULT: frozenset[tuple[Reader, Seam]] = frozenset(
    {("verify", "rollover"), ("verify", "busy"), ("verify", "fresh")})
# A bound on the statements one reader may run on this small journal.
MOST = 400


# A manager that dies holding a lease: a recovery pass has one to bury.
DIES = textwrap.dedent("""
    import os, signal, sys
    from sessiontemp import Manager
    manager = Manager(sys.argv[1])
    manager.retain()
    manager.acquire(label="dies")
    os.kill(os.getpid(), signal.SIGKILL)
""")


def read(reader: Reader, root: Path, gid: str, seam: Seam) -> list[str]:
    """Run *reader* on *root*; what it got wrong (nothing, on a sound journal).

    Retention here keeps nothing, so a rollover and retirement before the
    reader looks leaves no event kept at all: no row, and no story of a
    generation, is then the right answer.
    """
    journal = root / JOURNAL_NAME
    if reader == "verify":
        return [str(p) for p in verify(journal).problems]
    if reader == "state":
        found = state_at(journal)
        return [f"refused record {seq}" for seq in found.refused]
    if reader == "summary":
        return [str(p) for p in summary(journal, root).verify.problems]
    if reader == "events":
        seqs = [row.seq for row in events(journal)]
        return [] if seqs == list(range(seqs[0] if seqs else 0, (seqs[0] if seqs else 0)
                                        + len(seqs))) else [f"events not one run: {seqs}"]
    if reader == "explain":
        return [] if explain(journal, gid, root).sentences else ["no story"]
    if reader == "fsck":
        # A manager that died before the read, which the pass buries: a
        # reader that looked before the pass rightly says it is not yet.
        return [str(f) for f in fsck(root).findings if seam != "recover"
                or f.check not in ("unrecovered", "removable")]
    drawn = timeline(journal, root.parent / "timeline.svg")
    return [f"refused record {seq}" for seq in drawn.refused]


class Stepper:
    """Stops the reader before its k-th statement and has the neighbour act there."""

    def __init__(self, k: int, act: Callable[[], object]) -> None:
        self.k = k
        self.act = act
        self.seen = 0
        self.acted = False
        self.failed: list[str] = []

    def __call__(self, sql: str) -> None:
        self.seen += 1
        if self.seen != self.k:
            return
        self.acted = True
        # What a trace callback raises is lost: recorded, asserted after.
        try:
            self.act()
        except BaseException as e:
            self.failed.append(repr(e))


def prepare(seam: Seam, root: Path, manager: Manager, neighbour: Neighbour) -> None:
    """What the seam needs before the read: events after the base, a sealed segment, a death."""
    manager.acquire().release()
    manager.rotate()
    if seam == "retire":
        neighbour.seal(root)
        manager.acquire().release()
    if seam == "recover":
        died = zygote.shared("sessiontemp").run(["-c", str(root)], script=DIES)
        assert died.returncode == -signal.SIGKILL, died.stderr


def action(seam: Seam, root: Path, neighbour: Neighbour) -> Callable[[], object]:
    if seam == "busy":
        return lambda: neighbour.hold(root)
    if seam == "fresh":
        def afresh() -> None:
            aside = root.parent / f"aside-{time.monotonic_ns()}"
            aside.mkdir()
            for name in os.listdir(root):
                if name.startswith(JOURNAL_NAME):
                    os.rename(root / name, aside / name)
            assert "manager" in neighbour.ask("open", str(root))
        return afresh
    return lambda: neighbour.move(seam, root)


def walk(reader: Reader, seam: Seam, root: Path, neighbour: Neighbour) -> int:
    """Every statement of *reader* with *seam* before it; returns how many there were."""
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        assert k < MOST, f"{reader} ran more than {MOST} statements"
        with Manager(root, durability="relaxed") as manager:
            manager.retain()
            prepare(seam, root, manager, neighbour)
            with manager.acquire(label="explained") as lease:
                gid = lease.path.name
            manager.release()
        stepper = Stepper(k, action(seam, root, neighbour))
        try:
            with statements(stepper):
                try:
                    found = read(reader, root, gid, seam)
                except SessionTempError as e:
                    found = [repr(e)]
        finally:
            neighbour.let_go()
        if found == ["no story"] and read(reader, root, gid, seam):
            # Its history retired, or a journal started afresh, before the
            # read: what the journal says now, too.
            found = []
        wrong += [f"{reader} with {seam} before statement {k}: {w}"
                  for w in [*found, *stepper.failed]]
        if not stepper.acted:
            break
    assert wrong == [], f"{len(wrong)} wrong answers of {k}: {wrong[:5]}"
    return k - 1


def seams_of(slow: bool) -> list[Any]:
    cases = []
    for reader in READERS:
        for seam in SEAMS:
            default = (reader, seam) in DEFAULT
            marks = () if default and not slow else (pytest.mark.slow,)
            if default != slow:
                cases.append(pytest.param(reader, seam, marks=marks, id=f"{reader}-{seam}"))
    return cases


@pytest.mark.parametrize(("reader", "seam"), seams_of(False) + seams_of(True))
def test_a_reader_stopped_before_each_statement_while_another_process_acts_answers_right(
    root: Path, neighbour: Neighbour, reader: Reader, seam: Seam,
) -> None:
    walked = walk(reader, seam, root, neighbour)
    # TESTING.md's counts (with -s).
    print(f"\n{reader} with {seam}: {walked} statements")
    assert walked > 0
