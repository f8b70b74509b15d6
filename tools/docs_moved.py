"""Check that everything a former README said is still said in the README or the site.

    python tools/docs_moved.py [REV]

REV (default: the last commit whose README.md held the long single-page
form, before the documentation site) names the README to compare.  Each of
its sections is cut into units (a paragraph, a list item, a table row, a
code block's line), and each unit is looked for, with its whitespace and
its links' targets set aside, in README.md and docs/**/*.md of the work
tree.  Prints, per section, how many units were found and each unit that
was not; exit status 1 if a section has units missing.  A unit rewritten
rather than moved shows as missing: read it, and find where its content
went.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LONG_README = "b565e74"


def normal(text: str) -> str:
    """*text* with link targets, emphasis and whitespace set aside."""
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = text.replace("[", "").replace("]", "").replace("**", "")
    return " ".join(text.split())


def units(section: str) -> list[str]:
    found: list[str] = []
    fence = False
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            found.append(" ".join(paragraph))
            paragraph.clear()

    for line in section.splitlines()[1:]:
        if line.startswith("```"):
            flush()
            fence = not fence
            continue
        if fence:
            if line.strip():
                found.append(line)
        elif not line.strip():
            flush()
        elif line.startswith("|"):
            flush()
            if not re.fullmatch(r"[|\s:-]+", line):
                found.append(line)
        elif re.match(r"\s*[-*] ", line):
            flush()
            paragraph.append(line)
        else:
            paragraph.append(line)
    flush()
    return found


def sections(readme: str) -> list[tuple[str, str]]:
    parts: list[tuple[str, str]] = []
    fence = False
    current: list[str] = []
    for line in readme.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and re.match(r"#{1,3} ", line) and current:
            parts.append((current[0], "\n".join(current)))
            current = []
        current.append(line)
    parts.append((current[0], "\n".join(current)))
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", nargs="?", default=LONG_README,
                        help=f"the revision whose README.md to compare (default {LONG_README})")
    args = parser.parse_args()
    old = subprocess.run(["git", "show", f"{args.rev}:README.md"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    here = normal("\n".join(p.read_text() for p in pages if "_build" not in p.parts))
    missing_any = False
    for heading, body in sections(old):
        each = units(body)
        missing = [u for u in each if normal(u) not in here]
        missing_any |= bool(missing)
        print(f"{len(each) - len(missing):3d}/{len(each):<3d} {heading}")
        for unit in missing:
            print(f"          missing: {unit[:160]}")
    return 1 if missing_any else 0


if __name__ == "__main__":
    sys.exit(main())
