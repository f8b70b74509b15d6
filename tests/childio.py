"""How the crash and fault tests' driver processes talk to the test: one JSON line a message.

The child writes with :func:`emit`; the test reads with :class:`JsonLines`.
:func:`terminal_output` reads what a child wrote to a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from sessiontemp import Report


def emit(message: dict[str, Any]) -> None:
    # Flushed at once: whatever the test has read was true before this process died.
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def commands() -> Iterator[list[str]]:
    """The words of each non-empty line the test sends, until its end of file."""
    for line in sys.stdin:
        words = line.split()
        if words:
            yield words


def serve(run: Callable[[list[str]], dict[str, Any]]) -> None:
    """Answer each command with what *run* returns, or with the error it raised.

    The error goes with its traceback, so the test fails showing what went
    wrong in here rather than only that no answer came.
    """
    for words in commands():
        try:
            reply = run(words)
        except Exception as e:  # answered, so the test sees what went wrong
            emit({"error": f"{words[0]}: {e!r}", "traceback": traceback.format_exc()})
        else:
            emit(reply)


class CutShort(Exception):
    """The child's output ended in the middle of a line."""


class JsonLines:
    """The test's side: the messages a child writes to the pipe *fd*, one JSON line each."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""

    def read(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or None at end of file.

        Raises TimeoutError when no whole line came within *timeout* seconds,
        and :class:`CutShort` when the output ended part-way through one.
        """
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer within {timeout} s")
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                if self._buffer:
                    raise CutShort(f"half a line before end of file: {self._buffer!r}")
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message


def report_json(report: Report) -> dict[str, Any]:
    """A recovery report as JSON: what was removed, what was skipped and why, who was found dead."""
    return {
        "removed": [[str(r.path), r.generation, r.reason] for r in report.removed],
        "skipped": [[str(s.path), s.reason] for s in report.skipped],
        "dead": list(report.dead),
        "ran": report.ran,
    }


def terminal_output(leader: int) -> bytes:
    """Everything written to the pseudo-terminal whose leader is *leader*, once its writer closed.

    Linux answers EIO, not an end of file, when the last follower is closed.
    """
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    return shown
