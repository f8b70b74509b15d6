"""A driver process for the load test: threads leasing on one root that other processes share.

Run as ``python tests/loadchild.py ROOT DURABILITY THREADS SECONDS EVERY``.  It opens a
:class:`sessiontemp.Manager` on ROOT with one owner, sets its journal's
maintenance to run every EVERY events (so that its maintenance passes read
what the other processes appended while its own threads append), waits for
a line on stdin (the parent starts every process at once), then THREADS
threads acquire and release leases for SECONDS seconds.  It prints one JSON
line: the events its threads appended, and every error they met (its type
and message), which a process that only had to wait must not have.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from sessiontemp import Manager, handles


def main() -> None:
    root, durability, threads, seconds, every = (
        sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    manager = Manager(root, durability=durability)  # type: ignore[arg-type]
    manager.retain()
    store = handles.of(manager.id).store
    assert store is not None
    store.maintenance_every = every
    manager.acquire().release()
    events = [0] * threads
    errors: list[str] = []
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    deadline = time.monotonic() + seconds

    def work(n: int) -> None:
        while time.monotonic() < deadline:
            try:
                manager.acquire(label="load").release()
            except Exception as e:  # every error is reported to the parent
                errors.append(f"{type(e).__name__}: {e}")
            else:
                events[n] += 2

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    manager.release()
    manager.close()
    sys.stdout.write(json.dumps({"events": sum(events), "errors": errors[:20],
                                 "error_count": len(errors)}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
