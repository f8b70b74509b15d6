"""``fsck``: the journal of a root against the root's entries on disk.

Each disagreement is a :class:`Finding` naming the path, what is wrong and
the fix.  Directories a recovery pass would still remove are findings; those
a running command still holds after its manager ended are listed apart, as
they are nobody's fault and go by themselves.

The state replayed holds only what is alive or owes work; whether an entry
it does not know was journaled as removed is read from the records of that
generation alone (:func:`sessiontemp.journal.history.pasts`, through an index).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs

from sessiontemp import artifacts
from sessiontemp._kernel.processes import running
from sessiontemp._kernel.root import (
    GENERATION_PREFIX,
    JOURNAL_NAME,
    MANAGERS_DIR,
    TRASH_PREFIX,
    check_layout,
    generation_id_of,
    lock_file_name,
)
from sessiontemp.inspect.read import (
    ROOT_FILES,
    Problem,
    Progress,
    as_path,
    kept_history,
    opened,
    probe_generation,
    probe_liveness,
)
from sessiontemp.journal import history
from sessiontemp.journal.errors import BadInput
from sessiontemp.journal.history import pasts
from sessiontemp.journal.reducer import (
    GenerationState,
    ManagerState,
    State,
    held_by,
    kept_for_resume,
)
from sessiontemp.journal.segments import litter

__all__ = ["Finding", "FsckReport", "RepairReport", "fsck"]


@attrs.frozen
class Finding:
    """One disagreement between the journal and the root, and what to do about it.

    ``check``: "missing" (the journal keeps it, the disk does not have it),
    "not-removed" (journaled as removed, still on disk), "removable" (a
    directory recovery would remove: its manager ended or is gone, or its
    removal was interrupted, and no command holds it), "held" (its manager
    ended but a running command still holds it: not a problem), "trash" (a
    trash entry not yet emptied), "stray" (generation prefix, unknown to the
    journal), "unknown" (any other entry in the root, or in its artifact
    store), "unrecovered" (a
    manager not ended in the journal whose liveness lock is free),
    "refused" (a record the lifecycle rules refuse), "kept" (a directory such
    a record names, which no recovery removes until a person decides),
    "resumable" (a named session's dead owner left it; kept for a resume
    until its window passes: not a problem), "unreferenced" (an artifact
    file no record keeps: its keeper died before recording it, its removal
    was cut short, or the journal was moved aside; nothing removes it but
    ``sessiontemp.remove_artifact``), "lost" (a kept artifact whose file is
    gone), "leftover" (a -wal or -shm SQLite made beside a journal segment
    that was retired: the next writer removes it).
    """

    check: str
    path: Path
    generation: str | None
    message: str
    fix: str = ""


@attrs.frozen
class RepairReport:
    """What the recovery run by ``fsck --repair`` did."""

    removed: tuple[tuple[Path, str, str], ...]
    skipped: tuple[tuple[Path, str], ...]
    dead: tuple[str, ...]
    ran: bool


@attrs.frozen
class FsckReport:
    """The findings for a root (after the repair, with *repair*), and what a repair did.

    ``held`` lists directories a running command keeps after its manager
    ended: they are not problems and do not make the report fail.
    ``before`` holds the findings from before the repair.
    """

    root: Path
    findings: tuple[Finding, ...]
    repair: RepairReport | None = None
    before: tuple[Finding, ...] = ()
    held: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        """True when nothing disagrees (directories held by commands are fine)."""
        return not self.findings


def fsck(root: os.PathLike[str] | str, *, repair: bool = False,
         progress: Progress | None = None) -> FsckReport:
    """Compare the journal of *root* with the root's entries; with *repair*, recover first
    (which writes to the journal and removes directories) and check again."""
    base = as_path(root, "the root")
    if not base.is_dir():
        raise BadInput(base, "does not exist" if not os.path.lexists(base) else
                       "is not a directory",
                       f"Pass the root that holds {JOURNAL_NAME} as --root DIR")
    check_layout(base)
    if not repair:
        findings, held = _fsck(base, progress)
        return FsckReport(base, findings, held=held)
    from sessiontemp.recovery.cleanup import recover

    before, _ = _fsck(base, progress)
    report = recover(base, busy_timeout=10.0)
    done = RepairReport(
        removed=tuple((r.path, r.generation, r.reason) for r in report.removed),
        skipped=tuple((s.path, s.reason) for s in report.skipped),
        dead=report.dead, ran=report.ran,
    )
    findings, held = _fsck(base, progress)
    return FsckReport(base, findings, done, before, held)


def _fsck(base: Path, progress: Progress | None) -> tuple[tuple[Finding, ...],
                                                           tuple[Finding, ...]]:
    # Listed first, read second: a generation is journaled before its mkdir,
    # so every directory listed is known to the state read afterwards.
    names = sorted(os.listdir(base))
    journal = base / JOURNAL_NAME
    refused: list[Problem] = []
    with opened(journal, snapshot=True) as store:
        # Tolerant, as recovery is: a refused record is a finding, not the end.
        state = history.fold(store, after=None, progress=progress, lenient=refused)
        start = history.start(store)
        # Entries the state does not hold: removed (and let go of), or never journaled.
        unknown = {gid for gid in map(generation_id_of, names)
                   if gid is not None and gid not in state.generations}
        removed = {gid: past for gid, past in pasts(store, unknown, until=state.seq).items()
                   if past.removed}
        stored = _stored(base)
        unrecorded = {a for a in map(artifacts.id_of, stored) if a is not None
                      and a not in state.artifacts}
        # Which of them had a removal journaled (cut short before its unlink).
        removals = {} if not unrecorded else {
            json.loads(payload).get("artifact"): seq
            for seq, _, _, payload in store.rows_naming(unrecorded, kinds=["artifact.removed"])}
    repair = f"Run `journal-inspect --root {base} fsck --repair` to do it now"
    findings: list[Finding] = [
        Finding("refused", journal, None, (
            f"{p.message}: the lifecycle rules refuse it, so managers and recovery keep "
            "every manager and generation it names"),
            f"Run `journal-inspect {journal} verify` to list every such record; see the "
            "documentation's faults page, \"A record the rules refuse\"")
        for p in refused if p.check in ("rules", "schema")]
    # Once history was retired, a directory whose records went with it is
    # as unknown as one a lost journal left: both are said.
    unknown_to = ("the journal (left by a lost or moved journal)" if not start.seq else
                  f"{kept_history(start)} (its records went with the history before it, or a "
                  "lost or moved journal left it)")
    present = set(names)
    for name in names:
        path = base / name
        if name in ROOT_FILES:
            continue
        gid = generation_id_of(name)
        if gid is None:
            findings.append(Finding("unknown", path, None, "not made by sessiontemp",
                                    "Move it out of the root: sessiontemp never touches it"))
            continue
        known = state.generations.get(gid)
        past = removed.get(gid)
        if past is not None:
            if os.path.lexists(path):  # not removed while we read the journal
                findings.append(Finding("not-removed", path, gid, (
                    f"the journal says its removal ended ({past.outcome}) at event "
                    f"{past.removal_seq}"), "Check that nothing uses it, then remove it by "
                    "hand: sessiontemp will not touch it again"))
            continue
        if name.startswith(TRASH_PREFIX) and known is not None:
            findings.append(Finding("trash", path, gid, "a trash entry not yet emptied: the "
                                    "next recovery empties it", repair))
        elif known is None:
            findings.append(Finding("trash" if name.startswith(TRASH_PREFIX) else "stray",
                                    path, gid, (
                f"unknown to {unknown_to}: a recovery removes it once no command holds it and "
                "it is older than a day (stale_after)"),
                "Remove it by hand if you know nothing uses it, or wait"))
    for g in sorted(state.generations.values(), key=lambda g: g.created_seq):
        if g.removal is None and g.ready and GENERATION_PREFIX + g.id not in present:
            findings.append(Finding("missing", base / (GENERATION_PREFIX + g.id), g.id, (
                f"the journal keeps it (made at event {g.created_seq}, manager {g.manager}) "
                "but it is not on disk"), "Nothing is lost with it; once its manager ends, "
                "a recovery journals it as gone"))
    gone = {m.id for m in state.managers.values()
            if m.ended is None and probe_liveness(base, m.id) == "gone"}
    for m in sorted(state.managers.values(), key=lambda m: m.opened_seq):
        if m.id in gone:
            lock = base / MANAGERS_DIR / lock_file_name(m.id)
            findings.append(Finding("unrecovered", lock, None, (
                f"manager {m.id} (pid {m.pid}) is gone but not yet declared dead; recovery "
                "would declare it dead and remove its directories that no command holds"),
                repair))
    held: list[Finding] = []
    for g in sorted(state.generations.values(), key=lambda g: g.created_seq):
        if GENERATION_PREFIX + g.id not in present:
            continue
        path = base / (GENERATION_PREFIX + g.id)
        kept = held_by(state, g)
        if kept is not None:
            findings.append(Finding("kept", path, g.id, (
                f"event {kept}, which the lifecycle rules refuse, names it or its manager, "
                "so no recovery removes it"),
                f"Look at it (`journal-inspect --root {base} explain {g.id}`), keep what you "
                f"need, then remove it by hand: rm -r {path}"))
            continue
        session = kept_for_resume(state, g) if g.removal is None else None
        if session is not None:
            held.append(Finding("resumable", path, g.id, (
                f"session {session.name}'s owner {g.manager} died at event {session.kept_seq}; "
                f"kept for its next owner to resume within {session.window:g} s of that"),
                f"Nothing to do: Manager(root, session={session.name!r}) resumes it, "
                f"sessiontemp.remove_session(root, {session.name!r}) removes it"))
            continue
        owner = state.managers.get(g.manager or "")
        if owner is not None and owner.id in gone and owner.current == g.id and g.ready and (
            any(n.owner == owner.id for n in state.sessions.values())
        ):
            held.append(Finding("resumable", path, g.id, (
                f"the current directory of session owner {owner.id} (pid {owner.pid}), which "
                "is gone: once a recovery journals its death, it is kept for the session's "
                "next owner to resume"),
                "Nothing to do: the session's next Manager resumes it"))
            continue
        why = _left_because(g, state, gone)
        if why is None:
            continue
        commands = running(g.commands)
        if commands:
            held.append(Finding("held", path, g.id, (
                f"{why}, and a command started on one of its leases (pid "
                f"{', '.join(map(str, commands))}) still runs"),
                "Nothing to do: the first recovery after the command exits removes it"))
        elif probe_generation(base, g.id) == "held":
            held.append(Finding("held", path, g.id, (
                f"{why}, and a running command still holds it"),
                "Nothing to do: the first recovery after the command exits removes it"))
        else:
            findings.append(Finding("removable", path, g.id, (
                f"{why}, and no command holds it: the next recovery removes it"), repair))
    findings.extend(_artifacts(base, state, stored, removals))
    findings.extend(
        Finding("leftover", Path(left), None, (
            "left by SQLite beside a journal segment that was retired (a reader opened it "
            "as it was deleted, and was stopped before it removed this): nothing reads it"),
            repair) for left in litter(journal))
    return tuple(findings), tuple(held)


def _stored(base: Path) -> set[str]:
    """The names in the root's artifact store (none if it was never made)."""
    try:
        return set(os.listdir(base / artifacts.ARTIFACTS_DIR))
    except FileNotFoundError:
        return set()


def _artifacts(base: Path, state: State, names: set[str], removals: dict[str, int]
               ) -> list[Finding]:
    """The artifact store against the artifacts the journal keeps.

    A file no record keeps is reported, never removed by a repair: it may be
    the only copy of what a session made (after a journal was moved aside,
    every artifact is such a file).
    """
    store = base / artifacts.ARTIFACTS_DIR
    findings = []
    recorded = {artifacts.file_name(a.id, a.label): a for a in state.artifacts.values()}
    for name in sorted(names - recorded.keys()):
        artifact = artifacts.id_of(name)
        if artifact is None:
            findings.append(Finding("unknown", store / name, None, "not made by sessiontemp",
                                    "Move it out of the artifact store: sessiontemp never "
                                    "touches it"))
            continue
        why = (f"its removal was journaled at event {removals[artifact]} and cut short"
               if artifact in removals else "its keeper died after copying it and before "
               "recording it, or the journal that kept it was moved aside")
        findings.append(Finding("unreferenced", store / name, None, (
            f"no record keeps this file ({why}); no recovery removes it"),
            f"Keep it, or move it out; `sessiontemp.remove_artifact({str(base)!r}, "
            f"{artifact!r})` removes it"))
    for name, a in sorted(recorded.items()):
        if name not in names:
            findings.append(Finding("lost", store / name, None, (
                f"artifact {a.id} ({a.label!r}, kept at event {a.kept_seq}) is not on disk"),
                "It cannot be recovered; remove its record with sessiontemp.remove_artifact"))
    return findings


def _left_because(g: GenerationState, state: State, gone: set[str]) -> str | None:
    """Why recovery (and nobody else) would remove *g*, or None while its manager may."""
    if g.removal == "started":
        return f"its removal was started at event {g.removal_seq} and not finished"
    manager: ManagerState | None = state.managers.get(g.manager or "")
    if manager is None:
        return None
    if manager.ended is not None:
        how = "died" if manager.ended == "dead" else "was closed"
        return f"its manager {manager.id} (pid {manager.pid}) {how}"
    if manager.id in gone:
        return f"its manager {manager.id} (pid {manager.pid}) is gone"
    return None
