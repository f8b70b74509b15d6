"""The timeline as SVG: lanes down, time across, every mark titled and in the legend.

What is drawn (:class:`Lane`, :class:`Generation`, :class:`Lease`,
:class:`Manager`, :class:`Mark`) is gathered by :mod:`.timeline`; this module
only places and writes it.  The picture is self-contained: styles inline, a
hatch pattern of its own, no script, no font file, nothing fetched.

Text from the journal (labels, session names, reasons, paths) is written as
XML can hold it: markup characters escaped, and characters XML 1.0 forbids
or a terminal would act on (C0 and C1 controls) shown as ``\\x07``-style
escapes, never dropped; the journal keeps them as given.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal, TypeAlias
from xml.sax.saxutils import escape, quoteattr

import attrs

from sessiontemp.inspect.measure import fit, text_width, wrap
from sessiontemp.inspect.read import counted
from sessiontemp.inspect.scale import Scale, duration
from sessiontemp.space.usage import human

__all__ = ["COLOURS", "Ending", "Generation", "Lane", "Lease", "Manager", "Mark", "Picture",
           "clock", "xml_attribute", "xml_text"]

Ending: TypeAlias = Literal["normal", "recovery", "live", "refused"]
"""How a generation ended: removed by its manager, by a recovery, not yet, or refused."""
Shape: TypeAlias = Callable[[float, float], str]
"""Draws a legend item's mark with its top left at (x, y)."""

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
_TURNED_AWAY: Final = "#cc79a7"  # an acquire refused for space: a no-entry sign
_LIFETIME: Final = "#888888"
_SIZE_FILL: Final = "#000000"  # the size area, see-through over the bar's colour
_SIZE_OPACITY: Final = 0.35
LABEL: Final = 190  # the left column holding lane names
_ROW: Final = 14  # one row of bars inside a lane
_ROWS: Final = 4  # rows a lane packs overlapping bars into, at most
GROUP_PX: Final = 4  # the width of one grouped column
_SIZE: Final = 11  # the picture's font size, px
_SMALL: Final = 7  # the same for labels inside lease bars
_LINE: Final = 14  # from one line of the caption and notes to the next

# Characters XML 1.0 forbids (and C1 controls, which it allows but nothing shows), and
# lone surrogates, which UTF-8 cannot hold.
_UNWRITABLE: Final = re.compile("[\x00-\x1f\x7f-\x9f\ufffe\uffff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _writable(text: object) -> str:
    shown = _UNWRITABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", str(text))
    # A path that is not UTF-8 holds surrogate escapes of its odd bytes: U+FFFD stands
    # for each, as an SVG is UTF-8 text.
    return _SURROGATE.sub("\ufffd", shown)


def xml_text(text: object) -> str:
    """*text* as SVG character data can hold it: controls shown as escapes, markup escaped."""
    return escape(_writable(text))


def xml_attribute(text: object) -> str:
    """*text* as a quoted SVG attribute value, quotes included."""
    return quoteattr(_writable(text))


def clock(t: float) -> str:
    """A moment for a tooltip: local ISO 8601, to the millisecond."""
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


@attrs.define
class Lease:
    """A lease drawn inside its generation's bar; *commands* as (pid, seq, time)."""

    id: str
    start: float
    start_seq: int
    label: str = ""
    end: float | None = None
    end_seq: int | None = None
    commands: list[tuple[int, int, float]] = attrs.field(factory=list)
    manager: str | None = None
    died: tuple[float, int] | None = None  # never released: its manager found dead (time, seq)

    def stop(self, otherwise: float) -> float:
        """When it ended: released; else gone with its manager, unless a command started
        under it may have held the directory on (then, as when nothing is known, *otherwise*:
        the end of its generation)."""
        if self.end is not None:
            return self.end
        return self.died[0] if self.died is not None and not self.commands else otherwise


@attrs.define
class Generation:
    """A generation drawn as a bar from its creation to the end of its removal."""

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
    leases: list[Lease] = attrs.field(factory=list)
    reappeared: list[int] = attrs.field(factory=list)
    adopted: list[tuple[int, str]] = attrs.field(factory=list)  # (seq, manager)
    held: int | None = None  # the seq of a refused record that names it or its manager
    sizes: list[tuple[float, int, int, int]] = attrs.field(factory=list)  # (time, bytes,
    # inodes, seq) of each measurement journaled

    @property
    def peak(self) -> int:
        """The largest size any measurement of it found, in bytes (0: never measured)."""
        return max((b for _, b, _, _ in self.sizes), default=0)

    def ending(self) -> Ending:
        """How it ended, by the journal: its manager, a recovery, not yet, or refused."""
        # Kept by a refused record, or its removal refused: a person must decide.
        if (self.held is not None and self.end is None) or (
            self.outcome is not None and self.outcome.startswith("refused")
        ):
            return "refused"
        if self.end is None:
            return "live"
        return "normal" if self.by is not None and self.by == self.manager else "recovery"


@attrs.define
class Manager:
    """A manager's life: drawn as a grey line along its lane."""

    id: str
    pid: int
    start: float
    start_seq: int
    end: float | None = None
    end_seq: int | None = None
    ended: str | None = None
    by: str | None = None
    session: str | None = None

    def story(self) -> str:
        """Its pid, and when it opened and ended, for a tooltip."""
        how = ("still open" if self.ended is None else
               f"closed at event {self.end_seq}" if self.ended == "closed" else
               f"found dead at event {self.end_seq} by recovery {self.by}")
        return f"manager {self.id} (pid {self.pid}): opened at event {self.start_seq}, {how}"


@attrs.frozen
class Mark:
    """A moment marked on the picture (a crash, a recovery pass, a refused record)."""

    time: float
    seq: int
    text: str
    manager: str | None = None


@attrs.define
class Lane:
    """One row of the picture: a named session, a manager, several merged, or the strays."""

    key: str
    name: str
    detail: str
    about: str  # its tooltip, one line of it per manager
    kind: Literal["session", "manager", "managers", "strays"]
    managers: list[Manager] = attrs.field(factory=list)


class Picture:
    """The SVG being drawn: lanes down, time across (on *scale*)."""

    def __init__(self, scale: Scale, end: float, width: int, lanes: Sequence[Lane],
                 lane_of: Mapping[str, str], caption: str, notes: Sequence[tuple[str, str]],
                 grouped: bool, largest: int = 0, turned_away: bool = False) -> None:
        self.scale, self.end, self.width = scale, end, width
        # The largest peak drawn: a bar's full height on the size scale (0: no sizes).
        self.largest = largest
        # Whether an acquire refused for space is marked (its legend item).
        self.turned_away = turned_away
        self.lanes = list(lanes)
        self.index = {lane.key: i for i, lane in enumerate(self.lanes)}
        self.lane_of = lane_of
        self.grouped = grouped
        # Many lanes: one row each, so the picture stays a few screens tall.
        self.row_count = 1 if len(self.lanes) > 30 else _ROWS
        self.rows: dict[str, list[float]] = {lane.key: [] for lane in self.lanes}
        # The caption, then each note, wrapped to the width.
        self.lines = [(colour, line) for colour, text in [("#333", caption), *notes]
                      for line in wrap(text, max(width - 20, 200), _SIZE)]
        below = 35 + _LINE * len(self.lines)
        self.key, rows = self.legend(below)
        # Below the legend: room for the recovery passes' dots and refused records' marks.
        self.top = below + 16 * rows + 24
        self.lane_height = _ROW * self.row_count + (12 if self.row_count > 1 else 6)
        self.body: list[str] = []
        self.axis_marks: list[str] = []

    def x(self, t: float) -> float:
        return self.scale.x(t)

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

    # -- generations, one bar each or grouped --------------------------------------------

    def bars(self, generations: Sequence[Generation]) -> int:
        for g in generations:
            lane = self.lane(g.manager)
            stop = g.end if g.end is not None else self.end
            x0, x1 = self.x(g.start), self.x(stop)
            w = max(x1 - x0, 1.0)
            row = self.row_for(lane, x0, x0 + w + 1)
            y = self.lane_y(lane) + 3 + row * _ROW
            ending = g.ending()
            parts = [f'<rect class="generation {ending}" data-generation={xml_attribute(g.id)} '
                     f'x="{x0}" y="{y}" width="{round(w, 2)}" height="{_ROW - 3}" rx="2" '
                     f'fill="{COLOURS[ending]}"/>']
            if g.sizes and self.largest:
                parts.append(self._sizes(g, stop, y))
            parts += [self._lease(lease, stop, y) for lease in g.leases]
            self.body.append(f"<g><title>{self._about(g, ending)}</title>"
                             + "".join(parts) + "</g>")
        return len(generations)

    def _about(self, g: Generation, ending: str) -> str:
        lines = [f"generation {g.id} ({ending})",
                 f"created at event {g.start_seq} ({clock(g.start)})"
                 + (f" by manager {g.manager}" if g.manager and not g.adopted
                    else " (a stray)" if not g.manager else "")]
        lines += [f"adopted at event {seq} by manager {m} (a resume)" for seq, m in g.adopted]
        if g.reappeared:
            lines.append("on disk again after its removal at event(s) "
                         + ", ".join(map(str, g.reappeared)))
        if g.removal_seq is not None:
            lines.append(f"removal started at event {g.removal_seq} by {g.by}: {g.reason}")
        if g.end_seq is not None:
            lines.append(f"removal finished at event {g.end_seq} ({g.outcome})")
        if g.held is not None:
            lines.append(f"kept: event {g.held}, which the lifecycle rules refuse, names it or "
                         "its manager")
        return "\n".join(xml_text(line) for line in lines)

    def _sizes(self, g: Generation, stop: float, y: int) -> str:
        """Its size over time as a step area rising from the bar's foot: each measurement
        holds until the next, the last until the bar ends; a full bar is the largest peak."""
        height = _ROW - 3
        foot = y + height

        def top(size: int) -> float:
            # A directory that holds anything shows at least a pixel of it.
            rise = height * size / self.largest
            return round(foot - (max(rise, 1.0) if size else 0.0), 2)

        x_end = max(self.x(stop), self.x(g.start) + 1.0)
        points = [f"M{self.x(g.sizes[0][0])},{foot}"]
        for i, (t, size, _inodes, _seq) in enumerate(g.sizes):
            x0 = self.x(t)
            x1 = self.x(g.sizes[i + 1][0]) if i + 1 < len(g.sizes) else x_end
            points.append(f"L{x0},{top(size)} L{x1},{top(size)}")
        points.append(f"L{x_end},{foot} Z")
        t_last, last, last_inodes, seq_last = g.sizes[-1]
        t_peak, peak, peak_inodes, seq_peak = max(g.sizes, key=lambda m: (m[1], -m[0]))
        lines = [f"generation {g.id}: size on disk, {counted(len(g.sizes), 'measurement')}",
                 f"last: {human(last)} in {last_inodes:,} inodes at event {seq_last} "
                 f"({clock(t_last)})",
                 f"peak: {human(peak)} in {peak_inodes:,} inodes at event {seq_peak} "
                 f"({clock(t_peak)})"]
        return (f'<g class="size" data-peak="{peak}"><title>'
                f'{chr(10).join(xml_text(s) for s in lines)}</title>'
                f'<path d="{" ".join(points)}" fill="{_SIZE_FILL}" '
                f'fill-opacity="{_SIZE_OPACITY}"/></g>')

    def _lease(self, lease: Lease, stop: float, y: int) -> str:
        lstop = lease.stop(stop)
        lx0, lx1 = self.x(lease.start), self.x(lstop)
        lw = max(lx1 - lx0, 1.0)
        lines = [f"lease {lease.id}" + (f": {lease.label}" if lease.label else " (no label)"),
                 f"taken at event {lease.start_seq} ({clock(lease.start)})"]
        lines += [f"command pid {pid} started at event {seq} ({clock(t)})"
                  for pid, seq, t in lease.commands]
        if lease.end_seq is not None and lease.end is not None:
            lines.append(f"released at event {lease.end_seq} ({clock(lease.end)}), "
                         f"{duration(lease.end - lease.start)} after it was taken")
        elif lease.died is not None:
            lines.append(f"never released: its manager was found dead at event "
                         f"{lease.died[1]} ({clock(lease.died[0])})"
                         + ("; a command started under it may have held the directory until "
                            "its removal" if lease.commands else ""))
        else:
            lines.append("never released in the journal")
        text = fit(lease.label or lease.id[:8], lw - 4, _SMALL)
        return (f'<g class="lease"><title>{chr(10).join(xml_text(s) for s in lines)}</title>'
                f'<rect x="{lx0}" y="{y + 7}" width="{round(lw, 2)}" height="3" '
                f'fill="{_LEASE}"/>'
                + (f'<text x="{lx0 + 2}" y="{y + 6}" font-size="7" fill="#fff">'
                   f'{xml_text(text)}</text>' if lw > 24 and text else "")
                + "</g>")

    def groups(self, generations: Sequence[Generation]) -> int:
        columns: dict[tuple[str, int], list[Generation]] = {}
        for g in generations:
            column = int((self.x(g.start) - LABEL) // GROUP_PX)
            columns.setdefault((self.lane(g.manager), column), []).append(g)
        for (lane, column), members in sorted(columns.items(),
                                              key=lambda kv: (self.index[kv[0][0]],
                                                              kv[0][1])):
            counts: Counter[str] = Counter(g.ending() for g in members)
            ending = counts.most_common(1)[0][0]
            x0 = LABEL + column * GROUP_PX
            y = self.lane_y(lane) + 3
            # Height grows with the count, up to the lane, so dense stretches show.
            h = min(self.lane_height - 6, 4 + 6 * math.log2(len(members)))
            last = max(g.end_seq or g.start_seq for g in members)
            seqs = f"events {members[0].start_seq} to {last}"
            text = (f"{len(members)} generations begun here ({seqs}): "
                    + ", ".join(f"{counts[k]} {k}" for k in COLOURS if counts[k]))
            peak = max(g.peak for g in members)
            if peak:
                text += f"; the largest peaked at {human(peak)}"
            self.body.append(
                f'<g><title>{xml_text(text)}</title><rect class="group {ending}" '
                f'data-count="{len(members)}" x="{x0}" y="{y}" width="{GROUP_PX - 0.5}" '
                f'height="{round(h, 2)}" fill="{COLOURS[ending]}"/></g>')
        return len(columns)

    # -- moments and idle stretches ------------------------------------------------------

    def marks(self, crashes: Sequence[Mark], recoveries: Sequence[Mark],
              refused: Sequence[Mark], turned_away: Sequence[Mark] = ()) -> None:
        bottom = self.top + len(self.lanes) * self.lane_height
        for r in recoveries:
            x = self.x(r.time)
            self.axis_marks.append(
                f'<g class="recovery-pass"><title>{xml_text(r.text)}</title>'
                f'<line x1="{x}" y1="{self.top - 8}" x2="{x}" y2="{bottom}" stroke="{_RECOVERY}" '
                f'stroke-width="1" stroke-dasharray="3,3" opacity="0.6"/>'
                f'<circle cx="{x}" cy="{self.top - 8}" r="3" fill="{_RECOVERY}"/></g>')
        for c in crashes:
            x, y = self.in_lane(c)
            self.axis_marks.append(
                f'<g class="crash"><title>{xml_text(c.text)}</title>'
                f'<path d="M{x - 5},{y - 5} L{x + 5},{y + 5} M{x - 5},{y + 5} L{x + 5},{y - 5}" '
                f'stroke="{_CRASH}" stroke-width="2.5"/></g>')
        for a in turned_away:
            x, y = self.in_lane(a)
            self.axis_marks.append(
                f'<g class="space-refused"><title>{xml_text(a.text)}</title>'
                f'<circle cx="{x}" cy="{y}" r="5" fill="#ffffff" stroke="{_TURNED_AWAY}" '
                f'stroke-width="2"/><line x1="{x - 3.5}" y1="{y + 3.5}" x2="{x + 3.5}" '
                f'y2="{y - 3.5}" stroke="{_TURNED_AWAY}" stroke-width="2"/></g>')
        for f in refused:
            x = self.x(f.time)
            y = self.top - 20
            self.axis_marks.append(
                f'<g class="refused-record"><title>{xml_text(f.text)}</title>'
                f'<path d="M{x - 5},{y - 6} L{x + 5},{y - 6} L{x},{y + 3} Z" '
                f'fill="{COLOURS["refused"]}"/></g>')

    def in_lane(self, mark: Mark) -> tuple[float, float]:
        """Where *mark* goes: its time, across the middle of its manager's lane (or the top)."""
        lane = self.lane_of.get(mark.manager or "")
        y = self.top if lane is None else self.lane_y(lane) + self.lane_height / 2
        return self.x(mark.time), y

    def idle_bands(self) -> list[str]:
        bottom = self.top + len(self.lanes) * self.lane_height
        out = []
        for gap in self.scale.idle:
            about = (f"idle for {duration(gap.stop - gap.start)}, from {clock(gap.start)} to "
                     f"{clock(gap.stop)}: no event and no lease held; drawn "
                     f"{gap.x1 - gap.x0:g} px wide instead of to scale")
            out.append(
                f'<g class="idle"><title>{xml_text(about)}</title>'
                f'<rect x="{gap.x0}" y="{self.top - 4}" width="{round(gap.x1 - gap.x0, 2)}" '
                f'height="{bottom - self.top + 10}" fill="url(#idle)"/></g>')
        return out

    # -- the whole ----------------------------------------------------------------------

    def render(self, heading: str) -> str:
        bottom = self.top + len(self.lanes) * self.lane_height
        height = bottom + 50
        out = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{height}" '
            f'viewBox="0 0 {self.width} {height}" font-family="sans-serif" font-size="11">',
            f"<title>{xml_text(heading)}</title>",
            # Idle stretches: grey hatching, see-through enough to show a bar that crosses.
            '<defs><pattern id="idle" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff" '
            'opacity="0.55"/><line x1="0" y1="0" x2="0" y2="6" stroke="#9a9a9a" '
            'stroke-width="2.5"/></pattern></defs>',
            f'<rect width="{self.width}" height="{height}" fill="#ffffff"/>',
            f'<text x="10" y="18" font-size="14" font-weight="bold">{xml_text(heading)}</text>',
        ]
        for i, (colour, line) in enumerate(self.lines):
            out.append(f'<text class="caption" x="10" y="{34 + _LINE * i}" fill="{colour}">'
                       f'{xml_text(line)}</text>')
        out += ['<g class="legend">', *self.key, "</g>"]
        for i, lane in enumerate(self.lanes):
            y = self.top + i * self.lane_height
            fill = "#f4f4f4" if i % 2 == 0 else "#fbfbfb"
            out.append(f'<rect x="0" y="{y}" width="{self.width}" height="{self.lane_height}" '
                       f'fill="{fill}"/>')
            out.append(self.lane_label(lane, y))
        out += self.axis(bottom)
        out += self.body
        out += self.idle_bands()
        out += self.axis_marks
        out.append("</svg>")
        return "\n".join(out) + "\n"

    def lane_label(self, lane: Lane, y: int) -> str:
        first = y + min(20, self.lane_height - 6)
        detail = f" {lane.detail}" if lane.detail else ""
        name = fit(lane.name, LABEL - 12 - text_width(detail, _SIZE), _SIZE)
        data = "" if lane.kind != "session" else f" data-session={xml_attribute(lane.name)}"
        # Classes apart from the lifetime lines' "manager": a test counts those per manager.
        kind = {"session": " session", "managers": " managers", "strays": " strays"}.get(
            lane.kind, "")
        about = "\n".join(xml_text(line) for line in lane.about.split("\n"))
        label = (f'<g class="lane{kind}"{data}><title>{about}</title>'
                 # Kept, the space before the detail: some renderers drop a space that
                 # starts a <tspan> (librsvg does), and the pid would touch the name.
                 f'<text x="6" y="{first}" xml:space="preserve">{xml_text(name)}'
                 + (f'<tspan fill="#555">{xml_text(detail)}</tspan>' if detail else "")
                 + "</text></g>")
        mid = y + self.lane_height - 5
        lines = []
        for m in lane.managers:
            x0, x1 = self.x(m.start), self.x(m.end if m.end is not None else self.end)
            lines.append(f'<g class="manager" data-manager={xml_attribute(m.id)}><title>'
                         f'{xml_text(m.story())}</title><line x1="{x0}" y1="{mid}" '
                         f'x2="{max(x1, x0 + 1)}" y2="{mid}" stroke="{_LIFETIME}" '
                         'stroke-width="2"/></g>')
        return label + "".join(lines)

    def legend(self, top: float) -> tuple[list[str], int]:
        """Every kind of mark the picture may hold, with what it means, in rows from *top*;
        and how many rows that took."""
        def swatch(fill: str) -> Shape:
            return lambda x, y: f'<rect x="{x}" y="{y}" width="12" height="10" fill="{fill}"/>'

        items: list[tuple[Shape, int, str]] = [
            *[(swatch(COLOURS[key]), 14, text) for key, text in (
                ("normal", "removed by its manager"), ("recovery", "removed by a recovery"),
                ("live", "not removed yet"), ("refused", "refused, or kept by a refused record"))],
            (lambda x, y: f'<rect x="{x}" y="{y + 3}" width="14" height="3" fill="{_LEASE}"/>',
             18, "lease"),
            (lambda x, y: f'<line x1="{x}" y1="{y + 5}" x2="{x + 14}" y2="{y + 5}" '
             f'stroke="{_LIFETIME}" stroke-width="2"/>', 18, "manager open"),
            (lambda x, y: f'<path d="M{x},{y + 1} L{x + 9},{y + 10} M{x},{y + 10} L{x + 9},'
             f'{y + 1}" stroke="{_CRASH}" stroke-width="2"/>', 13, "manager found dead"),
            (lambda x, y: f'<circle cx="{x + 4}" cy="{y + 5}" r="3" fill="{_RECOVERY}"/>', 12,
             "recovery pass"),
            (lambda x, y: f'<path d="M{x},{y + 1} L{x + 10},{y + 1} L{x + 5},{y + 10} Z" '
             f'fill="{COLOURS["refused"]}"/>', 14, "record refused"),
        ]
        if self.turned_away:
            items.append((lambda x, y: f'<circle cx="{x + 5}" cy="{y + 5}" r="4" fill="#ffffff" '
                          f'stroke="{_TURNED_AWAY}" stroke-width="2"/>', 13,
                          "acquire refused for space"))
        if self.largest and not self.grouped:
            # One path, as every legend mark is one element: a small step area.
            items.append((lambda x, y: f'<path d="M{x},{y + 10} L{x},{y + 6} L{x + 5},{y + 6} '
                          f'L{x + 5},{y + 3} L{x + 10},{y + 3} L{x + 10},{y} L{x + 14},{y} '
                          f'L{x + 14},{y + 10} Z" fill="{_SIZE_FILL}" '
                          f'fill-opacity="{_SIZE_OPACITY}"/>', 18, "size on disk"))
        if self.scale.idle:
            items.append((lambda x, y: f'<rect x="{x}" y="{y}" width="14" height="10" '
                          'fill="url(#idle)" stroke="#9a9a9a" stroke-width="0.5"/>', 18,
                          "idle, compressed"))
        if self.grouped:
            items.append((lambda x, y: f'<rect x="{x}" y="{y}" width="{GROUP_PX - 0.5}" '
                          f'height="10" fill="{COLOURS["normal"]}"/>', 8,
                          "generations begun there"))
        out = []
        x, row = 10.0, 0
        for shape, offset, text in items:
            size = offset + 2 + text_width(text, _SIZE) + 9
            if x + size > self.width - 10 and x > 10:
                x, row = 10.0, row + 1
            y = top + 16 * row
            out.append(shape(round(x, 1), y) + f'<text x="{round(x + offset + 2, 1)}" '
                       f'y="{y + 9}">{xml_text(text)}</text>')
            x += size
        return out, row + 1

    def axis(self, y: int) -> list[str]:
        right = self.width - 20
        out = [f'<line x1="{LABEL}" y1="{y}" x2="{right}" y2="{y}" stroke="#333"/>']
        for x, label, anchor in self.scale.ticks():
            out.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 5}" stroke="#333"/>'
                       f'<text x="{x}" y="{y + 18}" text-anchor="{anchor}">{label}</text>')
        lo = self.scale.lo
        zone = dt.datetime.fromtimestamp(lo).astimezone().strftime("%Y-%m-%d %Z")
        out.append(f'<text x="{LABEL}" y="{y + 34}" fill="#555">local time, {zone}</text>')
        return out
