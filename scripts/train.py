"""`jetgym-train`: train the scorer's model from reward (`algorithm=ppo`) or labels (`algorithm=sft`).

compose -> build the scorer, the policy and the envs or questions -> `jetgym.training.run` -> print. The
results folder holds train.jsonl, learning_curve.png, summary.json and adapter/ (`model.adapter=PATH` loads
it in every job); a run killed and started again into the same folder continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from jetgym.scripts.config import CONFIG_PATH, TrainConfig, build_scorer, to_config


def options_of(config: TrainConfig, cls) -> Any:
    """The `train.*` settings that `cls` takes (null: its default)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in dataclasses.asdict(config.train).items() if k in names and v is not None})


def split_held_out(questions: list, fraction: float) -> tuple[list, list]:
    """(train, held out): questions are grouped by their id without its last two '/'-parts (a LIBERO episode:
    `set/task/demo_N/tNNN/type`; other ids are their own group), and every k-th group, k = round(1 / fraction),
    starting with the second, is held out, so the frames of one episode never straddle the split."""
    if not fraction:
        return list(questions), []
    every = max(2, round(1 / fraction))
    group = [q.id.rsplit("/", 2)[0] if q.id.count("/") >= 2 else q.id for q in questions]
    order = {name: k for k, name in enumerate(dict.fromkeys(group))}
    held = [order[name] % every == 1 for name in group]
    return ([q for q, h in zip(questions, held) if not h], [q for q, h in zip(questions, held) if h])


def train(cfg: Any, output_dir: str | None = None, progress: bool = True) -> dict:
    """Run the configured training into `output_dir` (default: the config's); returns the summary."""
    from jetgym.training.options import LoraOptions, PPOOptions, SFTOptions
    from jetgym.training.policy import Policy
    from jetgym.training.run import run_ppo, run_sft

    config: TrainConfig = to_config(cfg)
    out = output_dir or config.output_dir
    if not out:
        raise ValueError("jetgym-train needs an output folder: set output_dir")
    record = {"algorithm": config.algorithm, "seed": config.seed, "model": dataclasses.asdict(config.model),
              "scorer": dataclasses.asdict(config.scorer), "train": dataclasses.asdict(config.train),
              "placement": dataclasses.asdict(config.placement)}
    lora = options_of(config, LoraOptions)
    if config.algorithm == "sft":
        from jetgym.questions.sets import load_question_set

        options = options_of(config, SFTOptions)
        train_set, held_out = split_held_out(load_question_set(config.dataset), config.train.held_out)
        record["dataset"] = dataclasses.asdict(config.dataset)
        policy = Policy(build_scorer(config), lora, config.seed)
        return run_sft(policy, train_set, options, out, held_out=held_out, seed=config.seed,
                       checkpoint_every=config.train.checkpoint_every, autocast=config.train.autocast,
                       config=record, progress=progress)
    from jetgym.scripts.build import build_agent, make_env

    options = options_of(config, PPOOptions)
    record["env"] = dataclasses.asdict(config.env)
    record["agent"] = dataclasses.asdict(config.agent)
    single = dataclasses.replace(config, env=dataclasses.replace(config.env, num_envs=1),
                                 agent=dataclasses.replace(config.agent, policy="sample"))
    envs = [make_env(single) for _ in range(options.num_envs)]
    policy = Policy(build_scorer(config), lora, config.seed)
    agent, _ = build_agent(single, scorer=policy.scorer, env=envs[0])
    agent.temperature = policy.scorer.options.temperature  # sample from the scorer's own distribution
    return run_ppo(policy, envs, agent, options, out, config.train.env_steps, seed=config.seed,
                   checkpoint_every=config.train.checkpoint_every, autocast=config.train.autocast, config=record,
                   progress=progress)


@hydra.main(config_path=CONFIG_PATH, config_name="train", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    summary = train(cfg, output_dir=HydraConfig.get().runtime.output_dir)
    print(json.dumps({k: summary[k] for k in summary if k != "config"}, indent=2, sort_keys=True))


def main() -> None:
    """Console entry `jetgym-train key=value ...`."""
    from jetgym.runs.folder import make_folder

    given = [arg.split("=", 1)[1] for arg in sys.argv[1:] if arg.lstrip("+").startswith("output_dir=")]
    if given and "${" not in given[-1]:
        try:
            make_folder(given[-1])
        except PermissionError as error:
            raise SystemExit(f"jetgym-train: {error}") from None
    hydra_main()


if __name__ == "__main__":
    main()
