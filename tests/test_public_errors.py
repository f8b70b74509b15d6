"""Every error a public call raises is a SessionTempError naming the path, the reason and the fix.

The walk calls every public function and method (``sessiontemp.__all__``,
the manager, the lease, the clean-up calls, ``sessiontemp.inspect``'s
functions) as documented, but with what a newcomer gets wrong: a path that
does not exist, an argument of the wrong type, a bad name or label, an
object already released or closed.  Whatever each raises must be one of
the library's errors, carrying the thing it names (``path``, ``what`` or
``command``), a ``reason`` and a ``fix``, all three in its message; bad
names and labels are ``BadInput``, a ValueError.  (Python's own refusal of
a call that does not fit the signature, an unknown keyword say, is no path
through the library and is not walked.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import sessiontemp
from sessiontemp import BadInput, Lease, Manager, SessionTempError
from sessiontemp import inspect as si
from sessiontemp.journal.errors import CommandNotStarted


def named(error: SessionTempError) -> str:
    """What *error* names: its path, the argument refused, or the command."""
    for attribute in ("path", "what", "command"):
        value = getattr(error, attribute, None)
        if value:
            return str(value)
    raise AssertionError(f"{type(error).__name__} names nothing: {error}")


def check(call: Callable[[], object]) -> SessionTempError | None:
    """Run *call*; what it raised, checked to be the library's error with its three parts."""
    try:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    except SessionTempError as e:
        error = e
    else:
        return None
    text = str(error)
    assert named(error) in text, text
    reason, fix = getattr(error, "reason", ""), getattr(error, "fix", "")
    assert reason, text
    assert reason in text, text
    assert fix, text
    assert fix in text, text
    return error


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Manager, Lease, Path]]:
    root = tmp_path / "root"
    with Manager(root) as manager:
        manager.retain()
        lease = manager.acquire(label="walk")
        yield manager, lease, root
        lease.release()


def walk(manager: Manager, lease: Lease, root: Path, missing: Path) -> dict[str, Callable[[], Any]]:
    """Each public call with something wrong in it, by what is wrong."""
    calls: dict[str, Callable[[], Any]] = {
        "Manager(3)": lambda: Manager(3),  # type: ignore[arg-type]
        "Manager('/etc/passwd')": lambda: Manager("/etc/passwd"),
        "Manager(session='../x')": lambda: Manager(root, session="../x"),
        "Manager(session=3)": lambda: Manager(root, session=3),  # type: ignore[arg-type]
        "Manager(workdir=3)": lambda: Manager(root, workdir=3),  # type: ignore[arg-type]
        "Manager(max_bytes=-1)": lambda: Manager(root, max_bytes=-1),
        "Manager(max_inodes='x')": lambda: Manager(root, max_inodes="x"),  # type: ignore[arg-type]
        "Manager(durability='x')": lambda: Manager(root, durability="x"),  # type: ignore[arg-type]
        "Manager(stale_after=-1)": lambda: Manager(root, stale_after=-1),
        "Manager(resume_window=nan)": lambda: Manager(root, resume_window=float("nan")),
        "Manager(measure_every=-1)": lambda: Manager(root, measure_every=-1),
        "Manager(workdir_policy='x')": lambda: Manager(root, workdir=root.parent,
                                                        workdir_policy="x"),  # type: ignore[arg-type]
        "Manager.open_async(3)": lambda: asyncio.run(Manager.open_async(3)),  # type: ignore[arg-type]
        "acquire(label=3)": lambda: manager.acquire(label=3),  # type: ignore[arg-type]
        "acquire(label=too long)": lambda: manager.acquire(label="x" * 5000),
        "lease.keep(missing)": lambda: lease.keep("out/report.html", "report"),
        "lease.keep(a directory)": lambda: lease.keep(".", "report"),
        "lease.keep(3)": lambda: lease.keep(3, "report"),  # type: ignore[arg-type]
        "lease.keep(None)": lambda: lease.keep(None, "report"),  # type: ignore[arg-type]
        "lease.keep(outside)": lambda: lease.keep("/etc/passwd", "report"),
        "lease.keep(label '../x')": lambda: lease.keep("f", "../x"),
        "lease.keep(label 3)": lambda: lease.keep("f", 3),  # type: ignore[arg-type]
        "lease.keep_async(missing)": lambda: asyncio.run(lease.keep_async("nope", "report")),
        "lease.popen(missing command)": lambda: lease.popen(["/nonexistent/command"]),
        "lease.popen(missing cwd)": lambda: lease.popen(["true"], cwd=missing),
        "lease.create_subprocess_exec(missing)": lambda: asyncio.run(
            lease.create_subprocess_exec("/nonexistent/command")),
        "recover(missing)": lambda: sessiontemp.recover(missing),
        "recover(3)": lambda: sessiontemp.recover(3),  # type: ignore[arg-type]
        "recover('')": lambda: sessiontemp.recover(""),
        "recover(a file)": lambda: sessiontemp.recover("/etc/passwd"),
        "recover(stale_after=-1)": lambda: sessiontemp.recover(root, stale_after=-1),
        "recover_async(3)": lambda: asyncio.run(sessiontemp.recover_async(3)),  # type: ignore[arg-type]
        "remove_session(name '../x')": lambda: sessiontemp.remove_session(root, "../x"),
        "remove_session(name 3)": lambda: sessiontemp.remove_session(root, 3),  # type: ignore[arg-type]
        "remove_session(missing root)": lambda: sessiontemp.remove_session(missing, "chat"),
        "remove_session_async(name '../x')": lambda: asyncio.run(
            sessiontemp.remove_session_async(root, "../x")),
        "remove_artifact(id 'zz')": lambda: sessiontemp.remove_artifact(root, "zz"),
        "remove_artifact(id 3)": lambda: sessiontemp.remove_artifact(root, 3),  # type: ignore[arg-type]
        "remove_artifact(missing root)": lambda: sessiontemp.remove_artifact(
            missing, "0123456789abcdef"),
        "remove_artifact_async(id 'zz')": lambda: asyncio.run(
            sessiontemp.remove_artifact_async(root, "zz")),
    }
    journal = root / "journal.sqlite3"
    wrong: tuple[Any, ...] = (missing, 3, "", "/etc/passwd", root)
    for bad in wrong:
        shown = repr(bad) if not isinstance(bad, Path) else (
            "missing" if bad == missing else "a root directory")
        calls |= {
            f"inspect.summary({shown})": partial(si.summary, bad),
            f"inspect.events({shown})": partial(si.events, bad),
            f"inspect.explain({shown}, ...)": partial(si.explain, bad, "x" * 16),
            f"inspect.state_at({shown})": partial(si.state_at, bad),
            f"inspect.timeline({shown})": partial(si.timeline, bad, missing.parent / "t.svg"),
            f"inspect.verify({shown})": partial(si.verify, bad),
            f"inspect.usage({shown}, root)": partial(si.usage, bad, root),
            f"inspect.usage(journal, {shown})": partial(si.usage, journal, bad),
            f"inspect.fsck({shown})": partial(si.fsck, bad),
            f"inspect.locate(root={shown})": partial(si.locate, root=bad),
            f"inspect.summary(journal, root={shown})": partial(si.summary, journal, bad),
        }
    calls |= {
        "inspect.explain(journal, 3)": lambda: si.explain(journal, 3),  # type: ignore[arg-type]
        "inspect.explain(journal, '/etc')": lambda: si.explain(journal, "/etc"),
        "inspect.explain(journal, root/sessiontemp-gen-x)": lambda: si.explain(
            journal, str(root / "sessiontemp-gen-x")),
        "inspect.state_at(journal, at=10**6)": lambda: si.state_at(journal, 10**6),
        "inspect.check_kind('lease.acquire')": lambda: si.check_kind("lease.acquire"),
        "inspect.check_kind(3)": lambda: si.check_kind(3),  # type: ignore[arg-type]
        "inspect.generation_of('/etc')": lambda: si.generation_of("/etc"),
        "inspect.generation_of(3)": lambda: si.generation_of(3),  # type: ignore[arg-type]
        "inspect.parse_moment('soon')": lambda: si.parse_moment("soon"),
        "inspect.parse_moment(3)": lambda: si.parse_moment(3),  # type: ignore[arg-type]
        "inspect.as_json('text')": lambda: si.as_json("text"),
        "inspect.state_json('text')": lambda: si.state_json("text"),  # type: ignore[arg-type]
        "inspect.timeline(journal, manager='x')": lambda: si.timeline(
            journal, missing.parent / "t.svg", manager="x"),
    }
    return calls


def test_every_public_call_given_something_wrong_raises_the_librarys_error_with_its_fix(
    held: tuple[Manager, Lease, Path], tmp_path: Path,
) -> None:
    manager, lease, root = held
    (lease.path / "f").write_text("kept\n")
    escaped: dict[str, str] = {}
    refused: list[str] = []
    for what, call in walk(manager, lease, root, tmp_path / "missing").items():
        try:
            if check(call) is not None:
                refused.append(what)
        except BaseException as e:  # every escape is what the test reports
            escaped[what] = f"{type(e).__name__}: {e}"
    assert escaped == {}
    # The walk is not vacuous: most of these are refused (a few, such as an
    # explain of an id the journal never names, answer without raising).
    assert len(refused) > 80


def test_bad_names_labels_and_ids_are_bad_input_a_value_error(
    held: tuple[Manager, Lease, Path],
) -> None:
    manager, lease, root = held
    (lease.path / "f").write_text("kept\n")
    for call in (lambda: Manager(root, session="../x"), lambda: lease.keep("f", "../x"),
                 lambda: manager.acquire(label=3),  # type: ignore[arg-type]
                 lambda: sessiontemp.remove_session(root, "a/b"),
                 lambda: sessiontemp.remove_artifact(root, "zz")):
        with pytest.raises(BadInput) as raised:
            call()
        assert isinstance(raised.value, ValueError)


def test_keep_of_a_missing_file_names_its_whole_path_and_the_fix(
    held: tuple[Manager, Lease, Path],
) -> None:
    _, lease, _ = held
    with pytest.raises(BadInput) as raised:
        lease.keep("out/report.html", "report.html")
    assert str(raised.value) == (
        f"{lease.path}/out/report.html: does not exist. Check the path: keep copies a file "
        "that is in the lease's directory now, named relative to lease.path or absolute "
        "under it")


def test_a_command_that_cannot_be_found_is_command_not_started_from_popen_as_from_run(
    held: tuple[Manager, Lease, Path],
) -> None:
    _, lease, _ = held
    with pytest.raises(CommandNotStarted) as raised:
        lease.popen(["no-such-command-here"])
    assert str(raised.value) == ("no-such-command-here: command not found. Check its name and "
                                 "PATH, or give its path")
    assert isinstance(raised.value, OSError)


def test_calls_on_a_closed_manager_and_a_released_lease_raise_the_librarys_error(
    tmp_path: Path,
) -> None:
    manager = Manager(tmp_path / "root")
    manager.retain()
    lease = manager.acquire(label="walk")
    (lease.path / "f").write_text("kept\n")
    manager.close()
    for call in (manager.acquire, lambda: lease.keep("f", "f"), lease.env,
                 lambda: lease.pass_fds, lambda: lease.popen(["true"]),
                 lambda: asyncio.run(manager.acquire_async()),
                 lambda: asyncio.run(lease.create_subprocess_exec("true"))):
        assert check(call) is not None
