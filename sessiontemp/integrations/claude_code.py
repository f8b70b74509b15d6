"""Claude Code: every Bash tool call, hook and stdio MCP server of a chat runs in its session.

Two pieces, both written into a settings file by :func:`integrate`:

- ``env.CLAUDE_CODE_SHELL_PREFIX``: the absolute path of ``sessiontemp-shell``,
  the console script that is ``sessiontemp shell``.  Claude Code runs every
  command as ``quote([prefix]) + " " + quote([command])`` through a shell,
  splitting the prefix at its last ``" -"`` into an executable and flags, so
  the prefix must be one executable path: ``sessiontemp shell`` (two words)
  would be quoted as one name and not found, and a path holding ``" -"``
  would be cut in two (refused here, with the fix).
- Hooks running ``sessiontemp session hook`` (:func:`hook`), which reads the
  JSON Claude Code writes on stdin: ``SessionStart`` (matchers ``startup``,
  ``resume``, ``clear``) and ``SessionEnd``.

The session's name is the chat's ``session_id``, the value Claude Code also
puts in ``CLAUDE_CODE_SESSION_ID``, by which ``sessiontemp shell`` finds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from sessiontemp.journal.errors import BadInput

__all__ = [
    "PREFIX_KEY",
    "START_MATCHER",
    "Change",
    "Outcome",
    "Programs",
    "default_settings",
    "hook",
    "hook_words",
    "integrate",
    "owner_pid",
    "plan",
]

PREFIX_KEY: Final = "CLAUDE_CODE_SHELL_PREFIX"
# compact keeps the chat (and its id) going: nothing to do for it.
START_MATCHER: Final = "startup|resume|clear"
SCRIPT: Final = "sessiontemp"
SHELL_SCRIPT: Final = "sessiontemp-shell"
# The processes between a hook and the CLI that runs it: the shell Claude
# Code starts it with, and the prefix (``sessiontemp-shell``) when the hook
# runs through it.
SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish",
                           "busybox", "csh", "tcsh"})
OURS: Final = frozenset({SCRIPT, SHELL_SCRIPT})


def default_settings() -> Path:
    """The user's settings file, ``~/.claude/settings.json``: what ``integrate`` writes by default.

    Not the project's ``.claude/settings.json``: the paths written are this
    machine's install, wrong for anyone the project's file is shared with,
    and every chat, in any project, should have its session.
    """
    return Path.home() / ".claude" / "settings.json"


@attrs.frozen
class Programs:
    """The absolute paths written into the settings: the prefix and the hooks' program."""

    sessiontemp: Path
    shell: Path

    @classmethod
    def installed(cls) -> Programs:
        """The console scripts of this installation of sessiontemp."""
        return cls(_installed(SCRIPT), _installed(SHELL_SCRIPT))

    @property
    def prefix(self) -> str:
        """The value of ``env.CLAUDE_CODE_SHELL_PREFIX``: the ``sessiontemp-shell`` path."""
        return os.fspath(self.shell)

    @property
    def hook_command(self) -> str:
        """The hooks' command line: ``sessiontemp session hook`` by its absolute path."""
        return f"{shlex.quote(os.fspath(self.sessiontemp))} session hook"


def _installed(name: str) -> Path:
    places = []
    here = Path(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if here is not None and here.name in OURS:
        places.append(here.parent)
    # A venv's bin/, or the scheme's scripts directory pip installed into.
    places += [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    for place in places:
        candidate = place / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Path(os.path.abspath(candidate))
    found = shutil.which(name)
    if found is not None:
        return Path(os.path.abspath(found))
    raise BadInput(name, f"is not installed beside this sessiontemp ({places[0]})",
                   "Reinstall sessiontemp (`pip install --force-reinstall sessiontemp`) so that "
                   "its console scripts exist, then run again")


@attrs.frozen
class Change:
    """One edit of the settings: *action* ``added``, ``updated`` or ``removed``."""

    action: str
    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.action} {self.key}: {self.value}"

    def as_json(self) -> dict[str, str]:
        """The change as one JSON object of ``integrate --json``'s ``changes``."""
        return {"action": self.action, "key": self.key, "value": self.value}


@attrs.frozen
class Outcome:
    """What :func:`integrate` did to *settings*; no changes means the file was not written."""

    settings: Path
    removed: bool
    changes: tuple[Change, ...]

    @property
    def changed(self) -> bool:
        """Whether the file was changed (and written)."""
        return bool(self.changes)

    def as_json(self) -> dict[str, Any]:
        """``integrate --json``'s object: the settings path, the mode, the changes."""
        return {"settings": os.fspath(self.settings), "remove": self.removed,
                "changed": self.changed, "changes": [c.as_json() for c in self.changes]}


def integrate(settings: Path, programs: Programs, *, remove: bool = False) -> Outcome:
    """Merge the prefix and the hooks into *settings* (or take them out, with *remove*).

    Everything else in the file is kept as it is: other keys of ``env``,
    other hooks (ours are groups of their own, appended to each event's
    list).  Run again, it changes nothing and does not write the file.
    Removal takes out exactly what was added (an entry ours in value, from
    any installation of sessiontemp) and the containers that held only it.
    A prefix of another tool is never overwritten: :class:`BadInput`.  The
    file is replaced atomically, keeping its mode (a symlink to it stays).
    """
    data = _load(settings)
    if data is None:
        if remove:
            return Outcome(settings, True, ())
        data = {}
    changes = _unmerge(data) if remove else _merge(data, programs, settings)
    if changes:
        _write(settings, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return Outcome(settings, remove, tuple(changes))


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise BadInput(path, f"is not UTF-8 text ({e.reason})",
                       "Fix the file, or move it aside, then run again") from e
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(path, f"is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})",
                       "Fix the file, or move it aside, then run again") from e
    if not isinstance(data, dict):
        raise BadInput(path, f"holds a JSON {type(data).__name__}, not an object",
                       "Fix the file, or move it aside, then run again")
    return data


def _table(data: dict[str, Any], key: str, kind: type, path: Path, where: str) -> Any:
    value = data.setdefault(key, kind())
    if not isinstance(value, kind):
        raise BadInput(path, f"{where} is a JSON {type(value).__name__}, not "
                       f"{'an object' if kind is dict else 'a list'}",
                       "Fix the file, then run again")
    return value


def _ours_prefix(value: object) -> bool:
    return isinstance(value, str) and os.path.basename(value) == SHELL_SCRIPT


def hook_words(command: object) -> list[str] | None:
    """*command* split into words if it is a ``sessiontemp session hook`` command line, else None.

    Exactly three words: the program (named ``sessiontemp``), ``session`` and
    ``hook``.  Anything more (a redirection, another command) is not one.
    """
    if not isinstance(command, str) or "session hook" not in command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) == 3 and words[1:] == ["session", "hook"] and \
            os.path.basename(words[0]) == SCRIPT:
        return words
    return None


def _ours_hook(entry: object) -> bool:
    return isinstance(entry, dict) and hook_words(entry.get("command")) is not None


def _groups(data: dict[str, Any], path: Path) -> dict[str, Any]:
    return _table(data, "hooks", dict, path, "hooks")  # type: ignore[no-any-return]


def _wanted(event: str, programs: Programs) -> dict[str, Any]:
    group: dict[str, Any] = {"matcher": START_MATCHER} if event == "SessionStart" else {}
    group["hooks"] = [{"type": "command", "command": programs.hook_command}]
    return group


def _merge(data: dict[str, Any], programs: Programs, path: Path) -> list[Change]:
    if " -" in programs.prefix:
        raise BadInput(programs.prefix, "holds \" -\", where Claude Code cuts a shell prefix "
                       "into a program and its flags", "Install sessiontemp under a path "
                       "without \" -\" (a virtual environment elsewhere), then run again")
    changes = []
    had_env = "env" in data
    env = _table(data, "env", dict, path, "env")
    before = env.get(PREFIX_KEY)
    if before != programs.prefix:
        if before is not None and not _ours_prefix(before):
            if not had_env:
                del data["env"]
            raise BadInput(path, f"env.{PREFIX_KEY} is already {before!r}, another tool's shell "
                           "prefix", "Remove it from the file (or run that tool from a "
                           "wrapper of your own), then run again")
        env[PREFIX_KEY] = programs.prefix
        changes.append(Change("added" if before is None else "updated", f"env.{PREFIX_KEY}",
                              programs.prefix))
    hooks = _groups(data, path)
    for event in ("SessionStart", "SessionEnd"):
        groups = _table(hooks, event, list, path, f"hooks.{event}")
        wanted = _wanted(event, programs)
        ours = [g for g in groups if isinstance(g, dict) and
                any(_ours_hook(h) for h in g.get("hooks") or ())]
        if ours == [wanted]:
            continue
        updated = bool(ours)
        _drop_ours(groups)
        groups.append(wanted)
        matcher = f" (matcher {START_MATCHER})" if event == "SessionStart" else ""
        changes.append(Change("updated" if updated else "added", f"hooks.{event}{matcher}",
                              programs.hook_command))
    return changes


def _drop_ours(groups: list[Any]) -> bool:
    """Take our hooks out of *groups*, and each group they leave empty; whether any was there."""
    found = False
    for group in list(groups):
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            continue
        kept = [h for h in group["hooks"] if not _ours_hook(h)]
        if len(kept) == len(group["hooks"]):
            continue
        found = True
        if kept:
            group["hooks"] = kept
        else:
            groups.remove(group)
    return found


def _unmerge(data: dict[str, Any]) -> list[Change]:
    changes = []
    env = data.get("env")
    if isinstance(env, dict) and _ours_prefix(env.get(PREFIX_KEY)):
        changes.append(Change("removed", f"env.{PREFIX_KEY}", env.pop(PREFIX_KEY)))
        if not env:
            del data["env"]
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event in ("SessionStart", "SessionEnd"):
            groups = hooks.get(event)
            if isinstance(groups, list) and _drop_ours(groups):
                changes.append(Change("removed", f"hooks.{event}", "sessiontemp session hook"))
                if not groups:
                    del hooks[event]
                if not hooks:
                    del data["hooks"]
    return changes


def _write(path: Path, text: str) -> None:
    """Replace *path*'s content with *text*: a reader sees the old file or the new, never half.

    A symlinked settings file (a dotfiles checkout) is written through: its
    target is replaced and the link stays.  A new file is 0600, since
    ``env`` often holds tokens; an existing one keeps its mode.
    """
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o600
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                     suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            # The content is on disk before the name points at it: a crash
            # leaves the old file or the new one, never an empty one.
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# -- the hooks ---------------------------------------------------------------------


def owner_pid(start: int | None = None) -> int:
    """The agent CLI's pid: the first ancestor of *start* (default: our parent) that is not a
    shell or a sessiontemp program.

    Claude Code starts a hook through a shell (``sh -c``), and through the
    prefix when one is set; either may have exec'd into the next or not.
    The CLI waits for its SessionStart hooks, so it is alive (its pid
    cannot be reused) while this runs.
    """
    pid = os.getppid() if start is None else start
    while pid > 1:
        if not _between(pid):
            return pid
        pid = _parent(pid)
    raise BadInput("session hook", "found no agent CLI among its parent processes (only "
                   "shells up to pid 1)", "Pass the CLI's pid with --owner-pid PID")


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat_line = f.read()
    # The command name, in parentheses, may hold anything: the fields follow its last ")".
    return int(stat_line[stat_line.rindex(b")") + 2:].split()[1])


def _between(pid: int) -> bool:
    try:
        program = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")[:3]
    except OSError:
        # Another user's process, or gone: not one we started.
        return False
    if program in SHELLS:
        return True
    # A console script is `python /path/sessiontemp-shell ...`; a module `python -m sessiontemp`.
    return any(os.path.basename(os.fsdecode(a)) in OURS for a in argv)


def plan(event: Mapping[str, Any], owner: Callable[[], int]) -> list[list[str]]:
    """The ``sessiontemp`` command lines for hook *event*, tried in order until one succeeds.

    ``SessionStart`` from ``startup`` or ``resume``: start the session named
    by ``session_id`` for the CLI (*owner* gives its pid).  From ``clear``:
    rotate it; Claude Code gives a cleared chat a new id (and ends the old
    one with ``SessionEnd``), so when no session of that id is live, start
    it.  ``SessionEnd`` (a ``clear`` too: the commands that follow are given
    the new id in ``CLAUDE_CODE_SESSION_ID``): end it (one owner less; the
    last seals it).
    """
    name = event.get("session_id")
    kind = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise BadInput("session hook", f"the hook's JSON has no session_id ({event!r})",
                       "Run it as a Claude Code hook, which writes that JSON on stdin")
    if kind == "SessionEnd":
        return [["session", "end", name]]
    if kind != "SessionStart":
        return []
    source = event.get("source")
    start = ["session", "start", name, "--owner-pid", str(owner())]
    if source == "clear":
        return [["session", "rotate", name], start]
    if source in ("startup", "resume"):
        return [start]
    return []


def _program() -> list[str]:
    """How to run ``sessiontemp``: the script beside this one, else the one on PATH."""
    here = Path(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if here is not None and here.name in OURS:
        beside = here.with_name(SCRIPT)
        if os.access(beside, os.X_OK):
            return [os.fspath(beside)]
    found = shutil.which(SCRIPT)
    if found is not None:
        return [found]
    # -P: the current directory (a project's) must not shadow the library's modules.
    return [sys.executable, "-P", "-m", SCRIPT]


def hook(argv: Sequence[str], stdin: bytes, say: Callable[[str], None]) -> int:
    """``sessiontemp session hook [--owner-pid PID]``: act on the hook JSON *stdin*; the status.

    The commands' output goes to stderr: a SessionStart hook's stdout is
    added to the chat's context.
    """
    given: int | None = None
    words = list(argv)
    if words[:1] == ["--owner-pid"] and len(words) == 2 and words[1].isdigit():
        given = int(words[1])
    elif words:
        say(f"sessiontemp session hook: unexpected arguments {words!r}. It takes only "
            "--owner-pid PID, and reads the hook's JSON on stdin\n")
        return 2
    try:
        event = json.loads(stdin.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        say(f"sessiontemp session hook: stdin is not the hook's JSON ({e}). Run it as a "
            "Claude Code hook, which writes that JSON on stdin\n")
        return 2
    if not isinstance(event, dict):
        say("sessiontemp session hook: stdin is not a JSON object. Run it as a Claude Code "
            "hook, which writes that JSON on stdin\n")
        return 2
    try:
        tries = plan(event, lambda: owner_pid() if given is None else given)
    except BadInput as e:
        say(f"sessiontemp {e}\n")
        return 2
    status = 0
    program = _program()
    for i, words in enumerate(tries):
        last = i == len(tries) - 1
        done = subprocess.run([*program, *words], stdin=subprocess.DEVNULL,
                              stdout=sys.stderr.fileno(),
                              stderr=None if last else subprocess.PIPE, check=False)
        status = done.returncode
        if status == 0:
            break
    return status
