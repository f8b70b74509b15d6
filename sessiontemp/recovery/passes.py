"""Recovery: after any crash, remove what nobody can use any more, and nothing else.

This module is the pass: it replays, decides and journals.  What it finds
on disk and removes (orphaned generations, trash, strays, lock files) is
done by :mod:`sessiontemp.recovery.sweeps` on its behalf, and the public calls that
run a pass on a root are in :mod:`sessiontemp.recovery.cleanup`.

A pass runs on every Manager open and from :func:`sessiontemp.recover`, one at a time
per root (``ROOT/recovery.lock``).  It replays the journal, from the
newest checkpoint on, and writes a new checkpoint when one is due (which
may start a new journal segment, see :mod:`sessiontemp.journal.segments`), retires
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
:mod:`sessiontemp.recovery.removal`) removes the rest, reports each such entry by its
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
(:mod:`sessiontemp.journal.history`), for the few names found on disk only.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from sessiontemp import artifacts, sessions
from sessiontemp._guards.log import logger
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel.liveness import RecoveryLock, take_liveness
from sessiontemp._kernel.root import (
    ARTIFACTS_DIR,
    Root,
    generation_name,
    lock_file_name,
    os_error,
)
from sessiontemp.journal import checkpoint, ids
from sessiontemp.journal.errors import BadInput, JournalError, RuleViolation, SessionTempError
from sessiontemp.journal.events import (
    ArtifactRemoved,
    Event,
    ManagerDied,
    RecoveryStarted,
    SessionDiscarded,
)
from sessiontemp.journal.ledger import Ledger
from sessiontemp.journal.reducer import (
    EMPTY,
    Fold,
    GenerationState,
    State,
    kept_for_resume,
    replay,
)
from sessiontemp.journal.store import Store
from sessiontemp.recovery.sweeps import (
    Removed,
    Skipped,
    remove_orphan,
    sweep_lock_files,
    sweep_unknown,
)
from sessiontemp.space import reserve

__all__ = ["DEFAULT_STALE_AFTER", "Removed", "Report", "Skipped", "check_stale_after",
           "maintain", "run"]

# Unknown generation directories, trash and lock files older than this (seconds) are swept.
DEFAULT_STALE_AFTER: Final = 86400.0


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
        raise BadInput("stale_after", f"must be a finite number of seconds >= 0, not "
                       f"{stale_after!r}", "Pass a number of seconds, such as 86400 for a day")


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
    reached: Callable[[State], None] | None = None,
) -> Report:
    """One pass over an open root and journal; with *wait* False, skip if another runs.

    *claim* is given by the holder of a session's lock that is about to
    claim it (or to remove it); *remove_artifacts* lists artifacts to
    remove, journaled; *reached* is handed the journal's state where the
    pass ends (a manager's ledger follows it from there).  Raises
    :class:`UnsafeRoot` when the root's path no longer names the directory
    *root* holds: the lock file is opened by path.
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
        # A pass journals what it removes: on a full disk, into the reserve.
        reserve.make_room(root.fd)
        work = _Pass(root, store, stale_after=stale_after, clock=clock, steps=steps,
                     claim=claim, remove_artifacts=remove_artifacts)
        work.progress = progress
        report = work.run()
        if reached is not None:
            reached(work.state)
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


def maintain(root: Root, store: Store, seq: int = 0, state: State | None = None, *,
             clock: Callable[[], float], steps: Steps) -> None:
    """Checkpoint and retire history for a process that appends for a long time.

    What a recovery pass does first, without its removals: called by a
    manager's ledger every so many events (:attr:`Store.maintenance_every`),
    in a thread of its own, with the *seq* it reached and, when the ledger
    holds it, *state*, the journal's whole state: only the events after it
    are read, where without it the pass restores the newest checkpoint and
    replays every event since.  Skipped when a recovery pass holds the root
    (that pass does the same); never raises: only the journal's bound is late.
    """
    try:
        lock = RecoveryLock.take(root, wait=False)
    except OSError:
        return
    if lock is None:
        return
    try:
        work = _Pass(root, store, stale_after=DEFAULT_STALE_AFTER, clock=clock, steps=steps)
        if state is None:
            work.restore()
        else:
            work.ledger.reset(state)
            work.checkpointed = checkpoint.newest(store)
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
        # The journal's whole state, the one the pass decides from: brought
        # to the tail by the ledger (catch_up), by each append (inside its
        # transaction) and by each rollover (what the new segment starts from).
        self.ledger: Ledger[State] = Ledger(store, replay, EMPTY,
                                            whole=functools.partial(Fold, tolerant=True))
        self.checkpointed = 0
        self.started = False
        self.removed: list[Removed] = []
        self.handled: set[str] = set()
        self.skipped: list[Skipped] = []
        self.dead: list[str] = []
        self.finished_closing: set[str] = set()
        self.progress: Callable[[int, int], None] | None = None
        # Bound once for the pass: what it removes and leaves carries its
        # id; what it does to the journal, the journal's path.
        self.log = logger.bind(recovery=self.id)
        self.journal_log = logger.bind(path=str(store.path))

    @property
    def state(self) -> State:
        """The journal's state as far as the pass has read it, its own appends included."""
        return self.ledger.state

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
                remove_orphan(self, generation)
            if self.progress is not None:
                self.progress(done, len(candidates))
        sweep_unknown(self)
        sweep_lock_files(self)
        for artifact in self.remove_artifacts:
            self.remove_artifact(artifact)
        if self.started:
            self.log.info("recovery.finished", removed=len(self.removed),
                          skipped=len(self.skipped), dead=len(self.dead))
        resumable = None if self.claim is None else sessions.resumable(self.state,
                                                                       self.claim.name)
        return Report(tuple(self.removed), tuple(self.skipped), tuple(self.dead),
                      resumable=resumable)

    def restore(self) -> None:
        """Start from the newest usable checkpoint instead of the first event."""
        restored = checkpoint.restore(self.store)
        for seq, reason in restored.skipped:
            self.journal_log.warning("checkpoint.skipped", seq=seq, reason=f"checkpoint {reason}")
        self.ledger.reset(restored.state)
        self.checkpointed = restored.state.seq

    def write_checkpoint(self, *, every: int = checkpoint.EVERY, roll_over: bool = False
                         ) -> None:
        """Write a checkpoint of the state just replayed, if enough events follow the last.

        *roll_over* writes one whatever follows, and starts a new segment with it
        if the active one is still past what retirement lets it hold.  A new
        segment starts from the state at the journal's tail, records others
        appended since the replay included: the ledger folds them in as the
        pass's own state, before the retirement after it deletes them.
        """
        seq = self.state.seq
        if not roll_over and not checkpoint.due(self.state, self.checkpointed, every=every):
            return
        self.steps.before("checkpoint", f"event {seq}")
        try:
            checkpoint.save(self.store, self.state, roll_over=roll_over,
                            catch_up=self.ledger.catch_up_with)
        except JournalError as e:
            # Only speed is lost: the next pass replays a little further.
            self.journal_log.warning("checkpoint.failed", seq=seq, reason=str(e))
            return
        finally:
            self.report_refused()
        self.journal_log.info("checkpoint.written", seq=seq, replayed=seq - self.checkpointed)
        self.checkpointed = seq
        if self.store.rollover_failed is not None:
            self.journal_log.warning("segment.rollover_failed",
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
            self.journal_log.warning("segment.retire_failed", reason=str(e))
            return
        for path in removed:
            logger.info("segment.retired", path=str(path))

    def refresh(self) -> None:
        """Bring the state up to the journal's end, through events others appended.

        Tolerantly: a record the rules refuse is logged, and what it names is
        held (never removed) instead of stopping the pass.
        """
        self.ledger.catch_up()
        self.report_refused()

    def report_refused(self) -> None:
        refused, self.ledger.refused = self.ledger.refused, []
        for violation in refused:
            error = self.store.corrupt(violation)
            self.journal_log.error("journal.refused", seq=violation.seq,
                                   reason=f"{error.reason}; what it names is kept. {error.fix}")

    def append(self, events: Sequence[Event]) -> None:
        """Journal *events*, decided by the rules on the journal as it is at its tail.

        Raises :class:`RuleViolation`, with nothing written, when the
        records others appended meanwhile make them wrong.
        """
        started = self.started
        if not started:
            # Named lazily: a pass with nothing to do leaves no trace.
            events = [RecoveryStarted(self.id, os.getpid()), *events]
        self.steps.before("journal", ",".join(e.kind for e in events))
        try:
            self.ledger.append(tuple(events), time=self.clock())
        finally:
            self.report_refused()
        self.started = True

    def bury_dead_managers(self) -> None:
        for manager in list(self.state.managers.values()):
            if manager.ended is not None:
                continue
            try:
                fd = take_liveness(self.root.managers_fd, manager.id)
            except FileNotFoundError:
                # A manager's close journals its end before it removes the
                # file: one that closed since this pass last read the journal
                # is told by its tail, not reported as missing.
                self.refresh()
                now = self.state.managers.get(manager.id)
                if now is None or now.ended is not None:
                    continue
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
                    try:
                        self.append([ManagerDied(manager.id, self.id)])
                    except RuleViolation as e:
                        # Its end was journaled meanwhile: the journal's tail said no.
                        self.log.info("manager.ended", manager=manager.id, reason=e.reason)
                    else:
                        self.dead.append(manager.id)
                        self.log.warning("manager.dead", manager=manager.id, pid=manager.pid,
                                         seq=self.state.seq)
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
        self.log.info("artifact.removed", path=str(path), seq=self.state.seq)

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
                self.log.info("artifact.removed", path=str(path), reason=artifacts.UNRECORDED)
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
                fd = take_liveness(self.root.managers_fd, manager_id)
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

    def skip(self, path: Path, reason: str, generation: str) -> None:
        self.skipped.append(Skipped(path, reason))
        self.log.warning("generation.skipped", generation=generation, path=str(path),
                         reason=reason)
