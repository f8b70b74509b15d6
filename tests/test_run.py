"""``sessiontemp run`` and ``sessiontemp recover``, through the installed script and ``python -m``.

Real wrappers run real shell commands on a real root: exit statuses and
signal deaths pass through, forwarded signals reach a command that handles
them (and a terminal's Ctrl-C reaches it once), a SIGKILLed wrapper leaves
its command's directory to the next recovery, and bad input is one line on
stderr with exit status 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX
from sessiontemp.inspect import SCHEMA
from sessiontemp.journal.events import CommandStarted, LeaseAcquired
from sessiontemp.run import FORWARDED, exit_status
from tests.commands import (
    DEFAULT_SIGNALS,
    SH,
    WRITER,
    assert_still_writing,
    exited,
    in_session,
    journaled,
    kill_session,
    wait_until,
    writer_env,
)
from tests.holding import served

SCRIPT = Path(sys.executable).parent / "sessiontemp"
LAUNCHERS = {"script": [os.fspath(SCRIPT)], "python -m": [sys.executable, "-m", "sessiontemp"]}


def launcher(name: str) -> list[str]:
    command = LAUNCHERS[name]
    if not os.path.exists(command[0]):
        pytest.skip(f"{command[0]} is not installed: run `pip install -e .`")
    return command


# Both launchers run the same entry function: the default run starts most tests through
# the script, and ``-m slow`` (in .ci/run) runs them through ``python -m`` too.
@pytest.fixture(params=["script", pytest.param("python -m", marks=pytest.mark.slow)])
def wrapper(request: pytest.FixtureRequest) -> list[str]:
    """The command that starts ``sessiontemp``: the installed script, or ``python -m``."""
    return launcher(request.param)


@pytest.fixture(params=sorted(LAUNCHERS))
def each_wrapper(request: pytest.FixtureRequest) -> list[str]:
    """Either launcher, both in the default run: for the tests that each must pass."""
    return launcher(request.param)


def leftovers(root: Path) -> list[str]:
    """Generation and trash entries under *root*."""
    return sorted(n for n in os.listdir(root) if n.startswith((GENERATION_PREFIX, TRASH_PREFIX)))


def sessiontemp(wrapper: list[str], *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrapper, *args], capture_output=True, text=True, timeout=120,
                          **kwargs)


@contextmanager
def started(wrapper: list[str], root: Path, script: str, **kwargs: Any
            ) -> Iterator[subprocess.Popen[str]]:
    """``sessiontemp run`` of a shell *script* that prints "ready" first.

    Started with every signal at its default (a shell cannot trap one it
    inherited ignored, as under ``nohup``), in a session of its own, every
    process of which is killed on the way out: the command too, whatever
    group it is in.
    """
    process = subprocess.Popen(
        [*DEFAULT_SIGNALS, *wrapper, "run", "--root", os.fspath(root), "--", SH, "-c", script],
        stdout=subprocess.PIPE, text=True, start_new_session=True, **kwargs,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        yield process
    finally:
        kill_session(process.pid)
        process.wait()


# -- what passes through ------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 7, 255])
def test_run_passes_the_exit_status_through_and_leaves_nothing_behind(
    wrapper: list[str], root: Path, code: int
) -> None:
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--",
                       SH, "-c", f'touch "$TMPDIR/made"; exit {code}')
    assert done.returncode == code, done.stderr
    assert done.stderr == ""
    assert leftovers(root) == []


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_a_command_killed_by_signal_n_gives_128_plus_n(
    wrapper: list[str], root: Path, signum: signal.Signals
) -> None:
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--",
                       SH, "-c", f"kill -{signum.name.removeprefix('SIG')} $$")
    assert done.returncode == 128 + signum
    assert leftovers(root) == []


def test_exit_status_maps_wait_statuses_as_a_shell_does() -> None:
    assert exit_status(3 << 8) == 3
    assert exit_status(signal.SIGINT) == 130


def test_the_command_sees_tmpdir_tmp_and_temp_on_one_private_directory_under_the_root(
    wrapper: list[str], root: Path
) -> None:
    done = sessiontemp(
        wrapper, "run", "--root", os.fspath(root), "--", SH, "-c",
        'echo "$TMPDIR|$TMP|$TEMP"; stat -c %a "$TMPDIR"; mktemp',
    )
    assert done.returncode == 0, done.stderr
    variables, mode, made = done.stdout.splitlines()
    tmpdir, tmp, temp = variables.split("|")
    assert tmpdir == tmp == temp
    # The generation's work directory, one level below the generation.
    assert Path(tmpdir).parent.parent == root
    assert Path(tmpdir).parent.name.startswith(GENERATION_PREFIX)
    assert mode == "700"
    assert Path(made).parent == Path(tmpdir)
    assert not Path(tmpdir).exists()


def test_the_lease_is_labelled_with_the_command_line_and_the_command_journaled(
    wrapper: list[str], root: Path
) -> None:
    # It runs until its standard input closes, so it is alive when tracked.
    script = "echo $$; read line"
    with started(wrapper, root, f"echo ready; {script}", stdin=subprocess.PIPE) as process:
        assert process.stdout is not None
        pid = int(process.stdout.readline())
        wait_until(lambda: bool(journaled(root, CommandStarted)), "the command to be journaled")
        process.communicate("\n", timeout=60)
    assert process.returncode == 0
    (acquired,) = journaled(root, LeaseAcquired)
    assert acquired.label == f"{SH} -c 'echo ready; {script}'"
    (command,) = journaled(root, CommandStarted)
    assert (command.lease, command.pid) == (acquired.lease, pid)


def test_a_command_line_too_long_for_the_journal_is_cut_in_the_label(
    wrapper: list[str], root: Path
) -> None:
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--", "true", "x" * 5000)
    assert done.returncode == 0, done.stderr
    (acquired,) = journaled(root, LeaseAcquired)
    assert acquired.label.startswith("true xxx")
    assert acquired.label.endswith("...")
    assert len(acquired.label) <= 1000


def test_run_takes_the_command_without_the_double_dash_too(
    wrapper: list[str], root: Path
) -> None:
    """Everything after the first word that is not an option is the command's, options too."""
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), SH, "-c", "echo $0", "--root")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "--root\n"


# -- signals --------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", sorted(FORWARDED), ids=lambda s: signal.Signals(s).name)
def test_each_forwarded_signal_reaches_a_command_that_handles_it(
    wrapper: list[str], root: Path, signum: signal.Signals
) -> None:
    name = signal.Signals(signum).name.removeprefix("SIG")
    script = f"trap 'echo got {name}; exit 42' {name}; echo ready; while :; do sleep 0.02; done"
    with started(wrapper, root, script) as process:
        process.send_signal(signum)
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 42
    assert out == f"got {name}\n"
    assert leftovers(root) == []


def test_a_signal_the_command_sends_the_wrapper_is_not_sent_back_to_it(
    wrapper: list[str], root: Path
) -> None:
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--", SH, "-c",
                       "trap 'echo echoed' USR1; kill -USR1 $PPID; sleep 0.3; echo done")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"


def test_sigterm_to_the_wrapper_ends_a_command_that_does_not_handle_it_with_143(
    each_wrapper: list[str], root: Path
) -> None:
    with started(each_wrapper, root, "echo ready; exec sleep 60") as process:
        process.terminate()
        process.wait(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert leftovers(root) == []


# Counts each delivery of SIGINT: the wakeup descriptor gets one byte per
# delivery, where Python-level handlers (and a shell's traps) coalesce them.
# It spins rather than sleeps, so that a signal is delivered (the kernel
# interrupts a running process at once) before a forwarded copy could arrive
# and merge with it while still pending.
COUNT_SIGINT = """
import os, signal, time
r, w = os.pipe()
os.set_blocking(r, False)
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGINT, lambda *_: None)
print("ready", flush=True)
seen = b""
end = None
while end is None or time.monotonic() < end:
    try:
        seen += os.read(r, 64)
    except BlockingIOError:
        pass
    if seen and end is None:
        end = time.monotonic() + 0.5
print("got", len(seen), flush=True)
"""


# The session the tests of ``run --session`` run their command in.
SESSION = "signals"


@contextmanager
def running(how: str, root: Path) -> Iterator[list[str]]:
    """The words after ``sessiontemp`` that run a command on *root*, *how* it is run.

    ``run``: a plain run; ``run --session``: in a live session of a holder
    serving *root*, which is killed at the end.
    """
    if how == "run":
        yield ["run", "--root", os.fspath(root)]
        return
    with served(root) as place:
        place.start(SESSION)
        yield ["run", "--session", SESSION, "--root", os.fspath(root)]


def counted_on_a_terminal(root: Path, send: Any, run: list[str] | None = None
                          ) -> tuple[bytes, int]:
    """The counting command run in a terminal's foreground: its output and exit status.

    *send* (the terminal, the wrapper's pid) is called once the command is
    ready; *run*: the words that run it (a plain run on *root* if None).
    The wrapper leads the terminal's session and its foreground group, the
    command in it.
    """
    words = ["run", "--root", os.fspath(root)] if run is None else run
    pid, terminal = pty.fork()
    if pid == 0:  # pragma: no cover - the child becomes the wrapper
        # S606: a fixed argument list, run in the child that owns the terminal.
        os.execv(  # noqa: S606
            sys.executable, [sys.executable, "-m", "sessiontemp", *words, "--",
                             sys.executable, "-c", COUNT_SIGINT])
    output = b""

    def read_until(pattern: bytes) -> None:
        nonlocal output
        while not re.search(pattern, output):
            ready, _, _ = select.select([terminal], [], [], 60)
            assert ready, f"no {pattern!r} from the terminal; got {output!r}"
            output += os.read(terminal, 1024)

    try:
        read_until(b"ready")
        send(terminal, pid)
        read_until(rb"got \d+\r?\n")
    except BaseException:
        kill_session(pid)
        raise
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    return output, status


def test_a_terminal_ctrl_c_reaches_the_command_once_not_twice(root: Path) -> None:
    """The kernel signals the whole foreground group; forwarding it too would deliver it twice.

    A wrapper that forwards it anyway fails this test most of the time, not
    always: two deliveries merge when the second comes while the first is
    still pending.
    """
    output, status = counted_on_a_terminal(
        root, lambda terminal, _: os.write(terminal, b"\x03"))  # Ctrl-C, as typed
    assert b"got 1" in output, output
    assert exit_status(status) == 0
    assert leftovers(root) == []


@pytest.mark.parametrize("how", ["run", "run --session"])
def test_another_processs_signal_to_a_terminals_foreground_group_reaches_the_command_once(
    root: Path, how: str
) -> None:
    """``kill -INT -- -PGID`` from elsewhere (another terminal) to the foreground job.

    siginfo tells it from a signal to the wrapper alone neither by its code
    nor by its sender.  The session client forwards as the plain run does.
    Three runs: a wrapper that forwards it anyway delivers it twice most of
    the time, not always (two deliveries merge when the second comes while
    the first is still pending).
    """
    with running(how, root) as run:
        for attempt in range(3):
            output, status = counted_on_a_terminal(root, lambda _, pid: subprocess.run(
                ["kill", "-INT", "--", f"-{pid}"], check=True), run)
            assert b"got 1" in output, f"run {attempt}: {output!r}"
            assert exit_status(status) == 0
    if how == "run":  # a session keeps its directory
        assert leftovers(root) == []


def test_a_signal_the_terminals_shell_sends_its_job_reaches_the_command_once(root: Path) -> None:
    """A shell signals a job's whole group (on a hangup, bash sends SIGHUP so).

    The shell leads the terminal's session, the wrapper and its command are
    its foreground group; on SIGUSR1 the shell sends SIGINT to that group.
    """
    run = shlex.join([*LAUNCHERS["script"], "run", "--root", os.fspath(root), "--",
                      sys.executable, "-c", COUNT_SIGINT])
    # The shell ignores SIGINT itself; the counting command sets its own handler.
    script = f"trap '' INT; trap 'kill -INT 0' USR1; {run} & child=$!; wait $child; wait $child"
    pid, terminal = pty.fork()
    if pid == 0:  # pragma: no cover - the child becomes the shell
        os.execv(SH, [SH, "-c", script])  # noqa: S606 - a fixed argument list
    output = b""

    def read_until(pattern: bytes) -> None:
        nonlocal output
        while not re.search(pattern, output):
            ready, _, _ = select.select([terminal], [], [], 60)
            assert ready, f"no {pattern!r} from the terminal; got {output!r}"
            output += os.read(terminal, 1024)

    try:
        read_until(b"ready")
        os.kill(pid, signal.SIGUSR1)
        read_until(rb"got \d+\r?\n")
        # The shell waits for the wrapper, which removes the directory first.
        with contextlib.suppress(OSError):  # EIO: the terminal's last writer has gone
            while os.read(terminal, 1024):
                pass
        _, status = os.waitpid(pid, 0)
    except BaseException:
        kill_session(pid)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(terminal)
    assert exit_status(status) == 0
    assert b"got 1" in output, output
    assert leftovers(root) == []


# Leads a process group and survives a signal to it, as a CI runner or a
# supervisor does: runs its arguments and exits with their status.
SUPERVISOR = """
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda *_: None)
pid = os.spawnv(os.P_NOWAIT, sys.argv[1], sys.argv[1:])
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def counted(process: subprocess.Popen[str], send: Any) -> str:
    """The SIGINTs the counting command saw after *send* () ran; the session killed after."""
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        send()
        out = process.stdout.read()
        # It ends on its own: an end of file can come before the last exit.
        process.wait(timeout=60)
        return out
    finally:
        kill_session(process.pid)
        process.wait()


@pytest.mark.parametrize("leader", ["the wrapper", "a supervisor"])
def test_a_signal_another_process_sends_the_wrappers_whole_group_reaches_the_command_once(
    root: Path, leader: str
) -> None:
    """``kill -- -PGID``: the wrapper leads the group, or a process that started it does."""
    run = [*LAUNCHERS["script"], "run", "--root", os.fspath(root), "--",
           sys.executable, "-c", COUNT_SIGINT]
    before = [sys.executable, "-c", SUPERVISOR] if leader == "a supervisor" else []
    process = subprocess.Popen([*DEFAULT_SIGNALS, *before, *run], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    out = counted(process, lambda: subprocess.run(
        ["kill", "-INT", "--", f"-{process.pid}"], check=True))
    assert out == "got 1\n"
    assert leftovers(root) == []


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs GNU timeout")
def test_a_timeout_that_signals_the_wrapper_and_its_group_reaches_the_command_once(
    root: Path
) -> None:
    """GNU ``timeout -s INT`` sends the signal to its child, then to its whole group.

    Its timer is a SIGALRM: sent once the command is ready, it makes
    ``timeout`` expire then, as it would when its time is up.  Three runs:
    whether a second delivery merges with the first depends on when each
    process runs.
    """
    for run in range(3):
        at = root / str(run)
        process = subprocess.Popen(
            [*DEFAULT_SIGNALS, "timeout", "-s", "INT", "600", *LAUNCHERS["script"], "run",
             "--root", os.fspath(at), "--", sys.executable, "-c", COUNT_SIGINT],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        out = counted(process, lambda p=process: os.kill(p.pid, signal.SIGALRM))
        assert out == "got 1\n", f"run {run}"
        assert process.returncode == 124  # timed out
        assert leftovers(at) == []


def test_the_signal_tests_pass_under_nohup_and_leave_no_process_behind(tmp_path: Path) -> None:
    """``nohup`` starts the suite with SIGHUP ignored, which a command's shell cannot trap."""
    if shutil.which("nohup") is None:
        pytest.skip("needs nohup")
    test = ("tests/test_run.py::test_each_forwarded_signal_reaches_a_command_that_handles_it"
            "[script-SIGHUP]")
    log = tmp_path / "log"
    with log.open("w") as out:
        # A file, not a pipe: a process left behind would hold a pipe open.
        process = subprocess.Popen(
            ["nohup", sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", test],
            cwd=Path(__file__).parents[1], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        process.wait(timeout=300)
        left = in_session(process.pid)
    finally:
        kill_session(process.pid)
        process.wait()
    assert process.returncode == 0, log.read_text()
    assert left == []


def sigkilled_with_its_group(run: list[str]) -> tuple[int, str]:
    """``kill -KILL -- -PGID`` of a wrapper after a SIGTERM its command ignored, as a CI runner
    cancels a job; the command's pid and directory, once the command has been killed.
    """
    process = subprocess.Popen(
        [*DEFAULT_SIGNALS, *LAUNCHERS["script"], *run, "--", SH,
         "-c", 'trap "" TERM; echo "$$ $TMPDIR"; exec sleep 600'],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        pid_text, directory_text = process.stdout.readline().split()
        subprocess.run(["kill", "-TERM", "--", f"-{process.pid}"], check=True)
        subprocess.run(["kill", "-KILL", "--", f"-{process.pid}"], check=True)
        process.wait(timeout=60)
        wait_until(lambda: exited(int(pid_text)), "the command to be killed")
    finally:
        kill_session(process.pid)
        process.wait()
    assert process.returncode == -signal.SIGKILL
    return int(pid_text), directory_text


def test_a_sigkill_to_the_wrappers_group_kills_the_command_and_recover_removes_its_directory(
    root: Path
) -> None:
    """SIGKILL cannot be passed on: it reaches the command only from the kernel,
    as a member of the group.
    """
    _, directory_text = sigkilled_with_its_group(["run", "--root", os.fspath(root)])
    done = sessiontemp(LAUNCHERS["script"], "recover", "--root", os.fspath(root))
    assert done.returncode == 0, done.stderr
    assert f"removed {Path(directory_text).parent}: " in done.stdout
    assert leftovers(root) == []


def test_a_sigkill_to_a_session_clients_group_kills_its_command_and_the_session_goes_on(
    root: Path
) -> None:
    """The session client keeps its command in its group as the plain run does.

    The client's end releases the lease: the session's next command runs
    in the same directory.
    """
    with running("run --session", root) as run:
        _, directory_text = sigkilled_with_its_group(run)
        after = sessiontemp(LAUNCHERS["script"], *run, "--", SH, "-c", 'echo "$TMPDIR"')
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == directory_text


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs GNU timeout")
def test_a_timeouts_kill_after_kills_a_command_that_ignores_the_first_signal(root: Path) -> None:
    """``timeout -k 1 -s TERM``: the SIGKILL one second after goes to the wrapper and its group.

    Its timer is a SIGALRM sent once the command is ready, as in the test
    above; the second second is timeout's own.
    """
    process = subprocess.Popen(
        [*DEFAULT_SIGNALS, "timeout", "-k", "1", "-s", "TERM", "600", *LAUNCHERS["script"],
         "run", "--root", os.fspath(root), "--", SH, "-c",
         'trap "" TERM; echo "$$"; exec sleep 600'],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        command = int(process.stdout.readline())
        os.kill(process.pid, signal.SIGALRM)
        process.wait(timeout=60)
        wait_until(lambda: exited(command), "the command to be killed")
    finally:
        kill_session(process.pid)
        process.wait()
    # Its SIGKILL to its group ends timeout too (or, as some builds, it exits 137).
    assert process.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)


# -- a killed wrapper ---------------------------------------------------------------------


def test_a_sigkilled_wrapper_leaves_the_directory_to_its_command_then_to_recover(
    wrapper: list[str], root: Path, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    script = f'echo "$$ $TMPDIR"; {WRITER}'
    process = subprocess.Popen(
        [*wrapper, "run", "--root", os.fspath(root), "--", SH, "-c", script],
        stdout=subprocess.PIPE, text=True, env=writer_env(stop),
    )
    try:
        assert process.stdout is not None
        pid_text, directory_text = process.stdout.readline().split()
        command, directory = int(pid_text), Path(directory_text)
        process.kill()
        process.wait()
        assert_still_writing(directory)

        first = sessiontemp(wrapper, "recover", "--root", os.fspath(root), "--json")
        assert first.returncode == 0, first.stderr
        report = json.loads(first.stdout)
        assert len(report["dead"]) == 1
        assert report["removed"] == []
        assert [s["path"] for s in report["skipped"]] == [os.fspath(directory.parent)]
        assert_still_writing(directory)
    finally:
        stop.touch()
    wait_until(lambda: exited(command), f"the command {command} to exit")
    assert (directory / "final").is_file()

    second = sessiontemp(wrapper, "recover", "--root", os.fspath(root))
    assert second.returncode == 0, second.stderr
    assert f"removed {directory.parent}: " in second.stdout
    assert not directory.exists()
    assert leftovers(root) == []


def test_a_sigkilled_wrapper_leaves_no_process_but_its_command(root: Path) -> None:
    """Whatever the wrapper started for itself ends with it; the command keeps its directory."""
    process = subprocess.Popen(
        [*DEFAULT_SIGNALS, *LAUNCHERS["script"], "run", "--root", os.fspath(root), "--", SH,
         "-c", 'echo "$$ $TMPDIR"; exec sleep 600'],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        pid_text, directory_text = process.stdout.readline().split()
        process.kill()
        process.wait()
        wait_until(lambda: in_session(process.pid) == [int(pid_text)],
                   "every process but the command to exit")
        assert Path(directory_text).is_dir()
    finally:
        kill_session(process.pid)
    wait_until(lambda: exited(int(pid_text)), "the command to exit")
    assert sessiontemp(LAUNCHERS["script"], "recover", "--root", os.fspath(root)).returncode == 0
    assert leftovers(root) == []


def test_a_command_that_leaves_a_process_holding_its_directory_is_reported(
    wrapper: list[str], root: Path, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    script = tmp_path / "writer.sh"
    script.write_text(WRITER)
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--", SH, "-c",
                       f"{SH} {script} >/dev/null 2>&1 & echo $! $TMPDIR", env=writer_env(stop))
    try:
        assert done.returncode == 0
        pid_text, directory_text = done.stdout.split()
        directory = Path(directory_text)
        assert f"{directory} is still held" in done.stderr
        assert "sessiontemp recover" in done.stderr
        assert_still_writing(directory)
    finally:
        stop.touch()
    wait_until(lambda: exited(int(pid_text)), "the background writer to exit")
    assert sessiontemp(wrapper, "recover", "--root", os.fspath(root)).returncode == 0
    assert leftovers(root) == []


# -- bad input ----------------------------------------------------------------------------


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_run_in_a_session_nobody_started_exits_2_naming_session_root_and_fix(
    wrapper: list[str], root: Path, tmp_path: Path
) -> None:
    """Never a fresh or shared directory instead: the command does not run."""
    marker = tmp_path / "ran"
    done = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--session", "chat-1", "--",
                       "touch", os.fspath(marker))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "no live session 'chat-1'" in line
    assert os.fspath(root) in line
    assert f"sessiontemp session start chat-1 --root {root}" in line
    assert not marker.exists()


def test_an_unsafe_root_is_one_line_naming_the_path_reason_and_fix(
    wrapper: list[str], root: Path, tmp_path: Path
) -> None:
    # A root (a journal in it), or recover would find nothing to recover there.
    assert sessiontemp(wrapper, "run", "--root", os.fspath(root), "--", "true").returncode == 0
    root.chmod(0o777)
    marker = tmp_path / "ran"
    for args in (["run", "--root", os.fspath(root), "--", "touch", os.fspath(marker)],
                 ["recover", "--root", os.fspath(root)]):
        done = sessiontemp(wrapper, *args)
        assert done.returncode == 2
        line = one_line(done.stderr)
        assert os.fspath(root) in line
        assert "writable by group or others" in line
        assert f"chmod 700 {root}" in line
    assert not marker.exists()


def test_a_root_that_is_a_users_file_or_link_is_answered_with_the_path_to_pass(
    wrapper: list[str], tmp_path: Path
) -> None:
    """A root that is someone's own file is theirs: never advice to remove it."""
    afile = tmp_path / "afile.txt"
    afile.write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    marker = tmp_path / "ran"
    for root, said in ((afile, "is not a directory. Pass the path of a directory as the root"),
                       (link, "is a symbolic link. Pass the directory itself")):
        for args in (["run", "--root", os.fspath(root), "--", "touch", os.fspath(marker)],
                     ["recover", "--root", os.fspath(root)]):
            done = sessiontemp(wrapper, *args)
            assert done.returncode == 2
            line = one_line(done.stderr)
            assert f"{root} {said}" in line
            assert "Remove it" not in line
    assert afile.read_text() == "mine\n"
    assert link.is_symlink()
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run"], "no command given"),
        (["run", "--root"], "expected one argument"),
        (["bogus"], "'bogus': is not a subcommand"),
        ([], "required"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_status_2(
    wrapper: list[str], args: list[str], expected: str
) -> None:
    done = sessiontemp(wrapper, *args)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert expected in line
    assert "sessiontemp" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["rnu", "--", "touch", "{marker}"],
         "sessiontemp: 'rnu': is not a subcommand. Did you mean 'run'? Subcommands: run, recover"),
        (["run", "--rot", "{root}", "--", "touch", "{marker}"],
         "sessiontemp run: '--rot': is not an option. Did you mean '--root'?"),
        (["run", "--sesion", "x", "--", "touch", "{marker}"], "Did you mean '--session'?"),
        (["recover", "--jsn"], "sessiontemp recover: '--jsn': is not an option. Did you mean "
                               "'--json'? See `sessiontemp recover --help`"),
        (["--rot", "{root}", "run", "--", "touch", "{marker}"],
         "sessiontemp: '--rot': is not an option. Did you mean '--root'?"),
        (["--json", "run", "--", "touch", "{marker}"],
         "sessiontemp run: '--json': is not an option; it is an option of recover. See "
         "`sessiontemp run --help`"),
    ],
)
def test_a_mistyped_subcommand_or_option_is_answered_with_the_nearest_and_nothing_runs(
    wrapper: list[str], root: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    marker = tmp_path / "ran"
    done = sessiontemp(wrapper, *(a.format(root=root, marker=marker) for a in args))
    assert done.returncode == 2
    assert expected in one_line(done.stderr)
    assert not marker.exists()
    assert not root.exists()


def test_an_option_given_before_the_subcommand_is_the_subcommands(
    wrapper: list[str], root: Path, tmp_path: Path
) -> None:
    """As journal-inspect takes ``--root DIR summary``."""
    marker = tmp_path / "ran"
    done = sessiontemp(wrapper, "--root", os.fspath(root), "run", "--", "touch",
                       os.fspath(marker))
    assert (done.returncode, done.stderr) == (0, "")
    assert marker.exists()
    assert leftovers(root) == []
    report = sessiontemp(wrapper, f"--root={root}", "--json", "recover")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["root"] == os.fspath(root)


def test_a_command_not_found_gives_127_and_not_executable_126(
    wrapper: list[str], root: Path, tmp_path: Path
) -> None:
    missing = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--", "no-such-command-x")
    assert missing.returncode == 127
    assert "no-such-command-x: command not found" in one_line(missing.stderr)
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    refused = sessiontemp(wrapper, "run", "--root", os.fspath(root), "--", os.fspath(plain))
    assert refused.returncode == 126
    assert f"{plain}: cannot be executed" in one_line(refused.stderr)
    assert leftovers(root) == []


# -- the rest of the command line ---------------------------------------------------------


def test_version_and_help_with_examples(each_wrapper: list[str]) -> None:
    wrapper = each_wrapper
    version = sessiontemp(wrapper, "--version")
    assert version.returncode == 0
    assert version.stdout.split() == ["sessiontemp", "0.1.0"] or version.stdout.startswith(
        "sessiontemp ")
    for args in ([], ["run"], ["recover"]):
        shown = sessiontemp(wrapper, *args, "--help")
        assert shown.returncode == 0
        assert "examples:" in shown.stdout
        assert "sessiontemp run -- make test" in shown.stdout


def test_recover_reports_what_it_removed_and_why(
    wrapper: list[str], root: Path
) -> None:
    """A manager SIGKILLed holding a directory: recover declares it dead and removes it."""
    child = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, sys\n"
         "from sessiontemp import Manager\n"
         "m = Manager(sys.argv[1]); m.retain(); lease = m.acquire(); print(lease.path, m.id)\n"
         "sys.stdout.flush(); os.kill(os.getpid(), signal.SIGKILL)\n",
         os.fspath(root)],
        capture_output=True, text=True, timeout=120,
    )
    path, manager = child.stdout.split()
    assert Path(path).is_dir()
    done = sessiontemp(wrapper, "recover", "--root", os.fspath(root))
    assert done.returncode == 0, done.stderr
    assert f"declared manager {manager} dead" in done.stdout
    assert f"removed {Path(path).parent}: " in done.stdout
    assert done.stdout.endswith(f"{root}: 1 removed, 0 left\n")
    assert not Path(path).exists()
    again = json.loads(sessiontemp(wrapper, "recover", "--root", os.fspath(root),
                                   "--json").stdout)
    assert again == {"schema": SCHEMA, "root": os.fspath(root), "ran": True, "removed": [],
                     "skipped": [], "dead": [], "no_journal": None}


def test_recover_shows_progress_through_the_directories_on_a_terminal_only(
    root: Path, tmp_path: Path
) -> None:
    from tests.test_cli import Child

    child = Child(root)
    child.ask("retain")
    for _ in range(3):
        child.ask("acquire")
        child.ask("rotate")
    child.kill()
    assert len(leftovers(root)) == 3
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([os.fspath(SCRIPT), "recover", "--root", os.fspath(root)],
                              stdout=subprocess.PIPE, stderr=follower, timeout=120)
        os.close(follower)
        follower = -1
        shown = b""
        while select.select([leader], [], [], 0.5)[0]:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    assert b"recovering: 100% (3 / 3 directories)" in shown
    assert leftovers(root) == []
    # Piped, nothing but the report.
    again = Child(root)
    again.ask("retain")
    again.ask("acquire")
    again.kill()
    piped = sessiontemp(launcher("script"), "recover", "--root", os.fspath(root))
    assert (piped.returncode, piped.stderr) == (0, "")
    assert "1 removed, 0 left" in piped.stdout
