"""The pytest plugin: a private leased directory for each test that asks for one.

Registered through the ``pytest11`` entry point, so installing sessiontemp
is enough.  Fixtures:

* ``sessiontemp_path``: a :class:`~pathlib.Path`, the test's own private
  0700 directory, removed after the test (kept, while it runs, by a command
  the test started with its lease and left running, until that exits);
* ``sessiontemp_lease``: the :class:`~sessiontemp.Lease` behind it, labelled
  with the test's node id, to start commands with (``lease.popen``,
  ``pass_fds``, ``create_subprocess_exec``).

Options: ``--sessiontemp-root DIR`` (default: the library's per-user root);
``--sessiontemp-max-bytes N`` and ``--sessiontemp-max-inodes N`` (N read
as ``sessiontemp run --max-bytes`` reads it: ``100K``, ``2G``), a budget
for each test's directory: it is measured when the test ends, and one over
the budget is an error of that test at teardown
(:class:`~sessiontemp.OverBudget`, naming its size and largest entries),
the test itself having run to its end, nothing stopped.

Opt-in by use: nothing is opened or created until a test asks for one of
the fixtures.  Then one manager per pytest process (per xdist worker: they
share the root safely) opens, and its recovery removes what killed runs
left; it closes when the session ends.

On a platform sessiontemp refuses (anything but Linux), the plugin stands
aside with one warning: a suite that never asks for its fixtures runs as it
would without it, and a test that asks for one fails with
:class:`~sessiontemp.Unsupported` naming what the platform lacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sessiontemp import platform
from sessiontemp.arguments import size
from sessiontemp.journal.errors import Unsupported

if TYPE_CHECKING:
    from sessiontemp.lease import Lease
    from sessiontemp.manager import Manager

__all__ = ["pytest_addoption", "pytest_configure", "sessiontemp_lease", "sessiontemp_path"]

# Asked once, when pytest loads the plugin: nothing that needs the platform
# is imported before the answer.
LACKING = platform.lacking()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sessiontemp", "private temporary directories (sessiontemp)")
    group.addoption(
        "--sessiontemp-root", metavar="DIR", default=None,
        help="root of the directories of the sessiontemp_path and sessiontemp_lease fixtures "
        "(default: the per-user root under the system temporary directory)",
    )
    group.addoption(
        "--sessiontemp-max-bytes", metavar="N", type=size, default=None,
        help="budget of each test's directory, in bytes allocated (K, M, G, T: binary units, "
        "as 100K): one measured over it when the test ends is an error of that test "
        "(sessiontemp.OverBudget)",
    )
    group.addoption(
        "--sessiontemp-max-inodes", metavar="N", type=size, default=None,
        help="the same budget in inodes (files, directories, links)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if LACKING is not None:
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"sessiontemp's fixtures are not available: {Unsupported(LACKING)}; tests that "
            "do not ask for them are not affected (-p no:sessiontemp silences this)"),
            stacklevel=2)


@pytest.fixture(scope="session")
def _sessiontemp_manager(request: pytest.FixtureRequest) -> Iterator[Manager]:
    """The session's manager, opened (and recovery run) at the first test that needs it."""
    if LACKING is not None:
        raise Unsupported(LACKING)
    from sessiontemp.manager import Manager

    root: str | None = request.config.getoption("sessiontemp_root")
    manager = Manager(root, max_bytes=request.config.getoption("sessiontemp_max_bytes"),
                      max_inodes=request.config.getoption("sessiontemp_max_inodes"))
    try:
        manager.retain()
        yield manager
        manager.release()
    finally:
        manager.close()


@pytest.fixture
def sessiontemp_lease(
    request: pytest.FixtureRequest, _sessiontemp_manager: Manager
) -> Iterator[Lease]:
    """A lease on a private directory of this test's own, given back (and removed) after it."""
    from sessiontemp import budget
    from sessiontemp.run import label

    manager = _sessiontemp_manager
    # Rotating first makes the directory this test's alone; rotating after
    # retires it, so giving the lease back removes it at once.
    manager.rotate()
    lease = manager.acquire(label=label(f"pytest {request.node.nodeid}"))
    over = None
    try:
        yield lease
        limits = budget.Limits(request.config.getoption("sessiontemp_max_bytes"),
                               request.config.getoption("sessiontemp_max_inodes"))
        if limits.budgeted:
            # Measured (and journaled) while the directory is still the current one.
            usage = manager.measure()
            if budget.over(limits, usage.bytes, usage.inodes):
                over = budget.over_budget(limits, usage, budget.PYTEST)
    finally:
        manager.rotate()
        lease.release()
    if over is not None:
        raise over


@pytest.fixture
def sessiontemp_path(sessiontemp_lease: Lease) -> Path:
    """This test's private 0700 directory, removed after the test."""
    return sessiontemp_lease.path
