"""`jetgym-episode`: compose the config, build the env and the agent, call `jetgym.runs.run_episodes`, print.

Files and promises: `jetgym.runs.episodes`, docs/reliability.md.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from jetgym.runs.episodes import EPISODES, REPORT, STEPS, SUMMARY, TIMINGS  # noqa: F401  (the files, for callers)
from jetgym.runs.episodes import run_episodes
from jetgym.scripts.build import build_agent, make_env
from jetgym.scripts.cli import save_hydra_config, start, user_errors
from jetgym.scripts.config import CONFIG_PATH, EpisodeConfig, to_config


def episode_job(
    cfg: Any, output_dir: str | os.PathLike | None = None, scorer=None, quiet: bool = False, on_start=None
) -> dict:
    """The `jetgym-episode` job from a composed config: `cfg.episodes` episodes (seeds cfg.seed, cfg.seed+1, ...)
    into `output_dir` (default `cfg.output_dir`) with `jetgym.runs.run_episodes`; return the summary.
    scorer: a built scorer for the `scorer` agent (default: built from the config). on_start: called with the
    folder once it is locked and checked (the console job writes `.hydra/` then)."""
    config: EpisodeConfig = to_config(cfg)
    out = output_dir or config.output_dir
    if not out:
        raise ValueError("the episode job needs an output folder: set output_dir")
    return run_episodes(
        lambda: make_env(config, render=config.video),
        lambda env: build_agent(config, config.env.task, scorer, env=env)[0],
        out,
        episodes=config.episodes,
        seed=config.seed,
        video=config.video,
        about={"env": asdict(config.env), "agent": asdict(config.agent)},
        settings=asdict(config),
        gpu=config.placement.device == "cuda",
        quiet=quiet,
        on_start=on_start,
    )


@hydra.main(config_path=CONFIG_PATH, config_name="episode", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-episode key=value ...`; a user error is one line (`jetgym.scripts.cli`)."""
    with user_errors("jetgym-episode"):
        episode_job(cfg, output_dir=HydraConfig.get().runtime.output_dir, on_start=save_hydra_config(cfg))


def main() -> None:
    """Console entry `jetgym-episode key=value ...`: output_dir is checked before Hydra writes into it."""
    start("jetgym-episode", hydra_main)


if __name__ == "__main__":
    main()
