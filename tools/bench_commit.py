"""Benchmark the journal's write path against the cost of bare SQLite commits.

    python tools/bench_commit.py [--rounds N] [--seconds S] [--root DIR] [--profile]

Prints medians from one run, each interleaved round by round with its
floor so that ratios are meaningful on a shared, noisy machine:

- a warm lease cycle (acquire + release on a live generation), in the full
  and the relaxed durability, against two bare single-row commits (WAL,
  ``synchronous=FULL``) of the same size;
- a cold cycle (rotate + acquire + write one file + release) against
  ``mkdtemp`` + ``rmtree`` + two bare commits;
- lease cycles per second from 1, 2, 4, 8 and 16 threads on one manager,
  and from 4 processes with a manager each on one root.

``--profile`` prints instead a cProfile of warm cycles from a non-main
thread (the main thread's hand-off to the worker is measured apart).
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import os
import pstats
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sessiontemp import Manager

PAYLOAD = "x" * 160


class Bare:
    """A SQLite file in WAL with synchronous=FULL taking single-row commits."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, "
                          "time REAL, kind TEXT, payload TEXT, digest BLOB)")

    def commit(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO events (time, kind, payload, digest) VALUES (?, ?, ?, ?)",
                          (time.time(), "lease.acquired", PAYLOAD, os.urandom(16)))
        self.conn.execute("COMMIT")


def interleaved(rounds: int, *operations: Callable[[], object]) -> list[float]:
    """Median microseconds of each operation, run one after the other in every round."""
    samples: list[list[float]] = [[] for _ in operations]
    for _ in range(rounds):
        for i, operation in enumerate(operations):
            start = time.perf_counter()
            operation()
            samples[i].append(time.perf_counter() - start)
    return [statistics.median(s) * 1e6 for s in samples]


def in_thread(operation: Callable[[], object]) -> Callable[[], object]:
    """Run *operation* from a non-main thread, where the manager runs it inline."""
    def run() -> None:
        t = threading.Thread(target=operation)
        t.start()
        t.join()
    return run


def warm_and_cold(root: Path, rounds: int) -> None:
    bare = Bare(root / "bare.sqlite3")
    full = Manager(root / "full")
    relaxed = Manager(root / "relaxed", durability="relaxed")
    for m in (full, relaxed):
        m.retain()
        m.acquire().release()

    def floor() -> None:
        bare.commit()
        bare.commit()

    def warm(m: Manager) -> Callable[[], None]:
        return lambda: m.acquire().release()

    def cold(m: Manager) -> Callable[[], None]:
        def cycle() -> None:
            m.rotate()
            with m.acquire() as lease:
                (lease.path / "f").write_bytes(b"x" * 100)
        return cycle

    def cold_floor() -> None:
        d = tempfile.mkdtemp(dir=root)
        Path(d, "f").write_bytes(b"x" * 100)
        shutil.rmtree(d)
        bare.commit()
        bare.commit()

    f, w, r = interleaved(rounds, floor, warm(full), warm(relaxed))
    print("| operation | median us | ratio to its floor |\n| --- | ---: | ---: |")
    print(f"| two bare commits (floor) | {f:.0f} | 1.00 |")
    print(f"| warm cycle, full, main thread | {w:.0f} | {w / f:.2f} |")
    print(f"| warm cycle, relaxed, main thread | {r:.0f} | {r / f:.2f} |")
    # From another thread the manager runs inline: no hand-off to its worker.
    results: list[float] = []
    thread = threading.Thread(target=lambda: results.extend(
        interleaved(rounds, floor, warm(full), warm(relaxed))))
    thread.start()
    thread.join()
    f, w, r = results
    print(f"| two bare commits (floor), another thread | {f:.0f} | 1.00 |")
    print(f"| warm cycle, full, another thread | {w:.0f} | {w / f:.2f} |")
    print(f"| warm cycle, relaxed, another thread | {r:.0f} | {r / f:.2f} |")
    cf, cfull, crel = interleaved(max(rounds // 2, 5), cold_floor, cold(full), cold(relaxed))
    print(f"| mkdtemp + write + rmtree + two bare commits (floor) | {cf:.0f} | 1.00 |")
    print(f"| cold cycle, full | {cfull:.0f} | {cfull / cf:.2f} |")
    print(f"| cold cycle, relaxed | {crel:.0f} | {crel / cf:.2f} |")
    for m in (full, relaxed):
        m.release()
        m.close()


def threads(root: Path, seconds: float) -> None:
    print("\n| threads on one manager | lease cycles/s | events/s | x one thread |\n"
          "| ---: | ---: | ---: | ---: |")
    base = 0.0
    for n in (1, 2, 4, 8, 16):
        m = Manager(root / f"threads{n}")
        m.retain()
        m.acquire().release()
        counts = [0] * n
        stop = threading.Event()

        def work(i: int, m: Manager = m, counts: list[int] = counts,
                 stop: threading.Event = stop) -> None:
            while not stop.is_set():
                m.acquire().release()
                counts[i] += 1

        workers = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        start = time.perf_counter()
        for t in workers:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in workers:
            t.join()
        rate = sum(counts) / (time.perf_counter() - start)
        base = base or rate
        print(f"| {n} | {rate:.0f} | {2 * rate:.0f} | {rate / base:.2f} |")
        m.release()
        m.close()


def _process(root: str, seconds: float, out: multiprocessing.SimpleQueue[int]) -> None:
    with Manager(root) as m:
        m.retain()
        m.acquire().release()
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            m.acquire().release()
            n += 1
        m.release()
    out.put(n)


def processes(root: Path, seconds: float) -> None:
    print("\n| processes on one root | lease cycles/s | events/s |\n| ---: | ---: | ---: |")
    for n in (1, 4):
        out: multiprocessing.SimpleQueue[int] = multiprocessing.SimpleQueue()
        procs = [multiprocessing.Process(target=_process, args=(str(root / f"procs{n}"),
                                                                seconds, out))
                 for _ in range(n)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        total = sum(out.get() for _ in procs)
        print(f"| {n} | {total / seconds:.0f} | {2 * total / seconds:.0f} |")


def profile(root: Path, rounds: int) -> None:
    m = Manager(root / "profile")
    m.retain()
    m.acquire().release()
    profiler = cProfile.Profile()

    def work() -> None:
        profiler.enable()
        for _ in range(rounds):
            m.acquire().release()
        profiler.disable()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    m.release()
    m.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a small smoke run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 20, 0.3
    with tempfile.TemporaryDirectory(dir=args.root) as tmp:
        root = Path(tmp)
        if args.profile:
            profile(root, args.rounds)
            return
        warm_and_cold(root, args.rounds)
        threads(root, args.seconds)
        processes(root, args.seconds)


if __name__ == "__main__":
    main()
