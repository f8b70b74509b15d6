"""``journal-inspect``: replay a sessiontemp journal to explain what happened.

    journal-inspect [PATH] [--root DIR] [SUBCOMMAND] [options] [--json]

PATH names a journal file; otherwise ``--root DIR`` (default: the per-user
root) names the root holding ``journal.sqlite3``.  Each subcommand calls one
function of :mod:`sessiontemp.inspect` and formats its result.  Exit status:
0 ok, 1 problems found (verify, fsck) or a generation the journal never
names (explain), 2 bad input (a missing, corrupt or foreign journal; a bad
argument), each said in one line naming the path or argument, the reason
and the fix.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import importlib.metadata
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from sessiontemp import inspect
from sessiontemp._kernel.root import default_root, empty_path
from sessiontemp.cli import console
from sessiontemp.cli.arguments import (
    Parser,
    PathArgument,
    nearest,
    nearest_option,
    not_a_subcommand,
)
from sessiontemp.cli.console import shown
from sessiontemp.inspect.read import counted
from sessiontemp.journal.errors import BadInput, HistoryRetired, SessionTempError
from sessiontemp.space.usage import human

__all__ = ["main"]

SUBCOMMANDS: Final = ("summary", "events", "state", "explain", "verify", "fsck", "timeline",
                      "usage")


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


def _emit(obj: object, out: console.Out) -> None:
    out.write(json.dumps(obj, sort_keys=True) + "\n")


def _table(rows: Sequence[Sequence[object]], out: console.Out) -> None:
    # Every cell on one line: a label's newline or escape sequence is shown as \x0a, \x1b.
    cells = [[shown(c) for c in row] for row in rows]
    if not cells:
        return
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _progress(args: argparse.Namespace, label: str) -> inspect.Progress | None:
    return console.progress(label, hidden=args.no_progress)


# -- subcommands ------------------------------------------------------------------


def cmd_summary(args: argparse.Namespace, out: console.Out) -> int:
    where = inspect.locate(args.path, args.root)
    s = inspect.summary(where.journal, where.root)
    if args.json:
        _emit(inspect.as_json(s), out)
        return 0
    out.write(f"journal      {s.journal}{' (read as immutable)' if s.immutable else ''}\n")
    out.write(f"size         {s.size_bytes:,} bytes\n")
    out.write(f"events       {s.events:,} (seq {s.first_seq or '-'} to {s.last_seq or '-'})\n")
    out.write(f"first event  {_when(s.first_time)}\nlast event   {_when(s.last_time)}\n")
    if s.history is not None and s.history.retired_until:
        out.write(f"history      starts at event {s.history.retired_until + 1:,}: events 1 to "
                  f"{s.history.retired_until:,} were retired, last at "
                  f"{_when(s.history.retired_at)} (the retention rule: the documentation's "
                  "journal page, \"Bounded journal\")\n")
    m, g = s.managers, s.generations
    before = (f" ({m['before_history']} opened before the kept history)"
              if m.get("before_history") else "")
    out.write(f"managers     {m['opened']} opened{before}, {m['closed']} closed, {m['dead']} dead, "
              f"{m['running']} not ended ({m['live']} live, {m['gone']} gone, "
              f"{m['unknown']} liveness unknown; {m['sealed']} sealed, {m['owners']} owners)\n")
    out.write(f"generations  {g['total']} in all: {g['live']} live, {g['retired']} retired, "
              f"{g['removal_pending']} removal pending, {g['removed']} removed; "
              f"{g['leases_held']} leases held\n")
    ss, a = s.sessions, s.artifacts
    out.write(f"sessions     {ss['claims']} claims of named sessions, {ss['resumed']} resumed "
              f"after a crash, {ss['discarded']} discarded\n")
    out.write(f"artifacts    {a['kept']} kept, {a['removed']} removed\n")
    sp = s.space
    if sp.get("measurements"):
        out.write(f"space        {sp['measurements']:,} measurements journaled; the "
                  f"{sp['measured']} measured directories of managers not ended hold "
                  f"{human(int(sp['bytes'] or 0))} in {sp['inodes']:,} inodes")
        if sp["largest"] is not None:
            out.write(f", the largest {sp['largest']} ({human(int(sp['largest_bytes'] or 0))}"
                      f"; the largest peak {human(int(sp['peak_bytes'] or 0))}, of "
                      f"{sp['peak']})")
        out.write("; `journal-inspect usage` lists every directory\n")
    if sp.get("refused"):
        lead = "             " if sp.get("measurements") else "space        "
        out.write(f"{lead}{sp['refused']:,} acquires refused for space were journaled "
                  "(`journal-inspect events --kind space.refused` lists them)\n")
    if g["held_by_commands"]:
        out.write(f"             {g['held_by_commands']} directories of ended managers still held "
                  "by running commands (they go once the commands exit)\n")
    if s.checkpoint is None:
        out.write("checkpoint   none: replays start from event 1\n")
    else:
        out.write(f"checkpoint   at event {s.checkpoint:,}: replays fold the "
                  f"{(s.last_seq or 0) - s.checkpoint:,} events after it\n")
    verdict = "passes" if s.verify.ok else f"FAILS ({len(s.verify.problems)} problems)"
    out.write(f"verify       quick check {verdict}; run `journal-inspect verify` for all checks\n")
    if s.running:
        out.write("\n")
        _table([("manager", "pid", "opened", "owners", "sealed", "current", "liveness",
                 "session"),
                *[(r.id, r.pid, _when(r.opened_at), r.owners, "yes" if r.sealed else "no",
                   r.current or "-", r.liveness, r.session or "-") for r in s.running]], out)
    for p in s.verify.problems:
        out.write(f"problem: {shown(p.message)}\n")
    return 0


def _fields_text(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={shown(v)}" for k, v in fields.items())


def cmd_events(args: argparse.Namespace, out: console.Out) -> int:
    where = inspect.locate(args.path, args.root)
    since = None if args.since is None else inspect.parse_moment(args.since)
    until = None if args.until is None else inspect.parse_moment(args.until)
    selection = inspect.EventFilter(
        manager=args.manager,
        generation=None if args.generation is None else inspect.generation_of(args.generation),
        kinds=tuple(args.kind or ()),
        since_seq=since if isinstance(since, int) else None,
        since_time=since if isinstance(since, float) else None,
        until_seq=until if isinstance(until, int) else None,
        until_time=until if isinstance(until, float) else None,
        limit=args.limit,
    )
    # Written with the first row: nothing is printed before the journal opens (a
    # README.md given as the journal is one line on stderr, alone).
    header = None if args.json else f"{'seq':>8}  {'time':<29}  {'kind':<18}  fields\n"
    for row in inspect.events(where.journal, selection, follow=args.follow):
        if header is not None:
            out.write(header)
            header = None
        if args.json:
            _emit(inspect.as_json(row), out)
        elif isinstance(row, inspect.Missed):
            out.write(f"missed: events {row.first} to {row.last} ({row.count}) were retired "
                      f"before this reader got to them; resuming at {row.resumed}\n")
        else:
            out.write(f"{row.seq:>8}  {_when(row.time):<29}  {row.kind:<18}  "
                      f"{_fields_text(dict(row.fields))}\n")
        if args.follow:
            out.flush()
    if header is not None:
        out.write(header)
    return 0


def cmd_state(args: argparse.Namespace, out: console.Out) -> int:
    where = inspect.locate(args.path, args.root)
    at = None if args.at is None else inspect.parse_moment(args.at)
    try:
        result = inspect.state_at(where.journal, at, progress=_progress(args, "replaying"),
                                  live=args.live)
    except HistoryRetired as e:
        # Not bad input: the journal answers with what it knows, that the
        # moment is no longer kept (as explain does for an id it never names).
        (sys.stderr if args.json else out).write(f"{e}\n")
        return 1
    if args.json:
        _emit(inspect.as_json(result), out)
        return 0
    out.write(f"state right after event {result.seq} ({_when(result.time)})\n\nmanagers\n")
    _table([("manager", "pid", "owners", "sealed", "ended", "current", "generations"),
            *[(m.id, m.pid, m.owners, "yes" if m.sealed else "no", m.ended or "-",
               m.current or "-", len(m.generations))
              for m in sorted(result.state.managers.values(), key=lambda m: m.opened_seq)]], out)
    out.write("\ngenerations\n")
    _table([("generation", "manager", "ready", "leases", "retired", "removal"),
            *[(g.id, g.manager or "(stray)", "yes" if g.ready else "no", len(g.leases),
               "-" if g.retired_seq is None else f"at {g.retired_seq}",
               g.removal or "-" if g.removal_outcome is None
               else f"{g.removal} ({g.removal_outcome})")
              for g in sorted(result.state.generations.values(), key=lambda g: g.created_seq)]],
           out)
    if result.state.sessions:
        out.write("\nsessions\n")
        _table([("session", "owner", "window", "last used", "kept", "kept since", "resumed",
                 "discarded"),
                *[(n.name, n.owner, f"{n.window:g} s", _when(n.used_at), n.kept or "-",
                   _when(n.kept_at), n.adoptions,
                   "-" if n.discarded_reason is None else n.discarded_reason)
                  for n in sorted(result.state.sessions.values(), key=lambda n: n.claimed_seq)]],
               out)
    if result.state.artifacts:
        out.write("\nartifacts\n")
        _table([("artifact", "label", "size", "sha256", "manager", "session", "kept"),
                *[(a.id, a.label, a.size, a.sha256, a.manager, a.session or "-",
                   _when(a.kept_at))
                  for a in sorted(result.state.artifacts.values(), key=lambda a: a.kept_seq)]],
               out)
    return 0


def cmd_explain(args: argparse.Namespace, out: console.Out) -> int:
    where = inspect.locate(args.path, args.root)
    story = inspect.explain(where.journal, args.target, where.root,
                            progress=_progress(args, "replaying"))
    if args.json:
        _emit(inspect.as_json(story), out)
        return 0
    if story.status == "unknown" and not story.sentences:
        out.write(f"The journal {story.journal} never names generation {story.generation}: "
                  "check the id (`journal-inspect events --kind generation.created` lists "
                  "them) or the journal.\n")
        return 1
    out.write(f"Generation {story.generation} ({story.status}):\n")
    for s in story.sentences:
        out.write(f"  [{s.seq}] {shown(s.text)}\n")
    # Unknown, once history was retired: the sentence says where the kept history starts.
    return 1 if story.status == "unknown" else 0


def cmd_verify(args: argparse.Namespace, out: console.Out) -> int:
    where = inspect.locate(args.path, args.root)
    result = inspect.verify(where.journal, progress=_progress(args, "verifying"))
    if args.json:
        _emit(inspect.as_json(result), out)
    elif result.ok:
        out.write(f"{result.journal}: {result.events:,} events, all checks pass\n")
    else:
        out.write(f"{result.journal}: {len(result.problems)} problems\n")
        for p in result.problems:
            out.write(f"  [{p.check}] {shown(p.message)}\n")
    return 0 if result.ok else 1


def cmd_fsck(args: argparse.Namespace, out: console.Out) -> int:
    if args.path is not None and args.root is None:
        raise SystemExit(_usage_error("fsck compares a journal with its root: pass --root DIR"))
    where = inspect.locate(None, args.root)
    assert where.root is not None
    result = inspect.fsck(where.root, repair=args.repair, progress=_progress(args, "replaying"))
    if args.json:
        _emit(inspect.as_json(result), out)
        return 0 if result.ok else 1
    if result.repair is not None:
        r = result.repair
        if not r.ran:
            out.write("repair: another recovery pass was running; nothing done\n")
        for m in r.dead:
            out.write(f"repair: declared manager {m} dead\n")
        for path, _gid, reason in r.removed:
            out.write(f"repair: removed {shown(path)}: {shown(reason)}\n")
        for path, reason in r.skipped:
            out.write(f"repair: left {shown(path)}: {shown(reason)}\n")
    for f in result.findings:
        out.write(f"[{f.check}] {shown(f.path)}: {shown(f.message)}.\n    fix: {shown(f.fix)}\n")
    for f in result.held:
        out.write(f"[{f.check}] {shown(f.path)}: {shown(f.message)}. {shown(f.fix)}\n")
    commands = sum(f.check == "held" for f in result.held)
    kept = len(result.held) - commands
    held = (f", {commands} held by running commands" if commands else "") + (
        f", {kept} kept for a session's resume" if kept else "")
    verdict = "clean" if result.ok else f"{len(result.findings)} problems"
    out.write(f"{result.root}: {verdict}{held}\n")
    return 0 if result.ok else 1


def cmd_timeline(args: argparse.Namespace, out: console.Out) -> int:
    where = inspect.locate(args.path, args.root)
    since = None if args.since is None else inspect.parse_moment(args.since)
    until = None if args.until is None else inspect.parse_moment(args.until)
    target = None if args.output == "-" else Path(args.output)
    result = inspect.timeline(where.journal, target, manager=args.manager, since=since,
                              until=until, max_bars=args.max_bars, all_lanes=args.all_lanes,
                              idle=None if args.idle == 0 else args.idle,
                              progress=_progress(args, "replaying"))
    if target is None:
        out.write(result.svg)
    elif args.json:
        _emit(inspect.as_json(result), out)
    elif result.nothing:
        out.write(f"{result.output}: nothing drawn: {result.nothing}\n")
    else:
        ended = ", ".join(f"{n} {k}" for k, n in result.ended.items())
        window = ("no event in the window" if result.window is None else
                  f"events {result.window[0]:,} to {result.window[1]:,}")
        idle = "" if not result.idle else (
            f"; {counted(result.idle, 'idle stretch', 'idle stretches')} compressed")
        out.write(f"{result.output}: {counted(result.generations, 'generation')} ({ended}) "
                  f"in {counted(result.lanes, 'lane')}, of "
                  f"{counted(result.managers, 'manager')}, "
                  f"{counted(result.crashes, 'crash', 'crashes')}, "
                  f"{counted(result.recoveries, 'recovery pass', 'recovery passes')}, "
                  f"{counted(len(result.refused), 'refused record')}"
                  + (f", {counted(result.space_refused, 'acquire')} refused for space"
                     if result.space_refused else "")
                  + f"; {window}{idle}"
                  f"{'; bars grouped' if result.grouped else ''}\n")
    return 0


def cmd_usage(args: argparse.Namespace, out: console.Out) -> int:
    if args.path is not None and args.root is None:
        raise SystemExit(_usage_error("usage reads the directories of a root: pass --root DIR"))
    where = inspect.locate(None, args.root)
    assert where.root is not None
    report = inspect.usage(where.journal, where.root, measure=args.measure,
                           progress=_progress(args, "replaying"),
                           measuring=console.progress("measuring", unit="directories",
                                                      hidden=args.no_progress))
    if args.json:
        _emit(inspect.as_json(report), out)
        return 0
    kind = " (tmpfs)" if report.tmpfs else ""
    out.write(f"root         {report.root}{kind}: {human(report.free_bytes)} free of "
              f"{human(report.total_bytes)}\n")
    if report.tmpfs:
        out.write("             on a RAM-backed file system: every byte here is a byte of "
                  "memory. Fix: pass a root on disk (Manager(root=...), --root DIR)\n")
    how = "measured now" if report.measured else "as last measured"
    out.write(f"directories  {len(report.directories):,} not removed, holding "
              f"{human(report.bytes)} ({how})\n")
    if not report.directories:
        return 0
    out.write("\n")
    _table([("size", "peak", "inodes", "measured", "status", "session", "manager", "pid",
             "path", "labels"),
            *[("-" if d.measured_at is None else human(d.bytes),
               "-" if d.measured_at is None else human(d.peak_bytes),
               "-" if d.measured_at is None else f"{d.inodes:,}",
               "never" if d.measured_at is None else _when(d.measured_at),
               d.status, d.session or "-", (d.manager or "(stray)")[:8],
               d.pid or "-", d.path, _labels(d.labels))
              for d in report.directories]], out)
    for d in report.directories:
        if d.unread:
            out.write(f"{shown(d.path)}: {d.unread:,} entries could not be read; "
                      "its size counts what could\n")
        if d.before_history:
            out.write(f"{shown(d.path)}: created before {report.history}: the labels of the "
                      "leases taken on it before then went with the retired history\n")
        if d.refused and d.refused_at is not None:
            out.write(f"{shown(d.path)}: {counted(d.refused, 'acquire')} refused for space, "
                      f"the last at {_when(d.refused_at)} (`journal-inspect explain` says "
                      "why)\n")
    for p in report.problems:
        out.write(f"problem: {shown(p.message)}\n")
    return 0


def _labels(labels: Sequence[str]) -> str:
    text = ", ".join(labels) or "-"
    return text if len(text) <= 60 else text[:57] + "..."


# -- parsing ------------------------------------------------------------------------


def _usage_error(message: str) -> int:
    console.say(f"journal-inspect: {console.shown(message)}\n")
    return 2


# Every argument that names a path refuses an empty one (what an unset variable gives).
_ROOT: Final = PathArgument("the root", "Pass the root directory, or leave out --root for the "
                            f"per-user default ({default_root()})")
_TARGET: Final = PathArgument("the generation", "Pass a generation directory of the root, or "
                              "a generation id", convert=str)
_OUTPUT: Final = PathArgument("the output", "Pass a file to write, or - for standard output",
                              convert=str)


def _common(parser: Parser) -> None:
    """The options every subcommand takes."""
    parser.add_argument("--root", type=_ROOT, default=None,
                        help="the root holding journal.sqlite3 (default: the per-user root)")
    parser.add_argument("--json", action="store_true",
                        help="print the documented JSON form (one object per line)")
    parser.add_argument("--no-progress", action="store_true",
                        help="never show progress, even on a terminal")


def build_parser() -> Parser:
    parser = Parser(
        prefix="journal-inspect", prog="journal-inspect",
        epilog="Subcommands: " + ", ".join(SUBCOMMANDS) + ".",
        usage="journal-inspect [PATH] [--root DIR] [SUBCOMMAND] [options]",
        description="Replay a sessiontemp journal to explain what happened. PATH names a "
        "journal file; without it, --root DIR (default: the per-user root). Exit status: "
        "0 ok, 1 problems found, 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_subcommands(dest="command", metavar="SUBCOMMAND")

    def add(name: str, run: Callable[[argparse.Namespace, console.Out], int], text: str
            ) -> Parser:
        p = parser.add_subcommand(name, prefix="journal-inspect",
                                  command=f"journal-inspect {name}", help=text,
                                  description=text, prog=f"journal-inspect [PATH] {name}")
        _common(p)
        p.set_defaults(run=run)
        return p

    add("summary", cmd_summary, "managers, generations, events and a quick check (the default)")
    events = add("events", cmd_events, "the event log, filtered; --follow for new events")
    events.add_argument("--manager", help="events naming this manager (or made by it)")
    events.add_argument("--generation", type=_TARGET,
                        help="events naming this generation (an id or a path)")
    events.add_argument("--kind", action="append",
                        help="events of this kind (repeat for several)")
    events.add_argument("--since", help="from this sequence number or time (ISO 8601, or "
                        "epoch seconds with a decimal point)")
    events.add_argument("--until", help="up to this sequence number or time")
    events.add_argument("--limit", type=_count, help="at most this many events (0 or more)")
    events.add_argument("--follow", action="store_true",
                        help="keep printing events as other processes append them")
    state = add("state", cmd_state, "the full derived state right after an event or moment")
    state.add_argument("--at", help="a sequence number or a time (default: the end)")
    state.add_argument("--live", action="store_true",
                       help="only what is alive or owes work, replayed from the newest "
                            "checkpoint at or before that point (finished history needs a "
                            "replay from event 1)")
    explain = add("explain", cmd_explain, "one directory's life story in plain sentences")
    explain.add_argument("target", type=_TARGET, metavar="PATH|GENERATION")
    add("verify", cmd_verify, "every structural check and the reducer's invariants")
    fsck = add("fsck", cmd_fsck, "the journal against the disk of its root")
    fsck.add_argument("--repair", action="store_true",
                      help="run recovery (writes the journal, removes directories) and report")
    timeline = add("timeline", cmd_timeline, "draw managers, generations and leases over time "
                   "as a self-contained SVG picture")
    timeline.add_argument("-o", "--output", type=_OUTPUT, required=True, metavar="FILE",
                          help="the SVG file to write ('-' for standard output)")
    timeline.add_argument("--manager", help="draw only this manager's lane")
    timeline.add_argument("--since", help="from this time (ISO 8601, epoch seconds with a "
                          "decimal point) or the time of this sequence number")
    timeline.add_argument("--until", help="up to this time or sequence number")
    timeline.add_argument("--max-bars", type=_count, default=2000, metavar="N",
                          help="group the bars of each lane past N generations (default 2000)")
    timeline.add_argument("--idle", type=_seconds, default=inspect.IDLE, metavar="SECONDS",
                          help="draw stretches longer than this with no event and no lease "
                          f"held compressed and hatched (default {inspect.IDLE:g}; 0 draws "
                          "time to scale throughout)")
    space = add("usage", cmd_usage, "each directory's size on disk, largest first, and the "
                "root's free space (needs a root)")
    space.add_argument("--measure", action="store_true",
                       help="walk each directory now, read-only (never writes the journal), "
                       "instead of the sizes its manager last journaled")
    timeline.add_argument("--all-lanes", action="store_true",
                          help="a lane for every manager, even one with nothing drawn in it")
    return parser


def _version() -> str:
    try:
        version = importlib.metadata.version("sessiontemp")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    return f"journal-inspect (sessiontemp) {version}, JSON schema {inspect.SCHEMA}"


def _count(text: str) -> int:
    """A whole number, 0 or more, for argparse: its error names the value and the fix."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more; pass "
                                         "one such as 10")
    return value


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more, for argparse: its error names the value and the fix."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds of 0 or more; "
                                         "pass one such as 60")
    return value


def _arrange(argv: list[str], parser: Parser) -> tuple[str | None, list[str]]:
    """Split off the optional journal PATH and put the subcommand first (summary if none).

    A first word that is no subcommand, names nothing on disk and is close
    to a subcommand is a typo, not a journal path: :class:`BadInput`.
    """
    path = None
    if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        _check_path_word(argv[0])
        path, argv = argv[0], argv[1:]
    if argv and argv[0] in ("-h", "--help", "--version"):
        return path, argv
    for i, word in enumerate(argv):
        if word in SUBCOMMANDS:
            return path, [word, *argv[:i], *argv[i + 1:]]
    stray = _first_word(argv)
    if stray is not None:
        # `--rot DIR`: the stray word is the value of a mistyped option, which is what to name.
        known = {o for p in parser.subcommands.values() for o in p.options}
        for word in argv[:argv.index(stray)]:
            if word.startswith("-") and word.split("=", 1)[0] not in known:
                given = word.split("=", 1)[0]
                close = nearest_option(given, sorted(known))
                raise BadInput(repr(given), "is not an option", (
                    "" if close is None else f"Did you mean {close!r}? ")
                    + "See `journal-inspect --help`")
        raise not_a_subcommand(stray, SUBCOMMANDS)
    return path, ["summary", *argv]


def _first_word(argv: list[str]) -> str | None:
    """The first word that is neither an option nor the value of ``--root``."""
    words = iter(argv)
    for word in words:
        if word == "--root":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _check_path_word(word: str) -> None:
    if not word:
        raise empty_path("the journal", "Name a journal file, or leave it out and pass "
                         "--root DIR (or nothing, for the per-user root)")
    if os.path.lexists(word):
        return
    if difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6):
        raise not_a_subcommand(word, SUBCOMMANDS, also=", nor a file")
    if "/" not in word and "." not in word:
        raise BadInput(repr(word), "is neither a subcommand nor an existing journal file",
                       f"Check the spelling, or pass --root DIR. {nearest(word, SUBCOMMANDS)}"
                       f"Subcommands: {', '.join(SUBCOMMANDS)}")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    stream = console.Terminal(sys.stdout if out is None else out)
    parser = build_parser()
    try:
        path, words = _arrange(list(sys.argv[1:] if argv is None else argv), parser)
    except BadInput as e:
        return _usage_error(str(e))
    args, extras = parser.parse_known_args(words)
    parser.subcommand(args.command).refuse_extras(extras, args.command, parser.subcommands)
    args.path = path
    try:
        code: int = args.run(args, stream)
        stream.flush()
        return code
    except BrokenPipeError:
        raise
    except (SessionTempError, OSError) as e:
        # JournalError names the file, what is wrong and the fix.
        reason = str(e) if isinstance(e, SessionTempError) else (
            f"{getattr(e, 'filename', None) or ''}: {e.strerror or e}")
        return _usage_error(reason)
    except sqlite3.Error as e:
        where = inspect.locate(path, args.root).journal
        return _usage_error(f"journal {where}: cannot be read ({e}). Check that it is a "
                            "sessiontemp journal")
    except ValueError as e:
        return _usage_error(str(e))
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The console script's entry point."""
    console.prepare()
    console.exit_with(main)


if __name__ == "__main__":
    run()
