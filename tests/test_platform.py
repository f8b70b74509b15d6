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


def test_importing_without_fcntl_raises_unsupported_not_module_not_found() -> None:
    # A real interpreter where fcntl cannot be imported, as on Windows.
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['fcntl'] = None\n"
         "try:\n    import sessiontemp\nexcept ImportError as e:\n"
         "    print(type(e).__name__, e)"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert result.stdout.startswith("Unsupported sessiontemp is not supported on this platform")
    assert "no fcntl module" in result.stdout
