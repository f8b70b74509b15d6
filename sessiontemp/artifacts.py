"""Durable artifacts: files copied out of a temporary directory to outlive it.

``lease.keep(path, label)`` copies one file from the lease's directory into
``ROOT/artifacts/<id>-<label>``: a new file (mode 0600, a name never used
before), written, fsynced, its directory fsynced, and only then journaled
with its SHA-256 digest and size (``artifact.kept``).  A record therefore
always names a complete file.  An artifact outlives every rotation,
release, close and crash of the session that kept it, and goes only by an
explicit, journaled removal (:func:`sessiontemp.remove_artifact`).

A file of the store that no record names (a crash between the copy and its
record, a removal cut short, a journal moved aside) is the user's data all
the same: no recovery pass removes it.  ``journal-inspect fsck`` reports it
(``unreferenced``), and :func:`sessiontemp.remove_artifact` given its id removes it,
once the journal confirms it keeps no artifact of that id.

Every file of the store is made with the sticky bit (mode 1600): an
age-based cleaner configured on the root (systemd-tmpfiles) never takes it.

The source is reached through descriptors from the lease's own directory,
with ``O_NOFOLLOW`` at every component, and must be a regular file with one
link: a symlink, a FIFO, a device or a hard link to some other file is
refused, so a command cannot make the library copy (and keep) a file
outside its directory.  At most :data:`MAX_BYTES` are kept.

While a copy is being made, its file is locked (``flock``): recovery never
removes a file under a keeper that is still writing or recording it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Final

import attrs

from sessiontemp._guards.steps import Steps
from sessiontemp._kernel import resources
from sessiontemp._kernel.locks import busy, try_exclusive
from sessiontemp._kernel.root import ARTIFACTS_DIR, DIR_FLAGS, FILE_MODE, Root, os_error, path_of
from sessiontemp.journal import ids
from sessiontemp.journal.errors import BadInput, SessionTempError
from sessiontemp.journal.events import ArtifactKept
from sessiontemp.journal.reducer import ArtifactState
from sessiontemp.writepath import WritePath

if TYPE_CHECKING:
    from sessiontemp._guards.log import BoundLogger

__all__ = [
    "ARTIFACTS_DIR",
    "MAX_BYTES",
    "Artifact",
    "Copy",
    "artifact_of",
    "check_label",
    "copy_in",
    "file_name",
    "files_of",
    "id_of",
    "remove_file",
    "remove_unreferenced",
    "unreferenced",
]

# The largest file kept (16 MiB): an artifact is a result worth keeping (a
# report, a log, a patch), not a build tree; the store never fills a disk.
MAX_BYTES: Final = 16 * 1024 * 1024

# The reasons a recovery pass reports for an artifact removed by remove_artifact:
# a kept one, and a file of the store no record keeps.
ON_REQUEST: Final = "removed on request (remove_artifact)"
UNRECORDED: Final = ON_REQUEST + ": no record kept it"

_CHUNK: Final = 1 << 20
# How a source file is opened: never through a symlink, never blocking on
# a FIFO that slipped in after the check, never leaked to a child.
_SOURCE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@attrs.frozen
class Artifact:
    """A kept artifact: where it is, what it holds, and who kept it.

    ``path`` is the file in the root's artifact store; ``sha256`` (hex) and
    ``size`` are those of the bytes copied, as journaled; ``seq`` is the
    journal record that made it durable.
    """

    id: str
    label: str
    path: Path
    sha256: str
    size: int
    manager: str
    session: str | None
    seq: int


def artifact_of(root: Path, state: ArtifactState) -> Artifact:
    """The :class:`Artifact` the reducer's *state* of one describes, under *root*."""
    return Artifact(
        id=state.id, label=state.label,
        path=root / ARTIFACTS_DIR / file_name(state.id, state.label),
        sha256=state.sha256, size=state.size, manager=state.manager, session=state.session,
        seq=state.kept_seq,
    )


def check_label(label: object) -> str:
    """Return *label* if it may name an artifact; BadInput naming the rule otherwise."""
    if not isinstance(label, str) or not ids.ARTIFACT_LABEL.fullmatch(label):
        raise BadInput(
            f"artifact label {label!r}", "is not valid: a label is 1 to 80 characters of "
            "A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or a digit",
            "Choose another"
        )
    return label


def file_name(artifact: str, label: str) -> str:
    """An artifact's file name in ``ROOT/artifacts``: unique by its id, readable by its label."""
    return f"{artifact}-{label}"


def id_of(name: str) -> str | None:
    """The artifact id in an artifact's file name; None for any other name."""
    artifact, dash, label = name.partition("-")
    if dash and ids.ARTIFACT.fullmatch(artifact) and ids.ARTIFACT_LABEL.fullmatch(label):
        return artifact
    return None


def source_parts(directory: Path, path: os.PathLike[str] | str) -> tuple[str, ...]:
    """The components of *path* below *directory*, refused if it may lead elsewhere.

    *path* is relative to *directory* or absolute under it; nothing is
    resolved here (the walk is done through descriptors), so ``..`` and
    ``.`` components are refused outright.
    """
    if not isinstance(path, str | os.PathLike):
        raise BadInput(repr(path), f"is of type {type(path).__name__}, not a path",
                       "Pass the file's path inside the lease's directory, as a str or Path")
    given = PurePosixPath(os.fspath(path))
    if given.is_absolute():
        try:
            given = given.relative_to(PurePosixPath(directory))
        except ValueError:
            raise BadInput(path, f"is not inside the lease's directory {directory}",
                           "Keep a file from the directory the lease hands out") from None
    parts = given.parts
    if not parts or any(part in (".", "..") for part in parts):
        raise BadInput(path, "does not name a file below the lease's directory (no '..')",
                       "Pass the file's path inside the lease's directory")
    return parts


class Copy:
    """A copy written and fsynced into the store, still locked, waiting for its record.

    Call :meth:`done` once the record is committed, or :meth:`discard`
    when it could not be: the file is then unlinked.
    """

    def __init__(self, store_fd: int, fd: int, name: str, sha256: str, size: int) -> None:
        self._store = store_fd
        self._fd = fd
        self.name = name
        self.sha256 = sha256
        self.size = size

    def done(self) -> None:
        """Let the file go: it is recorded, and from now on a durable artifact."""
        self._close()

    def discard(self) -> None:
        """Unlink the file and let go (its record was never committed)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name, dir_fd=self._store)
        self._close()

    def _close(self) -> None:
        # The lock goes with the file's descriptor, after the record or the unlink.
        for attribute in ("_fd", "_store"):
            fd = getattr(self, attribute)
            if fd >= 0:
                setattr(self, attribute, -1)
                os.close(fd)


def copy_in(
    root: Root,
    source_dir_fd: int,
    parts: tuple[str, ...],
    artifact: str,
    label: str,
    *,
    steps: Steps,
    max_bytes: int = MAX_BYTES,
) -> Copy:
    """Copy the file at *parts* below *source_dir_fd* into the store as artifact *artifact*.

    Returns the :class:`Copy`, fsynced with its directory and still locked;
    the caller journals it and then calls :meth:`Copy.done`.  Raises
    :class:`BadInput` for a source that is not a regular file with one link
    or is larger than *max_bytes*, or that does not exist or cannot be read;
    the library's error for the operating system's when writing the copy
    fails (a full disk: nothing is left in the store then).
    """
    check_label(label)
    shown = "/".join(parts)
    try:
        source = _open_source(source_dir_fd, parts, shown, max_bytes)
    except OSError as e:
        if isinstance(e, SessionTempError) or resources.shortage(e):
            raise
        raise _unreadable(path_of(source_dir_fd, shown), e) from None
    try:
        try:
            return _copy_into_store(root, source, artifact, label, shown, steps, max_bytes)
        except OSError as e:
            if isinstance(e, SessionTempError) or resources.shortage(e):
                raise
            # A full disk, a quota, an I/O error: the store's file names the place.
            raise os_error(root.path / ARTIFACTS_DIR / file_name(artifact, label), e,
                           "written") from None
    finally:
        os.close(source)


def _unreadable(path: Path, error: OSError) -> SessionTempError:
    """The error for a source file that cannot be opened or read, naming its whole path."""
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return BadInput(path, "does not exist", "Check the path: keep copies a file that is "
                        "in the lease's directory now, named relative to lease.path or "
                        "absolute under it")
    if error.errno in (errno.EACCES, errno.EPERM):
        return BadInput(path, f"cannot be read ({error.strerror})",
                        "Make it readable (chmod u+r), then keep it")
    return os_error(path, error, "read")


def _copy_into_store(root: Root, source: int, artifact: str, label: str, shown: str,
                     steps: Steps, max_bytes: int) -> Copy:
    """Copy the open *source* into the store as a new file, fsynced and locked."""
    store = root.open_private(ARTIFACTS_DIR)
    name = file_name(artifact, label)
    try:
        steps.before("copy", name)
        fd = os.open(name, _NEW_FLAGS, FILE_MODE, dir_fd=store)
    except BaseException:
        os.close(store)
        raise
    copy = Copy(store, fd, name, "", 0)
    try:
        # Locked before a byte is written: a recovery that finds the file
        # unreferenced leaves it while this keeper may still record it.
        # A name never used before (O_EXCL): nobody else can hold it.
        if not try_exclusive(fd):
            raise busy(root.path / ARTIFACTS_DIR / name)
        # O_CREAT's mode passes through the umask: make it exactly 1600
        # (private, and sticky: no age cleaner ever takes an artifact).
        os.fchmod(fd, FILE_MODE)
        copy.sha256, copy.size = _copy(source, fd, shown, max_bytes)
        # The file's bytes, then its name in the directory: after a
        # power loss, a record never names a file that is not all there.
        os.fsync(fd)
        os.fsync(store)
    except BaseException:
        copy.discard()
        raise
    return copy


def _open_source(dir_fd: int, parts: tuple[str, ...], shown: str, max_bytes: int) -> int:
    """Open the regular, singly linked file at *parts*, walking descriptors without following."""
    parent = dir_fd
    opened: list[int] = []
    try:
        for part in parts[:-1]:
            try:
                parent = os.open(part, DIR_FLAGS, dir_fd=parent)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise BadInput(shown, f"has {part!r} on its way, which is not a directory "
                                   "(a symbolic link is never followed)",
                                   "Keep a regular file inside the lease's directory") from None
                raise
            opened.append(parent)
        last = parts[-1]
        # Checked before the open: opening a device can act on it.
        _check_source(os.stat(last, dir_fd=parent, follow_symlinks=False), shown, max_bytes)
        try:
            fd = os.open(last, _SOURCE_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise BadInput(shown, "is a symbolic link, which is never followed",
                               "Keep the file it points to, from inside the directory") from None
            raise
        try:
            # Again on the descriptor: the name may have been swapped since.
            _check_source(os.fstat(fd), shown, max_bytes)
        except BaseException:
            os.close(fd)
            raise
        return fd
    finally:
        for fd in opened:
            os.close(fd)


def _check_source(st: os.stat_result, shown: str, max_bytes: int) -> None:
    fix = "Keep a regular file inside the lease's directory"
    if stat.S_ISLNK(st.st_mode):
        raise BadInput(shown, "is a symbolic link, which is never followed", fix)
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(shown, "is not a regular file (a directory, FIFO, socket or device)",
                       fix)
    if st.st_nlink != 1:
        # A hard link may share its bytes with a file outside the directory.
        raise BadInput(shown, f"has {st.st_nlink} links: a hard link may be another file's",
                       "Copy it to a file of its own first (cp, not ln)")
    if st.st_size > max_bytes:
        raise BadInput(shown, f"holds {st.st_size} bytes, more than the {max_bytes} an "
                       "artifact may", "Keep a smaller file, or compress it first")


def _copy(source: int, target: int, shown: str, max_bytes: int) -> tuple[str, int]:
    """Copy *source* to *target*; its SHA-256 (hex) and size, at most *max_bytes*."""
    digest = hashlib.sha256()
    size = 0
    while True:
        chunk = os.read(source, _CHUNK)
        if not chunk:
            return digest.hexdigest(), size
        size += len(chunk)
        if size > max_bytes:
            # It grew while being copied.
            raise BadInput(shown, f"grew past the {max_bytes} bytes an artifact may hold "
                           "while it was copied", "Keep it once it is complete")
        digest.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view):]


def remove_file(root: Root, artifact: ArtifactState) -> bool:
    """Unlink an artifact's file (its removal already journaled); False if it was gone."""
    store = root.open_private(ARTIFACTS_DIR)
    try:
        os.unlink(file_name(artifact.id, artifact.label), dir_fd=store)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(store)


def _listed(root: Root) -> list[str]:
    """The names in the store (none when it was never made)."""
    try:
        store = root.open_private(ARTIFACTS_DIR, create=False)
    except FileNotFoundError:
        return []
    try:
        return os.listdir(store)
    except OSError as e:
        raise os_error(root.path / ARTIFACTS_DIR, e, "listed") from None
    finally:
        os.close(store)


def unreferenced(root: Root, kept: frozenset[str]) -> list[str]:
    """Names in the store that no kept artifact's record names (*kept*: their file names)."""
    return sorted(name for name in _listed(root) if name not in kept)


def files_of(root: Root, artifact: str) -> list[str]:
    """The names in the store of artifact *artifact*'s file (by its id), sorted."""
    return sorted(name for name in _listed(root) if id_of(name) == artifact)


def remove_unreferenced(root: Root, name: str,
                        still_unreferenced: Callable[[str], bool]) -> bool:
    """Remove the store's file *name* if no keeper holds it and no record names it.

    *still_unreferenced* re-reads the journal once the file's lock is held:
    a keeper journals before it lets go, so a record written meanwhile is
    seen.  Returns whether the file was removed.  Only regular files and
    symlinks are removed (an unlink never follows one); anything else is
    left for a person.
    """
    store = root.open_private(ARTIFACTS_DIR)
    try:
        try:
            st = os.stat(name, dir_fd=store, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            if not still_unreferenced(name):
                return False
            os.unlink(name, dir_fd=store)
            return True
        if not stat.S_ISREG(st.st_mode):
            return False
        fd = os.open(name, _SOURCE_FLAGS, dir_fd=store)
        try:
            if (os.fstat(fd).st_ino != st.st_ino or not try_exclusive(fd)
                    or not still_unreferenced(name)):
                return False
            os.unlink(name, dir_fd=store)
            return True
        finally:
            os.close(fd)
    finally:
        os.close(store)


# -- keeping: a lease's file copied in and journaled --------------------------------------


def keep(writer: WritePath, root: Root, source_dir_fd: int, parts: tuple[str, ...],
         label: str, *, manager: str, lease: str, directory: Path,
         source: os.PathLike[str] | str, steps: Steps, broken: Callable[[], bool],
         log: BoundLogger) -> Artifact:
    """Copy the file at *parts* below *source_dir_fd* into the store, and journal it.

    The copy is written, fsynced and locked first; its record is appended
    through *writer* (synced in either durability, so that the caller is
    told the file is kept only once a recovery can know it).  When the
    append fails the copy is unlinked, unless the journal is *broken*: its
    record may then have been committed, so the file stays, and a recovery
    removes it if it finds it unreferenced.  *directory* (the lease's, open
    as *source_dir_fd*) and *source* (the file as the caller named it) name
    it in errors.
    """
    artifact = ids.new_artifact()
    with resources.translated(directory, f"{source} could not be kept"):
        copy = copy_in(root, source_dir_fd, parts, artifact, label, steps=steps)
    try:
        writer.append(ArtifactKept(manager, artifact, label, copy.sha256, copy.size))
    except BaseException:
        if broken():
            copy.done()
        else:
            copy.discard()
        raise
    copy.done()
    kept = artifact_of(root.path, writer.state.artifacts[artifact])
    log.info("artifact.kept", lease=lease, path=str(kept.path), seq=writer.state.seq)
    return kept
