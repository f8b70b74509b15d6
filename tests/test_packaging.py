"""The wheel installs two names of its own and nothing another project owns.

The core lives in the folder ``journal/`` and is installed as ``sessiontemp.journal``:
a top-level ``journal`` would overwrite, or be overwritten by, the PyPI project of that
name.  These tests build the wheel from a copy of the checkout, as ``pip install .``
does, and read what it would install.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# What a checkout holds that a build neither needs nor may write into.
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv*", "build", "*.egg-info", "_build",
                                     "__pycache__", ".mypy_cache", ".ruff_cache")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    # The link sessiontemp/journal is copied as a link, as a clone holds it.
    shutil.copytree(REPO, source, symlinks=True, ignore=_NOT_COPIED)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"),
         str(source)], capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{built.stdout}\n{built.stderr}")
    [found] = (base / "dist").glob("sessiontemp-*.whl")
    return zipfile.ZipFile(found)


def top_level_names(wheel: zipfile.ZipFile) -> set[str]:
    return {name.split("/")[0] for name in wheel.namelist()
            if not name.split("/")[0].endswith((".dist-info", ".data"))}


def test_the_wheel_installs_sessiontemp_alone_at_the_top_level(wheel: zipfile.ZipFile) -> None:
    assert top_level_names(wheel) == {"sessiontemp"}


def test_the_core_is_installed_as_sessiontemp_journal_with_its_types(
    wheel: zipfile.ZipFile,
) -> None:
    names = set(wheel.namelist())
    core = sorted(p.relative_to(REPO / "journal").as_posix()
                  for p in (REPO / "journal").rglob("*.py"))
    assert core, "journal/ holds no modules"
    missing = [m for m in core if f"sessiontemp/journal/{m}" not in names]
    assert missing == []
    assert {"sessiontemp/py.typed", "sessiontemp/journal/py.typed"} <= names


def test_the_link_in_a_checkout_is_the_folder_itself() -> None:
    link = REPO / "sessiontemp" / "journal"
    assert link.is_symlink(), f"{link} must be a link to ../journal"
    assert link.resolve() == (REPO / "journal").resolve()


def test_the_core_is_one_module_under_one_name() -> None:
    # In a checkout the folder is importable as ``journal`` too: the library
    # must load it as sessiontemp.journal only, or each class would exist twice.
    probe = ("import sys, sessiontemp, sessiontemp.journal.store, sessiontemp.inspect; "
             "from sessiontemp import Manager; "
             "print(sorted(m for m in sys.modules if m == 'journal' or "
             "m.startswith('journal.')))")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True, cwd=REPO, timeout=60)
    assert shown.stdout.strip() == "[]"
