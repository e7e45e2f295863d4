"""Reaching a held worker's loopback endpoint from a shell in its pod.

While a worker is validated, it leaves a record of its endpoint in a directory only its user
can enter: ``PID.json`` (base URL, model, where the token is) and ``PID.token`` (the bearer
token, mode 0600). The token itself is never logged or reported, only its path.
``shakedown check --attach`` finds the record of a live worker and checks its endpoint.
The records go when the worker is released or closes its validation.

The directory is ``$XDG_RUNTIME_DIR/shakedown`` when that is set, else
``shakedown-UID`` in the system's temporary directory. An existing directory that is not
the user's own, or that others may enter, is not used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger("shakedown.validation")


class AttachError(Exception):
    """No held worker's endpoint could be found or read; the message says why."""


@dataclass(frozen=True)
class EndpointRecord:
    pid: int
    base_url: str
    model: str
    token_file: str
    started_at: float
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None


def runtime_dir(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_RUNTIME_DIR")
    if base:
        return Path(base) / "shakedown"
    return Path(tempfile.gettempdir()) / f"shakedown-{os.getuid()}"


def _private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter, made if missing."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=False)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a directory of this user")
    if info.st_mode & 0o077:
        raise PermissionError(f"{path} is open to other users (mode {info.st_mode & 0o777:o})")
    return path


def _write_private(path: Path, data: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def publish(
    base_url: str,
    model: str,
    token: str,
    *,
    reasoning_parser: str | None = None,
    tool_call_parser: str | None = None,
    directory: Path | None = None,
) -> EndpointRecord | None:
    """Leave this process's endpoint record; None (logged) when no private place exists."""
    try:
        where = _private_dir(directory or runtime_dir())
        pid = os.getpid()
        token_file = where / f"{pid}.token"
        _write_private(token_file, token.encode())
        record = EndpointRecord(
            pid, base_url, model, str(token_file), time.time(), reasoning_parser, tool_call_parser
        )
        _write_private(where / f"{pid}.json", json.dumps(asdict(record)).encode())
    except OSError as exc:
        logger.warning("worker validation: no endpoint record for operators: %s", exc)
        return None
    logger.info(
        "worker validation: bearer token in %s (this user only); `shakedown check --attach` "
        "checks the held endpoint",
        token_file,
    )
    return record


def withdraw(record: EndpointRecord | None) -> None:
    if record is None:
        return
    token_file = Path(record.token_file)
    for path in (token_file.with_suffix(".json"), token_file):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    # The last worker out leaves no directory behind; one still in use is not empty.
    with contextlib.suppress(OSError):
        token_file.parent.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find(pid: int | None = None, directory: Path | None = None) -> tuple[EndpointRecord, str]:
    """The record of a live held worker (``pid``'s, or the latest started) and its token."""
    where = directory or runtime_dir()
    records = []
    for path in sorted(where.glob("*.json")) if where.is_dir() else []:
        try:
            record = EndpointRecord(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if (pid is None or record.pid == pid) and _alive(record.pid):
            records.append(record)
    if not records:
        which = f"worker {pid}" if pid is not None else "worker"
        raise AttachError(f"no held {which} has an endpoint record in {where}")
    record = max(records, key=lambda r: r.started_at)
    try:
        token = Path(record.token_file).read_text().strip()
    except OSError as exc:
        raise AttachError(f"cannot read the token of worker {record.pid}: {exc}") from None
    return record, token
