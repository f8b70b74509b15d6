"""The write path of one acquire, traced: calls, modules, classes, calls that go up, objects made.

    python tools/trace_acquire.py [--root DIR] [--durability full|relaxed] [--no-strace]

Run from a checkout (it imports the library from the folder above this one,
not an installed copy).  On a fresh root it opens a Manager and traces, in
the calling thread, one *first* acquire (the generation is made and
journaled) and, after its release, one *warm* acquire (a lease on the live
generation), with ``sys.setprofile``:

- calls: Python functions of the library (``journal/``, ``sessiontemp/``)
  entered, and the distinct modules and classes they belong to;
- up: calls whose callee's module imports, directly or through others, the
  module of the nearest library frame that called it: a lower layer calling
  back into a higher one (through a Protocol or a callable it was handed),
  as the import graph declares the layers (see docs/architecture.md);
- objects: attrs instances built (their generated ``__init__``) and other
  library classes' ``__init__`` entered; ``blocks`` is the net change of
  ``sys.getallocatedblocks()``;
- syscalls: with ``strace`` on the PATH, the same two acquires on another
  fresh root with strace attached to this process (all its threads), by name.

Only the calling thread is profiled: work a background thread does (a
meter, a maintenance) is not in the call figures, but is in the syscalls.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sessiontemp import Manager  # noqa: E402  (the checkout's, put first on the path above)

# Each folder and the name its modules are imported by.
PACKAGES = {"journal": "sessiontemp.journal", "sessiontemp": "sessiontemp"}


def module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for folder, name in PACKAGES.items():
        # rglob does not follow the link sessiontemp/journal -> ../journal.
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([name, *parts])] = path
    return files


def import_closure() -> dict[str, set[str]]:
    """Each module of the library, and every module of it it imports, directly or not."""
    files = module_files()
    direct: dict[str, set[str]] = {m: set() for m in files}

    def known(dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in files:
                return ".".join(parts[:end])
        return None

    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[:len(package) - (node.level - 1)],
                                     *([base] if base else [])])
                targets = [known(f"{base}.{a.name}") or known(base) for a in node.names]
            else:
                continue
            direct[module].update(t for t in targets if t is not None and t != module)
    closure: dict[str, set[str]] = {}
    for module in files:
        seen: set[str] = set()
        todo = [module]
        while todo:
            for target in direct[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        closure[module] = seen
    return closure


def library(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__")
    if isinstance(name, str) and name.split(".")[0] == "sessiontemp":
        return name
    return None


class Trace:
    """What one traced call of the library did."""

    def __init__(self, closure: dict[str, set[str]]) -> None:
        self.closure = closure
        self.calls = 0
        self.modules: collections.Counter[str] = collections.Counter()
        self.classes: set[str] = set()
        self.up: collections.Counter[str] = collections.Counter()
        self.attrs_made: collections.Counter[str] = collections.Counter()
        self.inits: collections.Counter[str] = collections.Counter()
        self.blocks = 0

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename.startswith("<attrs generated "):
            if code.co_name == "__init__":
                self.attrs_made[code.co_filename.rsplit(" ", 1)[-1].rstrip(">")] += 1
            return
        module = library(frame)
        if module is None:
            return
        self.calls += 1
        self.modules[module] += 1
        qualname = code.co_qualname
        if "." in qualname:
            owner = qualname.rsplit(".", 1)[0]
            if "<locals>" not in owner:
                self.classes.add(f"{module}.{owner}")
        if code.co_name == "__init__":
            self.inits[f"{module}.{qualname}"] += 1
        caller = frame.f_back
        while caller is not None and library(caller) is None:
            caller = caller.f_back
        if caller is None:
            return
        source = library(caller)
        if source is not None and source != module and source in self.closure.get(module, ()):
            self.up[f"{source}.{caller.f_code.co_qualname} -> {module}.{qualname}"] += 1

    def run(self, call: Callable[[], object]) -> object:
        before = sys.getallocatedblocks()
        sys.setprofile(self.profile)
        try:
            result = call()
        finally:
            sys.setprofile(None)
        self.blocks = sys.getallocatedblocks() - before
        return result

    def report(self, title: str, *, detail: bool) -> None:
        print(f"## {title}")
        print(f"- library calls: {self.calls}, in {len(self.modules)} modules "
              f"and {len(self.classes)} classes")
        print(f"- calls up the layers: {sum(self.up.values())}")
        print(f"- objects made: {sum(self.attrs_made.values())} attrs instances, "
              f"{sum(self.inits.values())} other library __init__; "
              f"net allocated blocks {self.blocks:+d}")
        if detail:
            print("- modules (calls): " + ", ".join(
                f"{m.removeprefix('sessiontemp.')} {n}" for m, n in self.modules.most_common()))
            for edge, n in self.up.most_common():
                print(f"  - up: {edge.replace('sessiontemp.', '')} x{n}")
        print()


def scenario(root: Path, durability: str, traced: Callable[[str, Callable[[], object]], object]
             ) -> None:
    manager = Manager(root, durability=durability)  # type: ignore[arg-type]
    try:
        manager.retain()
        lease: Any = traced("first acquire (fresh root: a generation is made)", manager.acquire)
        lease.release()
        lease = traced("warm acquire (a lease on the live generation)", manager.acquire)
        lease.release()
    finally:
        manager.close()


def syscalls(root: Path, durability: str) -> dict[str, collections.Counter[str]] | None:
    strace = shutil.which("strace")
    if strace is None:
        return None
    counts: dict[str, collections.Counter[str]] = {}

    def traced(title: str, call: Callable[[], object]) -> object:
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
            tracer = subprocess.Popen(
                [strace, "-f", "-qq", "-e", "trace=all", "-o", out.name, "-p", str(os.getpid())],
                stderr=subprocess.DEVNULL)
            try:
                # Attached once strace has written a first line about this process.
                deadline = time.monotonic() + 10
                while os.path.getsize(out.name) == 0 and time.monotonic() < deadline:
                    os.sched_yield()
                    time.sleep(0.001)
                # Everything from here on is between two markers.
                os.getppid()
                result = call()
                os.getppid()
            finally:
                tracer.send_signal(signal.SIGINT)
                tracer.wait()
            names: collections.Counter[str] = collections.Counter()
            inside = False
            for line in out.read().splitlines():
                name = line.split(None, 1)[-1].split("(", 1)[0]
                if name == "getppid":
                    inside = not inside
                    continue
                if inside and name and name.isidentifier():
                    names[name] += 1
            counts[title] = names
            return result

    scenario(root, durability, traced)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="a directory to make the fresh roots in")
    parser.add_argument("--durability", choices=("full", "relaxed"), default="full")
    parser.add_argument("--no-strace", action="store_true", help="skip the syscall counts")
    parser.add_argument("--detail", action="store_true",
                        help="each module's calls and every call up the layers")
    args = parser.parse_args()
    closure = import_closure()
    with tempfile.TemporaryDirectory(dir=args.root) as scratch:
        # Warm up the imports a first acquire would otherwise make under the trace.
        scenario(Path(scratch) / "warm-up", args.durability, lambda _, call: call())
        traces: dict[str, Trace] = {}

        def traced(title: str, call: Callable[[], object]) -> object:
            trace = traces[title] = Trace(closure)
            return trace.run(call)

        scenario(Path(scratch) / "root", args.durability, traced)
        print(f"# One acquire's write path ({args.durability} durability, "
              f"Python {sys.version.split()[0]})\n")
        for title, trace in traces.items():
            trace.report(title, detail=args.detail)
        counts = None if args.no_strace else syscalls(Path(scratch) / "strace", args.durability)
        if counts is not None:
            print("## syscalls (strace -f, this process's threads)")
            for title, names in counts.items():
                print(f"- {title.split(' (')[0]}: {sum(names.values())}: " + ", ".join(
                    f"{n} {c}" for n, c in names.most_common()))


if __name__ == "__main__":
    main()
