"""The timeline as it is drawn: no text runs into another, nor out of the room it is given.

An SVG names a font family; the viewer picks the font. The widths checked
here are read from DejaVu Sans's own file (tests/fonts.py), the sans-serif
librsvg and Chromium draw with on most Linux systems and the widest in
common use: text that fits in it fits in Arial or Helvetica too. Skipped
where the font is not installed.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from sessiontemp import Manager, inspect, recover
from tests.fonts import DEJAVU_SANS, Font
from tests.test_inspect_sessions import killed_owner
from tests.test_timeline import (
    JOURNAL,
    SVG,
    classes,
    many_generations,
    marks,
    parse,
    records_with_a_refused_one,
    write,
)

pytestmark = pytest.mark.skipif(not DEJAVU_SANS.exists(), reason="needs DejaVu Sans")

LABEL_COLUMN = 190  # where the lanes' bars begin
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@pytest.fixture(scope="module")
def font() -> Font:
    return Font(DEJAVU_SANS)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, int]]:
    """(SVG, width) drawn from journals holding every kind of mark and the longest texts:
    a named session resumed after its owner was killed (a lane of two managers), an
    unnamed manager (a lane named by id and pid), commands hours apart (idle stretches
    and their note), a long session name and label, 3,000 grouped generations, and a
    record the rules refuse."""
    place = tmp_path_factory.mktemp("layout")
    root = place / "root"
    plain = Manager(root)
    plain.retain()
    with plain.acquire(label="make test") as lease:
        (lease.path / "data").write_bytes(b"x" * 100_000)
        plain.measure()  # a size drawn: its legend entry and its note
    plain.close()
    named = Manager(root, session="a-session-name-longer-than-any-lane-label-holds")
    named.retain()
    named.acquire().release()
    named.close()
    killed_owner(root, "chat-B")
    # Its clock is passed in, so the hours between its commands go by at once.
    now = [time.time() + 1]
    resumed = Manager(root, session="chat-B", clock=lambda: now[0])
    resumed.retain()
    label = "pytest -x tests/test_api.py::test_a_very_long_name_that_no_bar_can_hold_whole"
    for length, idle in ((12.0, 300.0), (40.0, 3 * 3600.0), (1.0, 0.0)):
        with resumed.acquire(label=label) as lease:
            lease.popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL).communicate()
            now[0] += length
        now[0] += idle
    resumed.close()
    recover(root, clock=lambda: now[0])
    grouped = place / "grouped" / JOURNAL
    grouped.parent.mkdir()
    write(grouped, many_generations(3000), batch=500)
    refused = place / "refused" / JOURNAL
    refused.parent.mkdir()
    write(refused, records_with_a_refused_one(), batch=1)
    drawn = []
    for i, (journal, width) in enumerate([(root / JOURNAL, 1200), (root / JOURNAL, 800),
                                          (grouped, 1200), (refused, 1200)]):
        out = place / f"{i}.svg"
        inspect.timeline(journal, out, width=width)
        drawn.append((out, width))
    return drawn


def left_of(shape: ElementTree.Element) -> float:
    """The leftmost x of a legend item's mark."""
    if shape.tag == f"{SVG}circle":
        return float(shape.get("cx", "0")) - float(shape.get("r", "0"))
    if shape.tag == f"{SVG}path":
        return float(shape.get("d", "M0").split(",")[0].removeprefix("M"))
    return float(shape.get("x", shape.get("x1", "0")))


def test_legend_entries_never_run_into_the_next_nor_out_of_the_picture(
    pictures: list[tuple[Path, int]], font: Font,
) -> None:
    for path, width in pictures:
        (legend,) = marks(parse(path), "legend")
        items = list(legend)
        entries = [(items[i], items[i + 1]) for i in range(0, len(items), 2)]
        assert all(text.tag == f"{SVG}text" for _, text in entries)
        def right(text: ElementTree.Element) -> float:
            return float(text.get("x", "0")) + font.width(text.text or "", 11)

        assert all(right(text) <= width - 10 for _, text in entries), path
        for (_, text), (shape, following) in itertools.pairwise(entries):
            if following.get("y") == text.get("y"):
                assert right(text) + 4 <= left_of(shape), (path, text.text, following.text)


def test_lane_names_fit_the_label_column_with_a_space_before_the_pid(
    pictures: list[tuple[Path, int]], font: Font,
) -> None:
    seen = set()
    for path, _ in pictures:
        for lane in marks(parse(path), "lane"):
            (text,) = lane.iter(f"{SVG}text")
            shown = "".join(text.itertext())
            seen.add(shown)
            assert float(text.get("x", "0")) + font.width(shown, 11) <= LABEL_COLUMN - 4, shown
            # A renderer that trims the space starting a <tspan> (librsvg) would draw
            # "chat-Bpid 123" without it.
            if len(list(text)) > 0:
                assert text.get(XML_SPACE) == "preserve"
    assert "chat-B 2 managers" in seen
    assert any(s.startswith("manager ") and " pid " in s for s in seen)
    assert any(s.startswith("a-session-name") and "… pid " in s for s in seen)


def test_caption_and_notes_are_wrapped_to_the_pictures_width(
    pictures: list[tuple[Path, int]], font: Font,
) -> None:
    lines = 0
    for path, width in pictures:
        for text in parse(path).iter(f"{SVG}text"):
            if "caption" in classes(text):
                lines += 1
                assert float(text.get("x", "0")) + font.width(text.text or "", 11) <= width - 10
    assert lines > 2 * len(pictures)  # at 800 px, the caption and the notes take lines


def test_axis_labels_never_overlap(pictures: list[tuple[Path, int]], font: Font) -> None:
    for path, width in pictures:
        spans = []
        for text in parse(path).iter(f"{SVG}text"):
            anchor = text.get("text-anchor")
            if anchor is None:
                continue
            w = font.width(text.text or "", 11)
            left = float(text.get("x", "0")) - {"start": 0, "middle": w / 2, "end": w}[anchor]
            spans.append((left, left + w))
        spans.sort()
        assert len(spans) >= 2
        assert spans[0][0] >= LABEL_COLUMN - 1
        assert spans[-1][1] <= width
        for (_, right), (left, _) in itertools.pairwise(spans):
            assert right + 4 <= left, path


def test_a_lease_label_stays_inside_its_bar(pictures: list[tuple[Path, int]],
                                            font: Font) -> None:
    labelled = 0
    for path, _ in pictures:
        for lease in marks(parse(path), "lease"):
            (bar,) = lease.iter(f"{SVG}rect")
            for text in lease.iter(f"{SVG}text"):
                labelled += 1
                right = float(text.get("x", "0")) + font.width(text.text or "", 7)
                assert right <= float(bar.get("x", "0")) + float(bar.get("width", "0"))
    assert labelled >= 2
