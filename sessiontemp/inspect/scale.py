"""The timeline's time axis: activity at one scale, long idle stretches compressed.

A session that lives for hours runs its commands for seconds now and then;
drawn to scale, every command would be a sliver. So a stretch of the
window longer than *idle* seconds in which nothing happens (no event is
written and no lease is held, so no command of the journal runs) is drawn
as a narrow hatched band of a fixed width, titled with what it stands for,
and the rest of the window shares the width at one scale. A lease held
across hours is activity: its bar keeps its length.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from sessiontemp.inspect.measure import text_width

__all__ = ["GAP_PX", "Idle", "Scale", "duration", "idle_stretches"]

# The width of one compressed stretch, at most; all of them together take at most a quarter
# of the width, so a journal with many still leaves its activity most of the picture.
GAP_PX: Final = 24.0
_GAPS_SHARE: Final = 0.25
# Tick steps, in seconds: each label at least _TICK_PX apart at the activity's scale.
_STEPS: Final = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60,
                 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
                 604800)
_TICK_PX: Final = 110.0
_TICK_GAP: Final = 12.0


@attrs.frozen
class Idle:
    """A stretch drawn compressed: from *start* to *stop* (epoch seconds), at *x0* to *x1*."""

    start: float
    stop: float
    x0: float
    x1: float


def idle_stretches(lo: float, hi: float, quiet: Iterable[tuple[float, float]],
                   busy: Iterable[tuple[float, float]], longer_than: float
                   ) -> list[tuple[float, float]]:
    """The parts of the *quiet* stretches (no event between their ends) inside [*lo*, *hi*]
    that no *busy* interval (a lease held) covers, longer than *longer_than* seconds."""
    held = _union(busy)
    starts = [a for a, _ in held]
    found: list[tuple[float, float]] = []
    for a, b in sorted(quiet):
        a, b = max(a, lo), min(b, hi)
        # Walk the held intervals that may overlap (a, b); what lies between them is free.
        i = max(bisect.bisect_right(starts, a) - 1, 0)
        cursor = a
        while cursor < b:
            if i < len(held) and held[i][0] <= cursor:
                cursor = max(cursor, held[i][1])
                i += 1
                continue
            stop = min(b, held[i][0]) if i < len(held) else b
            if stop - cursor > longer_than:
                found.append((cursor, stop))
            cursor = stop
    return found


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


class Scale:
    """Epoch seconds to x, piecewise: the window's activity at one scale, idle stretches
    squeezed into bands of at most :data:`GAP_PX` each."""

    def __init__(self, lo: float, hi: float, x0: float, x1: float,
                 idle: Sequence[tuple[float, float]] = ()) -> None:
        self.lo, self.hi = lo, hi
        gaps = sorted((a, b) for a, b in idle if lo <= a < b <= hi)
        if sum(b - a for a, b in gaps) >= hi - lo:
            gaps = []  # idle throughout: nothing to give the width to, so time to scale
        width = x1 - x0
        gap_px = min(GAP_PX, _GAPS_SHARE * width / len(gaps)) if gaps else 0.0
        active = (hi - lo) - sum(b - a for a, b in gaps)
        # Seconds of activity per pixel; a window of one instant gets one second.
        self.per_px = max(active, 1e-9) / max(width - gap_px * len(gaps), 1.0)
        # Breakpoints (time, x) between which x is linear in time.
        self.times: list[float] = [lo]
        self.xs: list[float] = [x0]
        idles = []
        for a, b in gaps:
            self._to(a)
            start = self.xs[-1]
            self.times.append(b)
            self.xs.append(start + gap_px)
            idles.append(Idle(a, b, round(start, 2), round(start + gap_px, 2)))
        self._to(hi)
        self.idle: tuple[Idle, ...] = tuple(idles)

    def _to(self, t: float) -> None:
        self.xs.append(self.xs[-1] + (t - self.times[-1]) / self.per_px)
        self.times.append(t)

    def x(self, t: float) -> float:
        """Where time *t* is drawn (clamped to the window)."""
        t = min(max(t, self.lo), self.hi)
        i = min(max(bisect.bisect_right(self.times, t) - 1, 0), len(self.times) - 2)
        t0, t1, x0, x1 = self.times[i], self.times[i + 1], self.xs[i], self.xs[i + 1]
        return round(x0 if t1 <= t0 else x0 + (t - t0) / (t1 - t0) * (x1 - x0), 2)

    def ticks(self) -> list[tuple[float, str, str]]:
        """Labelled ticks (x, local time, text-anchor) for the axis: the window's ends and the
        start of each stretch of activity after an idle one first, then round times at the
        activity's scale wherever they fit between those."""
        step = next((s for s in _STEPS if s / self.per_px >= _TICK_PX), _STEPS[-1])
        fmt = ("%H:%M:%S.%f" if step < 1 else "%H:%M:%S" if step < 86400 else "%m-%d %H:%M")
        if self.hi - self.lo >= 86400 and step < 86400:
            fmt = "%m-%d " + fmt
        starts = [self.lo, *(g.stop for g in self.idle)]
        stops = [*(g.start for g in self.idle), self.hi]
        placed: list[tuple[float, str, str]] = []

        def place(t: float, anchor: str) -> None:
            x, text = self.x(t), _clock(t, fmt)
            width = text_width(text)
            left = x - {"start": 0.0, "middle": width / 2, "end": width}[anchor]
            for px, ptext, panchor in placed:
                pwidth = text_width(ptext)
                pleft = px - {"start": 0.0, "middle": pwidth / 2, "end": pwidth}[panchor]
                if left < pleft + pwidth + _TICK_GAP and pleft < left + width + _TICK_GAP:
                    return
            placed.append((x, text, anchor))

        # Where they would overlap, the first placed wins: the end, then the starts after
        # idle stretches (only the axis says when activity resumed), then the window's start
        # (which the caption says too), then round times.
        place(self.hi, "end")
        for a in [*starts[1:], starts[0]]:
            place(a, "start")
        for a, b in zip(starts, stops, strict=True):
            for k in range(int(a // step) + 1, int(b // step) + 1):
                place(k * step, "middle")
        return sorted(placed)


def _clock(t: float, fmt: str) -> str:
    text = dt.datetime.fromtimestamp(t).astimezone().strftime(fmt)
    return text[:-3] if fmt.endswith("%f") else text


def duration(seconds: float) -> str:
    """A length of time for people: 3.3 ms, 45 s, 12 min, 3 h 12 min, 2 d 4 h."""
    s = round(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if s < 120:
        return f"{seconds:.3g} s" if seconds < 10 else f"{s} s"
    m = s // 60
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"
