"""What every Hydra console job does before Hydra starts: note when the process started, check `output_dir`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jetgym.runs.folder import make_folder


def process_start() -> float:
    """`time.monotonic()` at this process's start (read from /proc on Linux; the call time elsewhere)."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.monotonic() - (uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic()


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
