"""A run folder: the files a job writes and a later run resumes, checks or refuses.

Every job (QA, episodes, training) uses these, and nothing else, to touch its results folder:

- `make_folder(path, setting="output_dir") -> Path`: create it; an unwritable folder is an error naming `setting`.
- `folder_lock(folder, job, name=LOCK)`: a context manager holding the folder for one process (a second one
  gets `FolderInUseError`); the kernel drops the lock when the holder dies, SIGKILL included.
- `dumps(value, indent=None, what="a result") -> str`: strict JSON (sorted keys; NaN/Infinity refused,
  naming `what` and the key path of the bad number).
- `write_json(path, value, *, indent=2, what="a result") -> Path` and `write_text(path, text) -> Path`: atomic
  writes (a temporary file in the same folder, fsync, rename): a reader sees the old file or the new one,
  never a part. `atomic_file(path)`: the same for writers that take a path (plots, GIFs, images).
- A write that runs out of space raises `DiskFullError` (an OSError, errno ENOSPC/EDQUOT): one line naming the
  file and the space free; a replaced file stays as it was, an appended one may end in a torn line (cut off by
  the next `read_jsonl`).
- `append_jsonl(path, rows, *, what="a row", sync=True) -> None`: append strict-JSON lines (fsynced with `sync`).
- `read_jsonl(path, *, what="row") -> list[dict]`: the complete rows of an appended file. A torn last line
  (a killed write) is cut off the file and not returned; a bad line before the end is an error naming its line.
- `refuse_results(folder, patterns, *, what="results") -> None`: refuse a folder that already holds files
  matching `patterns` (another run's results), listing them.
- `refuse_other_jobs(folder, job) -> None`: refuse a folder holding the files of another kind of job (`JOBS`),
  naming that job.
- `check_settings(path, settings, *, defaults=None) -> None`: refuse to resume a folder whose recorded settings
  (a JSON file, e.g. `run.json`) differ from `settings`, naming the dotted keys that differ; no file: nothing to check.

Importing this module imports neither Hydra nor torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

LOCK = ".jetgym.lock"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file (mkstemp alone gives 0600)


class FolderInUseError(RuntimeError):
    """Another live process writes into this results folder."""


def make_folder(path: str | os.PathLike, setting: str = "output_dir") -> Path:
    """Create the results folder (and parents); a folder that cannot be written is a clear error."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PermissionError(
            f"cannot create {setting} {folder} ({error.strerror}); choose a writable {setting}"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{setting} {folder} is not writable; choose a writable {setting}")
    return folder


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, job: str, name: str = LOCK) -> Iterator[None]:
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
        raise ValueError(
            f"{what} holds a non-finite number (NaN or Infinity), which JSON cannot represent: {_non_finite(value)}"
        ) from error


def as_json_data(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists, dataclasses dicts, keys strings): settings recorded
    in a file and the live ones compare equal exactly when their JSON is equal."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, sort_keys=True, default=_plain))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _non_finite(value: Any, where: str = "") -> str:
    """The key path of the first non-finite float in `value`."""
    if isinstance(value, float) and not (value == value and abs(value) != float("inf")):
        return f"{where or 'value'} = {value}"
    if isinstance(value, dict):
        items: Iterable = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return ""
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return ""


class DiskFullError(OSError):
    """No space left to write a file (errno ENOSPC or EDQUOT); the message names the file and the free space."""

    def __str__(self) -> str:
        return str(self.strerror)


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(error: OSError, path: Path, needed: int | None = None, *, appended: bool = False) -> DiskFullError:
    """The one-line error for a write that ran out of space: the file, the space free (and needed, when known)."""
    try:
        free = f"{shutil.disk_usage(path.parent).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    need = f", about {needed:,} needed" if needed else ""
    after = (
        "its last line may be torn: the next run cuts it off and resumes" if appended else "the file was left as it was"
    )
    return DiskFullError(
        error.errno,
        f"no space left to write {path} ({free}{need}); {after}. Free some space "
        f"(or choose another output_dir) and run again",
        str(path),
    )


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path in the folder of `path` (ending in the same suffix, for writers that read the format from
    it) to write the new file into; when the block ends without error it is fsynced and renamed to `path`, so a
    reader sees the old file or the new one, never a part. A full disk is a `DiskFullError` naming `path`."""
    path = Path(path)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".partial{path.suffix}")
    os.close(handle)
    temporary = Path(name)
    try:
        os.chmod(temporary, FILE_MODE)
        yield temporary
        descriptor = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError) and error.errno in DISK_FULL and not isinstance(error, DiskFullError):
            raise disk_full(error, path) from None
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder is synced
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Replace `path` with `text` atomically (`atomic_file`: a temporary file in the same folder, fsync, rename)."""
    path = Path(path)
    data = text.encode("utf-8")
    with atomic_file(path) as temporary:
        try:
            temporary.write_bytes(data)
        except OSError as error:
            if error.errno in DISK_FULL:
                raise disk_full(error, path, len(data)) from None
            raise
    return path


def write_json(path: str | os.PathLike, value: Any, *, indent: int | None = 2, what: str = "a result") -> Path:
    """Strict JSON (sorted keys, a final newline) written atomically (`write_text`)."""
    return write_text(path, dumps(value, indent=indent, what=what) + "\n")


def append_jsonl(
    path: str | os.PathLike, rows: Sequence[dict], *, what: str | Callable[[dict], str] = "a row", sync: bool = True
) -> None:
    """Append `rows` as strict-JSON lines in one write; with `sync`, flushed and fsynced before returning.
    what: names a row in the error for a non-finite number (a text, or a function of the row)."""
    if not rows:
        return
    text = "".join(dumps(row, what=what(row) if callable(what) else what) + "\n" for row in rows)
    try:
        with open(path, "a", encoding="utf-8") as sink:
            sink.write(text)
            if sync:
                sink.flush()
                os.fsync(sink.fileno())
    except OSError as error:
        if error.errno in DISK_FULL:
            raise disk_full(error, Path(path), len(text.encode("utf-8")), appended=True) from None
        raise


def read_jsonl(path: str | os.PathLike, *, what: str = "row") -> list[dict]:
    """The complete rows of a JSONL file that jobs append to (none when it does not exist).

    A last line that does not parse is the partial write of a killed run: it is cut off the file and not
    returned. A complete last line whose newline is missing gets its newline. A line that does not parse
    before the end, or a row that is not a JSON object, is an error naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    rows: list[dict] = []
    offset = 0
    lines = data.split(b"\n")
    for line_no, raw in enumerate(lines, 1):
        if raw.strip():
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if any(rest.strip() for rest in lines[line_no:]):
                    raise ValueError(f"{path}:{line_no}: corrupt {what} line before the end of the file") from None
                with open(path, "r+b") as file:  # the partial last line of a killed run
                    file.truncate(offset)
                return rows
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{line_no}: a {what} must be a JSON object")
            rows.append(row)
        offset += len(raw) + 1
    if data and not data.endswith(b"\n"):
        with open(path, "ab") as file:  # a complete last line whose newline was not written
            file.write(b"\n")
    return rows


def refuse_results(folder: str | os.PathLike, patterns: Sequence[str], *, what: str = "results") -> None:
    """Refuse a folder holding files that match `patterns` (glob, e.g. `steps*.jsonl`): another run's results."""
    folder = Path(folder)
    existing = [path.name for pattern in patterns for path in sorted(folder.glob(pattern)) if path.exists()]
    if existing:
        raise FileExistsError(
            f"{folder} already holds {what} ({_shown(existing)}); choose a new output_dir (nothing was overwritten)"
        )


JOBS = {  # job -> (what its folder holds, the files that only this job writes)
    "jetgym-qa": ("QA results", ("responses*.jsonl", "run.json", "runs*.jsonl", "reliability.png")),
    "jetgym-episode": ("episode results", ("steps*.jsonl", "episodes*.jsonl", "timings*.jsonl", "episode_*.gif")),
    "jetgym-train": (
        "a training run",
        ("train.jsonl", "checkpoint.json", "checkpoint-*", "adapter", "learning_curve.png"),
    ),
}


def _shown(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f", ... ({len(names)} files)" if len(names) > 4 else "")


def refuse_other_jobs(folder: str | os.PathLike, job: str) -> None:
    """Refuse a folder that another kind of job wrote (its own files, `JOBS`): `job` would replace the shared
    ones (summary.json, report.md, .hydra/) and mix its results with theirs."""
    folder = Path(folder)
    for other, (what, patterns) in JOBS.items():
        found = [path.name for pattern in patterns for path in sorted(folder.glob(pattern))] if other != job else []
        if found:
            raise FileExistsError(
                f"{folder} holds {what} written by {other} ({_shown(found)}); {job} does not "
                f"write into another job's folder: choose a new output_dir (nothing was overwritten)"
            )


def check_settings(path: str | os.PathLike, settings: dict, *, defaults: dict | None = None) -> None:
    """Refuse to resume when the settings recorded at `path` differ from `settings` (nothing is written).

    defaults: values assumed for keys a file written by an older version lacks."""
    path = Path(path)
    if not path.exists():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"{path} is not valid JSON ({getattr(error, 'msg', error)}; {path.stat().st_size} bytes): the "
            f"settings of the run in {path.parent} cannot be read; restore the file or use a fresh "
            f"output_dir"
        ) from None
    before = as_json_data({**(defaults or {}), **recorded})
    changed = _differences(before, as_json_data(settings))
    if changed:
        raise ValueError(
            f"{path.parent} holds a run with other settings ({', '.join(changed)}); use a fresh output_dir"
        )


def _differences(before: dict, after: dict, prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ."""
    changed = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += _differences(old, new, f"{prefix}{key}.")
        elif old != new:
            changed.append(f"{prefix}{key}")
    return changed
