"""The library's shape, read from its source with ``ast``: no import circle, packages in
layers, modules of one concept, journal/ below sessiontemp/, SQL only in the store, events
folded only by the reducer, the Ledger and the one read model.

Each rule is checked over ``journal/`` and ``sessiontemp/`` as they stand on disk, and each
failure names the modules and what to do.  The same checks run first on small planted trees
(a circle, a long module, a module of two concepts, a package importing one above it, an
upward import, stray SQL), so a check that could never fail is itself a failure.

What counts as an import: every ``import`` and ``from ... import`` of a module of the two
packages, at any depth: an import inside a function still makes the module depend on the
other one, and one under ``if TYPE_CHECKING:`` too (it never runs, but a circle of types is
a circle of concepts: name what a lower module needs through a Protocol instead).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parent.parent
# Each package's folder, and the name it is imported and installed by: journal/ is
# installed inside sessiontemp (the top-level name ``journal`` belongs to another project
# on PyPI), so its modules are named as they are imported.
PACKAGES = {"journal": "sessiontemp.journal", "sessiontemp": "sessiontemp"}
# One module, one concept, checked two ways: its docstring's first paragraph names the
# concept in one sentence (a summary of two sentences names two things), and it stays below
# this many lines (past it, a concept has parts: give them modules of their own in a
# package named after the concept).
MAX_LINES = 1000
# The layers of sessiontemp/, lowest first: each of its sub-packages and top-level modules
# (a unit) imports only units of the layers below its own, never one beside or above it.
# A module of a package counts as its package; the package's facade (__init__) as the unit
# itself.  journal/ is the core: the next layer up may use it, it uses none.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("journal", "_guards"),
    ("_kernel", "platform", "writepath"),
    ("space", "artifacts", "sessions"),
    ("recovery", "options"),
    ("handles", "inspect"),
    ("generations", "meter", "writer", "cli"),
    ("lease",),
    ("manager",),
    ("run", "holder", "integrations"),
    ("__init__", "__main__", "pytest_plugin"),
    ("scripts",),
)
# Where SQL may be written: the store package (which also holds the inspector's named
# reads, as Store methods) and nowhere else.
SQL_HOMES = ("sessiontemp.journal.store",)
# Who may append to the journal: the ledger (the one owner of a writer's folded state), and
# the store package itself, where an append is committed.
APPEND_HOMES = ("sessiontemp.journal.ledger", "sessiontemp.journal.store")
# The store's write entry points: Store.append and Store.submit, the group commit's
# submit and commit_batch.
_APPENDS = frozenset({"append", "submit", "commit_batch"})
# The first word of an SQL statement, then what must follow it for the text to be SQL
# rather than prose: a statement is written in capitals here.
_SQL = re.compile(
    r"^\s*(?:SELECT\s.*\bFROM\b|SELECT\s+(?:RAISE|\d|\?|count|max|min)|INSERT\s+(?:OR\s+\w+\s+)?INTO\b"
    r"|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b|REPLACE\s+INTO\b"
    r"|CREATE\s+(?:UNIQUE\s+|TEMP\s+)?(?:TABLE|INDEX|TRIGGER|VIEW)\b|DROP\s+(?:TABLE|INDEX|TRIGGER|VIEW)\b"
    r"|ALTER\s+TABLE\b|PRAGMA\s+\w+|BEGIN(?:\s+(?:IMMEDIATE|EXCLUSIVE|DEFERRED))?\s*$"
    r"|COMMIT\s*$|ROLLBACK\b|SAVEPOINT\s|RELEASE\s+SAVEPOINT\b|ATTACH\s+(?:DATABASE\s+)?\S"
    r"|DETACH\s+(?:DATABASE\s+)?\w|VACUUM\b|WITH\s+(?:RECURSIVE\s+)?\w+\s*(?:\(.*\)\s*)?AS\s*\()",
    re.DOTALL,
)
# Where events may be folded into a state: the reducer (the fold itself), the Ledger (the
# write side's one fold) and the one read model every reader folds the kept history through.
FOLD_HOMES = ("sessiontemp.journal.reducer", "sessiontemp.journal.ledger",
              "sessiontemp.journal.history")
# What reaches the reducer: its module, and the package that re-exports its names.
_REDUCER = ("sessiontemp.journal.reducer", "sessiontemp.journal")


@attrs.frozen
class Import:
    """Module *source* imports module *target* at *line*."""

    source: str
    target: str
    line: int


@attrs.frozen
class Circle:
    """Modules that import each other (*modules*), and one cycle of imports among them."""

    modules: tuple[str, ...]
    cycle: tuple[Import, ...]

    def describe(self) -> str:
        steps = ", ".join(f"{imp.source} (line {imp.line}) imports {imp.target}"
                          for imp in self.cycle)
        return (f"import circle among {{{', '.join(self.modules)}}}: {steps}. Imports inside "
                "functions and under `if TYPE_CHECKING:` count too. Move what they share into "
                "a module below them, move the caller into a module above them, or let the "
                "lower module name what it needs through a typing.Protocol")


@attrs.frozen
class Tree:
    """The modules of some packages: name to source file."""

    files: dict[str, Path]

    @classmethod
    def read(cls, base: Path, packages: Iterable[str]) -> Tree:
        files: dict[str, Path] = {}
        for package in packages:
            # rglob does not follow sessiontemp/journal, the link to journal/: each
            # module is read once, under the name it is imported by.
            for path in sorted((base / package).rglob("*.py")):
                parts = path.relative_to(base / package).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                files[".".join([PACKAGES.get(package, package), *parts])] = path
        return cls(files)

    def parsed(self, module: str) -> ast.Module:
        return ast.parse(self.files[module].read_text(), str(self.files[module]))

    def is_package(self, module: str) -> bool:
        return self.files[module].name == "__init__.py"

    def imports(self) -> list[Import]:
        found: list[Import] = []
        for module in self.files:
            for node in _import_nodes(self.parsed(module)):
                found.extend(Import(module, target, node.lineno)
                             for target in self._targets(module, node) if target != module)
        return found

    def _targets(self, module: str, node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                known = self._known_prefix(alias.name)
                if known is not None:
                    yield known
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if self.is_package(module) else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                # ``from pkg import mod`` imports the module; ``from mod import name``
                # imports the module the name is in.
                known = self._known_prefix(f"{base}.{alias.name}") or self._known_prefix(base)
                if known is not None:
                    yield known

    def _known_prefix(self, dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in self.files:
                return candidate
        return None

    def circles(self) -> list[Circle]:
        """Each group of modules that import each other, with one cycle through it."""
        edges: dict[str, dict[str, Import]] = {m: {} for m in self.files}
        for imp in self.imports():
            edges[imp.source].setdefault(imp.target, imp)
        return [Circle(tuple(group), tuple(_cycle_in(group, edges)))
                for group in _strongly_connected(edges) if len(group) > 1]

    def long_modules(self, limit: int = MAX_LINES) -> list[tuple[str, int]]:
        counted = ((m, len(p.read_text().splitlines())) for m, p in self.files.items())
        return [(m, n) for m, n in counted if n > limit]

    def unnamed_concepts(self) -> list[tuple[str, str]]:
        """Each module whose docstring does not name one concept: ``(module, why)``.

        The docstring's first paragraph is its summary: one sentence, ended by a period (or
        by ``::`` before an example), with no second sentence after it.
        """
        found = []
        for module in self.files:
            text = ast.get_docstring(self.parsed(module))
            summary = " ".join((text or "").split("\n\n")[0].split())
            if not summary:
                found.append((module, "it has no docstring"))
            elif not summary.endswith((".", "::")):
                found.append((module, f"its summary {summary[:60]!r} is not one sentence"))
            elif _SECOND_SENTENCE.search(summary[:-1]):
                found.append((module, f"its summary {summary[:60]!r}... is two sentences"))
        return found

    def layer_breaches(self, layers: tuple[tuple[str, ...], ...] = LAYERS,
                       top: str = "sessiontemp") -> list[tuple[Import, str]]:
        """Each import of a unit beside or above the importer's own layer, and why; and
        each unit no layer names (as an Import of itself, line 0)."""
        level = {unit: i for i, units in enumerate(layers) for unit in units}
        found = []
        for module in self.files:
            unit = _unit(module, top)
            if unit not in level:
                found.append((Import(module, module, 0), f"{unit} is in no layer"))
        for imp in self.imports():
            source, target = _unit(imp.source, top), _unit(imp.target, top)
            if source == target or source not in level or target not in level:
                continue
            if level[target] >= level[source]:
                where = "beside" if level[target] == level[source] else "above"
                found.append((imp, f"{target} is {where} {source}"))
        return found

    def upward_imports(self, lower: str = "sessiontemp.journal",
                       upper: str = "sessiontemp") -> list[Import]:
        return [imp for imp in self.imports()
                if _within(imp.source, lower) and _within(imp.target, upper)
                and not _within(imp.target, lower)]

    def top_level_journal_imports(self) -> list[Import]:
        """Imports of ``journal`` by its folder's name, which is not the name it is installed by."""
        found: list[Import] = []
        for module in self.files:
            for node in _import_nodes(self.parsed(module)):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if node.level == 0 else [])
                found.extend(Import(module, name, node.lineno) for name in names
                             if _within(name, "journal"))
        return found

    def stray_sql(self, homes: Iterable[str] = SQL_HOMES) -> list[tuple[str, int, str]]:
        homes = tuple(homes)
        found = []
        for module in self.files:
            if any(_within(module, home) for home in homes):
                continue
            tree = self.parsed(module)
            # Docstrings are prose, and the pieces of an f-string are read with it.
            skipped = _docstrings(tree) | {id(part) for node in ast.walk(tree)
                                           if isinstance(node, ast.JoinedStr)
                                           for part in node.values}
            for node in ast.walk(tree):
                text = _leading_text(node)
                if text is None or id(node) in skipped:
                    continue
                if _SQL.match(text):
                    assert isinstance(node, ast.expr)
                    found.append((module, node.lineno, " ".join(text.split())[:60]))
        return found

    def folds(self, homes: Iterable[str] = FOLD_HOMES) -> list[tuple[str, int, str]]:
        """Where a module outside *homes* folds events: ``(module, line, how)``.

        A module folds when it calls the reducer's ``replay`` or ``apply`` (imported by
        name, or reached as an attribute of the reducer's module or package), or steps a
        ``Fold`` it made: ``.step`` (called, or kept to be called) of a name bound to
        ``Fold(...)`` anywhere in the module, or of ``Fold(...)`` itself.  Making a Fold
        only to hand it to a Ledger (``ledger.follow(Fold(state))``) is not folding: the
        Ledger steps it.
        """
        homes = tuple(homes)
        found = []
        for module in self.files:
            if any(_within(module, home) for home in homes):
                continue
            tree = self.parsed(module)
            names, modules, fold_types = self._reducer_names(module, tree)
            made = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and _makes_fold(node.value, fold_types, modules)
                    for target in node.targets if isinstance(target, ast.Name)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                        node.func.id in names):
                    found.append((module, node.lineno,
                                  f"calls the reducer's {names[node.func.id]}"))
                elif not isinstance(node, ast.Attribute):
                    continue
                elif (node.attr in ("replay", "apply") and isinstance(node.value, ast.Name)
                      and node.value.id in modules):
                    found.append((module, node.lineno, f"calls the reducer's {node.attr}"))
                # Called, or kept to be called (``step = fold.step``): stepped all the same.
                elif node.attr == "step" and (
                        (isinstance(node.value, ast.Name) and node.value.id in made)
                        or _makes_fold(node.value, fold_types, modules)):
                    found.append((module, node.lineno, "steps a Fold of its own"))
        return found

    def _reducer_names(self, module: str, tree: ast.Module
                       ) -> tuple[dict[str, str], set[str], set[str]]:
        """The local names of the reducer's replay and apply (to what they are), of its
        module or package, and of its Fold, as *module* imports them."""
        names: dict[str, str] = {}
        modules: set[str] = set()
        fold_types: set[str] = set()
        for node in _import_nodes(tree):
            if isinstance(node, ast.Import):
                modules.update(alias.asname or alias.name for alias in node.names
                               if alias.name in _REDUCER)
                continue
            base = node.module or ""
            if node.level:
                package = module.split(".") if self.is_package(module) else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{base}.{alias.name}" in _REDUCER:
                    modules.add(local)
                elif base in _REDUCER and alias.name in ("replay", "apply"):
                    names[local] = alias.name
                elif base in _REDUCER and alias.name == "Fold":
                    fold_types.add(local)
        return names, modules, fold_types

    def stray_appends(self, homes: Iterable[str] = APPEND_HOMES) -> list[tuple[str, int, str]]:
        """Each call of a store's write entry point (``store.append``, ``Store.submit``, ...)
        outside *homes*: a receiver whose name ends in ``store`` or ``commits``."""
        homes = tuple(homes)
        found = []
        for module in self.files:
            if any(_within(module, home) for home in homes):
                continue
            for node in ast.walk(self.parsed(module)):
                if not (isinstance(node, ast.Attribute) and node.attr in _APPENDS):
                    continue
                receiver = node.value
                name = (receiver.id if isinstance(receiver, ast.Name) else
                        receiver.attr if isinstance(receiver, ast.Attribute) else "")
                if name.lower().lstrip("_").endswith(("store", "commits")):
                    found.append((module, node.lineno, f"{ast.unparse(node)}"))
        return found


def _makes_fold(node: ast.AST, fold_types: set[str], modules: set[str]) -> bool:
    """Whether *node* is a call that makes a Fold: ``Fold(...)`` or ``reducer.Fold(...)``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id in fold_types) or (
        isinstance(func, ast.Attribute) and func.attr == "Fold"
        and isinstance(func.value, ast.Name) and func.value.id in modules)


# A sentence's end inside a summary: a full stop, then a word that starts a sentence.
_SECOND_SENTENCE = re.compile(r"[.!?] +[A-Z`]")


def _unit(module: str, top: str) -> str:
    """The unit of sessiontemp/ a module belongs to: its sub-package or top-level module."""
    parts = module.split(".")
    return "__init__" if module == top else parts[1]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth: in functions and under ``if TYPE_CHECKING:`` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _leading_text(node: ast.AST) -> str | None:
    """The text a string literal (or an f-string) starts with, None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value + "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "0"
                for v in node.values[1:])
    return None


def _strongly_connected(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's groups of modules that reach each other, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def _cycle_in(group: list[str], edges: dict[str, dict[str, Import]]) -> list[Import]:
    """A shortest cycle through the group's first module, as the imports that make it."""
    members = set(group)
    start = group[0]
    came: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target, imp in sorted(edges[node].items()):
                if target == start:
                    path = [imp]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if target in members and target not in came:
                    came[target] = imp
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {group}")


# -- the library ---------------------------------------------------------------------------------

LIBRARY = Tree.read(REPO, PACKAGES)


def test_no_module_of_the_library_imports_itself_through_others() -> None:
    circles = LIBRARY.circles()
    assert not circles, "\n".join(circle.describe() for circle in circles)


def test_every_module_of_the_library_names_its_one_concept_in_its_docstring() -> None:
    unnamed = LIBRARY.unnamed_concepts()
    assert not unnamed, "\n".join(
        f"{module}: {why}. A module holds one concept: say which in the docstring's first "
        "sentence; if it takes two, split the module" for module, why in unnamed)


def test_every_module_of_the_library_stays_below_the_size_of_one_concept() -> None:
    long = LIBRARY.long_modules()
    assert not long, "\n".join(
        f"{module} has {lines} lines (at most {MAX_LINES}): a concept this large has parts; "
        "make it a package named after the concept, one module per part" for module, lines in long)


def test_each_package_and_module_of_sessiontemp_imports_only_the_layers_below_it() -> None:
    breaches = LIBRARY.layer_breaches()
    assert not breaches, "\n".join(
        f"{imp.source} (line {imp.line}) imports {imp.target}: {why}. Each unit of "
        "sessiontemp/ (a sub-package or a top-level module) imports only the layers below "
        "it (LAYERS in this file, drawn in docs/architecture.md): move what both need down, "
        "or pass it in; a new unit takes its place in LAYERS" for imp, why in breaches)


def test_journal_never_imports_sessiontemp() -> None:
    upward = LIBRARY.upward_imports()
    assert not upward, "\n".join(
        f"{imp.source} (line {imp.line}) imports {imp.target}: journal/ is the core and never "
        "calls up into sessiontemp/; pass what it needs in (a callable, a value), or move the "
        "code into sessiontemp/" for imp in upward)


def test_nothing_imports_journal_by_its_folder_name() -> None:
    # In a checkout the folder is importable as ``journal`` too; a module imported under
    # both names would be two modules, with two of each class.
    tree = Tree.read(REPO, [*PACKAGES, "tests", "tools"])
    found = tree.top_level_journal_imports()
    assert not found, "\n".join(
        f"{imp.source} (line {imp.line}) imports {imp.target}: the package is installed as "
        "sessiontemp.journal; import it by that name (inside journal/, import relatively)"
        for imp in found)


def test_sql_is_written_only_in_the_store_package() -> None:
    by_module: dict[str, list[tuple[int, str]]] = {}
    for module, line, text in LIBRARY.stray_sql():
        by_module.setdefault(module, []).append((line, text))
    assert not by_module, "\n".join(
        f"{module} writes SQL at lines {', '.join(str(line) for line, _ in found)} (first: "
        f"{found[0][1]!r}): statements belong to the store package ({', '.join(SQL_HOMES)}); "
        "move them there behind a named Store method and call that instead"
        for module, found in by_module.items())


def test_events_are_folded_only_by_the_reducer_the_ledger_and_the_one_read_model() -> None:
    by_module: dict[str, list[tuple[int, str]]] = {}
    for module, line, how in LIBRARY.folds():
        by_module.setdefault(module, []).append((line, how))
    assert not by_module, "\n".join(
        f"{module} folds events at lines {', '.join(str(line) for line, _ in found)} "
        f"({found[0][1]}): a reader folds through sessiontemp.journal.history (fold, begin, "
        "start), a writer through its Ledger; no second fold of the journal may exist"
        for module, found in by_module.items())


def test_only_the_ledger_appends_to_the_journal() -> None:
    found = LIBRARY.stray_appends()
    assert not found, "\n".join(
        f"{module} calls {call} at line {line}: every record goes through a Ledger "
        "(journal/ledger.py), which decides it on the journal's state and folds it; "
        "append through the writer's ledger (Ledger.submit, or Ledger.append for a writer "
        "that decides from the whole journal) instead" for module, line, call in found)


# -- the checks themselves, on planted trees -------------------------------------------------------

def plant(base: Path, files: dict[str, str]) -> Tree:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Tree.read(base, sorted({name.split("/")[0] for name in files}))


def test_a_planted_circle_of_three_modules_is_found_and_named(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "def f() -> None:\n    from pkg.c import g\n",
        "pkg/c.py": "from . import a\n",
        "pkg/d.py": "import pkg.a\n",
    })
    circles = tree.circles()
    assert len(circles) == 1
    assert circles[0].modules == ("pkg.a", "pkg.b", "pkg.c")
    message = circles[0].describe()
    assert "{pkg.a, pkg.b, pkg.c}" in message
    assert "pkg.b (line 2) imports pkg.c" in message
    assert "inside functions" in message


def test_an_import_for_type_checking_only_still_makes_a_circle(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import B\n",
        "pkg/b.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from pkg.a import A\nelse:\n    import json\nclass B: ...\n"),
    })
    assert sorted((i.source, i.target) for i in tree.imports()) == [
        ("pkg.a", "pkg.b"), ("pkg.b", "pkg.a")]
    circles = tree.circles()
    assert [c.modules for c in circles] == [("pkg.a", "pkg.b")]
    assert "pkg.b (line 3) imports pkg.a" in circles[0].describe()
    assert "under `if TYPE_CHECKING:` count too" in circles[0].describe()


def test_a_planted_long_module_an_upward_import_and_stray_sql_are_found(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "journal/__init__.py": "",
        "journal/store.py": 'Q = "SELECT seq FROM events"\n',
        "journal/events.py": "from sessiontemp import manager\n" + "x = 1\n" * MAX_LINES,
        "sessiontemp/__init__.py": "",
        "sessiontemp/manager.py": ('"""SELECT the words FROM a docstring: prose."""\n'
                                   'def f(seq: int) -> str:\n'
                                   '    return f"DELETE FROM events WHERE seq = {seq}"\n'
                                   'NOTE = "Begin again, once the lock is free"\n'),
    })
    assert tree.long_modules() == [("sessiontemp.journal.events", MAX_LINES + 1)]
    assert [(i.source, i.target, i.line) for i in tree.upward_imports()] == [
        ("sessiontemp.journal.events", "sessiontemp.manager", 1)]
    assert [(m, line) for m, line, _ in tree.stray_sql()] == [("sessiontemp.manager", 3)]


def test_a_planted_module_of_two_concepts_and_one_of_none_are_found(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "sessiontemp/__init__.py": '"""The library: one concept, over\ntwo lines."""\n',
        "sessiontemp/a.py": '"""Sizes. And the walk.\n\nMore words. Here."""\n',
        "sessiontemp/b.py": "x = 1\n",
        "sessiontemp/c.py": '"""Sizes as people write them: ``500M``, ``2G``\n\nDetail."""\n',
        "sessiontemp/d.py": '"""The console scripts: write ``sessiontemp run``::\n\n  x\n"""\n',
    })
    assert [(m, why.split(" ")[-1]) for m, why in tree.unnamed_concepts()] == [
        ("sessiontemp.a", "sentences"), ("sessiontemp.b", "docstring"),
        ("sessiontemp.c", "sentence")]


def test_a_planted_import_beside_or_above_a_layer_is_found(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "sessiontemp/__init__.py": "from sessiontemp.low import a\n",
        "sessiontemp/low/__init__.py": "",
        "sessiontemp/low/a.py": "from sessiontemp.low import b\n",
        "sessiontemp/low/b.py": "def f() -> None:\n    from sessiontemp import mid\n",
        "sessiontemp/mid.py": "from sessiontemp import side\nfrom sessiontemp.low import a\n",
        "sessiontemp/side.py": "",
        "sessiontemp/stray.py": "",
    })
    layers = (("low",), ("mid", "side"), ("__init__",))
    assert sorted((imp.source, imp.target, imp.line, why)
                  for imp, why in tree.layer_breaches(layers)) == [
        ("sessiontemp.low.b", "sessiontemp.mid", 2, "mid is above low"),
        ("sessiontemp.mid", "sessiontemp.side", 1, "side is beside mid"),
        ("sessiontemp.stray", "sessiontemp.stray", 0, "stray is in no layer"),
    ]


def test_a_planted_fold_is_found_however_it_reaches_the_reducer(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "journal/__init__.py": "",
        "journal/reducer.py": "class Fold: ...\ndef replay(r): ...\ndef apply(s, r): ...\n",
        "journal/history.py": "from .reducer import replay\nreplay([])\n",
        "sessiontemp/__init__.py": "",
        "sessiontemp/a.py": "from sessiontemp.journal.reducer import replay as r\nr([])\n",
        "sessiontemp/b.py": ("from sessiontemp.journal import reducer\n"
                             "def f(s, rs):\n    return reducer.apply(s, rs[0])\n"),
        "sessiontemp/c.py": ("from sessiontemp.journal.reducer import Fold\n"
                             "def f(s, rs):\n    fold = Fold(s)\n    for r in rs:\n"
                             "        fold.step(r)\n"
                             "def g(s, rs):\n    draft = Fold(s)\n    step = draft.step\n"
                             "    for r in rs:\n        step(r)\n"),
        "sessiontemp/d.py": ("from sessiontemp.journal.reducer import Fold\n"
                             "def f(ledger, s):\n    ledger.follow(Fold(s), s.seq)\n"),
        "sessiontemp/e.py": "import sessiontemp.journal as j\nj.replay([])\n",
    })
    assert sorted(tree.folds()) == [
        ("sessiontemp.a", 2, "calls the reducer's replay"),
        ("sessiontemp.b", 3, "calls the reducer's apply"),
        ("sessiontemp.c", 5, "steps a Fold of its own"),
        ("sessiontemp.c", 8, "steps a Fold of its own"),
        ("sessiontemp.e", 2, "calls the reducer's replay"),
    ]


def test_a_planted_append_past_the_ledger_is_found(tmp_path: Path) -> None:
    tree = plant(tmp_path, {
        "journal/__init__.py": "",
        "journal/ledger.py": "def f(store):\n    store.submit([])\n",
        "journal/store/__init__.py": "def f(self):\n    self._commits.submit([])\n",
        "sessiontemp/__init__.py": "",
        "sessiontemp/recovery/passes.py": ("class P:\n    def f(self, events):\n"
                                    "        self.store.append(events, time=1.0)\n"
                                    "        self.removed.append(1)\n"),
        "sessiontemp/recovery/cleanup.py": "from x import Store\nappend = Store.append\n",
        "sessiontemp/writer.py": "def f(ledger, handles):\n    ledger.submit(())\n"
                                 "    handles.store.submit(())\n",
    })
    assert sorted((m, line) for m, line, _ in tree.stray_appends()) == [
        ("sessiontemp.recovery.cleanup", 2), ("sessiontemp.recovery.passes", 3),
        ("sessiontemp.writer", 3)]


@pytest.mark.parametrize("text", [
    "SELECT seq, digest FROM events WHERE seq > ?", "INSERT INTO segment (base) VALUES (?)",
    "CREATE TRIGGER t BEFORE UPDATE ON events BEGIN SELECT RAISE(ABORT, 'x'); END",
    "PRAGMA user_version", "BEGIN IMMEDIATE", "COMMIT", "ATTACH DATABASE ? AS s1",
    "UPDATE events SET kind = ?", "DROP INDEX events_by_kind",
])
def test_each_kind_of_statement_is_taken_for_sql(text: str) -> None:
    assert _SQL.match(text)


@pytest.mark.parametrize("text", [
    "Begin again", "COMMIT message", "a SELECT FROM", "PRAGMA", "the journal was updated",
])
def test_prose_is_not_taken_for_sql(text: str) -> None:
    assert not _SQL.match(text)
