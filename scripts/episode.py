"""`jetgym-episode`: play seeded agent episodes; write per-step JSONL, per-episode summaries and GIFs.
Under `torchrun` the seeded episodes are split across ranks and merged in episode order (same files as one process).

Outputs in the run folder: `steps.jsonl` (one object per decision, sorted keys: episode, seed, step,
action, text, probs by label, question seen, status seen, reward, terminated, truncated), `episodes.jsonl`
(return, length, kills, end reason, video path), `timings.jsonl` (decision and wall seconds per episode),
`summary.json`, `report.md`, `episode_NNN.gif`. Only `timings.jsonl` holds timings, so the steps and
episodes of two runs of one config (or of one process and N ranks) can be compared byte for byte.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from jetgym.scripts import distributed
from jetgym.scripts.config import CONFIG_PATH, EpisodeConfig, build_scorer, to_config
from jetgym.scripts.run_folder import LOCK, check_output_dir_argument, dumps, folder_lock, make_folder

STEPS = "steps.jsonl"
EPISODES = "episodes.jsonl"
TIMINGS = "timings.jsonl"  # per episode: decision and wall seconds (kept out of episodes.jsonl, which repeats byte for byte)
TIMING_FIELDS = ("decision_seconds", "decisions_per_second", "wall_seconds")
SUMMARY = "summary.json"
REPORT = "report.md"


def make_env(config: EpisodeConfig, render: bool = False):
    """The configured env (any registered id, with `env.kwargs`) with `CandidateActions` on top (texts:
    `env.action_texts`, else the env's own); `env.num_envs > 1`: a vector env of such envs (autoreset disabled:
    the rollout reseeds every episode). render: ask for `rgb_array` frames when the env offers them (single
    envs only, for the GIFs)."""
    import gymnasium as gym

    from jetgym.envs import import_env_modules  # importing jetgym.envs registers the jetgym ids
    from jetgym.envs.candidates import CandidateActions, make_vector_env

    import_env_modules(config.env.imports)

    kwargs = dict(config.env.kwargs)
    texts = None if config.env.action_texts is None else list(config.env.action_texts)
    if config.env.num_envs > 1:
        return make_vector_env(config.env.id, config.env.num_envs, texts=texts, mode=config.env.vectorization, **kwargs)
    if render and "render_mode" not in kwargs and "rgb_array" in _render_modes(config.env.id):
        kwargs["render_mode"] = "rgb_array"
    return CandidateActions(gym.make(config.env.id, **kwargs), texts=texts)


def _render_modes(env_id: str) -> list[str]:
    import gymnasium as gym

    from jetgym.envs import split_env_id

    entry = gym.registry[split_env_id(env_id)[1]].entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return list(getattr(cls, "metadata", {}).get("render_modes", []))


def build_agent(config: EpisodeConfig, task: str | None = None, scorer=None, env=None):
    """The configured agent; `scorer` is built from the config when the agent needs one and none is given.
    task: the briefing (default: `env.task` of the config, else the env's own `task`); env: where the scorer
    agent's describer reads the observation space (and env-provided describers) from."""
    from dataclasses import asdict

    from jetgym.agents import make_agent

    if config.agent.name == "fixed":
        return make_agent("fixed", control=config.agent.control), None
    if config.agent.name != "scorer":
        return make_agent(config.agent.name), None
    scorer = build_scorer(config) if scorer is None else scorer
    options = {key: value for key, value in asdict(config.agent).items() if key not in ("name", "control")}
    task = config.env.task if task is None else task
    return make_agent("scorer", scorer=scorer, task=task, env=env, examples=config.env.examples, **options), scorer


def run_episodes(cfg: Any, output_dir: str | os.PathLike | None = None, scorer=None, quiet: bool = False) -> dict:
    """Play `cfg.episodes` episodes (seeds cfg.seed, cfg.seed+1, ...) into `output_dir`; return the summary.

    A folder that already holds episode results (logs, summary, report or GIFs) is refused, and so is a folder
    another run is writing into (a lock): nothing is deleted or mixed."""
    config: EpisodeConfig = to_config(cfg)
    if not (output_dir or config.output_dir):
        raise ValueError("run_episodes needs an output folder: set output_dir")
    out = make_folder(output_dir or config.output_dir)
    ranks = distributed.current()
    try:
        with folder_lock(out, "jetgym-episode", ranks.suffix(LOCK)):
            existing = [path.name for name in (STEPS, EPISODES, TIMINGS, SUMMARY, REPORT)
                        for path in out.glob(name.replace(".", "*.", 1)) if path.exists()]
            existing += sorted(path.name for path in out.glob("episode_*.gif"))
            if existing:
                shown = ", ".join(existing[:4]) + (f", ... ({len(existing)} files)" if len(existing) > 4 else "")
                raise FileExistsError(f"{out} already holds episode results ({shown}); "
                                      f"choose a new output_dir (nothing was overwritten)")
            return _play(config, out, scorer, quiet, ranks)
    finally:
        distributed.finish(ranks)


def _play(config: EpisodeConfig, out: Path, scorer, quiet: bool, ranks: distributed.Ranks = distributed.Ranks()) -> dict:
    """Under torchrun, rank R plays the episodes n with n % WORLD_SIZE == R (seed + n, as one process would) into
    its own files; rank 0 merges them in episode order once every rank is done."""
    from jetgym.agents import rollout
    from jetgym.scripts.episode_video import annotate, end_lines, step_lines, write_gif

    numbers = None
    if ranks.distributed:
        if config.env.num_envs > 1:
            raise ValueError("under torchrun each rank plays single envs: set env.num_envs=1 (or run one process)")
        distributed.init(ranks, 1800.0, gpu=config.placement.device == "cuda")
        distributed.agree(ranks, asdict(config))
        numbers = [n for n in range(config.episodes) if n % ranks.world_size == ranks.rank]
    steps_file, episodes_file, timings_file = (out / ranks.suffix(name) for name in (STEPS, EPISODES, TIMINGS))

    env = make_env(config, render=config.video)
    frames: list = []
    fps = env.metadata.get("render_fps") or 30
    if config.video and config.env.num_envs > 1 and not quiet:
        print(f"video: none with env.num_envs={config.env.num_envs} (GIFs are written for single envs)")

    def on_step(row: dict, frame) -> None:
        with open(steps_file, "a", encoding="utf-8") as sink:
            sink.write(dumps(row, what=f"step {row['step']} of episode {row['episode']}") + "\n")
        if frame is not None:
            probs = row["probs"] or {}
            frames.append(annotate(frame, step_lines(row["step"], row["text"], row["reward"], row["return"],
                                                     list(probs), list(probs.values()) or None)))

    def on_end(episode: dict, frame) -> None:
        episode["video"] = None
        if frames:
            if frame is not None:
                frames.append(annotate(frame, end_lines(episode)))
            episode["video"] = write_gif(frames, out / f"episode_{episode['episode']:03d}.gif", fps=fps).name
            frames.clear()
        timing = {"episode": episode["episode"], **{key: episode[key] for key in TIMING_FIELDS}}
        with open(episodes_file, "a", encoding="utf-8") as sink:
            sink.write(dumps({k: v for k, v in episode.items() if k not in TIMING_FIELDS},
                             what=f"episode {episode['episode']}") + "\n")
        with open(timings_file, "a", encoding="utf-8") as sink:
            sink.write(dumps(timing, what=f"the timing of episode {episode['episode']}") + "\n")

    try:
        agent, scorer = build_agent(config, config.env.task, scorer, env=env)
        episodes = rollout(env, agent, config.episodes, config.seed, on_step, on_end, progress=not quiet,
                           numbers=numbers)
    finally:
        env.close()
    if ranks.distributed:
        distributed.wait_for_all(ranks, 1800.0)
        if ranks.rank != 0:
            return {"rank": ranks.rank, "episodes": len(episodes)}
        order = list(range(config.episodes))
        for name in (EPISODES, TIMINGS):
            distributed.merge_jsonl(out, name, ranks.world_size, order, key="episode")
        distributed.merge_jsonl(out, STEPS, ranks.world_size, None, key=("episode", "step"))
        timings = {row["episode"]: row for row in map(json.loads, (out / TIMINGS).read_text().splitlines())}
        episodes = [{**row, **timings[row["episode"]]} for row in map(json.loads, (out / EPISODES).read_text().splitlines())]
    summary = summarize(episodes, config, None if scorer is None else scorer.describe())
    (out / SUMMARY).write_text(dumps(summary, indent=2, what="the summary") + "\n", encoding="utf-8")
    (out / REPORT).write_text(render_report(summary), encoding="utf-8")
    if not quiet:
        print(f"mean return {summary['mean_return']:.2f} over {summary['episodes']} episode(s); "
              f"logs: {(out / STEPS).resolve()}, {(out / EPISODES).resolve()}")
        for row in episodes:
            if row["video"]:
                print(f"video: {(out / row['video']).resolve()}")
    return summary


def summarize(episodes: list[dict], config: EpisodeConfig, scorer_options: dict | None) -> dict:
    returns = [e["return"] for e in episodes]
    kills = [e["kills"] for e in episodes if e["kills"] is not None]
    decisions = sum(e["length"] for e in episodes)
    thinking = sum(e["decision_seconds"] for e in episodes)
    return {
        "episodes": len(episodes), "mean_return": statistics.fmean(returns),
        "std_return": statistics.pstdev(returns) if len(returns) > 1 else 0.0,
        "mean_length": statistics.fmean(e["length"] for e in episodes),
        "mean_kills": statistics.fmean(kills) if kills else None,
        "decisions": decisions, "decisions_per_second": decisions / thinking if thinking > 0 else None,
        "ends": {end: sum(e["end"] == end for e in episodes) for end in sorted({e["end"] for e in episodes})},
        "env": asdict(config.env), "agent": asdict(config.agent), "seed": config.seed,
        "scorer": scorer_options, "model": config.model.spec if scorer_options else None,
    }


def render_report(summary: dict) -> str:
    kills = "n/a" if summary["mean_kills"] is None else f"{summary['mean_kills']:.2f}"
    rate = "n/a" if summary["decisions_per_second"] is None else f"{summary['decisions_per_second']:.1f}"
    return (
        f"# Episodes: {summary['env']['id']}, agent {summary['agent']['name']}\n\n"
        "| episodes | mean return | std | mean length | mean kills | decisions/s | ends |\n|---|---|---|---|---|---|---|\n"
        f"| {summary['episodes']} | {summary['mean_return']:.2f} | {summary['std_return']:.2f} | {summary['mean_length']:.1f} "
        f"| {kills} | {rate} | {', '.join(f'{k}: {v}' for k, v in summary['ends'].items())} |\n\n"
        f"Seeds {summary['seed']}..{summary['seed'] + summary['episodes'] - 1}; env options "
        f"{json.dumps(summary['env']['kwargs'], sort_keys=True)}. Decisions/s counts the agent's "
        "time only (question, scoring, choice), not the env.\n"
    )


@hydra.main(config_path=CONFIG_PATH, config_name="episode", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-episode key=value ...`."""
    run_episodes(cfg, output_dir=HydraConfig.get().runtime.output_dir)


def main() -> None:
    """Console entry `jetgym-episode key=value ...`: output_dir is checked before Hydra writes into it."""
    check_output_dir_argument(sys.argv[1:], "jetgym-episode")
    hydra_main()


if __name__ == "__main__":
    main()
