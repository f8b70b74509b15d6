"""Crashes and neighbours: real processes, killed with SIGKILL, on a real root.

Each test drives one or more ``tests/crashchild.py`` processes over a pipe:
the child answers every command with a JSON line saying what it holds, so the
parent knows the paths and pids before it kills anything, and never waits on
a sleep for a handshake.  A child is killed either from inside the library
(its step hook SIGKILLs it just before a chosen durable step) or by the test
at a random moment; or its hook pauses it at a step until the test says go,
which sets an interleaving of two processes that the scheduler may choose at
any time.  Afterwards a new Manager is opened on the root, which runs
recovery, and the root is checked against the journal:

* only the directories of live managers and running commands are left;
  no generation of the dead, no trash entry, no liveness lock of the dead;
* the journal replays from scratch and ``Store.verify()`` finds nothing;
* every generation the journal keeps is on disk, every removed one is gone;
* whatever a live neighbour holds is untouched and still usable.

Every child and every command a child started is killed at teardown (by its
pid or pidfd), and every wait is bounded, so a hang fails instead of
blocking the run.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import sessiontemp
from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX, Lease, Manager, Report
from sessiontemp._kernel.root import JOURNAL_NAME, generation_name
from sessiontemp.journal import State, Store
from tests import zygote
from tests.childio import CutShort, JsonLines
from tests.conftest import journal_state

CHILD = Path(__file__).with_name("crashchild.py")
# The longest any one answer, death or exit may take before the test fails.
TIMEOUT = 20.0


# -- processes -------------------------------------------------------------------


class Child:
    """One crashchild process and the line-by-line conversation with it."""

    def __init__(self, root: Path, log: Path, options: Collection[str],
                 pass_fds: Collection[int]) -> None:
        self.log = log
        # Forked from a process that has imported the library (tests/zygote.py), as a
        # new `python tests/crashchild.py` would run, without its half second of start-up.
        with log.open("wb") as stderr:
            self.proc = zygote.shared("sessiontemp", "tests.childio").start(
                CHILD, [str(root), *options], stderr=stderr.fileno(), pass_fds=tuple(pass_fds))
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self._stdin = self.proc.stdin
        self._stdout_file = self.proc.stdout
        self._lines = JsonLines(self.proc.stdout.fileno())
        self.crash: dict[str, Any] | None = None
        hello = self._receive("opening")
        # Empty when it died opening, or when it runs --bare.
        self.manager: str = "" if hello is None else hello["manager"] or ""

    def __repr__(self) -> str:
        return f"<Child pid={self.proc.pid} manager={self.manager}>"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def fail(self, message: str) -> None:
        pytest.fail(f"{self!r}: {message}\n--- child stderr ---\n{self.stderr()}")

    def read(self, doing: str, timeout: float = TIMEOUT) -> dict[str, Any] | None:
        """The next JSON line, or None at end of file; fails after *timeout* seconds."""
        try:
            return self._lines.read(timeout)
        except (TimeoutError, CutShort) as e:
            self.fail(f"{e} while {doing}")
            raise AssertionError from e  # unreachable: fail raises

    def _receive(self, doing: str) -> dict[str, Any] | None:
        """The next answer; None when the child announced its planned crash and died of it."""
        message = self.read(doing)
        if message is None:
            self.fail(f"ended without an answer or a crash line while {doing}")
            raise AssertionError  # unreachable: fail raises
        if "crash" in message:
            self.crash = message["crash"]
            self.wait_killed()
            return None
        if "error" in message:
            self.fail(f"{message['error']} while {doing}\n{message.get('traceback', '')}")
        return message

    def send(self, *words: str) -> None:
        try:
            self._stdin.write((" ".join(words) + "\n").encode())
            self._stdin.flush()
        except BrokenPipeError:
            self.fail(f"gone before {' '.join(words)!r}")

    def step(self, *words: str) -> dict[str, Any] | None:
        """Run one command: its answer, or None when the child crashed as planned during it."""
        self.send(*words)
        return self._receive(" ".join(words))

    def ask(self, *words: str) -> dict[str, Any]:
        """Run one command that must not crash."""
        answer = self.step(*words)
        if answer is None:
            self.fail(f"crashed at {self.crash} during {' '.join(words)!r}, which it must not")
            raise AssertionError  # unreachable: fail raises
        return answer

    def pause_during(self, *words: str) -> dict[str, Any]:
        """Start a command and return the step at which the hook paused it (``--then pause``)."""
        self.send(*words)
        message = self.read(" ".join(words))
        if message is None or "paused" not in message:
            self.fail(f"did not pause during {' '.join(words)!r} but answered {message}")
            raise AssertionError  # unreachable: fail raises
        step: dict[str, Any] = message["paused"]
        return step

    def resume(self) -> dict[str, Any]:
        """Let the paused command go on; its answer."""
        self.send("go")
        answer = self._receive("resuming")
        if answer is None:
            self.fail(f"crashed at {self.crash} after resuming, which it must not")
            raise AssertionError  # unreachable: fail raises
        return answer

    def wait_killed(self) -> None:
        try:
            code = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"still running {TIMEOUT} s after it was to die")
        if code != -signal.SIGKILL:
            self.fail(f"exited with {code}, not killed by SIGKILL")

    def kill(self) -> None:
        """SIGKILL now (a child of ours, not yet reaped, so its pid is still its own)."""
        self.proc.send_signal(signal.SIGKILL)
        self.wait_killed()

    def end(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
        self._stdin.close()
        self._stdout_file.close()


class Command:
    """A command a child started with lease.popen; followed through a pidfd, so never mixed up."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)

    def running(self) -> bool:
        ready, _, _ = select.select([self.pidfd], [], [], 0)
        return not ready

    def wait_exited(self) -> None:
        ready, _, _ = select.select([self.pidfd], [], [], TIMEOUT)
        assert ready, f"command {self.pid} still runs {TIMEOUT} s after it was told to end"

    def kill(self) -> None:
        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def end(self) -> None:
        if self.running():
            self.kill()
            self.wait_exited()
        os.close(self.pidfd)


class Lab:
    """The processes and descriptors of one test; all of them ended at teardown."""

    def __init__(self, root: Path, logs: Path) -> None:
        self.root = root
        self.logs = logs
        self.children: list[Child] = []
        self.commands: list[Command] = []
        self.fds: set[int] = set()

    def child(self, *options: str, pass_fds: Collection[int] = ()) -> Child:
        log = self.logs / f"child-{len(self.children)}.stderr"
        child = Child(self.root, log, options, pass_fds)
        self.children.append(child)
        return child

    def command(self, pid: int) -> Command:
        command = Command(pid)
        self.commands.append(command)
        return command

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.fds |= {r, w}
        return r, w

    def close(self, fd: int) -> None:
        self.fds.remove(fd)
        os.close(fd)

    def shutdown(self) -> None:
        for child in self.children:
            child.end()
        for fd in self.fds:
            os.close(fd)
        for command in self.commands:
            command.end()


@pytest.fixture
def lab(root: Path, tmp_path: Path) -> Iterator[Lab]:
    started = Lab(root, tmp_path)
    try:
        yield started
    finally:
        started.shutdown()


# -- what must hold after recovery -------------------------------------------------


def on_disk(root: Path) -> tuple[set[str], set[str]]:
    """The generation ids under their generation names, and those under trash names."""
    names = os.listdir(root)
    return (
        {n.removeprefix(GENERATION_PREFIX) for n in names if n.startswith(GENERATION_PREFIX)},
        {n.removeprefix(TRASH_PREFIX) for n in names if n.startswith(TRASH_PREFIX)},
    )


def assert_journal_matches_disk(root: Path) -> State:
    """The journal replays from scratch, verifies, and its generations are exactly the disk's."""
    state = journal_state(root)
    store = Store(root / JOURNAL_NAME)
    try:
        assert store.verify() == []
    finally:
        store.close()
    generations, trash = on_disk(root)
    kept = {gid for gid, g in state.generations.items() if g.removal != "finished"}
    removed = set(state.generations) - kept
    assert trash == set(), "a removal was left half-done"
    assert kept - generations == set(), "the journal keeps generations that are not on disk"
    assert removed & generations == set(), "the journal removed generations still on disk"
    assert generations - kept == set(), "generations on disk the journal does not know"
    return state


def assert_only_live_left(root: Path, live: Collection[Path]) -> State:
    """Nothing but *live* (the directories of live managers and running commands) is left.

    *live* are the directories the leases gave, each its generation's work directory.
    """
    state = assert_journal_matches_disk(root)
    generations, _ = on_disk(root)
    assert {root / generation_name(g) / "tmp" for g in generations} == set(live)
    # A dead manager's liveness lock file goes with it; live ones keep theirs.
    locks = {p.name.removesuffix(".lock") for p in (root / "managers").iterdir()}
    assert locks == {m.id for m in state.managers.values() if m.ended is None}
    return state


def recover_by_opening(root: Path, live: Collection[Path]) -> Report:
    """Open (and close) a new Manager on *root*, whose open runs recovery; check what is left."""
    with Manager(root, busy_timeout=TIMEOUT) as opened:
        report = opened.recovery
    assert report.ran, "another recovery pass held the root"
    assert_only_live_left(root, live)
    return report


def kept_generations(root: Path, manager: str) -> set[str]:
    """The generations of *manager* whose removal the journal has not finished."""
    return {
        gid for gid, g in journal_state(root).generations.items()
        if g.manager == manager and g.removal != "finished"
    }


def assert_dead_and_gone(
    root: Path, report: Report, manager: str, kept: set[str], *, newly: bool = True
) -> None:
    """This pass removed *kept*, all *manager* still had; it declared it dead if *newly*."""
    state = journal_state(root)
    assert state.managers[manager].ended == "dead"
    assert report.dead == ((manager,) if newly else ())
    assert kept_generations(root, manager) == set()
    assert {r.generation for r in report.removed} == kept


@pytest.fixture(autouse=True)
def journal_matches_disk_afterwards(root: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test, the journal replays from scratch and matches the disk.

    Not checked again after a test that failed already: that would only
    repeat its failure as an error.
    """
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed == failed and (root / JOURNAL_NAME).exists():
        assert_journal_matches_disk(root)


# -- a live neighbour in this very process ------------------------------------------


@attrs.frozen
class Neighbour:
    """A live manager of this process, with a lease and a file in its directory."""

    manager: Manager
    lease: Lease
    file: Path
    content: str
    inode: int

    @classmethod
    def open(cls, open_manager: Callable[..., Manager]) -> Neighbour:
        manager = open_manager()
        manager.retain()
        lease = manager.acquire()
        content = f"kept by {manager.id}\n"
        file = lease.path / "keep.txt"
        file.write_text(content)
        return cls(manager, lease, file, content, lease.path.stat().st_ino)

    def assert_untouched_and_usable(self) -> None:
        assert self.file.read_text() == self.content
        assert self.lease.path.stat().st_ino == self.inode
        (self.lease.path / "more.txt").write_text("still mine\n")
        self.manager.rotate()
        with self.manager.acquire() as fresh:
            assert fresh.path != self.lease.path
            (fresh.path / "fresh.txt").write_text("fresh\n")
        self.lease.release()
        assert not self.lease.path.exists(), "a retired, released generation stays"


# -- crashes at chosen steps ---------------------------------------------------------


@attrs.frozen
class CrashPoint:
    """Where the step hook kills the child: the N-th step of a kind, after another kind."""

    kind: str
    nth: int = 1
    detail: str = ""
    after: str | None = None
    during: str = "making a generation"

    def options(self) -> list[str]:
        options = ["--at", self.kind, "--nth", str(self.nth)]
        if self.detail:
            options += ["--detail", self.detail]
        if self.after:
            options += ["--after", self.after]
        return options


FILES = 30  # in the generation the crash points below remove

CRASH_POINTS = {
    "after generation.created, before its mkdir": CrashPoint("mkdir"),
    "right after the mkdir, before the lock": CrashPoint("lock", after="mkdir"),
    "after the lock, before generation.ready": CrashPoint("journal", detail="generation.ready"),
    "after generation.ready, before lease.acquired": CrashPoint(
        "journal", detail="lease.acquired"
    ),
    "after removal.started, before the rename": CrashPoint("rename", during="removal"),
    "at the first unlink of a removal": CrashPoint("unlink", during="removal"),
    "in the middle of a removal": CrashPoint("unlink", nth=FILES // 2, during="removal"),
    "at the last unlink of a removal": CrashPoint("unlink", nth=FILES, during="removal"),
    "before the last rmdir of a removal": CrashPoint(
        "rmdir", detail=TRASH_PREFIX, during="removal"
    ),
    "after the rmdir, before removal.finished": CrashPoint(
        "journal", detail="removal.finished", during="removal"
    ),
}


def drive_until_crash(victim: Child) -> str:
    """Lease, fill, rotate, make a second generation, remove the first; say where it died.

    Two leases on the first generation are live until the removal, so every
    crash point kills a manager with live leases.
    """
    victim.ask("retain")
    first = victim.ask("acquire")
    victim.ask("fill", first["lease"], str(FILES))
    second = victim.ask("acquire")
    victim.ask("rotate")
    victim.ask("arm")
    third = victim.step("acquire")
    if third is None:
        return "making a generation"
    victim.ask("write", third["lease"], "note.txt")
    victim.ask("release-lease", first["lease"])
    if victim.step("release-lease", second["lease"]) is None:
        return "removal"
    return "nowhere"


@pytest.mark.parametrize("point", CRASH_POINTS.values(), ids=CRASH_POINTS.keys())
def test_a_manager_killed_at_any_step_leaves_only_the_living_after_recovery(
    point: CrashPoint, root: Path, lab: Lab, open_manager: Callable[..., Manager]
) -> None:
    neighbour = Neighbour.open(open_manager)
    victim = lab.child(*point.options())

    assert drive_until_crash(victim) == point.during
    assert victim.crash is not None
    assert victim.crash["kind"] == point.kind
    assert point.detail in victim.crash["detail"]
    if point.after:
        assert victim.crash["previous"] == point.after

    kept = kept_generations(root, victim.manager)
    report = recover_by_opening(root, live={neighbour.lease.path})
    assert_dead_and_gone(root, report, victim.manager, kept)
    assert report.skipped == ()
    neighbour.assert_untouched_and_usable()


def test_a_killed_manager_neighbour_in_another_process_keeps_its_directory(
    root: Path, lab: Lab
) -> None:
    neighbour = lab.child()
    neighbour.ask("retain")
    kept = neighbour.ask("acquire")
    written = Path(neighbour.ask("write", kept["lease"], "keep.txt")["file"])
    before = written.read_text()
    victim = lab.child(*CRASH_POINTS["in the middle of a removal"].options())

    assert drive_until_crash(victim) == "removal"

    doomed = kept_generations(root, victim.manager)
    report = recover_by_opening(root, live={Path(kept["path"])})
    assert_dead_and_gone(root, report, victim.manager, doomed)
    assert written.read_text() == before
    neighbour.ask("write", kept["lease"], "more.txt")
    neighbour.ask("release-lease", kept["lease"])
    neighbour.ask("release")
    assert not Path(kept["path"]).exists(), "the sealed neighbour's generation stays"


# -- crashes at random moments -------------------------------------------------------


def kill_while_looping(root: Path, lab: Lab, rounds: int, rng: random.Random) -> None:
    """Kill a looping child at a random moment, *rounds* times, beside a live neighbour."""
    neighbour = lab.child()
    neighbour.ask("retain")
    kept = neighbour.ask("acquire")
    written = Path(neighbour.ask("write", kept["lease"], "keep.txt")["file"])
    before = written.read_text()

    for round_ in range(rounds):
        victim = lab.child()
        victim.ask("retain")
        held = victim.ask("acquire")
        victim.ask("fill", held["lease"], "20")
        victim.send("loop", str(TIMEOUT))
        assert victim.read("starting the loop") == {"looping": True}
        delay = rng.uniform(0.0, 0.3)
        time.sleep(delay)  # the random moment of the kill, not a synchronisation
        victim.kill()

        where = f"round {round_}, killed {delay:.3f} s into the loop"
        doomed = kept_generations(root, victim.manager)
        try:
            report = recover_by_opening(root, live={Path(kept["path"])})
            assert_dead_and_gone(root, report, victim.manager, doomed)
            assert written.read_text() == before
        except AssertionError as e:
            e.add_note(where)
            raise

    neighbour.ask("write", kept["lease"], "more.txt")
    neighbour.ask("rotate")
    fresh = neighbour.ask("acquire")
    neighbour.ask("release-lease", kept["lease"])
    neighbour.ask("release-lease", fresh["lease"])
    neighbour.ask("close")
    assert_only_live_left(root, live=())


def test_a_manager_killed_at_random_moments_leaves_only_the_living_after_recovery(
    root: Path, lab: Lab
) -> None:
    kill_while_looping(root, lab, rounds=5, rng=random.Random())


@pytest.mark.slow
def test_many_managers_killed_at_random_moments_leave_only_the_living(
    root: Path, lab: Lab
) -> None:
    kill_while_looping(root, lab, rounds=60, rng=random.Random())


# -- commands that outlive their manager ---------------------------------------------


@pytest.mark.parametrize("ending", ["its pipe closes", "it is killed"])
def test_a_command_outliving_its_killed_manager_keeps_its_directory_until_it_exits(
    ending: str, root: Path, lab: Lab
) -> None:
    r, w = lab.pipe()
    victim = lab.child(pass_fds=(r,))
    lab.close(r)
    victim.ask("retain")
    held = victim.ask("acquire")
    written = Path(victim.ask("write", held["lease"], "output.txt")["file"])
    if ending == "its pipe closes":
        command = lab.command(victim.ask("popen", held["lease"], str(r))["pid"])
    else:
        command = lab.command(victim.ask("popen-sleep", held["lease"], "60")["pid"])
    victim.ask("rotate")
    unheld = victim.ask("acquire")
    victim.kill()
    assert command.running()

    held_path = Path(held["path"])
    report = recover_by_opening(root, live={held_path})
    assert report.dead == (victim.manager,)
    # Reports name the generations, the leased directories' parents.
    assert [s.path for s in report.skipped] == [held_path.parent]
    assert [r.path for r in report.removed] == [Path(unheld["path"]).parent]
    assert written.read_text().startswith("written by")

    # A pass while the command still runs skips it again, and writes nothing.
    seq = journal_state(root).seq
    again = sessiontemp.recover(root, busy_timeout=TIMEOUT)
    assert [s.path for s in again.skipped] == [held_path.parent]
    assert again.removed == ()
    assert journal_state(root).seq == seq
    assert written.exists()

    if ending == "its pipe closes":
        lab.close(w)
    else:
        command.kill()
    command.wait_exited()

    last = sessiontemp.recover(root, busy_timeout=TIMEOUT)
    assert [r.path for r in last.removed] == [held_path.parent]
    assert last.skipped == ()
    assert_only_live_left(root, live=())


# -- two processes, one root ---------------------------------------------------------


@pytest.mark.parametrize("how", ["recover", "open"])
def test_a_survivor_removes_its_killed_neighbours_generations_and_keeps_its_own(
    how: str, root: Path, lab: Lab
) -> None:
    survivor = lab.child()
    survivor.ask("retain")
    old = survivor.ask("acquire")
    survivor.ask("fill", old["lease"], "10")
    survivor.ask("rotate")
    current = survivor.ask("acquire")
    mine = Path(survivor.ask("write", current["lease"], "mine.txt")["file"])
    victim = lab.child()
    victim.ask("retain")
    doomed = victim.ask("acquire")
    victim.ask("fill", doomed["lease"], "20")
    victim.ask("rotate")
    victim.ask("acquire")
    victim.kill()

    report = survivor.ask(how)
    state = journal_state(root)
    assert report["ran"]
    assert report["dead"] == [victim.manager]
    assert report["skipped"] == []
    victims = {gid for gid, g in state.generations.items() if g.manager == victim.manager}
    assert {generation for _, generation, _ in report["removed"]} == victims
    assert all(g.removal == "finished" for gid, g in state.generations.items() if gid in victims)
    survivors = {Path(old["path"]), Path(current["path"])}
    assert_only_live_left(root, live=survivors)
    assert len(os.listdir(old["path"])) == 1 + 10 - 4  # "sub" holds a third of the files
    assert mine.read_text().startswith("written by")

    # The survivor's manager and leases go on working.
    survivor.ask("write", old["lease"], "later.txt")
    survivor.ask("rotate")
    fresh = survivor.ask("acquire")
    survivor.ask("release-lease", old["lease"])
    assert not Path(old["path"]).exists()
    survivor.ask("release-lease", current["lease"])
    assert not Path(current["path"]).exists()
    survivor.ask("write", fresh["lease"], "fresh.txt")
    # What it journaled since is in the journal as every process reads it.
    assert_only_live_left(root, live={Path(fresh["path"])})
    survivor.ask("release-lease", fresh["lease"])
    survivor.ask("release")
    survivor.ask("close")
    assert_only_live_left(root, live=())


# -- crashes of recovery itself --------------------------------------------------------


RECOVERY_CRASH_POINTS = {
    "before it declares the manager dead": CrashPoint("journal", detail="manager.dead"),
    "after removal.started, before the rename": CrashPoint("rename"),
    "in the middle of a removal": CrashPoint("unlink", nth=10),
    "before removal.finished": CrashPoint("journal", detail="removal.finished"),
}


@pytest.mark.parametrize(
    "point", RECOVERY_CRASH_POINTS.values(), ids=RECOVERY_CRASH_POINTS.keys()
)
def test_a_recovery_killed_mid_pass_is_finished_by_the_next(
    point: CrashPoint, root: Path, lab: Lab, open_manager: Callable[..., Manager]
) -> None:
    neighbour = Neighbour.open(open_manager)
    victim = lab.child()
    victim.ask("retain")
    doomed = victim.ask("acquire")
    victim.ask("fill", doomed["lease"], "20")
    victim.kill()

    # Its open runs recovery, which removes the victim's generation, and dies there.
    recoverer = lab.child("--armed", *point.options())
    assert recoverer.crash is not None
    assert recoverer.crash["kind"] == point.kind
    assert point.detail in recoverer.crash["detail"]

    kept = kept_generations(root, victim.manager)
    buried = journal_state(root).managers[victim.manager].ended is not None
    assert buried == (point.detail != "manager.dead")
    report = recover_by_opening(root, live={neighbour.lease.path})
    assert_dead_and_gone(root, report, victim.manager, kept, newly=not buried)
    assert not Path(doomed["path"]).exists()
    neighbour.assert_untouched_and_usable()


def test_a_manager_killed_while_opening_leaves_no_liveness_lock_behind(
    root: Path, lab: Lab
) -> None:
    # Killed with its liveness lock taken, before the journal names it.
    opener = lab.child("--armed", "--at", "journal", "--detail", "manager.opened")
    assert opener.crash is not None
    (litter,) = (root / "managers").iterdir()

    # Right away the file could be a manager opening at this moment: kept.
    sessiontemp.recover(root, busy_timeout=TIMEOUT)
    assert litter.exists()

    # No record names it: it goes once older than stale_after (the clock is
    # passed in), and its lock is free.
    sessiontemp.recover(root, busy_timeout=TIMEOUT, stale_after=60,
                        clock=lambda: time.time() + 120)
    assert not litter.exists()
    assert_only_live_left(root, live=())


# -- recovery beside a manager that is closing --------------------------------------
#
# The other process pauses at one step (its hook waits for "go"), so the test
# sets the interleaving that the scheduler may choose at any time.


def test_a_recovery_while_a_manager_closes_leaves_a_journal_that_replays(
    root: Path, lab: Lab
) -> None:
    closing = lab.child("--at", "journal", "--detail", "removal.finished", "--then", "pause")
    closing.ask("retain")
    held = closing.ask("acquire")
    closing.ask("fill", held["lease"], "5")
    closing.ask("arm")
    # Closing removes the generation; it is gone, its end not yet journaled.
    closing.pause_during("close")
    assert not Path(held["path"]).exists()

    sessiontemp.recover(root, busy_timeout=TIMEOUT)  # what every Manager opening now runs
    closing.resume()

    assert_only_live_left(root, live=())


def test_a_recovery_pass_acts_on_the_journal_as_it_is_not_as_it_was_when_it_began(
    root: Path, lab: Lab
) -> None:
    # Bare: its recover() is its only journal connection.
    recoverer = lab.child("--bare", "--at", "rename", "--then", "pause")
    victim = lab.child()
    victim.ask("retain")
    doomed = victim.ask("acquire")
    victim.ask("fill", doomed["lease"], "5")
    closing = lab.child("--at", "lock", "--after", "journal", "--then", "pause")
    closing.ask("retain")
    held = closing.ask("acquire")
    victim.kill()
    closing.ask("arm")
    # Closed in the journal; its generation not yet seized for removal.
    closing.pause_during("close")
    recoverer.ask("arm")
    # The pass buries the victim and removes its generation; the closing
    # manager's generation comes next in its list.
    assert recoverer.pause_during("recover")["detail"].startswith(
        generation_name(doomed["generation"])
    )
    closing.resume()  # removes its own generation, journaled from start to end
    assert not Path(held["path"]).exists()

    report = recoverer.resume()

    assert report["dead"] == [victim.manager]
    assert_only_live_left(root, live=())


# -- one process, several journal connections -----------------------------------------


def test_a_process_that_opened_the_journal_twice_loses_no_event_to_a_neighbours_close(
    root: Path, lab: Lab
) -> None:
    # Two sessions in one process: a second Manager opens the journal again.
    twice = lab.child()
    twice.ask("retain")
    twice.ask("open")
    neighbour = lab.child()
    neighbour.ask("close")  # the last connection it knows of goes away
    held = twice.ask("acquire")
    twice.kill()

    # Everything it committed before it died is in the journal for everyone.
    assert held["generation"] in journal_state(root).generations
    recover_by_opening(root, live=())
