"""The session holder and its client, driven through ``sessiontemp`` processes as a harness does."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sessiontemp._kernel import where
from tests.holding import (
    INSPECT,
    Served,
    alive,
    leftovers,
    served,
    served_root,
    st,
    wait_gone,
)
from tests.nobody import NOBODY, as_root, nobodys_place

__all__ = ["nobodys_place", "served_root"]  # fixtures


def test_a_session_runs_commands_in_one_directory_rotates_lists_and_ends(
        served_root: Served) -> None:
    place = served_root
    owner = place.owner()
    started = place.start("chat-1", owner)
    assert started["session"] == "chat-1"
    assert started["root"] == os.fspath(place.root)
    assert started["resumed"] is False
    assert alive(started["holder_pid"])

    first = place.run("chat-1", 'echo "$TMPDIR $TMP $TEMP"; echo draft > "$TMPDIR/notes"')
    assert first.returncode == 0, first.stderr
    directory, tmp, temp = first.stdout.split()
    assert directory == tmp == temp
    # The generation's work directory, one level below the generation.
    assert Path(directory).parent.parent == place.root
    second = place.run("chat-1", 'echo "$TMPDIR"; cat "$TMPDIR/notes"; exit 3')
    assert second.returncode == 3
    assert second.stdout.split() == [directory, "draft"]

    listed = place.sessions()
    assert listed["holder_pid"] == started["holder_pid"]
    (session,) = listed["sessions"]
    assert session["session"] == "chat-1"
    assert session["owners"] == [{"pid": owner.pid}]
    assert session["holder_pid"] == started["holder_pid"]
    assert session["directory"] == directory
    assert session["leases"] == 0
    assert session["resumable"] is False

    assert st("session", "rotate", "chat-1", root=place.root).returncode == 0
    after = place.run("chat-1", 'echo "$TMPDIR"; ls "$TMPDIR"')
    assert after.stdout.split() == [after.stdout.split()[0]]
    assert after.stdout.strip() != directory
    # Retired with no command holding it: removed.
    assert not os.path.exists(directory)

    ended = st("session", "end", "chat-1", "--owner-pid", str(owner.pid), "--json",
               root=place.root)
    assert ended.returncode == 0, ended.stderr
    assert json.loads(ended.stdout)["sealed"] is True
    # Its last session sealed and no lease left: the holder ends, and nothing is left.
    wait_gone(started["holder_pid"])
    assert leftovers(place.root) == []
    assert not (place.root / "holder.sock").exists()
    refused = place.run("chat-1", "true")
    assert refused.returncode == 2
    assert "no live session 'chat-1'" in refused.stderr


def test_a_session_command_inherits_every_lock_of_its_lease_its_generations_and_its_work_directorys(
        served_root: Served) -> None:
    served_root.start("locks")
    done = served_root.run("locks",
                           'echo "$TMPDIR"; for fd in /proc/$$/fd/*; do readlink "$fd"; done')
    assert done.returncode == 0, done.stderr
    directory, *opened = done.stdout.splitlines()
    # lease.pass_fds: the generation's lock and the work directory's, both held by the command.
    assert directory in opened
    assert os.fspath(Path(directory).parent) in opened

def test_a_second_owner_keeps_the_session_until_both_have_ended(served_root: Served) -> None:
    place = served_root
    first, second = place.owner(), place.owner()
    place.start("shared", first)
    again = place.start("shared", second)
    assert again["resumed"] is False
    directory = place.run("shared", 'echo "$TMPDIR"').stdout.strip()
    assert st("session", "end", "shared", "--owner-pid", str(first.pid),
              root=place.root).returncode == 0
    still = place.run("shared", 'echo "$TMPDIR"')
    assert still.returncode == 0
    assert still.stdout.strip() == directory
    (session,) = place.sessions()["sessions"]
    assert session["owners"] == [{"pid": second.pid}]
    assert st("session", "end", "shared", "--owner-pid", str(second.pid),
              root=place.root).returncode == 0
    assert place.run("shared", "true").returncode == 2
    assert not os.path.exists(directory)


def test_an_owner_killed_without_end_leaves_the_session_resumable_files_kept(
        served_root: Served) -> None:
    place = served_root
    owner = place.owner()
    place.start("chat", owner)
    directory = place.run("chat", 'echo "$TMPDIR"; echo kept > "$TMPDIR/notes"').stdout.strip()
    owner.kill()
    owner.wait()
    # The holder learns it from the owner's pidfd; the list is answered after that event.
    (session,) = place.sessions()["sessions"]
    assert session["owners"] == []
    assert session["resumable"] is True
    resumed = place.start("chat")
    assert resumed["resumed"] is True
    assert place.run("chat", 'cat "$TMPDIR/notes"; echo "$TMPDIR"').stdout.split() == [
        "kept", directory]


def test_an_owner_killed_without_end_is_released_once_its_resume_window_has_passed(
        served_root: Served) -> None:
    place = served_root
    owner = place.owner()
    started = place.start("brief", owner, "--resume-window", "0.2")
    directory = place.run("brief", 'echo "$TMPDIR"').stdout.strip()
    assert os.path.isdir(directory)
    owner.kill()
    owner.wait()
    # Released when the window ends: sealed, removed, and the holder, with nothing left, ends.
    wait_gone(started["holder_pid"])
    assert not os.path.exists(directory)
    assert leftovers(place.root) == []


def test_a_command_outliving_the_holders_sigkill_keeps_its_directory_and_start_resumes_it(
        served_root: Served) -> None:
    place = served_root
    place.start("chat")
    command = subprocess.Popen(
        [os.fspath(Path(sys.executable).parent / "sessiontemp"), "run", "--session", "chat",
         "--", "sh", "-c", 'echo "$TMPDIR"; echo x > "$TMPDIR/work"; echo ready; sleep 3600'],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "SESSIONTEMP_ROOT": os.fspath(place.root)})
    try:
        assert command.stdout is not None
        directory = command.stdout.readline().strip()
        assert command.stdout.readline().strip() == "ready"
        place.kill_holder()
        # The dead holder's socket is refused, never trusted: no live session.
        refused = place.run("chat", "true")
        assert refused.returncode == 2
        assert "no live session 'chat'" in refused.stderr
        # recover treats the dead holder as any dead manager: the held directory stays.
        recovered = st("recover", "--json", root=place.root)
        assert recovered.returncode == 0, recovered.stderr
        assert json.loads(recovered.stdout)["removed"] == []
        assert (Path(directory) / "work").read_text() == "x\n"
        resumed = place.start("chat")
        assert resumed["resumed"] is True
        assert place.run("chat", 'echo "$TMPDIR"; cat "$TMPDIR/work"').stdout.split() == [
            directory, "x"]
    finally:
        # The client, the shell and its sleep: the whole group.
        os.killpg(command.pid, signal.SIGKILL)
        command.wait()


def test_a_root_too_long_for_a_socket_path_is_served(tmp_path: Path) -> None:
    root = tmp_path / ("r" * 60) / ("o" * 60) / "root"
    assert len(os.fspath(root / "holder.sock")) > 107
    with served(root) as place:
        place.start("long")
        done = place.run("long", 'echo "$TMPDIR"')
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).parent.parent == root


def test_shell_runs_the_string_through_shell_in_the_environments_session(
        served_root: Served) -> None:
    place = served_root
    place.start("agent-1")
    text = "printf '%s\\n' \"$TMPDIR\" | wc -l && echo 'héllo \"quoted\"' && exit 4"
    for variable in ("SESSIONTEMP_SESSION", "CLAUDE_CODE_SESSION_ID"):
        env = {**os.environ, "SESSIONTEMP_ROOT": os.fspath(place.root), variable: "agent-1",
               "SHELL": "/bin/bash"}
        env.pop("SESSIONTEMP_SESSION" if variable != "SESSIONTEMP_SESSION" else "", None)
        done = st("shell", text, env=env)
        assert done.returncode == 4, done.stderr
        assert done.stdout.splitlines() == ["1", 'héllo "quoted"']


def test_shell_without_a_session_says_so_and_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SESSIONTEMP_SESSION", "CLAUDE_CODE_SESSION_ID")}
    done = st("shell", f"touch {tmp_path / 'ran'}", env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("sessiontemp shell: no session: set SESSIONTEMP_SESSION")
    assert not (tmp_path / "ran").exists()


def test_run_and_recover_take_their_root_from_sessiontemp_root(tmp_path: Path) -> None:
    root = tmp_path / "from-env"
    done = st("run", "--", "sh", "-c", 'echo "$TMPDIR"', root=root)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent.parent == root
    recovered = st("recover", "--json", root=root)
    assert json.loads(recovered.stdout)["root"] == os.fspath(root)


def test_the_default_root_is_tempfiles_directory_found_without_tempfile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unwritable = tmp_path / "ro"
    unwritable.mkdir(mode=0o500)
    for tmpdir in (os.fspath(tmp_path), "relative-dir", os.fspath(tmp_path / "missing"),
                   os.fspath(unwritable)):
        monkeypatch.setenv("TMPDIR", tmpdir)
        monkeypatch.setattr(tempfile, "tempdir", None)
        assert where.default_root() == Path(tempfile.gettempdir()) / f"sessiontemp-{os.getuid()}"


CHECK_IMPORTS = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.__stderr__))
sys.argv = ["sessiontemp", *json.loads(sys.argv[1])]
from sessiontemp.scripts import sessiontemp
sessiontemp()
"""
HEAVY = ("attr", "attrs", "sqlite3", "_sqlite3", "sqlite_utils", "structlog", "typing",
         "sessiontemp.journal.store", "sessiontemp.journal.events", "sessiontemp.journal.reducer",
         "sessiontemp.manager", "sessiontemp._kernel.root")


@pytest.mark.parametrize("words", [["run", "--session", "s", "--", "true"], ["shell", "true"]],
                         ids=["run --session", "shell"])
def test_the_session_client_imports_neither_attrs_nor_sqlite3_nor_the_journals_store(
        served_root: Served, words: list[str]) -> None:
    served_root.start("s")
    done = subprocess.run([sys.executable, "-c", CHECK_IMPORTS, json.dumps(words)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SESSIONTEMP_ROOT": os.fspath(served_root.root),
                               "SESSIONTEMP_SESSION": "s"})
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stderr.splitlines()[-1]))
    assert "sessiontemp.holder.client" in modules
    assert sorted(modules & set(HEAVY)) == []


# -- another user ---------------------------------------------------------------------------


def _as_nobody(action: str, path: str) -> int:
    """Fork a child that drops to nobody and connects to (or serves) *path*; its exit code."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os and socket calls, then _exit
        code = 3
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            if action == "connect":
                try:
                    sock.connect(path)
                    code = 1
                except PermissionError:
                    code = 0
            else:
                sock.bind(path)
                sock.listen(8)
                os.write(write, b"r")
                while True:
                    conn, _ = sock.accept()
                    conn.send(b'{"ok": true, "path": "/tmp"}')
        finally:
            os._exit(code)
    os.close(write)
    if action == "serve":
        assert os.read(read, 1) == b"r"
        os.close(read)
        return pid
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@as_root
def test_another_user_cannot_connect_to_the_holder(served_root: Served) -> None:
    served_root.start("private")
    assert _as_nobody("connect", os.fspath(served_root.root / "holder.sock")) == 0


@as_root
def test_a_socket_another_user_planted_is_not_trusted(tmp_path: Path, nobodys_place: Path) -> None:
    root = tmp_path / "root"
    assert st("run", "--", "true", root=root).returncode == 0  # makes the root
    planted = nobodys_place / "holder.sock"
    server = _as_nobody("serve", os.fspath(planted))
    marker = tmp_path / "ran"
    try:
        os.rename(planted, root / "holder.sock")
        done = st("run", "--session", "s", "--", "touch", os.fspath(marker), root=root)
        assert done.returncode == 2
        assert "is not a private socket of this user" in done.stderr
        assert "not trusted" in done.stderr
        # Even made to look like ours, its listener is of another uid.
        os.chown(root / "holder.sock", 0, 0)
        os.chmod(root / "holder.sock", 0o600)
        done = st("run", "--session", "s", "--", "touch", os.fspath(marker), root=root)
        assert done.returncode == 2
        assert f"of uid {NOBODY}, not of this user" in done.stderr
        assert not marker.exists()
    finally:
        os.kill(server, signal.SIGKILL)
        os.waitpid(server, 0)


def test_a_served_root_verifies_and_fsck_finds_the_holders_entries_its_own(
        served_root: Served) -> None:
    served_root.start("v")
    assert served_root.run("v", "true").returncode == 0
    for check in ("verify", "fsck"):
        done = subprocess.run([os.fspath(INSPECT), "--root", os.fspath(served_root.root), check],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_relative_root_names_the_same_directory_for_the_holder_and_its_clients(
        tmp_path: Path) -> None:
    with served(tmp_path / "rel") as place:
        owner = place.owner()
        env = {**os.environ, "SESSIONTEMP_ROOT": "rel"}
        done = st("session", "start", "r", "--owner-pid", str(owner.pid), "--json", env=env,
                  cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        place.holders.add(reply["holder_pid"])
        assert reply["root"] == os.fspath(tmp_path / "rel")
        ran = st("run", "--session", "r", "--", "sh", "-c", 'echo "$TMPDIR"', env=env,
                 cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert Path(ran.stdout.strip()).parent.parent == tmp_path / "rel"


@as_root
def test_the_holder_refuses_a_peer_of_another_uid_with_the_reason(nobodys_place: Path) -> None:
    from sessiontemp.holder.serve import Holder

    root = nobodys_place / "root"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a holder of nobody's, serving until its idle time ends
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.mkdir(root, 0o700)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            listener.bind(os.fspath(root / "holder.sock"))
            listener.listen(8)
            os.write(write, b"r")
            Holder(root, listener, idle=30.0).serve()
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"r"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(os.fspath(root / "holder.sock"))  # root passes the 0700 directory
        sock.send(b'{"op": "list"}')
        reply = json.loads(sock.recv(65536))
        sock.close()
        assert reply["ok"] is False
        assert reply["kind"] == "refused"
        assert reply["reason"].endswith(f"is of uid 0, not of this holder's user (uid {NOBODY})")
    finally:
        os.close(read)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_session_name_cannot_take_the_holder_outside_the_root(served_root: Served) -> None:
    place = served_root
    place.start("inside")
    for name in ("../outside", "a/b", "..", ""):
        started = st("session", "start", name, "--owner-pid", str(os.getpid()), root=place.root)
        assert started.returncode == 2, started.stderr
        ran = place.run(name, "true")
        assert ran.returncode == 2, ran.stderr
    assert sorted(os.listdir(place.root / "sessions")) == ["inside.lock"]
    assert not (place.root.parent / "outside").exists()


def test_a_session_budget_fails_the_command_that_overran_it_and_refuses_the_next_until_a_rotate(
        served_root: Served) -> None:
    place = served_root
    place.start("tight", None, "--max-bytes", "64K")
    over = place.run("tight", 'head -c 1000000 /dev/zero > "$TMPDIR/big"')
    assert over.returncode == 75
    line = over.stderr.strip()
    assert "is over its budget" in line
    assert "big (" in line
    assert "`sessiontemp session rotate tight`" in line
    refused = place.run("tight", "echo ran")
    assert refused.returncode == 75
    assert refused.stdout == ""
    assert "(the command was not started)" in refused.stderr
    assert st("session", "rotate", "tight", root=place.root).returncode == 0
    fresh = place.run("tight", 'ls "$TMPDIR"')
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout == ""
