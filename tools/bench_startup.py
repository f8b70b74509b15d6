"""Start-up: ``sessiontemp run -- true`` and the session client against ``import sqlite3``.

    python tools/bench_startup.py [--runs N] [--importtime N] [--root DIR] [--quick]

A harness in another language pays a whole ``sessiontemp run`` for every
command it starts through it, so the figure is the whole process, from
spawn to exit status: its wall time and its CPU time (user + system, from
the kernel's accounting of the reaped child).  Beside it, round by round in
one loop, the same interpreter starting bare (``-c pass``), importing
sqlite3 (the goal's denominator: what any Python program that journals in
SQLite pays), importing attrs and sqlite3 (the library's one dependency it
cannot start without: its events and state are attrs classes), and
importing sessiontemp alone.  Every command runs with the interpreter this
script runs with, and the console script beside it: ``python3`` on PATH
may be a shim (pyenv's is a shell script) that adds its own time.  The run
is the goal's command as it stands, on its default root; TMPDIR points at
the scratch directory, so that root is a fresh one there (made by the
warm-up run), not the user's.  Every command starts in the scratch
directory, with no PYTHON* variable of the caller's, and every ``python -c``
in isolated mode (``-I``): each imports the library and the standard
modules, never a module lying in the directory the benchmark was run from.

The session client is measured in the same loop: ``sessiontemp run
--session S -- true`` and ``sessiontemp shell true`` (SESSIONTEMP_SESSION=S)
against a session this script starts on that root (it owns it, and ends
it before it leaves), each with its own bound (2x ``import sqlite3``).

Bytecode: every command is run once first with writing bytecode allowed
(the caller's PYTHONDONTWRITEBYTECODE is not passed on), so the figures are
those of an installed package (whose modules are byte-compiled when
installed); that variable would otherwise compile every module of the
library from source on every start (about twice the instructions here).  That cache goes where
Python puts it (``__pycache__`` beside the sources, ignored by git), the
one thing this benchmark writes outside its scratch directory.

``--instructions``: then counts, with valgrind's callgrind where it is
installed, the instructions each of a ladder of starts executes, one run
each (deterministic, whatever the load): the interpreter, sqlite3, attrs,
the standard modules the library uses, every module a run imports, and the
whole run; each step's difference is what that layer costs.

``--importtime N``: then runs ``python -X importtime`` on the console
script N times and prints the median time each module's own body took
(``self``), grouped and one by one: where the start-up goes.  Those times
include ``-X importtime``'s own cost, so their sum exceeds the wall time.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import benchlib

GOAL = 3.0
SESSION_GOAL = 2.0
RUN = "sessiontemp run -- true"
SESSION = "bench"
RUN_SESSION = f"sessiontemp run --session {SESSION} -- true"
SHELL = "sessiontemp shell true"
SQLITE = 'python -c "import sqlite3"'
ATTRS = 'python -c "import attrs, sqlite3"'
IMPORT = 'python -c "import sessiontemp"'
BARE = 'python -c "pass"'


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=30, help="interleaved runs of each command")
    parser.add_argument("--instructions", action="store_true",
                        help="then count each start's instructions with valgrind (callgrind)")
    parser.add_argument("--importtime", type=int, default=0, metavar="N",
                        help="then N runs under -X importtime: each module's median own time")


def console_script() -> list[str]:
    """The ``sessiontemp`` console script beside this interpreter, or ``python -m sessiontemp``."""
    script = Path(sys.executable).parent / "sessiontemp"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sessiontemp"]


def environ(tmpdir: Path) -> dict[str, str]:
    # None of the caller's PYTHON* variables (PYTHONPATH would add modules,
    # PYTHONDONTWRITEBYTECODE would compile the library at every start).
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
           "TMPDIR": str(tmpdir), "SESSIONTEMP_SESSION": SESSION}
    # The default root under TMPDIR, whatever the caller's environment names.
    env.pop("SESSIONTEMP_ROOT", None)
    return env


def spawn(argv: Sequence[str], env: dict[str, str], stderr: int | None = None) -> float:
    """Run *argv* to its end, output discarded; the CPU seconds it took (user + system)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 1)]
        actions.append((os.POSIX_SPAWN_DUP2, devnull if stderr is None else stderr, 2))
        pid = os.posix_spawn(argv[0], list(argv), env, file_actions=actions)
    finally:
        os.close(devnull)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed with wait status {status}")
    return usage.ru_utime + usage.ru_stime


def commands() -> dict[str, list[str]]:
    python = sys.executable
    return {
        RUN: [*console_script(), "run", "--", "true"],
        RUN_SESSION: [*console_script(), "run", "--session", SESSION, "--", "true"],
        SHELL: [*console_script(), "shell", "true"],
        SQLITE: [python, "-I", "-c", "import sqlite3"],
        ATTRS: [python, "-I", "-c", "import attrs, sqlite3"],
        IMPORT: [python, "-I", "-c", "import sessiontemp"],
        BARE: [python, "-I", "-c", "pass"],
    }


def timing(argvs: dict[str, list[str]], runs: int, scratch: Path
           ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds of each command, *runs* times, interleaved round by round."""
    env = environ(scratch)
    cpu: dict[str, list[float]] = {name: [] for name in argvs}

    def variant(name: str) -> Callable[[], None]:
        def call() -> None:
            cpu[name].append(spawn(argvs[name], env))
        return call

    # Each command starts there (posix_spawn takes the caller's directory).
    with contextlib.chdir(scratch):
        # Owned by this process, ended below (an end is also what its exit would cause).
        spawn([*console_script(), "session", "start", SESSION, "--owner-pid",
               str(os.getpid())], env)
        try:
            # Bytecode written once, as an installed package has it (see the docstring).
            for argv in argvs.values():
                spawn(argv, env)
            wall = benchlib.interleave({name: variant(name) for name in argvs}, runs, warmup=1)
        finally:
            spawn([*console_script(), "session", "end", SESSION, "--owner-pid",
                   str(os.getpid())], env)
    for times in cpu.values():
        del times[:len(times) - runs]  # the warm-up's
    return wall, cpu


def importtimes(argv: Sequence[str], runs: int, scratch: Path) -> dict[str, float]:
    """Each module's median own import time in ms over *runs* runs of *argv* (0 where absent)."""
    env = environ(scratch)
    own: dict[str, list[float]] = collections.defaultdict(list)
    for i in range(runs):
        log = scratch / f"importtime-{i}.txt"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            script = argv[0] if argv[0] != sys.executable else None
            command = [sys.executable, "-X", "importtime",
                       *([script, *argv[1:]] if script else argv[1:])]
            spawn(command, env, stderr=fd)
        finally:
            os.close(fd)
        for line in log.read_text().splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _, name = line[len("import time:"):].split("|")
            own[name.strip()].append(int(self_us) / 1e3)
    return {name: statistics.median([*times, *[0.0] * (runs - len(times))])
            for name, times in own.items()}


GROUPS = (("journal", "journal"), ("sessiontemp", "sessiontemp"), ("attr", "attrs"),
          ("attrs", "attrs"), ("structlog", "structlog"), ("asyncio", "asyncio"),
          ("_sqlite3", "sqlite3"), ("sqlite3", "sqlite3"))


def group_of(module: str) -> str:
    top = module.split(".")[0]
    for prefix, group in GROUPS:
        if top == prefix:
            return group
    return "the rest of the standard library (and site)"


def report_importtime(own: dict[str, float], runs: int, top: int = 25) -> None:
    print(f"Own import time of each module, median of {runs} runs of `python -X importtime "
          f"sessiontemp run -- true` (ms; -X importtime's own cost included):\n")
    groups: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.Counter()
    for module, ms in own.items():
        groups[group_of(module)] += ms
        counts[group_of(module)] += 1
    total = sum(groups.values())
    benchlib.table(["group", "modules", "own time", "share"],
                   [(name, counts[name], f"{ms:.1f} ms", f"{ms / total:.0%}")
                    for name, ms in sorted(groups.items(), key=lambda kv: -kv[1])]
                   + [("all", sum(counts.values()), f"{total:.1f} ms", "100%")],
                   numeric=(1, 2, 3))
    benchlib.table(["module", "own time"],
                   [(f"`{m}`", f"{ms:.2f} ms") for m, ms in
                    sorted(own.items(), key=lambda kv: -kv[1])[:top]], numeric=(1,))


# The standard modules a run imports beyond attrs and sqlite3 (and what they import).
STANDARD = ("base64 ctypes errno fcntl gc hashlib json pathlib resource shlex signal struct "
            "tempfile threading")


def ladder(run: list[str]) -> list[tuple[str, list[str]]]:
    python = sys.executable
    return [
        ("the interpreter: `python -c pass`", [python, "-c", "pass"]),
        ("+ sqlite3: `python -c 'import sqlite3'`", [python, "-c", "import sqlite3"]),
        ("+ attrs", [python, "-c", "import sqlite3, attrs"]),
        ("+ the standard modules a run uses", [
            python, "-c", f"import sqlite3, attrs, {', '.join(STANDARD.split())}"]),
        ("+ every module of a run: `import sessiontemp.__main__`",
         [python, "-c", "import sessiontemp.__main__"]),
        (f"+ the run itself: `{RUN}`", run),
    ]


def instructions(argv: Sequence[str], env: dict[str, str]) -> int:
    """Instructions *argv* executes (its own process, not its children), by callgrind."""
    import subprocess

    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           *argv], env=env, capture_output=True, text=True, check=True)
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[-1])
    raise SystemExit(f"no instruction count from valgrind for {' '.join(argv)}")


def report_instructions(run: list[str], env: dict[str, str]) -> None:
    steps = [(name, instructions(argv, env)) for name, argv in ladder(run)]
    base = steps[1][1]
    rows, before = [], 0
    for name, count in steps:
        rows.append((name, f"{count / 1e6:.1f} M", f"{(count - before) / 1e6:+.1f} M",
                     f"{count / base:.2f}x"))
        before = count
    print("Instructions executed (valgrind --tool=callgrind, one run each; the step's "
          "difference is that layer's cost):\n")
    benchlib.table(["start", "instructions", "this step", "x import sqlite3"], rows,
                   numeric=(1, 2, 3))


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    runs = 3 if args.quick else args.runs
    importtime_runs = min(args.importtime, 1) if args.quick else args.importtime
    if shutil.which("true") is None:
        raise SystemExit("no `true` command on PATH")
    with benchlib.scratch(args.root, prefix="bench-startup-") as scratch:
        argvs = commands()
        wall, cpu = timing(argvs, runs, scratch)
        own = importtimes(argvs[RUN], importtime_runs, scratch) if importtime_runs else {}
    print(f"Command: python tools/bench_startup.py --runs {runs}"
          f"{f' --importtime {importtime_runs}' if importtime_runs else ''}"
          f"{' --instructions' if args.instructions else ''}"
          f"{' --quick' if args.quick else ''}\n{benchlib.environment(args.root)}; "
          f"interpreter {sys.executable}\n")
    base_wall = benchlib.median_ms(wall[SQLITE])
    base_cpu = benchlib.median_ms(cpu[SQLITE])
    rows = []
    for name in argvs:
        w, c = benchlib.median_ms(wall[name]), benchlib.median_ms(cpu[name])
        rows.append((f"`{name}`", f"{w:.1f} ms", f"{w / base_wall:.2f}x", f"{c:.1f} ms",
                     f"{c / base_cpu:.2f}x"))
    print(f"Medians of {runs} interleaved runs each (wall, and CPU: user + system):\n")
    benchlib.table(["command", "wall", f"x {SQLITE}", "cpu", "x (cpu)"], rows,
                   numeric=(1, 2, 3, 4))
    ratio = benchlib.median_ms(wall[RUN]) / base_wall
    rounds = statistics.median(r / s for r, s in zip(wall[RUN], wall[SQLITE], strict=True))
    floor = benchlib.median_ms(wall[ATTRS]) / base_wall
    goals = [(f"`{RUN}` median <= {GOAL:g}x `{SQLITE}`",
              f"{ratio:.2f}x (round by round {rounds:.2f}x; `import attrs, sqlite3` alone "
              f"{floor:.2f}x)", f"{GOAL:g}x", benchlib.verdict(ratio, GOAL))]
    for name in (RUN_SESSION, SHELL):
        of = benchlib.median_ms(wall[name]) / base_wall
        by_round = statistics.median(r / s for r, s in zip(wall[name], wall[SQLITE],
                                                            strict=True))
        goals.append((f"`{name}` median <= {SESSION_GOAL:g}x `{SQLITE}`",
                      f"{of:.2f}x (round by round {by_round:.2f}x)", f"{SESSION_GOAL:g}x",
                      benchlib.verdict(of, SESSION_GOAL)))
    benchlib.table(["goal", "figure", "bound", "met"], goals, numeric=(2,))
    if args.instructions:
        if shutil.which("valgrind") is None:
            print("(--instructions: valgrind is not installed; skipped)")
        else:
            with benchlib.scratch(args.root, prefix="bench-startup-") as scratch:
                env = environ(scratch)
                run = commands()[RUN]
                spawn(run, env)  # makes the root, which a start usually finds
                report_instructions(run, env)
    if own:
        report_importtime(own, importtime_runs)


if __name__ == "__main__":
    main()
