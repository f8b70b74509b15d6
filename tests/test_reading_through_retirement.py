"""A reader of the journal while another process rolls it over and retires what it sealed.

``journal-inspect verify`` (here :func:`sessiontemp.inspect.verify`, what it
runs) reads a healthy journal in a loop in a thread of this process, as
``watch`` would run it, while this process's manager appends and a real
neighbour process (:mod:`tests.neighbour`) checkpoints, rolls the journal
over and retires every sealed segment, over and over.  Every answer must be
"no problems": the journal is healthy throughout, and a reader must never
tell its user that a segment "is missing" (and to move the journal aside,
which starts a new history) or that a checkpoint cannot be compared, because
a retirement happened while it read.

Found by the kill torture (``tools/torture.py``, whose inspector runs verify
every second): 5 wrong answers of 335 in the 600-kill run; here, before the
store pinned its snapshots, between one verify in fifteen and one in ninety
answered wrongly (a segment "is missing", "unknown database s2", a
checkpoint that "could not be compared"), so the default run's 450 reads
would miss it about once in a hundred runs at the rarest; ``-m slow`` reads
5,000 times.  The seams one at a time, each between every two statements
of every reader: ``tests/test_reader_seams.py``.
"""

from __future__ import annotations

import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sessiontemp import Manager, recover
from sessiontemp.inspect import events, fsck, state_at, summary, timeline, verify
from sessiontemp.journal.errors import SessionTempError
from sessiontemp.journal.segments import Retention
from sessiontemp.root import JOURNAL_NAME
from tests import zygote
from tests.faultchild import segment_files
from tests.neighbour import Neighbour

# Enough reads and retirements that a reader racing them meets one: at the
# old rate, one read in ninety at the rarest, 450 reads miss it 1 run in 100
# (reads stop short of nothing: the loop goes on until both counts are met).
READS = 450
RETIREMENTS = 30
# A bound on the test's time whatever the machine's load (it takes some 5 s).
SECONDS = 60.0


@pytest.mark.parametrize(("wanted", "retirements", "seconds"), [
    (READS, RETIREMENTS, SECONDS),
    pytest.param(10 * READS + 500, 10 * RETIREMENTS + 100, 10 * SECONDS, marks=pytest.mark.slow),
], ids=["default", "long"])
def test_verify_in_a_loop_while_another_process_retires_answers_no_problems_every_time(
    root: Path, neighbour: Neighbour, wanted: int, retirements: int, seconds: float,
) -> None:
    wrong: list[str] = []
    reads = 0
    stop = threading.Event()

    def read() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                found = verify(root / JOURNAL_NAME)
            except SessionTempError as e:
                wrong.append(repr(e))
            else:
                wrong.extend(str(problem) for problem in found.problems)
            reads += 1

    with Manager(root) as manager:
        manager.retain()
        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline and (
                    reads < wanted or neighbour.interleaved < retirements):
                for _ in range(5):
                    manager.acquire().release()
                    manager.rotate()
                neighbour.interleave(root)
        finally:
            stop.set()
            reader.join()
    assert wrong == [], f"{len(wrong)} wrong answers in {reads} reads: {wrong[:3]}"
    # Not a timed assert: a machine too loaded to read often enough in the
    # bound would only make the test weaker, so it says so.
    assert reads >= wanted, f"only {reads} reads in {seconds} s"


# A recovery pass keeping no history, killed by SIGKILL as it deletes its first
# segment: the head records the retirement, and every file is still there.
KILLED_RETIRING = textwrap.dedent("""
    import os, signal, sys
    from sessiontemp.journal import Retention
    from sessiontemp import recover
    def hook(kind, detail):
        print(detail, flush=True)
        if detail.startswith("retire "):
            os.kill(os.getpid(), signal.SIGKILL)
    recover(sys.argv[1], retention=Retention(history_bytes=0), step_hook=hook)
""")


def test_every_reader_of_a_journal_whose_retirement_was_killed_after_its_record_answers_right(
    root: Path, neighbour: Neighbour,
) -> None:
    # Segments with checkpoints, sealed, none retired.
    with Manager(root) as manager:
        manager.retain()
        for _ in range(3):
            for _ in range(5):
                manager.acquire().release()
                manager.rotate()
            neighbour.seal(root)
        manager.release()
    before = segment_files(root)
    killed = zygote.shared("sessiontemp").run(["-c", str(root)], script=KILLED_RETIRING)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert killed.stdout.splitlines()[-1].startswith("retire "), killed.stdout
    journal = root / JOURNAL_NAME
    assert set(before) <= set(segment_files(root))
    found = verify(journal)
    assert found.problems == ()
    assert state_at(journal).refused == ()
    assert summary(journal, root).verify.ok
    assert timeline(journal, root.parent / "timeline.svg").refused == ()
    assert fsck(root).ok
    seqs = [row.seq for row in events(journal)]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    # The next pass finishes the retirement.
    recover(root, retention=Retention(history_bytes=0))
    assert verify(journal).problems == ()
    assert len(segment_files(root)) < len(before)
