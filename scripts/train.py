"""`jetgym-train`: train the scorer's model from reward (`rft`, `ppo`), labels (`sft`) or recorded episodes (`bc`).

compose -> build the scorer, the policy and the envs or questions -> `jetgym.training.run` -> print. The
results folder holds train.jsonl, learning_curve.png, summary.json and adapter/ (`model.adapter=PATH` loads
it in every job); a run killed and started again into the same folder continues from its last checkpoint. A
folder that another kind of job wrote (QA, episodes) is refused, naming it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from jetgym.runs.folder import refuse_other_jobs
from jetgym.scripts.build import build_agent, make_env
from jetgym.scripts.cli import save_hydra_config, start, user_errors
from jetgym.scripts.config import CONFIG_PATH, RELABELERS, TrainConfig, build_scorer, to_config, train_options


def train(cfg: Any, output_dir: str | None = None, progress: bool = True, on_start=None) -> dict:
    """Run the configured training into `output_dir` (default: the config's); returns the summary. `on_start(folder)`:
    called once the folder is locked and checked (the console job writes Hydra's record of the run there)."""
    from jetgym.runs import ranks as ranks_
    from jetgym.training.data_parallel import Shards
    from jetgym.training.options import LoraOptions

    config: TrainConfig = to_config(cfg)
    out = output_dir or config.output_dir
    if not out:
        raise ValueError("jetgym-train needs an output folder: set output_dir")
    refuse_other_jobs(out, "jetgym-train")  # before any model is loaded
    record = {
        "algorithm": config.algorithm,
        "seed": config.seed,
        "model": dataclasses.asdict(config.model),
        "scorer": dataclasses.asdict(config.scorer),
        "train": config.train_record(),
        "placement": dataclasses.asdict(config.placement),
    }
    lora = train_options(config.train, LoraOptions)
    ranks = ranks_.current()
    try:
        ranks_.init(ranks, config.rank_timeout_s, gpu=config.placement.device == "cuda")
        ranks_.agree(ranks, {"output_dir": str(out), **record})
        return _train(config, record, lora, str(out), Shards(ranks), progress, on_start)
    finally:
        ranks_.finish(ranks)


def _train(config: TrainConfig, record: dict, lora, out: str, shards, progress: bool, on_start) -> dict:
    from jetgym.training.options import OPTIONS
    from jetgym.training.policy import Policy
    from jetgym.training.run import run_ppo, run_rft, run_sft
    from jetgym.training.sft import distinct_split, split_held_out

    single = dataclasses.replace(
        config,
        env=dataclasses.replace(config.env, num_envs=1),
        agent=dataclasses.replace(config.agent, policy="sample"),
    )
    cloning = config.algorithm in ("sft", "bc")
    options = train_options(config.train, OPTIONS[config.algorithm])
    record["options"] = {**dataclasses.asdict(options), **dataclasses.asdict(lora)}  # in effect, defaults filled
    if cloning:
        policy = Policy(build_scorer(config), lora, config.seed)
        if config.algorithm == "sft":
            from jetgym.questions.sets import load_question_set

            questions = load_question_set(config.dataset)
            record["dataset"] = dataclasses.asdict(config.dataset)
        else:
            questions = _demonstrations(config, single, policy)
            record["env"], record["agent"] = dataclasses.asdict(config.env), dataclasses.asdict(config.agent)
        train_set, held_out = split_held_out(questions, config.held_out)
        if config.train.unique:
            train_set, held_out, record["unique"] = distinct_split(train_set, held_out)
        return run_sft(
            policy,
            train_set,
            options,
            out,
            held_out=held_out,
            seed=config.seed,
            checkpoint_every=config.train.checkpoint_every,
            autocast=config.train.autocast,
            config=record,
            progress=progress,
            shards=shards,
            on_start=on_start,
        )
    record["env"] = dataclasses.asdict(config.env)
    record["agent"] = dataclasses.asdict(config.agent)
    if options.num_envs < shards.ranks.world_size:
        raise ValueError(
            f"train.num_envs={options.num_envs} is smaller than the {shards.ranks.world_size} ranks: "
            f"every rank plays at least one env; set train.num_envs >= {shards.ranks.world_size}"
        )
    envs = [make_env(single) for _ in shards.mine(options.num_envs)]
    policy = Policy(build_scorer(config), lora, config.seed)
    agent, _ = build_agent(single, scorer=policy.scorer, env=envs[0])
    if config.algorithm == "rft":
        return run_rft(
            policy,
            envs,
            agent,
            options,
            out,
            config.env_steps,
            temperature=config.agent.temperature,
            seed=config.seed,
            checkpoint_every=config.train.checkpoint_every,
            autocast=config.train.autocast,
            config=record,
            progress=progress,
            shards=shards,
            on_start=on_start,
        )
    agent.temperature = policy.scorer.options.temperature  # sample from the scorer's own distribution
    return run_ppo(
        policy,
        envs,
        agent,
        options,
        out,
        config.env_steps,
        seed=config.seed,
        checkpoint_every=config.train.checkpoint_every,
        autocast=config.train.autocast,
        config=record,
        progress=progress,
        shards=shards,
        on_start=on_start,
    )


def _demonstrations(config: TrainConfig, single: TrainConfig, policy) -> list:
    """The behaviour-cloning questions: `train.demonstrations` replayed in the configured env (gold: the
    recorded actions, or with `train.relabel` the scripted expert's)."""
    from jetgym.agents import make_agent
    from jetgym.agents.baselines import EXPERT_ENVS, ScriptedAgent
    from jetgym.training.cloning import cloning_questions

    env = make_env(single)
    try:
        relabel = config.train.relabel
        if relabel is not None and not ScriptedAgent.plays(env):
            raise ValueError(
                f"train.relabel={relabel} relabels with the scripted expert, which plays {EXPERT_ENVS} "
                f"envs only, not {config.env.id}: leave train.relabel unset to clone the recorded actions"
            )
        agent, _ = build_agent(single, scorer=policy.scorer, env=env)
        expert = None if relabel is None else make_agent("scripted", env=env, aim=RELABELERS[relabel])
        return cloning_questions(
            config.train.demonstrations, env, agent, min_return=config.train.min_return, expert=expert
        )
    finally:
        env.close()


@hydra.main(config_path=CONFIG_PATH, config_name="train", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    """A user error is one line (`jetgym.scripts.cli`)."""
    with user_errors("jetgym-train"):
        summary = train(cfg, output_dir=HydraConfig.get().runtime.output_dir, on_start=save_hydra_config(cfg))
    print(json.dumps({k: summary[k] for k in summary if k != "config"}, indent=2, sort_keys=True))
    if summary.get("warning"):
        print(f"warning: {summary['warning']}", file=sys.stderr)


def main() -> None:
    """Console entry `jetgym-train key=value ...`: output_dir is checked before Hydra writes into it."""
    start("jetgym-train", hydra_main)


if __name__ == "__main__":
    main()
