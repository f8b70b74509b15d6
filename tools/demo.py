"""A short tour of sessiontemp: a session runs real commands, rotates, crashes, recovers.

Run from a checkout after ``pip install .``::

    python tools/demo.py [--root DIR] [--timeline FILE]

Without --root it works in a fresh temporary directory and removes it at the
end.  Every step prints what happened and what is on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import attrs

from sessiontemp import GENERATION_PREFIX, TRASH_PREFIX, Manager, inspect, recover
from sessiontemp.journal import Store

# The crashing session: a second process with its own manager, which starts
# a long command, reports what it holds, and waits to be killed.
_CRASHING_SESSION = textwrap.dedent(
    """
    import json, sys
    from sessiontemp import Manager
    m = Manager(sys.argv[1])
    m.retain()
    lease = m.acquire(label="long job")
    child = lease.popen(["sh", "-c", "echo partial > $TMPDIR/work; exec sleep 300"])
    print(json.dumps({"dir": str(lease.path), "child": child.pid}), flush=True)
    sys.stdin.read()
    """
)


_IDS = frozenset({"manager", "generation", "lease", "recovery", "by"})


def on_disk(root: Path) -> list[str]:
    return sorted(
        name for name in os.listdir(root) if name.startswith((GENERATION_PREFIX, TRASH_PREFIX))
    )


def say(text: str) -> None:
    print(f"\n== {text}")


def run(root: Path, timeline: Path | None = None) -> None:
    say(f"open session \"chat\" on {root}")
    session = Manager(root, session="chat")
    session.retain()

    say("two commands share the session's private directory")
    with session.acquire(label="two commands") as lease:
        lease.popen(["sh", "-c", 'echo "notes from command 1" > "$TMPDIR/notes"']).wait()
        out = lease.popen(["sh", "-c", 'echo "TMPDIR=$TMPDIR"; cat "$TMPDIR/notes"'],
                          stdout=subprocess.PIPE, text=True).communicate()[0]
        print(out.rstrip())
        print(f"mode {os.stat(lease.path).st_mode & 0o777:04o}, on disk: {on_disk(root)}")

        say("rotate: the running command keeps the old directory, new ones get a fresh one")
        session.rotate()
        with session.acquire(label="after rotate") as fresh:
            seen = fresh.popen(["sh", "-c", 'ls -A "$TMPDIR" | wc -l'],
                               stdout=subprocess.PIPE, text=True).communicate()[0].strip()
            print(f"new command sees {seen} files in {fresh.path.name}")
            print(f"on disk while both are leased: {on_disk(root)}")
    print(f"after the old lease went: {on_disk(root)}")

    say("another session crashes (SIGKILL) while its command still runs")
    crashing = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_SESSION, str(root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert crashing.stdout is not None
    held = json.loads(crashing.stdout.readline())
    os.kill(crashing.pid, signal.SIGKILL)
    crashing.wait()
    print(f"manager process {crashing.pid} killed; its command {held['child']} still runs "
          f"in {Path(held['dir']).name}")

    say("recovery keeps what a running command holds")
    report = recover(root)
    for skipped in report.skipped:
        print(f"kept {skipped.path.name}: {skipped.reason}")
    print(f"dead managers found: {len(report.dead)}, on disk: {on_disk(root)}")

    say("the command exits; the next recovery removes its directory")
    os.kill(held["child"], signal.SIGTERM)
    _wait_gone(held["child"])
    for removed in recover(root).removed:
        print(f"removed {removed.path.name}: {removed.reason}")
    print(f"on disk: {on_disk(root)}")

    say("the session ends: the last release seals it")
    session.release()
    session.close()
    print(f"sealed={session.sealed}, on disk: {on_disk(root)}")

    say("the journal, replayed")
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        for record in store.records():
            # Ids are cut to 8 characters (they are unique well before
            # that); reasons and outcomes are printed whole.
            fields = ", ".join(
                f"{k}={str(v)[:8] if k in _IDS else v}"
                for k, v in attrs.asdict(record.event).items() if v != ""
            )
            print(f"{record.seq:3d} {record.event.kind:<20} {fields}")
        problems = store.verify()
    finally:
        store.close()
    print("journal verifies" if not problems else f"journal problems: {problems}")
    if timeline is not None:
        drawn = inspect.timeline(root / "journal.sqlite3", timeline)
        print(f"timeline of {drawn.generations} generations written to {timeline}")


def _wait_gone(pid: int) -> None:
    # The command is a grandchild of a dead process, so it is reaped by init;
    # polling its existence is the only way left to see it go.
    for _ in range(500):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="root directory (default: a fresh temp dir)")
    parser.add_argument("--timeline", type=Path, metavar="FILE",
                        help="also draw the session's timeline (journal-inspect timeline) here")
    args = parser.parse_args()
    if args.root is not None:
        run(args.root, args.timeline)
        return
    with tempfile.TemporaryDirectory(prefix="sessiontemp-demo-") as scratch:
        run(Path(scratch) / "root", args.timeline)


if __name__ == "__main__":
    main()
