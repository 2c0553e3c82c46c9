"""`jetgym eval`: a finished training run played on held-out seeds against the zero-shot scorer and baselines.

    jetgym eval runs=[outputs/train/fl] episodes=20 output_dir=outputs/eval/fl

Plays the run's env (its own env, scorer and agent settings; `env_id` swaps in another env with the same
observations and actions, e.g. the test side of a train/test split, and `env_kwargs` other env settings, e.g. games
never played in training) on held-out seeds `seed .. seed+episodes-1` (PPO and
rft training episodes use seeds >= 1,000,000; seeds of a cloning run's demonstrations are refused) with: the trained
scorer (its adapter, at `dtype`), the zero-shot scorer (both by `policy`, as `agent.policy`: auto, argmax,
untried, or a draw from q seeded by the episode's seed), `random`, and the best fixed control, picked on separate
tuning seeds (`tuning_seed`, never reported). Reports each agent's mean return and success with 95% bootstrap
intervals over seeds and the paired differences trained - other (same seeds resampled together). Several runs of
one configuration with different training seeds play the same held-out seeds, each as its own agent and, per
held-out seed, their mean ("trained (mean of N seeds)", the training procedure's result). Writes evaluation.json
and evaluation.md into output_dir.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from jetgym.agents.scoring import POLICIES
from jetgym.runs.folder import read_jsonl, write_json, write_text
from jetgym.training.evaluation import SUCCESS_RULES, check_runs, read_summaries, seen_share, summarize, table
from jetgym.scripts.cli import start, user_errors
from jetgym.scripts.config import CONFIG_PATH

DTYPES = ("float32", "auto", "bfloat16")


@dataclass
class EvalConfig:
    """What `jetgym eval` plays; checked before any model loads."""

    runs: List[str] = field(default_factory=list)  # finished jetgym train run folders (summary.json, adapter/)
    episodes: int = 20  # held-out seeds seed .. seed+episodes-1
    seed: int = 0
    tuning_seed: int = 500  # the best fixed control is picked on tuning_seed .. +tuning_episodes-1, never reported
    tuning_episodes: int = 10
    success: str = "positive-return"  # when the env reports no is_success: positive-return or terminated
    num_envs: int = 1  # held-out episodes the scorers play at once (a vector env; each keeps its seed)
    stop_loops: bool = False  # deterministic envs: end a scorer's episode at its first repeated observation
    dtype: str = "float32"  # the scorers' placement.dtype (auto: bf16 on CPUs with native bf16)
    policy: str = "auto"  # how the trained and zero-shot scorers pick (agent.policy: auto, argmax, untried, sample)
    env_id: str | None = None  # play this env instead of the run's (a test split: new objects, new games)
    env_kwargs: Dict[str, Any] = field(default_factory=dict)  # over the run's env kwargs, e.g. {game_seed:1001}
    output_dir: str = "outputs/eval"

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("runs is empty: name the finished training run folders, e.g. runs=[outputs/train/fl]")
        for name, value in (
            ("episodes", self.episodes),
            ("num_envs", self.num_envs),
            ("tuning_episodes", self.tuning_episodes),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for name, value, allowed in (
            ("success", self.success, SUCCESS_RULES),
            ("dtype", self.dtype, DTYPES),
            ("policy", self.policy, POLICIES),
        ):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")
        if self.env_id is not None:
            from jetgym.envs import check_env_id

            try:
                check_env_id(self.env_id)
            except ValueError as error:
                raise ValueError(f"env_id: {error}") from None
        if self.stop_loops and self.num_envs > 1:
            raise ValueError("stop_loops plays one env at a time: leave num_envs at 1")
        if self.stop_loops and self.policy not in ("argmax", "auto"):
            raise ValueError(
                f"stop_loops needs the argmax scorer (with policy={self.policy} a repeated observation need not "
                f"start a loop): set policy=argmax"
            )


ConfigStore.instance().store(name="eval_schema", node=EvalConfig)


def play(
    overrides: list[str],
    agent: str,
    seeds: tuple[int, int],
    adapter: str | None = None,
    control: str | None = None,
    scorer=None,
    stop_loops: bool = False,
    dtype: str = "float32",
    policy: str = "auto",
    asked: list | None = None,
) -> list[dict]:
    """The agent's episodes on `seeds`; `asked`, when given, receives the text of every question it was asked."""
    from jetgym.agents import rollout
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.build import build_agent, make_env

    extra = (
        [f"agent={agent}"]
        + ([f"agent.policy={policy}"] if agent == "scorer" else [])
        + ([f"agent.control={control}"] if control else [])
        + ([f"model.adapter={adapter}"] if adapter else [])
    )
    config = to_config(compose("episode", overrides + extra + [f"placement.dtype={dtype}"]))
    env = make_env(config)
    try:
        built, _ = build_agent(config, scorer=scorer, env=env)
        if stop_loops and getattr(built, "policy", "argmax") != "argmax":
            raise ValueError(
                f"stop_loops needs the argmax scorer; policy={policy} plays {built.policy} on this env (a repeated "
                f"observation need not start a loop): set policy=argmax"
            )
        on_step = None if asked is None else lambda row, frame: asked.append(row["question"])
        episodes = rollout(
            env, built, seeds[1] - seeds[0], seeds[0], on_step=on_step, progress=True, stop_loops=stop_loops
        )
        return [{**e, "policy": built.policy} for e in episodes] if agent == "scorer" else episodes
    finally:
        env.close()


def env_overrides(run: dict, env_id: str | None = None, env_kwargs: dict | None = None) -> list[str]:
    """Episode-config overrides that rebuild the training run's env and scorer settings (its env, or `env_id`
    with the run's env settings; `env_kwargs` over the run's env kwargs)."""
    env, scorer = run["env"], run["scorer"]
    out = [f"model.spec={run['model']['spec']}", f"env.id={env_id or env['id']}"]
    kwargs = {**env["kwargs"], **(env_kwargs or {})}
    out += [f"++env.kwargs.{k}={hydra_value(v)}" for k, v in kwargs.items()]
    if env.get("action_texts"):
        out.append("env.action_texts=[" + ",".join(env["action_texts"]) + "]")
    if env.get("task"):
        out.append(f"env.task={json.dumps(env['task'])}")
    out += [
        f"scorer.{k}={v}"
        for k, v in scorer.items()
        if k != "name" and v is not None and not isinstance(v, (list, dict))
    ]
    agent = run.get("agent") or {}
    out += [f"agent.{k}={agent[k]}" for k in ("memory", "describer", "perception", "screenshot") if k in agent]
    return out


def env_controls(overrides: list[str]) -> list[str]:
    """The candidate texts of the env's first step (for envs whose controls come from the env, e.g. ViZDoom)."""
    from jetgym.agents.rollout import env_reset
    from jetgym.scripts.build import make_env
    from jetgym.scripts.config import compose, to_config

    env = make_env(to_config(compose("episode", overrides + ["agent=random"])))
    try:
        return list(env_reset(env, 0)[1]["candidates"].texts)
    finally:
        env.close()


def fixed_returns(overrides: list[str], seeds: tuple[int, int], controls: list[str]) -> dict[str, float | None]:
    """Each fixed control's total return over `seeds`; None for a control the env masks at some step (Taxi's
    moves into walls, its pick-up away from the passenger), which a fixed agent cannot play."""
    totals: dict[str, float | None] = {}
    for control in controls:
        try:
            totals[control] = sum(e["return"] for e in play(overrides, "fixed", seeds, control=control))
        except ValueError as error:
            if "is not an admissible candidate" not in str(error):
                raise
            totals[control] = None
    return totals


def hydra_value(value) -> str:
    """`value` written in Hydra's override grammar (null, true/false, numbers, quoted strings, lists, dicts)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else ("null" if value is None else json.dumps(value))


def demonstration_episodes(run: dict) -> list[tuple[int, int, int]]:
    """(file, episode, seed) of every episode of a behaviour-cloning run's demonstrations (none for PPO)."""
    from jetgym.scripts.config import demonstration_paths

    paths = run["train"].get("demonstrations")
    if run.get("algorithm") != "bc" or not paths:
        return []
    files = demonstration_paths(paths)
    return sorted({(k, row["episode"], row["seed"]) for k, path in enumerate(files) for row in read_jsonl(path)})


def demonstration_seeds(run: dict) -> set[int]:
    """The episode seeds of a behaviour-cloning run's demonstrations (none for PPO)."""
    return {seed for _, _, seed in demonstration_episodes(run)}


def evaluate(folders: list[Path], summaries: list[dict], options: EvalConfig, others: dict | None = None) -> dict:
    """Plays the runs and the baselines on the held-out seeds; returns the results (agents, paired differences).

    others: more agents' episodes on the same held-out seeds (name -> episodes), paired like the baselines."""
    run = summaries[0]["config"]
    base = ["env=gym", *env_overrides(run, options.env_id, dict(options.env_kwargs))]
    held = (options.seed, options.seed + options.episodes)
    used_seeds = demonstration_seeds(run)
    overlap = sorted(used_seeds & set(range(*held)))
    if overlap:
        raise ValueError(f"held-out seeds {overlap[:5]} were demonstration episodes of this run: set seed beyond them")
    tuning = (options.tuning_seed, options.tuning_seed + options.tuning_episodes)
    controls = run["env"].get("action_texts") or env_controls(base)
    fixed_scores = fixed_returns(base, tuning, controls)
    playable = {c: total for c, total in fixed_scores.items() if total is not None}
    best = max(playable, key=playable.get) if playable else None
    batched = base + [f"env.num_envs={options.num_envs}"]
    scored = dict(stop_loops=options.stop_loops, dtype=options.dtype, policy=options.policy)
    names = ["trained" if len(folders) == 1 else f"trained (seed {s['seed']})" for s in summaries]
    asked: dict[str, list] = {name: [] for name in names}
    trained = {
        name: play(batched, "scorer", held, adapter=str(f / "adapter"), asked=asked[name], **scored)
        for name, f in zip(names, folders)
    }
    agents = {**trained, "zero-shot": play(batched, "scorer", held, **scored), "random": play(base, "random", held)}
    if best is not None:
        agents[f"fixed ({best})"] = play(base, "fixed", held, control=best)
    agents.update(others or {})
    results = summarize(folders, summaries, agents, list(trained), held, tuning, fixed_scores, options.success)
    results["held_out_questions_seen"] = {name: seen_share(f, asked[name]) for name, f in zip(names, folders)}
    results["policy"] = agents["zero-shot"][0]["policy"]  # the scorers' policy as played (auto resolved)
    return results


def run_eval(config: EvalConfig, output_dir: str | None = None) -> dict:
    """The `jetgym eval` job: evaluate, then write evaluation.json and evaluation.md into the output folder."""
    folders = [Path(run) for run in config.runs]
    summaries = read_summaries(folders)
    if summaries[0]["config"].get("algorithm") == "sft":
        raise ValueError("an sft run is judged on its held-out split during training: read its summary.json")
    check_runs(summaries, config.stop_loops)
    results = evaluate(folders, summaries, config)
    out = Path(output_dir or config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "evaluation.json", results, what="the evaluation")
    held = results["held_out_seeds"]
    warned = [f"Training of {f} warned: {s['warning']}\n" for f, s in zip(folders, summaries) if s.get("warning")]
    report = [
        f"# Held-out evaluation of {', '.join(results['runs'])}",
        "",
        f"Seeds {held[0]}..{held[1] - 1}, {config.dtype}, the scorers' policy {results['policy']}"
        + (" (auto)" if config.policy == "auto" else "")
        + ". Mean [95% bootstrap interval over seeds].",
        "",
        *warned,
        *table(results),
    ]
    write_text(out / "evaluation.md", "\n".join(report) + "\n")
    print("\n".join(warned + table(results)) + f"\nresults in {out.resolve()}")
    return results


@hydra.main(config_path=CONFIG_PATH, config_name="eval", version_base=None)
def hydra_main(cfg) -> None:
    """Console entry: `jetgym eval runs=[FOLDER,...] key=value ...`."""
    from jetgym.scripts.config import to_config

    with user_errors("jetgym-eval"):
        config, output_dir = to_config(cfg), HydraConfig.get().runtime.output_dir
        GlobalHydra.instance().clear()  # the job composes each run's episode config (`compose`): Hydra must be free
        run_eval(config, output_dir=output_dir)


def main() -> None:
    start("jetgym-eval", hydra_main)
