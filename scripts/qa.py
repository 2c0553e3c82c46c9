"""`jetgym-qa`: compose the config, build the questions and the scorer, call `jetgym.runs.run_qa`, print.

`wall_seconds` runs from the start of the process (interpreter start-up, imports, model load included) for
the console command, from the call of `run_qa` otherwise. Files and promises: `jetgym.runs.qa`,
docs/reliability.md.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jetgym.scripts.cli import process_start, save_hydra_config, start, user_errors

PROCESS_START = process_start()

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from jetgym.questions.sets import load_question_set, report_of  # noqa: E402
from jetgym.runs import qa as runner  # noqa: E402
from jetgym.scripts.config import CONFIG_PATH, QAConfig, build_scorer, to_config  # noqa: E402


def run_settings(config: QAConfig) -> dict:
    """What must not change between a run and its resumption: all but output_dir, pipeline, on_error,
    rank_timeout_s, allow_single_choice and dataset.limit (`run_qa` adds the number of ranks)."""
    settings = asdict(config)
    for key in ("output_dir", "pipeline", "on_error", "rank_timeout_s", "allow_single_choice"):
        settings.pop(key, None)
    settings["dataset"].pop("limit")
    return settings


def qa_job(cfg: Any, output_dir: str | os.PathLike | None = None, started: float | None = None, on_start=None) -> dict:
    """The `jetgym-qa` job from a composed config: score `cfg.dataset` into `output_dir` (default
    `cfg.output_dir`) with `jetgym.runs.run_qa`; print one line and return the summary. on_start: called with
    the folder once it is locked and checked (the console job writes `.hydra/` then)."""
    config: QAConfig = to_config(cfg)
    out = output_dir or config.output_dir
    if not out:
        raise ValueError("the qa job needs an output folder: set output_dir")
    questions = load_question_set(config.dataset)
    if not questions:
        raise ValueError(f"question set {config.dataset.name!r} holds no questions")
    reports = []
    report = report_of(config.dataset.name)  # a set's own report (LIBERO: per type, baselines, episode intervals)
    if report is not None:
        from jetgym.runs.folder import atomic_file

        reports.append(
            lambda qs, responses, folder: report(qs, responses, folder, path=config.dataset.path, atomic=atomic_file)
        )
    summary = runner.run_qa(
        questions,
        lambda: build_scorer(config),
        out,
        chunk_size=config.chunk_size,
        pipeline=config.pipeline,
        on_error=config.on_error,
        settings=run_settings(config),
        reports=reports,
        started=started,
        about={"model": config.model.spec, "placement": asdict(config.placement), "dataset": asdict(config.dataset)},
        gpu=config.placement.device == "cuda",
        rank_timeout_s=config.rank_timeout_s,
        allow_single_choice=config.allow_single_choice,
        on_start=on_start,
    )
    if "accuracy" not in summary:  # a data-parallel rank other than 0
        return summary
    accuracy = "n/a" if summary["accuracy"] is None else f"{summary['accuracy']:.4f}"
    skipped = (
        f"; {summary['skipped']} question(s) skipped (see 'skipped' in {runner.RESPONSES})"
        if summary["skipped"]
        else ""
    )
    ties = f", {summary['ties']} tied" if summary.get("ties") else ""
    print(
        f"accuracy {accuracy} ({summary['correct']}/{summary['graded']}{ties}){skipped}; "
        f"results in {Path(out).resolve()}"
    )
    if summary.get("warning"):
        print(f"warning: {summary['warning']}", file=sys.stderr)
    return summary


@hydra.main(config_path=CONFIG_PATH, config_name="qa", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-qa key=value ...`; a user error is one line (`jetgym.scripts.cli`)."""
    with user_errors("jetgym-qa"):
        qa_job(
            cfg, output_dir=HydraConfig.get().runtime.output_dir, started=PROCESS_START, on_start=save_hydra_config(cfg)
        )


def main() -> None:
    """Console entry `jetgym-qa key=value ...`: output_dir is checked before Hydra writes into it."""
    start("jetgym-qa", hydra_main)


if __name__ == "__main__":
    main()
