"""`jetgym-episode`: play seeded agent episodes; write per-step JSONL, per-episode summaries and GIFs.

Outputs in the run folder: `steps.jsonl` (one object per decision, sorted keys: episode, seed, step,
action, text, probs by label, status seen, reward, terminated, truncated), `episodes.jsonl` (return,
length, kills, end reason, decisions/s, video path), `summary.json`, `report.md`, `episode_NNN.gif`.
`steps.jsonl` holds no timings, so two runs of one config can be compared byte for byte.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from jetgym.scripts.config import CONFIG_PATH, EpisodeConfig, build_scorer, to_config

STEPS = "steps.jsonl"
EPISODES = "episodes.jsonl"
SUMMARY = "summary.json"
REPORT = "report.md"


def make_env(config: EpisodeConfig, render: bool = False):
    """The configured env (any registered id, with `env.kwargs`) with `CandidateActions` on top.
    render: ask for `rgb_array` frames when the env offers them (for the GIFs)."""
    import gymnasium as gym

    import jetgym.envs  # noqa: F401  (registers the jetgym ids)
    from jetgym.envs.candidates import CandidateActions

    kwargs = dict(config.env.kwargs)
    if render and "render_mode" not in kwargs and "rgb_array" in _render_modes(config.env.id):
        kwargs["render_mode"] = "rgb_array"
    return CandidateActions(gym.make(config.env.id, **kwargs))


def _render_modes(env_id: str) -> list[str]:
    import gymnasium as gym

    entry = gym.registry[env_id].entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return list(getattr(cls, "metadata", {}).get("render_modes", []))


def build_agent(config: EpisodeConfig, task: str, scorer=None):
    """The configured agent; `scorer` is built from the config when the agent needs one and none is given."""
    from dataclasses import asdict

    from jetgym.agents import make_agent

    if config.agent.name != "scorer":
        return make_agent(config.agent.name), None
    scorer = build_scorer(config) if scorer is None else scorer
    options = {key: value for key, value in asdict(config.agent).items() if key != "name"}
    return make_agent("scorer", scorer=scorer, task=task, **options), scorer


def run_episodes(cfg: Any, output_dir: str | os.PathLike | None = None, scorer=None, quiet: bool = False) -> dict:
    """Play `cfg.episodes` episodes (seeds cfg.seed, cfg.seed+1, ...) into `output_dir`; return the summary.

    A folder that already holds episode results is refused (nothing is deleted or mixed)."""
    from jetgym.agents import rollout
    from jetgym.scripts.episode_video import annotate, end_lines, step_lines, write_gif

    config: EpisodeConfig = to_config(cfg)
    if not (output_dir or config.output_dir):
        raise ValueError("run_episodes needs an output folder: set output_dir")
    out = Path(output_dir or config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    existing = [name for name in (STEPS, EPISODES, SUMMARY) if (out / name).exists()]
    if existing:
        raise FileExistsError(f"{out} already holds episode results ({', '.join(existing)}); "
                              f"choose a new output_dir (nothing was overwritten)")
    env = make_env(config, render=config.video)
    frames: list = []
    fps = env.metadata.get("render_fps") or 30

    def on_step(row: dict, frame) -> None:
        with open(out / STEPS, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(row, sort_keys=True) + "\n")
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
        with open(out / EPISODES, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(episode, sort_keys=True) + "\n")

    try:
        agent, scorer = build_agent(config, getattr(env.unwrapped, "task", ""), scorer)
        episodes = rollout(env, agent, config.episodes, config.seed, on_step, on_end, progress=not quiet)
    finally:
        env.close()
    summary = summarize(episodes, config, None if scorer is None else scorer.describe())
    (out / SUMMARY).write_text(json.dumps(summary, sort_keys=True, indent=2) + "\n", encoding="utf-8")
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
def main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-episode key=value ...`."""
    run_episodes(cfg, output_dir=HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
