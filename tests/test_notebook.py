"""``%load_ext sessiontemp`` in a real IPython kernel, driven by ``jupyter_client``.

Cells with ``!``, ``x = !``, ``%%bash``, ``subprocess`` and ``tempfile`` see
the session's directory (each command under a lease of its own, journaled
with its command line); ``%sessiontemp rotate`` and ``end`` do what they say;
a restarted kernel resumes the directory with its files; a SIGKILLed kernel
leaks nothing once the next recovery runs.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import GENERATION_PREFIX, Manager, recover
from sessiontemp._kernel.root import WORK_DIR
from sessiontemp.integrations.notebook import session_name
from sessiontemp.journal.events import CommandStarted, LeaseAcquired
from tests.commands import journaled, wait_until

pytest.importorskip("ipykernel")
manager_module = pytest.importorskip("jupyter_client.manager")


class Kernel:
    """A kernel of this interpreter, with its own TMPDIR and the session's root in its env."""

    def __init__(self, env: dict[str, str]) -> None:
        self.manager = manager_module.KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env)
        self._connect()

    def _connect(self) -> None:
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str) -> str:
        """Run *code* as one cell; its output (streams and results), errors raised here."""
        out: list[str] = []
        errors: list[str] = []

        def hook(message: dict[str, Any]) -> None:
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                out.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))

        self.client.execute_interactive(code, output_hook=hook, timeout=120)
        assert not errors, errors
        return "".join(out)

    def interrupted(self, code: str, when: Callable[[], bool]) -> str:
        """Run *code*, interrupt the kernel (as the notebook's stop button) once *when* holds;
        the cell's output."""
        out: list[str] = []
        sent = self.client.execute(code)
        wait_until(when, "the cell to reach the point of its interrupt")
        self.manager.interrupt_kernel()
        while True:
            message = self.client.get_iopub_msg(timeout=120)
            if message["parent_header"].get("msg_id") != sent:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                out.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def restart(self) -> None:
        self.client.stop_channels()
        # An orderly shutdown, then a new kernel on the same connection file.
        self.manager.restart_kernel(now=False)
        self._connect()

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel_env(tmp_path: Path) -> dict[str, str]:
    own_tmp = tmp_path / "kernel-tmp"
    own_tmp.mkdir()
    env = {**os.environ, "SESSIONTEMP_ROOT": os.fspath(tmp_path / "root"),
           "TMPDIR": os.fspath(own_tmp), "JPY_SESSION_NAME": os.fspath(
               tmp_path / "work" / "Q3 analysis.ipynb")}
    env.pop("SESSIONTEMP_SESSION", None)
    return env


@pytest.fixture
def kernel(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    started = Kernel(kernel_env)
    try:
        yield started
    finally:
        started.close()


def generations(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(GENERATION_PREFIX))


def test_the_session_is_named_after_the_notebook_else_the_kernel() -> None:
    assert session_name({"SESSIONTEMP_SESSION": "mine"}, "/r/kernel-1.json") == "mine"
    one = session_name({"JPY_SESSION_NAME": "/home/u/a/Q3 analysis.ipynb"}, None)
    other = session_name({"JPY_SESSION_NAME": "/home/u/b/Q3 analysis.ipynb"}, None)
    assert one.startswith("nb-Q3_analysis-")
    assert one != other, "two notebooks of one name in two folders are two sessions"
    assert session_name({}, "/run/user/1/jupyter/kernel-4f2a-9c.json") == "kernel-4f2a-9c"
    assert session_name({}, None) == f"ipython-{os.getpid()}"


def test_every_kind_of_command_in_a_cell_uses_the_sessions_directory(
    kernel: Kernel, kernel_env: dict[str, str],
) -> None:
    root = Path(kernel_env["SESSIONTEMP_ROOT"])
    kernel.run("%load_ext sessiontemp")
    [generation] = generations(root)
    here = os.fspath(root / generation / WORK_DIR)
    assert kernel.run("!echo $TMPDIR; echo to-stderr >&2") == f"{here}\nto-stderr\n"
    assert kernel.run("x = !echo $TMPDIR\nprint(x[0], _exit_code)") == f"{here} 0\n"
    assert kernel.run("!exit 3\nprint(_exit_code)") == "3\n"
    assert kernel.run("%%bash\necho $TMPDIR $TMP $TEMP") == f"{here} {here} {here}\n"
    assert kernel.run("import subprocess\nprint(subprocess.run('echo $TMPDIR', shell=True, "
                      "capture_output=True, text=True).stdout, end='')") == f"{here}\n"
    made = kernel.run("import tempfile\nprint(tempfile.mkdtemp())").strip()
    assert Path(made).parent == Path(here)
    labels = [e.label for e in journaled(root, LeaseAcquired)]
    assert "!echo $TMPDIR; echo to-stderr >&2" in labels
    assert "!!echo $TMPDIR" in labels
    assert "%%bash " in labels
    assert os.listdir(kernel_env["TMPDIR"]) == [], "nothing goes to the kernel's own TMPDIR"


def test_rotate_gives_later_cells_a_fresh_directory_and_end_gives_the_kernel_its_own_back(
    kernel: Kernel, kernel_env: dict[str, str],
) -> None:
    root = Path(kernel_env["SESSIONTEMP_ROOT"])
    kernel.run("%load_ext sessiontemp")
    first = kernel.run("!echo $TMPDIR").strip()
    assert "rotated" in kernel.run("%sessiontemp rotate")
    second = kernel.run("!echo $TMPDIR").strip()
    assert second != first
    assert not os.path.exists(first), "the old directory goes once nothing holds it"
    assert kernel.run("import tempfile\nprint(tempfile.gettempdir())").strip() == second
    assert f"directory {second}" in kernel.run("%sessiontemp status")
    assert "ended" in kernel.run("%sessiontemp end")
    assert kernel.run("!echo $TMPDIR").strip() == kernel_env["TMPDIR"]
    assert kernel.run("import tempfile\nprint(tempfile.gettempdir())").strip() == \
        kernel_env["TMPDIR"]
    assert generations(root) == []


def test_an_interrupted_command_gets_sigint_and_the_cell_goes_on_with_its_lease_given_back(
    kernel: Kernel, kernel_env: dict[str, str],
) -> None:
    root = Path(kernel_env["SESSIONTEMP_ROOT"])
    kernel.run("%load_ext sessiontemp")
    here = Path(kernel.run("!echo $TMPDIR").strip())
    tracked = len(journaled(root, CommandStarted))
    # Interrupted once the command runs and its pid is journaled (tracked, as lease.popen
    # tracks a command: a wait that never ends here fails the test): in its output's wait.
    said = kernel.interrupted("!touch $TMPDIR/started; sleep 120\nprint('after', _exit_code)",
                              lambda: (here / "started").exists()
                              and len(journaled(root, CommandStarted)) > tracked)
    assert "KeyboardInterrupt" not in said
    assert "after" in said
    # The command's lease was given back: a rotate removes the directory at once.
    kernel.run("%sessiontemp rotate")
    assert not here.exists()
    assert len(generations(root)) == 1


def test_a_restarted_kernel_resumes_the_directory_and_a_killed_one_leaks_nothing(
    kernel: Kernel, kernel_env: dict[str, str],
) -> None:
    root = Path(kernel_env["SESSIONTEMP_ROOT"])
    kernel.run("%load_ext sessiontemp")
    here = kernel.run("!echo draft > $TMPDIR/notes.md; echo $TMPDIR").strip()

    kernel.restart()
    assert "resumed" in kernel.run("%load_ext sessiontemp")
    assert kernel.run("!cat $TMPDIR/notes.md; echo $TMPDIR") == f"draft\n{here}\n"

    pid = int(kernel.run("import os\nprint(os.getpid())"))
    os.kill(pid, signal.SIGKILL)
    kernel.close()
    name = session_name(kernel_env, None)
    # The next kernel of the notebook would adopt it; once the resume window has passed,
    # any recovery removes it.
    with Manager(root, session=name) as again:
        assert again.resumed
        assert again.current_dir == Path(here)
        assert (Path(here) / "notes.md").read_text() == "draft\n"
    report = recover(root, clock=lambda: time.time() + 2 * 86400)
    assert report.ran
    assert generations(root) == []
    assert os.listdir(kernel_env["TMPDIR"]) == []
