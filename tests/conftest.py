"""Shared fixtures: a fresh root per test, managers checked against the journal.

Every manager a test opens through ``open_manager`` is checked at teardown:
replaying its journal from scratch must give exactly the state the manager
holds.  Hypothesis profiles, the one place example budgets are set: ``default``,
``ci`` (twice the examples; .ci/run), ``dev`` (quick) and ``long``; choose with
HYPOTHESIS_PROFILE.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from sessiontemp import Manager
from sessiontemp.journal import State, Store, checkpoint, replay
from sessiontemp.journal.reducer import Forgotten
from tests import zygote

if TYPE_CHECKING:
    from tests.neighbour import Neighbour

# The one place budgets are set.  Every property test runs ``max_examples``
# (or a fraction of it: tests/strategies.py ``scaled``); the state machine
# (tests/test_machine.py) runs as many sequences of up to
# ``stateful_step_count`` steps.
_COMMON: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
# ``default`` (no HYPOTHESIS_PROFILE) is the budget of ``python -m pytest``, which must
# stay near five minutes on two cores: each state machine's sequences are its costliest
# part (30 of up to 50 steps, about 15 s each on two shared cores).  ``ci`` doubles the
# examples; .ci/run runs every hypothesis test again with it after the default run.
settings.register_profile("default", max_examples=30, stateful_step_count=50, **_COMMON)
settings.register_profile("ci", max_examples=60, stateful_step_count=50, **_COMMON)
settings.register_profile("dev", max_examples=30, stateful_step_count=20, **_COMMON)
settings.register_profile("long", max_examples=5000, stateful_step_count=50, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The interrupt tests send SIGINT to this process and to their children.  A shell
# starts a background job with SIGINT ignored, Python then keeps it ignored, and
# every child inherits that: the signals would never arrive.  Ctrl-C gets its usual
# handler here, and an exec resets a handled signal to the default for children.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def journal_state(root: Path) -> State:
    """Every manager and generation the journal under *root* names, finished ones included.

    Replayed from scratch, read-only; what the reducer's state lets go of is
    put back from a :class:`Forgotten`.  :func:`live_state` is the reducer's own.
    """
    forgotten = Forgotten()
    return forgotten.whole(live_state(root, forgotten))


def live_state(root: Path, history: Forgotten | None = None) -> State:
    """The reducer's state of the journal under *root*: what is alive or owes work.

    Replayed from where the kept history starts: event 1, or once history
    was retired, the checkpoint of the last event retired.
    """
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        start = checkpoint.origin(store).state
        return replay(store.records(after=start.seq), start, history=history)
    finally:
        store.close()


def own_view(state: State, manager_id: str) -> tuple[object, dict[str, object]]:
    """One manager's part of *state*: its record (None once the state let it go) and its
    generations."""
    return state.managers.get(manager_id), {
        gid: g for gid, g in state.generations.items() if g.manager == manager_id
    }


def assert_replay_matches(manager: Manager) -> None:
    """Replaying the journal from scratch gives exactly what *manager* holds."""
    assert own_view(live_state(manager.root), manager.id) == own_view(
        manager.state, manager.id
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def open_manager(root: Path) -> Iterator[Callable[..., Manager]]:
    """Open managers on ``root`` (or another root); each is checked and closed at teardown."""
    opened: list[Manager] = []

    def factory(at: Path | None = None, **kwargs: Any) -> Manager:
        manager = Manager(root if at is None else at, **kwargs)
        opened.append(manager)
        return manager

    yield factory
    for manager in opened:
        if not manager.closed:
            assert_replay_matches(manager)
            manager.close()
        assert own_view(live_state(manager.root), manager.id) == own_view(
            manager.state, manager.id
        )


@pytest.fixture
def manager(open_manager: Callable[..., Manager]) -> Manager:
    """A manager with one owner, on a fresh root."""
    m = open_manager()
    m.retain()
    return m


def pytest_sessionfinish() -> None:
    zygote.close_all()


def locked_by_another(path: Path) -> bool:
    """Whether a LOCK_EX | LOCK_NB probe on *path* (file or directory) fails: it is locked."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.fixture
def neighbour() -> Iterator[Neighbour]:
    """A real second process on the test's root, moving when told (tests/neighbour.py).

    Modules whose neighbour is another kind of child define a fixture of
    this name of their own, which takes precedence in them.
    """
    # Imported here: tests/neighbour.py imports the fault tests' child, which
    # the modules that never meet a neighbour need not load.
    from tests.neighbour import Neighbour

    other = Neighbour()
    try:
        yield other
    finally:
        other.end()
