"""Running the library as a second user: uid and gid 65534 (nobody), in a child process.

As root, permission bits stop nothing, so what an unprivileged owner meets
(a 0500 root, a lock file it cannot open) is tried in a child that drops to
nobody first.  The library is imported before, as root: the interpreter's
own files may not be readable by nobody.  :func:`outcome` runs a call there
and reports what it raised, for the test to judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")

_PROLOGUE = (
    "import os, pathlib, importlib.metadata, sessiontemp, sqlite_utils.plugins\n"
    "sqlite_utils.plugins.ensure_plugins_loaded()\n"
    # Loaded while still root: nobody cannot read the interpreter's own
    # modules under /root, where this machine's Python lives.
    "for name in sessiontemp.__all__:\n    getattr(sessiontemp, name)\n"
    f"os.setgroups([])\nos.setgid({NOBODY})\nos.setuid({NOBODY})\n"
)

_OUTCOME = """
import json, sessiontemp
try:
    {call}
except BaseException as e:
    print(json.dumps({{"raised": [c.__name__ for c in type(e).__mro__], "message": str(e),
                       "path": getattr(e, "path", None)}}))
else:
    print(json.dumps({{"raised": None}}))
"""


def run_as_nobody(script: str, *, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run *script* in a child Python that has dropped to uid and gid 65534."""
    return subprocess.run(
        [sys.executable, "-c", _PROLOGUE + textwrap.dedent(script)],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )


def outcome(call: str, *, cwd: Path) -> dict[str, Any]:
    """What the one-line *call* (``sessiontemp`` imported) raised as nobody.

    ``raised`` is the exception's class and its bases by name (None when it
    returned), with its ``message`` and ``path``.
    """
    done = run_as_nobody(_OUTCOME.format(call=call), cwd=cwd)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.fixture
def nobodys_place() -> Iterator[Path]:
    """A directory nobody owns, reachable by nobody (pytest's tmp is root's 0700)."""
    place = Path(tempfile.mkdtemp(prefix="sessiontemp-nobody-"))
    os.chmod(place, 0o755)  # noqa: S103 - nobody must reach what is made inside it
    os.chown(place, NOBODY, NOBODY)
    try:
        yield place
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(place)], check=True)
