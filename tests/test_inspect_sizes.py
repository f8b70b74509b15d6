"""summary, explain and timeline show what each directory held on disk, and its peak.

A real manager of a named session grows its directory in steps, measuring
it each time through the public API; another stays small; the grown one is
then emptied, measured again and removed, so its peak outlives it.  What
the inspector says is checked against the measurements the journal holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from sessiontemp import Manager, inspect
from sessiontemp.journal.events import GenerationMeasured
from sessiontemp.journal.store import Store
from sessiontemp.space.usage import human
from tests.test_cli import assert_documented, inspect_json
from tests.test_cli import inspect as run_inspect
from tests.test_timeline import LEGEND_NAMES, SVG, classes, drawn_kinds, legend_of, marks, parse

JOURNAL = "journal.sqlite3"


def measurements(root: Path) -> dict[str, list[GenerationMeasured]]:
    store = Store(root / JOURNAL, readonly=True)
    try:
        found: dict[str, list[GenerationMeasured]] = {}
        for record in store.records_of([GenerationMeasured.kind]):
            assert isinstance(record.event, GenerationMeasured)
            found.setdefault(record.event.generation, []).append(record.event)
        return found
    finally:
        store.close()


@pytest.fixture(scope="module")
def sized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """Measured only when asked (no background measuring), so each measurement is known.

    Session "grows": 100 KB, then 3 MB, then emptied and removed (its peak stays in the
    journal); its next directory, live, 1 MB. Session "small": 10 bytes, live."""
    root = tmp_path_factory.mktemp("sizes") / "root"
    grows = Manager(root, session="grows", measure_every=math.inf)
    grows.retain()
    lease = grows.acquire(label="make big")
    removed = lease.generation
    (lease.path / "one").write_bytes(b"x" * 100_000)
    grows.measure()
    (lease.path / "two").write_bytes(b"x" * 3_000_000)
    grows.measure()
    (lease.path / "one").unlink()
    (lease.path / "two").unlink()
    grows.measure()
    lease.release()
    grows.rotate()
    live = grows.acquire(label="make more")
    (live.path / "three").write_bytes(b"x" * 1_000_000)
    grows.measure()
    small = Manager(root, session="small", measure_every=math.inf)
    small.retain()
    tiny = small.acquire(label="echo")
    (tiny.path / "f").write_bytes(b"x" * 10)
    small.measure()
    yield root, {"removed": removed, "live": live.generation, "small": tiny.generation}
    live.release()
    tiny.release()
    grows.close()
    small.close()


def test_explain_tells_how_a_directory_grew_and_its_peak_after_its_removal(
    sized: tuple[Path, dict[str, str]],
) -> None:
    root, ids = sized
    told = measurements(root)[ids["removed"]]
    story = inspect.explain(root / JOURNAL, ids["removed"], root)
    assert story.status == "removed"
    grew = [s.text for s in story.sentences if s.kind == GenerationMeasured.kind]
    peak = max(m.bytes for m in told)
    assert grew[0].startswith("First measured")
    assert human(told[0].bytes) in grew[0]
    assert any(s.startswith("Grown to") and human(peak) in s for s in grew)
    last = story.sentences[-1]
    assert last.kind == "now"
    assert len(grew) <= 3
    assert f"the last measurement {human(told[-1].bytes)}" in last.text
    assert f"its peak {human(peak)}" in last.text
    text = run_inspect("--root", root, "explain", ids["removed"]).stdout
    assert f"its peak {human(peak)}" in text


def test_a_directory_never_measured_is_explained_without_a_size(tmp_path: Path) -> None:
    manager = Manager(tmp_path / "root")
    manager.retain()
    lease = manager.acquire()
    try:
        story = inspect.explain(tmp_path / "root" / JOURNAL, lease.generation)
        assert not any("size on disk" in s.text for s in story.sentences)
        assert not any(s.kind == GenerationMeasured.kind for s in story.sentences)
    finally:
        lease.release()
        manager.close()


def test_summary_counts_measurements_and_names_the_largest_directory_and_peak(
    sized: tuple[Path, dict[str, str]],
) -> None:
    root, ids = sized
    told = measurements(root)
    result = inspect_json("--root", root, "summary")
    assert_documented("summary", result)
    space = result["space"]
    assert space["measurements"] == sum(len(v) for v in told.values()) == 5
    # The removed directory is no longer the open managers': the two live ones are.
    assert space["measured"] == 2
    assert space["largest"] == ids["live"]
    assert space["bytes"] == told[ids["live"]][-1].bytes + told[ids["small"]][-1].bytes
    assert space["peak"] == ids["live"]
    assert space["peak_bytes"] == told[ids["live"]][-1].bytes
    text = run_inspect("--root", root, "summary").stdout
    assert "5 measurements journaled" in text
    assert human(told[ids["live"]][-1].bytes) in text


def size_area(svg: ElementTree.Element, generation: str) -> ElementTree.Element:
    (bar,) = [e for e in marks(svg, "generation") if e.get("data-generation") == generation]
    group = next(g for g in svg.iter(f"{SVG}g") if bar in list(g))
    (area,) = [e for e in group if "size" in classes(e)]
    return area


def rise(area: ElementTree.Element) -> float:
    """How far the area rises above its foot, in px."""
    path = area.find(f"{SVG}path")
    assert path is not None
    ys = [float(p.split(",")[1]) for p in (path.get("d") or "").replace("M", "L").replace(
        " Z", "").split("L") if p.strip()]
    return max(ys) - min(ys)


def test_the_timeline_shades_each_bar_by_its_size_to_one_scale_titled_and_in_the_legend(
    sized: tuple[Path, dict[str, str]], tmp_path: Path,
) -> None:
    root, ids = sized
    told = measurements(root)
    out = tmp_path / "t.svg"
    inspect.timeline(root / JOURNAL, out)
    svg = parse(out)
    assert "size" in drawn_kinds(svg)
    assert {LEGEND_NAMES[k] for k in drawn_kinds(svg)} <= legend_of(svg)
    areas = {name: size_area(svg, gid) for name, gid in ids.items()}
    for name, gid in ids.items():
        peak = max(m.bytes for m in told[gid])
        assert areas[name].get("data-peak") == str(peak)
        title = areas[name].find(f"{SVG}title")
        assert title is not None
        assert title.text is not None
        assert f"peak: {human(peak)}" in title.text
        assert f"{len(told[gid])} measurement" in title.text
    # The removed one peaked highest: its area reaches the whole bar; the small one a pixel.
    assert rise(areas["removed"]) == pytest.approx(11, abs=0.01)
    assert rise(areas["live"]) == pytest.approx(11 * told[ids["live"]][-1].bytes
                                                / max(m.bytes for m in told[ids["removed"]]),
                                                abs=0.01)
    assert rise(areas["small"]) == pytest.approx(1, abs=0.01)
    captions = " ".join(e.text or "" for e in marks(svg, "caption"))
    assert human(max(m.bytes for m in told[ids["removed"]])) in captions


def test_a_timeline_without_measurements_draws_no_sizes(tmp_path: Path) -> None:
    manager = Manager(tmp_path / "root")
    manager.retain()
    manager.acquire().release()
    manager.close()
    out = tmp_path / "t.svg"
    inspect.timeline(tmp_path / "root" / JOURNAL, out)
    svg = parse(out)
    assert marks(svg, "size") == []
    assert "size on disk" not in legend_of(svg)
