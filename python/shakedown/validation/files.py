"""Reports and gate logs on disk: private to the worker's user, never written through a symlink.

Directories shakedown makes are 0700 and its files 0600 (reports and logs hold gate output,
which may quote the endpoint's token). A symlink planted where a report or log goes is replaced
or refused, never followed, so validation cannot be made to overwrite another file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def make_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents, each 0700; existing ones are left as they are."""
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked by its user
            os.mkdir(directory, PRIVATE_DIR_MODE)


def open_private_dir(path: Path) -> int:
    """Open (creating it if need be) a directory that only shakedown writes into, such as a
    gate log directory; return its descriptor.

    Refused: a symlink, anything that is not a directory, a directory of another user. Its
    mode is set to 0700.
    """
    make_dirs(path)
    fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError(f"{path} is not a directory")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise PermissionError(f"{path} belongs to another user (uid {info.st_uid})")
        os.fchmod(fd, PRIVATE_DIR_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_private_file(dir_fd: int, name: str) -> int:
    """A new, empty 0600 file ``name`` in the directory ``dir_fd``, open for reading and writing.

    Whatever was at ``name`` (an old log, a symlink) is unlinked first, never followed.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, PRIVATE_FILE_MODE, dir_fd=dir_fd)


def write_private_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with a 0600 file holding ``data``.

    The data goes to a new file beside it, renamed over ``path``: a symlink at ``path`` is
    replaced, not followed, and a reader never sees half a file.
    """
    make_dirs(path.parent)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600, O_EXCL
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
