"""``sessiontemp integrate claude-code``, the prefix and the hooks, as Claude Code calls them.

The settings file is merged (never clobbered), idempotently, and restored by
``--remove``.  The prefix is run exactly as Claude Code runs it:
``quote([prefix]) + " " + quote([command])`` through ``bash -c``.  The hook
reads the JSON Claude Code writes on stdin and calls the right ``sessiontemp
session`` subcommand: a stand-in ``sessiontemp`` on PATH records what it is
called with, and tests that need the session holder's ``shell`` run once it
is there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from sessiontemp.__main__ import build_parser

BIN = Path(sys.executable).parent
SCRIPT = BIN / "sessiontemp"
PREFIX = BIN / "sessiontemp-shell"

HAS_SHELL = "shell" in build_parser().subcommands
needs_shell = pytest.mark.skipif(not HAS_SHELL, reason="`sessiontemp shell` (the session "
                                 "holder) is not in this build")

# The stand-in: records its arguments and stdin, one JSON line a call, and prints on stdout
# (which the hook must keep out of its own stdout); the subcommands named in STANDIN_FAIL
# exit 2, as a rotate of a session that is not live does.
STANDIN = """\
#!{python}
import json, os, sys
with open(os.environ["STANDIN_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "stdin": sys.stdin.read()}}) + "\\n")
print("stand-in output")
fail = os.environ.get("STANDIN_FAIL", "").split(",")
sys.exit(2 if len(sys.argv) > 2 and sys.argv[2] in fail else 0)
"""


def quote(word: str) -> str:
    """One word quoted for a POSIX shell, as Claude Code quotes the prefix and the command:
    bare if made only of ``[A-Za-z0-9_./:=@+,-]``, else in single quotes."""
    if word == "":
        return "''"
    if re.fullmatch(r"[A-Za-z0-9_./:=@+,-]+", word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def claude_command(prefix: str, command: str) -> str:
    """Claude Code's formatShellPrefixCommand: the prefix split at its last " -" into a
    program (quoted whole) and its flags, then the command quoted as one word."""
    cut = prefix.rfind(" -")
    if cut < 0:
        return f"{quote(prefix)} {quote(command)}"
    return f"{quote(prefix[:cut])} {prefix[cut + 1:]} {quote(command)}"


def integrate(settings: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([os.fspath(SCRIPT), "integrate", "claude-code", "--settings",
                           os.fspath(settings), "--json", *more],
                          capture_output=True, text=True, check=False)


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not (SCRIPT.exists() and PREFIX.exists()):
        pytest.skip("the console scripts are not installed: run `pip install -e .`")


OWN: dict[str, Any] = {
    "model": "opus",
    "env": {"ANTHROPIC_LOG": "debug", "LANG": "fr_FR.UTF-8"},
    "permissions": {"allow": ["Bash(make:*)"]},
    "hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [
            {"type": "command", "command": "echo 'hello' >> ~/.log"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "check-bash"}]}],
    },
}


def test_integrate_merges_into_settings_of_their_own_changes_nothing_twice_and_removes_exactly(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(OWN, indent=4), encoding="utf-8")
    settings.chmod(0o640)

    first = integrate(settings)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["changed"]
    assert {c["key"] for c in report["changes"]} == {
        "env.CLAUDE_CODE_SHELL_PREFIX", "hooks.SessionStart (matcher startup|resume|clear)",
        "hooks.SessionEnd"}
    merged = json.loads(settings.read_text(encoding="utf-8"))
    hook = f"{shlex.quote(os.fspath(SCRIPT))} session hook"
    assert merged["env"] == {**OWN["env"], "CLAUDE_CODE_SHELL_PREFIX": os.fspath(PREFIX)}
    assert merged["hooks"]["SessionStart"] == [
        *OWN["hooks"]["SessionStart"],
        {"matcher": "startup|resume|clear", "hooks": [{"type": "command", "command": hook}]}]
    assert merged["hooks"]["SessionEnd"] == [{"hooks": [{"type": "command", "command": hook}]}]
    assert merged["hooks"]["PreToolUse"] == OWN["hooks"]["PreToolUse"]
    assert {k: v for k, v in merged.items() if k not in ("env", "hooks")} == {
        k: v for k, v in OWN.items() if k not in ("env", "hooks")}
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640

    written = settings.read_bytes()
    inode = settings.stat().st_ino
    second = integrate(settings)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["changed"] is False
    assert settings.read_bytes() == written
    assert settings.stat().st_ino == inode, "an unchanged file is not rewritten"
    said = subprocess.run([os.fspath(SCRIPT), "integrate", "claude-code", "--settings",
                           os.fspath(settings)], capture_output=True, text=True, check=True)
    assert "nothing changed" in said.stdout

    removed = integrate(settings, "--remove")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["changed"]
    assert json.loads(settings.read_text(encoding="utf-8")) == OWN
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640
    again = integrate(settings, "--remove")
    assert json.loads(again.stdout)["changed"] is False


def test_integrate_creates_a_missing_file_private_and_its_removal_leaves_nothing_of_ours(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "home" / ".claude" / "settings.json"
    assert integrate(settings).returncode == 0
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    assert integrate(settings, "--remove").returncode == 0
    assert json.loads(settings.read_text(encoding="utf-8")) == {}
    assert os.listdir(settings.parent) == ["settings.json"], "no temporary file is left"


def test_a_shell_prefix_of_another_tool_is_refused_and_the_file_left_alone(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text('{"env": {"CLAUDE_CODE_SHELL_PREFIX": "/usr/bin/firejail"}}')
    before = settings.read_bytes()
    done = integrate(settings)
    assert done.returncode == 2
    assert "/usr/bin/firejail" in done.stderr
    assert "Remove it" in done.stderr
    assert settings.read_bytes() == before


def test_a_settings_file_that_is_not_json_is_refused_naming_it_and_the_place(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text('{"env": {,}}')
    done = integrate(settings)
    assert done.returncode == 2
    assert os.fspath(settings) in done.stderr
    assert "line 1, column 10" in done.stderr
    assert settings.read_text() == '{"env": {,}}'


def test_a_settings_path_that_cannot_be_made_is_one_line_naming_it_and_the_option(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = integrate(blocker / ".claude" / "settings.json")
    assert done.returncode == 2
    assert done.stderr.startswith(f"sessiontemp integrate: {blocker}")
    assert "pass another --settings FILE" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_symlinked_settings_file_is_written_through_its_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text('{"model": "opus"}')
    link = tmp_path / "settings.json"
    link.symlink_to(real)
    assert integrate(link).returncode == 0
    assert link.is_symlink()
    assert "CLAUDE_CODE_SHELL_PREFIX" in json.loads(real.read_text())["env"]


# -- the hook, with a stand-in sessiontemp ------------------------------------------------


@pytest.fixture
def standin(tmp_path: Path) -> Path:
    """A directory whose ``sessiontemp`` records each call in ``record.jsonl`` beside it."""
    where = tmp_path / "standin"
    where.mkdir()
    program = where / "sessiontemp"
    program.write_text(STANDIN.format(python=sys.executable))
    program.chmod(0o755)
    return where


def hook_env(standin: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{standin}{os.pathsep}{os.environ['PATH']}",
            "STANDIN_RECORD": os.fspath(standin / "record.jsonl"), **more}


def recorded(standin: Path) -> list[list[str]]:
    record = standin / "record.jsonl"
    if not record.exists():
        return []
    return [json.loads(line)["argv"] for line in record.read_text().splitlines()]


def run_hook(standin: Path, event: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    # `true;` keeps bash as the hook's parent (a lone command would be exec'd): the owner
    # is found past it, as past the shell Claude Code starts a hook with.
    command = f"true; {shlex.quote(sys.executable)} -m sessiontemp session hook"
    return subprocess.run(["bash", "-c", command], input=json.dumps(event),
                          env=hook_env(standin, **env), capture_output=True, text=True,
                          check=False)


def test_the_start_hook_starts_the_chats_session_with_the_cli_as_owner(standin: Path) -> None:
    chat = str(uuid.uuid4())
    for source in ("startup", "resume"):
        done = run_hook(standin, {"session_id": chat, "hook_event_name": "SessionStart",
                                  "source": source, "cwd": "/", "transcript_path": "/t"})
        assert done.returncode == 0, done.stderr
        assert done.stdout == "", "a SessionStart hook's stdout goes into the chat"
        assert "stand-in output" in done.stderr
    # This test's process started the shell that started the hook: it is the CLI here.
    start = ["session", "start", chat, "--owner-pid", str(os.getpid())]
    assert recorded(standin) == [start, start]


def test_the_clear_hook_rotates_a_live_session_and_starts_a_new_chats_id(
    standin: Path,
) -> None:
    chat = str(uuid.uuid4())
    event = {"session_id": chat, "hook_event_name": "SessionStart", "source": "clear"}
    assert run_hook(standin, event).returncode == 0
    assert recorded(standin) == [["session", "rotate", chat]]
    (standin / "record.jsonl").unlink()
    # /clear gives the chat a new id: no session of that id is live yet.
    done = run_hook(standin, event, STANDIN_FAIL="rotate")
    assert done.returncode == 0, done.stderr
    assert recorded(standin) == [["session", "rotate", chat],
                                 ["session", "start", chat, "--owner-pid", str(os.getpid())]]


def test_the_end_hook_ends_the_session_and_other_events_do_nothing(standin: Path) -> None:
    chat = str(uuid.uuid4())
    assert run_hook(standin, {"session_id": chat, "hook_event_name": "SessionEnd",
                              "reason": "prompt_input_exit"}).returncode == 0
    assert run_hook(standin, {"session_id": chat, "hook_event_name": "SessionStart",
                              "source": "compact"}).returncode == 0
    assert recorded(standin) == [["session", "end", chat]]
    # A /clear ends the old id's chat: the commands that follow are given the new id.
    assert run_hook(standin, {"session_id": chat, "hook_event_name": "SessionEnd",
                              "reason": "clear"}).returncode == 0
    assert recorded(standin)[1:] == [["session", "end", chat]]
    (standin / "record.jsonl").unlink()
    failed = run_hook(standin, {"session_id": chat, "hook_event_name": "SessionEnd"},
                      STANDIN_FAIL="end")
    assert failed.returncode == 2


def test_a_hook_without_its_json_says_so_and_calls_nothing(standin: Path) -> None:
    for stdin in ("", "not json", "[1]", '{"hook_event_name": "SessionStart"}'):
        done = subprocess.run([sys.executable, "-m", "sessiontemp", "session", "hook"],
                              input=stdin, env=hook_env(standin), capture_output=True,
                              text=True, check=False)
        assert done.returncode == 2, stdin
        assert "hook" in done.stderr
    assert recorded(standin) == []


def test_the_prefix_runs_the_session_hook_directly_since_no_session_is_live_before_it(
    standin: Path,
) -> None:
    """Claude Code runs its hooks through the prefix too: the SessionStart hook, which starts
    the session, is run as it is, with the hook's JSON on its stdin."""
    event = json.dumps({"session_id": "c1", "hook_event_name": "SessionStart",
                        "source": "startup"})
    hook = f"{shlex.quote(os.fspath(standin / 'sessiontemp'))} session hook"
    done = subprocess.run(["bash", "-c", claude_command(os.fspath(PREFIX), hook)],
                          input=event, env=hook_env(standin), capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in (standin / "record.jsonl").read_text().splitlines()]
    assert calls == [{"argv": ["session", "hook"], "stdin": event}]


def test_claude_codes_quoting_splits_a_prefix_at_its_last_dash_into_program_and_flags() -> None:
    """The model of Claude Code's quoting the tests below rely on."""
    assert claude_command("/bin/p", "a 'b'") == "/bin/p 'a '\"'\"'b'\"'\"''"
    assert claude_command("/my bin/p --x -y", "c") == "'/my bin/p --x' -y c"
    assert claude_command("/bin/p", "") == "/bin/p ''"
    done = subprocess.run(["bash", "-c", claude_command("/bin/echo", "it's a | b && c")],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "it's a | b && c\n"


# -- through the session holder's shell -------------------------------------------------


COMMANDS = [
    ("echo \"it's\" 'quoted'", "it's quoted\n"),
    ("printf 'a\\nb\\n' | wc -l", "2\n"),
    ("true && echo both", "both\n"),
    ("cat <<'EOF'\nhere $HOME\nEOF", "here $HOME\n"),
    ("echo 'héllo wörld ✓ 日本'", "héllo wörld ✓ 日本\n"),
]


@needs_shell
@pytest.mark.parametrize(("command", "expected"), COMMANDS)
def test_the_prefix_runs_claude_codes_commands_in_the_chats_session(
    tmp_path: Path, command: str, expected: str,
) -> None:
    root = tmp_path / "root"
    chat = str(uuid.uuid4())
    env = {**os.environ, "SESSIONTEMP_ROOT": os.fspath(root), "CLAUDE_CODE_SESSION_ID": chat}
    env.pop("SESSIONTEMP_SESSION", None)
    subprocess.run([os.fspath(SCRIPT), "session", "start", chat, "--owner-pid",
                    str(os.getpid())], env=env, check=True, capture_output=True)
    try:
        done = subprocess.run(["bash", "-c", claude_command(os.fspath(PREFIX), command)],
                              env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout == expected
        where = subprocess.run(["bash", "-c", claude_command(os.fspath(PREFIX),
                                                             'echo "$TMPDIR"')],
                               env=env, capture_output=True, text=True, check=True)
        assert root in Path(where.stdout.strip()).parents
    finally:
        subprocess.run([os.fspath(SCRIPT), "session", "end", chat], env=env, check=False,
                       capture_output=True)


@needs_shell
def test_the_hooks_start_and_end_a_real_session_through_the_prefix(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chat = str(uuid.uuid4())
    env = {**os.environ, "SESSIONTEMP_ROOT": os.fspath(root), "CLAUDE_CODE_SESSION_ID": chat}
    hook = f"{shlex.quote(os.fspath(SCRIPT))} session hook"
    through = ["bash", "-c", "true; " + claude_command(os.fspath(PREFIX), hook)]
    started = subprocess.run(through, input=json.dumps(
        {"session_id": chat, "hook_event_name": "SessionStart", "source": "startup"}),
        env=env, capture_output=True, text=True, check=False)
    try:
        assert started.returncode == 0, started.stderr
        listed = subprocess.run([os.fspath(SCRIPT), "session", "list", "--json"], env=env,
                                capture_output=True, text=True, check=True)
        assert chat in listed.stdout
        assert str(os.getpid()) in listed.stdout, "this process, the CLI here, owns it"
        ran = subprocess.run(["bash", "-c", claude_command(os.fspath(PREFIX),
                                                           'echo "$TMPDIR"')],
                             env=env, capture_output=True, text=True, check=True)
        assert root in Path(ran.stdout.strip()).parents
    finally:
        ended = subprocess.run(through, input=json.dumps(
            {"session_id": chat, "hook_event_name": "SessionEnd", "reason": "other"}),
            env=env, capture_output=True, text=True, check=False)
    assert ended.returncode == 0, ended.stderr


@needs_shell
def test_the_prefix_starts_an_mcp_server_as_claude_code_does_in_the_chats_session(
    tmp_path: Path,
) -> None:
    """A stdio MCP server is started with no shell: the prefix, then one argument, the
    server's command line quoted."""
    root = tmp_path / "root"
    chat = str(uuid.uuid4())
    env = {**os.environ, "SESSIONTEMP_ROOT": os.fspath(root), "CLAUDE_CODE_SESSION_ID": chat}
    subprocess.run([os.fspath(SCRIPT), "session", "start", chat, "--owner-pid",
                    str(os.getpid())], env=env, check=True, capture_output=True)
    try:
        server = [sys.executable, "-c", "import os, sys; print(os.environ['TMPDIR'], "
                  "sys.argv[1])", "ünïcode 'arg'"]
        done = subprocess.run([os.fspath(PREFIX), " ".join(quote(w) for w in server)],
                              env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        where, argument = done.stdout.rstrip("\n").split(" ", 1)
        assert root in Path(where).parents
        assert argument == "ünïcode 'arg'"
    finally:
        subprocess.run([os.fspath(SCRIPT), "session", "end", chat], env=env, check=False,
                       capture_output=True)
