"""A Manager garbage-collected unclosed gives its locks up, as an unclosed file does.

It warns (ResourceWarning) and closes every descriptor it held, journaling
nothing: its liveness lock file stays, unlocked, so that the next recovery
(an open or ``recover()``, in this process or another) finds it dead and
removes what it held.  A closed manager, and a forked child's copy, warn
and do nothing when collected.
"""

from __future__ import annotations

import gc
import json
import os
import textwrap
import warnings
from pathlib import Path

from sessiontemp import GENERATION_PREFIX, Manager, recover
from tests import zygote
from tests.conftest import journal_state, locked_by_another


def generations(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(GENERATION_PREFIX))


def unclosed(caught: list[warnings.WarningMessage]) -> list[str]:
    """The warnings about unclosed managers among *caught*, ResourceWarnings each."""
    return [str(w.message) for w in caught
            if "unclosed manager" in str(w.message) and w.category is ResourceWarning]


def test_a_manager_dropped_unclosed_warns_and_the_next_recovery_in_this_process_removes_it(
    root: Path,
) -> None:
    m = Manager(root)
    m.retain()
    m.acquire().release()
    manager_id = m.id
    lock_file = root / "managers" / f"{manager_id}.lock"
    assert len(generations(root)) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del m
        gc.collect()
    [warned] = unclosed(caught)
    assert manager_id in warned
    # Nothing on disk changed: it journaled nothing and unlinked nothing.
    assert len(generations(root)) == 1
    assert lock_file.exists()
    assert not locked_by_another(lock_file)
    report = recover(root)
    assert report.dead == (manager_id,)
    assert generations(root) == []
    assert journal_state(root).managers[manager_id].ended == "dead"


def test_a_manager_dropped_with_a_lease_held_and_a_retired_generation_gives_up_every_lock(
    root: Path,
) -> None:
    m = Manager(root)
    m.retain()
    old = m.acquire()
    (old.path / "old").write_text("old")
    m.rotate()
    current = m.acquire()
    (current.path / "current").write_text("current")
    paths = [old.path, current.path]
    assert all(locked_by_another(p) for p in paths)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del m, old, current
        gc.collect()
    assert len(unclosed(caught)) == 1
    assert not any(locked_by_another(p) for p in paths)
    # The next open in this process runs the recovery.
    with Manager(root) as successor:
        assert len(successor.recovery.removed) == 2
    assert generations(root) == []


def test_a_named_sessions_manager_dropped_unclosed_lets_the_next_owner_in_this_process_resume(
    root: Path,
) -> None:
    m = Manager(root, session="chat")
    m.retain()
    lease = m.acquire()
    (lease.path / "notes.txt").write_text("draft")
    path = lease.path
    lease.release()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del m, lease
        gc.collect()
    assert len(unclosed(caught)) == 1
    with Manager(root, session="chat") as successor:
        assert successor.resumed
        successor.retain()
        with successor.acquire() as resumed:
            assert resumed.path == path
            assert (resumed.path / "notes.txt").read_text() == "draft"


DROPPER = textwrap.dedent("""
    import gc, json, sys, time, warnings
    from sessiontemp import Manager
    m = Manager(sys.argv[1])
    m.retain()
    m.acquire().release()
    manager_id = m.id
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del m
        gc.collect()
    print(json.dumps({"manager": manager_id, "warned": [
        str(w.message) for w in caught if w.category is ResourceWarning]}), flush=True)
    sys.stdin.read()
""")


def test_a_manager_dropped_unclosed_in_a_process_that_lives_on_is_found_dead_by_another(
    root: Path,
) -> None:
    dropper = zygote.shared("sessiontemp").start(None, [str(root)], script=DROPPER, stderr=2)
    try:
        assert dropper.stdout is not None
        said = json.loads(dropper.stdout.readline())
        [warned] = said["warned"]
        assert said["manager"] in warned
        # The dropping process still runs: only its locks are gone.
        assert dropper.poll() is None
        report = recover(root)
        assert report.dead == (said["manager"],)
        assert generations(root) == []
    finally:
        assert dropper.stdin is not None
        dropper.stdin.close()
        dropper.wait(30)


def test_a_closed_manager_collected_warns_nothing_and_leaves_its_successor_alone(
    root: Path,
) -> None:
    m = Manager(root)
    m.retain()
    m.acquire().release()
    m.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del m
        gc.collect()
    assert unclosed(caught) == []


def test_a_forked_childs_copy_collected_in_the_child_leaves_the_parents_locks_alone(
    root: Path,
) -> None:
    m = Manager(root)
    try:
        m.retain()
        lease = m.acquire()
        lock_file = root / "managers" / f"{m.id}.lock"
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    del m, lease
                    gc.collect()
                code = 3 if unclosed(caught) else 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child's copy warned or raised"
        assert locked_by_another(lock_file)
        assert locked_by_another(lease.path)
        assert recover(root).dead == ()
        lease.release()
        with m.acquire() as again:
            (again.path / "after").write_text("after")
    finally:
        m.close()
    assert generations(root) == []
