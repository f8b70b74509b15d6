"""``tools/lines.py``: where the library's lines are, counted as ``wc -l`` counts them.

The total is checked against the command docs/architecture.md gives
(``find sessiontemp journal -name '*.py' | xargs cat | wc -l``) on the tree as it
stands, and a planted module's every kind of line is counted by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "lines.py"


def lines_json(root: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_total_is_what_wc_counts_over_the_library_and_each_line_has_one_kind() -> None:
    wc = subprocess.run(
        ["sh", "-c", "find sessiontemp journal -name '*.py' | xargs cat | wc -l"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    found = lines_json(REPO)
    modules = [module for package in found["packages"] for module in package["modules"]]
    assert found["total"]["lines"] == int(wc.stdout) == sum(m["counts"]["lines"] for m in modules)
    listed = subprocess.run(
        ["find", "sessiontemp", "journal", "-name", "*.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(m["path"] for m in modules) == sorted(listed.stdout.split())
    for module in modules:
        counts = module["counts"]
        assert counts["code"] + counts["docs"] + counts["blank"] == counts["lines"], module
    names = [package["package"] for package in found["packages"]]
    assert names == sorted(names)


PLANTED = '''"""A planted module.

Its docstring is three lines long."""

import os  # a comment beside code is code

# a comment alone
QUERY = """
SELECT 1

"""


def f() -> None:
    """One line."""
    return None
X = 1'''


def test_a_planted_module_is_counted_line_by_line_and_the_journal_link_is_not_followed(
    tmp_path: Path,
) -> None:
    (tmp_path / "sessiontemp").mkdir()
    (tmp_path / "sessiontemp" / "planted.py").write_text(PLANTED)
    (tmp_path / "journal" / "store").mkdir(parents=True)
    (tmp_path / "journal" / "rules.py").write_text("x = 1\n")
    (tmp_path / "journal" / "store" / "__init__.py").write_text("")
    (tmp_path / "journal" / "README").write_text("not a module\n")
    os.symlink("../journal", tmp_path / "sessiontemp" / "journal")

    found = lines_json(tmp_path)

    # The docstring (its blank line too), a comment alone and a one-line docstring are
    # docs; the SQL text's lines, blank one included, are code; the unterminated last
    # line is no line, as for wc.
    planted = {"lines": 16, "code": 7, "docs": 5, "blank": 4}
    assert [
        (p["package"], [(m["module"], m["path"], m["counts"]) for m in p["modules"]])
        for p in found["packages"]
    ] == [
        ("sessiontemp", [("sessiontemp.planted", "sessiontemp/planted.py", planted)]),
        (
            "sessiontemp.journal",
            [
                (
                    "sessiontemp.journal.rules",
                    "journal/rules.py",
                    {"lines": 1, "code": 1, "docs": 0, "blank": 0},
                )
            ],
        ),
        (
            "sessiontemp.journal.store",
            [
                (
                    "sessiontemp.journal.store",
                    "journal/store/__init__.py",
                    {"lines": 0, "code": 0, "docs": 0, "blank": 0},
                )
            ],
        ),
    ]
    assert found["total"] == {"lines": 17, "code": 8, "docs": 5, "blank": 4}
