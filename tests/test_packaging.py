"""The wheel installs two names of its own and nothing another project owns.

The core lives in the folder ``journal/`` and is installed as ``sessiontemp.journal``:
a top-level ``journal`` would overwrite, or be overwritten by, the PyPI project of that
name.  These tests build the wheel from a copy of the checkout, as ``pip install .``
does, and read what it would install.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import attrs
import pytest
import sqlite_utils
import structlog

from tests.holding import environ, served, st

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


def test_every_runtime_dependency_is_imported_by_the_library() -> None:
    # A dependency no module imports is installed into every user's environment
    # for nothing; one only the tests use belongs to the ``test`` extra.
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].lower().replace("-", "_")
              for d in declared}
    imported: set[str] = set()
    for source in [*(REPO / "sessiontemp").rglob("*.py"), *(REPO / "journal").rglob("*.py")]:
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert sorted(wanted - imported) == []


def test_a_session_starts_and_runs_a_command_where_filelock_is_not_installed(
        tmp_path: Path) -> None:
    # filelock is a test dependency only: an import of it that fails, as
    # where it is not installed (the holder's process is started isolated,
    # from the directories the library and its dependencies came from).
    absent = tmp_path / "absent"
    absent.mkdir()
    (absent / "filelock.py").write_text("raise ImportError('No module named filelock')\n")
    with served(tmp_path / "root") as place:
        env = environ(place.root, PYTHONPATH=os.pathsep.join(
            [os.fspath(absent), *filter(None, [os.environ.get("PYTHONPATH")])]))
        owner = place.owner()
        started = st("session", "start", "s", "--owner-pid", str(owner.pid), "--json",
                     env=env)
        assert started.returncode == 0, started.stderr
        place.holders.add(json.loads(started.stdout)["holder_pid"])
        done = st("run", "--session", "s", "--", "true", env=env)
        assert done.returncode == 0, done.stderr
        ended = st("session", "end", "s", "--owner-pid", str(owner.pid), env=env)
        assert ended.returncode == 0, ended.stderr


# -- every ordinary way to get the source installs ----------------------------------------
#
# Each builds from the checkout as it stands (committed or not: a temporary git index
# takes every file git would track) and installs into a fresh virtual environment; the
# installed copy is then imported, its dependencies taken from this interpreter's.


def checkout_tree(scratch: Path) -> str:
    """The git tree of the checkout's files as they are now, the repository untouched."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout and git")
    env = {**os.environ, "GIT_INDEX_FILE": os.fspath(scratch / "index")}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, env=env, check=True, timeout=120,
                              capture_output=True, text=True).stdout.strip()

    git("read-tree", "HEAD")
    git("add", "-A")
    return git("write-tree")


def git_archive(scratch: Path, fmt: str) -> Path:
    """``git archive --format=FMT`` of the checkout, as a code host's download gives it."""
    tree = checkout_tree(scratch)
    out = scratch / f"sessiontemp.{fmt}"
    subprocess.run(["git", "archive", f"--format={fmt}", "--prefix=sessiontemp/", "-o",
                    os.fspath(out), tree], cwd=REPO, check=True, timeout=120)
    return out


def copied_checkout(scratch: Path) -> Path:
    source = scratch / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=_NOT_COPIED)
    return source


def built(scratch: Path, kind: str) -> Path:
    """A source distribution or a wheel built from a copy of the checkout, as pip builds."""
    source, dist = copied_checkout(scratch), scratch / "dist"
    if kind == "sdist":
        # The build backend's own hook, which `python -m build --sdist` calls.
        command = [sys.executable, "-c", "from setuptools import build_meta; "
                   f"build_meta.build_sdist({os.fspath(dist)!r})"]
    else:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                   os.fspath(dist), os.fspath(source)]
    done = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"building the {kind} failed:\n{done.stderr}"
    [found] = dist.iterdir()
    return found


def source_for(scratch: Path, way: str) -> Path:
    if way in ("zip", "tar.gz"):
        return git_archive(scratch, way)
    if way == "clone":
        return copied_checkout(scratch)
    return built(scratch, way)


def installed_import(scratch: Path, source: Path) -> str:
    """Where a fresh environment with *source* installed imports sessiontemp.journal from."""
    fresh = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.fspath(fresh)],
                   check=True, timeout=120)
    python = fresh / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", os.fspath(python), "install", "--no-deps",
         "-q", os.fspath(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip install {source.name} failed:\n{done.stderr}"
    # Appended, not processed as a site directory: a .pth of the editable install in
    # there would put the checkout back on the path.
    deps = sorted({os.fspath(Path(m.__file__).parent.parent)
                   for m in (attrs, sqlite_utils, structlog)
                   if m.__file__ is not None})
    probe = ("import sys; sys.path.extend(sys.argv[1:]); "
             "import sessiontemp.journal, sessiontemp.journal.store; "
             "from sessiontemp import Manager; print(sessiontemp.journal.__file__)")
    shown = subprocess.run([os.fspath(python), "-c", probe, *deps], cwd=scratch,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip()


@pytest.mark.parametrize("way", [
    "zip",
    pytest.param("tar.gz", marks=pytest.mark.slow),
    pytest.param("clone", marks=pytest.mark.slow),
    "sdist",
    pytest.param("wheel", marks=pytest.mark.slow),
])
def test_every_ordinary_way_to_get_the_source_installs_the_core_as_sessiontemp_journal(
    tmp_path: Path, way: str
) -> None:
    """A zip (git archive, a code host's download) keeps no link: the build must not need it."""
    where = Path(installed_import(tmp_path, source_for(tmp_path, way)))
    assert where.is_relative_to(tmp_path / "venv"), where
    assert where.parent.name == "journal"
    assert (where.parent / "store").is_dir()
    assert (where.parent / "py.typed").is_file()
