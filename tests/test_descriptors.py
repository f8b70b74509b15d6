"""A process out of descriptors at every step of every operation, for real: refused, nothing lost.

EMFILE is a shortage of the process, never a sign that a directory is gone.
Each operation (open, acquire on a fresh root and on a live generation,
a lease release, an owner's release, rotate, close, keep, an adoption, a
fresh start, remove_session, remove_artifact, recover) runs after the
script that brings a fresh root to where it starts; the step hook, just
before its k-th durable step, opens ``/dev/null`` until the process is at
its descriptor limit (``RLIMIT_NOFILE``, lowered for the run), and the
descriptors are freed once the operation returns (or, in the second sweep,
just before its next step: a shortage of a moment).  Every k is run until
the operation no longer reaches it, in a child process, so that this one
never runs short.

Whatever the operation meets then, it completes, or raises a
:class:`SessionTempError` that names the reason ("Too many open files");
a lease's release and a close never raise.  As far as the journal says, it
happened entirely or not at all (nothing was retired or discarded because
a descriptor could not be had), memory, journal and disk agree, the same
manager then works, and the model's invariants hold (no wrongful removal,
no leak).  An adoption or a fresh start that failed is retried: the retry
resumes what the dead owner left, or starts afresh, as asked.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import resource
import select
import signal
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from sessiontemp import Manager
from sessiontemp._guards.steps import StepKind
from sessiontemp._kernel.resources import GONE, SHORTAGES
from sessiontemp.journal.errors import SessionTempError
from tests.faults import Faults
from tests.model import Op, World
from tests.test_crashpoints import (
    OWNER_KILLED,
    Script,
    Tally,
    carry_on,
    open_descriptors,
    perform,
    world_at,
)

# Low enough that running short takes a few hundred opens, high enough for
# every descriptor a manager, its journal and a recovery pass hold at once.
LIMIT = 256
REASON = os.strerror(errno.EMFILE)
# The longest one operation's enumeration may take in its child process.
DEADLINE = 600.0

OPENED: Script = (("open",), ("retain", "m0"))
LEASED: Script = (*OPENED, ("acquire", "m0"), ("write", "l1", "f.txt"))
KEPT: Script = (*LEASED, ("keep", "l1"))

# Each operation, after the script that brings a fresh root to where it starts.
OPERATIONS: dict[str, tuple[Script, Op]] = {
    "open a fresh root": ((), ("open",)),
    "open where a manager died": ((*LEASED, ("crash", "m0")), ("open",)),
    "acquire on a fresh manager": (OPENED, ("acquire", "m0")),
    "acquire on a live generation": ((*LEASED, ("release_lease", "l1")), ("acquire", "m0")),
    "a lease release that removes a retired generation": (
        (*LEASED, ("rotate", "m0")), ("release_lease", "l1")),
    "the last owner's release": ((*LEASED, ("release_lease", "l1")), ("release", "m0")),
    "rotate": ((*LEASED, ("release_lease", "l1")), ("rotate", "m0")),
    "close": ((*LEASED, ("rotate", "m0"), ("acquire", "m0")), ("close", "m0")),
    "keep": (LEASED, ("keep", "l1")),
    "adopt": (OWNER_KILLED, ("open_session", "s0", "resume")),
    "start afresh": (OWNER_KILLED, ("open_session", "s0", "fresh")),
    "remove_session": (OWNER_KILLED, ("remove_session", "s0")),
    "remove_artifact": (KEPT, ("remove_artifact", "a2")),
    "recover": ((*LEASED, ("crash", "m0")), ("recover",)),
}
# Documented never to raise for a failed clean-up.
NEVER_RAISE = ("release_lease", "close")
# Run here, not through World.faulted: no manager runs them, or (keep) the model
# takes them in only once they succeeded.
WITHOUT_MANAGER = ("open", "open_session", "recover", "remove_session", "remove_artifact",
                   "keep")


@attrs.define
class Shortage(Faults):
    """The step hook: once armed, at the chosen step, use up every descriptor left.

    They stay used up until the operation ends (:meth:`disarm`), or with
    *moment*, until just before the next step.
    """

    moment: bool = False
    # Descriptors left free: the operation's (spare + 1)-th open from there on is refused.
    spare: int = 0
    used: list[int] = attrs.field(factory=list)

    def use_up(self, kind: StepKind, detail: str) -> None:
        while True:
            try:
                self.used.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            except OSError as e:
                if e.errno != errno.EMFILE:
                    raise
                break
        for _ in range(min(self.spare, len(self.used))):
            os.close(self.used.pop())

    def give_back(self) -> None:
        while self.used:
            os.close(self.used.pop())

    def __call__(self, kind: StepKind, detail: str) -> None:
        if self.moment and self.used:
            self.give_back()
        super().__call__(kind, detail)

    def disarm(self) -> tuple[StepKind, str] | None:
        self.give_back()
        return super().disarm()


def refused_as_short(op: Op) -> Callable[[BaseException | None], bool]:
    """What *op* may raise out of descriptors: nothing, or an error naming the shortage."""
    def judge(raised: BaseException | None) -> bool:
        if raised is None:
            return True
        if op[0] in NEVER_RAISE:
            return False
        return isinstance(raised, SessionTempError) and REASON in str(raised)

    return judge


def run_short(world: World, shortage: Shortage, op: Op, k: int) -> tuple[StepKind, str] | None:
    """Run *op* with the descriptors used up from its k-th step; where that was, or None."""
    if op[0] not in WITHOUT_MANAGER:
        return world.faulted(op, shortage, shortage.use_up, at=k, expected=refused_as_short(op))
    shortage.arm(shortage.use_up, at=k)
    raised: BaseException | None = None
    try:
        perform(world, op)
    except Exception as e:
        raised = e
    finally:
        fired = shortage.disarm()
    if fired is None:
        if raised is not None:
            raise raised
        return None
    assert refused_as_short(op)(raised), f"{op} out of descriptors at {fired} raised {raised!r}"
    for name in world.live():
        world.memory_agrees(world.real[name])
    if raised is None:
        return fired
    # Refused: the caller retries once descriptors are free, as it was told.
    if op[0] == "open_session":
        assert world.open(op[1], resume=op[2] == "resume") is not None
    elif op[0] == "remove_artifact":
        # Its removal may have been journaled before the unlink was refused:
        # a recovery pass then removes the file, unreferenced.
        world.remove_artifact(op[1], again=True)
    else:
        perform(world, op)
    return fired


def enumerate_shortages(op_name: str, *, moment: bool, spare: int = 0) -> Tally:
    """Every step k of the operation named *op_name*, out of descriptors from there on.

    With *spare*, that many are left free at step k: the operation's
    descriptor opened (spare + 1)-th from there, while it holds the others,
    is the one refused.
    """
    script, op = OPERATIONS[op_name]
    tally = Tally()
    tally.operations += 1
    for k in itertools.count(1):
        shortage = Shortage(moment=moment, spare=spare)
        before = open_descriptors()
        where = f"{op_name} out of descriptors at step {k}" + (" for a moment" if moment else "")
        if spare:
            where += f", {spare} left"
        with world_at(Manager, shortage) as world:
            for step in script:
                perform(world, step)
            name = (world.manager_of(("release_lease", op[1])) if op[0] == "keep"
                    else None if op[0] in WITHOUT_MANAGER else world.manager_of(op))
            try:
                fired = run_short(world, shortage, op, k)
            except AssertionError as e:
                tally.failures.append(f"{where}: {e}")
                continue
            if fired is None:
                break
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            where = f"{where} {fired}"
            try:
                carry_on(world, name)
                leaked, removed = world.disk_difference()
                tally.leaks += len(leaked)
                tally.wrongful += len(removed)
                world.check()
            except (AssertionError, SessionTempError) as e:
                tally.failures.append(f"{where}: {e!r}")
        left = open_descriptors() - before
        if left:
            tally.descriptors += len(left)
            tally.failures.append(f"{where}: descriptors left open: {sorted(left)}")
    return tally


def in_a_child(work: Callable[[], Tally]) -> dict[str, Any]:
    """Run *work* in a forked child whose descriptor limit is LIMIT; its tally as a dict."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        answer: dict[str, Any]
        try:
            os.close(reading)
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
            tally = work()
            answer = {"line": tally.line(), "failures": tally.failures[:10],
                      "crash_points": tally.crash_points, "leaks": tally.leaks,
                      "wrongful": tally.wrongful, "descriptors": tally.descriptors,
                      "by_kind": dict(tally.by_kind)}
        except BaseException:
            answer = {"error": traceback.format_exc()}
            code = 1
        finally:
            os.write(writing, json.dumps(answer).encode())
            os._exit(code)
    os.close(writing)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([reading], [], [], DEADLINE)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"no answer within {DEADLINE} s")
            chunk = os.read(reading, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(reading)
        os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(b"".join(chunks))
    assert "error" not in result, result["error"]
    return result


@pytest.fixture(scope="module")
def tallies() -> Iterator[dict[str, str]]:
    lines: dict[str, str] = {}
    yield lines
    print("\n" + "\n".join(f"{name}: {line}" for name, line in lines.items()))


@pytest.mark.parametrize("moment", [False, True], ids=["until-it-returns", "for-a-moment"])
@pytest.mark.parametrize("op_name", list(OPERATIONS))
def test_out_of_descriptors_at_every_step_an_operation_is_refused_naming_why_and_nothing_is_lost(
    op_name: str, moment: bool, tallies: dict[str, str],
) -> None:
    answer = in_a_child(lambda: enumerate_shortages(op_name, moment=moment))
    tallies[f"{op_name} ({'a moment' if moment else 'until it returns'})"] = answer["line"]
    assert answer["failures"] == [], "\n".join(answer["failures"])
    assert (answer["leaks"], answer["wrongful"], answer["descriptors"]) == (0, 0, 0)
    assert answer["crash_points"] >= 1


# The default run leaves SPARE_SAMPLE descriptors free at every step; the slow run each
# number up to SPARE_MAX, past what any operation holds open at once from a step on.
SPARE_SAMPLE = (1, 2, 4)
SPARE_MAX = 12


@pytest.mark.parametrize("spares", [
    pytest.param(SPARE_SAMPLE, id="sampled"),
    pytest.param(tuple(range(1, SPARE_MAX + 1)), id="every", marks=pytest.mark.slow),
])
@pytest.mark.parametrize("op_name", list(OPERATIONS))
def test_with_a_few_descriptors_left_each_later_open_of_an_operation_is_refused_naming_why(
    op_name: str, spares: tuple[int, ...], tallies: dict[str, str],
) -> None:
    """The limit met at the operation's 2nd, 3rd, ... descriptor from a step, not its 1st:
    each descriptor it holds at once (a journal's file, its -wal and -shm, a segment, a lock
    file, a directory) in turn is the one refused; refused naming why or completed, nothing
    lost, the same manager works after."""
    def every_spare() -> Tally:
        total = Tally()
        for spare in spares:
            tally = enumerate_shortages(op_name, moment=False, spare=spare)
            total.crash_points += tally.crash_points
            total.operations += tally.operations
            total.by_kind.update(tally.by_kind)
            total.leaks += tally.leaks
            total.wrongful += tally.wrongful
            total.descriptors += tally.descriptors
            total.failures += tally.failures
        return total

    answer = in_a_child(every_spare)
    tallies[f"{op_name} (spares {spares[0]}-{spares[-1]})"] = answer["line"]
    assert answer["failures"] == [], "\n".join(answer["failures"])
    assert (answer["leaks"], answer["wrongful"], answer["descriptors"]) == (0, 0, 0)
    assert answer["crash_points"] >= 1


# -- the case that was found, and the rest of its class ------------------------------------


def at_the_limit_for_a_moment(root_dir: str) -> Tally:
    """A named session's live generation, leased at the descriptor limit, then once free."""
    from sessiontemp import Unavailable

    tally = Tally()
    shortage = Shortage()
    manager = Manager(root_dir, session="chat", step_hook=shortage)
    try:
        manager.retain()
        with manager.acquire() as lease:
            (lease.path / "notes.txt").write_text("draft")
            directory = lease.path
        for where in ("live", "fresh"):
            if where == "fresh":
                manager.rotate()
            shortage.arm(shortage.use_up, at=1)
            try:
                manager.acquire()
                tally.failures.append(f"{where}: leased at the limit")
            except Unavailable as e:
                if REASON not in str(e) or "ulimit -n" not in str(e):
                    tally.failures.append(f"{where}: the error does not say why: {e}")
            except OSError as e:
                tally.failures.append(f"{where}: raised {e!r}")
            finally:
                shortage.disarm()
            with manager.acquire() as lease:
                if where == "live" and (lease.path != directory
                                        or not (lease.path / "notes.txt").exists()):
                    tally.failures.append("live: the next lease got another directory")
            tally.crash_points += 1
    finally:
        manager.close()
    return tally


def test_a_named_sessions_acquire_at_the_descriptor_limit_is_refused_and_retires_nothing(
    tmp_path: Path,
) -> None:
    answer = in_a_child(lambda: at_the_limit_for_a_moment(str(tmp_path / "root")))
    assert answer["failures"] == []
    assert answer["crash_points"] == 2


@pytest.mark.parametrize(("code", "gone"), [
    *((code, False) for code in sorted(SHORTAGES)),
    *((code, True) for code in sorted(GONE)),
], ids=lambda v: errno.errorcode[v] if isinstance(v, int) and v in errno.errorcode else str(v))
def test_only_a_directory_gone_from_its_name_retires_the_generation_a_lock_failed_on(
    root: Path, code: int, gone: bool,
) -> None:
    """Each error a lease's lock may meet, raised at the lock step: retired only if it says gone."""
    from sessiontemp import Unavailable
    from tests.faults import raising

    faults = Faults()
    with Manager(root, step_hook=faults) as manager:
        manager.retain()
        with manager.acquire() as lease:
            directory = lease.path
        faults.arm(raising(OSError(code, os.strerror(code))), only="lock")
        with pytest.raises(Unavailable) as refused:
            manager.acquire()
        assert faults.disarm() == ("lock", directory.parent.name)
        said = str(refused.value)
        assert ("It was retired" in said) == gone
        assert ("nothing was retired" in said) != gone
        assert (manager.current_dir is None) == gone
        assert directory.exists() != gone
