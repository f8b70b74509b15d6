"""On a platform without flock, O_PATH or /proc, importing sessiontemp says so at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessiontemp import SessionTempError, Unsupported
from sessiontemp.platform import missing
from tests.nobody import as_root


def test_this_linux_machine_has_everything() -> None:
    assert missing(sys.platform, has_fcntl=True, has_o_path=True,
                   proc=Path("/proc/self/fd")) is None


@pytest.mark.parametrize(("platform", "fcntl", "o_path", "proc", "said"), [
    ("win32", False, False, "/proc/self/fd", "win32 is not Linux"),
    ("darwin", True, False, "/proc/self/fd", "darwin is not Linux"),
    ("linux", False, True, "/proc/self/fd", "no fcntl module"),
    ("linux", True, False, "/proc/self/fd", "os.O_PATH is missing"),
    ("linux", True, True, "/nonexistent/fd", "/nonexistent/fd is not there"),
])
def test_what_a_platform_lacks_is_named(
    platform: str, fcntl: bool, o_path: bool, proc: str, said: str,
) -> None:
    lack = missing(platform, has_fcntl=fcntl, has_o_path=o_path, proc=Path(proc))
    assert lack is not None
    assert said in lack


def test_unsupported_is_an_import_error_of_the_library_naming_the_fix() -> None:
    error = Unsupported("darwin is not Linux")
    assert isinstance(error, ImportError)
    assert isinstance(error, SessionTempError)
    assert "not supported on this platform (darwin is not Linux)" in str(error)
    assert "Run it on Linux" in str(error)


# A real interpreter where the platform falls short, as on Windows (no fcntl) or
# macOS (sys.platform "darwin"), arranged before anything of sessiontemp loads.
WITHOUT_FCNTL = "import sys; sys.modules['fcntl'] = None\n"
ON_MACOS = "import sys; sys.platform = 'darwin'\n"
# Where a whole program (pytest) must run: macOS's missing O_PATH alone.
WITHOUT_O_PATH = "import os; del os.O_PATH\n"


def python(prelude: str, code: str, *args: str, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize(("prelude", "said"), [(WITHOUT_FCNTL, "no fcntl module"),
                                                (ON_MACOS, "darwin is not Linux")])
def test_using_a_name_without_the_platform_raises_unsupported_not_module_not_found(
    prelude: str, said: str,
) -> None:
    result = python(prelude, "import sessiontemp\n"
                    "try:\n    from sessiontemp import Manager\nexcept ImportError as e:\n"
                    "    print(type(e).__name__, e)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Unsupported sessiontemp is not supported on this platform")
    assert said in result.stdout


def test_importing_the_package_alone_loads_none_of_its_names() -> None:
    result = python("", "import sys, sessiontemp\n"
                    "print(sorted(m for m in sys.modules if m.startswith('sessiontemp.')))")
    assert result.returncode == 0, result.stderr
    # The platform's check, and the core's errors it may raise (the core is
    # installed as sessiontemp.journal).
    assert result.stdout.strip() == (
        "['sessiontemp.journal', 'sessiontemp.journal.errors', 'sessiontemp.platform']")


@pytest.mark.parametrize("prelude", [WITHOUT_FCNTL, ON_MACOS])
@pytest.mark.parametrize(("entry", "script"), [
    ("from sessiontemp.scripts import journal_inspect as main; main()", "journal-inspect"),
    ("from sessiontemp.scripts import sessiontemp as main; main()", "sessiontemp"),
    ("import runpy; runpy.run_module('sessiontemp', run_name='__main__')", "sessiontemp"),
])
def test_a_console_script_on_a_platform_it_refuses_says_so_in_one_line(
    prelude: str, entry: str, script: str,
) -> None:
    result = python(prelude, entry, "--help")
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{script}: not supported on this platform (")
    assert "runs on Linux" in line


PLAIN_SUITE = "def test_plain():\n    assert 1 + 1 == 2\n"
FIXTURE_SUITE = "def test_wants_a_directory(sessiontemp_path):\n    assert sessiontemp_path\n"


@pytest.mark.parametrize("prelude", [WITHOUT_FCNTL, WITHOUT_O_PATH])
def test_the_pytest_plugin_stands_aside_on_a_platform_it_refuses(
    prelude: str, tmp_path: Path,
) -> None:
    (tmp_path / "test_plain.py").write_text(PLAIN_SUITE)
    result = python(prelude, "import sys, pytest\n"
                    "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'test_plain.py']))",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    warned = [line for line in result.stdout.splitlines() if "sessiontemp's fixtures" in line]
    assert len(warned) == 1


@pytest.mark.parametrize("prelude", [WITHOUT_FCNTL, WITHOUT_O_PATH])
def test_a_test_asking_for_a_fixture_on_a_platform_it_refuses_is_told_why(
    prelude: str, tmp_path: Path,
) -> None:
    (tmp_path / "test_fixture.py").write_text(FIXTURE_SUITE)
    result = python(prelude, "import sys, pytest\n"
                    "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'test_fixture.py']))",
                    cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Unsupported" in result.stdout
    assert "not supported on this platform" in result.stdout


# A privilege drop in a process that has imported only the package itself: its
# modules (a copy in a directory only root may enter, so that this holds on
# every machine) and, where the interpreter lives under /root, Python's own
# (fcntl among them) can no longer be read.
AFTER_A_DROP = """
import json, os, shutil, sys
hidden, real, core, first = sys.argv[1:5]
if first:
    __import__(first)
shutil.copytree(real, os.path.join(hidden, "sessiontemp"), symlinks=False,
                ignore=shutil.ignore_patterns("journal"))
shutil.copytree(core, os.path.join(hidden, "sessiontemp", "journal"))
sys.path.insert(0, hidden)
import sessiontemp
assert sessiontemp.__file__.startswith(hidden), sessiontemp.__file__
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    from sessiontemp import Manager
except BaseException as e:
    path = getattr(e, "path", None)
    print(json.dumps({"raised": [c.__name__ for c in type(e).__mro__], "message": str(e),
                      "path": path, "readable": path is not None and os.access(path, os.R_OK)}))
else:
    print(json.dumps({"raised": None}))
"""


@as_root
@pytest.mark.parametrize("first", ["", "fcntl"], ids=["nothing-imported", "fcntl-imported"])
def test_a_package_a_privilege_drop_made_unreadable_is_named_not_called_an_unsupported_platform(
    tmp_path: Path, first: str,
) -> None:
    import sessiontemp.journal

    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    real = Path(sessiontemp.__file__).parent
    core = Path(sessiontemp.journal.__file__).parent
    result = python("", AFTER_A_DROP, str(hidden), str(real), str(core), first, cwd=Path("/"))
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["raised"] is not None, got
    assert "PackageUnreadable" in got["raised"], got
    assert {"ImportError", "SessionTempError"} <= set(got["raised"]), got
    assert "Unsupported" not in got["raised"], got
    assert "not supported on this platform" not in got["message"]
    # The path named is one uid 65534 cannot read, the reason says so, and the fix.
    assert got["path"], got
    assert not got["readable"], got
    assert got["message"].startswith(got["path"])
    assert "(uid 65534" in got["message"]
    assert "so Python could not import" in got["message"]
    assert "before dropping privileges" in got["message"]
