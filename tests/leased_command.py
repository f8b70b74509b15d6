"""A command started through a lease that lets go of the lease's lock, for tests/test_liveness.py.

    python leased_command.py MODE READY RESULT SECONDS [DIRECTORY]

It drops every descriptor it inherited (the lease's lock with them), the
way sudo, ssh and daemonizing tools do, then announces the pid of the
process that does the work by creating the file READY, and writes a new
file into its directory every 20 ms for SECONDS.  At the end it writes to
RESULT "ok" if every write succeeded and every file is still there, or what
went wrong.  MODE:

* ``closerange``: closes its descriptors and works in ``$TMPDIR``;
* ``reset-env``: closes its descriptors, then re-executes itself with an
  empty environment (as sudo's env_reset does) to work in the directory
  given on its command line: nothing in /proc names the directory;
* ``daemon-env``: daemonizes (fork, setsid, fork; the first two exit), the
  grandchild closes every descriptor and works in ``$TMPDIR`` from ``/``;
* ``daemon-cwd``: daemonizes, and the grandchild changes into the directory
  and re-executes itself with an empty environment to work in ``.``;
* ``leader-exits``: closes its descriptors, works in ``$TMPDIR`` from a second
  thread and ends its main thread (``pthread_exit``): /proc shows the
  process as a zombie while that thread still writes;
* ``work``: the re-executed worker of the modes above (DIRECTORY given).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time


def work(where: str, ready: str, result: str, seconds: float) -> None:
    announce(ready)
    written = 0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with open(os.path.join(where, f"part-{written}"), "w") as f:
                f.write("x" * 512)
            written += 1
            time.sleep(0.02)
        missing = written - len(os.listdir(where))
        outcome = "ok" if missing == 0 and written > 0 else f"{missing} of {written} files vanished"
    except OSError as e:
        outcome = f"failed after {written} files: {e}"
    with open(result + ".tmp", "w") as f:
        f.write(outcome)
    os.rename(result + ".tmp", result)


def announce(ready: str) -> None:
    # Renamed into place: the test never reads a half-written pid.
    with open(ready + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(ready + ".tmp", ready)


def close_inherited(*, standard: bool) -> None:
    os.closerange(0 if standard else 3, 4096)
    if standard:
        for _ in range(3):
            os.open(os.devnull, os.O_RDWR)


def reexec(directory: str, ready: str, result: str, seconds: str) -> None:
    # An empty environment on purpose (S606: no shell involved).
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), "work",  # noqa: S606
                               ready, result, seconds, directory], {})


def daemonize() -> bool:
    """Fork twice; True in the grandchild, while the original process exits."""
    if os.fork() != 0:
        os.wait()
        sys.exit(0)
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    return True


def main() -> None:
    mode, ready, result, seconds = sys.argv[1:5]
    if mode == "work":
        work(sys.argv[5], ready, result, float(seconds))
    elif mode == "closerange":
        close_inherited(standard=False)
        work(os.environ["TMPDIR"], ready, result, float(seconds))
    elif mode == "reset-env":
        close_inherited(standard=False)
        reexec(os.environ["TMPDIR"], ready, result, seconds)
    elif mode == "daemon-env":
        daemonize()
        close_inherited(standard=True)
        os.chdir("/")
        work(os.environ["TMPDIR"], ready, result, float(seconds))
    elif mode == "daemon-cwd":
        daemonize()
        close_inherited(standard=True)
        os.chdir(os.environ["TMPDIR"])
        reexec(".", ready, result, seconds)
    elif mode == "leader-exits":
        close_inherited(standard=False)
        threading.Thread(target=work, args=(os.environ["TMPDIR"], ready, result,
                                            float(seconds))).start()
        ctypes.CDLL(None).pthread_exit(None)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
