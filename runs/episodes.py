"""`run_episodes`: play seeded episodes of an env with an agent into a run folder.

    from jetgym import run_episodes
    summary = run_episodes(env, agent, "results/taxi", episodes=3, seed=0)

Files in the folder: `steps.jsonl` (one object per decision, sorted keys: episode, seed, step, action, text,
probs by label, question seen, status seen, reward, return, terminated, truncated), `episodes.jsonl` (return,
length, kills, end reason, video file), `timings.jsonl` (decision and wall seconds per episode), `summary.json`,
`report.md` and, for single envs that render `rgb_array`, `episode_NNN.gif`. Only `timings.jsonl` holds
timings, so the steps and episodes of two runs (or of one process and N ranks) can be compared byte for byte.
Under `torchrun` the seeded episodes are split across ranks and merged in episode order. Imports neither Hydra
nor torch (a scorer agent's scorer does).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

from jetgym.runs import ranks as ranks_
from jetgym.runs.folder import (
    LOCK,
    append_jsonl,
    folder_lock,
    make_folder,
    read_jsonl,
    refuse_other_jobs,
    refuse_results,
    write_json,
    write_text,
)

STEPS = "steps.jsonl"
EPISODES = "episodes.jsonl"
TIMINGS = (
    "timings.jsonl"  # per episode: decision and wall seconds (kept out of episodes.jsonl, which repeats byte for byte)
)
TIMING_FIELDS = ("decision_seconds", "decisions_per_second", "wall_seconds")
SUMMARY = "summary.json"
REPORT = "report.md"
RESULTS = tuple(name.replace(".", "*.", 1) for name in (STEPS, EPISODES, TIMINGS, SUMMARY, REPORT)) + ("episode_*.gif",)

VideoWriter = Callable[[Sequence[Any], Path, float], Path]


def run_episodes(
    env: Any,
    agent: Any,
    output_dir: str | os.PathLike,
    *,
    episodes: int = 1,
    seed: int = 0,
    video: bool = True,
    write_video: VideoWriter | None = None,
    about: dict | None = None,
    settings: dict | None = None,
    gpu: bool = False,
    rank_timeout_s: float = 1800.0,
    quiet: bool = False,
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    """Play `episodes` episodes (seeds seed, seed+1, ...) into `output_dir`; return the summary.

    env: a Gymnasium env (or vector env) whose `info["candidates"]` holds the candidate set
    (`jetgym.envs.candidates.CandidateActions`), or a function of no arguments that makes one (called once
    the folder is locked and checked; the runner then closes it). agent: an agent (`reset`, `act`), or a
    function `env -> agent`. video: annotate the frames of a single env that renders `rgb_array` and write one
    GIF per episode with `write_video(frames, path, fps)` (default: `jetgym.runs.video.write_gif`). about:
    summary fields over the defaults (`env` = {id, kwargs}, `agent` = {name}, the agent's `scorer.describe()`
    and model). settings:
    what every rank must agree on under torchrun (default: episodes and seed). gpu: join the ranks with nccl.
    on_start: called (rank 0) with the folder once it is locked and checked and the env and agent are built,
    before the first step (the console job writes `.hydra/` then).

    A folder that already holds episode results (logs, summary, report or GIFs) is refused, and so is a folder
    another kind of job wrote (QA, training; the message names it) or another run is writing into (a lock):
    nothing is deleted or mixed."""
    if not output_dir:
        raise ValueError("run_episodes needs an output folder: set output_dir")
    if not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
    out = make_folder(output_dir)
    ranks = ranks_.current()
    try:
        with folder_lock(out, "jetgym-episode", ranks.suffix(LOCK)):
            refuse_other_jobs(out, "jetgym-episode")
            refuse_results(out, RESULTS, what="episode results")
            return _play(
                env,
                agent,
                out,
                episodes,
                seed,
                video,
                write_video,
                about,
                settings,
                gpu,
                rank_timeout_s,
                quiet,
                ranks,
                on_start,
            )
    finally:
        ranks_.finish(ranks)


def _play(
    env: Any,
    agent: Any,
    out: Path,
    episodes: int,
    seed: int,
    video: bool,
    write_video: VideoWriter | None,
    about: dict | None,
    settings: dict | None,
    gpu: bool,
    rank_timeout_s: float,
    quiet: bool,
    ranks: ranks_.Ranks,
    on_start: Callable[[Path], None] | None = None,
) -> dict:
    """Under torchrun, rank R plays the episodes n with n % WORLD_SIZE == R (seed + n, as one process would) into
    its own files; rank 0 merges them in episode order once every rank is done."""
    from jetgym.agents import rollout
    from jetgym.runs.video import annotate, end_lines, offscreen, step_lines, write_gif

    write_video = write_video or write_gif
    owned = callable(env) and not hasattr(env, "reset")
    env = env() if owned else env
    try:
        num_envs = int(getattr(env, "num_envs", 1))
        numbers = None
        if ranks.distributed:
            if num_envs > 1:
                raise ValueError("under torchrun each rank plays single envs: set env.num_envs=1 (or run one process)")
            ranks_.init(ranks, rank_timeout_s, gpu=gpu)
            ranks_.agree(ranks, {"episodes": episodes, "seed": seed} if settings is None else settings)
            numbers = [n for n in range(episodes) if n % ranks.world_size == ranks.rank]
        steps_file, episodes_file, timings_file = (out / ranks.suffix(name) for name in (STEPS, EPISODES, TIMINGS))
        frames: list = []
        fps = env.metadata.get("render_fps") or 30
        if video and num_envs > 1 and not quiet:
            print(f"video: none with env.num_envs={num_envs} (GIFs are written for single envs)")

        def on_step(row: dict, frame) -> None:
            append_jsonl(steps_file, [row], what=f"step {row['step']} of episode {row['episode']}", sync=False)
            if video and frame is not None:
                probs = row["probs"] or {}
                frames.append(
                    annotate(
                        frame,
                        step_lines(
                            row["step"],
                            row["text"],
                            row["reward"],
                            row["return"],
                            list(probs),
                            list(probs.values()) or None,
                        ),
                    )
                )

        def on_end(episode: dict, frame) -> None:
            episode["video"] = None
            if frames:
                if frame is not None:
                    frames.append(annotate(frame, end_lines(episode)))
                episode["video"] = write_video(frames, out / f"episode_{episode['episode']:03d}.gif", fps).name
                frames.clear()
            timing = {"episode": episode["episode"], **{key: episode[key] for key in TIMING_FIELDS}}
            append_jsonl(
                episodes_file,
                [{k: v for k, v in episode.items() if k not in TIMING_FIELDS}],
                what=f"episode {episode['episode']}",
                sync=False,
            )
            append_jsonl(timings_file, [timing], what=f"the timing of episode {episode['episode']}", sync=False)

        agent = agent if hasattr(agent, "act") else agent(env)
        if ranks.rank == 0 and on_start is not None:
            on_start(out)
        with offscreen(env):  # frames drawn without a display: no XDG_RUNTIME_DIR line on stderr
            played = rollout(env, agent, episodes, seed, on_step, on_end, progress=not quiet, numbers=numbers)
        described = {**_about(env, agent), **(about or {})}
        if getattr(agent, "policy", None):  # the scorer agent's policy as played (`auto` resolved on this env)
            described["agent"] = {**described["agent"], "played_policy": agent.policy}
    finally:
        if owned:
            env.close()
    if ranks.distributed:
        ranks_.wait_for_all(ranks, rank_timeout_s)
        if ranks.rank != 0:
            return {"rank": ranks.rank, "episodes": len(played)}
        order = list(range(episodes))
        for name in (EPISODES, TIMINGS):
            ranks_.merge_jsonl(out, name, ranks.world_size, order, key="episode")
        ranks_.merge_jsonl(out, STEPS, ranks.world_size, None, key=("episode", "step"))
        timings = {row["episode"]: row for row in read_jsonl(out / TIMINGS, what="timing")}
        played = [{**row, **timings[row["episode"]]} for row in read_jsonl(out / EPISODES, what="episode")]
    summary = summarize(played, seed, described)
    write_json(out / SUMMARY, summary, what="the summary")
    write_text(out / REPORT, render_report(summary))
    if not quiet:
        print(
            f"mean return {summary['mean_return']:.2f} over {summary['episodes']} episode(s); "
            f"logs: {(out / STEPS).resolve()}, {(out / EPISODES).resolve()}"
        )
        for row in played:
            if row["video"]:
                print(f"video: {(out / row['video']).resolve()}")
    return summary


def _about(env: Any, agent: Any) -> dict:
    """What a summary says about a run made from objects: the env's id and kwargs, the agent's class, its scorer."""
    spec = getattr(env, "spec", None) or getattr(getattr(env, "unwrapped", None), "spec", None)
    scorer = getattr(agent, "scorer", None)
    described = None if scorer is None else scorer.describe()
    return {
        "env": {
            "id": getattr(spec, "id", None) or type(env).__name__,
            "kwargs": dict(getattr(spec, "kwargs", {}) or {}),
        },
        "agent": {"name": type(agent).__name__},
        "scorer": described,
        "model": None if described is None else described.get("model"),
    }


def summarize(episodes: list[dict], seed: int, about: dict) -> dict:
    """summary.json: returns, lengths, kills, decision rate and end reasons over the episodes, with `about`."""
    returns = [e["return"] for e in episodes]
    kills = [e["kills"] for e in episodes if e["kills"] is not None]
    decisions = sum(e["length"] for e in episodes)
    thinking = sum(e["decision_seconds"] for e in episodes)
    return {
        "episodes": len(episodes),
        "mean_return": statistics.fmean(returns),
        "std_return": statistics.pstdev(returns) if len(returns) > 1 else 0.0,
        "mean_length": statistics.fmean(e["length"] for e in episodes),
        "mean_kills": statistics.fmean(kills) if kills else None,
        "decisions": decisions,
        "decisions_per_second": decisions / thinking if thinking > 0 else None,
        "ends": {end: sum(e["end"] == end for e in episodes) for end in sorted({e["end"] for e in episodes})},
        "seed": seed,
        "scorer": None,
        "model": None,
        **about,
    }


def render_report(summary: dict) -> str:
    import json

    kills = "n/a" if summary["mean_kills"] is None else f"{summary['mean_kills']:.2f}"
    rate = "n/a" if summary["decisions_per_second"] is None else f"{summary['decisions_per_second']:.1f}"
    return (
        f"# Episodes: {summary['env']['id']}, agent {summary['agent']['name']}\n\n"
        "| episodes | mean return | std | mean length | mean kills | decisions/s | ends |\n|---|---|---|---|---|---|---|\n"
        f"| {summary['episodes']} | {summary['mean_return']:.2f} | {summary['std_return']:.2f} | {summary['mean_length']:.1f} "
        f"| {kills} | {rate} | {', '.join(f'{k}: {v}' for k, v in summary['ends'].items())} |\n\n"
        f"Seeds {summary['seed']}..{summary['seed'] + summary['episodes'] - 1}; env options "
        f"{json.dumps(summary['env'].get('kwargs', {}), sort_keys=True)}. Decisions/s counts the agent's "
        "time only (question, scoring, choice), not the env.\n"
    )
