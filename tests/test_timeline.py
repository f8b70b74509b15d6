"""journal-inspect timeline: the picture holds exactly what the journal holds.

The SVG is parsed as XML and its marks are counted and coloured against a
replay of the same journal, written by real managers (one of them killed
with SIGKILL and found dead by a recovery).  Where a headless Chromium is
installed, the picture is also rendered as a person would see it and the
colours of every ending are looked for in the pixels.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from sessiontemp import Manager, inspect, recover
from sessiontemp.inspect import COLOURS
from sessiontemp.journal.events import (
    Event,
    GenerationCreated,
    GenerationReady,
    LeaseAcquired,
    LeaseReleased,
    ManagerOpened,
    Reappeared,
    Record,
    RecoveryStarted,
    RemovalFinished,
    RemovalStarted,
    Retained,
    Rotated,
)
from sessiontemp.journal.reducer import Forgotten, GenerationState, State, replay
from sessiontemp.journal.store import Store
from tests.test_cli import Child, inspect_json
from tests.test_cli import inspect as run_inspect
from tests.test_inspect_sessions import killed_owner

SVG = "{http://www.w3.org/2000/svg}"
JOURNAL = "journal.sqlite3"


def parse(path: Path) -> ElementTree.Element:
    # Our own output, parsed to check it.
    return ElementTree.parse(path).getroot()  # noqa: S314


def classes(element: ElementTree.Element) -> list[str]:
    return element.get("class", "").split()


def marks(root: ElementTree.Element, kind: str) -> list[ElementTree.Element]:
    return [e for e in root.iter() if kind in classes(e)]


def ending_of(g: GenerationState) -> str:
    """How the journal says a generation ended, the slow and obvious way."""
    if g.removal_outcome is not None and g.removal_outcome.startswith("refused"):
        return "refused"
    if g.removal != "finished":
        return "live"
    return "normal" if g.removal_by == g.manager else "recovery"


def replayed(journal: Path) -> tuple[State, Counter[str]]:
    store = Store(journal, readonly=True)
    try:
        records = list(store.records())
    finally:
        store.close()
    # Every generation the journal names, removed ones included.
    forgotten = Forgotten()
    return forgotten.whole(replay(records, history=forgotten)), Counter(
        r.event.kind for r in records)


@pytest.fixture(scope="module")
def lived_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generations removed normally and by recovery, a retired one still held, a live one,
    a manager killed with SIGKILL and found dead, and several recovery passes."""
    root = tmp_path_factory.mktemp("timeline") / "root"
    first = Manager(root)
    first.retain()
    first.acquire().release()
    first.rotate()  # removed by its manager
    kept = first.acquire()
    first.rotate()  # retired, still held by `kept`
    first.acquire()  # live: the current one, leased
    child = Child(root)
    child.ask("retain")
    child.ask("acquire")
    child.kill()
    Manager(root).close()  # a recovery finds the child dead and removes its directory
    closing = Manager(root)
    closing.retain()
    closing.acquire().release()
    closing.release()
    closing.close()
    assert kept.path.exists()
    return root


def test_every_generation_is_one_bar_coloured_by_how_the_journal_says_it_ended(
    lived_root: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "t.svg"
    result = inspect.timeline(lived_root / JOURNAL, out)
    state, _ = replayed(lived_root / JOURNAL)
    svg = parse(out)
    bars = {e.get("data-generation"): e for e in marks(svg, "generation")}
    assert set(bars) == set(state.generations)
    for gid, g in state.generations.items():
        ending = ending_of(g)
        assert ending in classes(bars[gid]), gid
        assert bars[gid].get("fill") == COLOURS[ending]
    endings = Counter(ending_of(g) for g in state.generations.values())
    # The fixture made every kind of ending but a refused one.
    assert endings["normal"] >= 2
    assert endings["recovery"] == 1
    assert endings["live"] == 2
    assert dict(result.ended) == {k: endings.get(k, 0) for k in COLOURS}
    assert not result.grouped


def test_leases_crashes_recoveries_and_managers_are_marked_as_often_as_the_journal_says(
    lived_root: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "t.svg"
    inspect.timeline(lived_root / JOURNAL, out, all_lanes=True)
    state, kinds = replayed(lived_root / JOURNAL)
    svg = parse(out)
    assert len(marks(svg, "lease")) == kinds["lease.acquired"]
    assert len(marks(svg, "crash")) == kinds["manager.dead"] == 1
    assert len(marks(svg, "recovery-pass")) == kinds["recovery.started"] >= 1
    assert {e.get("data-manager") for e in marks(svg, "manager")} == set(state.managers)
    assert marks(svg, "refused-record") == []


def test_every_mark_has_hover_text_naming_its_event_seqs(lived_root: Path, tmp_path: Path
                                                        ) -> None:
    out = tmp_path / "t.svg"
    inspect.timeline(lived_root / JOURNAL, out)
    state, _ = replayed(lived_root / JOURNAL)
    svg = parse(out)
    titles = [t.text or "" for t in svg.iter(f"{SVG}title")]
    for g in state.generations.values():
        title = next(t for t in titles if t.startswith(f"generation {g.id} "))
        assert f"created at event {g.created_seq} " in title
        if g.removal_seq is not None:
            assert f"removal started at event {g.removal_seq} " in title
    dead = next(m for m in state.managers.values() if m.ended == "dead")
    assert any(f"event {dead.ended_seq}: recovery" in t and dead.id in t for t in titles)


def test_the_picture_is_self_contained(lived_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.svg"
    inspect.timeline(lived_root / JOURNAL, out)
    text = out.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text
    assert "<script" not in text
    assert "href" not in text


def test_one_manager_and_a_window_keep_only_what_they_name(lived_root: Path, tmp_path: Path
                                                          ) -> None:
    state, _ = replayed(lived_root / JOURNAL)
    dead = next(m for m in state.managers.values() if m.ended == "dead")
    out = tmp_path / "one.svg"
    result = inspect.timeline(lived_root / JOURNAL, out, manager=dead.id)
    svg = parse(out)
    assert [e.get("data-manager") for e in marks(svg, "manager")] == [dead.id]
    assert {e.get("data-generation") for e in marks(svg, "generation")} == {
        g.id for g in state.generations.values() if g.manager == dead.id}
    assert result.crashes == 1
    # A window before the dead manager opened leaves it out.
    early = inspect.timeline(lived_root / JOURNAL, tmp_path / "early.svg",
                             until=dead.opened_seq - 1)
    assert dead.id not in {e.get("data-manager")
                           for e in marks(parse(tmp_path / "early.svg"), "manager")}
    assert early.crashes == 0


def test_an_unknown_manager_is_bad_input(lived_root: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("journal-inspect")), "--root", str(lived_root),
         "timeline", "-o", str(tmp_path / "t.svg"), "--manager", "nobody"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--manager nobody: is not a manager of this journal" in result.stderr


def test_the_cli_writes_the_picture_and_reports_what_it_drew(lived_root: Path, tmp_path: Path
                                                            ) -> None:
    out = tmp_path / "t.svg"
    report: dict[str, Any] = inspect_json("--root", lived_root, "timeline", "-o", out)
    assert report["output"] == str(out)
    assert report["generations"] == len(marks(parse(out), "generation"))


def manager_id(n: int) -> str:
    return f"{n:032x}"


def generation_id(n: int) -> str:
    """A canonical generation id (16 characters of lower-case base32) numbered *n*."""
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    return "".join(alphabet[(n >> (5 * i)) & 31] for i in reversed(range(16)))


def lease_id(n: int) -> str:
    return f"{n:016x}"


def records_with_a_refused_one() -> list[Record]:
    t = 1_700_000_000.0
    m, g, l1, l2 = manager_id(1), generation_id(1), lease_id(1), lease_id(2)
    events: list[Event] = [
        ManagerOpened(m, 4242), Retained(m), GenerationCreated(m, g),
        GenerationReady(m, g, 1, 2), LeaseAcquired(m, g, l1),
        # Refused: l2 was never granted.
        LeaseReleased(m, g, l2),
        LeaseReleased(m, g, l1), Rotated(m),
        RemovalStarted(g, m, "retired"), RemovalFinished(g, m, "removed"),
    ]
    return [Record(i + 1, t + i, e) for i, e in enumerate(events)]


def write(path: Path, records: list[Record], batch: int = 5000) -> None:
    store = Store(path)
    try:
        for i in range(0, len(records), batch):
            chunk = records[i:i + batch]
            store.append([r.event for r in chunk], time=chunk[-1].time)
    finally:
        store.close()


def test_a_record_the_reducer_refuses_is_marked_and_skipped(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL
    write(journal, records_with_a_refused_one(), batch=1)
    result = inspect.timeline(journal, tmp_path / "t.svg")
    assert result.refused == (6,)
    refused = marks(parse(tmp_path / "t.svg"), "refused-record")
    assert len(refused) == 1
    title = refused[0].find(f"{SVG}title")
    assert title is not None
    assert title.text is not None
    assert title.text.startswith(f"event 6 refused: event 6 releases lease {lease_id(2)}")
    assert result.ended["normal"] == 1


def many_generations(n: int) -> list[Record]:
    """One manager making, leasing and removing *n* generations in turn."""
    m = manager_id(1)
    events: list[Event] = [ManagerOpened(m, 4242), Retained(m)]
    for i in range(n):
        g, lease = generation_id(i), lease_id(i)
        events += [GenerationCreated(m, g), GenerationReady(m, g, 1, i),
                   LeaseAcquired(m, g, lease), LeaseReleased(m, g, lease),
                   Rotated(m), RemovalStarted(g, m, "retired"),
                   RemovalFinished(g, m, "removed")]
    return [Record(i + 1, 1_700_000_000.0 + i / 100, e) for i, e in enumerate(events)]


def test_ten_thousand_generations_are_grouped_and_the_picture_says_so(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL
    write(journal, many_generations(10_000), batch=100)
    out = tmp_path / "t.svg"
    result = inspect.timeline(journal, out)
    svg = parse(out)
    assert result.grouped
    assert result.generations == 10_000
    assert marks(svg, "generation") == []
    groups = marks(svg, "group")
    assert len(groups) == result.drawn <= 1200 // 4
    assert sum(int(g.get("data-count", "0")) for g in groups) == 10_000
    assert all(g.get("fill") == COLOURS["normal"] for g in groups)
    caption = " ".join(e.text or "" for e in svg.iter(f"{SVG}text") if "caption" in classes(e))
    assert "Grouped: 10,000 bars would be too many to tell apart" in caption
    assert "10,000 generations of 1 manager, 0 crashes, 0 recovery passes" in caption


# -- as a person sees it -------------------------------------------------------------------


def browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(b)), None)


def png_pixels(data: bytes, from_row: int = 0) -> set[tuple[int, int, int]]:
    """The distinct RGB colours of an 8-bit, non-interlaced RGB or RGBA PNG, from a row on."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, interlace) == (8, 0)
    assert colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    seen: set[tuple[int, int, int]] = set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                paeth = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + paeth) & 0xFF
        if y >= from_row:
            seen.update((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, bpp))
        previous = line
    return seen


@pytest.mark.skipif(browser() is None, reason="no headless Chromium installed")
def test_a_real_browser_renders_every_ending_in_its_colour(lived_root: Path, tmp_path: Path
                                                          ) -> None:
    out = tmp_path / "t.svg"
    inspect.timeline(lived_root / JOURNAL, out)
    shot = tmp_path / "t.png"
    command = browser()
    assert command is not None
    subprocess.run([command, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1200,500", out.as_uri()],
                   capture_output=True, timeout=120, check=True)
    # Below row 86 there is no legend (which shows every colour anyway): lanes only.
    colours = png_pixels(shot.read_bytes(), from_row=86)
    for ending in ("normal", "recovery", "live"):
        rgb = tuple(int(COLOURS[ending][i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, ending


def many_managers(n: int) -> list[Record]:
    """*n* managers one after another, each making and removing one generation."""
    events: list[Event] = []
    for i in range(n):
        m, g = manager_id(i), generation_id(i)
        events += [ManagerOpened(m, 1000 + i), Retained(m), GenerationCreated(m, g),
                   GenerationReady(m, g, 1, i), Rotated(m), RemovalStarted(g, m, "retired"),
                   RemovalFinished(g, m, "removed")]
    return [Record(i + 1, 1_700_000_000.0 + i, e) for i, e in enumerate(events)]


def test_past_max_lanes_managers_share_lanes_and_the_picture_says_so(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL
    write(journal, many_managers(35), batch=1)
    out = tmp_path / "t.svg"
    result = inspect.timeline(journal, out, max_lanes=10)
    svg = parse(out)
    assert result.managers == 35
    assert result.grouped
    lanes = marks(svg, "managers")
    assert len(lanes) == 9  # 4 managers a lane
    assert sum(int(g.get("data-count", "0")) for g in marks(svg, "group")) == 35
    caption = " ".join(e.text or "" for e in svg.iter(f"{SVG}text") if "caption" in classes(e))
    assert "Merged: 35 managers would make as many lanes" in caption
    assert "each lane holds 4 managers" in caption


def test_a_generation_on_disk_again_after_a_power_loss_is_told_and_drawn_once(
    tmp_path: Path,
) -> None:
    m, g, r = manager_id(1), generation_id(1), lease_id(9)
    events: list[Event] = [
        ManagerOpened(m, 4242), Retained(m), GenerationCreated(m, g),
        GenerationReady(m, g, 1, 2), Rotated(m), RemovalStarted(g, m, "retired"),
        RemovalFinished(g, m, "removed"), RecoveryStarted(r, 77), Reappeared(g, r),
        RemovalFinished(g, r, "removed"),
    ]
    journal = tmp_path / JOURNAL
    write(journal, [Record(i + 1, 1_700_000_000.0 + i, e) for i, e in enumerate(events)],
          batch=1)
    story = inspect.explain(journal, g)
    texts = [s.text for s in story.sentences]
    assert story.status == "removed"
    assert any(t.startswith("It was on disk again at") and f"recovery {r} (pid 77)" in t
               for t in texts)
    assert texts[-1].startswith("Removal finished")
    result = inspect.timeline(journal, tmp_path / "t.svg")
    svg = parse(tmp_path / "t.svg")
    (bar,) = marks(svg, "generation")
    assert "recovery" in classes(bar)
    assert result.ended["recovery"] == 1


# -- the window, the lanes, the legend and the tooltips, as a person reads them -------------


def caption_of(svg: ElementTree.Element) -> str:
    return " ".join(e.text or "" for e in svg.iter(f"{SVG}text") if "caption" in classes(e))


def titles_of(element: ElementTree.Element) -> list[str]:
    return [t.text or "" for t in element.iter(f"{SVG}title")]


@pytest.mark.parametrize("past", [1, 854])
def test_a_window_that_starts_past_the_last_event_draws_nothing_and_says_so(
    lived_root: Path, tmp_path: Path, past: int,
) -> None:
    last = Store(lived_root / JOURNAL, readonly=True)
    try:
        end = last.last_seq()
    finally:
        last.close()
    since = end + past
    result = inspect.timeline(lived_root / JOURNAL, tmp_path / "t.svg", since=since)
    svg = parse(tmp_path / "t.svg")
    assert (result.generations, result.drawn, result.managers, result.window) == (0, 0, 0, None)
    assert marks(svg, "generation") == marks(svg, "lease") == marks(svg, "crash") == []
    said = f"the window starts at event {since:,}, past the journal's last event ({end:,})"
    assert result.nothing == said
    assert f"Nothing in the window: {said}." in caption_of(svg)
    assert f"events 1 to {end}" not in caption_of(svg)
    line = run_inspect("--root", lived_root, "timeline", "--since", str(since), "-o",
                       tmp_path / "cli.svg").stdout
    assert line == f"{tmp_path / 'cli.svg'}: nothing drawn: {said}\n"


def test_the_caption_states_the_window_drawn(lived_root: Path, tmp_path: Path) -> None:
    result = inspect.timeline(lived_root / JOURNAL, tmp_path / "t.svg", since=5, until=12)
    assert result.window == (5, 12)
    caption = caption_of(parse(tmp_path / "t.svg"))
    assert f"events 5 to 12 of {result.events}" in caption
    whole = inspect.timeline(lived_root / JOURNAL, tmp_path / "whole.svg", until=10**6)
    assert whole.window == (1, whole.events)


def test_one_crash_and_one_pass_are_said_in_the_singular(tmp_path: Path) -> None:
    root = tmp_path / "root"
    child = Child(root)
    child.ask("retain")
    child.ask("acquire")
    child.kill()
    recover(root)
    result = inspect.timeline(root / JOURNAL, tmp_path / "t.svg")
    assert (result.crashes, result.recoveries, result.managers) == (1, 1, 1)
    caption = caption_of(parse(tmp_path / "t.svg"))
    assert "1 generation of 1 manager, 1 crash, 1 recovery pass, 0 refused records" in caption
    line = run_inspect("--root", root, "timeline", "-o", tmp_path / "cli.svg").stdout
    assert "1 generation (0 normal, 1 recovery, 0 live, 0 refused) in 1 lane, of 1 manager, " \
           "1 crash, 1 recovery pass, 0 refused records" in line


def test_a_manager_with_nothing_drawn_gets_a_lane_only_when_asked(
    lived_root: Path, tmp_path: Path,
) -> None:
    state, _ = replayed(lived_root / JOURNAL)
    # The fixture's `Manager(root).close()` made no generation and did not die.
    empty = {m.id for m in state.managers.values()} - {
        g.manager for g in state.generations.values()} - {
        m.id for m in state.managers.values() if m.ended == "dead"}
    assert len(empty) == 1
    shown = {e.get("data-manager") for e in marks(parse(inspect_svg(lived_root, tmp_path)),
                                                   "manager")}
    assert shown == set(state.managers) - empty
    every = {e.get("data-manager") for e in marks(parse(inspect_svg(
        lived_root, tmp_path, "--all-lanes")), "manager")}
    assert every == set(state.managers)


def inspect_svg(root: Path, tmp_path: Path, *options: str) -> Path:
    """journal-inspect timeline through the console script, the picture's path."""
    out = tmp_path / f"cli{len(options)}.svg"
    run_inspect("--root", root, "timeline", "-o", out, *options)
    return out


LEGEND_NAMES = {
    "normal": "removed by its manager", "recovery": "removed by a recovery",
    "live": "not removed yet", "refused": "refused, or kept by a refused record",
    "lease": "lease", "manager": "manager open", "crash": "manager found dead",
    "recovery-pass": "recovery pass", "refused-record": "record refused",
    "idle": "idle, compressed", "group": "generations begun there",
    "size": "size on disk", "space-refused": "acquire refused for space",
}


def legend_of(svg: ElementTree.Element) -> set[str]:
    (legend,) = marks(svg, "legend")
    return {e.text or "" for e in legend.iter(f"{SVG}text")}


def drawn_kinds(svg: ElementTree.Element) -> set[str]:
    found = set()
    for e in svg.iter():
        kinds = classes(e)
        if "generation" in kinds or "group" in kinds:
            found |= set(kinds) & set(COLOURS)
        found |= set(kinds) & (set(LEGEND_NAMES) - set(COLOURS))
    return found


def test_every_kind_of_mark_drawn_is_named_in_the_legend(lived_root: Path, tmp_path: Path,
                                                        long_session: Path) -> None:
    journal = tmp_path / JOURNAL
    write(journal, many_generations(3000), batch=500)
    pictures = [inspect.timeline(lived_root / JOURNAL, tmp_path / "a.svg"),
                inspect.timeline(journal, tmp_path / "b.svg"),
                inspect.timeline(long_session / JOURNAL, tmp_path / "c.svg")]
    seen: set[str] = set()
    for drawn in pictures:
        svg = parse(drawn.output or Path())
        kinds = drawn_kinds(svg)
        seen |= kinds
        assert {LEGEND_NAMES[k] for k in kinds} <= legend_of(svg), drawn.output
    # Between them the pictures hold every kind but a refused record, a size and an acquire
    # refused for space, which have their own tests (tests/test_inspect_sizes.py for sizes,
    # tests/test_space_refusals.py for refusals).
    assert seen == set(LEGEND_NAMES) - {"refused", "refused-record", "size", "space-refused"}


@pytest.fixture(scope="module")
def long_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Named session "chat-A", eight hours long: four commands of seconds, hours apart.

    Its manager's clock is passed in, so the hours go by at once.
    """
    root = tmp_path_factory.mktemp("long") / "root"
    now = [1_790_000_000.0]
    manager = Manager(root, clock=lambda: now[0], session="chat-A")
    manager.retain()
    label = "pytest -x tests/test_api.py::test_a_very_long_name_that_no_bar_can_hold_whole"
    for length, idle in ((12.0, 300.0), (4.0, 3 * 3600.0), (40.0, 45.0), (1.0, 5 * 3600.0)):
        with manager.acquire(label=label) as lease:
            # It waits for its input, so it still runs when its start is journaled.
            lease.popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL).communicate()
            now[0] += length
        now[0] += idle
    manager.release()
    manager.close()
    return root


def test_a_long_sessions_commands_stay_readable_with_its_idle_hours_compressed(
    long_session: Path, tmp_path: Path,
) -> None:
    drawn = inspect.timeline(long_session / JOURNAL, tmp_path / "t.svg")
    svg = parse(tmp_path / "t.svg")
    widths = [float(rect.get("width", "0")) for lease in marks(svg, "lease")
              for rect in lease.iter(f"{SVG}rect")]
    assert len(widths) == 4
    assert min(widths) >= 5  # the one-second command, among eight hours
    # The three stretches longer than a minute without a command; not the 45 s one.
    assert drawn.idle == 3
    idle = [titles_of(e)[0] for e in marks(svg, "idle")]
    assert [t.split(",")[0] for t in idle] == ["idle for 5 min", "idle for 3 h",
                                               "idle for 5 h"]
    assert all("no event and no lease held" in t for t in idle)
    assert "Compressed: 3 idle stretches longer than 60 s" in caption_of(svg)
    # To scale, the same commands are thinner than a pixel.
    scaled = inspect.timeline(long_session / JOURNAL, tmp_path / "s.svg", idle=None)
    assert scaled.idle == 0
    flat = [float(rect.get("width", "0")) for lease in marks(parse(tmp_path / "s.svg"), "lease")
            for rect in lease.iter(f"{SVG}rect")]
    assert min(flat) <= 1
    assert marks(parse(tmp_path / "s.svg"), "idle") == []


def test_a_lane_is_named_by_its_session_and_titled_with_managers_pids_and_whole_labels(
    long_session: Path, tmp_path: Path,
) -> None:
    inspect.timeline(long_session / JOURNAL, tmp_path / "t.svg")
    svg = parse(tmp_path / "t.svg")
    state, _ = replayed(long_session / JOURNAL)
    (manager,) = state.managers.values()
    (lane,) = marks(svg, "session")
    assert lane.get("data-session") == "chat-A"
    assert lane_text(lane) == f"chat-A pid {manager.pid}"  # the id is for the tooltip
    (about,) = titles_of(lane)
    assert about.startswith(f"session chat-A\nmanager {manager.id} (pid {manager.pid})")
    label = "pytest -x tests/test_api.py::test_a_very_long_name_that_no_bar_can_hold_whole"
    for lease in marks(svg, "lease"):
        text = titles_of(lease)[0]
        assert text.startswith(f"lease {lease_id_in(text)}: {label}\n")
        assert "command pid " in text
        shown = "".join(t.text or "" for t in lease.iter(f"{SVG}text"))
        # Whole where the bar holds it, else cut with an ellipsis (the tooltip has it all).
        assert shown in ("", label) or (shown.endswith("…") and label.startswith(shown[:-1]))


def lane_text(lane: ElementTree.Element) -> str:
    """What a lane's label shows (its tooltip apart)."""
    return "".join("".join(t.itertext()) for t in lane.iter(f"{SVG}text"))


def lease_id_in(title: str) -> str:
    return title.split(":", 1)[0].removeprefix("lease ")


def test_a_resumed_session_keeps_one_lane_for_both_of_its_owners(tmp_path: Path) -> None:
    root = tmp_path / "root"
    killed_owner(root, "chat-B")
    successor = Manager(root, session="chat-B")
    assert successor.resumed
    successor.retain()
    successor.acquire(label="again").release()
    successor.release()
    successor.close()
    drawn = inspect.timeline(root / JOURNAL, tmp_path / "t.svg")
    svg = parse(tmp_path / "t.svg")
    (lane,) = marks(svg, "session")
    assert lane.get("data-session") == "chat-B"
    assert lane_text(lane) == "chat-B 2 managers"
    assert (drawn.lanes, drawn.managers, drawn.crashes) == (1, 2, 1)
    state, _ = replayed(root / JOURNAL)
    (about,) = titles_of(lane)
    assert all(f"manager {m.id} (pid {m.pid})" in about for m in state.managers.values())
    # The directory the first owner left goes on in the same lane, as one bar.
    (bar,) = marks(svg, "generation")
    assert "normal" in classes(bar)
    assert "adopted at event" in next(t for t in titles_of(svg) if t.startswith("generation "))
