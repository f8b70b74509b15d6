"""Sweeps: what a recovery pass finds on disk and removes, and how it reports each.

The pass (:mod:`sessiontemp.recovery.passes`) replays the journal and decides which
generations are orphans; the functions here act on the root for it:

* :func:`remove_orphan` removes a generation of a closed or dead manager
  (or finishes a removal that was started) through the one removal routine
  (:mod:`sessiontemp.recovery.removal`), unless a record the rules refuse names it;
* :func:`sweep_unknown` removes entries of generation or trash name that the
  journal does not know (a lost journal's leftovers, a directory a power loss
  brought back), each once its mtime is older than the pass's *stale_after*
  and never one whose lock is held;
* :func:`sweep_lock_files` removes liveness lock files that no manager will
  use again.

Nothing the journal does not record as the library's own is removed
without both an age guard and a lock probe.  Each removal is journaled
through the pass; an entry that cannot be handled is reported as skipped
(:class:`Skipped`) and does not stop the pass.

The functions see the pass through :class:`Pass`, the few members they
use: the state is the pass's alone, read again through :meth:`Pass.refresh`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from sessiontemp._guards.log import BoundLogger
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel.liveness import take_liveness
from sessiontemp._kernel.locks import try_exclusive
from sessiontemp._kernel.root import (
    MANAGERS_DIR,
    TRASH_PREFIX,
    Root,
    generation_id_of,
    generation_name,
    lock_file_name,
    manager_of_lock_file,
    trash_name,
)
from sessiontemp.journal.errors import JournalError, RuleViolation
from sessiontemp.journal.events import Event, Reappeared, RemovalStarted
from sessiontemp.journal.history import Past, pasts
from sessiontemp.journal.reducer import GenerationState, State, held_by
from sessiontemp.journal.store import Store
from sessiontemp.recovery.removal import Target, remove

__all__ = ["Pass", "Removed", "Skipped", "remove_orphan", "remove_target", "sweep_lock_files",
           "sweep_unknown"]


@attrs.frozen
class Removed:
    """A generation or stray entry a pass removed: its original path, and why."""

    path: Path
    generation: str
    reason: str


@attrs.frozen
class Skipped:
    """An entry a pass had to leave, and why; the next pass tries again."""

    path: Path
    reason: str


class Pass(Protocol):
    """What a sweep needs of the recovery pass it works for."""

    root: Root
    store: Store
    steps: Steps
    stale_after: float
    clock: Callable[[], float]
    removed: list[Removed]
    # Each generation a removal was tried for in this pass, whatever came
    # of it: the sweep of unknown names leaves them be (one entry a path).
    handled: set[str]
    # Bound once per pass with its id: every event a sweep logs carries it.
    log: BoundLogger

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> State:
        """The journal's state the pass decides from (see :meth:`refresh`)."""

    def refresh(self) -> None:
        """Bring :attr:`state` up to the journal's end."""

    def append(self, events: Sequence[Event]) -> None:
        """Journal *events* as the pass's own, then refresh."""

    def skip(self, path: Path, reason: str, generation: str) -> None:
        """Report *path* as left, with why."""

    def owner_done(self, manager_id: str | None) -> bool:
        """Whether the manager *manager_id* (None: no manager) will never act again."""


def remove_orphan(work: Pass, generation: GenerationState) -> None:
    """Remove *generation*, which the pass found orphaned, or report why it is kept."""
    path = work.root.path / generation_name(generation.id)
    held = held_by(work.state, generation)
    if held is not None:
        if not on_disk(work, generation.id):
            # Removed by hand, the documented way out: nothing is kept, so
            # nothing is reported, and the pass carries on quietly.
            return
        work.skip(path, f"kept: event {held}, which the lifecycle rules refuse, names it "
                  "or its manager. Run `journal-inspect verify`; see the documentation's "
                  "faults page, 'A record the rules refuse'", generation.id)
        return
    manager = work.state.managers.get(generation.manager or "")
    if generation.removal == "started":
        reason = generation.removal_reason or "its removal was interrupted"
    elif manager is not None and manager.ended == "dead":
        reason = f"manager {manager.id} (pid {manager.pid}) died"
    else:
        reason = f"manager {generation.manager} closed while it was held"
    target = Target.known(generation, by=work.id, reason=reason, root=str(work.root.path))
    if target.identity is None and generation.manager is None:
        # One that reappeared comes back into the state without its
        # past: its identity is in the journal's records.
        past = pasts(work.store, [generation.id], until=work.state.seq).get(generation.id)
        if past is not None and past.identity is not None:
            target = attrs.evolve(target, identity=past.identity,
                                  commands=target.commands | past.commands)
    remove_target(work, target, path, reason)


def on_disk(work: Pass, generation: str) -> bool:
    """Whether anything is left under *generation*'s name or its trash name."""
    for name in (generation_name(generation), trash_name(generation)):
        try:
            os.stat(name, dir_fd=work.root.fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        return True
    return False


def remove_target(work: Pass, target: Target, path: Path, reason: str) -> None:
    """Remove through the one removal routine, and report how it went."""
    work.handled.add(target.generation)
    try:
        result = remove(work.root.fd, target, journal=work.append, steps=work.steps)
    except JournalError:
        # Not a bad entry but a journal that cannot be written: stop.
        raise
    except RuleViolation as e:
        # The journal's tail refused the removal (nothing was written or
        # touched): what others appended meanwhile says it is not the pass's.
        work.log.info("generation.left", generation=target.generation, path=str(path),
                      reason=e.reason)
        return
    except FileNotFoundError:
        # Gone meanwhile (another remover of a stray): nothing to report.
        return
    except OSError as e:
        work.skip(path, f"removal failed: {e}", target.generation)
        return
    if result.outcome == "busy":
        work.skip(path, f"still in use: {result.detail}", target.generation)
    elif result.outcome == "refused":
        work.skip(path, f"{result.detail}; left alone", target.generation)
    elif result.outcome == "blocked":
        # Each by its own path, once: what a person must fix, and where.
        for entry in result.blocked:
            work.skip(Path(entry.path), f"{entry.reason}. {entry.fix}", target.generation)
    else:
        work.removed.append(Removed(path, target.generation, reason))
        work.log.info(f"generation.{result.outcome}", generation=target.generation,
                      path=str(path), reason=reason)


def sweep_unknown(work: Pass) -> None:
    names = os.listdir(work.root.fd)
    # Listed first, read second: a generation is journaled before its
    # mkdir, so every directory just listed is known to this refresh.
    work.refresh()
    unknown: list[tuple[str, str]] = []
    for name in sorted(names):
        generation = generation_id_of(name)
        if generation is None or generation in work.handled:
            # Not a generation's, or one this pass tried to remove already
            # (a removal refused leaves its directory, reported once).
            continue
        known = work.state.generations.get(generation)
        path = work.root.path / name
        if work.state.held.get(generation) is not None or (
            known is not None and held_by(work.state, known) is not None
        ):
            if known is None:
                work.skip(path, f"kept: event {work.state.held.get(generation)}, which "
                          "the lifecycle rules refuse, names it", generation)
            continue
        if known is None:
            unknown.append((name, generation))
    # Unknown to the state: never journaled (a stray), or journaled as
    # removed and forgotten, which only the records can tell.
    removed = pasts(work.store, {g for _, g in unknown}, until=work.state.seq)
    for name, generation in unknown:
        past = removed.get(generation)
        if past is not None and past.removed:
            remove_reappeared(work, name, past)
        else:
            remove_stray(work, name, generation)


def remove_reappeared(work: Pass, name: str, past: Past) -> None:
    """A generation the journal says is removed, on disk again."""
    path = work.root.path / name
    if past.outcome is not None and past.outcome.startswith("refused"):
        # Not ours: refused once already; a person decides.
        work.skip(path, f"its removal was refused ({past.outcome}); check it "
                  "and remove it by hand", past.id)
        return
    if not work.owner_done(past.manager):
        # Its one writer is its manager for as long as that lives.
        work.skip(path, "journaled as removed, yet on disk again; it is removed once its "
                  f"manager {past.manager} has ended", past.id)
        return
    if past.identity is None:
        # No identity to check it against: treat it as unknown.
        remove_stray(work, name, past.id, reappeared=True)
        return
    reason = "on disk again after its removal (a power loss undid it)"
    gid = past.id
    remove_target(work,
        Target(gid, (generation_name(gid), trash_name(gid)), work.id, Reappeared(gid, work.id),
               str(work.root.path / generation_name(gid)), past.identity, past.commands),
        path, reason,
    )


def remove_stray(work: Pass, name: str, generation: str, *, reappeared: bool = False) -> None:
    """Remove an entry of generation or trash name the journal does not know.

    Only once older than *stale_after*, trash too: nothing the journal
    does not record as the library's own goes without an age guard (and
    the removal's lock probe).  A journal moved aside leaves every
    directory of the old one unknown, and a trash name may have been
    given to a directory by hand.
    """
    is_trash = name.startswith(TRASH_PREFIX)
    try:
        st = os.stat(name, dir_fd=work.root.fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if work.clock() - st.st_mtime < work.stale_after:
        return
    reason = (f"unknown to the journal, left in the trash and older than "
              f"{work.stale_after:g} s" if is_trash else
              f"unknown to the journal and older than {work.stale_after:g} s")
    start: Event = (Reappeared(generation, work.id) if reappeared
                    else RemovalStarted(generation, work.id, reason))
    target = Target(generation, (name,), work.id, start,
                    str(work.root.path / generation_name(generation)))
    remove_target(work, target, work.root.path / name, reason)


def sweep_lock_files(work: Pass) -> None:
    """Remove liveness lock files that no manager will use again.

    A closed manager's file is left when it was killed right after its
    close was journaled, and goes once its lock is free.  A file no
    record names (a manager killed after taking its lock and before the
    journal named it, or every file of a journal moved aside) goes only
    once older than *stale_after* and free: a manager being opened right
    now creates its file a moment before it locks it.  Only the names
    the library gives (``<manager id>.lock``, and the spare name a lock
    file is made under before it is put back) are ever touched.
    """
    managers_fd = work.root.managers_fd
    names = sorted(n for n in os.listdir(managers_fd) if manager_of_lock_file(n) is not None)
    # A manager the state does not hold either ended and was let go of
    # (the journal says so), or was never journaled at all.
    ended = work.store.manager_ends({m for m in map(manager_of_lock_file, names)
                                     if m is not None and m not in work.state.managers})
    for name in names:
        manager_id = manager_of_lock_file(name)
        assert manager_id is not None
        known = work.state.managers.get(manager_id)
        if known is not None and known.ended is None and name == lock_file_name(manager_id):
            continue
        try:
            if (known is None and manager_id not in ended) or name != lock_file_name(
                    manager_id):
                age = work.clock() - os.stat(name, dir_fd=managers_fd,
                                             follow_symlinks=False).st_mtime
                if age < work.stale_after:
                    continue
            fd = take_liveness(managers_fd, manager_id) if name == lock_file_name(
                manager_id) else (
                _probe_file(managers_fd, name)
            )
            if fd is None:
                continue
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=managers_fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            continue
        except OSError as e:
            work.skip(work.root.path / MANAGERS_DIR / name, f"could not be checked ({e})",
                      "")



def _probe_file(dir_fd: int, name: str) -> int | None:
    """The descriptor of *name* locked exclusively if nobody holds it, else None."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                 dir_fd=dir_fd)
    try:
        if try_exclusive(fd):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None

