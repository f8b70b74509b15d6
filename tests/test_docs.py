"""Every public name says what it is, and the README's set-up type-checks from outside."""

from __future__ import annotations

import contextlib
import importlib
import inspect as pyinspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

# The public API: what users import.  (sessiontemp.journal.store and
# sessiontemp.journal.reducer are the core's own parts.)
MODULES = [
    "sessiontemp.journal.events", "sessiontemp.journal.errors", "sessiontemp.journal.checkpoint",
    "sessiontemp",
    "sessiontemp.inspect", "sessiontemp.platform",
    "sessiontemp.integrations.claude_code", "sessiontemp.integrations.notebook",
    *[f"sessiontemp.inspect.{m}" for m in ("read", "summary", "events", "state", "story",
                                            "verify", "fsck", "timeline", "json")],
]


def undocumented(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    found = []
    for name in getattr(module, "__all__", []):
        value = getattr(module, name)
        if not (pyinspect.isclass(value) or pyinspect.isfunction(value)):
            continue
        if not (value.__doc__ or "").strip():
            found.append(name)
        if pyinspect.isclass(value) and value.__module__.startswith(("journal", "sessiontemp")):
            for attr, member in vars(value).items():
                if attr.startswith("_") or not (isinstance(member, property)
                                                or pyinspect.isfunction(member)):
                    continue
                if not (member.__doc__ or "").strip():
                    found.append(f"{name}.{attr}")
    return found


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_and_its_public_members_have_a_docstring(module_name: str) -> None:
    assert importlib.import_module(module_name).__doc__
    assert undocumented(module_name) == []


def test_every_error_in_the_reference_table_is_exported_from_sessiontemp() -> None:
    import builtins

    import sessiontemp

    section = (REPO / "docs" / "reference" / "errors.md").read_text()
    named = re.findall(r"^\| `(\w+)` \|", section, re.M)
    ours = [name for name in named if not hasattr(builtins, name)]
    assert "ForkedCopy" in ours
    assert [name for name in ours if name not in sessiontemp.__all__] == []
    for name in ours:
        assert issubclass(getattr(sessiontemp, name), sessiontemp.SessionTempError), name


def test_mypy_strict_in_a_project_outside_the_repository_finds_sessiontemp(tmp_path: Path
                                                                          ) -> None:
    """The README's install must leave sessiontemp where a type checker can see it
    (setuptools' default editable install is an import hook mypy cannot follow)."""
    user = tmp_path / "user_code.py"
    user.write_text(
        "from sessiontemp import Manager, inspect\n\n\n"
        "def root_of(manager: Manager) -> str:\n"
        "    return str(manager.root)\n\n\n"
        "SCHEMA: int = inspect.SCHEMA\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


REPO = Path(__file__).parents[1]


def test_the_demo_prints_whole_reasons_and_draws_its_timeline(tmp_path: Path) -> None:
    picture = tmp_path / "demo.svg"
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "demo.py"), "--timeline", str(picture)],
        capture_output=True, text=True, timeout=300, check=True,
    )
    assert "reason=retired and no lease left" in result.stdout
    assert "outcome=removed" in result.stdout
    assert "journal verifies" in result.stdout
    # Our own output, parsed to check it.
    svg = ElementTree.parse(picture).getroot()  # noqa: S314
    assert sum("crash" in e.get("class", "").split() for e in svg.iter()) == 1


def test_the_readme_shows_the_committed_timeline_of_the_demo_and_how_to_redraw_it() -> None:
    readme = (REPO / "README.md").read_text()
    assert "![timeline of the demo's session](docs/demo-timeline.svg)" in readme
    assert "python tools/demo.py --timeline\ndocs/demo-timeline.svg" in readme
    svg = ElementTree.parse(REPO / "docs" / "demo-timeline.svg").getroot()  # noqa: S314
    bars = [e for e in svg.iter() if "generation" in e.get("class", "").split()]
    assert sorted(e.get("class", "").split()[1] for e in bars) == ["normal", "normal",
                                                                  "recovery"]


def test_the_inspector_reads_the_journal_only_through_named_store_methods() -> None:
    # Recovery and the finished history too: the storage format stays in journal/store.py.
    for module in [*sorted((REPO / "sessiontemp" / "inspect").glob("*.py")),
                   REPO / "sessiontemp" / "recovery" / "passes.py",
                   REPO / "journal" / "history.py"]:
        text = module.read_text()
        for raw in (".query(", "SELECT ", "json_extract", "instr("):
            assert raw not in text, f"{module.name} runs SQL of its own ({raw.strip()})"


# -- every recipe runs as written -----------------------------------------------------
#
# Each ```sh and ```python block of the README and of every page (TESTING.md
# and BENCHMARKS.md too, which the site includes) is run as the page shows it,
# unless an HTML comment on the line above says why not (docs/development.md
# describes the markers):
#   <!-- not run: REASON -->      not run, for the reason given
#   <!-- given: CODE -->          runs CODE first, unseen by the reader: what the
#                                 page's prose assumes (`session`, `root`, "$ROOT")
#   <!-- run with: pytest -->     a test module: run by pytest with the plugin
# A page's Python blocks share one interpreter, in order, as a reader pasting
# them would; each shell block runs in bash -e on its own.  Everything runs
# in a fresh directory holding links to the checkout's top-level entries,
# with HOME and TMPDIR (hence the per-user root) inside it, and with
# stand-ins on PATH for what a fresh directory lacks: `make` (the project's
# own build: it writes out/TARGET.html for each target) and `long-job`.

RECIPES = ("sh", "python")
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*(not run|given|run with):\s*(.*?)\s*-->\s*\Z", re.S)
STAND_INS = {
    "make": '#!/bin/sh\n# The project\'s build, which a fresh directory lacks.\nfor target in '
            '"$@"; do case "$target" in -*) ;; *) mkdir -p out && echo "$target" > '
            '"out/$target.html";; esac; done\n',
    "long-job": "#!/bin/sh\nsleep 0.5\n",
}


def doc_pages() -> list[Path]:
    pages = [REPO / "README.md", REPO / "TESTING.md", REPO / "BENCHMARKS.md"]
    return pages + sorted(p for p in (REPO / "docs").rglob("*.md") if "_build" not in p.parts)


def blocks_of(page: Path) -> list[tuple[int, str, str, str, str]]:
    """Each fenced block: (line, language, code, marker, marker's text)."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[:match.start()]
        comment = MARKER.search(before[before.rfind("\n\n") + 1:] if "\n\n" in before
                                else before)
        marker, said = (comment.group(1), textwrap.dedent(comment.group(2))) if comment else (
            "", "")
        found.append((before.count("\n") + 1, match.group(1), match.group(2), marker, said))
    return found


def recipes(page: Path) -> list[tuple[int, str, str, str, str]]:
    return [b for b in blocks_of(page) if b[1] in RECIPES and b[3] != "not run"]


def test_every_code_block_of_the_docs_is_run_or_says_why_not() -> None:
    unmarked = []
    for page in doc_pages():
        for line, language, _, marker, said in blocks_of(page):
            where = f"{page.relative_to(REPO)}:{line}"
            if language in RECIPES or language in ("js", "bash", "console", "shell"):
                if language not in RECIPES and marker != "not run":
                    unmarked.append(f"{where}: a {language} block is never run: mark it")
                if marker == "not run" and not said:
                    unmarked.append(f"{where}: 'not run' without a reason")
    assert unmarked == []
    assert sum(len(recipes(p)) for p in doc_pages()) >= 20


def fresh_place(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh working directory linked to the checkout, and the environment to run in."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in ("README.md", "docs", "tools", "pyproject.toml"):
        (work / entry).symlink_to(REPO / entry)
    bin_dir = tmp_path / "stand-ins"
    bin_dir.mkdir()
    for name, script in STAND_INS.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
           "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")])}
    env.pop("PYTHONSTARTUP", None)
    return work, env


DRIVER = """
import json, sys
namespace = {"__name__": "__main__"}
for where, code in json.load(open(sys.argv[1])):
    exec(compile(code, where, "exec"), namespace)
"""


def run_in_group(command: list[str], *, cwd: Path, env: dict[str, str]
                 ) -> subprocess.CompletedProcess[str]:
    """Run *command* in a process group of its own, and leave no process of it behind."""
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    return subprocess.CompletedProcess(command, child.returncode, out, None)


RECIPE_PAGES = [p for p in doc_pages() if recipes(p)]


@pytest.mark.parametrize("page", RECIPE_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_recipe_of_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    work, env = fresh_place(tmp_path)
    name = str(page.relative_to(REPO))
    python: list[tuple[str, str]] = []
    for line, language, code, marker, said in recipes(page):
        where = f"{name}:{line}"
        if marker == "run with" and said == "pytest":
            (work / "test_recipe.py").write_text(code)
            result = run_in_group([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   "test_recipe.py"], cwd=work, env=env)
            assert result.returncode == 0, f"{where}:\n{result.stdout}"
            continue
        given = said if marker == "given" else ""
        if language == "python":
            if given:
                python.append((f"{where} (given)", given))
            python.append((where, code))
        else:
            result = run_in_group(["bash", "-e", "-o", "pipefail", "-c",
                                   f"{given}\n{code}"], cwd=work, env=env)
            assert result.returncode == 0, f"{where}:\n{code}\n{result.stdout}"
    if python:
        (tmp_path / "blocks.json").write_text(json.dumps(python))
        result = run_in_group([sys.executable, "-c", DRIVER, str(tmp_path / "blocks.json")],
                              cwd=work, env=env)
        assert result.returncode == 0, f"{name}:\n{result.stdout}"


def test_the_test_count_the_readme_and_the_development_page_give_holds_todays_count() -> None:
    """The figure is a dated range, not a number that drifts with every test added."""
    ranges = set()
    for page in (REPO / "README.md", REPO / "docs" / "development.md"):
        text = " ".join(page.read_text().split())
        found = re.search(r"([\d,]+) to ([\d,]+) tests", text)
        assert found is not None, page
        assert re.search(r"measured \d{4}-\d{2}-\d{2}", text), page
        ranges.add((int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))))
    assert len(ranges) == 1
    ((low, high),) = ranges
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    collected = re.search(r"^(\d+)(?:/\d+)? tests? collected", result.stdout, re.M)
    assert collected is not None, result.stdout[-2000:]
    assert low <= int(collected.group(1)) <= high


def hue_name(colour: str) -> str:
    """The everyday name of a saturated colour, from its hue."""
    import colorsys

    red, green, blue = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    hue = colorsys.rgb_to_hsv(red, green, blue)[0] * 360
    for name, upto in (("red", 15), ("orange", 35), ("amber", 50), ("yellow", 70),
                       ("green", 170), ("blue", 250), ("purple", 330)):
        if hue < upto:
            return name
    return "red"


def test_the_docs_name_the_timelines_colours_and_the_artifacts_mode_as_the_code_draws_them(
) -> None:
    from sessiontemp._kernel.root import FILE_MODE
    from sessiontemp.inspect.timeline import COLOURS

    assert (hue_name(COLOURS["normal"]), hue_name(COLOURS["recovery"])) == ("green", "amber")
    for page in (REPO / "README.md", REPO / "docs" / "howto" / "incident.md"):
        text = " ".join(page.read_text().split())
        assert f"normally ({hue_name(COLOURS['normal'])})" in text, page
        assert f"has exited ({hue_name(COLOURS['recovery'])})" in text, page
    # An image embedded in a page shows no tooltips: the README sends readers to the SVG.
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "Hover any mark" not in readme
    assert "Open [the SVG](docs/demo-timeline.svg) itself and hover any mark" in readme
    for page in doc_pages():
        for line in page.read_text().splitlines():
            if "artifacts/<id>-" in line and "mode " in line:
                assert f"mode {FILE_MODE:o}" in line, (page, line)
