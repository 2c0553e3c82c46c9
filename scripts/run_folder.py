"""A job's results folder: one writer at a time (a lock the kernel releases when its holder dies) and
strict JSON (no NaN/Infinity: every file the jobs write parses with any JSON reader)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any, Iterator

LOCK = ".jetgym.lock"


class FolderInUseError(RuntimeError):
    """Another live process writes into this results folder."""


def make_folder(path: str | os.PathLike, setting: str = "output_dir") -> Path:
    """Create the results folder (and parents); a folder that cannot be written is a clear error."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PermissionError(f"cannot create {setting} {folder} ({error.strerror}); choose a writable {setting}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{setting} {folder} is not writable; choose a writable {setting}")
    return folder


@contextlib.contextmanager
def folder_lock(folder: Path, job: str, name: str = LOCK) -> Iterator[None]:
    """Hold an exclusive lock on `folder` while a job writes into it; refuse when another process holds it.

    `flock` on `folder/.jetgym.lock`: the kernel drops the lock when the holding process ends however it
    ends (SIGKILL included), so a crashed run never leaves the folder locked. The lock file stays (it is
    empty but for the holder's pid and job)."""
    path = Path(folder) / name  # data-parallel ranks lock their own file (their own part of the folder)
    file = open(path, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            file.seek(0)
            holder = file.read().strip() or "another process"
            raise FolderInUseError(
                f"{folder} is in use by {holder}: two runs must not write into one folder. Wait for it to "
                f"finish, or choose another output_dir"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(f"{job} (pid {os.getpid()})\n")
        file.flush()
        yield
    finally:
        file.close()  # releases the lock


def dumps(value: Any, indent: int | None = None, what: str = "a result") -> str:
    """Strict JSON with sorted keys: NaN and Infinity are refused, naming what was being written."""
    try:
        return json.dumps(value, sort_keys=True, indent=indent, allow_nan=False)
    except ValueError as error:
        raise ValueError(f"{what} holds a non-finite number (NaN or Infinity), which JSON cannot represent: "
                         f"{_non_finite(value)}") from error


def _non_finite(value: Any, where: str = "") -> str:
    """The key path of the first non-finite float in `value`."""
    if isinstance(value, float) and not (value == value and abs(value) != float("inf")):
        return f"{where or 'value'} = {value}"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return ""
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return ""



def check_output_dir_argument(args: list[str], job: str) -> None:
    """Before Hydra starts (it creates output_dir and opens its log file there): an `output_dir=` override
    that cannot be written, or a read-only working folder for the default output_dir, ends the command with
    one line naming output_dir. Values with interpolations (`${...}`) are left to Hydra."""
    given = [arg.split("=", 1)[1] for arg in args if arg.lstrip("+").startswith("output_dir=")]
    try:
        if given and "${" not in given[-1]:
            make_folder(given[-1])
        elif not given and not os.access(os.getcwd(), os.W_OK | os.X_OK):
            raise PermissionError(f"the working folder {os.getcwd()} is not writable for the default output_dir; "
                                  f"set output_dir=/a/writable/folder")
    except PermissionError as error:
        raise SystemExit(f"{job}: {error}") from None
