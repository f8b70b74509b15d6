"""Where a harness command's and a plain run's time goes, beside their floors; prints Markdown.

    python tools/profile_harness.py [--rounds N] [--runs N] [--root DIR] [--quick]
    python tools/profile_harness.py --spin N [--bare]   # for strace -c -f from outside

Two parts, each timed in one loop, interleaved, medians:

* **P11, a harness command** (``manager.acquire()``, ``lease.popen(["true"])``,
  wait, release; default durability): each round times the command as a
  user writes it, then the same cycle taken apart with ``perf_counter_ns``
  stamps (acquire; ``subprocess.Popen`` with the lease's env and
  descriptors; :meth:`Lease.track`; wait; release), a bare
  ``Popen(["true"])`` with a fixed TMPDIR and wait (the anchor), and the
  floors: the cycle's three records as three autocommit INSERTs into a bare
  WAL table of the journal's columns with ``synchronous=NORMAL`` (what the
  library sets for them), and the two directory descriptors a lease holds
  (open with ``O_DIRECTORY``, shared ``flock``, close), and one read of the
  child's ``/proc/PID/stat`` (the start time its record names).  Then N
  more commands under ``cProfile``, their own time grouped by where the
  code lives.  ``--spin N`` runs N commands and nothing else (``--bare``:
  N bare Popens), for ``strace -c -f`` outside.
* **P9, a plain run** (``sessiontemp run -- true``): the floors, each a
  child in isolated mode (``-I``), run in turn round after round:
  ``import sqlite3``, ``import attrs, sqlite3``, ``import sessiontemp``, the
  run itself, and ``import sessiontemp.run`` (what a plain run imports,
  with nothing run); then one ``-X importtime`` of the run grouped by
  package, and the run's work after its imports, timed in the process by
  ``perf_counter`` (``run_command`` under ``cProfile``, grouped the same way).

The profiler roughly doubles the cost of Python code, not of system calls,
so read its figures as shares.
"""

from __future__ import annotations

import argparse
import cProfile
import fcntl
import functools
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import benchlib

from sessiontemp import Manager
from sessiontemp.journal import ids
from sessiontemp.journal.events import CommandStarted, LeaseAcquired, LeaseReleased, encode


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=400,
                        help="interleaved rounds of the P11 part")
    parser.add_argument("--runs", type=int, default=20,
                        help="interleaved runs of each P9 start-up command")
    parser.add_argument("--part", choices=("p11", "p9", "both"), default="both")
    parser.add_argument("--spin", type=int, default=0, metavar="N",
                        help="only run N harness commands (or with --bare N bare Popens) and "
                             "exit: strace -c -f -o OUT python tools/profile_harness.py "
                             "--spin 2000")
    parser.add_argument("--bare", action="store_true", help="with --spin: bare Popens")


# -- where the code lives -------------------------------------------------------------


def where(filename: str, function: str) -> str:
    """The group a profiled function belongs to."""
    if filename == "~":
        if "sqlite3" in function:
            return "sqlite3 (C)"
        if "_posixsubprocess" in function or "fork_exec" in function:
            return "fork + exec (C)"
        if "waitpid" in function:
            return "waitpid (C)"
        if "posix" in function or "fcntl" in function or "io.open" in function \
                or "read' of '_io" in function:
            return "other system calls (C: open, flock, close, read, pipe)"
        return "other built-ins (C)"
    parts = filename.split(os.sep)
    if "sessiontemp" in parts:
        inner = parts[parts.index("sessiontemp") + 1:]
        package = inner[0] if len(inner) > 1 else inner[0].removesuffix(".py")
        return f"sessiontemp: {package}"
    for name in ("subprocess", "attr", "structlog", "threading", "logging", "contextlib",
                 "weakref", "hashlib", "pathlib", "os.py", "enum"):
        if name in filename:
            return name.removesuffix(".py")
    return "other Python"


def grouped(stats: dict[tuple[str, int, str], Any], per: int) -> list[tuple[str, float]]:
    """Own time by group, in microseconds per *per*, largest first."""
    groups: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, own, _, _) in stats.items():
        groups[where(filename, function)] += own
    return sorted(((name, own / per * 1e6) for name, own in groups.items()),
                  key=lambda kv: -kv[1])


# -- P11 ---------------------------------------------------------------------------------


class Inserts:
    """The cycle's records, bare: one autocommit INSERT each, WAL, ``synchronous=NORMAL``."""

    def __init__(self, path: Path) -> None:
        m, g, lease = ids.new_manager(), ids.new_generation(), ids.new_lease()
        self.rows = [encode(LeaseAcquired(m, g, lease)),
                     encode(CommandStarted(m, g, lease, 12345, 67890)),
                     encode(LeaseReleased(m, g, lease))]
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, time REAL NOT NULL, "
                           "kind TEXT NOT NULL, payload TEXT NOT NULL, digest BLOB NOT NULL)")
        self._digest = os.urandom(32)
        self._seq = 0

    def cycle(self) -> None:
        for kind, payload in self.rows:
            self._seq += 1
            self._conn.execute("INSERT INTO events (seq, time, kind, payload, digest) "
                               "VALUES (?, ?, ?, ?, ?)",
                               (self._seq, time.time(), kind, payload, self._digest))

    def close(self) -> None:
        self._conn.close()


def lock_floor(directories: Sequence[str]) -> Callable[[], None]:
    """Open each directory, take a shared flock on it, then close them: a lease's locks."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

    def locks() -> None:
        fds = [os.open(d, flags) for d in directories]
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        for fd in fds:
            os.close(fd)

    return locks


def stat_floor() -> None:
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        f.read()


PHASES = ("acquire", "Popen (lease's env, fds)", "track", "wait", "release")


def p11(scratch: Path, rounds: int) -> dict[str, Any]:
    fixed = scratch / "fixed-tmpdir"
    fixed.mkdir()
    env = {**os.environ, "TMPDIR": str(fixed)}
    dirs = [scratch / "gen", scratch / "gen" / "tmp"]
    dirs[1].mkdir(parents=True)
    inserts = Inserts(scratch / "floor.sqlite3")
    locks = lock_floor([str(d) for d in dirs])
    manager = Manager(scratch / "root")
    samples: dict[str, list[float]] = defaultdict(list)
    profile = cProfile.Profile()
    profiled = max(rounds, 50)
    try:
        manager.retain()

        harness = functools.partial(benchlib.harness_command, manager)

        def apart() -> None:
            t0 = time.perf_counter_ns()
            lease = manager.acquire()
            t1 = time.perf_counter_ns()
            child = subprocess.Popen(["true"], env={**os.environ, **lease.env()},
                                     pass_fds=lease.pass_fds)
            t2 = time.perf_counter_ns()
            lease.track(child.pid)
            t3 = time.perf_counter_ns()
            child.wait()
            t4 = time.perf_counter_ns()
            lease.release()
            t5 = time.perf_counter_ns()
            stamps = (t0, t1, t2, t3, t4, t5)
            for name, a, b in zip(PHASES, stamps, stamps[1:], strict=False):
                samples[name].append((b - a) / 1e9)
            samples["taken apart"].append((t5 - t0) / 1e9)

        def plain() -> None:
            subprocess.Popen(["true"], env=env).wait()

        timed = benchlib.interleave({"harness": harness, "popen": plain, "apart": apart,
                                     "inserts": inserts.cycle, "locks": locks,
                                     "stat": stat_floor}, rounds, warmup=5)
        for name in ("apart",):
            del timed[name]
        for name, values in samples.items():
            timed[name] = values[-rounds:]

        def many() -> None:
            for _ in range(profiled):
                harness()

        profile.runcall(many)
        manager.release()
    finally:
        manager.close()
        inserts.close()
    stats: dict[tuple[str, int, str], Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(n for _, n, _, _, _ in stats.values()) / profiled
    return {"medians": {k: statistics.median(v) * 1e6 for k, v in timed.items()},
            "ratio": statistics.median(a / b for a, b in zip(timed["harness"], timed["popen"],
                                                             strict=True)),
            "groups": grouped(stats, profiled), "calls": calls, "profiled": profiled,
            "top": top(stats, profiled, 15)}


def top(stats: dict[tuple[str, int, str], Any], per: int, n: int) -> list[tuple[str, float, float]]:
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:n]
    out = []
    for (filename, line, function), (_, ncalls, own, _, _) in rows:
        name = function if filename == "~" else \
            f"{'/'.join(filename.split(os.sep)[-2:])}:{line} {function}"
        out.append((name, ncalls / per, own / per * 1e6))
    return out


def report_p11(f: dict[str, Any], rounds: int) -> None:
    m = f["medians"]
    print(f"P11, a harness command: medians of {rounds} interleaved rounds (us):\n")
    rows: list[Sequence[object]] = [
        ("the harness command (`acquire`, `lease.popen([\"true\"])`, wait, release)",
         f"{m['harness']:.0f}", f"{m['harness'] / m['popen']:.2f}x"),
        ("`Popen([\"true\"])`, fixed TMPDIR, wait (the anchor)", f"{m['popen']:.0f}", "1x"),
        ("the same command taken apart, in all", f"{m['taken apart']:.0f}",
         f"{m['taken apart'] / m['popen']:.2f}x")]
    rows += [(f"- {name}", f"{m[name]:.0f}", "") for name in PHASES]
    rows += [("floor: 3 autocommit INSERTs, WAL, synchronous=NORMAL", f"{m['inserts']:.0f}", ""),
             ("floor: 2 directory opens + shared flocks + closes", f"{m['locks']:.0f}", ""),
             ("floor: one read of /proc/PID/stat", f"{m['stat']:.0f}", "")]
    excess = m["harness"] - m["popen"]
    floors = m["inserts"] + m["locks"] + m["stat"]
    rows += [("excess over the anchor", f"{excess:.0f}", f"{excess / m['popen']:.2f}x"),
             ("of which the floors", f"{floors:.0f}", f"{floors / m['popen']:.2f}x"),
             ("of which the library's own work", f"{excess - floors:.0f}",
              f"{(excess - floors) / m['popen']:.2f}x")]
    benchlib.table(["part", "median (us)", "x anchor"], rows, numeric=(1, 2))
    print(f"Round by round, the harness command over the anchor: {f['ratio']:.2f}x.\n")
    print(f"Under cProfile ({f['profiled']} commands, {f['calls']:.0f} Python calls each), own "
          "time per command:\n")
    total = sum(us for _, us in f["groups"])
    benchlib.table(["where (own time)", "us per command", "share"],
                   [(name, f"{us:.1f}", f"{us / total:.0%}") for name, us in f["groups"]],
                   numeric=(1, 2))
    benchlib.table(["function (own time)", "calls per command", "us per command"],
                   [(f"`{name}`", f"{n:.1f}", f"{us:.1f}") for name, n, us in f["top"]],
                   numeric=(1, 2))


def spin(args: argparse.Namespace) -> None:
    with benchlib.scratch(args.root) as scratch:
        if args.bare:
            env = {**os.environ, "TMPDIR": str(scratch)}
            for _ in range(args.spin):
                subprocess.Popen(["true"], env=env).wait()
            return
        manager = Manager(scratch / "root")
        try:
            manager.retain()
            for _ in range(args.spin):
                lease = manager.acquire()
                try:
                    lease.popen(["true"]).wait()
                finally:
                    lease.release()
            manager.release()
        finally:
            manager.close()


# -- P9 ----------------------------------------------------------------------------------

IMPORT_SQLITE = "import sqlite3"
IMPORT_ATTRS = "import attrs, sqlite3"
IMPORT_LIBRARY = "import sessiontemp"
IMPORT_RUN = "import sessiontemp.__main__"
RUN = "sessiontemp run -- true"
FLOOR = "import sqlite3; N synced commits; spawn true"

# The least a plain run in this process does beyond importing sqlite3: its
# synced commits (single rows into a WAL table, synchronous=FULL, as many as
# a run makes) and the command's spawn and wait.
FLOOR_CODE = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=FULL")
conn.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, kind TEXT, payload TEXT)")
for _ in range(int(sys.argv[2])):
    conn.execute("INSERT INTO events (kind, payload) VALUES ('kind', 'x' * 120)")
conn.close()
pid = os.posix_spawnp("true", ["true"], os.environ)
os.waitpid(pid, 0)
"""

# The run's own work after its imports, timed inside the process.
AFTER_IMPORT = r"""
import cProfile, json, sys, time
t0 = time.perf_counter()
import sessiontemp.__main__
from sessiontemp.run import run_command
t1 = time.perf_counter()
run_command(["true"])
t2 = time.perf_counter()
profile = cProfile.Profile()
profile.runcall(run_command, ["true"])
profile.dump_stats(sys.argv[1])
from sessiontemp.journal.testing import synced_commits
synced = []
with synced_commits(synced.append):
    run_command(["true"])
print(json.dumps({"import": t1 - t0, "run": t2 - t1, "synced": len(synced)}))
"""


def child_env(tmpdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PYTEST_", "SESSIONTEMP_"))}
    env["TMPDIR"] = str(tmpdir)
    return env


def script() -> str:
    found = Path(sys.executable).with_name("sessiontemp")
    return str(found) if found.exists() else ""


def p9(scratch: Path, runs: int) -> dict[str, Any]:
    tmpdir = scratch / "p9-tmp"
    tmpdir.mkdir()
    env = child_env(tmpdir)
    py = [sys.executable, "-I"]
    commands = {IMPORT_SQLITE: [*py, "-c", "import sqlite3"],
                IMPORT_ATTRS: [*py, "-c", "import attrs, sqlite3"],
                IMPORT_LIBRARY: [*py, "-c", "import sessiontemp"],
                IMPORT_RUN: [*py, "-c", "import sessiontemp.__main__"],
                RUN: [*py, "-m", "sessiontemp", "run", "--", "true"]}
    if script():
        commands["the installed script: " + RUN] = [script(), "run", "--", "true"]
    # The run's work after its imports, in the process (and how many synced
    # commits it makes, for the floor below).
    stats_file = scratch / "run.pstats"
    done = subprocess.run([*py, "-c", AFTER_IMPORT, str(stats_file)], cwd=tmpdir, env=env,
                          capture_output=True, text=True, check=True)
    inside = json.loads(done.stdout.strip().splitlines()[-1])
    stats = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    commands[FLOOR.replace("N", str(inside["synced"]))] = [
        *py, "-c", FLOOR_CODE, str(scratch / "p9-floor.sqlite3"), str(inside["synced"])]

    def start(argv: list[str]) -> Callable[[], object]:
        return lambda: subprocess.run(argv, cwd=tmpdir, env=env, check=True,
                                      stdout=subprocess.DEVNULL)

    timed = benchlib.interleave({name: start(argv) for name, argv in commands.items()}, runs,
                                warmup=2)
    medians = {name: statistics.median(v) * 1e3 for name, v in timed.items()}
    # Imports by package, from one -X importtime of the run (self time, microseconds).
    done = subprocess.run([*py, "-X", "importtime", "-m", "sessiontemp", "run", "--", "true"],
                          cwd=tmpdir, env=env, capture_output=True, text=True, check=True)
    packages: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        packages[package_of(name)] += int(own) / 1e3
    return {"medians": medians, "packages": sorted(packages.items(), key=lambda kv: -kv[1]),
            "inside": inside, "groups": grouped(stats, 1), "top": top(stats, 1, 12)}


def package_of(module: str) -> str:
    top_name = module.split(".")[0]
    if top_name == "sessiontemp":
        parts = module.split(".")
        return "sessiontemp" if len(parts) == 1 else f"sessiontemp.{parts[1]}"
    if top_name in ("attr", "attrs"):
        return "attrs"
    if top_name in ("sqlite3", "_sqlite3"):
        return "sqlite3"
    if top_name in ("structlog", "sqlite_utils", "filelock"):
        return top_name
    if top_name in sys.stdlib_module_names or top_name.startswith("_") \
            or top_name in ("encodings",):
        return "stdlib"
    return f"other: {top_name}"


def report_p9(f: dict[str, Any], runs: int) -> None:
    m = f["medians"]
    anchor = m[IMPORT_SQLITE]
    print(f"P9, a plain run: medians of {runs} interleaved runs of each (wall, ms):\n")
    benchlib.table(["command (`python -I`)", "median", f"x `{IMPORT_SQLITE}`"],
                   [(f"`{name}`", f"{ms:.1f}", f"{ms / anchor:.2f}x") for name, ms in m.items()],
                   numeric=(1, 2))
    print("Imports of one `python -I -X importtime -m sessiontemp run -- true`, own time by "
          "package:\n")
    total = sum(ms for _, ms in f["packages"])
    benchlib.table(["package", "ms", "share"],
                   [(name, f"{ms:.1f}", f"{ms / total:.0%}") for name, ms in f["packages"]]
                   + [("all imports", f"{total:.1f}", "100%")], numeric=(1, 2))
    inside = f["inside"]
    print(f"In one process (`perf_counter`): the run's imports {inside['import'] * 1e3:.1f} ms, "
          f"`run_command([\"true\"])` after them {inside['run'] * 1e3:.1f} ms, "
          f"{inside['synced']} synced commits a run. A second "
          "`run_command` under cProfile, own time:\n")
    total = sum(us for _, us in f["groups"])
    benchlib.table(["where (own time)", "ms", "share"],
                   [(name, f"{us / 1e3:.2f}", f"{us / total:.0%}") for name, us in f["groups"]],
                   numeric=(1, 2))
    benchlib.table(["function (own time)", "calls", "ms"],
                   [(f"`{name}`", f"{n:.0f}", f"{us / 1e3:.2f}") for name, n, us in f["top"]],
                   numeric=(1, 2))


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    if args.spin:
        spin(args)
        return
    rounds = 20 if args.quick else args.rounds
    runs = 2 if args.quick else args.runs
    with benchlib.scratch(args.root, prefix="profile-harness-") as scratch:
        print(f"Command: python tools/profile_harness.py --rounds {rounds} --runs {runs} "
              f"--part {args.part}{' --quick' if args.quick else ''}\n"
              f"{benchlib.environment(args.root)}\n")
        if args.part in ("p11", "both"):
            report_p11(p11(scratch, rounds), rounds)
        if args.part in ("p9", "both"):
            report_p9(p9(scratch, runs), runs)


if __name__ == "__main__":
    main()
