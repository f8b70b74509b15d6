"""``timeline``: a session's life as one self-contained SVG picture.

One lane per manager, from its opening to its close or death; each
generation a bar from creation to the end of its removal, coloured by how it
ended; leases as inner bars; crashes (a recovery finding a manager dead),
recovery passes and records the reducer refused marked on the time axis.
Every mark has a ``<title>`` (the browser's hover text) naming its event
seqs.  Nothing is fetched: styles are inline, no script, no font files.

Past *max_bars* generations the bars of each lane are grouped into columns a
few pixels wide, coloured by the most common ending and titled with the
counts, and the picture says so: at 10,000 generations single bars would be
thinner than a pixel.  Past *max_lanes* managers, consecutive managers share
a lane (and bars are grouped), again said in the picture; past 30 lanes each
lane is one row high.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal, TypeAlias
from xml.sax.saxutils import escape, quoteattr

import attrs

from journal import checkpoint
from journal.errors import BadInput
from journal.events import (
    CommandStarted,
    GenerationCreated,
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
)
from journal.reducer import Fold, State
from sessiontemp.inspect.read import Problem, Progress, opened, replay

__all__ = ["COLOURS", "Ending", "Timeline", "timeline"]

Ending: TypeAlias = Literal["normal", "recovery", "live", "refused"]
"""How a generation ended: removed by its manager, by a recovery, not yet, or refused."""

# Colour-blind-safe (Okabe-Ito) fills, one per ending, named in the legend.
COLOURS: Final[Mapping[str, str]] = {
    "normal": "#009e73",
    "recovery": "#e69f00",
    "live": "#0072b2",
    "refused": "#d55e00",
}
_LEASE: Final = "#1b1b1b"
_CRASH: Final = "#cc0000"
_RECOVERY: Final = "#7a5195"
_WIDTH: Final = 1200
_LABEL: Final = 190  # the left column holding lane names
_ROW: Final = 14  # one row of bars inside a lane
_ROWS: Final = 4  # rows a lane packs overlapping bars into, at most
_GROUP_PX: Final = 4  # the width of one grouped column


@attrs.frozen
class Timeline:
    """What :func:`timeline` drew: counts to check the picture against, and where it went.

    ``generations`` counts those in the window; ``drawn`` the bars (single
    or grouped); ``grouped`` says whether bars were grouped; ``ended``
    counts generations by how they ended; ``refused`` the seqs of records
    the reducer refused.
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
    svg: str = attrs.field(repr=False, default="")


@attrs.define
class _Lease:
    id: str
    start: float
    start_seq: int
    label: str = ""
    end: float | None = None
    end_seq: int | None = None
    commands: list[tuple[int, int]] = attrs.field(factory=list)  # (pid, seq)


@attrs.define
class _Generation:
    id: str
    manager: str | None
    start: float
    start_seq: int
    end: float | None = None
    end_seq: int | None = None
    removal_seq: int | None = None
    by: str | None = None
    reason: str | None = None
    outcome: str | None = None
    leases: list[_Lease] = attrs.field(factory=list)
    reappeared: list[int] = attrs.field(factory=list)
    held: int | None = None  # the seq of a refused record that names it or its manager

    def ending(self) -> Ending:
        # Kept by a refused record, or its removal refused: a person must decide.
        if (self.held is not None and self.end is None) or (
            self.outcome is not None and self.outcome.startswith("refused")
        ):
            return "refused"
        if self.end is None:
            return "live"
        return "normal" if self.by is not None and self.by == self.manager else "recovery"


@attrs.define
class _Manager:
    id: str
    pid: int
    start: float
    start_seq: int
    end: float | None = None
    end_seq: int | None = None
    ended: str | None = None
    by: str | None = None


@attrs.frozen
class _Mark:
    time: float
    seq: int
    text: str
    manager: str | None = None


@attrs.define
class _Collector:
    """Gathers, as the replay runs, what the picture needs of each event."""

    managers: dict[str, _Manager] = attrs.field(factory=dict)
    generations: dict[str, _Generation] = attrs.field(factory=dict)
    crashes: list[_Mark] = attrs.field(factory=list)
    recoveries: list[_Mark] = attrs.field(factory=list)
    first: float | None = None
    last: float = 0.0

    def seed(self, state: State, t: float | None) -> None:
        """What was live where the kept history starts, once older history was retired.

        The records of its beginning are gone: each is drawn from where the
        kept history starts (time *t*), as the state there has it.
        """
        start = 0.0 if t is None else t
        for m in state.managers.values():
            self.managers[m.id] = _Manager(m.id, m.pid, m.opened_at, m.opened_seq,
                                           None if m.ended is None else start, m.ended_seq,
                                           m.ended, m.ended_by)
        for g in state.generations.values():
            self.generations[g.id] = _Generation(
                g.id, g.manager, g.created_at, g.created_seq, removal_seq=g.removal_seq,
                by=g.removal_by, reason=g.removal_reason,
                leases=[_Lease(lease, start, state.seq) for lease in sorted(g.leases)])

    def each(self, record: Record, _draft: Fold) -> None:
        t, seq = record.time, record.seq
        if self.first is None:
            self.first = t
        self.last = t
        match record.event:
            case ManagerOpened(manager=m, pid=pid):
                self.managers[m] = _Manager(m, pid, t, seq)
            case ManagerClosed(manager=m):
                self.managers[m].end, self.managers[m].end_seq = t, seq
                self.managers[m].ended = "closed"
            case ManagerDied(manager=m, recovery=r):
                manager = self.managers[m]
                manager.end, manager.end_seq, manager.ended, manager.by = t, seq, "dead", r
                self.crashes.append(_Mark(t, seq, (
                    f"event {seq}: recovery {r} found manager {m} (pid {manager.pid}) dead"), m))
            case RecoveryStarted(recovery=r, pid=pid):
                self.recoveries.append(_Mark(t, seq, (
                    f"event {seq}: recovery pass {r} (pid {pid}) started")))
            case GenerationCreated(manager=m, generation=g):
                self.generations[g] = _Generation(g, m, t, seq)
            case LeaseAcquired(generation=g, lease=lease, label=label):
                self.generations[g].leases.append(_Lease(lease, t, seq, label))
            case CommandStarted(generation=g, lease=lease, pid=pid):
                for held in reversed(self.generations[g].leases):
                    if held.id == lease:
                        held.commands.append((pid, seq))
                        break
            case LeaseReleased(generation=g, lease=lease):
                for held in reversed(self.generations[g].leases):
                    if held.id == lease and held.end is None:
                        held.end, held.end_seq = t, seq
                        break
            case RemovalStarted(generation=g, by=by, reason=reason):
                known = self.generations.setdefault(g, _Generation(g, None, t, seq))
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
    progress: Progress | None = None,
) -> Timeline:
    """Draw the journal's managers and generations as an SVG; write it to *output* if given.

    *manager* keeps one lane; *since* and *until* (epoch seconds, or an int:
    the time of that event) keep what overlaps that window.  The replay is
    lenient: a record the reducer refuses is skipped and marked.  The SVG
    text is in the result's ``svg``.
    """
    path = Path(journal)
    collector = _Collector()
    refused: list[Problem] = []
    with opened(path, snapshot=True) as store:
        start = checkpoint.origin(store).state
        collector.seed(start, store.history().first_time)
        state = replay(store, lenient=refused, each=collector.each, progress=progress,
                       start=start)
        events = store.last_seq()
        refused_at = store.times_of([p.seq for p in refused if p.seq is not None])
        at = store.times_of([t for t in (since, until) if isinstance(t, int)])
    if isinstance(since, int):
        since = at.get(since, collector.first)
    if isinstance(until, int):
        until = at.get(until, collector.last)
    if manager is not None and manager not in collector.managers:
        raise BadInput(f"--manager {manager}", "is not a manager of this journal",
                       "Pass an id from `journal-inspect events --kind manager.opened`")
    for g in collector.generations.values():
        g.held = state.held.get(g.id, state.held.get(g.manager or ""))
    end = collector.last
    lo = collector.first if since is None else since
    hi = end if until is None else until
    if lo is None:
        lo = hi = 0.0
    if hi <= lo:
        hi = lo + 1.0

    def overlaps(start: float, stop: float | None) -> bool:
        return start <= hi and (stop if stop is not None else end) >= lo

    managers = [m for m in sorted(collector.managers.values(), key=lambda m: m.start_seq)
                if (manager is None or m.id == manager) and overlaps(m.start, m.end)]
    per_lane = max(1, math.ceil(len(managers) / max(max_lanes, 1)))
    lane_of = {m.id: m.id if per_lane == 1 else
               f"managers {i // per_lane * per_lane + 1} to "
               f"{min((i // per_lane + 1) * per_lane, len(managers))}"
               for i, m in enumerate(managers)}
    lanes = list(dict.fromkeys(lane_of.values()))
    generations = [g for g in sorted(collector.generations.values(), key=lambda g: g.start_seq)
                   if (g.manager in lane_of or (g.manager is None and manager is None))
                   and overlaps(g.start, g.end)]
    if any(g.manager is None for g in generations):
        lanes.append("")  # strays: found on disk, never created by a manager
    marks = [p for p in refused if p.seq is not None and p.check in ("rules", "schema")]
    grouped = len(generations) > max_bars or per_lane > 1
    note = ""
    if per_lane > 1:
        note = (f"Merged: {len(managers):,} managers would make as many lanes, so each lane "
                f"holds {per_lane} managers in the order they opened. ")
    if grouped:
        note += (f"Grouped: {len(generations):,} bars would be too many to tell apart, so each "
                 f"lane's generations are drawn as {_GROUP_PX} px columns by when they began "
                 "(colour: the most common ending; hover for the counts). Leases not drawn.")
    picture = _Picture(lo, hi, end, width, lanes, collector.managers, lane_of, note)
    drawn = picture.groups(generations) if grouped else picture.bars(generations)
    crashes = [c for c in collector.crashes if lo <= c.time <= hi
               and (manager is None or c.manager == manager)]
    recoveries = [r for r in collector.recoveries if lo <= r.time <= hi]
    picture.marks(crashes, recoveries, [
        _Mark(refused_at.get(p.seq or 0, lo), p.seq or 0, f"event {p.seq} refused: {p.message}")
        for p in marks if lo <= refused_at.get(p.seq or 0, lo) <= hi])
    ended: Counter[str] = Counter(g.ending() for g in generations)
    caption = (f"{len(generations):,} generations of {len(managers):,} managers, "
               f"{len(crashes)} crashes, {len(recoveries)} recovery passes, "
               f"{len(marks)} refused records; events 1 to {events:,}")
    # A path that is not UTF-8 is drawn with U+FFFD where its odd bytes are:
    # an SVG is UTF-8 text, and those bytes would make it unreadable XML.
    svg = picture.render(f"sessiontemp timeline of {path}", caption).encode(
        "utf-8", "surrogateescape").decode("utf-8", "replace")
    out = None if output is None else Path(output)
    if out is not None:
        out.write_text(svg, encoding="utf-8")
    return Timeline(
        journal=path, output=out, events=events, managers=len(managers),
        generations=len(generations), drawn=drawn, grouped=grouped,
        ended={k: ended.get(k, 0) for k in COLOURS}, crashes=len(crashes),
        recoveries=len(recoveries), refused=tuple(p.seq or 0 for p in marks), svg=svg,
    )


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


def _short(identifier: str) -> str:
    return identifier[:8]


class _Picture:
    """The SVG being drawn: lanes down, time across."""

    def __init__(self, lo: float, hi: float, end: float, width: int, lanes: Sequence[str],
                 managers: Mapping[str, _Manager], lane_of: Mapping[str, str], note: str
                 ) -> None:
        self.lo, self.hi, self.end = lo, hi, end
        self.width = width
        self.lanes = list(lanes)
        self.index = {lane: i for i, lane in enumerate(self.lanes)}
        self.managers = managers
        self.lane_of = lane_of
        # Many lanes: one row each, so the picture stays a few screens tall.
        self.row_count = 1 if len(self.lanes) > 30 else _ROWS
        self.rows: dict[str, list[float]] = {lane: [] for lane in self.lanes}
        # The note is wrapped to the width (about 6 px a character at this
        # size); each line past the first moves everything below it down.
        self.note = textwrap.wrap(note, max(40, width // 6 - 4))
        self.shift = 14 * max(len(self.note) - 1, 0)
        self.top = 86 + self.shift
        self.lane_height = _ROW * self.row_count + (12 if self.row_count > 1 else 6)
        self.body: list[str] = []
        self.axis_marks: list[str] = []

    def x(self, t: float) -> float:
        span = self.hi - self.lo
        t = min(max(t, self.lo), self.hi)
        return round(_LABEL + (t - self.lo) / span * (self.width - _LABEL - 20), 2)

    def lane(self, manager: str | None) -> str:
        return "" if manager is None else self.lane_of[manager]

    def lane_y(self, lane: str) -> int:
        return self.top + self.index[lane] * self.lane_height

    def row_for(self, lane: str, start: float, stop: float) -> int:
        """The first row of *lane* free at *start* (bars packed like intervals)."""
        rows = self.rows[lane]
        for i, busy_until in enumerate(rows):
            if busy_until <= start:
                rows[i] = stop
                return i
        if len(rows) < self.row_count:
            rows.append(stop)
            return len(rows) - 1
        i = min(range(len(rows)), key=rows.__getitem__)
        rows[i] = max(rows[i], stop)
        return i

    def bars(self, generations: Sequence[_Generation]) -> int:
        for g in generations:
            lane = self.lane(g.manager)
            stop = g.end if g.end is not None else self.end
            x0, x1 = self.x(g.start), self.x(stop)
            w = max(x1 - x0, 1.0)
            row = self.row_for(lane, x0, x0 + w + 1)
            y = self.lane_y(lane) + 3 + row * _ROW
            ending = g.ending()
            title = [f"generation {g.id} ({ending})",
                     f"created at event {g.start_seq} ({_clock(g.start)})"
                     + (f" by manager {g.manager}" if g.manager else " (a stray)")]
            if g.reappeared:
                title.append("on disk again after its removal at event(s) "
                             + ", ".join(map(str, g.reappeared)))
            if g.removal_seq is not None:
                title.append(f"removal started at event {g.removal_seq} by {g.by}: {g.reason}")
            if g.end_seq is not None:
                title.append(f"removal finished at event {g.end_seq} ({g.outcome})")
            if g.held is not None:
                title.append(f"kept: event {g.held}, which the lifecycle rules refuse, names it "
                             "or its manager")
            parts = [f'<rect class="generation {ending}" data-generation={quoteattr(g.id)} '
                     f'x="{x0}" y="{y}" width="{round(w, 2)}" height="{_ROW - 3}" rx="2" '
                     f'fill="{COLOURS[ending]}"/>']
            for lease in g.leases:
                lstop = lease.end if lease.end is not None else stop
                lx0, lx1 = self.x(lease.start), self.x(lstop)
                lw = max(lx1 - lx0, 1.0)
                released = (f"released at event {lease.end_seq}" if lease.end_seq is not None
                            else "never released in the journal")
                named = f" ({lease.label})" if lease.label else ""
                about = f"lease {lease.id}{named}: taken at event {lease.start_seq}, {released}"
                about += "".join(f"; command pid {pid} started at event {cseq}"
                                 for pid, cseq in lease.commands)
                parts.append(
                    f'<g class="lease"><title>{escape(about)}</title>'
                    f'<rect x="{lx0}" y="{y + 7}" width="{round(lw, 2)}" height="3" '
                    f'fill="{_LEASE}"/>'
                    + (f'<text x="{lx0 + 2}" y="{y + 6}" font-size="7" fill="#fff">'
                       f'{escape(lease.label[:int(lw) // 5] or _short(lease.id))}</text>'
                       if lw > 44 else "")
                    + "</g>")
            self.body.append(f'<g><title>{escape(chr(10).join(title))}</title>'
                             + "".join(parts) + "</g>")
        return len(generations)

    def groups(self, generations: Sequence[_Generation]) -> int:
        columns: dict[tuple[str, int], list[_Generation]] = {}
        for g in generations:
            column = int((self.x(g.start) - _LABEL) // _GROUP_PX)
            columns.setdefault((self.lane(g.manager), column), []).append(g)
        for (lane, column), members in sorted(columns.items(),
                                              key=lambda kv: (self.index[kv[0][0]],
                                                              kv[0][1])):
            counts: Counter[str] = Counter(g.ending() for g in members)
            ending = counts.most_common(1)[0][0]
            x0 = _LABEL + column * _GROUP_PX
            y = self.lane_y(lane) + 3
            # Height grows with the count, up to the lane, so dense stretches show.
            h = min(self.lane_height - 6, 4 + 6 * math.log2(len(members)))
            last = max(g.end_seq or g.start_seq for g in members)
            seqs = f"events {members[0].start_seq} to {last}"
            text = (f"{len(members)} generations begun here ({seqs}): "
                    + ", ".join(f"{counts[k]} {k}" for k in COLOURS if counts[k]))
            self.body.append(
                f'<g><title>{escape(text)}</title><rect class="group {ending}" '
                f'data-count="{len(members)}" x="{x0}" y="{y}" width="{_GROUP_PX - 0.5}" '
                f'height="{round(h, 2)}" fill="{COLOURS[ending]}"/></g>')
        return len(columns)

    def marks(self, crashes: Sequence[_Mark], recoveries: Sequence[_Mark],
              refused: Sequence[_Mark]) -> None:
        bottom = self.top + len(self.lanes) * self.lane_height
        for r in recoveries:
            x = self.x(r.time)
            self.axis_marks.append(
                f'<g class="recovery-pass"><title>{escape(r.text)}</title>'
                f'<line x1="{x}" y1="{self.top - 8}" x2="{x}" y2="{bottom}" stroke="{_RECOVERY}" '
                f'stroke-width="1" stroke-dasharray="3,3" opacity="0.6"/>'
                f'<circle cx="{x}" cy="{self.top - 8}" r="3" fill="{_RECOVERY}"/></g>')
        for c in crashes:
            x = self.x(c.time)
            lane = self.lane_of.get(c.manager or "")
            y = self.top if lane is None else self.lane_y(lane) + self.lane_height / 2
            self.axis_marks.append(
                f'<g class="crash"><title>{escape(c.text)}</title>'
                f'<path d="M{x - 5},{y - 5} L{x + 5},{y + 5} M{x - 5},{y + 5} L{x + 5},{y - 5}" '
                f'stroke="{_CRASH}" stroke-width="2.5"/></g>')
        for f in refused:
            x = self.x(f.time)
            y = self.top - 22
            self.axis_marks.append(
                f'<g class="refused-record"><title>{escape(f.text)}</title>'
                f'<path d="M{x - 5},{y - 6} L{x + 5},{y - 6} L{x},{y + 3} Z" '
                f'fill="{COLOURS["refused"]}"/></g>')

    def render(self, heading: str, caption: str) -> str:
        height = self.top + max(len(self.lanes), 1) * self.lane_height + 70
        out = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{height}" '
            f'viewBox="0 0 {self.width} {height}" font-family="sans-serif" font-size="11">',
            f"<title>{escape(heading)}</title>",
            f'<rect width="{self.width}" height="{height}" fill="#ffffff"/>',
            f'<text x="10" y="18" font-size="14" font-weight="bold">{escape(heading)}</text>',
            f'<text class="caption" x="10" y="34" fill="#333">{escape(caption)}</text>',
        ]
        for i, line in enumerate(self.note):
            out.append(f'<text class="caption" x="10" y="{49 + 14 * i}" fill="#a33">'
                       f'{escape(line)}</text>')
        out.append(f'<g transform="translate(0 {self.shift})">')
        out += self.legend()
        out.append("</g>")
        for i, lane in enumerate(self.lanes):
            y = self.top + i * self.lane_height
            fill = "#f4f4f4" if i % 2 == 0 else "#fbfbfb"
            out.append(f'<rect x="0" y="{y}" width="{self.width}" height="{self.lane_height}" '
                       f'fill="{fill}"/>')
            out.append(self.lane_label(lane, y))
        out += self.axis(self.top + len(self.lanes) * self.lane_height)
        out += self.body
        out += self.axis_marks
        out.append("</svg>")
        return "\n".join(out) + "\n"

    def lane_label(self, lane: str, y: int) -> str:
        first = y + min(20, self.lane_height - 6)
        if not lane:
            return (f'<text x="6" y="{first}"><title>generations found on disk that no '
                    'manager created</title>strays</text>')
        if lane not in self.managers:
            members = [m for m, on in self.lane_of.items() if on == lane]
            return (f'<g class="managers"><title>{len(members)} managers, opened at events '
                    f'{self.managers[members[0]].start_seq} to '
                    f'{self.managers[members[-1]].start_seq}</title>'
                    f'<text x="6" y="{first}">{escape(lane)}</text></g>')
        m = self.managers[lane]
        how = ("still open" if m.ended is None else
               f"closed at event {m.end_seq}" if m.ended == "closed" else
               f"found dead at event {m.end_seq} by recovery {m.by}")
        x0, x1 = self.x(m.start), self.x(m.end if m.end is not None else self.end)
        mid = y + self.lane_height - 5
        return (f'<g class="manager" data-manager={quoteattr(m.id)}><title>'
                f'{escape(f"manager {m.id} (pid {m.pid}): opened at event {m.start_seq}, {how}")}'
                f'</title><text x="6" y="{first}">manager {escape(_short(m.id))}'
                f' <tspan fill="#555">pid {m.pid}</tspan></text>'
                f'<line x1="{x0}" y1="{mid}" x2="{x1}" y2="{mid}" stroke="#888" '
                f'stroke-width="2"/></g>')

    def legend(self) -> list[str]:
        items = [("normal", "removed by its manager"), ("recovery", "removed by a recovery"),
                 ("live", "not removed yet"), ("refused", "refused or kept by a refused record")]
        out = ['<g class="legend">']
        x = 10
        for key, text in items:
            out.append(f'<rect x="{x}" y="60" width="12" height="10" fill="{COLOURS[key]}"/>'
                       f'<text x="{x + 16}" y="69">{escape(text)}</text>')
            x += 24 + 7 * len(text)
        out.append(f'<rect x="{x}" y="63" width="14" height="3" fill="{_LEASE}"/>'
                   f'<text x="{x + 18}" y="69">lease</text>')
        x += 60
        out.append(f'<path d="M{x},61 L{x + 9},70 M{x},70 L{x + 9},61" stroke="{_CRASH}" '
                   f'stroke-width="2"/><text x="{x + 14}" y="69">crash found</text>')
        x += 95
        out.append(f'<circle cx="{x + 4}" cy="65" r="3" fill="{_RECOVERY}"/>'
                   f'<text x="{x + 12}" y="69">recovery pass</text>')
        x += 105
        out.append(f'<path d="M{x},61 L{x + 10},61 L{x + 5},70 Z" fill="{COLOURS["refused"]}"/>'
                   f'<text x="{x + 14}" y="69">record refused</text>')
        out.append("</g>")
        return out

    def axis(self, y: int) -> list[str]:
        out = [f'<line x1="{_LABEL}" y1="{y}" x2="{self.width - 20}" y2="{y}" stroke="#333"/>']
        span = self.hi - self.lo
        fmt = "%H:%M:%S" if span < 86400 else "%m-%d %H:%M"
        if span < 10:
            fmt = "%H:%M:%S.%f"
        for i in range(7):
            t = self.lo + span * i / 6
            x = self.x(t)
            label = dt.datetime.fromtimestamp(t).astimezone().strftime(fmt)
            if fmt.endswith("%f"):
                label = label[:-3]
            anchor = "end" if i == 6 else "middle"
            out.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 5}" stroke="#333"/>'
                       f'<text x="{x}" y="{y + 18}" text-anchor="{anchor}">{label}</text>')
        zone = dt.datetime.fromtimestamp(self.lo).astimezone().strftime("%Y-%m-%d %Z")
        out.append(f'<text x="{_LABEL}" y="{y + 34}" fill="#555">local time, {zone}</text>')
        return out
