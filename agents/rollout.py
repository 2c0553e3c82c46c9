"""`rollout`: the episode loop every caller shares (the CLI, the benchmarks, library users).

The env must put the admissible actions in `info["candidates"]` (wrap it with
`jetgym.envs.CandidateActions`). The agent sees the observation and the candidate set only. Hooks receive
plain dicts (JSON-able) and, when the env renders `rgb_array`, the frame the agent acted on.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from tqdm import tqdm

StepHook = Callable[[dict, Any], None]


def _candidates(info: dict):
    try:
        return info["candidates"]
    except KeyError:
        raise ValueError("the env puts no candidate set in info['candidates']: wrap it with "
                         "jetgym.envs.CandidateActions(env, texts=[...])") from None


def _frame(env):
    return env.render() if getattr(env, "render_mode", None) == "rgb_array" else None


def _status(info: dict) -> Optional[dict]:
    """The numbers the player sees, when the env reports them in `info["status"]`."""
    status = info.get("status")
    return None if status is None else {name: int(value) for name, value in status.items()}


def play(env, agent, seed: int, number: int = 0, on_step: StepHook | None = None,
         on_end: StepHook | None = None, progress: bool = False) -> dict:
    """One seeded episode; returns its summary (return, length, end reason, decision time)."""
    started = time.monotonic()
    obs, info = env.reset(seed=seed)
    agent.reset(seed)
    total, step, thinking = 0.0, 0, 0.0
    terminated = truncated = False
    bar = tqdm(desc=f"episode {number}", unit="step", disable=not progress, leave=False)
    while not (terminated or truncated):
        candidates = _candidates(info)
        frame, seen = _frame(env), _status(info)
        tick = time.monotonic()
        act = agent.act(obs, candidates)
        thinking += time.monotonic() - tick
        obs, reward, terminated, truncated, info = env.step(act.action)
        total += float(reward)
        row = {
            "episode": number, "seed": seed, "step": step, "action": act.label, "text": act.text,
            "probs": None if act.probs is None else dict(zip(candidates.labels, act.probs)),
            "question": act.question, "status": seen, "reward": float(reward), "return": total,
            "terminated": bool(terminated), "truncated": bool(truncated),
        }
        if on_step is not None:
            on_step(row, frame)
        step += 1
        bar.update()
    bar.close()
    final = _status(info)
    episode = {
        "episode": number, "seed": seed, "return": total, "length": step,
        "kills": None if final is None else final.get("kills"), "final_status": final,
        "end": info.get("truncated_reason") or info.get("terminated_reason") or ("terminated" if terminated else "truncated"),
        "terminated": bool(terminated), "truncated": bool(truncated),
        "engine_restarts": info.get("engine_restarts", 0), "decision_seconds": round(thinking, 4),
        "decisions_per_second": step / thinking if thinking > 0 else None,
        "wall_seconds": round(time.monotonic() - started, 4),
    }
    if on_end is not None:
        on_end(episode, _frame(env))
    return episode


def rollout(env, agent, episodes: int = 1, seed: int = 0, on_step: StepHook | None = None,
            on_end: StepHook | None = None, progress: bool = True) -> list[dict]:
    """Play `episodes` episodes with seeds seed, seed+1, ...; returns one summary dict per episode.

    on_step(step_row, frame) after every decision; on_end(episode_row, last_frame) after every episode."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    return [play(env, agent, seed + number, number, on_step, on_end, progress and episodes == 1)
            for number in tqdm(range(episodes), desc="episodes", unit="ep", disable=not progress or episodes == 1)]
