"""Recovery: after any crash, remove what nobody can use any more, and nothing else.

A pass runs on every Manager open and from :func:`recover`, one at a time
per root (``ROOT/recovery.lock``).  It replays the journal, from the
newest checkpoint on, and writes a new checkpoint when one is due (which
may start a new journal segment, see :mod:`journal.segments`), retires
history the retention rule no longer keeps; then it:

1. declares dead every manager whose liveness lock is free, journaling it;
2. removes every generation of a closed or dead manager, and finishes every
   removal that was started, unless the generation's own lock is still held
   (a command started by a lease outlived its manager): that one is skipped
   and the next pass looks again;
3. sweeps entries with the generation or trash prefix that the journal does
   not know (a lost journal's leftovers), and liveness lock files no record
   names: each once its mtime is older than *stale_after*, and never one
   whose lock is held.

The rule behind 3: nothing the journal does not record as the library's
own is removed without both an age guard and a lock probe.  Artifacts are
never swept at all: a file in ``ROOT/artifacts`` that no record names (its
keeper died between the copy and its record, or the journal was moved
aside) may be the only copy of what a session made.  ``journal-inspect
fsck`` reports it (``unreferenced``) and only an explicit
:func:`sessiontemp.remove_artifact` removes it.

A live manager's generations are never touched: they are its own business.
Nor is the generation a named session's dead owner left, while it is kept
for a resume (:mod:`sessiontemp.sessions`): a pass discards it once its
window has passed (or when the session's new owner, or ``remove_session``,
asks), and it is then removed as any other.
Each removal is journaled; one entry that cannot be handled is logged,
reported as skipped and does not stop the pass.  A removal that has to
leave something (a mount point, another user's subtree, an immutable file:
:mod:`sessiontemp.removal`) removes the rest, reports each such entry by its
own path with the fix, and stays due for the next pass.

The journal is replayed tolerantly: a record the lifecycle rules refuse (a
bug, a forgery, a torn edit) does not stop the pass; everything it names is
held, kept on disk and reported with the record's seq, and the rest of the
root is recovered as usual.  A generation journaled as removed but found
on disk again (directory operations are not fsynced, so a power loss can
undo a removal) is removed again when its identity is the journaled one and
no lock holds it.

The state holds only what is alive or owes work; what the sweep needs of
generations and managers it has let go of (whose a reappeared directory was,
its identity, whether a lock file's manager ended) is read from the
journal's records through indexed :class:`Store` lookups
(:mod:`journal.history`), for the few names found on disk only.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from journal import checkpoint, ids
from journal.errors import JournalError, SessionTempError
from journal.events import (
    ArtifactRemoved,
    Event,
    ManagerDied,
    Reappeared,
    RecoveryStarted,
    RemovalStarted,
    SessionDiscarded,
)
from journal.history import Past, pasts
from journal.reducer import Fold, GenerationState, State, held_by, kept_for_resume
from journal.segments import DEFAULT_RETENTION, Retention
from journal.store import Store
from sessiontemp import artifacts, resources, sessions
from sessiontemp.locks import RecoveryLock, probe_liveness, try_exclusive
from sessiontemp.log import logger
from sessiontemp.removal import Target, remove
from sessiontemp.root import (
    ARTIFACTS_DIR,
    MANAGERS_DIR,
    TRASH_PREFIX,
    Root,
    generation_id_of,
    generation_name,
    lock_file_name,
    os_error,
    trash_name,
)
from sessiontemp.steps import StepHook, Steps

__all__ = ["DEFAULT_STALE_AFTER", "Removed", "Report", "Skipped", "check_stale_after",
           "maintain", "recover", "run"]

# Unknown generation directories, trash and lock files older than this (seconds) are swept.
DEFAULT_STALE_AFTER: Final = 86400.0


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


@attrs.frozen
class Report:
    """What one recovery pass did.  ``ran`` is False when another pass held the root."""

    removed: tuple[Removed, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    dead: tuple[str, ...] = ()
    ran: bool = True
    # For a named session's claimer: the session as the pass left it.
    resumable: sessions.Resumable | None = attrs.field(default=None, repr=False)


def check_stale_after(stale_after: float) -> None:
    """Refuse an age that is not a finite number of seconds >= 0 (NaN compares false to all)."""
    if not (isinstance(stale_after, int | float) and math.isfinite(stale_after)
            and stale_after >= 0):
        raise ValueError(f"stale_after must be a finite number of seconds >= 0, not "
                         f"{stale_after!r}")


def recover(
    root: os.PathLike[str] | str | None = None,
    *,
    stale_after: float = DEFAULT_STALE_AFTER,
    clock: Callable[[], float] = time.time,
    busy_timeout: float = 30.0,
    step_hook: StepHook | None = None,
    retention: Retention = DEFAULT_RETENTION,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Run one recovery pass on *root* (None: the per-user default), waiting for any other.

    *retention* bounds the journal: how large a segment grows and how much
    retired history is kept (see :class:`journal.segments.Retention`).
    *progress* is called with (directories handled, directories to remove)
    as the pass works through the generations it found orphaned.
    A root that does not exist is never created: :class:`~sessiontemp.NoSuchRoot`
    (a mistyped path must not leave a new root behind).
    """
    check_stale_after(stale_after)
    opened = Root.open(root, create=False)
    try:
        # Out of descriptors part-way, the pass stops where it was, as one
        # that failed at a step: the next pass finishes it.
        with resources.translated(opened.path, "the recovery pass stopped"):
            opened.check_journal()
            steps = Steps(step_hook)
            store = Store(opened.journal_path, busy_timeout=busy_timeout, retention=retention,
                          step_hook=steps.before)
            try:
                return run(opened, store, stale_after=stale_after, clock=clock,
                           steps=steps, wait=True, progress=progress)
            finally:
                store.close()
    finally:
        opened.close()


def run(
    root: Root,
    store: Store,
    *,
    stale_after: float,
    clock: Callable[[], float],
    steps: Steps,
    wait: bool,
    claim: sessions.Claim | None = None,
    remove_artifacts: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """One pass over an open root and journal; with *wait* False, skip if another runs.

    *claim* is given by the holder of a session's lock that is about to
    claim it (or to remove it); *remove_artifacts* lists artifacts to
    remove, journaled.  Raises :class:`UnsafeRoot` when the root's path no
    longer names the directory *root* holds: the lock file is opened by path.
    """
    root.check_identity()
    lock = RecoveryLock.take(root, wait=wait)
    if lock is None:
        logger.info("recovery.skipped", path=str(root.path), reason="another pass is running")
        return Report(ran=False)
    try:
        # Again once the lock is held, however long the wait: the pass acts
        # on what the descriptor holds and reports paths under the name.
        root.check_identity()
        work = _Pass(root, store, stale_after=stale_after, clock=clock, steps=steps,
                     claim=claim, remove_artifacts=remove_artifacts)
        work.progress = progress
        report = work.run()
        # A rollover of this pass may have made the segment directory.
        root.hold_existing()
        return report
    except OSError as e:
        if isinstance(e, SessionTempError):
            raise
        # What no step could handle on its own (a listing of the root
        # refused, no descriptor left): named, with the fix, never bare.
        raise os_error(root.path, e, "recovered") from e
    finally:
        lock.release()
        # A manager's store lives on and only appends: the history this pass
        # read is not kept open for it.
        store.release_history()


def maintain(root: Root, store: Store, seq: int = 0, *, clock: Callable[[], float],
             steps: Steps) -> None:
    """Checkpoint and retire history for a process that appends for a long time.

    What a recovery pass does first, without its removals: called by a
    manager's store every so many events (:attr:`Store.maintenance`), in a
    thread of its own, with the *seq* it reached.  Skipped when a recovery pass holds the root (that
    pass does the same); never raises: only the journal's bound is late.
    """
    try:
        lock = RecoveryLock.take(root, wait=False)
    except OSError:
        return
    if lock is None:
        return
    try:
        work = _Pass(root, store, stale_after=DEFAULT_STALE_AFTER, clock=clock, steps=steps)
        work.restore()
        work.refresh()
        work.write_checkpoint(every=store.maintenance_every)
        work.retire()
    except Exception as e:  # nothing may escape into the appending process
        logger.warning("journal.maintenance_failed", path=str(store.path), reason=str(e))
    finally:
        lock.release()
        store.release_history()


class _Pass:
    def __init__(
        self, root: Root, store: Store, *, stale_after: float, clock: Callable[[], float],
        steps: Steps, claim: sessions.Claim | None = None, remove_artifacts: Sequence[str] = (),
    ) -> None:
        self.claim = claim
        self.remove_artifacts = tuple(remove_artifacts)
        self.root = root
        self.store = store
        self.stale_after = stale_after
        self.clock = clock
        self.steps = steps
        self.id = ids.new_recovery()
        self.state = State()
        self.checkpointed = 0
        self.started = False
        self.removed: list[Removed] = []
        self.skipped: list[Skipped] = []
        self.dead: list[str] = []
        self.finished_closing: set[str] = set()
        self.progress: Callable[[int, int], None] | None = None

    def run(self) -> Report:
        self.restore()
        self.refresh()
        # Sooner than a long-lived appender's maintenance: what this pass
        # replayed, the next open need not.
        self.write_checkpoint(every=checkpoint.ON_OPEN)
        self.retire()
        self.bury_dead_managers()
        self.settle_sessions()
        candidates = [g.id for g in self.state.generations.values() if self.orphaned(g)]
        for done, generation_id in enumerate(candidates, start=1):
            # Re-read first: the state may have moved on since the list was
            # made (a manager finishing its close removes its own).
            self.refresh()
            generation = self.state.generations.get(generation_id)
            # None: removed meanwhile, and forgotten by the state.
            if generation is not None and self.orphaned(generation):
                self.remove_known(generation)
            if self.progress is not None:
                self.progress(done, len(candidates))
        self.sweep_unknown()
        self.sweep_lock_files()
        for artifact in self.remove_artifacts:
            self.remove_artifact(artifact)
        if self.started:
            logger.info("recovery.finished", recovery=self.id, removed=len(self.removed),
                        skipped=len(self.skipped), dead=len(self.dead))
        resumable = None if self.claim is None else sessions.resumable(self.state,
                                                                       self.claim.name)
        return Report(tuple(self.removed), tuple(self.skipped), tuple(self.dead),
                      resumable=resumable)

    def restore(self) -> None:
        """Start from the newest usable checkpoint instead of the first event."""
        restored = checkpoint.restore(self.store)
        for seq, reason in restored.skipped:
            logger.warning("checkpoint.skipped", path=str(self.store.path), seq=seq,
                           reason=f"checkpoint {reason}")
        self.state = restored.state
        self.checkpointed = restored.state.seq

    def write_checkpoint(self, *, every: int = checkpoint.EVERY, roll_over: bool = False
                         ) -> None:
        """Write a checkpoint of the state just replayed, if enough events follow the last.

        *roll_over* writes one whatever follows, and starts a new segment with it
        if the active one is still past what retirement lets it hold.
        """
        if not roll_over and not checkpoint.due(self.state, self.checkpointed, every=every):
            return
        self.steps.before("checkpoint", f"event {self.state.seq}")
        try:
            checkpoint.save(self.store, self.state, roll_over=roll_over)
        except JournalError as e:
            # Only speed is lost: the next pass replays a little further.
            logger.warning("checkpoint.failed", path=str(self.store.path),
                           seq=self.state.seq, reason=str(e))
            return
        logger.info("checkpoint.written", path=str(self.store.path), seq=self.state.seq,
                    replayed=self.state.seq - self.checkpointed)
        self.checkpointed = self.state.seq
        if self.store.rollover_failed is not None:
            logger.warning("segment.rollover_failed", path=str(self.store.path),
                           reason=self.store.rollover_failed)
            self.store.rollover_failed = None

    def retire(self) -> None:
        """Delete the retired journal segments the retention rule no longer keeps."""
        if self.state.seq and self.store.rollover_due():
            # The active segment's events leave only whole, once a checkpoint
            # in a newer segment covers them: seal it at one of this state.
            self.write_checkpoint(roll_over=True)
        try:
            removed = self.store.retire(now=self.clock())
        except (JournalError, OSError) as e:
            # Only the bound is late: the next pass tries again.
            logger.warning("segment.retire_failed", path=str(self.store.path), reason=str(e))
            return
        for path in removed:
            logger.info("segment.retired", path=str(path))

    def refresh(self) -> None:
        """Bring the state up to the journal's end, through events others appended.

        Tolerantly: a record the rules refuse is logged, and what it names is
        held (never removed) instead of stopping the pass.
        """
        fold = Fold(self.state, tolerant=True)
        records = self.store.records(after=self.state.seq, tolerant=True)
        try:
            for record in records:
                fold.step(record)
        finally:
            records.close()
        for refused in fold.refused:
            error = self.store.corrupt(refused)
            logger.error("journal.refused", path=str(self.store.path), seq=refused.seq,
                         reason=f"{error.reason}; what it names is kept. {error.fix}")
        self.state = fold.state()

    def append(self, events: Sequence[Event]) -> None:
        if not self.started:
            # Named lazily: a pass with nothing to do leaves no trace.
            events = [RecoveryStarted(self.id, os.getpid()), *events]
            self.started = True
        self.steps.before("journal", ",".join(e.kind for e in events))
        self.store.append(events, time=self.clock())
        # Events of others may sit between ours: catch up with all of them.
        self.refresh()

    def bury_dead_managers(self) -> None:
        for manager in list(self.state.managers.values()):
            if manager.ended is not None:
                continue
            try:
                fd = probe_liveness(self.root.managers_fd, manager.id)
            except FileNotFoundError:
                # Probing would create a new file and always win its lock,
                # declaring dead a manager that may well be alive.
                self.skip(self.root.manager_lock_path(manager.id),
                          f"the liveness lock of manager {manager.id} is missing, so whether "
                          "it lives cannot be told; its generations are left alone", "")
                continue
            except OSError as e:
                # Something else planted at its name: whether it lives cannot be told.
                self.skip(self.root.manager_lock_path(manager.id),
                          f"the liveness lock of manager {manager.id} could not be probed "
                          f"({e}); its generations are left alone", "")
                continue
            if fd is None:
                continue
            try:
                # The lock came free either by death or by close(); close
                # journals before letting go, so re-reading tells them apart.
                self.refresh()
                now = self.state.managers.get(manager.id)
                # None: it ended with nothing left, and the state let it go.
                if now is not None and now.ended is None:
                    self.append([ManagerDied(manager.id, self.id)])
                    self.dead.append(manager.id)
                    logger.warning("manager.dead", manager=manager.id, pid=manager.pid,
                                   recovery=self.id, seq=self.state.seq)
                # Its end is journaled now: the file has served its purpose.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock_file_name(manager.id), dir_fd=self.root.managers_fd)
            finally:
                os.close(fd)

    def settle_sessions(self) -> None:
        """Discard what dead session owners left once it is no longer kept for a resume.

        The claimer's own session goes by its choice (no resume) or by its
        window; any other only once its window has passed, and only while
        this pass holds the session's lock for the instant: a claimer holding
        it may be adopting the generation right now.
        """
        for session in list(self.state.sessions.values()):
            kept = self.state.generations.get(session.kept or "")
            if kept is None or kept_for_resume(self.state, kept) is None:
                continue
            window = f"its resume window of {session.window:g} s passed"
            if self.claim is not None and session.name == self.claim.name:
                if not self.claim.resume:
                    self.append([SessionDiscarded(session.name, self.id, self.claim.why)])
                elif sessions.expired(session, self.clock()):
                    self.append([SessionDiscarded(session.name, self.id, window)])
                continue
            if not sessions.expired(session, self.clock()):
                continue
            try:
                lock = sessions.try_lock(self.root, session.name)
            except OSError as e:
                self.skip(self.root.path / generation_name(kept.id),
                          f"kept for session {session.name}, whose lock could not be taken "
                          f"({e}); it is discarded once it can be", kept.id)
                continue
            if lock is None:
                continue
            try:
                # Read again under the lock: an owner may have claimed it since.
                self.refresh()
                current = self.state.sessions[session.name]
                if current.kept == kept.id and kept_for_resume(self.state, kept) is not None:
                    self.append([SessionDiscarded(session.name, self.id, window)])
            finally:
                lock.close()

    def remove_artifact(self, artifact: str) -> None:
        """Remove an artifact on request: journaled first, then its file unlinked.

        An id the journal keeps no artifact of may still name a file of the
        store (its keeper died before recording it, its removal was cut
        short, the journal was moved aside): asked for by its id, it is
        removed too, once no keeper holds it and the journal, read again
        under its lock, still names no such artifact.
        """
        kept = self.state.artifacts.get(artifact)
        if kept is None:
            self.remove_unrecorded(artifact)
            return
        path = self.root.path / ARTIFACTS_DIR / artifacts.file_name(kept.id, kept.label)
        self.append([ArtifactRemoved(artifact, self.id)])
        self.steps.before("unlink", path.name)
        artifacts.remove_file(self.root, kept)
        self.removed.append(Removed(path, "", artifacts.ON_REQUEST))
        logger.info("artifact.removed", recovery=self.id, path=str(path), seq=self.state.seq)

    def remove_unrecorded(self, artifact: str) -> None:
        """Remove the store's files of *artifact*, which no record keeps, on request."""

        def still_unrecorded(name: str) -> bool:
            # A keeper records before it lets go of its lock: read again.
            self.refresh()
            return artifact not in self.state.artifacts

        for name in artifacts.files_of(self.root, artifact):
            path = self.root.path / ARTIFACTS_DIR / name
            self.steps.before("unlink", name)
            if artifacts.remove_unreferenced(self.root, name, still_unrecorded):
                self.removed.append(Removed(path, "", artifacts.UNRECORDED))
                logger.info("artifact.removed", recovery=self.id, path=str(path),
                            reason=artifacts.UNRECORDED)
            else:
                self.skip(path, "its keeper still holds it, or the journal now keeps it; "
                          "left", "")

    def orphaned(self, generation: GenerationState) -> bool:
        """Whether *generation* is recovery's to remove: nobody else will ever do it.

        Each generation has one writer at a time, which is what keeps the
        journal consistent without cross-checking appends: its manager while
        that lives, then the recovery passes, one at a time.
        """
        if generation.removal is None and kept_for_resume(self.state, generation) is not None:
            # Its session's next owner may still adopt it.
            return False
        return self.owner_done(generation.manager)

    def owner_done(self, manager_id: str | None) -> bool:
        """Whether the manager *manager_id* (None: no manager) will never act again."""
        if manager_id is None:
            # A stray whose removal a crashed pass began.
            return True
        manager = self.state.managers.get(manager_id)
        if manager is None:
            # Ended with nothing left to remove: the state let it go.
            return True
        if manager.ended == "dead":
            return True
        # A closed manager may still be inside close(), removing its own
        # generations, until it lets its liveness lock go.
        return manager.ended == "closed" and self.let_go(manager.id)

    def let_go(self, manager_id: str) -> bool:
        """Whether a closed manager has given up its liveness lock."""
        if manager_id not in self.finished_closing:
            try:
                fd = probe_liveness(self.root.managers_fd, manager_id)
            except FileNotFoundError:
                fd = -1
            except OSError:
                # Something else at its name: it may still be closing.
                return False
            if fd is None:
                return False
            if fd >= 0:
                os.close(fd)
            # Once let go, never taken again: remember it for this pass.
            self.finished_closing.add(manager_id)
        return True

    def remove_known(self, generation: GenerationState) -> None:
        path = self.root.path / generation_name(generation.id)
        held = held_by(self.state, generation)
        if held is not None:
            if not self.on_disk(generation.id):
                # Removed by hand, the documented way out: nothing is kept, so
                # nothing is reported, and the pass carries on quietly.
                return
            self.skip(path, f"kept: event {held}, which the lifecycle rules refuse, names it "
                      "or its manager. Run `journal-inspect verify`; see the documentation's "
                      "faults page, 'A record the rules refuse'", generation.id)
            return
        manager = self.state.managers.get(generation.manager or "")
        if generation.removal == "started":
            reason = generation.removal_reason or "its removal was interrupted"
        elif manager is not None and manager.ended == "dead":
            reason = f"manager {manager.id} (pid {manager.pid}) died"
        else:
            reason = f"manager {generation.manager} closed while it was held"
        target = Target.known(generation, by=self.id, reason=reason, root=str(self.root.path))
        if target.identity is None and generation.manager is None:
            # One that reappeared comes back into the state without its
            # past: its identity is in the journal's records.
            past = pasts(self.store, [generation.id], until=self.state.seq).get(generation.id)
            if past is not None and past.identity is not None:
                target = attrs.evolve(target, identity=past.identity,
                                      commands=target.commands | past.commands)
        self.remove_target(target, path, reason)

    def on_disk(self, generation: str) -> bool:
        """Whether anything is left under *generation*'s name or its trash name."""
        for name in (generation_name(generation), trash_name(generation)):
            try:
                os.stat(name, dir_fd=self.root.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            return True
        return False

    def remove_target(self, target: Target, path: Path, reason: str) -> None:
        """Remove through the one removal routine, and report how it went."""
        try:
            result = remove(self.root.fd, target, journal=self.append, steps=self.steps)
        except JournalError:
            # Not a bad entry but a journal that cannot be written: stop.
            raise
        except FileNotFoundError:
            # Gone meanwhile (another remover of a stray): nothing to report.
            return
        except OSError as e:
            self.skip(path, f"removal failed: {e}", target.generation)
            return
        if result.outcome == "busy":
            self.skip(path, f"still in use: {result.detail}", target.generation)
        elif result.outcome == "refused":
            self.skip(path, f"{result.detail}; left alone", target.generation)
        elif result.outcome == "blocked":
            # Each by its own path, once: what a person must fix, and where.
            for entry in result.blocked:
                self.skip(Path(entry.path), f"{entry.reason}. {entry.fix}", target.generation)
        else:
            self.removed.append(Removed(path, target.generation, reason))
            logger.info(f"generation.{result.outcome}", recovery=self.id,
                        generation=target.generation, path=str(path), reason=reason)

    def sweep_unknown(self) -> None:
        names = os.listdir(self.root.fd)
        # Listed first, read second: a generation is journaled before its
        # mkdir, so every directory just listed is known to this refresh.
        self.refresh()
        unknown: list[tuple[str, str]] = []
        for name in sorted(names):
            generation = generation_id_of(name)
            if generation is None:
                continue
            known = self.state.generations.get(generation)
            path = self.root.path / name
            if self.state.held.get(generation) is not None or (
                known is not None and held_by(self.state, known) is not None
            ):
                if known is None:
                    self.skip(path, f"kept: event {self.state.held.get(generation)}, which "
                              "the lifecycle rules refuse, names it", generation)
                continue
            if known is None:
                unknown.append((name, generation))
        # Unknown to the state: never journaled (a stray), or journaled as
        # removed and forgotten, which only the records can tell.
        removed = pasts(self.store, {g for _, g in unknown}, until=self.state.seq)
        for name, generation in unknown:
            past = removed.get(generation)
            if past is not None and past.removed:
                self.remove_reappeared(name, past)
            else:
                self.remove_stray(name, generation)

    def remove_reappeared(self, name: str, past: Past) -> None:
        """A generation the journal says is removed, on disk again."""
        path = self.root.path / name
        if past.outcome is not None and past.outcome.startswith("refused"):
            # Not ours: refused once already; a person decides.
            self.skip(path, f"its removal was refused ({past.outcome}); check it "
                      "and remove it by hand", past.id)
            return
        if not self.owner_done(past.manager):
            # Its one writer is its manager for as long as that lives.
            self.skip(path, "journaled as removed, yet on disk again; it is removed once its "
                      f"manager {past.manager} has ended", past.id)
            return
        if past.identity is None:
            # No identity to check it against: treat it as unknown.
            self.remove_stray(name, past.id, reappeared=True)
            return
        reason = "on disk again after its removal (a power loss undid it)"
        gid = past.id
        self.remove_target(
            Target(gid, (generation_name(gid), trash_name(gid)), self.id, Reappeared(gid, self.id),
                   str(self.root.path / generation_name(gid)), past.identity, past.commands),
            path, reason,
        )

    def remove_stray(self, name: str, generation: str, *, reappeared: bool = False) -> None:
        """Remove an entry of generation or trash name the journal does not know.

        Only once older than *stale_after*, trash too: nothing the journal
        does not record as the library's own goes without an age guard (and
        the removal's lock probe).  A journal moved aside leaves every
        directory of the old one unknown, and a trash name may have been
        given to a directory by hand.
        """
        is_trash = name.startswith(TRASH_PREFIX)
        try:
            st = os.stat(name, dir_fd=self.root.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if self.clock() - st.st_mtime < self.stale_after:
            return
        reason = (f"unknown to the journal, left in the trash and older than "
                  f"{self.stale_after:g} s" if is_trash else
                  f"unknown to the journal and older than {self.stale_after:g} s")
        start: Event = (Reappeared(generation, self.id) if reappeared
                        else RemovalStarted(generation, self.id, reason))
        target = Target(generation, (name,), self.id, start,
                        str(self.root.path / generation_name(generation)))
        self.remove_target(target, self.root.path / name, reason)

    def sweep_lock_files(self) -> None:
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
        managers_fd = self.root.managers_fd
        names = sorted(n for n in os.listdir(managers_fd) if _manager_of(n) is not None)
        # A manager the state does not hold either ended and was let go of
        # (the journal says so), or was never journaled at all.
        ended = self.store.manager_ends({
            m for m in map(_manager_of, names) if m is not None and m not in self.state.managers})
        for name in names:
            manager_id = _manager_of(name)
            assert manager_id is not None
            known = self.state.managers.get(manager_id)
            if known is not None and known.ended is None and name == lock_file_name(manager_id):
                continue
            try:
                if (known is None and manager_id not in ended) or name != lock_file_name(
                        manager_id):
                    age = self.clock() - os.stat(name, dir_fd=managers_fd,
                                                 follow_symlinks=False).st_mtime
                    if age < self.stale_after:
                        continue
                fd = probe_liveness(managers_fd, manager_id) if name.endswith(".lock") else (
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
                self.skip(self.root.path / MANAGERS_DIR / name, f"could not be checked ({e})",
                          "")

    def skip(self, path: Path, reason: str, generation: str) -> None:
        self.skipped.append(Skipped(path, reason))
        logger.warning("generation.skipped", recovery=self.id, generation=generation,
                       path=str(path), reason=reason)


def _manager_of(name: str) -> str | None:
    """The manager a name in ``ROOT/managers`` belongs to, None if the library never gives it.

    ``<id>.lock``, or ``.<id>.lock.<hex>``: the spare a lock file is made
    under before it is renamed into place (:meth:`Liveness.check`).
    """
    if name.startswith("."):
        stem, dot, tag = name[1:].rpartition(".")
        if not dot or not tag or any(c not in "0123456789abcdef" for c in tag):
            return None
        name = stem
    manager = name.removesuffix(".lock")
    return manager if manager != name and ids.MANAGER.fullmatch(manager) else None


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
