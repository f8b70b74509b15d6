"""How the crash and fault tests' driver processes talk to the test: one JSON line a message."""

from __future__ import annotations

import json
import sys
from typing import Any

from sessiontemp import Report


def emit(message: dict[str, Any]) -> None:
    # Flushed at once: whatever the test has read was true before this process died.
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def report_json(report: Report) -> dict[str, Any]:
    """A recovery report as JSON: what was removed, what was skipped and why, who was found dead."""
    return {
        "removed": [[str(r.path), r.generation, r.reason] for r in report.removed],
        "skipped": [[str(s.path), s.reason] for s in report.skipped],
        "dead": list(report.dead),
        "ran": report.ran,
    }
