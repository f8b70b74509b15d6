"""Every public name says what it is, and the README's set-up type-checks from outside."""

from __future__ import annotations

import importlib
import inspect as pyinspect
import re
import subprocess
import sys
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
                   REPO / "sessiontemp" / "recovery.py", REPO / "journal" / "history.py"]:
        text = module.read_text()
        for raw in (".query(", "SELECT ", "json_extract", "instr("):
            assert raw not in text, f"{module.name} runs SQL of its own ({raw.strip()})"
