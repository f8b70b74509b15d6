"""Several processes on one root, several threads each: under load they slow down, never fail.

Four real processes, four threads each, lease and release on one root for a
few seconds in either durability, while each process's journal maintenance
runs every few dozen events, reading what the others appended (a pass
reads on the connection its appends go through, unless it can open one of
its own).  A process that only had to wait for the others must have met no
error at all, and the journal must hold every event they reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessiontemp import recover
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.journal.store import Store
from sessiontemp.manager import DURABILITY, Durability

CHILD = Path(__file__).with_name("loadchild.py")
PROCESSES = 4
THREADS = 4
SECONDS = 4.0
# Maintenance this often reads, in every pass, events the other processes appended.
EVERY = 40


@pytest.mark.parametrize("durability", DURABILITY)
def test_four_processes_of_four_threads_on_one_root_meet_no_error_under_load(
    tmp_path: Path, durability: Durability
) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    children = [
        subprocess.Popen([sys.executable, str(CHILD), str(root), durability, str(THREADS),
                          str(SECONDS), str(EVERY)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(PROCESSES)]
    reports = []
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=SECONDS + 120)
            assert child.returncode == 0, f"a load process exited with {child.returncode}"
            reports.append(json.loads(out))
    finally:
        for child in children:
            child.kill()
            child.wait()
    errors = [e for report in reports for e in report["errors"]]
    assert sum(r["error_count"] for r in reports) == 0, errors
    assert all(r["events"] > 0 for r in reports), reports
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        journaled = sum(1 for record in store.records()
                        if record.event.kind in ("lease.acquired", "lease.released"))
    finally:
        store.close()
    # Each process's warm-up lease too.
    assert journaled == sum(r["events"] for r in reports) + 2 * PROCESSES
    assert recover(root).ran
