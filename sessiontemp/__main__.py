"""``sessiontemp`` (and ``python -m sessiontemp``): run a command in a private directory, recover.

    sessiontemp run [--root DIR] [--max-bytes N] [--max-inodes N] [--min-free-bytes N]
                    -- CMD ARGS...
    sessiontemp run --session NAME [--root DIR] -- CMD ARGS...
    sessiontemp shell COMMAND_STRING
    sessiontemp session start NAME [--root DIR] [--owner-pid PID] [--resume-window S] [--json]
    sessiontemp session rotate|end NAME [--root DIR] [--json]
    sessiontemp session list [--root DIR] [--json]
    sessiontemp recover [--root DIR] [--json]
    sessiontemp integrate claude-code [--settings FILE] [--remove] [--json]

Each subcommand calls one library function (:func:`sessiontemp.run.run_command`,
:func:`sessiontemp.holder.client.run_in_session`, :func:`sessiontemp.holder.holding.start`,
:func:`sessiontemp.recover`) and formats its result.  The root is ``--root``,
else ``$SESSIONTEMP_ROOT``, else the per-user default
(:func:`sessiontemp._kernel.where.chosen_root`).  Bad input (a bad
argument, an unsafe root, a journal that cannot be used) is one line on
stderr naming the path, the reason and the fix, and exit status 2; a run
refused for space (too little free, or a directory left over its budget)
is one such line and exit status 75.
"""

from __future__ import annotations

from sessiontemp import platform as _platform

if __name__ == "__main__":
    # `python -m sessiontemp` on a platform sessiontemp refuses: one line and
    # exit status 2, before an import below fails with a traceback.
    _platform.exit_if_unsupported("sessiontemp")
    import sys as _sys

    from sessiontemp.holder import client as _client

    # `run --session` and `shell`, before the library's heavier modules below:
    # a harness pays this start-up on every command it runs in a session.
    if _client.handles(_sys.argv[1:]):
        _client.entry()

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from sessiontemp._kernel.where import chosen_root, default_root
from sessiontemp.cli import console
from sessiontemp.journal.errors import (
    BadInput,
    CommandNotStarted,
    JournalFull,
    LowDisk,
    NoSuchRoot,
    OverBudget,
    SessionTempError,
)
from sessiontemp.run import run_command
from sessiontemp.space import budget

if TYPE_CHECKING:
    import argparse

    from sessiontemp.cli.arguments import Parser

__all__ = ["main"]

PROG = "sessiontemp"

EXAMPLES = """\
examples:
  sessiontemp run -- make test            run `make test` with TMPDIR, TMP and TEMP on a
                                          private directory, removed when it exits
  sessiontemp run --root ~/.cache/st -- pytest -x
                                          the same under another root
  sessiontemp run --max-bytes 2G -- make  fail the run if its directory ends over 2 GiB
  sessiontemp session start chat-1        start session chat-1, owned by the calling process
  sessiontemp run --session chat-1 -- make test
                                          run `make test` in the session's directory
  SESSIONTEMP_SESSION=chat-1 sessiontemp shell 'ls "$TMPDIR"'
                                          the same through $SHELL -c
  sessiontemp session end chat-1          end it (the last owner's end removes its directory)
  sessiontemp recover                     remove what killed runs left in the default root
  sessiontemp recover --root DIR --json   the same for DIR, as JSON

exit status: `run` passes the command's through (128+N when signal N killed it;
127 not found, 126 not executable); 75 when the run is refused for space (the
root's file system has less free space than --min-free-bytes, so the command
never started) or a command that succeeded left its directory over --max-bytes
or --max-inodes; 2 means bad input."""

RUN_HELP = """\
Run CMD with TMPDIR, TMP and TEMP on a private 0700 directory leased for it
alone. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH are
forwarded to it (not twice: a terminal's Ctrl-C already reaches it); its exit
status is passed through, 128+N when signal N killed it. The directory is
removed when CMD exits. If this wrapper is killed, CMD keeps its directory
until CMD exits, and the next recovery removes it. With --max-bytes or
--max-inodes the directory is measured as CMD runs and when it exits; one
that ends over the budget is said on stderr with its largest entries, and a
run whose CMD succeeded then exits 75 (CMD is never stopped for it). With
--session NAME, CMD runs the same way in live session NAME's current
directory (see `sessiontemp session --help`), which stays when CMD exits; no
live session NAME: exit 2, and CMD does not run."""

RECOVER_HELP = """\
Run one recovery pass on the root: declare dead the managers whose process is
gone, remove their directories that no running command holds, and print what
was removed and what was left, with why."""


SESSION_HELP = """\
Drive a named session from any language: `start` makes the owner process (the
caller's parent unless --owner-pid) an owner of session NAME, starting the
root's session holder if none runs; `run --session NAME` and `shell` run
commands in its current directory; `rotate` gives later commands a fresh one;
`end` releases one owner, and the last one's end removes the directory once
no command holds it. An owner that exits without `end` ends its ownership as
a crash does: the session is kept for its resume window (a start meanwhile
resumes it, files kept), then removed."""

SHELL_HELP = """\
Run $SHELL -c COMMAND_STRING (/bin/sh when SHELL is unset) as `run --session`
runs a command, in the session named by SESSIONTEMP_SESSION, else by
CLAUDE_CODE_SESSION_ID; the root is SESSIONTEMP_ROOT, else the default. No
session named: said, exit 2. The form an agent CLI's shell prefix calls."""

INTEGRATE_HELP = """\
Merge into an agent CLI's settings what gives each of its chats a session:
for claude-code, the shell prefix (env.CLAUDE_CODE_SHELL_PREFIX, the
absolute path of sessiontemp-shell) and the SessionStart and SessionEnd
hooks (sessiontemp session hook). Nothing else in the file changes; run
again, it changes nothing; --remove takes out exactly what it added. It
prints each change."""

SUBCOMMANDS: Final = ("run", "recover", "session", "shell", "integrate")
SESSION_SUBCOMMANDS: Final = ("start", "rotate", "end", "list")
# The options that take the next word as their value, wherever they are given.
_VALUED: Final = frozenset({"--root", "--session", "--max-bytes", "--max-inodes",
                            "--min-free-bytes", "--owner-pid", "--resume-window",
                            "--settings"})
# Refused for space: EX_TEMPFAIL of sysexits.h, "try again later" (once space is freed).
SPACE_STATUS: Final = 75


def build_parser() -> Parser:
    # Here, not at the top: a plain `run` (see _plain_run) needs no parser,
    # and these take longer to import than the rest of such a run's start.
    import argparse
    from importlib import metadata

    from sessiontemp.cli.arguments import Parser, PathArgument
    from sessiontemp.cli.arguments import size as _size

    parser = Parser(
        prefix=PROG, prog=PROG, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Private, journaled, crash-recoverable temporary directories for commands.",
    )
    parser.add_argument("--version", action="version",
                        version=f"{PROG} {metadata.version('sessiontemp')}")
    parser.add_subcommands(dest="subcommand", metavar="SUBCOMMAND", required=True)
    root_help = f"the root holding the journal and the directories (default: {default_root()})"
    root = PathArgument("the root", "Pass a directory, or leave out --root for the per-user "
                        f"default ({default_root()})")

    run = parser.add_subcommand(
        "run", prefix=f"{PROG} run", help="run a command in a private temporary directory",
        description=RUN_HELP, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} run [--root DIR] [--max-bytes N] [--max-inodes N] "
        "[--min-free-bytes N] -- CMD ARGS...")
    run.add_argument("--root", type=root, metavar="DIR", help=root_help)
    run.add_argument("--max-bytes", type=_size, metavar="N",
                     help="the budget of the command's directory, in bytes allocated (K, M, "
                     "G, T: binary units, as 2G); one that ends over it fails the run")
    run.add_argument("--max-inodes", type=_size, metavar="N",
                     help="the same, in inodes (files, directories, links)")
    run.add_argument("--min-free-bytes", type=_size, metavar="N",
                     help="refuse to start the command when the root's file system has less "
                     "free space than this (default: the library's, 1%% of the file "
                     "system, at most 1 GiB; 0 never refuses)")
    run.add_argument("--session", metavar="NAME",
                     help="run in live session NAME's current directory (see `session "
                     "start`); the directory stays when CMD exits")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD ARGS...",
                     help="the command and its arguments, after --")

    session = parser.add_subcommand(
        "session", prefix=f"{PROG} session", help="start, rotate, end or list named sessions",
        description=SESSION_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    session.add_subcommands(dest="action", metavar="ACTION", required=True)
    for action, text in (("start", "make the owner process an owner of session NAME"),
                         ("rotate", "give the session's later commands a fresh directory"),
                         ("end", "release one owner; the last seals the session"),
                         ("list", "the root's live sessions")):
        sub = session.add_subcommand(action, prefix=f"{PROG} session {action}",
                                     command=f"{PROG} session {action}", help=text,
                                     description=text)
        if action != "list":
            sub.add_argument("name", metavar="NAME", help="the session's name (1-64 of "
                             "[A-Za-z0-9._-])")
        sub.add_argument("--root", type=root, metavar="DIR", help=root_help)
        sub.add_argument("--json", action="store_true",
                         help="print one JSON object (schema: the documentation's JSON "
                         "output page)")
        if action in ("start", "end"):
            sub.add_argument("--owner-pid", type=_pid, metavar="PID",
                             help="the owner process (default: the caller's parent)")
        if action == "start":
            sub.add_argument("--resume-window", type=float, metavar="SECONDS",
                             help="how long the session is kept for a resume after its last "
                             "owner ended without `end` (default: a day)")
            sub.add_argument("--max-bytes", type=_size, metavar="N",
                             help="the budget of the session's directory in bytes allocated: "
                             "a command that leaves it over fails (75), and the next is "
                             "refused until a rotate")
            sub.add_argument("--max-inodes", type=_size, metavar="N",
                             help="the same, in inodes")
            sub.add_argument("--min-free-bytes", type=_size, metavar="N",
                             help="refuse commands while the root's file system has less free "
                             "space than this (default: the library's)")

    shell = parser.add_subcommand(
        "shell", prefix=f"{PROG} shell", help="run a shell command in the environment's session",
        description=SHELL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    shell.add_argument("text", metavar="COMMAND_STRING", help="the shell command, one word")

    rec = parser.add_subcommand(
        "recover", prefix=f"{PROG} recover", help="remove what dead sessions left",
        description=RECOVER_HELP, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rec.add_argument("--root", type=root, metavar="DIR", help=root_help)
    rec.add_argument("--json", action="store_true",
                     help="print one JSON object (schema: the documentation's JSON output page)")

    integ = parser.add_subcommand(
        "integrate", prefix=f"{PROG} integrate", help="give each chat of an agent CLI a session",
        description=INTEGRATE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    integ.add_argument("cli", choices=["claude-code"], metavar="CLI",
                       help="the agent CLI: claude-code")
    integ.add_argument("--settings", type=PathArgument(
        "the settings file", "Pass the path of a settings.json"), metavar="FILE",
        help="the settings file to change (default: ~/.claude/settings.json, the user's: "
        "the paths written are this machine's; a project's own is "
        ".claude/settings.local.json)")
    integ.add_argument("--remove", action="store_true",
                       help="take out what an earlier integrate added")
    integ.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _pid(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id; pass one such as 1234")
    return int(text)


def _fail(where: str, message: str, status: int = 2) -> int:
    console.say(f"{PROG} {where}: {console.shown(message)}\n")
    return status


def cmd_run(args: argparse.Namespace | Plain, out: console.Out) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        return _fail("run", "no command given. Name it after --, as in "
                     f"`{PROG} run -- make test`")
    if args.session is not None:
        return _run_in_session(args, command)
    try:
        finished = run_command(command, root=chosen_root(args.root), max_bytes=args.max_bytes,
                               max_inodes=args.max_inodes, min_free_bytes=args.min_free_bytes)
    except CommandNotStarted as e:
        # As env(1), nohup(1) and shells report them.
        return _fail("run", str(e), 127 if e.errno == errno.ENOENT else 126)
    except LowDisk as e:
        if isinstance(e.__cause__, JournalFull):
            # The journal itself could not open: no floor of this command's to name.
            return _fail("run", f"{e} (the command was not started)", SPACE_STATUS)
        # Worded for this command line, as an overrun below is.
        low = budget.low_disk(e.path, e.free_bytes, e.min_free_bytes, e.largest, budget.RUN)
        return _fail("run", f"{low} (the command was not started)", SPACE_STATUS)
    except OverBudget as e:
        return _fail("run", f"{e} (the command was not started)", SPACE_STATUS)
    if finished.kept:
        _fail("run", f"{finished.path} is still held by a process the command left running; "
                     f"the next `{PROG} recover` after it exits removes it")
    if finished.over is not None:
        assert finished.usage is not None, "measured, to be found over"
        # Worded for this command line: its options, not the library's keywords.
        over = budget.over_budget(budget.Limits(args.max_bytes, args.max_inodes),
                                  finished.usage, budget.RUN)
        _fail("run", str(over))
        return finished.status or SPACE_STATUS
    return finished.status


def _run_in_session(args: argparse.Namespace | Plain, command: list[str]) -> int:
    from sessiontemp.holder.client import run_in_session

    given = [o for o, v in (("--max-bytes", args.max_bytes), ("--max-inodes", args.max_inodes),
                            ("--min-free-bytes", args.min_free_bytes)) if v is not None]
    if given:
        return _fail("run", f"{given[0]} applies to a run's own directory; a session's budget "
                     f"is given to `{PROG} session start`. Leave it out with --session")
    assert args.session is not None, "a run with --session"
    from sessiontemp.holder.client import Refused

    try:
        return run_in_session(command, session=args.session, root=args.root)
    except CommandNotStarted as e:
        return _fail("run", str(e), 127 if e.errno == errno.ENOENT else 126)
    except Refused as e:
        return _fail("run", str(e), e.status)


def cmd_session(args: argparse.Namespace, out: console.Out) -> int:
    import json

    from sessiontemp.holder import holding

    root = chosen_root(args.root)
    if args.action == "start":
        reply = holding.start(args.name, root=root, owner=args.owner_pid,
                             resume_window=args.resume_window, max_bytes=args.max_bytes,
                             max_inodes=args.max_inodes, min_free_bytes=args.min_free_bytes)
    elif args.action == "list":
        try:
            reply = holding.request(root, {"op": "list"}, session="")
        except holding.NoSession:
            reply = {"ok": True, "root": os.fspath(root), "holder_pid": None, "sessions": []}
    else:
        reply = holding.request(root, {"op": args.action, "session": args.name,
                                      "owner": args.owner_pid or os.getppid()
                                      if args.action == "end" else None}, session=args.name)
    reply.pop("ok", None)
    if args.json:
        from sessiontemp.inspect import SCHEMA

        out.write(json.dumps({"schema": SCHEMA, **reply}, sort_keys=True) + "\n")
        return 0
    if args.action == "start":
        how = "resumed" if reply["resumed"] else "started"
        out.write(f"session {reply['session']} {how} in {reply['root']} (holder pid "
                  f"{reply['holder_pid']})\n")
    elif args.action == "rotate":
        out.write(f"session {reply['session']} rotated: later commands get a fresh directory\n")
    elif args.action == "end":
        left = ("sealed: its directory goes once no command holds it" if reply["sealed"]
                else f"{reply['owners']} owner(s) left")
        out.write(f"session {reply['session']}: one owner released; {left}\n")
    else:
        for s in reply["sessions"]:
            owners = ",".join(str(o["pid"]) for o in s["owners"]) or "-"
            size = "-" if s["bytes"] is None else f"{s['bytes']:,} bytes"
            resumable = ("resumable" if s["resumable"] else "live")
            out.write(f"{console.shown(s['session'])}  owners {owners}  holder "
                      f"{s['holder_pid']}  {s['directory'] or '-'}  {s['leases']} leases  "
                      f"{size}  {resumable}\n")
        if not reply["sessions"]:
            out.write(f"{root}: no live session\n")
    return 0


def cmd_shell(args: argparse.Namespace, out: console.Out) -> int:
    from sessiontemp.holder import client

    # Only reached for a command line the client did not read itself.
    return client.main(["shell", args.text])


def cmd_recover(args: argparse.Namespace, out: console.Out) -> int:
    import json

    from sessiontemp.recovery.cleanup import recover
    from sessiontemp.recovery.passes import Report

    root = chosen_root(args.root)
    no_journal = None
    try:
        # On a terminal only: a pass over thousands of directories takes a while.
        report = recover(root, progress=console.progress("recovering", unit="directories"))
    except NoSuchRoot as e:
        # No root there (none, or a directory without a journal): nothing to
        # recover, and nothing was made or written. Said, but not a failure:
        # a harness recovers at start-up, before its first run made the root.
        no_journal = str(e)
        report = Report(ran=False)
        _fail("recover", f"nothing to recover: {no_journal}", 0)
    if args.json:
        # The version of journal-inspect's JSON forms, which this one follows.
        from sessiontemp.inspect import SCHEMA

        out.write(json.dumps({
            "schema": SCHEMA,
            "root": os.fspath(root),
            "ran": report.ran,
            "removed": [{"path": os.fspath(r.path), "generation": r.generation,
                         "reason": r.reason} for r in report.removed],
            "skipped": [{"path": os.fspath(s.path), "reason": s.reason}
                        for s in report.skipped],
            "dead": list(report.dead),
            "no_journal": no_journal,
        }, sort_keys=True) + "\n")
        return 0
    if no_journal is not None:
        return 0
    if not report.ran:
        out.write(f"{root}: another recovery pass was running; nothing done\n")
    for manager in report.dead:
        out.write(f"declared manager {manager} dead: its process is gone\n")
    for removed in report.removed:
        out.write(f"removed {console.shown(removed.path)}: {console.shown(removed.reason)}\n")
    for skipped in report.skipped:
        out.write(f"left {console.shown(skipped.path)}: {console.shown(skipped.reason)}\n")
    out.write(f"{root}: {len(report.removed)} removed, {len(report.skipped)} left\n")
    return 0


def cmd_integrate(args: argparse.Namespace, out: console.Out) -> int:
    import json

    from sessiontemp.integrations import claude_code

    settings = claude_code.default_settings() if args.settings is None else args.settings
    try:
        outcome = claude_code.integrate(settings, claude_code.Programs.installed(),
                                        remove=args.remove)
    except OSError as e:
        if isinstance(e, SessionTempError):
            raise
        # Worded for this command: its path is --settings, not --root.
        raise BadInput(e.filename if e.filename is not None else settings,
                       e.strerror or str(e), "Check the path, or pass another --settings "
                       "FILE") from e
    if args.json:
        out.write(json.dumps(outcome.as_json(), sort_keys=True) + "\n")
        return 0
    for change in outcome.changes:
        out.write(f"{console.shown(change)}\n")
    if outcome.changed:
        out.write(f"wrote {console.shown(settings)}\n")
    elif args.remove:
        out.write(f"{console.shown(settings)}: no sessiontemp integration there; nothing "
                  "changed\n")
    else:
        out.write(f"{console.shown(settings)}: already integrated; nothing changed\n")
    return 0


def _arrange(words: list[str], parser: Parser) -> list[str]:
    """*words* with the subcommand first: an option given before it (``--root DIR run --
    CMD``) is the subcommand's, as journal-inspect takes ``--root DIR summary``.

    A word where the subcommand belongs that is none is :class:`BadInput`
    naming the nearest subcommand (argparse's "invalid choice" names none),
    or, after an option no subcommand has (``--rot DIR run``), that option's
    nearest: the word is its value.
    """
    from sessiontemp.cli.arguments import nearest_option, not_a_subcommand

    known = {o for p in (parser, *parser.subcommands.values()) for o in p.options}
    i = 0
    while i < len(words) and words[i] != "--":
        word = words[i]
        if not word.startswith("-"):
            if word in SUBCOMMANDS:
                return [word, *words[:i], *words[i + 1:]]
            before = words[i - 1].split("=", 1)[0] if i else ""
            if before.startswith("-") and before not in known:
                close = nearest_option(before, sorted(known))
                raise BadInput(repr(before), "is not an option", (
                    "" if close is None else f"Did you mean {close!r}? ")
                    + f"See `{PROG} --help`")
            raise not_a_subcommand(word, SUBCOMMANDS)
        i += 2 if word in _VALUED else 1
    return words


_COMMANDS: Final = {"recover": cmd_recover, "session": cmd_session, "shell": cmd_shell,
                    "integrate": cmd_integrate}


class Plain:
    """A plain ``run [--root DIR] -- CMD ARGS...``, the form a harness starts every command with.

    Read without the parser: building it (and importing argparse and
    importlib.metadata for ``--version``) took longer than the rest of a
    short command's start.  Any other command line, help and errors
    included, goes to the parser.
    """

    subcommand: Final = "run"
    session: Final = None
    # A budget or a free-space floor is given by option: the parser's form.
    max_bytes: Final = None
    max_inodes: Final = None
    min_free_bytes: Final = None

    def __init__(self, root: Path | None, command: list[str]) -> None:
        self.root = root
        self.command = command

    @classmethod
    def of(cls, words: Sequence[str]) -> Plain | None:
        """*words* as a plain run, or None for anything the parser must read."""
        if words[:1] != ["run"]:
            return None
        rest, root = list(words[1:]), None
        if rest[:1] == ["--root"] and len(rest) > 1 and rest[1][:1] not in ("", "-"):
            root, rest = Path(rest[1]), rest[2:]
        elif rest[:1] and rest[0].startswith("--root=") and len(rest[0]) > len("--root="):
            root, rest = Path(rest[0][len("--root="):]), rest[1:]
        # The command must not start with "--" itself: the parser decides how
        # many of those belong to it.
        if rest[:1] != ["--"] or len(rest) < 2 or rest[1] == "--":
            return None
        return cls(root, rest[1:])


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Parse *argv* (default: the process's), run the subcommand, return the exit status."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:2] == ["session", "hook"]:
        # The agent CLI's hook (written by `integrate`), not a command for people.
        from sessiontemp.integrations import claude_code

        return claude_code.hook(given[2:], sys.stdin.buffer.read(), console.say)
    args: argparse.Namespace | Plain | None = Plain.of(given)
    if args is None:
        parser = build_parser()
        try:
            words = _arrange(given, parser)
        except BadInput as e:
            console.say(f"{PROG}: {console.shown(e)}\n")
            return 2
        args, extras = parser.parse_known_args(words)
        parser.subcommand(args.subcommand).refuse_extras(extras, others=parser.subcommands)
    stream = console.Terminal(sys.stdout if out is None else out)
    try:
        status: int = (cmd_run(args, stream) if isinstance(args, Plain) or args.subcommand == "run"
                       else _COMMANDS[args.subcommand](args, stream))
    except SessionTempError as e:
        # Each names the path, what is wrong and the fix.
        return _fail(args.subcommand, str(e))
    except BrokenPipeError:
        # stdout's reader left: the work is done; console.exit_with ends quietly.
        raise
    except OSError as e:
        where = e.filename if e.filename is not None else getattr(args, "root", None)
        return _fail(args.subcommand, f"{where}: {e.strerror or e}. Check the path, or pass "
                     "another --root")
    except ValueError as e:
        return _fail(args.subcommand, str(e))
    except KeyboardInterrupt:
        # Held until the operation under way had finished: nothing is half done.
        return 128 + signal.SIGINT
    if args.subcommand == "run":
        # The command's status is the answer, whatever became of stdout.
        with contextlib.suppress(OSError):
            stream.flush()
    else:
        stream.flush()
    return status


def entry() -> None:
    """The console script's entry point."""
    console.prepare()
    console.exit_with(main)


if __name__ == "__main__":
    entry()
