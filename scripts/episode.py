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
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from tqdm import tqdm

from scripts.config import EpisodeConfig, to_config

STEPS = "steps.jsonl"
EPISODES = "episodes.jsonl"
SUMMARY = "summary.json"
REPORT = "report.md"
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def make_env(config: EpisodeConfig):
    """The configured env with `CandidateActions` on top."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers the ids)
    from envs.candidates import CandidateActions

    env = gym.make(config.env.id, frame_skip=config.env.frame_skip, episode_timeout=config.env.episode_timeout)
    return CandidateActions(env)


def build_scorer(config: EpisodeConfig):
    from scorers import make_scorer

    return make_scorer(
        config.scorer.name, model=config.model.spec,
        placement={"device": config.placement.device, "dtype": config.placement.dtype},
        schedule=config.scorer.schedule, template=config.scorer.template, max_batch_tokens=config.scorer.max_batch_tokens,
    )


def build_agent(config: EpisodeConfig, task: str, scorer=None):
    """The configured agent; `scorer` is built from the config when the agent needs one and none is given."""
    from agents import make_agent

    if config.agent.name != "scorer":
        return make_agent(config.agent.name), None
    scorer = build_scorer(config) if scorer is None else scorer
    a = config.agent
    agent = make_agent("scorer", scorer=scorer, task=task, memory=a.memory, perception=a.perception,
                       policy=a.policy, temperature=a.temperature, screenshot=a.screenshot)
    return agent, scorer


def run_episodes(cfg: Any, output_dir: str | os.PathLike | None = None, scorer=None, quiet: bool = False) -> dict:
    """Play `cfg.episodes` episodes (seeds cfg.seed, cfg.seed+1, ...) into `output_dir`; return the summary."""
    config: EpisodeConfig = to_config(cfg)
    if not (output_dir or config.output_dir):
        raise ValueError("run_episodes needs an output folder: set output_dir")
    out = Path(output_dir or config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in (STEPS, EPISODES):
        (out / name).unlink(missing_ok=True)
    env = make_env(config)
    try:
        agent, scorer = build_agent(config, env.unwrapped.briefing, scorer)
        episodes = []
        for number in tqdm(range(config.episodes), desc="episodes", unit="ep", disable=quiet or config.episodes == 1):
            episodes.append(play_episode(env, agent, config, number, out, quiet))
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


def play_episode(env, agent, config: EpisodeConfig, number: int, out: Path, quiet: bool = False) -> dict:
    """One seeded episode; appends its steps to steps.jsonl and its summary to episodes.jsonl."""
    from scripts.episode_video import annotate, step_lines, write_gif

    seed = config.seed + number
    started = time.monotonic()
    obs, info = env.reset(seed=seed)
    agent.reset(seed)
    candidates = info["candidates"]
    total, step, thinking, frames, rows = 0.0, 0, 0.0, [], []
    terminated = truncated = False
    bar = tqdm(desc=f"episode {number}", unit="step", disable=quiet, leave=False)
    while not (terminated or truncated):
        tick = time.monotonic()
        act = agent.act(obs, candidates)
        thinking += time.monotonic() - tick
        seen = {name: int(value) for name, value in obs["status"].items()}
        screen = obs["screen"]
        obs, reward, terminated, truncated, info = env.step(act.action)
        candidates = info["candidates"]
        total += float(reward)
        rows.append({
            "episode": number, "seed": seed, "step": step, "action": act.label, "text": act.text,
            "probs": None if act.probs is None else dict(zip(candidates.labels, act.probs)),
            "status": seen, "reward": float(reward), "return": total,
            "terminated": bool(terminated), "truncated": bool(truncated),
        })
        if config.video:
            frames.append(annotate(screen, step_lines(step, act.text, float(reward), total, candidates.texts, act.probs)))
        step += 1
        bar.update()
    bar.close()
    end = info.get("truncated_reason") or info.get("terminated_reason") or "unknown"
    video = None
    if config.video:
        frames.append(annotate(obs["screen"], [f"end after {step} steps: {end}", f"return {total:+g}"]))
        video = write_gif(frames, out / f"episode_{number:03d}.gif", fps=35 / config.env.frame_skip).name
    with open(out / STEPS, "a", encoding="utf-8") as sink:
        sink.write("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    final = {name: int(value) for name, value in obs["status"].items()}
    episode = {
        "episode": number, "seed": seed, "return": total, "length": step, "kills": final.get("kills"),
        "final_status": final, "end": end, "terminated": bool(terminated), "truncated": bool(truncated),
        "engine_restarts": info.get("engine_restarts", 0), "decision_seconds": round(thinking, 4),
        "decisions_per_second": step / thinking if thinking > 0 else None,
        "wall_seconds": round(time.monotonic() - started, 4), "video": video,
    }
    with open(out / EPISODES, "a", encoding="utf-8") as sink:
        sink.write(json.dumps(episode, sort_keys=True) + "\n")
    return episode


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
        f"Seeds {summary['seed']}..{summary['seed'] + summary['episodes'] - 1}; frame skip {summary['env']['frame_skip']}, "
        f"episode timeout {summary['env']['episode_timeout'] or 'scenario default'} tics. Decisions/s counts the agent's "
        "time only (question, scoring, choice), not the engine.\n"
    )


@hydra.main(config_path=CONF_DIR, config_name="episode", version_base=None)
def main(cfg: DictConfig) -> None:
    """Console entry: `jetgym-episode key=value ...`."""
    run_episodes(cfg, output_dir=HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
