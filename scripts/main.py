"""`jetgym`: the one front door. `jetgym JOB key=value ...` runs a job with its Hydra overrides (lm-eval and
render-libero take their own flags); `jetgym --help` lists the jobs. The `jetgym-<job>` commands are aliases."""

from __future__ import annotations

import difflib
import importlib
import sys

# job -> (module whose `main` runs it, one line for --help)
JOBS = {
    "episode": ("jetgym.scripts.episode", "play agent episodes on ViZDoom or any Gymnasium env"),
    "qa": ("jetgym.scripts.qa", "answer a question set (MMLU, JSONL, LIBERO frames) and grade it"),
    "train": ("jetgym.scripts.train", "train the scorer from reward (rft, ppo), labels (sft) or episodes (bc)"),
    "eval": ("jetgym.scripts.evaluate", "play a trained run on held-out seeds against zero-shot and baselines"),
    "lm-eval": ("jetgym.scripts.lm_eval_cli", "lm-evaluation-harness with the jetgym model registered"),
    "calibrate": ("jetgym.scripts.calibrate", "rank the layers FastJEV may prune (calibration file and plot)"),
    "calibrate-probs": ("jetgym.scripts.calibrate_probs", "fit one temperature to the scorer's probabilities"),
    "render-libero": ("jetgym.scripts.render_libero", "render LIBERO frames and labels with the simulator"),
}


def usage() -> str:
    width = max(map(len, JOBS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, about) in JOBS.items()]
    return (
        "usage: jetgym JOB [key=value ...]\n\njobs:\n"
        + "\n".join(lines)
        + "\n\n`jetgym JOB --help` shows a job's options."
    )


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return
    job = args[0]
    if job not in JOBS:
        close = difflib.get_close_matches(job, JOBS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"jetgym: unknown job {job!r}{hint}\n\n{usage()}", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = [f"jetgym-{job}", *args[1:]]
    importlib.import_module(JOBS[job][0]).main()
