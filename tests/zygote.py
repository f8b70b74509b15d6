"""A process that imports the library once and forks a fresh child for each run.

Some tests start a process per case: a process killed at every step k of an
operation, journal-inspect run on journal after journal.  Each such start
pays the interpreter's start-up and the library's import, about half a
second of CPU on two shared cores, which was most of those tests' time.  A
child forked from the zygote is a process like any other (its own pid and
descriptors, stdout and stderr to files, killed by a real SIGKILL, its exit
status reaped) and starts with nothing open: the zygote itself only
imported modules, opened no journal, held no lock and started no thread.

The test process sends one JSON line per run (what to run, argv, the
environment, the working directory, where stdout and stderr go); the zygote
answers with the child's pid, then its exit code as
:attr:`subprocess.Popen.returncode` gives it (-9 for SIGKILL).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parents[1]

_MAIN = r'''
import atexit, builtins, importlib, json, os, sys, traceback

for name in sys.argv[1:]:
    importlib.import_module(name)


def child(request):
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    sys.argv = request["argv"]
    try:
        if "script" in request:
            exec(compile(request["script"], "<string>", "exec"),
                 {"__name__": "__main__", "__builtins__": builtins})
        else:
            module, _, function = request["entry"].partition(":")
            sys.exit(getattr(importlib.import_module(module), function)())
        code = 0
    except SystemExit as e:
        # As the interpreter ends on SystemExit: None is 0, a number is the status,
        # anything else is printed to stderr and the status is 1.
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
'''


class Zygote:
    """One zygote process with *modules* imported; :meth:`run` forks a child of it per run."""

    def __init__(self, *modules: str) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="sessiontemp-zygote-"))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MAIN, *modules], cwd=HERE, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )
        self.runs = 0
        # Answers are read from the descriptor, not a buffered stream: the pid and the
        # exit code of a short run can arrive together, and select would not see the
        # second one once a buffered stream had read it.
        self._buffer = b""

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, 65536)
            assert chunk, f"the zygote ended: {self.process.wait()}"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, argv: list[str], *, script: str | None = None, entry: str | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run *script* (as ``python -c``) or the console script *entry* (``module:function``)
        with *argv* in a child forked for it; what ``subprocess.run(..., capture_output=True,
        text=True)`` would give."""
        assert (script is None) != (entry is None)
        assert self.process.stdin is not None
        self.runs += 1
        out, err = self.scratch / f"{self.runs}.out", self.scratch / f"{self.runs}.err"
        request: dict[str, Any] = {
            "argv": argv, "env": dict(os.environ), "cwd": str(cwd or Path.cwd()),
            "stdout": str(out), "stderr": str(err),
        }
        request.update({"script": script} if script is not None else {"entry": entry})
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = self._answer(60)["pid"]
        try:
            returncode = self._answer(timeout)["returncode"]
        except TimeoutError:
            # Not reaped until the zygote's waitpid returns, so the pid is still the child's.
            os.kill(pid, signal.SIGKILL)
            self._answer(60)
            raise subprocess.TimeoutExpired(argv, timeout) from None
        try:
            return subprocess.CompletedProcess(argv, returncode, out.read_text(),
                                               err.read_text())
        finally:
            out.unlink()
            err.unlink()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.process.wait(timeout=60)
        shutil.rmtree(self.scratch, ignore_errors=True)


_STARTED: dict[tuple[str, ...], Zygote] = {}


def shared(*modules: str) -> Zygote:
    """The run's zygote with *modules* imported, started on first use (closed by conftest)."""
    if modules not in _STARTED:
        _STARTED[modules] = Zygote(*modules)
    return _STARTED[modules]


def close_all() -> None:
    while _STARTED:
        _STARTED.popitem()[1].close()


JOURNAL_INSPECT = Path(sys.executable).with_name("journal-inspect")


def journal_inspect(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``journal-inspect *args``, the console script's function in a process of its own."""
    return shared("sessiontemp.cli").run([str(JOURNAL_INSPECT), *map(str, args)],
                                         entry="sessiontemp.cli:run")
