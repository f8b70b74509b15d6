"""Where the library's lines are: each package and module, split by what the lines hold.

    python tools/lines.py [--root DIR] [--json]

Run from a checkout.  For every ``*.py`` file under ``sessiontemp/`` and
``journal/`` (installed as ``sessiontemp.journal``), grouped by package and
sorted by package name, prints:

- lines: the file's newlines, as ``wc -l`` counts them, so the total at the
  end equals ``find sessiontemp journal -name '*.py' | xargs cat | wc -l``;
- code: lines holding any token of a statement (a string literal that is
  part of an expression, such as a SQL text, counts as code);
- docs: lines of a statement that is only a string (a docstring) and lines
  holding only a comment;
- blank: the rest (empty, or only whitespace, outside a string).

A line holding code and a comment is code.  The link ``sessiontemp/journal
-> ../journal`` a checkout holds is not followed, as ``find`` does not
follow it: each module is counted once.  ``--json`` prints the same as one
JSON object: ``packages`` (each with its ``modules``) and ``total``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Each folder and the name its modules are imported by.
FOLDERS = {"sessiontemp": "sessiontemp", "journal": "sessiontemp.journal"}

# Tokens that hold no code of their own.
_LAYOUT = {
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
    tokenize.COMMENT,
}


@dataclass
class Counts:
    lines: int = 0
    code: int = 0
    docs: int = 0
    blank: int = 0

    def add(self, other: Counts) -> None:
        self.lines += other.lines
        self.code += other.code
        self.docs += other.docs
        self.blank += other.blank


@dataclass
class Module:
    module: str
    path: str
    counts: Counts


@dataclass
class Package:
    package: str
    path: str
    counts: Counts = field(default_factory=Counts)
    modules: list[Module] = field(default_factory=list)


def _kinds(source: bytes) -> tuple[set[int], set[int]]:
    """The line numbers holding code, and those holding a docstring or a comment."""
    code: set[int] = set()
    docs: set[int] = set()
    statement: list[tokenize.TokenInfo] = []

    def close() -> None:
        # A statement made only of string literals is a docstring (or a
        # string standing alone, which documents the same way).
        strings = [t for t in statement if t.type not in _LAYOUT]
        into = docs if strings and all(t.type == tokenize.STRING for t in strings) else code
        for token in strings:
            into.update(range(token.start[0], token.end[0] + 1))
        statement.clear()

    for token in tokenize.tokenize(io.BytesIO(source).readline):
        if token.type == tokenize.COMMENT:
            docs.add(token.start[0])
        elif token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            close()
        elif token.type not in _LAYOUT:
            statement.append(token)
    close()
    return code, docs


def count(source: bytes) -> Counts:
    """The counts of one file's *source*; the lines are its newlines, as ``wc -l``'s."""
    lines = source.count(b"\n")
    code, docs = _kinds(source)
    counts = Counts(lines=lines)
    # A last line without its newline is not a line to wc, nor here.
    for number in range(1, lines + 1):
        if number in code:
            counts.code += 1
        elif number in docs:
            counts.docs += 1
        else:
            counts.blank += 1
    return counts


def survey(root: Path) -> list[Package]:
    """Every package under *root*'s library folders, sorted by name, its modules sorted too."""
    packages: dict[str, Package] = {}
    for folder, name in FOLDERS.items():
        top = root / folder
        # os.walk lists a link to a directory but does not enter it.
        for directory, subdirectories, files in os.walk(top):
            subdirectories.sort()
            here = Path(directory)
            parts = here.relative_to(top).parts
            package_name = ".".join((name, *parts))
            for filename in sorted(files):
                if not filename.endswith(".py"):
                    continue
                path = here / filename
                stem = filename[: -len(".py")]
                module_name = package_name if stem == "__init__" else f"{package_name}.{stem}"
                package = packages.setdefault(
                    package_name,
                    Package(package=package_name, path=here.relative_to(root).as_posix()),
                )
                counts = count(path.read_bytes())
                package.modules.append(
                    Module(module_name, path.relative_to(root).as_posix(), counts)
                )
                package.counts.add(counts)
    return [packages[name] for name in sorted(packages)]


def total(packages: list[Package]) -> Counts:
    whole = Counts()
    for package in packages:
        whole.add(package.counts)
    return whole


def report(packages: list[Package]) -> str:
    def row(name: str, counts: Counts) -> str:
        return f"{name:<44} {counts.lines:>6} {counts.code:>6} {counts.docs:>6} {counts.blank:>6}"

    out = [f"{'package / module':<44} {'lines':>6} {'code':>6} {'docs':>6} {'blank':>6}"]
    for package in packages:
        out.append("")
        out.append(row(f"{package.package} ({len(package.modules)} modules)", package.counts))
        for module in package.modules:
            out.append(row(f"  {module.path}", module.counts))
    whole = total(packages)
    out.append("")
    modules = sum(len(package.modules) for package in packages)
    out.append(row(f"total ({len(packages)} packages, {modules} modules)", whole))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=REPO, help="the checkout to count (default: this one)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    packages = survey(args.root)
    if args.json:
        print(
            json.dumps(
                {
                    "packages": [asdict(package) for package in packages],
                    "total": asdict(total(packages)),
                },
                indent=2,
            )
        )
    else:
        print(report(packages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
