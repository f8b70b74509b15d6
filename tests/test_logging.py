"""The library logs through structlog on the ``sessiontemp`` logger and never configures logging.

An application that configures nothing sees nothing, on stdout or stderr,
even when the library has a warning to give; one that captures events gets
them with stable keys.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from sessiontemp import GENERATION_PREFIX, Lease, Manager, recover

SLEEP = shutil.which("sleep") or "/bin/sleep"

# A manager that dies without closing, its generation still on disk: the
# next recovery declares it dead, a warning.
CRASH = """
import os, sys
from pathlib import Path
from sessiontemp import Manager

m = Manager(sys.argv[1])
m.retain()
lease = m.acquire()
(lease.path / "left-behind.txt").write_text("x")
Path(sys.argv[2]).write_text(m.id)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""

# Everyday use, including two paths that log warnings: recovering a dead
# manager, and a retired generation whose removal a running command blocks.
USE = """
import json, logging, sys
from pathlib import Path
import structlog
from sessiontemp import Manager, recover

root, out = sys.argv[1], Path(sys.argv[2])
report = recover(root)
with Manager(root) as m:
    m.retain()
    lease = m.acquire()
    child = lease.popen([sys.argv[3], "60"])
    m.rotate()
    lease.release()
    busy = lease.path.is_dir()
    child.kill()
    child.wait()
    m.rotate()
    with m.acquire() as again:
        again.popen(["true"]).wait()
    m.release()
out.write_text(json.dumps({
    "dead": list(report.dead),
    "removed": len(report.removed),
    "busy_generation_kept": busy,
    "root_handlers": len(logging.getLogger().handlers),
    "structlog_configured": structlog.is_configured(),
}))
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
        check=False,
    )


def crash_a_manager(root: Path, tmp_path: Path) -> str:
    """Run a manager in another process that exits without closing; its id."""
    id_file = tmp_path / "crashed-id"
    crashed = run_python(CRASH, str(root), str(id_file))
    assert crashed.returncode == 0, crashed.stderr
    assert (crashed.stdout, crashed.stderr) == ("", "")
    return id_file.read_text()


def test_a_program_that_configures_no_logging_sees_nothing_even_on_warnings(
    root: Path, tmp_path: Path
) -> None:
    dead = crash_a_manager(root, tmp_path)
    out = tmp_path / "result.json"
    used = run_python(USE, str(root), str(out), SLEEP)
    assert used.returncode == 0, used.stderr
    assert used.stdout == ""
    assert used.stderr == ""
    result = json.loads(out.read_text())
    # The warning paths did run: the silence is the library's, not luck.
    assert result["dead"] == [dead]
    assert result["removed"] == 1
    assert result["busy_generation_kept"] is True
    assert result["root_handlers"] == 0
    assert result["structlog_configured"] is False


def test_the_same_warnings_reach_stderr_once_the_program_configures_logging(
    root: Path, tmp_path: Path
) -> None:
    crash_a_manager(root, tmp_path)
    configured = "import logging\nlogging.basicConfig()\n" + USE
    used = run_python(configured, str(root), str(tmp_path / "result.json"), SLEEP)
    assert used.returncode == 0, used.stderr
    assert used.stdout == ""
    assert "manager.dead" in used.stderr
    assert "generation.busy" in used.stderr


# The first event anything sees (an OverBudget warning, logging configured
# at WARNING) imports structlog while three threads acquire, release and
# recover, each asking at every step whether a debug event would be seen.
RACE = """
import logging, sys, threading, traceback
from sessiontemp import Manager, OverBudget, SessionTempError, recover

root = sys.argv[1]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
escaped = []
stop = threading.Event()
ready = threading.Barrier(4)

def busy():
    try:
        with Manager(root) as m:
            m.retain()
            ready.wait()
            while not stop.is_set():
                try:
                    m.acquire().release()
                    recover(root)
                except SessionTempError:
                    pass
    except BaseException:
        escaped.append(traceback.format_exc())

over = Manager(root, max_bytes=0, measure_every=float("inf"))
over.retain()
over.acquire().release()
over.measure()
assert "structlog" not in sys.modules
threads = [threading.Thread(target=busy) for _ in range(3)]
for thread in threads:
    thread.start()
ready.wait()
try:
    over.acquire()
except OverBudget:
    pass
stop.set()
for thread in threads:
    thread.join()
over.close()
assert "structlog" in sys.modules, "the warning was meant to import it"
print("".join(escaped), end="")
"""


@pytest.mark.parametrize("trials", [5, pytest.param(50, marks=pytest.mark.slow)])
def test_the_first_event_seen_imports_structlog_while_other_threads_use_the_library_and_none_of_them_fails(  # noqa: E501
    tmp_path: Path, trials: int,
) -> None:
    for trial in range(trials):
        raced = run_python(RACE, str(tmp_path / f"root-{trial}"))
        assert raced.returncode == 0, raced.stderr
        assert raced.stdout == "", f"trial {trial}:\n{raced.stdout}"
        assert "space.over_budget" in raced.stderr


# -- captured events -------------------------------------------------------------------------


Event = MutableMapping[str, Any]


def named(logs: list[Event], event: str) -> list[Event]:
    return [e for e in logs if e["event"] == event]


@contextmanager
def sleeping(lease: Lease) -> Iterator[None]:
    child = lease.popen([SLEEP, "60"])
    try:
        yield
    finally:
        child.kill()
        child.wait()


def test_generation_created_carries_the_manager_the_generation_and_the_journal_seq(
    manager: Manager,
) -> None:
    with capture_logs() as logs:
        lease = manager.acquire()
    lease.release()
    (created,) = named(logs, "generation.created")
    assert created["log_level"] == "info"
    assert created["manager"] == manager.id
    assert created["generation"] == lease.generation
    # The generation's directory, the leased directory's parent.
    assert created["path"] == str(lease.path.parent)
    assert isinstance(created["seq"], int)
    assert manager.state.generations[lease.generation].created_seq < created["seq"]
    (acquired,) = named(logs, "lease.acquired")
    assert acquired["lease"] == lease.id
    assert created["seq"] < acquired["seq"] <= manager.state.seq


def test_every_event_of_a_manager_names_it_and_every_generation_event_its_generation(
    manager: Manager,
) -> None:
    with capture_logs() as logs:
        with manager.acquire():
            pass
        manager.rotate()
        with manager.acquire():
            pass
        manager.release()
        manager.close()
    assert logs != []
    assert {"generation.created", "lease.acquired", "lease.released",
            "generation.removed", "manager.closed"} <= {e["event"] for e in logs}
    for event in logs:
        assert event["manager"] == manager.id, event
        if event["event"].startswith(("generation.", "lease.")):
            assert event["generation"], event
            assert isinstance(event["seq"], int), event


def test_recovery_events_carry_one_recovery_id_and_name_the_dead_manager(
    root: Path, tmp_path: Path
) -> None:
    dead = crash_a_manager(root, tmp_path)
    with capture_logs() as logs:
        report = recover(root)
    assert report.dead == (dead,)
    (died,) = named(logs, "manager.dead")
    assert died["log_level"] == "warning"
    assert died["manager"] == dead
    assert isinstance(died["seq"], int)
    (removed,) = named(logs, "generation.removed")
    assert removed["generation"] == report.removed[0].generation
    assert removed["path"] == str(report.removed[0].path)
    (finished,) = named(logs, "recovery.finished")
    assert (finished["removed"], finished["dead"]) == (1, 1)
    ids = {e["recovery"] for e in (died, removed, finished)}
    assert len(ids) == 1
    assert ids != {None}


def test_the_stale_sweep_logs_each_removal_with_its_recovery_id_and_reason(root: Path) -> None:
    root.mkdir(mode=0o700)
    stray = root / (GENERATION_PREFIX + "strayaaaaaaaaaaa")
    stray.mkdir()
    old = time.time() - 3 * 86400
    os.utime(stray, (old, old))
    with capture_logs() as logs:
        recover(root, stale_after=86400)
    (removed,) = named(logs, "generation.removed")
    assert removed["generation"] == "strayaaaaaaaaaaa"
    assert removed["path"] == str(stray)
    assert "older than" in removed["reason"]
    (finished,) = named(logs, "recovery.finished")
    assert removed["recovery"] == finished["recovery"]


def test_warnings_go_to_the_standard_sessiontemp_logger(
    manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    lease = manager.acquire()
    with caplog.at_level(logging.WARNING, logger="sessiontemp"), sleeping(lease):
        manager.rotate()
        lease.release()
    warnings = [r for r in caplog.records if r.name == "sessiontemp"]
    assert any(
        r.levelno == logging.WARNING and "generation.busy" in r.getMessage() for r in warnings
    )
    manager.rotate()


def test_using_the_library_never_configures_logging(
    manager: Manager, root: Path, tmp_path: Path
) -> None:
    """No basicConfig, no handler, no level, no structlog configuration is left behind."""
    root_logger = logging.getLogger()
    before = (list(root_logger.handlers), root_logger.level, structlog.get_config())
    ours = logging.getLogger("sessiontemp")
    ours_before = (list(ours.handlers), ours.level, ours.propagate)
    lease = manager.acquire()
    with sleeping(lease):
        manager.rotate()
        lease.release()
    manager.rotate()
    crash_a_manager(tmp_path / "other-root", tmp_path)
    recover(tmp_path / "other-root")
    manager.close()
    assert (list(root_logger.handlers), root_logger.level, structlog.get_config()) == before
    assert (list(ours.handlers), ours.level, ours.propagate) == ours_before
    assert [type(h) for h in ours.handlers] == [logging.NullHandler]
