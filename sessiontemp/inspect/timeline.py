"""``timeline``: a session's life as one self-contained SVG picture.

One lane per named session (its successive managers, after a crash and a
resume, share it) or per manager without one, from its opening to its close
or death; each generation a bar from creation to the end of its removal,
coloured by how it ended, shaded from its foot by its size on disk over
time (its manager's measurements, to one scale); leases as inner bars, titled with their whole
label and the commands started under them; crashes (a recovery finding a
manager dead) and acquires refused for space marked in their manager's
lane, recovery passes and records the reducer refused on the time axis.
Every mark has a ``<title>`` (the browser's hover text) naming its event
seqs, and a line in the legend.  A lane with nothing drawn
in it (a manager that only ran a recovery) is left out unless asked for.

The window is the journal's activity: a stretch longer than *idle* seconds
with no event and no lease held is drawn compressed and hatched
(:mod:`.scale`), so the commands of a session that lives for hours stay
readable.  A bound past the end of the journal selects nothing, and the
picture (and the result's ``nothing``) says so.

Past *max_bars* generations the bars of each lane are grouped into columns a
few pixels wide, coloured by the most common ending and titled with the
counts, and the picture says so: at 10,000 generations single bars would be
thinner than a pixel.  Past *max_lanes* lanes, consecutive ones are merged
(and bars are grouped), again said in the picture; past 30 lanes each lane
is one row high.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from sessiontemp.inspect.picture import (
    COLOURS,
    GROUP_PX,
    LABEL,
    Ending,
    Generation,
    Lane,
    Lease,
    Manager,
    Mark,
    Picture,
)
from sessiontemp.inspect.read import Problem, Progress, as_path, counted, opened
from sessiontemp.inspect.scale import Scale, duration, idle_stretches
from sessiontemp.journal import history
from sessiontemp.journal.errors import BadInput
from sessiontemp.journal.events import (
    CommandStarted,
    GenerationCreated,
    GenerationMeasured,
    LeaseAcquired,
    LeaseReleased,
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    Reappeared,
    Record,
    RecoveryStarted,
    RemovalFinished,
    RemovalStarted,
    SessionAdopted,
    SessionClaimed,
    SpaceRefused,
)
from sessiontemp.journal.reducer import Fold, State
from sessiontemp.space.budget import described
from sessiontemp.space.usage import human

__all__ = ["COLOURS", "IDLE", "Ending", "Timeline", "timeline"]

IDLE: Final = 60.0
"""Seconds without an event or a held lease past which a stretch is drawn compressed."""
_WIDTH: Final = 1200


@attrs.frozen
class Timeline:
    """What :func:`timeline` drew: counts to check the picture against, and where it went.

    ``generations`` counts those in the window; ``drawn`` the bars (single
    or grouped); ``grouped`` says whether bars were grouped; ``ended``
    counts generations by how they ended; ``refused`` the seqs of records
    the reducer refused.  ``lanes`` counts the lanes drawn, ``idle`` the
    stretches drawn compressed; ``window`` is the first and last seq of the
    events in the window (None when it holds none), and ``nothing`` says
    why nothing could be selected (empty when something could).
    """

    journal: Path
    output: Path | None
    events: int
    managers: int
    generations: int
    drawn: int
    grouped: bool
    ended: Mapping[str, int]
    crashes: int
    recoveries: int
    refused: tuple[int, ...]
    lanes: int = 0
    # Acquires refused for space (space.refused) marked in the window.
    space_refused: int = 0
    idle: int = 0
    window: tuple[int, int] | None = None
    nothing: str = ""
    svg: str = attrs.field(repr=False, default="")


@attrs.define
class _Collector:
    """Gathers, as the replay runs, what the picture needs of each event.

    Events at or after *lo* and at or before *hi* (None: unbounded) are the
    window's: their seqs bound it, and the quiet stretches between them
    longer than *idle* are candidates for compression.
    """

    lo: float | None = None
    hi: float | None = None
    idle: float | None = None
    since: int = 0
    until: int | None = None
    managers: dict[str, Manager] = attrs.field(factory=dict)
    generations: dict[str, Generation] = attrs.field(factory=dict)
    crashes: list[Mark] = attrs.field(factory=list)
    recoveries: list[Mark] = attrs.field(factory=list)
    turned_away: list[Mark] = attrs.field(factory=list)
    first: float | None = None
    last: float = 0.0
    window: tuple[int, int] | None = None
    window_times: tuple[float, float] | None = None
    quiet: list[tuple[float, float]] = attrs.field(factory=list)
    leases_of: dict[str, list[Lease]] = attrs.field(factory=dict)  # by manager, till it ends

    def seed(self, state: State, t: float | None) -> None:
        """What was live where the kept history starts, once older history was retired.

        The records of its beginning are gone: each is drawn from where the
        kept history starts (time *t*), as the state there has it.
        """
        start = 0.0 if t is None else t
        sessions = {s.owner: s.name for s in state.sessions.values() if s.owner is not None}
        for m in state.managers.values():
            self.managers[m.id] = Manager(m.id, m.pid, m.opened_at, m.opened_seq,
                                          None if m.ended is None else start, m.ended_seq,
                                          m.ended, m.ended_by, sessions.get(m.id))
        for g in state.generations.values():
            leases = [Lease(lease, start, state.seq, manager=g.manager)
                      for lease in sorted(g.leases)]
            self.generations[g.id] = Generation(
                g.id, g.manager, g.created_at, g.created_seq, removal_seq=g.removal_seq,
                by=g.removal_by, reason=g.removal_reason, leases=leases)
            if g.manager is not None:
                self.leases_of.setdefault(g.manager, []).extend(leases)

    def each(self, record: Record, _draft: Fold) -> None:
        t, seq = record.time, record.seq
        if self.first is None:
            self.first = t
        self.last = t
        if ((self.lo is None or t >= self.lo) and (self.hi is None or t <= self.hi)
                and seq >= self.since and (self.until is None or seq <= self.until)):
            self._in_window(t, seq)
        match record.event:
            case ManagerOpened(manager=m, pid=pid):
                self.managers[m] = Manager(m, pid, t, seq)
            case ManagerClosed(manager=m):
                self.leases_of.pop(m, None)
                self.managers[m].end, self.managers[m].end_seq = t, seq
                self.managers[m].ended = "closed"
            case ManagerDied(manager=m, recovery=r):
                manager = self.managers[m]
                manager.end, manager.end_seq, manager.ended, manager.by = t, seq, "dead", r
                # Its leases the journal never released ended with it.
                for held in self.leases_of.pop(m, []):
                    if held.end is None:
                        held.died = (t, seq)
                self.crashes.append(Mark(t, seq, (
                    f"event {seq}: recovery {r} found manager {m} (pid {manager.pid}) dead"), m))
            case RecoveryStarted(recovery=r, pid=pid):
                self.recoveries.append(Mark(t, seq, (
                    f"event {seq}: recovery pass {r} (pid {pid}) started")))
            case SessionClaimed(manager=m, session=name):
                self.managers[m].session = name
            case SessionAdopted(manager=m, session=name, generation=g):
                self.managers[m].session = name
                self.generations[g].adopted.append((seq, m))
                self.generations[g].manager = m
            case GenerationCreated(manager=m, generation=g):
                self.generations[g] = Generation(g, m, t, seq)
            case SpaceRefused(manager=m, cause=cause, found=found, limit=limit):
                self.turned_away.append(Mark(t, seq, (
                    f"event {seq}: an acquire of manager {m} was refused for space: "
                    f"{described(cause, found, limit)}"), m))
            case GenerationMeasured(generation=g, bytes=size, inodes=inodes):
                # Drawn at the record's time, the clock every other mark is drawn on.
                self.generations[g].sizes.append((t, size, inodes, seq))
            case LeaseAcquired(manager=m, generation=g, lease=lease, label=label):
                taken = Lease(lease, t, seq, label, manager=m)
                self.generations[g].leases.append(taken)
                self.leases_of.setdefault(m, []).append(taken)
            case CommandStarted(generation=g, lease=lease, pid=pid):
                for held in reversed(self.generations[g].leases):
                    if held.id == lease:
                        held.commands.append((pid, seq, t))
                        break
            case LeaseReleased(generation=g, lease=lease):
                for held in reversed(self.generations[g].leases):
                    if held.id == lease and held.end is None:
                        held.end, held.end_seq = t, seq
                        break
            case RemovalStarted(generation=g, by=by, reason=reason):
                known = self.generations.setdefault(g, Generation(g, None, t, seq))
                known.removal_seq, known.by, known.reason = seq, by, reason
            case Reappeared(generation=g, by=by):
                known = self.generations[g]
                known.reappeared.append(seq)
                known.end = known.end_seq = known.outcome = None
                known.removal_seq, known.by = seq, by
                known.reason = "on disk again after its removal (a power loss undid it)"
            case RemovalFinished(generation=g, outcome=outcome):
                known = self.generations[g]
                known.end, known.end_seq, known.outcome = t, seq, outcome
            case _:
                pass

    def _in_window(self, t: float, seq: int) -> None:
        if self.window is None or self.window_times is None:
            self.window, self.window_times = (seq, seq), (t, t)
            return
        latest = self.window_times[1]
        if self.idle is not None and t - latest > self.idle:
            self.quiet.append((latest, t))
        self.window = (self.window[0], seq)
        self.window_times = (self.window_times[0], max(latest, t))


def _bounds(since: int | float | None, until: int | float | None, times: dict[int, float],
            first_seq: int | None, last_seq: int | None) -> tuple[float | None, float | None, str]:
    """The window's ends as times (None: the journal's own), and why it selects nothing."""
    lo = hi = None
    if last_seq is None or first_seq is None:
        return None, None, "the journal holds no events"
    if isinstance(since, int):
        if since > last_seq:
            return None, None, (f"the window starts at event {since:,}, past the journal's "
                                f"last event ({last_seq:,})")
        lo = times.get(since)  # None for retired history: from the first event kept
    elif since is not None:
        lo = since
    if isinstance(until, int):
        if until < first_seq:
            return None, None, (f"the window ends at event {until:,}, before the journal's "
                                f"first event ({first_seq:,})")
        hi = times.get(until)  # None past the end: to the last event
    elif until is not None:
        hi = until
    if lo is not None and hi is not None and hi < lo:
        return None, None, "the window ends before it starts"
    return lo, hi, ""


def timeline(
    journal: os.PathLike[str] | str,
    output: os.PathLike[str] | str | None = None,
    *,
    manager: str | None = None,
    since: int | float | None = None,
    until: int | float | None = None,
    max_bars: int = 2000,
    max_lanes: int = 200,
    width: int = _WIDTH,
    idle: float | None = IDLE,
    all_lanes: bool = False,
    progress: Progress | None = None,
) -> Timeline:
    """Draw the journal's sessions, managers and generations as an SVG; write it to *output*.

    *manager* keeps one manager's lane; *since* and *until* (epoch seconds,
    or an int: the time of that event) keep what overlaps that window.
    *idle* (seconds, None for real time throughout) is how long a stretch
    with no event and no lease held may last before it is drawn compressed;
    *all_lanes* draws managers with nothing in the window too.  The replay
    is lenient: a record the reducer refuses is skipped and marked.  The SVG
    text is in the result's ``svg``.
    """
    if idle is not None and not (isinstance(idle, int | float) and idle >= 0):
        raise BadInput(f"idle {idle!r}", "is not a number of seconds of 0 or more",
                       "Pass one such as 60, or None to draw time to scale throughout")
    path = as_path(journal, "the journal")
    refused: list[Problem] = []
    with opened(path, snapshot=True) as store:
        first_seq, last_seq, _ = store.extent()
        times = store.times_of([t for t in (since, until) if isinstance(t, int)])
        lo_bound, hi_bound, nothing = _bounds(since, until, times, first_seq, last_seq)
        collector = _Collector(lo_bound, hi_bound, idle,
                               since=since if isinstance(since, int) else 0,
                               until=until if isinstance(until, int) else None)
        # Where the kept history starts: what was live there is drawn from there.
        start = history.start(store)
        collector.seed(start.state, start.history.first_time)
        state = history.fold(store, lenient=refused, each=collector.each, progress=progress)
        events = store.last_seq()
        refused_at = store.times_of([p.seq for p in refused if p.seq is not None])
    if manager is not None and manager not in collector.managers:
        raise BadInput(f"--manager {manager}", "is not a manager of this journal",
                       "Pass an id from `journal-inspect events --kind manager.opened`")
    for g in collector.generations.values():
        g.held = state.held.get(g.id, state.held.get(g.manager or ""))
    # A refused record is not folded, so the collector never saw it: it ends the journal too.
    end = max([collector.last, *refused_at.values()])
    lo = collector.first if lo_bound is None else lo_bound
    hi = end if hi_bound is None else hi_bound
    if lo is None:
        lo = hi = 0.0
    if hi <= lo:
        hi = lo + 1.0

    def overlaps(start: float, stop: float | None) -> bool:
        return not nothing and start <= hi and (stop if stop is not None else end) >= lo

    generations = [g for g in sorted(collector.generations.values(), key=lambda g: g.start_seq)
                   if overlaps(g.start, g.end)
                   and (manager is None or g.manager == manager)]
    marks = [p for p in refused if p.seq is not None and p.check in ("rules", "schema")
             and not nothing and lo <= refused_at.get(p.seq, lo) <= hi]
    crashes = [c for c in collector.crashes if not nothing and lo <= c.time <= hi
               and (manager is None or c.manager == manager)]
    recoveries = [r for r in collector.recoveries if not nothing and lo <= r.time <= hi]
    turned_away = [a for a in collector.turned_away if not nothing and lo <= a.time <= hi
                   and (manager is None or a.manager == manager)]
    # A manager's lane holds its generations, its crash and its refusals for space; with
    # all_lanes, every manager alive in the window has one. (A generation may outlive its
    # manager into the window.)
    drawn_in = ({g.manager for g in generations} | {c.manager for c in crashes}
                | {a.manager for a in turned_away})
    managers = [m for m in sorted(collector.managers.values(), key=lambda m: m.start_seq)
                if (manager is None or m.id == manager)
                and (m.id in drawn_in or (all_lanes and overlaps(m.start, m.end)))]
    lanes, lane_of, merged = _lanes(managers, max_lanes)
    if any(g.manager is None for g in generations):
        lanes.append(Lane("", "strays", "", "generations found on disk that no manager "
                          "created", "strays"))
    grouped = len(generations) > max_bars or merged > 1
    quiet = list(collector.quiet)
    if collector.window_times is None:
        quiet.append((lo, hi))
    else:
        quiet += [(lo, collector.window_times[0]), (collector.window_times[1], hi)]
    busy = [(lease.start, lease.stop(g.end if g.end is not None else end))
            for g in generations for lease in g.leases]
    gaps = [] if idle is None or nothing else idle_stretches(lo, hi, quiet, busy, idle)
    scale = Scale(lo, hi, LABEL, width - 20, gaps)
    notes = _notes(nothing, len(managers), merged, grouped, len(generations), scale, idle)
    sessions = len({m.session for m in managers if m.session is not None})
    window = None if nothing else collector.window
    caption = (f"{counted(len(generations), 'generation')} of "
               f"{counted(len(managers), 'manager')}"
               + (f" ({counted(sessions, 'named session')})" if sessions else "")
               + f", {counted(len(crashes), 'crash', 'crashes')}, "
               f"{counted(len(recoveries), 'recovery pass', 'recovery passes')}, "
               f"{counted(len(marks), 'refused record')}"
               + (f", {counted(len(turned_away), 'acquire')} refused for space"
                  if turned_away else "") + "; "
               + ("nothing drawn" if nothing else
                  (f"events {window[0]:,} to {window[1]:,} of {events:,}" if window
                   else "no event in the window") + f", {_span(lo, hi)}"))
    largest = max((g.peak for g in generations), default=0)
    if largest and not grouped:
        notes.append(("#555", f"Sizes: the shaded part of a bar rising from its foot is its "
                      "directory's size on disk as its manager measured it, to one scale: a "
                      f"full bar is {human(largest)}, the largest peak drawn (hover for each "
                      "one's last and peak)."))
    picture = Picture(scale, end, width, lanes, lane_of, caption, notes, grouped, largest,
                      turned_away=bool(turned_away))
    drawn = picture.groups(generations) if grouped else picture.bars(generations)
    picture.marks(crashes, recoveries, [
        Mark(refused_at.get(p.seq or 0, lo), p.seq or 0, f"event {p.seq} refused: {p.message}")
        for p in marks], turned_away)
    ended: Counter[str] = Counter(g.ending() for g in generations)
    svg = picture.render(f"sessiontemp timeline of {path}")
    out = None if output is None else as_path(output, "the output")
    if out is not None:
        out.write_text(svg, encoding="utf-8")
    return Timeline(
        journal=path, output=out, events=events, managers=len(managers),
        generations=len(generations), drawn=drawn, grouped=grouped,
        ended={k: ended.get(k, 0) for k in COLOURS}, crashes=len(crashes),
        recoveries=len(recoveries), refused=tuple(p.seq or 0 for p in marks),
        lanes=len(lanes), idle=len(scale.idle), window=window, nothing=nothing, svg=svg,
        space_refused=len(turned_away),
    )


def _span(lo: float, hi: float) -> str:
    """From *lo* to *hi* in local time, the date said once when it is the same."""
    start, stop = (dt.datetime.fromtimestamp(t).astimezone() for t in (lo, hi))
    same = start.date() == stop.date()
    return (f"{start.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} to "
            f"{stop.strftime('%H:%M:%S.%f' if same else '%Y-%m-%d %H:%M:%S.%f')[:-3]} "
            f"{stop.strftime('%Z')}")


def _lanes(managers: list[Manager], max_lanes: int) -> tuple[list[Lane], dict[str, str], int]:
    """One lane per named session or per manager without one, merged past *max_lanes*;
    which lane each manager is in; how many a merged lane holds (1: none merged)."""
    units: dict[str, Lane] = {}
    for m in managers:
        if m.session is not None:
            key = f"session {m.session}"
            lane = units.setdefault(key, Lane(key, m.session, "", "", "session"))
        else:
            lane = units.setdefault(m.id, Lane(m.id, f"manager {m.id[:8]}", f"pid {m.pid}", "",
                                               "manager"))
        lane.managers.append(m)
    for lane in units.values():
        if lane.kind == "session":
            pids = ", ".join(str(m.pid) for m in lane.managers)
            lane.detail = f"pid {pids}" if len(lane.managers) == 1 else (
                f"{len(lane.managers)} managers")
            lane.about = "\n".join([f"session {lane.name}", *(m.story() for m in lane.managers)])
        else:
            lane.about = lane.managers[0].story()
    per_lane = max(1, math.ceil(len(units) / max(max_lanes, 1)))
    lane_of = {m.id: (f"session {m.session}" if m.session is not None else m.id)
               for m in managers}
    if per_lane == 1:
        return list(units.values()), lane_of, 1
    merged: list[Lane] = []
    keys = list(units)
    kinds = {u.kind for u in units.values()}
    what = "managers" if kinds == {"manager"} else "sessions and managers"
    for i in range(0, len(keys), per_lane):
        members = [units[k] for k in keys[i:i + per_lane]]
        name = f"{what} {i + 1} to {i + len(members)}"
        inside = [m for u in members for m in u.managers]
        merged.append(Lane(name, name, "", f"{len(members)} {what}, opened at events "
                           f"{inside[0].start_seq} to {inside[-1].start_seq}", "managers",
                           inside))
        for u in members:
            for m in u.managers:
                lane_of[m.id] = name
    return merged, lane_of, per_lane


def _notes(nothing: str, lanes: int, merged: int, grouped: bool, generations: int,
           scale: Scale, idle: float | None) -> list[tuple[str, str]]:
    """What the reader must know to read the picture right: (colour, text) each."""
    if nothing:
        return [("#a33", f"Nothing in the window: {nothing}.")]
    notes = []
    if merged > 1:
        notes.append(("#a33", f"Merged: {lanes:,} managers would make as many lanes, so each "
                      f"lane holds {merged} managers in the order they opened. "))
    if grouped:
        notes.append(("#a33", f"Grouped: {generations:,} bars would be too many to tell "
                      f"apart, so each lane's generations are drawn as {GROUP_PX} px columns "
                      "by when they began (colour: the most common ending; hover for the "
                      "counts). Leases not drawn."))
    if scale.idle and idle is not None:
        total = sum(g.stop - g.start for g in scale.idle)
        stretches = counted(len(scale.idle), "idle stretch", "idle stretches")
        notes.append(("#555", f"Compressed: {stretches} longer than {duration(idle)} (no "
                      "event, no lease held; "
                      f"{duration(total)} in all) drawn hatched, each "
                      f"{scale.idle[0].x1 - scale.idle[0].x0:g} px wide; the rest is to "
                      "one scale."))
    return notes
