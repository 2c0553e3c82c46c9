"""`rollout`: the episode loop every caller shares (the CLI, the benchmarks, library users).

The env must put the admissible actions in `info["candidates"]` (wrap it with
`jetgym.envs.candidates.CandidateActions`; for a vector env, wrap its sub-envs: `make_vector_env`). The agent
sees the observation and the candidate set only. Hooks receive plain dicts (JSON-able) and, when a single env
renders `rgb_array`, the frame the agent acted on.

A vector env (anything with `num_envs`) plays K episodes at once: one `agent.act_many` call per vector step
(one `decide_many` for the scorer agent), sub-env k in agent slot k. With autoreset disabled (the
`make_vector_env` default) every finished sub-env is reset with the next episode's seed, so episode n has
seed seed+n exactly as in a sequential run; with `next_step`/`same_step` autoreset the env resets itself and
later episodes are unseeded (their rows say `seed: null`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import numpy as np
from tqdm import tqdm

StepHook = Callable[[dict, Any], None]


def env_reset(env, seed, **kwargs) -> tuple[Any, dict]:
    """`env.reset(seed=seed)` for an agent: every episode loop (rollout, training, the benchmarks) resets here."""
    return env.reset(seed=seed, **kwargs)


def env_step(env, action) -> tuple[Any, Any, Any, Any, dict]:
    """`env.step(action)` for an agent: every episode loop (rollout, training, the benchmarks) steps here."""
    return env.step(action)


def _candidates(info: dict):
    try:
        return info["candidates"]
    except KeyError:
        raise ValueError(
            "the env puts no candidate set in info['candidates']: wrap it with "
            "jetgym.envs.candidates.CandidateActions(env, texts=[...]) (vector envs: "
            "jetgym.envs.candidates.make_vector_env)"
        ) from None


def _frame(env):
    return env.render() if getattr(env, "render_mode", None) == "rgb_array" else None


def _status(info: dict) -> Optional[dict]:
    """The numbers the player sees, when the env reports them in `info["status"]`."""
    status = info.get("status")
    if status is None:
        return None
    return {
        name: (int(v) if float(v).is_integer() else float(v))
        for name, v in ((name, np.asarray(value).item()) for name, value in status.items())
    }


def _row(
    number: int,
    seed: Optional[int],
    step: int,
    act,
    candidates,
    seen,
    reward: float,
    total: float,
    terminated: bool,
    truncated: bool,
) -> dict:
    return {
        "episode": number,
        "seed": seed,
        "step": step,
        "action": act.label,
        "text": act.text,
        "probs": None if act.probs is None else dict(zip(candidates.labels, act.probs)),
        "question": act.question,
        "status": seen,
        "reward": float(reward),
        "return": total,
        "terminated": bool(terminated),
        "truncated": bool(truncated),
    }


def _episode(
    number: int,
    seed: Optional[int],
    total: float,
    steps: int,
    info: dict,
    terminated: bool,
    truncated: bool,
    thinking: float,
    started: float,
) -> dict:
    final = _status(info)
    return {
        "episode": number,
        "seed": seed,
        "return": total,
        "length": steps,
        "kills": None if final is None else final.get("kills"),
        "final_status": final,
        "end": info.get("truncated_reason")
        or info.get("terminated_reason")
        or ("terminated" if terminated else "truncated"),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "is_success": None if "is_success" not in info else bool(info["is_success"]),
        "engine_restarts": int(info.get("engine_restarts", 0)),
        "decision_seconds": round(thinking, 4),
        "decisions_per_second": steps / thinking if thinking > 0 else None,
        "wall_seconds": round(time.monotonic() - started, 4),
    }


def _state_key(obs) -> Any:
    """A hashable copy of an observation (numbers, arrays, tuples and dicts of them)."""
    if isinstance(obs, dict):
        return tuple((key, _state_key(obs[key])) for key in sorted(obs))
    if isinstance(obs, (tuple, list)):
        return tuple(_state_key(o) for o in obs)
    array = np.asarray(obs)
    return (array.dtype.str, array.shape, array.tobytes())


def _time_limit(env) -> int:
    limit = getattr(getattr(env, "spec", None), "max_episode_steps", None)
    if not limit:
        raise ValueError(
            "stop_loops needs an env with a time limit (gymnasium.make(..., max_episode_steps=N)): a "
            "loop without one never ends"
        )
    return int(limit)


def play(
    env,
    agent,
    seed: int,
    number: int = 0,
    on_step: StepHook | None = None,
    on_end: StepHook | None = None,
    progress: bool = False,
    stop_loops: bool = False,
) -> dict:
    """One seeded episode; returns its summary (return, length, end reason, decision time).

    stop_loops: for a deterministic env whose observation is its whole state, played by an agent whose choice
    depends on the observation only (e.g. the scorer agent with memory 0 and argmax): a repeated observation
    proves the episode repeats that loop to the time limit, so it stops there and the summary counts the rest
    (the loop's rewards repeated to the limit, `length` the limit, truncated; `loop_steps`: the steps not played).
    The caller vouches for determinism; nothing here can check it."""
    started = time.monotonic()
    obs, info = env_reset(env, seed)
    agent.reset(seed)
    total, step, thinking = 0.0, 0, 0.0
    terminated = truncated = False
    limit = _time_limit(env) if stop_loops else 0
    visited: dict[Any, int] = {}
    rewards: list[float] = []
    rest = 0  # steps of a proven loop left unplayed
    bar = tqdm(desc=f"episode {number}", unit="step", disable=not progress, leave=False)
    while not (terminated or truncated):
        if stop_loops:
            key = _state_key(obs)
            if key in visited:
                loop, rest = rewards[visited[key] :], limit - step
                total += sum(loop[k % len(loop)] for k in range(rest))
                truncated = True
                break
            visited[key] = step
        candidates = _candidates(info)
        frame, seen = _frame(env), _status(info)
        tick = time.monotonic()
        act = agent.act(obs, candidates)
        thinking += time.monotonic() - tick
        obs, reward, terminated, truncated, info = env_step(env, act.action)
        total += float(reward)
        rewards.append(float(reward))
        row = _row(number, seed, step, act, candidates, seen, reward, total, terminated, truncated)
        if on_step is not None:
            on_step(row, frame)
        step += 1
        bar.update()
    bar.close()
    episode = _episode(number, seed, total, step, info, terminated, truncated, thinking, started)
    if rest:
        episode.update(length=step + rest, end="loop", loop_steps=rest)
    if on_end is not None:
        on_end(episode, _frame(env))
    return episode


def slot_info(info: dict, index: int) -> dict:
    """Sub-env `index`'s part of a vector env's `info` (arrays with `_key` masks; nested dicts too)."""
    out = {}
    for key, value in info.items():
        if key.startswith("_") and key[1:] in info:
            continue
        mask = info.get(f"_{key}")
        if mask is not None and not mask[index]:
            continue
        out[key] = slot_info(value, index) if isinstance(value, dict) else value[index]
    return out


def _split(space, batch) -> list:
    from gymnasium.vector.utils import iterate

    return list(iterate(space, batch))


def play_vector(
    envs,
    agent,
    episodes: int,
    seed: int = 0,
    on_step: StepHook | None = None,
    on_end: StepHook | None = None,
    progress: bool = False,
) -> list[dict]:
    """`episodes` episodes on the K sub-envs of a vector env, one `agent.act_many` call per vector step."""
    from gymnasium.vector import AutoresetMode

    k = int(envs.num_envs)
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED):
        raise ValueError(f"unknown autoreset mode {mode!r}")
    act_many = getattr(agent, "act_many", None)
    if act_many is None:
        raise TypeError(
            f"{type(agent).__name__} has no act_many(observations, candidate_sets, slots): "
            "a vector env needs an agent that keeps one memory per sub-env (jetgym.agents.base.AgentBase)"
        )
    numbers: list[Optional[int]] = [i if i < episodes else None for i in range(k)]
    seeds: list[Optional[int]] = [seed + i for i in range(k)]
    upcoming = min(k, episodes)
    obs, info = env_reset(envs, [seed + i for i in range(k)])
    observations = _split(envs.observation_space, obs)
    sets = [_candidates(slot_info(info, i)) for i in range(k)]
    seen = [_status(slot_info(info, i)) for i in range(k)]
    totals, steps, thinking, started = [0.0] * k, [0] * k, [0.0] * k, [time.monotonic()] * k
    pending = [False] * k  # next_step autoreset: the slot's next env step is its reset
    finished: dict[int, dict] = {}
    for i in range(k):
        if numbers[i] is not None:
            agent.reset(seed + numbers[i], slot=i)
    bar = tqdm(total=episodes, desc=f"episodes ({k} envs)", unit="ep", disable=not progress)
    while any(n is not None for n in numbers):
        active = [i for i in range(k) if numbers[i] is not None and not pending[i]]
        tick = time.monotonic()
        acts = act_many([observations[i] for i in active], [sets[i] for i in active], active) if active else []
        spent = time.monotonic() - tick
        # idle slots: any admissible action, ignored; a text game's final step may list none (the slot's next
        # env step is its reset, which ignores the action)
        chosen = [sets[i].actions[0] if sets[i].actions else "" for i in range(k)]
        for i, act in zip(active, acts):
            chosen[i] = act.action
            thinking[i] += spent / len(active)
        actions = tuple(chosen) if any(isinstance(a, str) for a in chosen) else np.array(chosen)  # commands stay whole
        resetting = [i for i in range(k) if pending[i]]
        obs, rewards, terminations, truncations, info = env_step(envs, actions)
        observations = _split(envs.observation_space, obs)
        to_reset: list[int] = []
        for i, act in zip(active, acts):
            totals[i] += float(rewards[i])
            done = bool(terminations[i] or truncations[i])
            row = _row(
                numbers[i],
                seeds[i],
                steps[i],
                act,
                sets[i],
                seen[i],
                rewards[i],
                totals[i],
                terminations[i],
                truncations[i],
            )
            row["env"] = i
            if on_step is not None:
                on_step(row, None)
            steps[i] += 1
            if not done:
                continue
            final = slot_info(info, i)
            if mode == AutoresetMode.SAME_STEP:
                final = slot_info(info.get("final_info", {}), i)
            episode = _episode(
                numbers[i],
                seeds[i],
                totals[i],
                steps[i],
                final,
                terminations[i],
                truncations[i],
                thinking[i],
                started[i],
            )
            episode["env"] = i
            finished[numbers[i]] = episode
            if on_end is not None:
                on_end(episode, None)
            bar.update()
            numbers[i] = upcoming if upcoming < episodes else None
            upcoming += 1
            totals[i], steps[i], thinking[i], started[i] = 0.0, 0, 0.0, time.monotonic()
            seeds[i] = None
            if numbers[i] is not None:
                agent.reset(seed + numbers[i], slot=i)
            if mode == AutoresetMode.NEXT_STEP:
                pending[i] = True
        for i in resetting:
            pending[i] = False
        if mode == AutoresetMode.DISABLED:
            to_reset = [i for i in range(k) if terminations[i] or truncations[i]]
        for i in range(k):
            part = slot_info(info, i)
            if "candidates" in part:
                sets[i], seen[i] = part["candidates"], _status(part)
        if to_reset:
            mask = np.zeros(k, np.bool_)
            mask[to_reset] = True
            reset_seeds = [seed + numbers[i] if mask[i] and numbers[i] is not None else None for i in range(k)]
            obs, info = env_reset(envs, reset_seeds, options={"reset_mask": mask})
            fresh = _split(envs.observation_space, obs)
            for i in to_reset:
                observations[i] = fresh[i]
                part = slot_info(info, i)
                sets[i], seen[i] = _candidates(part), _status(part)
                seeds[i] = reset_seeds[i]
    bar.close()
    return [finished[n] for n in sorted(finished)]


def rollout(
    env,
    agent,
    episodes: int = 1,
    seed: int = 0,
    on_step: StepHook | None = None,
    on_end: StepHook | None = None,
    progress: bool = True,
    numbers: list[int] | None = None,
    stop_loops: bool = False,
) -> list[dict]:
    """Play `episodes` episodes with seeds seed, seed+1, ...; returns one summary dict per episode, in order.

    on_step(step_row, frame) after every decision; on_end(episode_row, last_frame) after every episode.
    A vector env (`num_envs`) plays its sub-envs at once (`play_vector`); frames are None there.
    numbers: play only these of the episodes (episode n keeps seed + n), e.g. one rank's share.
    stop_loops: end an episode at its first repeated observation and count the loop to the time limit (single
    envs, deterministic env and agent only; see `play`)."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if hasattr(env, "num_envs"):
        if numbers is not None:
            raise ValueError("a vector env plays all its episodes: pass numbers=None")
        if stop_loops:
            raise ValueError("stop_loops plays one env at a time: pass a single env, not a vector env")
        return play_vector(env, agent, episodes, seed, on_step, on_end, progress)
    numbers = range(episodes) if numbers is None else numbers
    return [
        play(env, agent, seed + number, number, on_step, on_end, progress and len(numbers) == 1, stop_loops)
        for number in tqdm(numbers, desc="episodes", unit="ep", disable=not progress or len(numbers) <= 1)
    ]
