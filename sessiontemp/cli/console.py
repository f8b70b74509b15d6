"""What the console scripts write, wherever it goes: a terminal, a closed descriptor, a pipe.

Both scripts (``sessiontemp`` and ``journal-inspect``) may be started with
a standard descriptor closed (``>&-``, a daemon's ``closerange``) or writing
into a pipe whose reader has left (``| head -1``).  Neither changes what a
script does, nor the exit status of ``sessiontemp run`` (the command's):

- a closed descriptor 0, 1 or 2 is taken at start-up by ``/dev/null``,
  close-on-exec, so no file the library opens can land on it, and a
  command started later finds it closed, as it was given;
- a message or progress line that cannot be written to stderr is dropped;
- output that cannot be written to stdout because its reader left ends the
  script at once, quietly, as SIGPIPE ends other tools (the shell reports
  status 141); whatever the script was doing is finished by then.

Text for a terminal is escaped (:func:`shown`, :class:`Terminal`): a label
or path holding control characters (a bell, an escape sequence that would
recolour or retitle the terminal) is printed as ``\\x07``, ``\\x1b`` and so
on.  The journal keeps it exactly as given; JSON output escapes it itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import time

# Neither typing nor re at run time: the session client imports this module
# on every command's start (typing checkers treat the name as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable
    from typing import Final, NoReturn, Protocol

__all__ = ["Out", "Progress", "Terminal", "exit_with", "prepare", "progress", "say", "shown"]

# C0 controls, DEL, C1 controls (U+009B is a terminal's CSI, as ESC [ is), and the
# Unicode controls that reorder or break lines on screen.
_CONTROLS: Final = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
# The same without the newline, which a script's own lines end with.
_IN_LINES: Final = "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"


def _sub(pattern: str, text: str) -> str:
    import re

    # re caches compiled patterns: compiled once, on first use.
    return re.sub(pattern, _escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """*text* as a terminal may show it: every control character written as an escape."""
    return _sub(_CONTROLS, str(text))


if TYPE_CHECKING:
    class Out(Protocol):
        """Where a script's output goes: a text stream, or a :class:`Terminal` over one."""

        def write(self, text: str, /) -> int: ...

        def flush(self) -> None: ...
else:
    Out = object


class Terminal:
    """A text stream that escapes control characters, newlines excepted, on their way out.

    The last line of defence for text output: a value that may hold a
    newline (a label, a message) goes through :func:`shown` first.
    """

    def __init__(self, out: Out) -> None:
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(_sub(_IN_LINES, text))
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def prepare() -> None:
    """Make the standard descriptors and streams safe to use; call first thing.

    A closed descriptor 0, 1 or 2 gets ``/dev/null``: without it the next
    file opened (a root, a lock, a lease's directory handed to a command)
    would take its number, and output meant for the terminal would go into
    it, or a command would inherit it as its stdout.  Close-on-exec, so a
    command started later sees the descriptor closed, as it was given to
    this script.  Python leaves ``sys.stdout`` None for a closed descriptor;
    it gets a stream on the placeholder, which discards what is written.
    Paths are bytes to the kernel: one that is not UTF-8 arrives in argv
    with surrogate escapes, and is written back out as the same bytes.
    """
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            placeholder = os.open(os.devnull, mode | os.O_CLOEXEC)
            if placeholder != fd:  # a lower one was free after all: put it where it belongs
                os.dup2(placeholder, fd, inheritable=False)
                os.close(placeholder)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 (lives as long as the process)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")


def say(text: str) -> None:
    """Write *text* to stderr if it can be written; a closed or broken stderr drops it.

    A message is never worth an exit status: losing it must not turn a
    command's status, or a recovery's success, into a traceback.
    """
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text)
        sys.stderr.flush()


def exit_with(main: Callable[[], int]) -> NoReturn:
    """Run a script's *main* and exit with its status, whatever became of stdout and stderr.

    A :class:`BrokenPipeError` from stdout (its reader left) ends the
    script by SIGPIPE, as it ends ``cat`` or ``grep``: quietly, status 141
    to the shell.  What is still buffered for a descriptor that cannot take
    it is dropped, so the interpreter's own flush at exit cannot fail and
    turn the status into 120.
    """
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        _end_by_sigpipe()
    _drop_unwritable()
    sys.exit(code)


def _end_by_sigpipe() -> NoReturn:
    _drop_unwritable()
    # Python ignores SIGPIPE (hence the BrokenPipeError); dying of it is the
    # convention a shell and a pipeline's `set -o pipefail` understand.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPIPE})
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(128 + signal.SIGPIPE)  # not reached unless the signal could not be delivered


def _drop_unwritable() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            # The buffer stays in the stream: send it where it cannot fail.
            with contextlib.suppress(OSError, ValueError):
                null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
                os.dup2(null, stream.fileno(), inheritable=False)
                os.close(null)
                stream.flush()


class Progress:
    """Progress of a long operation on stderr, redrawn at most five times a second.

    Called with (done, total); once done reaches total the line is cleared.
    A stderr that fails to take it turns it off: progress never stops the
    work it reports on.
    """

    def __init__(self, label: str, unit: str = "events") -> None:
        self.label = label
        self.unit = unit
        self.last = 0.0
        self.broken = False

    def __call__(self, done: int, total: int) -> None:
        if self.broken:
            return
        now = time.monotonic()
        if done < total and now - self.last < 0.2:
            return
        self.last = now
        percent = 100 * done // total if total else 100
        line = f"\r{self.label}: {percent:3d}% ({done:,} / {total:,} {self.unit})"
        if done >= total:
            line += "\r\x1b[K"
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):
            self.broken = True


def progress(label: str, *, unit: str = "events", hidden: bool = False) -> Progress | None:
    """A :class:`Progress` when stderr is a terminal (and not *hidden*); None otherwise."""
    try:
        terminal = sys.stderr.isatty()
    except (OSError, ValueError):
        terminal = False
    return Progress(label, unit) if terminal and not hidden else None
