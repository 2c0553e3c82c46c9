"""What every Hydra console job shares: its entry (`start`), the checks before Hydra starts, and the one rule
for user errors.

    def main() -> None:
        start("jetgym-qa", hydra_main)          # the console entry

    @hydra.main(...)
    def hydra_main(cfg):
        with user_errors("jetgym-qa"):          # inside the task function
            run_qa(cfg, ..., on_start=save_hydra_config(cfg))

**User errors** (`is_user_error`) are the errors of what a user gave: `ValueError` (every config, option,
question-file and settings check raises one), `LookupError` itself (an unknown registry name), the missing,
existing or unwritable files and folders (`FileNotFoundError`, `FileExistsError`, `PermissionError`,
`IsADirectoryError`, `NotADirectoryError`), a folder another run holds (`FolderInUseError`), a model spec that
names nothing loadable (`ModelNotFoundError`) and a full disk (`OSError` ENOSPC/EDQUOT) or read-only file
system (EROFS). They end the command with one line `jetgym-<job>: <message>` on stderr and exit status 2,
without a traceback; `HYDRA_FULL_ERROR=1` shows the traceback. Every other exception (a programming error)
keeps its traceback.

**A refused run touches nothing.** Hydra writes `.hydra/` (config.yaml, hydra.yaml, overrides.yaml) into the
output folder before the job runs, so a refused run would rewrite the folder's provenance. `start` turns that
off (`hydra.output_subdir=null`) and the job writes the same three files (`save_hydra_config`) once the runner
has locked and checked the folder (the runners' `on_start`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from jetgym.runs.folder import FolderInUseError, make_folder, write_text

FULL_ERROR = "HYDRA_FULL_ERROR"
HYDRA_SUBDIR = ".hydra"  # where the job writes Hydra's record; `hydra.output_subdir=X` on the command line moves it
_hydra_subdir: str | None = HYDRA_SUBDIR
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
NO_HYDRA_SUBDIR = "hydra.output_subdir=null"  # what `start` adds to the command line


def process_start() -> float:
    """`time.monotonic()` at this process's start (read from /proc on Linux; the call time elsewhere)."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.monotonic() - (uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic()


def is_user_error(error: BaseException) -> bool:
    """The one rule: is `error` about what the user gave (one line, exit 2) rather than a bug (a traceback)?"""
    from jetgym.scorers.models import ModelNotFoundError

    if isinstance(
        error,
        (
            ValueError,
            FileNotFoundError,
            FileExistsError,
            PermissionError,
            IsADirectoryError,
            NotADirectoryError,
            FolderInUseError,
            ModelNotFoundError,
        ),
    ):
        return True
    if type(error) is LookupError:  # a registry's unknown name; KeyError and IndexError are bugs
        return True
    return isinstance(error, OSError) and error.errno in _DISK_ERRNOS


def one_line(error: BaseException) -> str:
    """The error's message and notes on one line."""
    parts = [str(error) or type(error).__name__, *getattr(error, "__notes__", ())]
    return "; ".join(" ".join(part.split()) for part in parts)


@contextlib.contextmanager
def user_errors(job: str) -> Iterator[None]:
    """A user error raised inside ends the command: `job: message` on stderr, exit status 2; Ctrl-C ends it with one
    line saying whether a rerun resumes, exit status 130 (`HYDRA_FULL_ERROR=1`: the exception goes on, with its
    traceback)."""
    try:
        yield
    except KeyboardInterrupt:
        if os.environ.get(FULL_ERROR) == "1":
            raise
        print(f"{job}: interrupted; {AFTER_INTERRUPT.get(job, 'nothing was finished')}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except Exception as error:
        if os.environ.get(FULL_ERROR) == "1" or not is_user_error(error):
            raise
        print(f"{job}: {one_line(error)}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


AFTER_INTERRUPT = {  # what Ctrl-C leaves behind, by job
    "jetgym-qa": "rerun the same command to resume (the responses written are kept)",
    "jetgym-train": "rerun the same command to resume from the last checkpoint",
    "jetgym-episode": "episode runs do not resume: rerun with a new output_dir to start over",
}


def _parse(args: list[str]) -> list:
    """The command line's overrides parsed by Hydra's own grammar (flags such as `-m` are skipped); an override
    the grammar cannot read is a ValueError with a hint."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser, parsed = OverridesParser.create(), []
    for arg in args:
        if arg.startswith("-") or "=" not in arg and not arg.startswith("~"):
            continue
        try:
            parsed += parser.parse_overrides([arg])
        except OverrideParseException as error:
            first = str(error).splitlines()[0]
            key, _, value = arg.partition("=")
            hint = (
                f"Hydra does not expand ~: write the path out ({key}=$HOME{value[1:]}, which the shell expands)"
                if value.startswith("~")
                else f"quote a value with special characters ({key}='{value}')"
            )
            raise ValueError(f"cannot read the override {arg!r} ({first}); {hint}") from None
    return parsed


def check_output_dir_argument(args: list[str], job: str) -> None:
    """Before Hydra starts (it creates output_dir and opens its log file there): an `output_dir=` override that is
    empty or null, or that cannot be written, or a read-only working folder for the default output_dir, ends the
    command with one line naming output_dir. Values with interpolations (`${...}`) are left to Hydra."""
    with user_errors(job):
        given = [o for o in _parse(args) if o.key_or_group.lstrip("+") == "output_dir" and not o.is_delete()]
        if given and given[-1].is_sweep_override():
            return  # `-m output_dir=a,b`: each job's folder is Hydra's to make
        value = given[-1].value() if given else None
        if given and (value is None or not str(value).strip()):
            shown = "null" if value is None else "empty"
            raise ValueError(
                f"output_dir is {shown}: set output_dir=/path/to/a/folder for the results (a null or "
                f"empty output_dir would write into a folder named 'null' or into the current folder)"
            )
        if given and "${" not in str(value):
            make_folder(str(value))
        elif not given and not os.access(os.getcwd(), os.W_OK | os.X_OK):
            raise PermissionError(
                f"the working folder {os.getcwd()} is not writable for the default output_dir; "
                f"set output_dir=/a/writable/folder"
            )


def start(job: str, hydra_main: Callable[[], Any]) -> None:
    """The console entry of a Hydra job: check the command line (`check_output_dir_argument`), keep Hydra from
    writing `.hydra/` before the run's folder checks (the job calls `save_hydra_config` once they pass), run."""
    global _hydra_subdir
    args = sys.argv[1:]
    check_output_dir_argument(args, job)
    subdirs = [arg.split("=", 1)[1] for arg in args if arg.lstrip("+").startswith("hydra.output_subdir=")]
    if subdirs:
        _hydra_subdir = None if subdirs[-1] in ("null", "") else subdirs[-1]
    sys.argv = [
        sys.argv[0],
        *[arg for arg in args if not arg.lstrip("+").startswith("hydra.output_subdir=")],
        NO_HYDRA_SUBDIR,
    ]
    hydra_main()


def command_args() -> list[str]:
    """The command line's arguments as the user gave them (less what `start` added)."""
    return [arg for arg in sys.argv[1:] if arg != NO_HYDRA_SUBDIR]


def save_hydra_config(cfg: Any) -> Callable[[Path], None]:
    """A runner's `on_start`: write what Hydra would have written into `<output_dir>/.hydra/` (the job's config,
    Hydra's config, the command line's overrides), atomically. Outside a Hydra job it does nothing."""

    def save(folder: Path) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, open_dict

        if _hydra_subdir is None or not HydraConfig.initialized():
            return
        hydra = OmegaConf.create({"hydra": OmegaConf.to_container(HydraConfig.get())})
        with open_dict(hydra):
            hydra.hydra.output_subdir = _hydra_subdir
        target = Path(HydraConfig.get().runtime.output_dir) / _hydra_subdir
        target.mkdir(parents=True, exist_ok=True)
        write_text(target / "config.yaml", OmegaConf.to_yaml(cfg))
        write_text(target / "hydra.yaml", OmegaConf.to_yaml(hydra))
        write_text(target / "overrides.yaml", OmegaConf.to_yaml(HydraConfig.get().overrides.task))

    return save
