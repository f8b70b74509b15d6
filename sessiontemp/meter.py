"""A manager's measurements of its current directory, and the refusals they lead to.

:meth:`Meter.measure` walks the current generation (:mod:`sessiontemp.space.usage`)
and journals ``generation.measured``; :meth:`Meter.admit` and
:meth:`Meter.check_disk` are what acquire asks before it hands a directory
out, and refuse with :class:`~sessiontemp.OverBudget` or
:class:`~sessiontemp.LowDisk` (:mod:`sessiontemp.space.budget` words them).

**When it measures.**  A walk costs time in proportion to the tree (about a
microsecond or two per entry in C, several in this walk), so it is never
done on the acquire path, nor on an event loop: a background thread,
started by the first lease, measures at most every ``measure_every``
seconds, and only when the directory may have changed since (a lease was
handed out, or one is held: a command that runs may write).  An idle
session costs nothing, and its journal is not filled with repeats: a
periodic measurement that finds what the last one found is not journaled
again.  After a walk of *d* seconds the thread waits at least ``d * 19``
before the next, so measuring takes at most :data:`SHARE` (5%) of the
process's time, however large the tree.  The walk itself runs in a
child process at a low CPU priority (nice 10: about a tenth of a core a
busy process at nice 0 wants; at 19 it was starved outright on a
saturated machine, and never finished), handed the directory
as a descriptor: a walk in a thread of this process would take the GIL
back after every system call, which cost a busy manager four fifths of
its lease cycles when measured (BENCHMARKS.md); the thread only waits.
An acquire never waits for it: it reads the last measurement in
the state, and walks only when that one says "over budget" and is older
than ``measure_every`` (so a directory cleaned up is let through again,
at once after :meth:`~sessiontemp.Manager.measure`); that walk, too, is
journaled only when it finds something new.

A thread rather than measuring on acquire or release: those are the hot
path (tens of microseconds), and a session's size changes while its
commands run, between them, which only something running on its own sees.

**The disk.**  ``statvfs`` on every acquire (a few microseconds); the
reserve (:mod:`sessiontemp.space.reserve`) is refilled when space allows.  A
root on tmpfs is warned of once per root and process.

**Refusals are journaled** (``space.refused``), so that the history says
which session was turned away, why and when, after the fact.  Not every
one: a caller that retries in a loop must not fill the journal, least of
all a full disk's.  The first refusal of a cause for a directory is
journaled; the same one again only :data:`REFUSALS_EVERY` seconds later,
or once an acquire was let through in between.  On a full disk the
record borrows from the reserve, never its last half
(:func:`sessiontemp.space.reserve.lend`); past that, or when the journal
refuses the record, the refusal is still raised, and logged.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sessiontemp._guards.shield import shielded
from sessiontemp._kernel.root import DIR_FLAGS, WORK_DIR, generation_name
from sessiontemp.handles import Handles
from sessiontemp.journal.errors import JournalError, RuleViolation
from sessiontemp.journal.events import Event, GenerationMeasured, SpaceRefused, decode
from sessiontemp.journal.store import Pending
from sessiontemp.space import budget, disk, reserve, usage
from sessiontemp.space.budget import Limits
from sessiontemp.space.usage import Usage
from sessiontemp.writepath import WritePath

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger

__all__ = ["REFUSALS_EVERY", "SHARE", "Meter"]

# The most of the process's wall-clock time the background measurement takes.
SHARE: Final = 0.05
# How long before the same refusal, nothing let through since, is journaled again.
REFUSALS_EVERY: Final = 60.0
# The background thread's CPU priority (it only waits for its child).
_NICE: Final = 19
# How long a close waits for the background walk to notice it must stop.
_JOIN: Final = 2.0
# The shortest wait between two looks at whether a measurement is due.
_POLL: Final = 0.1
# How many of the journal's last events a refusal for a low disk reads, for
# the sizes of the root's other directories (bounded: a refusal stays cheap).
_LOOKBACK: Final = 100_000
# Roots this process has warned are on tmpfs: once each.
_warned: set[str] = set()
_warned_lock = threading.Lock()


class Meter:
    """The measurements of manager *manager*'s current generation, and its space checks."""

    def __init__(self, manager: str, writer: WritePath, handles: Handles, mutex: threading.RLock,
                 limits: Limits, log: BoundLogger, *, clock: Callable[[], float]) -> None:
        self.manager = manager
        self.limits = limits
        self._writer = writer
        self._handles = handles
        self._mutex = mutex
        self._log = log
        self._clock = clock
        # The floor kept free: min_free_bytes, or the default for the file system.
        self.floor = 0 if limits.min_free_bytes is None else limits.min_free_bytes
        # The last measurement: (generation, usage, time.monotonic() when taken).
        self._last: tuple[str, Usage, float] | None = None
        # What was journaled last, so a periodic repeat is not.
        self._journaled: tuple[str, int, int, int] | None = None
        # The last refusal journaled since an acquire was let through:
        # (cause, generation, the clock's time when journaled).
        self._refused: tuple[str, str, float] | None = None
        self._reserved = False
        self._active = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The child the background walk runs in, while it runs.
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> Path:
        return self._handles.root.path

    def opened(self) -> None:
        """Once the root is open: learn its file system, warn of tmpfs, fill the reserve."""
        fd = self._handles.root.fd
        if self.limits.min_free_bytes is None:
            self.floor = disk.default_min_free(disk.space_of(fd).total)
        path = str(self.root)
        if disk.is_ram(fd):
            with _warned_lock:
                first = path not in _warned
                _warned.add(path)
            if first:
                self._log.warning(
                    "root.tmpfs", path=path, reason="the root lies on a RAM-backed file "
                    "system (tmpfs): what sessions leave in it takes memory, not disk",
                    fix="Pass a root on disk (Manager(root=...), sessiontemp run --root, or "
                    "TMPDIR pointing to a disk)")
        self._reserved = reserve.refill(fd, self.floor)

    # -- what acquire asks ---------------------------------------------------------

    def admit(self) -> None:
        """Refuse with OverBudget if the current directory was last measured over budget.

        Run before the acquire takes the mutex: it may walk the directory.
        """
        if not self.limits.budgeted:
            return
        state = self._writer.state
        me = self._writer.me
        if me.ended is not None or me.sealed or me.owners == 0:
            return  # refused for that under the mutex, with its own reason and fix
        current = me.current
        generation = None if current is None else state.generations.get(current)
        if current is None or generation is None or (
            not budget.over_generation(self.limits, generation)
        ):
            return
        last = self._last
        if last is not None and last[0] == current and (
            time.monotonic() - last[2] < self.limits.measure_every
        ):
            found = last[1]
        else:
            # Over, as measured some time ago (or by a dead owner): whether
            # it still is, and what is big in it, is worth a walk now.  Only
            # news is journaled: a caller retrying in a loop (measure_every=0
            # walks at each try) adds nothing while the directory stays as
            # it was, as a repeated refusal adds nothing.
            found = self.measure(news_only=True)
        if budget.over(self.limits, found.bytes, found.inodes):
            self._log.warning("space.over_budget", path=str(found.path), bytes=found.bytes,
                              inodes=found.inodes, max_bytes=self.limits.max_bytes,
                              max_inodes=self.limits.max_inodes)
            error = budget.over_budget(self.limits, found)
            max_bytes, max_inodes = self.limits.max_bytes, self.limits.max_inodes
            if max_bytes is not None and found.bytes > max_bytes:
                refusal = SpaceRefused(self.manager, current, "max_bytes", found.bytes, max_bytes)
            else:
                assert max_inodes is not None, "over budget, and not in bytes"
                refusal = SpaceRefused(self.manager, current, "max_inodes", found.inodes,
                                       max_inodes)
            self._refuse(refusal)
            raise error

    def check_disk(self) -> None:
        """Refuse with LowDisk below the floor; refill a short reserve.  Under the mutex."""
        fd = self._handles.root.fd
        free = disk.space_of(fd).free
        if free < self.floor:
            self._log.warning("space.low_disk", path=str(self.root), free=free,
                              min_free_bytes=self.floor)
            error = budget.low_disk(self.root, free, self.floor, self._largest())
            self._refuse(SpaceRefused(self.manager, self._writer.me.current or "",
                                      "min_free_bytes", free, self.floor))
            raise error
        # Let through: the next refusal is news again.
        self._refused = None
        if not self._reserved:
            self._reserved = reserve.refill(fd, self.floor)

    def _refuse(self, refusal: SpaceRefused) -> None:
        """Journal *refusal*, unless it repeats the last one (see the module's docstring)."""
        last = self._refused
        # The manager's clock, as its records' times are; one set back
        # counts as time gone by.
        now = float(self._clock())
        if last is not None and last[:2] == (refusal.cause, refusal.generation) and (
            0 <= now - last[2] < REFUSALS_EVERY
        ):
            return
        if refusal.cause == "min_free_bytes":
            # The reserve may be short of a loan now: refilled once there is room.
            self._reserved = False
            if not reserve.lend(self._handles.root.fd):
                self._log.warning("space.refusal_unrecorded", path=str(self.root),
                                  reason="the disk is full, and what is left of the reserve "
                                  "is kept for removals")
                return

        def live() -> bool:
            if not refusal.generation:
                return True
            refused = self._writer.state.generations.get(refusal.generation)
            return refused is not None and refused.removal is None

        if self._journal(refusal, live):
            self._refused = (refusal.cause, refusal.generation, now)

    def leased(self) -> None:
        """A lease was handed out: the directory may change; start measuring it."""
        self._active = True
        if self._thread is None and math.isfinite(self.limits.measure_every):
            thread = threading.Thread(target=self._run, daemon=True,
                                      name=f"sessiontemp-measure-{self.manager[:8]}")
            try:
                thread.start()
            except RuntimeError as e:
                # No thread to be had (RLIMIT_NPROC, memory): the lease
                # stands, unmeasured in the background; the next one tries.
                self._log.warning("space.unmeasured", path=str(self.root), reason=str(e))
                return
            self._thread = thread

    def _largest(self) -> list[tuple[Path, int]]:
        """The largest live directories under the root, as last measured, largest first."""
        sizes: dict[str, int] = {}
        for gid, generation in self._writer.state.generations.items():
            if generation.measured_bytes is not None:
                sizes[gid] = generation.measured_bytes
        store = self._handles.store
        try:
            if store is not None:
                after = max(0, self._writer.state.seq - _LOOKBACK)
                for seq, _, kind, payload in store.rows_where(
                        after=after, kinds=[GenerationMeasured.kind]):
                    event = decode(seq, kind, payload)
                    assert isinstance(event, GenerationMeasured)
                    sizes[event.generation] = event.bytes
        except (JournalError, RuleViolation) as e:
            self._log.debug("space.sizes_unread", reason=str(e))
        live = []
        for gid, size in sizes.items():
            name = generation_name(gid)
            with contextlib.suppress(OSError):
                os.stat(name, dir_fd=self._handles.root.fd, follow_symlinks=False)
                live.append((size, name))
        live.sort(reverse=True)
        return [(self.root / name, size) for size, name in live[:3]]

    # -- measuring -----------------------------------------------------------------

    def measure(self, *, periodic: bool = False, news_only: bool = False) -> Usage:
        """Measure the current generation now and journal it; zeros when there is none.

        Blocking, from any thread: the walk runs without the mutex, which
        is taken only to find and open the directory and to journal.  A
        *periodic* measurement walks in a child process; it, and one with
        *news_only*, is journaled only when it differs from the last one
        journaled.  Never raises for the tree (see :mod:`sessiontemp.space.usage`);
        a journal that refuses the record is logged.
        """
        with self._mutex:
            if self._handles.closed:
                return Usage(self.root)
            current = self._writer.me.current
            known = None if current is None else self._writer.state.generations.get(current)
            if current is None or known is None or not known.ready:
                return Usage(self.root)
            name = generation_name(current)
            path = self.root / name
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=self._handles.root.fd)
                st = os.fstat(fd)
            except OSError:
                return Usage(path)  # gone: it holds nothing
        try:
            if (st.st_dev, st.st_ino) != (known.device, known.inode):
                return Usage(path)  # another directory under its name: not ours to measure
            # What the commands made is in its work directory: measured there,
            # its largest entries are theirs (the generation's one entry would
            # otherwise be named); the generation itself when it has none.
            with contextlib.suppress(OSError):
                work = os.open(WORK_DIR, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd, path = work, path / WORK_DIR
            try:
                # In a child, for the background thread (see measure_elsewhere);
                # here, for a caller who asked to wait for it.
                found = usage.measure_elsewhere(fd, path, self._started) if periodic else (
                    usage.measure_at(fd, path))
            except OSError as e:
                # The directory itself cannot be read (a command made it 000).
                self._log.warning("space.unmeasured", path=str(path), reason=str(e))
                return Usage(path, unread=(".",), unread_count=1)
        finally:
            os.close(fd)
        if found is None:
            return Usage(path)
        self._last = (current, found, time.monotonic())
        self._record(current, found, news_only=periodic or news_only)
        return found

    def _record(self, generation: str, found: Usage, *, news_only: bool) -> None:
        key = (generation, found.bytes, found.inodes, found.unread_count)
        if news_only and key == self._journaled:
            return
        event = GenerationMeasured(self.manager, generation, found.bytes, found.inodes,
                                   float(self._clock()), found.unread_count)

        def live() -> bool:
            # Removed meanwhile: its last size was already said.
            now = self._writer.state.generations.get(generation)
            return now is not None and now.ready and now.removal is None

        if self._journal(event, live):
            self._journaled = key

    def _journal(self, event: Event, live: Callable[[], bool]) -> bool:
        """Append *event* if *live()* still holds under the mutex; True once it is durable.

        Telemetry and records of refusals: a journal that refuses one is
        logged, never raised, and leaves memory and journal agreeing.
        """
        def append() -> Pending | None:
            with self._mutex:
                if self._writer.closed or not live():
                    return None
                return self._writer.append(event, wait=False)

        def journal() -> bool:
            # Appended and waited for with no signal handler in between:
            # memory never runs ahead of the journal.  The wait is outside
            # the mutex (unless the caller holds it), so that other
            # threads' appends join its commit.
            pending = append()
            if pending is None:
                return False
            self._writer.wait(pending)
            return True

        try:
            return shielded(journal)
        except (JournalError, RuleViolation) as e:
            self._log.warning("space.unrecorded", kind=event.kind, reason=str(e))
            return False

    def _due(self) -> bool:
        """Whether the directory may have changed since the last measurement."""
        current = self._writer.me.current
        if current is None:
            return False
        generation = self._writer.state.generations.get(current)
        return generation is not None and generation.ready and (
            self._active or bool(generation.leases))

    def _started(self, child: subprocess.Popen[bytes]) -> None:
        self._child = child
        if self._stop.is_set():
            child.kill()

    def _run(self) -> None:
        """The background thread: measure when due, at most every measure_every seconds.

        It holds no descriptor between walks (a manager dropped unclosed
        lets go of its own from the garbage collector's thread, at any
        moment), and opens one only under the mutex, with the manager open.
        """
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
        delay = self.limits.measure_every
        while not self._stop.wait(max(delay, _POLL)):
            if self._handles.closed or self._handles.forked:
                return
            delay = self.limits.measure_every
            if not self._due():
                continue
            self._active = False
            started = time.monotonic()
            try:
                self.measure(periodic=True)
            except Exception as e:  # a thread of its own: nobody else would hear of it
                self._log.warning("space.measure_failed", reason=str(e))
            spent = time.monotonic() - started
            delay = max(delay, spent * (1 - SHARE) / SHARE)

    def stop(self) -> None:
        """Stop the background measurement (a walk under way ends at once); before a close."""
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            with contextlib.suppress(OSError):
                child.kill()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN)
