"""What users feel: a test's, a command's and a start-up's cost beside what they use today.

    python tools/bench_user.py [--tests N] [--commands N] [--runs N] [--root DIR] [--quick] [--json]

Three figures, each a ratio to what a user would use instead, both sides
measured in the same run, interleaved, medians:

* **P10, a pytest test asking for a directory**: a generated test module
  holds, round after round, a bare test, one asking for ``tmp_path`` and one
  asking for ``sessiontemp_path``, in that order; one pytest run of it (on
  the plugin's default options, its root under TMPDIR like pytest's own
  base temp) times each test's whole protocol (setup, call, teardown,
  report: a ``pytest_runtest_protocol`` wrapper in a conftest.py), once in
  one process and once with ``-n 2`` (pytest-xdist).  A fixture's cost is
  the median test asking for it minus the median bare test; the goal is
  ``sessiontemp_path``'s at most 1.5x ``tmp_path``'s.  The first test of
  each kind (which opens the manager, or makes pytest's base temp) is left
  out of the medians and shown on its own.
* **P11, a harness command**: ``manager.acquire()``, ``lease.popen(["true"])``,
  wait, release, on a manager of default durability, against
  ``subprocess.Popen(["true"])`` with a fixed TMPDIR and wait, alternately
  in this process; goal at most 1.2x.
* **P9, start-up**: ``sessiontemp run -- true`` against ``python -c "import
  sqlite3"``, goal at most 3x, and the session client, ``sessiontemp run
  --session NAME -- true`` after ``sessiontemp session start NAME``, goal
  at most 2x: measured by tools/bench_startup.py's own loop (its
  :func:`timing`), the one place these figures are taken.

Every child starts in a scratch directory of its own, without the caller's
PYTHON* variables, and every Python child in isolated mode (``-I``; pytest's
xdist workers inherit the directory, which holds only the generated test
module and its conftest.py): each imports the library, pytest and the
standard modules, never a module lying where the benchmark was run from.

``--json`` prints the figures as one JSON object in place of the tables.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import bench_startup
import benchlib

from sessiontemp import Manager

P9_GOAL = bench_startup.GOAL
SESSION_GOAL = bench_startup.SESSION_GOAL
P10_GOAL = 1.5
P11_GOAL = 1.2
KINDS = ("bare", "tmp_path", "sessiontemp_path")

# Times each test's whole protocol, in whichever process runs it (an xdist
# worker writes its own file), and writes the samples when the session ends.
CONFTEST = '''
import json, os, time
import pytest

SAMPLES = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        SAMPLES.append((item.name, time.perf_counter() - start, time.process_time() - cpu))


def pytest_sessionfinish(session):
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["BENCH_USER_SAMPLES"], name + ".json"), "w") as f:
        json.dump(SAMPLES, f)
'''


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tests", type=int, default=300,
                        help="rounds of the generated tests (one of each kind a round)")
    parser.add_argument("--commands", type=int, default=300,
                        help="interleaved rounds of the harness command and of Popen")
    parser.add_argument("--runs", type=int, default=30,
                        help="interleaved runs of each start-up command")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as one JSON object instead of the tables")


def isolated_environ(tmpdir: Path) -> dict[str, str]:
    """The caller's environment without PYTHON* variables, TMPDIR at *tmpdir*."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PYTEST_", "SESSIONTEMP_"))}
    env["TMPDIR"] = str(tmpdir)
    return env


# -- P10: a test asking for a directory -------------------------------------------------


def test_module(rounds: int) -> str:
    lines = []
    for i in range(rounds):
        lines += [f"def test_bare_{i}():\n    pass\n",
                  f"def test_tmp_path_{i}(tmp_path):\n    pass\n",
                  f"def test_sessiontemp_path_{i}(sessiontemp_path):\n    pass\n"]
    return "\n\n".join(lines)


def kind_of(test: str) -> str:
    return test.removeprefix("test_").rsplit("_", 1)[0]


def pytest_run(directory: Path, rounds: int, workers: int
               ) -> tuple[dict[str, list[float]], dict[str, list[float]],
                          dict[str, list[float]]]:
    """Seconds each test's protocol took, by kind, in one pytest run of the generated module.

    Three series: the first test of each kind in each process (which pays
    the session's one-off work: opening the manager, making pytest's base
    temp), all the others, and the others' CPU time (the process's, every
    thread of it: user and system).
    """
    samples = directory / f"samples-{workers}"
    samples.mkdir()
    tmpdir = directory / f"tmp-{workers}"
    tmpdir.mkdir()
    env = {**isolated_environ(tmpdir), "BENCH_USER_SAMPLES": str(samples)}
    argv = [sys.executable, "-I", "-m", "pytest", "-q", "test_user.py"]
    if workers > 1:
        argv += ["-n", str(workers)]
    done = subprocess.run(argv, cwd=directory, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}"
                         f"{done.stderr}")
    firsts: dict[str, list[float]] = {kind: [] for kind in KINDS}
    rest: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for file in sorted(samples.iterdir()):
        seen: set[str] = set()
        for test, seconds, process in json.loads(file.read_text()):  # in the order they ran
            kind = kind_of(test)
            if kind in seen:
                rest[kind].append(seconds)
                cpu[kind].append(process)
            else:
                firsts[kind].append(seconds)
            seen.add(kind)
    ran = [len(firsts[kind]) + len(rest[kind]) for kind in KINDS]
    if ran != [rounds] * len(KINDS):
        raise SystemExit(f"pytest ran {ran} tests of each kind, not {rounds}")
    return firsts, rest, cpu


def p10(scratch: Path, rounds: int) -> dict[str, dict[str, Any]]:
    directory = scratch / "p10"
    directory.mkdir()
    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "conftest.py").write_text(CONFTEST)
    (directory / "test_user.py").write_text(test_module(rounds))
    figures = {}
    for workers in (1, 2):
        first, rest, cpu = pytest_run(directory, rounds, workers)
        firsts = {kind: statistics.median(times) for kind, times in first.items()}
        medians = {kind: statistics.median(rest[kind] or first[kind]) for kind in KINDS}
        cost = {kind: medians[kind] - medians["bare"] for kind in KINDS[1:]}
        cpus = {kind: statistics.median(cpu[kind] or [0.0]) for kind in KINDS}
        ratio = cost["sessiontemp_path"] / cost["tmp_path"] if cost["tmp_path"] > 0 else None
        figures["1 process" if workers == 1 else f"-n {workers}"] = {
            "median_ms": {k: v * 1e3 for k, v in medians.items()},
            "first_ms": {k: v * 1e3 for k, v in firsts.items()},
            "cost_ms": {k: v * 1e3 for k, v in cost.items()},
            "cpu_cost_ms": {k: (cpus[k] - cpus["bare"]) * 1e3 for k in KINDS[1:]},
            "ratio": ratio, "bound": P10_GOAL,
            "met": ratio is not None and ratio <= P10_GOAL,
        }
    return figures


# -- P11: a harness command -------------------------------------------------------------


def p11(scratch: Path, rounds: int) -> dict[str, Any]:
    fixed = scratch / "fixed-tmpdir"
    fixed.mkdir()
    env = {**os.environ, "TMPDIR": str(fixed)}
    manager = Manager(scratch / "p11-root")
    try:
        manager.retain()

        harness = functools.partial(benchlib.harness_command, manager)

        def plain() -> None:
            subprocess.Popen(["true"], env=env).wait()

        samples = benchlib.interleave({"harness": harness, "popen": plain}, rounds, warmup=5)
        manager.release()
    finally:
        manager.close()
    return ratio_figures(samples["harness"], samples["popen"], P11_GOAL)


def ratio_figures(ours: Sequence[float], theirs: Sequence[float], bound: float
                  ) -> dict[str, Any]:
    """Medians (ms) of two interleaved series, their ratio, and the ratio round by round."""
    mine, other = benchlib.median_ms(ours), benchlib.median_ms(theirs)
    rounds = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return {"ms": mine, "anchor_ms": other, "ratio": mine / other,
            "round_by_round": rounds, "bound": bound, "met": mine / other <= bound}


# -- P9: start-up -------------------------------------------------------------------------


def p9(scratch: Path, runs: int) -> dict[str, dict[str, Any]]:
    every = bench_startup.commands()
    names = (bench_startup.RUN, bench_startup.RUN_SESSION, bench_startup.SQLITE)
    start = scratch / "p9"
    start.mkdir()
    wall, _ = bench_startup.timing({name: every[name] for name in names}, runs, start)
    anchor = wall[bench_startup.SQLITE]
    return {bench_startup.RUN: ratio_figures(wall[bench_startup.RUN], anchor, P9_GOAL),
            bench_startup.RUN_SESSION: ratio_figures(wall[bench_startup.RUN_SESSION], anchor,
                                                     SESSION_GOAL)}


# -- output -------------------------------------------------------------------------------


def report(figures: dict[str, Any], command: str, environment: str) -> None:
    print(f"Command: {command}\n{environment}; interpreter {sys.executable}\n")
    tests = figures["P10"]
    print(f"P10, a pytest test asking for a directory: medians of {figures['tests']} tests of "
          "each kind, interleaved in one pytest run (whole protocol: setup, call, teardown, "
          "report); cost = median minus the bare test's median, by the clock and in CPU time (the "
          "process's, every thread, user + system):\n")
    rows: list[Sequence[object]] = []
    for where, f in tests.items():
        rows.append((where, f"{f['median_ms']['bare']:.3f} ms",
                     f"{f['cost_ms']['tmp_path']:.3f} ms",
                     f"{f['cost_ms']['sessiontemp_path']:.3f} ms",
                     "-" if f["ratio"] is None else f"{f['ratio']:.2f}x",
                     f"{f['cpu_cost_ms']['tmp_path']:.3f} ms",
                     f"{f['cpu_cost_ms']['sessiontemp_path']:.3f} ms",
                     f"{f['first_ms']['tmp_path']:.1f} ms",
                     f"{f['first_ms']['sessiontemp_path']:.1f} ms"))
    benchlib.table(["pytest", "bare test", "tmp_path cost", "sessiontemp_path cost", "ratio",
                    "tmp_path cost (cpu)", "sessiontemp_path cost (cpu)",
                    "first tmp_path test", "first sessiontemp_path test"], rows,
                   numeric=(1, 2, 3, 4, 5, 6, 7, 8))
    command_figures = figures["P11"]
    print(f"P11, a harness command: medians of {figures['commands']} interleaved rounds:\n")
    benchlib.table(["command", "median", "ratio", "round by round"], [
        ("`acquire`, `lease.popen([\"true\"])`, wait, release (default durability)",
         f"{command_figures['ms']:.2f} ms", f"{command_figures['ratio']:.2f}x",
         f"{command_figures['round_by_round']:.2f}x"),
        ("`subprocess.Popen([\"true\"])`, fixed TMPDIR, wait",
         f"{command_figures['anchor_ms']:.2f} ms", "1x", "1x")], numeric=(1, 2, 3))
    starts = figures["P9"]
    print(f"P9, start-up: medians of {figures['runs']} interleaved runs (wall), by "
          "tools/bench_startup.py's loop:\n")
    benchlib.table(["command", "median", f"x `{bench_startup.SQLITE}`", "round by round"], [
        *((f"`{name}`", f"{f['ms']:.1f} ms", f"{f['ratio']:.2f}x",
           f"{f['round_by_round']:.2f}x") for name, f in starts.items()),
        (f"`{bench_startup.SQLITE}`",
         f"{starts[bench_startup.RUN]['anchor_ms']:.1f} ms", "1x", "1x")],
        numeric=(1, 2, 3))
    goals: list[Sequence[object]] = []
    for where, f in tests.items():
        goals.append((f"P10 ({where}): `sessiontemp_path`'s cost <= {P10_GOAL:g}x "
                      "`tmp_path`'s", "-" if f["ratio"] is None else f"{f['ratio']:.2f}x",
                      f"{P10_GOAL:g}x", benchlib.verdict(f["ratio"] or float("inf"), P10_GOAL)))
    goals.append((f"P11: a harness command <= {P11_GOAL:g}x Popen",
                   f"{command_figures['ratio']:.2f}x", f"{P11_GOAL:g}x",
                   benchlib.verdict(command_figures["ratio"], P11_GOAL)))
    for name, f in starts.items():
        goals.append((f"P9: `{name}` <= {f['bound']:g}x `{bench_startup.SQLITE}`",
                      f"{f['ratio']:.2f}x", f"{f['bound']:g}x",
                      benchlib.verdict(f["ratio"], f["bound"])))
    benchlib.table(["goal", "figure", "bound", "met"], goals, numeric=(1, 2))


def main() -> None:
    args = benchlib.arguments(__doc__, options)
    tests = 15 if args.quick else args.tests
    commands = 20 if args.quick else args.commands
    runs = 3 if args.quick else args.runs
    measure: dict[str, Callable[[Path], Any]] = {
        "P10": lambda scratch: p10(scratch, tests),
        "P11": lambda scratch: p11(scratch, commands),
        "P9": lambda scratch: p9(scratch, runs),
    }
    figures: dict[str, Any] = {"tests": tests, "commands": commands, "runs": runs}
    with benchlib.scratch(args.root, prefix="bench-user-") as scratch:
        for name, take in measure.items():
            figures[name] = take(scratch)
    command = (f"python tools/bench_user.py --tests {tests} --commands {commands} --runs {runs}"
               f"{' --quick' if args.quick else ''}")
    if args.json:
        print(json.dumps({"command": command, "environment": benchlib.environment(args.root),
                          **figures}, indent=2))
    else:
        report(figures, command, benchlib.environment(args.root))


if __name__ == "__main__":
    main()
