"""The documentation site says what the code does, and the README is its front page.

The reference cannot drift: every public name has an autodoc entry, the CLI
reference is generated from the console scripts' real parsers, every event
kind and every logged event has its row, and the tutorial's script is run
as the tutorial shows it.  Where Sphinx is installed (the ``docs`` extra)
the site is built with warnings as errors and the built pages are checked;
where Chromium is installed too, the front page and the demo's timeline
are rendered as a person would see them.
"""

from __future__ import annotations

import argparse
import ast
import html
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import get_args

import pytest

import sessiontemp
from sessiontemp import __main__ as sessiontemp_main
from sessiontemp.cli import journal_inspect as cli
from sessiontemp.inspect.timeline import COLOURS
from sessiontemp.journal.events import KINDS
from sessiontemp.recovery.removal import Outcome
from tests.test_cli import conforms
from tests.test_timeline import browser, png_pixels

REPO = Path(__file__).parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"

PAGES = [
    "index", "tutorial",
    "howto/agent-harness", "howto/agent-cli", "howto/notebook-kernel", "howto/ci-job", "howto/run",
    "howto/pytest-plugin", "howto/systemd-tmpfiles", "howto/incident",
    "concepts/lifecycle", "concepts/crash-guarantee", "concepts/durability",
    "concepts/faults", "concepts/journal",
    "reference/api", "reference/cli", "reference/errors", "reference/logging",
    "reference/json",
    "security", "performance", "architecture",
]


def cli_parsers() -> ModuleType:
    """docs/cli_parsers.py, the module the CLI reference's directives name."""
    spec = importlib.util.spec_from_file_location("cli_parsers", DOCS / "cli_parsers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse lists its subcommands nowhere else
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of *parser* and of its subcommands."""
    found = {o for a in parser._actions for o in a.option_strings}
    for sub in subcommands(parser).values():
        found |= options(sub)
    return found


PARSERS = {"journal-inspect": cli.build_parser, "sessiontemp": sessiontemp_main.build_parser}


# -- the pages and the reference, read as sources -------------------------------------


def test_every_page_the_site_promises_exists_and_every_page_is_in_a_toctree() -> None:
    index = (DOCS / "index.md").read_text()
    listed = set(re.findall(r"^([a-z][\w/-]*)$", index, re.M))
    sources = {str(p.relative_to(DOCS).with_suffix("")) for p in DOCS.rglob("*.md")
               if "_build" not in p.parts}
    assert set(PAGES) <= sources
    assert sources - {"index"} == listed


def test_every_public_name_has_an_entry_in_the_api_reference() -> None:
    api = (DOCS / "reference" / "api.md").read_text()
    entries = set(re.findall(r"^\.\. auto\w+:: sessiontemp\.(\w+)$", api, re.M))
    assert set(sessiontemp.__all__) <= entries


def test_the_cli_reference_shows_the_real_parsers_with_every_option() -> None:
    page = (DOCS / "reference" / "cli.md").read_text()
    assert re.findall(r":func: (\w+)", page) == ["journal_inspect", "sessiontemp"]
    shown = cli_parsers()
    for name, build in PARSERS.items():
        real, adapted = build(), getattr(shown, name.replace("-", "_"))()
        assert adapted.prog == real.prog == name
        assert options(adapted) == options(real)
        assert subcommands(adapted).keys() == subcommands(real).keys()
        assert options(real) >= {"--version", "--root"}


def test_every_event_kind_has_a_row_on_the_journal_page() -> None:
    page = (DOCS / "concepts" / "journal.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_.]+)` \|", page, re.M))
    assert rows == set(KINDS)


LEVELS = ("debug", "info", "warning", "error", "critical", "exception")


def logged_events() -> set[str]:
    """Every event name the library's code logs (``generation.{outcome}`` expanded)."""
    found: set[str] = set()
    for module in [*(REPO / "journal").rglob("*.py"), *(REPO / "sessiontemp").rglob("*.py")]:
        for node in ast.walk(ast.parse(module.read_text())):
            if not (isinstance(node, ast.Call) and node.args
                    and isinstance(node.func, ast.Attribute | ast.Name)):
                continue
            func = node.func
            # The module's logger, or one bound once per owner (log, self._log, work.log).
            called = (ast.unparse(func.value) if isinstance(func, ast.Attribute)
                      and func.attr in LEVELS else "")
            if not (called.rpartition(".")[2].lstrip("_").endswith(("logger", "log"))
                    or (isinstance(func, ast.Name) and func.id == "log")):
                continue
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.add(name.value)
            elif isinstance(name, ast.JoinedStr):
                assert ast.unparse(name) == "f'generation.{result.outcome}'", ast.unparse(name)
                found |= {f"generation.{o}" for o in get_args(Outcome)}
    return found


def test_every_event_the_library_logs_has_a_row_in_the_log_events_table() -> None:
    page = (DOCS / "reference" / "logging.md").read_text()
    table = page.split("## Events", 1)[1]
    rows = set(re.findall(r"^\| `([a-z_.]+)` \|", table, re.M))
    assert len(logged_events()) > 30
    assert rows == logged_events()


def test_the_json_reference_of_sessiontemp_recover_fits_what_it_prints(tmp_path: Path) -> None:
    """A manager killed with its directory, then `sessiontemp recover --root R --json`."""
    root = tmp_path / "root"
    killed = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from sessiontemp import Manager
            m = Manager(sys.argv[1]); m.retain()
            print(m.acquire().path, flush=True); time.sleep(60)
        """), root], stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None
    left = killed.stdout.readline().strip()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    result = subprocess.run([sys.executable, "-m", "sessiontemp", "recover", "--root", root,
                             "--json"], capture_output=True, text=True, timeout=120, check=True)
    printed = json.loads(result.stdout)
    page = (DOCS / "reference" / "json.md").read_text()
    block = re.search(r"## sessiontemp recover --json.*?```json\n(.*?)```", page, re.S)
    assert block is not None
    assert conforms(printed, json.loads(block.group(1)), {}) == []
    # The generation, the leased directory's parent.
    assert [r["path"] for r in printed["removed"]] == [str(Path(left).parent)]
    assert len(printed["dead"]) == 1


# -- the tutorial -------------------------------------------------------------------


def test_the_tutorial_script_runs_and_prints_what_the_tutorial_shows(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(DOCS / "tutorial.py")], capture_output=True,
                            text=True, timeout=120, check=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    printed = result.stdout.splitlines()
    # The random names aside, it prints what the page says it prints.
    page = (DOCS / "tutorial.md").read_text()
    shown = page.split("## What it prints", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    name = re.compile(r"sessiontemp-gen-\w+|/\S+/root")
    assert [name.sub("N", line) for line in printed] == [
        name.sub("N", line) for line in shown.splitlines()]
    killed = re.search(r"left (sessiontemp-gen-\w+)/tmp on disk: True", result.stdout)
    assert killed is not None
    assert f"recovery removed ['{killed.group(1)}'] on disk: False" in result.stdout
    # Its root is under TMPDIR, holding the journal the last line points at.
    root = Path(printed[-1].split("--root ", 1)[1].split()[0])
    assert root.parent.parent == tmp_path
    assert (root / "journal.sqlite3").is_file()
    assert not [p for p in root.iterdir() if p.name.startswith(sessiontemp.GENERATION_PREFIX)]


def test_each_step_of_the_tutorial_page_includes_its_part_of_the_script() -> None:
    page = (DOCS / "tutorial.md").read_text()
    script = (DOCS / "tutorial.py").read_text()
    markers = re.findall(r'^:(?:start-after|end-before|start-at): "(.+)"$', page, re.M)
    assert len(markers) >= 10
    for marker in markers:
        assert script.count(marker) == 1, marker


# -- the README as the front page -------------------------------------------------------


def readme_commands() -> list[str]:
    block = README.read_text().split("## Two commands", 1)[1].split("```sh\n", 1)[1]
    return [line for line in block.split("```", 1)[0].splitlines()
            if line and not line.startswith("#")]


def test_the_readme_is_a_front_page_whose_links_all_lead_somewhere() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 200
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == [
        "Install", "Two commands", "Example", "Space", "The guarantees", "Performance", "Modules",
        "Documentation"]
    guarantees = text.split("## The guarantees", 1)[1].split("##", 1)[0]
    assert len(re.findall(r"^- ", guarantees, re.M)) == 5
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) > 25
    assert [link for link in links if not (REPO / link).exists()] == []
    # Every page of the site, bar the front page itself, is linked from the README.
    linked = {str(Path(link).relative_to("docs").with_suffix("")) for link in links
              if link.startswith("docs/") and link.endswith(".md")}
    assert set(PAGES) - {"index"} <= linked


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    demo, tests = readme_commands()
    assert "tools/demo.py" in demo
    assert "-m pytest" in tests
    assert tests in (REPO / ".ci" / "run").read_text().splitlines()


def test_ci_runs_the_fast_suite_on_every_python_the_classifiers_claim() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    claimed = [c.rsplit(" ", 1)[1] for c in project["classifiers"]
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert claimed[0] == project["requires-python"].removeprefix(">=")
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in claimed
    ci = (REPO / ".ci" / "run").read_text()
    # .ci/run reads the versions from the classifiers, not from a list of its own.
    assert "Programming Language :: Python :: 3." in ci


# -- the built site -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The site built with every warning an error (or the one $SESSIONTEMP_DOCS_HTML holds)."""
    built = os.environ.get("SESSIONTEMP_DOCS_HTML")
    if built:
        yield Path(built).resolve()
        return
    if importlib.util.find_spec("sphinx") is None:
        pytest.skip("Sphinx is not installed: pip install -e '.[docs]' to build the site")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q",
                             "-b", "html", "-d", str(out / ".doctrees"), str(DOCS), str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    yield out


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


def test_the_built_site_has_every_page(site: Path) -> None:
    assert [p for p in PAGES if not (site / f"{p}.html").is_file()] == []


def test_the_built_api_reference_has_an_entry_for_every_public_name(site: Path) -> None:
    page = (site / "reference" / "api.html").read_text()
    ids = set(re.findall(r'id="sessiontemp\.(\w+)"', page))
    assert set(sessiontemp.__all__) <= ids
    assert 'id="sessiontemp.ForkedCopy"' in page
    # Members are documented too, and what the lifecycle page relies on.
    for member in ("acquire", "retain", "release", "rotate", "close", "sealed", "closed",
                   "open_async", "acquire_async", "retain_async", "release_async",
                   "rotate_async", "close_async"):
        assert f'id="sessiontemp.Manager.{member}"' in page
    for member in ("keep", "keep_async", "create_subprocess_exec"):
        assert f'id="sessiontemp.Lease.{member}"' in page


def test_the_built_cli_reference_names_every_subcommand_and_option(site: Path) -> None:
    page = (site / "reference" / "cli.html").read_text()
    words = text_of(site / "reference" / "cli.html")
    for name, build in PARSERS.items():
        parser = build()
        assert f'id="{name}"' in page
        for sub in subcommands(parser):
            assert f'id="{name}-{sub}"' in page, (name, sub)
        for option in options(parser):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", words), (name, option)


def test_the_front_page_is_the_readme_with_the_demos_timeline(site: Path) -> None:
    page = (site / "index.html").read_text()
    image = re.search(r'<img [^>]*src="([^"]*demo-timeline\.svg)"', page)
    assert image is not None
    assert (site / image.group(1)).read_bytes() == (DOCS / "demo-timeline.svg").read_bytes()
    first = README.read_text().split("\n\n")[1].split()
    assert " ".join(first[:12]) in " ".join(text_of(site / "index.html").split())


def screenshot(target: str, shot: Path, tmp_path: Path, from_row: int = 0
               ) -> set[tuple[int, int, int]]:
    command = browser()
    assert command is not None
    profile = tmp_path / "profile"
    subprocess.run([command, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                    f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1280,900", target],
                   capture_output=True, timeout=120, check=True)
    kept = os.environ.get("SESSIONTEMP_SCREENSHOTS")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(kept) / shot.name)
    return png_pixels(shot.read_bytes(), from_row=from_row)


def rgb(ending: str) -> tuple[int, int, int]:
    colour = COLOURS[ending]
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


@pytest.mark.skipif(browser() is None, reason="no headless Chromium installed")
def test_a_browser_shows_the_front_page_with_the_timeline_in_its_first_screen(
    site: Path, tmp_path: Path
) -> None:
    colours = screenshot((site / "index.html").as_uri(), tmp_path / "front-page.png", tmp_path)
    # The picture's bars, in their colours: the image loaded, above the fold.
    assert {rgb("normal"), rgb("recovery")} <= colours
    # And the theme's style sheet: more than black text on white.
    assert len(colours) > 50


@pytest.mark.skipif(browser() is None, reason="no headless Chromium installed")
def test_a_browser_draws_the_demos_timeline_with_both_endings(tmp_path: Path) -> None:
    # Drawn at its own size, the lanes start 86 px down, below the legend (which
    # shows every colour whatever the lanes hold).
    colours = screenshot((DOCS / "demo-timeline.svg").as_uri(), tmp_path / "timeline.png",
                         tmp_path, from_row=86)
    assert {rgb("normal"), rgb("recovery")} <= colours


def test_the_api_reference_shows_the_managers_signature_one_parameter_a_line(site: Path
                                                                             ) -> None:
    page = (site / "reference" / "api.html").read_text()
    start = page.index('id="sessiontemp.Manager"')
    signature = page[start:page.index("</dt>", start)]
    params = re.findall(r'<dd><em class="sig-param">(.*?)</em>', signature, re.S)
    shown = [" ".join(text_of_html(p).split()) for p in params]
    assert shown[0] == "root: os.PathLike[str] | str | None = None"
    assert "clock: collections.abc.Callable[[], float] = time.time" in shown
    assert len(shown) >= 16
    assert "built-in" not in signature


def text_of_html(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_every_page_of_the_site_wraps_long_code_lines_instead_of_hiding_them(site: Path
                                                                            ) -> None:
    for page in ("index", "reference/api"):
        assert 'href="' + "../" * page.count("/") + '_static/wrap.css' in (
            site / f"{page}.html").read_text()
    css = (site / "_static" / "wrap.css").read_text()
    assert "white-space: pre-wrap" in css


# Each code block and signature of the page: whether it is wider than the box it is drawn
# in (scrollWidth > clientWidth), which hides the end of its lines behind a scroll bar.
OVERFLOW_PROBE = """
<script>
window.addEventListener("load", () => {
  const boxes = [...document.querySelectorAll("div.highlight pre, dt.sig")];
  const wide = boxes.filter(e => e.scrollWidth > e.clientWidth)
                    .map(e => [e.scrollWidth, e.clientWidth, e.textContent.slice(0, 80)]);
  const out = document.createElement("output");
  out.id = "overflow-probe";
  out.textContent = JSON.stringify({boxes: boxes.length, wide: wide,
                                    width: document.documentElement.clientWidth});
  document.body.appendChild(out);
});
</script>
"""


@pytest.mark.skipif(browser() is None, reason="no headless Chromium installed")
@pytest.mark.parametrize("page", ["index", "reference/api"])
def test_at_1280_pixels_no_code_block_of_the_front_page_or_the_api_page_overflows(
    site: Path, tmp_path: Path, page: str
) -> None:
    command = browser()
    assert command is not None
    # A copy beside the original (its style sheets are found), with the probe added.
    probed = site / f"{page}.probe-{os.getpid()}.html"
    probed.write_text((site / f"{page}.html").read_text().replace("</body>",
                                                                 OVERFLOW_PROBE + "</body>"))
    try:
        result = subprocess.run(
            [command, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--window-size=1280,900", "--virtual-time-budget=5000", "--dump-dom",
             probed.as_uri()], capture_output=True, text=True, timeout=120, check=True)
    finally:
        probed.unlink()
    found = re.search(r'<output id="overflow-probe">(.*?)</output>', result.stdout, re.S)
    assert found is not None, result.stdout[-2000:]
    report = json.loads(html.unescape(found.group(1)))
    assert report["width"] <= 1280
    assert report["boxes"] > 0
    assert report["wide"] == []
    # And a screenshot as a person sees it, kept where SESSIONTEMP_SCREENSHOTS says.
    screenshot((site / f"{page}.html").as_uri(), tmp_path / f"{page.replace('/', '-')}.png",
               tmp_path)
