"""A process that imports the library once and forks a fresh child for each run.

Some tests start a process per case: a process killed at every step k of an
operation, journal-inspect run on journal after journal, a driver process
(tests/crashchild.py, tests/faultchild.py, a session owner) per test.  Each
such start pays the interpreter's start-up and the library's import, about
half a second of CPU on two shared cores, which was most of those tests'
time.  A child forked from the zygote is a process like any other (its own
pid and descriptors, standard streams opened as a new interpreter opens
them, killed by a real SIGKILL, its exit status reaped) and starts with
nothing open: the zygote itself only imported modules, opened no journal,
held no lock and started no thread.

The test process talks to the zygote over a SOCK_SEQPACKET socket, one JSON
message per request, with descriptors attached where a child needs them:
``run`` (stdout and stderr to files; the answer is the pid), ``start`` (the
test's pipes and passed descriptors; the answer is the pid) and ``wait``
(the exit code as :attr:`subprocess.Popen.returncode` gives it, -9 for
SIGKILL, or None after the timeout).  Children are reaped only on ``wait``.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).parents[1]

_MAIN = r"""
import atexit, builtins, importlib, io, json, os, runpy, select, socket, sys, time, traceback

for name in sys.argv[2:]:
    importlib.import_module(name)
channel = socket.socket(fileno=int(sys.argv[1]))


def place(received, targets):
    # Received descriptors go where the child expects them (0, 1, 2 and each passed one
    # at its own number, as Popen's pass_fds), and nothing else stays open, as with
    # Popen's close_fds.
    high = max([*received, *targets, 2]) + 1
    moved = [os.dup2(fd, high + i) for i, fd in enumerate(received)]
    for target, fd in zip(targets, moved):
        os.dup2(fd, target)
    keep = set(targets)
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass


def child(request, received):
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if request["op"] == "run":
        null = os.open(os.devnull, os.O_RDONLY)
        received = [null]
        for path in (request["stdout"], request["stderr"]):
            received.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        place(received, [0, 1, 2])
    else:
        place(received, [0, 1, 2, *request["pass_fds"]])
    for fd in request.get("pass_fds", ()):
        os.set_inheritable(fd, True)
    # As a new interpreter would open them, PYTHONUNBUFFERED read from the child's environment.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd, **options):
        raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        return io.TextIOWrapper(raw, write_through=unbuffered, **options)

    sys.stdin = open(0, closefd=False)
    sys.stdout = stream(1)
    sys.stderr = stream(2, errors="backslashreplace", line_buffering=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.argv = request["argv"]
    try:
        if "script" in request:
            exec(compile(request["script"], "<string>", "exec"),
                 {"__name__": "__main__", "__builtins__": builtins})
        elif "path" in request:
            sys.path[0] = os.path.dirname(request["path"])
            runpy.run_path(request["path"], run_name="__main__")
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


def wait(pid, timeout):
    # Reaped only when asked, as Popen does: until then the pid stays the child's.
    if timeout is not None:
        pidfd = os.pidfd_open(pid)
        try:
            if not select.select([pidfd], [], [], timeout)[0]:
                return None
        finally:
            os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


while True:
    message, received, _, _ = socket.recv_fds(channel, 1 << 20, 64)
    if not message:
        break
    request = json.loads(message)
    if request["op"] == "wait":
        channel.send(json.dumps({"returncode": wait(request["pid"], request["timeout"])}).encode())
        continue
    pid = os.fork()
    if pid == 0:
        channel.close()
        child(request, received)
    for fd in received:
        os.close(fd)
    channel.send(json.dumps({"pid": pid}).encode())
"""


class Forked:
    """A child forked by the zygote, with what :class:`subprocess.Popen` offers of one.

    Like a Popen child it is reaped only by :meth:`wait` or :meth:`poll`, so its pid
    stays its own until then, and a signal sent before cannot reach another process.
    """

    def __init__(self, zygote: Zygote, pid: int, stdin: IO[bytes], stdout: IO[bytes],
                 stderr: IO[bytes] | None) -> None:
        self.zygote, self.pid, self.stdin, self.stdout = zygote, pid, stdin, stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """One zygote process with *modules* imported; it forks a child per run or start."""

    def __init__(self, *modules: str) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="sessiontemp-zygote-"))
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _MAIN, str(theirs.fileno()), *modules], cwd=HERE,
                stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self.runs = 0

    def _ask(self, request: dict[str, Any], fds: list[int], timeout: float | None = 60
             ) -> dict[str, Any]:
        socket.send_fds(self.channel, [json.dumps(request).encode()], fds)
        return self._answer(timeout)

    def _answer(self, timeout: float | None) -> dict[str, Any]:
        if not select.select([self.channel], [], [], timeout)[0]:
            raise TimeoutError
        message = self.channel.recv(1 << 20)
        assert message, f"the zygote ended: {self.process.wait()}"
        answer: dict[str, Any] = json.loads(message)
        return answer

    def _request(self, op: str, argv: list[str], cwd: Path | None) -> dict[str, Any]:
        return {"op": op, "argv": argv, "env": dict(os.environ),
                "cwd": str(cwd or Path.cwd())}

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of child *pid* once it ends (reaping it), or None after *timeout*."""
        answer = self._ask({"op": "wait", "pid": pid, "timeout": timeout}, [], None)
        returncode: int | None = answer["returncode"]
        return returncode

    def run(self, argv: list[str], *, script: str | None = None, entry: str | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run *script* (as ``python -c``) or the console script *entry* (``module:function``)
        with *argv* in a child forked for it; what ``subprocess.run(..., capture_output=True,
        text=True)`` would give."""
        assert (script is None) != (entry is None)
        self.runs += 1
        out, err = self.scratch / f"{self.runs}.out", self.scratch / f"{self.runs}.err"
        request = self._request("run", argv, cwd)
        request.update({"stdout": str(out), "stderr": str(err)})
        request.update({"script": script} if script is not None else {"entry": entry})
        pid = self._ask(request, [])["pid"]
        returncode = self.wait(pid, timeout)
        if returncode is None:
            os.kill(pid, signal.SIGKILL)
            self.wait(pid, None)
            raise subprocess.TimeoutExpired(argv, timeout)
        try:
            return subprocess.CompletedProcess(argv, returncode, out.read_text(),
                                               err.read_text())
        finally:
            out.unlink()
            err.unlink()

    def start(self, path: Path | None, args: list[str], *, script: str | None = None,
              stderr: int | None = None, pass_fds: tuple[int, ...] = (),
              cwd: Path | None = None) -> Forked:
        """``python PATH ARGS...`` (or ``python -c SCRIPT ARGS...``) forked from the zygote,
        with pipes to its stdin and stdout (binary), stderr to the descriptor *stderr* (a
        pipe when None), and *pass_fds* kept at their numbers."""
        assert (path is None) != (script is None)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe() if stderr is None else (-1, stderr)
        ours, theirs = [stdin_w, stdout_r], [stdin_r, stdout_w]
        if stderr is None:
            ours.append(stderr_r)
            theirs.append(stderr_w)
        try:
            request = self._request("start", [str(path or "-c"), *args], cwd)
            request.update({"path": str(path)} if path else {"script": script})
            request["pass_fds"] = list(pass_fds)
            pid = self._ask(request, [stdin_r, stdout_w, stderr_w, *pass_fds])["pid"]
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return Forked(self, pid, os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"),
                      None if stderr is not None else os.fdopen(stderr_r, "rb"))

    def close(self) -> None:
        self.channel.close()
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
    return shared("sessiontemp.cli.journal_inspect").run([str(JOURNAL_INSPECT), *map(str, args)],
                                         entry="sessiontemp.cli.journal_inspect:run")
