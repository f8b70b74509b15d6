"""The pytest plugin: a private leased directory for each test that asks for one.

Registered through the ``pytest11`` entry point, so installing sessiontemp
is enough.  Fixtures:

* ``sessiontemp_path``: a :class:`~pathlib.Path`, the test's own private
  0700 directory, removed after the test.  Asked for alone (and without a
  budget), it is a subdirectory of one leased directory of the pytest
  process's own: a mkdir and an rmtree, no journal commit of its own;
* ``sessiontemp_lease``: a :class:`~sessiontemp.Lease` on a generation of
  the test's own (then ``sessiontemp_path`` is its directory), labelled
  with the test's node id, to start commands with (``lease.popen``,
  ``pass_fds``, ``create_subprocess_exec``): one the test started and left
  running keeps the directory until it exits.

Options: ``--sessiontemp-root DIR`` (default: the library's per-user root);
``--sessiontemp-max-bytes N`` and ``--sessiontemp-max-inodes N`` (N read
as ``sessiontemp run --max-bytes`` reads it: ``100K``, ``2G``), a budget
for each test's directory: it is measured when the test ends, and one over
the budget is an error of that test at teardown
(:class:`~sessiontemp.OverBudget`, naming its size and largest entries),
the test itself having run to its end, nothing stopped.  A budgeted test's
directory is a generation of its own, as with ``sessiontemp_lease``: the
journal measures generations.

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

import itertools
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sessiontemp import platform
from sessiontemp.cli.arguments import size
from sessiontemp.journal.errors import Unsupported

if TYPE_CHECKING:
    from sessiontemp.lease import Lease
    from sessiontemp.manager import Manager
    from sessiontemp.space import budget

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


@pytest.fixture(scope="session")
def _sessiontemp_directories(request: pytest.FixtureRequest, _sessiontemp_manager: Manager
                             ) -> Iterator[Path]:
    """This pytest process's own leased directory, holding one subdirectory per test.

    Taken at the first test that asks for ``sessiontemp_path`` alone, given
    back (and removed, with whatever a test could not have removed) when
    the session ends.
    """
    from sessiontemp.run import label

    # xdist's worker id from this session's own config: the environment's is
    # inherited by a pytest run inside a worker (pytester), which is none.
    worker = getattr(request.config, "workerinput", {}).get("workerid", "")
    lease = _sessiontemp_manager.acquire(
        label=label(f"pytest{f' {worker}' if worker else ''}: the tests' directories"))
    try:
        yield lease.path
    finally:
        lease.release()


# Numbers the tests' directories of this pytest process (one lease's directory).
_serial = itertools.count()


@pytest.fixture
def sessiontemp_lease(
    request: pytest.FixtureRequest, _sessiontemp_manager: Manager
) -> Iterator[Lease]:
    """A lease on a private directory of this test's own, given back (and removed) after it."""
    from sessiontemp.run import label
    from sessiontemp.space import budget

    manager = _sessiontemp_manager
    # Rotating first makes the directory this test's alone; rotating after
    # retires it, so giving the lease back removes it at once.
    manager.rotate()
    lease = manager.acquire(label=label(f"pytest {request.node.nodeid}"))
    over = None
    try:
        yield lease
        limits = _limits(request.config)
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
def sessiontemp_path(request: pytest.FixtureRequest) -> Iterator[Path]:
    """This test's private 0700 directory, removed after the test."""
    config = request.config
    if ("sessiontemp_lease" in request.fixturenames
            or config.getoption("sessiontemp_max_bytes") is not None
            or config.getoption("sessiontemp_max_inodes") is not None):
        # A lease the test can start commands with keeps its directory while
        # they run, and a budget is measured (and journaled) on a directory
        # of the journal's own: both need the test's own generation.
        lease: Lease = request.getfixturevalue("sessiontemp_lease")
        yield lease.path
        return
    # Otherwise a subdirectory of this process's leased directory: a mkdir and
    # its removal, no journal commit.  The lease keeps it from recovery and the
    # age sweep while pytest lives; a killed pytest's manager is found dead
    # and the directory removed, these with it, by the next recovery.
    parent: Path = request.getfixturevalue("_sessiontemp_directories")
    path = parent / f"{_NOT_A_NAME.sub('_', request.node.name)[:30]}-{next(_serial)}"
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)  # whatever the umask
    try:
        yield path
    finally:
        try:
            os.rmdir(path)  # left empty: one system call
        except OSError:
            # What cannot be removed now goes with the process's directory.
            shutil.rmtree(path, ignore_errors=True)


_NOT_A_NAME = re.compile(r"[\W]")


def _limits(config: pytest.Config) -> budget.Limits:
    from sessiontemp.space import budget

    return budget.Limits(config.getoption("sessiontemp_max_bytes"),
                         config.getoption("sessiontemp_max_inodes"))
