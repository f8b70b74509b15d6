"""A fork from another thread at every step of every operation: the child never hangs.

Each operation (open, acquire on a fresh root and on a live generation, a
lease release, an owner's release, rotate, close, keep, an adoption, a
fresh start, remove_session, remove_artifact, recover; the operations of
``tests/test_descriptors.py``) runs after the script that brings a fresh
root to where it starts.  Just before its k-th durable step, the step hook
starts a thread that forks, and waits for it there: the operation's thread
holds whatever it holds at that step (the manager's mutex, the store's
locks, a removal's exclusive lock) for the whole life of the child.  The
child, in the forking thread, releases its copy of every lease, reads what
its copy of each manager says (``current_dir``, ``sealed``, ``owners``),
checks that the copy refuses an acquire with ForkedCopy, closes it, and
exits; it must do so within DEADLINE.  Meanwhile it must change
nothing: the root's entries, the journal's files and the kernel's table of
the root's flock locks are the same once it has exited as before it was
forked (a copy is only ever closed, never unlocked).  Then the operation
goes on and completes as if nothing had happened, every invariant of the
model holds (no leak, no wrongful removal, memory, journal and disk agree),
and the manager carries on.  Every k is run until the operation no longer
reaches it.

The default run takes each of those operations; ``-m slow`` adds every
(state class, operation) pair of ``tests/test_crashpoints.py``.  The whole
enumeration runs in a child of this process, whose own children are forked
by the hundred.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from sessiontemp import Manager
from tests.forking import DEADLINE, ClosesUnderTheMutex, ForkingHook
from tests.model import Op
from tests.test_crashpoints import Script, Tally, carry_on, pairs, perform, world_at
from tests.test_descriptors import OPERATIONS, WITHOUT_MANAGER

# The longest one enumeration may take in its child process.
ENUMERATION_DEADLINE = 1200.0


@attrs.define
class Outcome:
    """What the enumeration of one operation found."""

    tally: Tally = attrs.field(factory=Tally)
    forks: int = 0
    hung: int = 0


def enumerate_forks(script: Script, op: Op, *, manager_class: type[Manager] = Manager,
                    deadline: float = DEADLINE, first_hang: bool = False) -> Outcome:
    """Every step k of *op* after *script*, with a child forked from a thread there."""
    found = Outcome()
    tally = found.tally
    tally.operations += 1
    for k in itertools.count(1):
        hook = ForkingHook(deadline=deadline)
        where = f"{script} then {op} with a fork at step {k}"
        with world_at(manager_class, hook) as world:
            for step in script:
                perform(world, step)
            name = (world.manager_of(("release_lease", op[1])) if op[0] == "keep"
                    else None if op[0] in WITHOUT_MANAGER else world.manager_of(op))
            hook.world = world
            hook.arm(hook.fork_from_a_thread, at=k)
            try:
                # As if nothing had happened: no fault reaches the operation.
                perform(world, op)
            except Exception as e:
                tally.failures.append(f"{where}: the operation raised {e!r}")
                continue
            finally:
                fired = hook.disarm()
            if fired is None:
                break
            tally.crash_points += 1
            tally.by_kind[fired[0]] += 1
            found.forks += 1
            where = f"{where} {fired}"
            if hook.outcome:
                tally.failures.append(f"{where}: {hook.outcome}")
                found.hung += hook.outcome.startswith("the child hung")
                if first_hang and found.hung:
                    break
                continue
            try:
                world.check()
                carry_on(world, name)
                leaked, removed = world.disk_difference()
                tally.leaks += len(leaked)
                tally.wrongful += len(removed)
                world.check()
            except Exception as e:  # a finding: the parent did not go on as it must
                tally.failures.append(f"{where}: then {e!r}")
    return found


def in_a_child(work: Callable[[], Outcome]) -> dict[str, Any]:
    """Run *work* in a forked child of this process; what it found, as a dict."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        answer: dict[str, Any]
        try:
            os.close(reading)
            found = work()
            tally = found.tally
            answer = {"line": f"{found.forks} forks, {found.hung} hung; {tally.line()}",
                      "failures": tally.failures[:10], "forks": found.forks,
                      "hung": found.hung, "leaks": tally.leaks, "wrongful": tally.wrongful,
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
            ready, _, _ = select.select([reading], [], [], ENUMERATION_DEADLINE)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"no answer within {ENUMERATION_DEADLINE} s")
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


def merged(found: list[Outcome]) -> Outcome:
    total = Outcome()
    for one in found:
        total.forks += one.forks
        total.hung += one.hung
        t, o = total.tally, one.tally
        t.crash_points += o.crash_points
        t.operations += o.operations
        t.by_kind.update(o.by_kind)
        t.leaks += o.leaks
        t.wrongful += o.wrongful
        t.failures += o.failures
    return total


@pytest.fixture(scope="module")
def lines() -> Iterator[dict[str, str]]:
    found: dict[str, str] = {}
    yield found
    print("\n" + "\n".join(f"fork at every step, {name}: {line}" for name, line in found.items()))


@pytest.mark.parametrize("op_name", list(OPERATIONS))
def test_a_child_forked_at_every_step_exits_in_time_and_the_operation_goes_on(
    op_name: str, lines: dict[str, str],
) -> None:
    script, op = OPERATIONS[op_name]
    answer = in_a_child(lambda: enumerate_forks(script, op))
    lines[op_name] = answer["line"]
    assert answer["failures"] == [], "\n".join(answer["failures"])
    assert (answer["hung"], answer["leaks"], answer["wrongful"]) == (0, 0, 0)
    assert answer["forks"] >= 1


@pytest.mark.slow
def test_a_child_forked_at_every_step_of_every_state_class_exits_in_time(
    lines: dict[str, str],
) -> None:
    chosen = [(s, op) for s, op in pairs(True) if op[0] not in ("write", "crash")]
    answer = in_a_child(lambda: merged([enumerate_forks(s, op) for s, op in chosen]))
    lines[f"{len(chosen)} (state class, operation) pairs"] = answer["line"]
    assert answer["failures"] == [], "\n".join(answer["failures"])
    assert (answer["hung"], answer["leaks"], answer["wrongful"]) == (0, 0, 0)


def test_the_enumeration_finds_a_child_that_waits_for_a_lock_its_parent_held() -> None:
    script, op = OPERATIONS["rotate"]
    answer = in_a_child(lambda: enumerate_forks(script, op, manager_class=ClosesUnderTheMutex,
                                                deadline=2, first_hang=True))
    assert answer["hung"] == 1
