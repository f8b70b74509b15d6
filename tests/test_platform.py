"""On a platform without flock, O_PATH or /proc, importing sessiontemp says so at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sessiontemp import SessionTempError, Unsupported
from sessiontemp.platform import missing


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
