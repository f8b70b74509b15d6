"""A driver process for the group-commit crash test: threads leasing through shared commits.

Run as ``python tests/batchchild.py ROOT DURABILITY THREADS``.  It opens a
:class:`sessiontemp.Manager` on ROOT with one owner, then THREADS threads
acquire and release leases in a loop.  Each thread prints ``acquired ID``
as soon as ``acquire`` has returned and ``released ID`` once ``release``
has, one line each, flushed at once: whatever the parent reads was
returned before the process died.  A line ``batched`` says that a commit
held the appends of more than one caller.  The parent kills it with
SIGKILL at a moment of its choosing.
"""

from __future__ import annotations

import sys
import threading

from sessiontemp import Manager
from sessiontemp.journal import testing

_print = threading.Lock()
_batched = threading.Event()


def say(line: str) -> None:
    with _print:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def counting(size: int) -> None:
    if size > 1 and not _batched.is_set():
        _batched.set()
        say("batched")


def main() -> None:
    root, durability, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    testing.record_commits(counting)
    manager = Manager(root, durability=durability)  # type: ignore[arg-type]
    manager.retain()

    def work() -> None:
        while True:
            lease = manager.acquire(label="batch")
            say(f"acquired {lease.id}")
            lease.release()
            say(f"released {lease.id}")

    for _ in range(threads):
        threading.Thread(target=work, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
