"""``%load_ext sessiontemp``: an IPython kernel becomes an owner of the notebook's session.

The kernel is a Python process: it holds the session's :class:`Manager`
itself (a named session, so that a restarted kernel resumes the directory,
files and all) and one lease on the current directory for as long as it
runs, re-acquired after a rotate.  Its own ``TMPDIR``, ``TMP`` and ``TEMP``
and ``tempfile.tempdir`` point there, so ``tempfile`` in a cell and a plain
``subprocess.run`` use it; ``!command``, ``x = !command`` and the script
cell magics (``%%bash``, ``%%script`` ...) each run under a lease of their
own.  A kernel that exits (a restart, a crash, SIGKILL) without ``%sessiontemp
end`` leaves the directory for the session's next kernel, for the resume
window; after that the next recovery removes it.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from typing import Any, Final

from sessiontemp.lease import Lease
from sessiontemp.manager import Manager

__all__ = ["KernelSession", "load", "session_name", "unload"]

_TEMP: Final = ("TMPDIR", "TMP", "TEMP")
_ROOT: Final = "SESSIONTEMP_ROOT"
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")
# What the extension replaces on the shell, as instance attributes over its methods.
_HOOKED: Final = ("system", "system_piped", "getoutput", "run_cell_magic")


def session_name(environ: os._Environ[str] | dict[str, str], connection_file: str | None) -> str:
    """The kernel's session name: ``SESSIONTEMP_SESSION`` if set, else the notebook's, else the
    kernel's.

    Jupyter's server gives a kernel its notebook's path in ``JPY_SESSION_NAME``:
    ``nb-<name>-<hash of the path>`` (two notebooks of one name in two
    folders are two sessions).  Without it, the kernel's connection file
    (``kernel-<id>.json``), which a restart keeps; else the process.
    """
    explicit = environ.get("SESSIONTEMP_SESSION")
    if explicit:
        return explicit
    notebook = environ.get("JPY_SESSION_NAME")
    if notebook:
        stem = os.path.splitext(os.path.basename(notebook))[0]
        slug = _UNSAFE.sub("_", stem).strip("._-")[:40] or "notebook"
        digest = hashlib.sha256(notebook.encode("utf-8", "surrogateescape")).hexdigest()[:10]
        return f"nb-{slug}-{digest}"
    if connection_file:
        stem = os.path.splitext(os.path.basename(connection_file))[0]
        slug = _UNSAFE.sub("_", stem).strip("._-")[:64]
        if slug:
            return slug
    return f"ipython-{os.getpid()}"


def _connection_file() -> str | None:
    try:
        from ipykernel.connect import get_connection_file

        return str(get_connection_file())
    except Exception:
        # Not a kernel (a terminal IPython), or one started without a connection file.
        return None


class KernelSession:
    """The kernel's ownership of its session, its lease, and what it changed in the kernel."""

    def __init__(self, shell: Any, name: str, root: str | None) -> None:
        self.shell = shell
        self.manager = Manager(root, session=name)
        try:
            self.manager.retain()
            self.lease = self._acquire()
        except BaseException:
            self.manager.close()
            raise
        self._saved = {var: os.environ.get(var) for var in (*_TEMP, _ROOT)}
        self._saved_tempdir = tempfile.tempdir
        # Commands the kernel starts (a `sessiontemp` among them) find the same root.
        os.environ[_ROOT] = os.fspath(self.manager.root)
        self._point()
        self._originals = {attr: shell.__dict__.get(attr) for attr in _HOOKED}
        shell.system = shell.system_piped = self.system
        shell.getoutput = self.getoutput
        self._run_cell_magic = shell.run_cell_magic
        shell.run_cell_magic = self.run_cell_magic

    def _acquire(self, label: str = "") -> Lease:
        return self.manager.acquire(label=label or f"kernel {os.getpid()}")

    def _point(self) -> None:
        os.environ.update(self.lease.env())
        tempfile.tempdir = os.fspath(self.lease.path)

    # -- the magics ----------------------------------------------------------------

    def rotate(self) -> None:
        """A fresh directory for the cells that follow; the old one goes once nothing holds it."""
        self.manager.rotate()
        fresh = self._acquire()
        old, self.lease = self.lease, fresh
        self._point()
        old.release()

    def status(self) -> str:
        """``%sessiontemp status``: the session, its root, its directory, whether it resumed."""
        return (f"session {self.manager.session} (root {self.manager.root}): directory "
                f"{self.lease.path}, {'resumed' if self.manager.resumed else 'new'} when the "
                f"kernel started; manager {self.manager.id}, pid {os.getpid()}")

    def end(self) -> None:
        """Give the kernel's ownership back (the last owner ends the directory); undo the rest."""
        for attr, original in self._originals.items():
            if original is None:
                self.shell.__dict__.pop(attr, None)
            else:
                setattr(self.shell, attr, original)
        for var, value in self._saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        tempfile.tempdir = self._saved_tempdir
        self.lease.release()
        try:
            self.manager.release()
        finally:
            self.manager.close()

    # -- commands ------------------------------------------------------------------

    def _run(self, command: str, label: str, capture: bool) -> tuple[int, str]:
        """Run *command* with the shell under a lease of its own; its status and, if
        *capture*, its output (stdout and stderr, as IPython's pty gives them)."""
        if command.rstrip().endswith("&"):
            # As IPython's: the output is read until the command's end.
            raise OSError("Background processes not supported.")
        program = os.environ.get("SHELL") or "/bin/sh"
        taken: list[str] = []
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with self.manager.acquire(label=label[:4096]) as lease:
            child: subprocess.Popen[bytes] | None = None
            try:
                # Started here rather than by lease.popen, so that a Ctrl-C while its pid
                # is journaled finds the child in hand, to pass the interrupt on to.
                child = subprocess.Popen(
                    [program, "-c", command], env={**os.environ, **lease.env()},
                    pass_fds=lease.pass_fds, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                lease.track(child.pid)
                assert child.stdout is not None
                while chunk := os.read(child.stdout.fileno(), 65536):
                    text = decoder.decode(chunk)
                    if capture:
                        taken.append(text)
                    else:
                        sys.stdout.write(text)
                        sys.stdout.flush()
                status = child.wait()
            except KeyboardInterrupt:
                if child is None:
                    raise
                # As a terminal's Ctrl-C: the command gets SIGINT, the cell goes on.
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGINT)
                status = child.wait()
                print("^C", file=sys.stderr)
            finally:
                if child is not None and child.stdout is not None:
                    child.stdout.close()
        taken.append(decoder.decode(b"", final=True))
        return status, "".join(taken)

    def _finish(self, status: int, command: str) -> None:
        # Negative for a signal, as IPython's own `_exit_code`.
        self.shell.user_ns["_exit_code"] = status
        if getattr(self.shell, "system_raise_on_error", False) and status != 0:
            raise subprocess.CalledProcessError(status, command)

    def system(self, cmd: str) -> None:
        """``!command``: its output shown as it comes, its status in ``_exit_code``."""
        expanded = self.shell.var_expand(cmd, depth=1)
        status, _ = self._run(expanded, f"!{expanded}", capture=False)
        self._finish(status, cmd)

    def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
        """``x = !command``: its output, an ``SList`` of lines (or an ``LSString``)."""
        from IPython.utils.text import LSString, SList

        expanded = self.shell.var_expand(cmd, depth=depth + 1)
        status, out = self._run(expanded, f"!!{expanded}", capture=True)
        self._finish(status, cmd)
        return SList(out.splitlines()) if split else LSString(out)

    def run_cell_magic(self, magic_name: str, line: str, cell: str) -> Any:
        """A script cell (``%%bash``, ``%%script``, ...) runs while a lease of it is held."""
        if not _starts_a_script(self.shell, magic_name):
            return self._run_cell_magic(magic_name, line, cell)
        with self.manager.acquire(label=f"%%{magic_name} {line}"[:4096]):
            return self._run_cell_magic(magic_name, line, cell)


def _starts_a_script(shell: Any, magic_name: str) -> bool:
    """Whether cell magic *magic_name* is one of IPython's script magics (``%%bash`` ...)."""
    from IPython.core.magics.script import ScriptMagics

    found = shell.find_cell_magic(magic_name)
    # %%script is a method of ScriptMagics; %%bash, %%sh, %%perl ... are functions it makes.
    return isinstance(getattr(found, "__self__", None), ScriptMagics) or \
        getattr(found, "__qualname__", "").startswith("ScriptMagics.")


_KEY: Final = "_sessiontemp_session"


def load(shell: Any) -> None:
    """``%load_ext sessiontemp``: open the kernel's session and register ``%sessiontemp``."""
    if getattr(shell, _KEY, None) is None:
        name = session_name(os.environ, _connection_file())
        root = os.environ.get(_ROOT) or None
        setattr(shell, _KEY, KernelSession(shell, name, root))
        session: KernelSession = getattr(shell, _KEY)
        if session.manager.resumed:
            print(f"sessiontemp: resumed {session.lease.path} (session {name})")
    shell.register_magic_function(_magic, magic_kind="line", magic_name="sessiontemp")


def unload(shell: Any) -> None:
    """``%unload_ext sessiontemp``: the same as ``%sessiontemp end``."""
    session: KernelSession | None = getattr(shell, _KEY, None)
    if session is not None:
        setattr(shell, _KEY, None)
        session.end()


def _magic(line: str) -> None:
    """``%sessiontemp status|rotate|end``: the kernel's session."""
    from IPython import get_ipython

    shell = get_ipython()
    session: KernelSession | None = getattr(shell, _KEY, None)
    word = line.strip()
    if session is None:
        print("sessiontemp: no session; `%load_ext sessiontemp` (or `%reload_ext`) opens one",
              file=sys.stderr)
    elif word in ("", "status"):
        print(session.status())
    elif word == "rotate":
        session.rotate()
        print(f"sessiontemp: rotated; the directory is now {session.lease.path}")
    elif word == "end":
        setattr(shell, _KEY, None)
        session.end()
        print(f"sessiontemp: ended session {session.manager.session}; TMPDIR is the kernel's "
              "own again")
    else:
        print(f"sessiontemp: unknown {word!r}: use %sessiontemp status, rotate or end",
              file=sys.stderr)
