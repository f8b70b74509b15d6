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

import contextlib
import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sessiontemp import Manager, recover
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.inspect import events, fsck, state_at, summary, timeline, verify
from sessiontemp.journal import Store
from sessiontemp.journal.errors import SessionTempError
from sessiontemp.journal.segments import Retention
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


# -- what a reader leaves on disk ------------------------------------------------------------------

# Every checkpoint starts a new segment, and every sealed one is kept.
KEEP_ALL = Retention(segment_bytes=0, history_bytes=1 << 30)
EAGER = Retention(segment_bytes=0, history_bytes=0, history_age=0)


def sealed_and_active(root: Path) -> tuple[Path, Path]:
    """A root whose journal has its head, one sealed segment and the active one; their paths."""
    for _ in range(2):
        # Each open's recovery pass checkpoints the events before it, and
        # rolls over with that checkpoint.
        with Manager(root, retention=KEEP_ALL) as manager:
            manager.retain()
            for _ in range(60):
                manager.acquire().release()
    with Manager(root, retention=KEEP_ALL):
        pass
    sealed, active = segment_files(root)
    folder = root / f"{JOURNAL_NAME}.d"
    return folder / sealed, folder / active


def opened_by(pid: int, path: Path) -> bool:
    """Whether process *pid* has a descriptor open on *path*."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
    return False


def left_beside(root: Path) -> list[str]:
    """The files of the segment directory that are no segment of the journal's."""
    names = os.listdir(root / f"{JOURNAL_NAME}.d")
    kept = set(segment_files(root))
    return sorted(n for n in names if n not in kept and n.split("-")[0] not in kept)


STRACE = shutil.which("strace")


@pytest.mark.skipif(STRACE is None, reason="needs strace, to hold a reader inside SQLite's open")
def test_a_reader_whose_segment_is_retired_inside_its_first_read_leaves_no_file_of_it(
    root: Path, tmp_path: Path,
) -> None:
    """``journal-inspect verify`` opened a sealed segment and its -wal; another process retired
    it (file, -wal and -shm unlinked) before SQLite opened the -shm, which SQLite then made
    anew beside the deleted file: nothing ever removed it, and fsck said "clean".

    strace holds the reader in that open (a delay injected into it, and only it) while the
    retirement runs; a run where the open ended first proves nothing, and is made again with
    a longer hold.
    """
    assert STRACE is not None
    sealed, _ = sealed_and_active(root)
    shm = f"{sealed}-shm"
    for hold in (2, 8, 32):
        log = tmp_path / f"strace-{hold}.log"
        reader = subprocess.Popen(
            [STRACE, "-f", "-o", str(log), "-P", shm, "-e", "trace=openat", "-e",
             f"inject=openat:delay_enter={hold * 1_000_000}:when=1",
             str(zygote.JOURNAL_INSPECT), "--root", str(root), "verify"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            # strace writes the call as it enters it, its result once it ends.
            while shm not in (log.read_text() if log.exists() else ""):
                if reader.poll() is not None:
                    out, err = reader.communicate()
                    if "ptrace" in err:
                        pytest.skip(f"strace may not trace here: {err.strip()}")
                    pytest.fail(f"the reader never opened {shm}: {out} {err}")
                time.sleep(0.01)
            retiring = Store(root / JOURNAL_NAME, retention=EAGER)
            try:
                assert sealed in retiring.retire(now=time.time())
            finally:
                retiring.close()
            held = "DELAYED" not in log.read_text()
            out, err = reader.communicate(timeout=SECONDS + hold)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(reader.pid, signal.SIGKILL)
            reader.wait()
        assert reader.returncode in (0, 1), out + err
        if held:
            break
        # The open ended before the retirement did: again, on a new segment.
        sealed, _ = sealed_and_active(root)
        shm = f"{sealed}-shm"
    else:
        pytest.fail("the reader's open of the -shm ended before each retirement")
    assert left_beside(root) == []
    assert fsck(root).ok


def traced(log: Path, path: Path, calls: str, *more: str) -> list[str]:
    """strace's words for ``journal-inspect verify`` with *calls* on *path* logged to *log*."""
    assert STRACE is not None
    return [STRACE, "-f", "-o", str(log), "-P", str(path), "-e", f"trace={calls}", *more,
            str(zygote.JOURNAL_INSPECT), "--root", str(log.parent / "root"), "verify"]


@pytest.mark.skipif(STRACE is None, reason="needs strace, to hold a reader between two calls")
def test_a_reader_held_after_its_connect_to_the_active_segment_while_another_process_seals_and_retires_it_answers_right(  # noqa: E501
    root: Path, tmp_path: Path, neighbour: Neighbour,
) -> None:
    """``journal-inspect verify`` connected to the active segment and found it not sealed; another
    process then sealed and retired it before the reader looked at its name, and the reader
    answered "cannot be opened (No such file or directory)" for a sound journal.

    A first run, with nothing held, finds which of the reader's looks at the file's name comes
    first after that connect (the calls on one layout are the same each run); the second holds
    the reader there while the neighbour rolls the journal over and retires every sealed
    segment.
    """
    _, active = sealed_and_active(root)
    assert root == tmp_path / "root"
    # Once, so that SQLite's files beside each segment are there in both runs below.
    assert subprocess.run(traced(tmp_path / "settle.log", active, "none"),
                          capture_output=True, check=False).returncode == 0
    dry = tmp_path / "dry.log"
    ran = subprocess.run(traced(dry, active, "openat,newfstatat"), capture_output=True,
                         text=True, check=False)
    if ran.returncode != 0 and "ptrace" in ran.stderr:
        pytest.skip(f"strace may not trace here: {ran.stderr.strip()}")
    assert ran.returncode == 0, ran.stderr
    looks = 0
    opened = 0
    which = None
    for line in dry.read_text().splitlines():
        if " openat(" in line:
            opened += 1
        elif " newfstatat(" in line:
            # strace counts every call it traces, on the name or on a descriptor of it.
            looks += 1
            # The connect opens the file, then marks it sticky (an O_PATH open);
            # a look at the name follows it, and it follows links (flags 0).
            if opened >= 2 and "AT_FDCWD" in line and line.rstrip().endswith(", 0) = 0"):
                which = looks
                break
    assert which is not None, dry.read_text()
    # Long enough for the neighbour's move; the reader waits it out whole.
    hold = 5
    log = tmp_path / "held.log"
    reader = subprocess.Popen(
        traced(log, active, "newfstatat",
               "-e", f"inject=newfstatat:delay_enter={hold * 1_000_000}:when={which}"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # strace writes the call as it enters it, its result once it ends.
        while len((log.read_text() if log.exists() else "").splitlines()) < which:
            assert reader.poll() is None, reader.communicate()
            time.sleep(0.01)
        done = neighbour.interleave(root)
        assert active.name not in done["after"], done
        held = "DELAYED" not in log.read_text()
        out, err = reader.communicate(timeout=SECONDS + hold)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(reader.pid, signal.SIGKILL)
        reader.wait()
    assert held, "the reader's look at the file ended before the retirement: proves nothing"
    assert reader.returncode == 0, out + err
    assert "all checks pass" in out


def test_what_a_reader_killed_inside_its_first_read_of_a_retired_segment_left_is_reported_by_fsck_and_removed_by_the_next_writer(  # noqa: E501
    root: Path,
) -> None:
    """What such a reader leaves when it is killed before it can remove them: a -shm (32 KiB,
    as SQLite makes one) and an empty -wal beside the segment's name, its file gone."""
    sealed, _ = sealed_and_active(root)
    retiring = Store(root / JOURNAL_NAME, retention=EAGER)
    try:
        assert sealed in retiring.retire(now=time.time())
    finally:
        retiring.close()
    Path(f"{sealed}-shm").write_bytes(bytes(32 << 10))
    Path(f"{sealed}-wal").write_bytes(b"")
    left = left_beside(root)
    assert left == [f"{sealed.name}-shm", f"{sealed.name}-wal"]
    found = fsck(root)
    assert sorted((f.check, f.path.name) for f in found.findings) == [
        ("leftover", name) for name in left]
    assert all("fsck --repair" in f.fix for f in found.findings)
    # A reader, however many, leaves them be: they may be another reader's.
    assert inspect_verify(root) == 0
    assert left_beside(root) == left
    with Manager(root):
        pass
    assert left_beside(root) == []
    assert fsck(root).ok


def inspect_verify(root: Path) -> int:
    return zygote.journal_inspect("--root", root, "verify").returncode


VERIFYING = textwrap.dedent("""
    import sys, time
    from sessiontemp.cli.journal_inspect import main
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        main(["--root", sys.argv[1], "verify"], out=open("/dev/null", "w"))
""")


@pytest.mark.parametrize("seconds", [
    3.0, pytest.param(60.0, marks=pytest.mark.slow)], ids=["default", "long"])
def test_readers_in_a_loop_in_other_processes_while_every_sealed_segment_is_retired_leave_no_file(
    root: Path, seconds: float,
) -> None:
    with Manager(root) as manager:
        manager.retain()
    quiet = os.open(os.devnull, os.O_WRONLY)
    try:
        readers = [zygote.shared("sessiontemp.cli.journal_inspect").start(
            None, [str(root), str(seconds)], script=VERIFYING, stderr=quiet) for _ in range(2)]
    finally:
        os.close(quiet)
    try:
        deadline = time.monotonic() + seconds
        passes = 0
        while time.monotonic() < deadline:
            with Manager(root, retention=EAGER) as manager:
                manager.retain()
                for _ in range(5):
                    manager.acquire().release()
                    manager.rotate()
            passes += 1
        for reader in readers:
            assert reader.wait(timeout=SECONDS + seconds) == 0
    finally:
        for reader in readers:
            reader.kill()
            reader.wait(timeout=SECONDS)
            reader.stdin.close()
            reader.stdout.close()
    assert passes > 1
    assert left_beside(root) == []
    assert fsck(root).ok
