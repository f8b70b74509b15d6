"""The timeline's time axis: idle stretches are found exactly, and squeezed without lying.

A stretch is idle when no event falls inside it and no lease covers any of
it; only those longer than the threshold are compressed, each into a band
of at most ``GAP_PX``; the rest of the window keeps one scale, so two
commands of equal length are drawn equally long wherever they ran.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import given

from sessiontemp.inspect.scale import GAP_PX, Scale, duration, idle_stretches
from tests.strategies import Activity, activities, scaled

X0, X1 = 190.0, 1180.0


def quiet_of(activity: Activity) -> list[tuple[float, float]]:
    """The stretches between consecutive events, as the timeline's replay collects them."""
    return list(itertools.pairwise(activity.events))


def test_a_lease_held_across_a_quiet_stretch_is_activity() -> None:
    # Events at 0 and 1000; a command held its lease from 100 to 400.
    found = idle_stretches(0.0, 1000.0, [(0.0, 1000.0)], [(100.0, 400.0)], 60.0)
    assert found == [(0.0, 100.0), (400.0, 1000.0)]
    assert idle_stretches(0.0, 1000.0, [(0.0, 1000.0)], [(0.0, 1000.0)], 60.0) == []
    assert idle_stretches(0.0, 100.0, [(0.0, 100.0)], [(30.0, 50.0)], 60.0) == []


@scaled(0.5)
@given(activities())
def test_idle_stretches_are_longer_than_the_threshold_and_hold_no_event_and_no_lease(
    activity: Activity,
) -> None:
    found = idle_stretches(activity.lo, activity.hi, quiet_of(activity), activity.leases, 60.0)
    assert found == sorted(found)
    for (_, b), (c, _) in itertools.pairwise(found):
        assert b <= c
    for a, b in found:
        assert b - a > 60.0
        assert not any(a < t < b for t in activity.events)
        assert not any(a < lease_stop and lease_start < b
                       for lease_start, lease_stop in activity.leases)


@scaled(0.5)
@given(activities())
def test_the_scale_keeps_order_ends_and_one_rate_for_activity(activity: Activity) -> None:
    idle = idle_stretches(activity.lo, activity.hi, quiet_of(activity), activity.leases, 60.0)
    scale = Scale(activity.lo, activity.hi, X0, X1, idle)
    xs = [scale.x(t) for t in activity.events]
    assert xs == sorted(xs)
    assert math.isclose(scale.x(activity.lo), X0, abs_tol=0.01)
    if activity.hi > activity.lo:
        assert math.isclose(scale.x(activity.hi), X1, abs_tol=0.02)
    # All of the window idle leaves nothing to widen: then time is drawn to scale.
    whole = sum(b - a for a, b in idle) >= activity.hi - activity.lo
    assert len(scale.idle) == (0 if whole else len(idle))
    assert all(0 < band.x1 - band.x0 <= GAP_PX + 0.01 for band in scale.idle)
    # Outside the bands, one pixel stands for the same time everywhere.
    inside = [(a, b) for a, b in itertools.pairwise(activity.events)
              if b - a > 1 and not any(g.start <= a and b <= g.stop for g in scale.idle)
              and not any(a < g.start < b for g in scale.idle)]
    for a, b in inside:
        assert math.isclose((scale.x(b) - scale.x(a)), (b - a) / scale.per_px, abs_tol=0.05)


def test_ticks_name_the_ends_and_the_start_of_each_stretch_after_an_idle_one() -> None:
    lo = 1_790_000_000.0
    scale = Scale(lo, lo + 8 * 3600, X0, X1, [(lo + 60, lo + 3 * 3600)])
    ticks = scale.ticks()
    xs = [x for x, _, _ in ticks]
    assert xs == sorted(xs)
    assert xs[-1] == X1
    (band,) = scale.idle
    assert band.x1 in xs  # activity starts again after the band: labelled
    assert ticks[-1][2] == "end"
    # With room before the band, the window's start is labelled too.
    wide = Scale(lo, lo + 8 * 3600, X0, X1, [(lo + 3600, lo + 3 * 3600)]).ticks()
    assert wide[0][0] == X0


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (0.0033, 4.5, 45, 300, 3 * 3600 + 12 * 60, 50 * 3600)] == [
        "3.3 ms", "4.5 s", "45 s", "5 min", "3 h 12 min", "2 d 2 h"]
