"""The measuring child imports only the library's own code, wherever its manager runs.

A manager with a budget measures its directory in a child process.  Its
working directory may be a shared ``/tmp`` and its environment anybody's:
modules planted under every name the child imports, in the working
directory and on PYTHONPATH, are never imported (each would leave a
marker), and the measurement still works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from sessiontemp.journal.events import GenerationMeasured
from sessiontemp.space.usage import child_command
from tests.commands import journaled, wait_until

MIB = 1 << 20

# A manager with a budget, measuring every 50 ms while it holds a lease on a
# directory holding 1 MiB; it waits for its stdin to close, then closes.
MANAGER = """
import sys
from sessiontemp import Manager

with Manager(sys.argv[1], max_bytes=1 << 40, measure_every=0.05) as manager:
    manager.retain()
    with manager.acquire() as lease:
        (lease.path / "big.bin").write_bytes(b"x" * (1 << 20))
        print("ready", flush=True)
        sys.stdin.read()
    manager.release()
"""


def imported_by_the_child(tmp_path: Path) -> list[str]:
    """Every module the measuring child imports, as ``-X importtime`` lists them."""
    measured = tmp_path / "measured"
    (measured / "sub").mkdir(parents=True)
    (measured / "sub" / "file").write_text("x")
    fd = os.open(measured, os.O_RDONLY | os.O_DIRECTORY)
    try:
        command, env, cwd = child_command(fd, measured)
        child = subprocess.run([command[0], "-X", "importtime", *command[1:]], pass_fds=(fd,),
                               env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
                               check=True)
    finally:
        os.close(fd)
    assert json.loads(child.stdout)["inodes"] == 3
    names = [line.rsplit("|", 1)[1].strip() for line in child.stderr.splitlines()
             if line.startswith("import time:") and "|" in line]
    return sorted(set(names) - {"package"})  # "package": the header line's


def plant(names: Iterable[str], where: Path, markers: Path) -> None:
    """A module or package under each of *names* in *where* that, if imported, says so."""
    names = set(names)
    for name in names:
        parts = name.split(".")
        package = any(other.startswith(name + ".") for other in names)
        base = where.joinpath(*parts)
        file = base / "__init__.py" if package else base.with_name(parts[-1] + ".py")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(f"open({os.fspath(markers / name)!r}, 'w').close()\n")
        # Every package on the way is planted too (its own name among them).
        for i in range(1, len(parts)):
            init = where.joinpath(*parts[:i], "__init__.py")
            if not init.exists():
                init.write_text(
                    f"open({os.fspath(markers / '.'.join(parts[:i]))!r}, 'w').close()\n")


def test_modules_planted_in_the_working_directory_and_on_pythonpath_under_every_name_the_measuring_child_imports_are_never_imported(  # noqa: E501
    tmp_path: Path,
) -> None:
    names = imported_by_the_child(tmp_path)
    # The child's own imports are there to be planted: the walk, the JSON, attrs.
    assert {"json", "sessiontemp.space.usage", "sessiontemp._kernel.walk", "attrs",
            "os"} <= set(names)
    markers, shared, path = tmp_path / "markers", tmp_path / "shared", tmp_path / "pythonpath"
    for made in (markers, shared, path):
        made.mkdir()
    plant(names, shared, markers)
    plant(names, path, markers)
    root = tmp_path / "root"
    # The manager itself runs isolated (it would import the planted modules
    # from PYTHONPATH otherwise); the working directory and PYTHONPATH are
    # what its children inherit.
    manager = subprocess.Popen(
        [sys.executable, "-I", "-c", MANAGER, os.fspath(root)], cwd=shared,
        env={**os.environ, "PYTHONPATH": os.fspath(path)}, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    try:
        assert manager.stdout is not None
        assert manager.stdin is not None
        assert manager.stdout.readline() == "ready\n"

        def measured() -> bool:
            return any(m.bytes >= MIB for m in journaled(root, GenerationMeasured))

        wait_until(measured, "the background measurement of 1 MiB")
        manager.stdin.close()
        assert manager.wait(timeout=60) == 0
    finally:
        manager.kill()
        manager.wait()
    assert sorted(p.name for p in markers.iterdir()) == []
