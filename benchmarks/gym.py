"""Gymnasium toy-text benchmark; writes the `gym` section of docs/benchmarks.md (with --docs).

1. FrozenLake-v1 (4x4, slippery) and Taxi-v4 (action mask honoured): success rate and return per episode, the
   `scorer` agent (embedded model, jet) vs `random`, seeded episodes seed..seed+N-1, played on a vector env
   (`env.num_envs` sub-envs, one scorer call per vector step; the same choices as one env at a time). Mean with
   a 95% bootstrap interval over episodes (episodes are independent).
2. Scorer decisions/s on Taxi-v4: a vector env of 1, 4 and 16 sub-envs (one `decide_many` per vector step)
   against sequential calls (16 sub-envs, one `decide` per sub-env). Methods interleaved in every round after a
   warm-up; median over rounds, min-max, and the first round. Only the agent's time is counted.

The model runs in the dtype `jetgym-episode` uses (`placement.dtype=auto`: bf16 on CPUs with native bf16).

    nice .venv/bin/python -m benchmarks.gym --docs
    nice .venv/bin/python -m benchmarks.gym --model-episodes frozenlake=100 taxi=20 --rounds 2
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from jetgym.questions.bootstrap import bootstrap
from jetgym.agents.rollout import env_reset, env_step

ENVS = {"frozenlake": "FrozenLake-v1", "taxi": "Taxi-v4"}


def interval(values, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap interval (`jetgym.questions.bootstrap.bootstrap`)."""
    found = bootstrap(values, seed=seed)
    return found.estimate, found.low, found.high


def success(env_name: str, episode: dict) -> bool:
    """FrozenLake: the goal was reached (reward 1); Taxi: the passenger was delivered (the only termination)."""
    return episode["return"] > 0 if env_name == "frozenlake" else bool(episode["terminated"])


def play(env_name: str, agent_name: str, episodes: int, seed: int, num_envs: int, scorer=None) -> dict:
    from jetgym.agents import rollout
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.build import build_agent, make_env

    config = to_config(
        compose("episode", [f"env={env_name}", f"agent={agent_name}", f"env.num_envs={min(num_envs, episodes)}"])
    )
    env = make_env(config)
    try:
        agent, _ = build_agent(config, scorer=scorer, env=env)
        started = time.monotonic()
        rows = rollout(env, agent, episodes, seed, progress=True)
        wall = time.monotonic() - started
    finally:
        env.close()
    returns = [r["return"] for r in rows]
    wins = [float(success(env_name, r)) for r in rows]
    decisions = sum(r["length"] for r in rows)
    return {
        "env": ENVS[env_name],
        "agent": agent_name,
        "episodes": len(rows),
        "seeds": [seed, seed + len(rows) - 1],
        "return": interval(returns),
        "success": interval(wins),
        "mean_length": statistics.fmean(r["length"] for r in rows),
        "decisions": decisions,
        "wall_seconds": round(wall, 2),
    }


def decision_rate(scorer, num_envs: int, batched: bool, steps: int, seed: int) -> dict:
    """Agent decisions/s over `steps` vector steps of Taxi-v4 (same-step autoreset)."""
    from jetgym.agents import make_agent
    from jetgym.agents.rollout import _split, slot_info
    from jetgym.envs.candidates import make_vector_env
    from jetgym.scripts.config import compose, to_config

    texts = to_config(compose("episode", ["env=taxi"])).env
    envs = make_vector_env("Taxi-v4", num_envs, texts=list(texts.action_texts), autoreset="same_step")
    agent = make_agent("scorer", scorer=scorer, env=envs, task=texts.task)
    spent, decisions = 0.0, 0
    try:
        obs, info = env_reset(envs, seed)
        for slot in range(num_envs):
            agent.reset(seed + slot, slot=slot)
        for _ in range(steps):
            observations = _split(envs.observation_space, obs)
            sets = [slot_info(info, i)["candidates"] for i in range(num_envs)]
            tick = time.perf_counter()
            if batched:
                acts = agent.act_many(observations, sets)
            else:
                acts = [agent.act(o, c, slot=i) for i, (o, c) in enumerate(zip(observations, sets))]
            spent += time.perf_counter() - tick
            decisions += len(acts)
            obs, _, _, _, info = env_step(envs, np.array([a.action for a in acts]))
    finally:
        envs.close()
    return {"decisions": decisions, "seconds": spent, "decisions_per_second": decisions / spent}


def bench(
    episodes: int = 100,
    model_episodes: dict[str, int] | None = None,
    seed: int = 1000,
    num_envs: int = 16,
    steps: int = 4,
    rounds: int = 3,
    output_dir: str = "outputs/bench_gym",
    docs: bool = False,
) -> dict:
    import torch

    from jetgym.scorers import make_scorer
    from benchmarks.doc import write_results

    model_episodes = {name: (model_episodes or {}).get(name, episodes) for name in ENVS}
    started = time.monotonic()
    scorer = make_scorer("jet", model="smollm2-135m-instruct", placement={"device": "cpu", "dtype": "auto"})
    methods = [
        ("sequential, 16 sub-envs", 16, False),
        ("vector, 1 sub-env", 1, True),
        ("vector, 4 sub-envs", 4, True),
        ("vector, 16 sub-envs", 16, True),
    ]
    games = []
    for env_name in ENVS:
        games.append(play(env_name, "random", episodes, seed, num_envs))
        print(games[-1], flush=True)
    games.append(play("frozenlake", "scorer", model_episodes["frozenlake"], seed, num_envs, scorer=scorer))
    print(games[-1], flush=True)
    decision_rate(scorer, 4, True, 1, seed=0)  # warm-up
    timings: dict[str, list[float]] = {name: [] for name, _, _ in methods}
    for round_ in range(rounds):
        for name, k, batched in methods:
            timings[name].append(
                decision_rate(scorer, k, batched, steps, seed=seed + 100 * round_)["decisions_per_second"]
            )
            print(name, timings[name][-1], flush=True)
    rates = {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v), "first": v[0], "rounds": v}
        for name, v in timings.items()
    }
    games.append(play("taxi", "scorer", model_episodes["taxi"], seed, num_envs, scorer=scorer))
    print(games[-1], flush=True)
    games = sorted(games, key=lambda g: (g["env"], g["agent"]))
    results = {
        "games": games,
        "decision_rates": rates,
        "steps_per_round": steps,
        "rounds": rounds,
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "dtype": scorer.describe()["dtype_used"],
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    body = render(results, episodes, model_episodes, seed, num_envs)
    path = write_results(output_dir, "gym", results, body, docs=docs)
    print(body)
    print(f"written: {path}")
    return results


def _ci(triple, fmt: str) -> str:
    mean, low, high = triple
    return f"{mean:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def render(results: dict, episodes: int, model_episodes: dict[str, int], seed: int, num_envs: int) -> str:
    counts = " ".join(f"{name}={n}" for name, n in model_episodes.items())
    lines = [
        "## Gymnasium toy text: FrozenLake-v1 and Taxi-v4",
        "",
        f"`nice .venv/bin/python -m benchmarks.gym --episodes {episodes} --model-episodes {counts} --docs` "
        f"({results['machine']}, {results['dtype']}, embedded SmolLM2-135M-Instruct, jet scorer, chat template; "
        f"whole run {results['wall_seconds']:.0f} s). Ready configs `env=frozenlake` (4x4, slippery) and `env=taxi` "
        f"(the env's action mask removes illegal actions from the candidates); seeds {seed}.. ; played on "
        f"{num_envs} sub-envs at once (one scorer call per vector step; the choices equal one env at a time). "
        "Success: FrozenLake goal reached; Taxi passenger delivered. Mean with a 95% bootstrap interval over episodes.",
        "",
        "| env | agent | episodes | success | return | mean length | decisions | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in results["games"]:
        lines.append(
            f"| {g['env']} | {g['agent']} | {g['episodes']} | {_ci(g['success'], '.2f')} | {_ci(g['return'], '.2f')} "
            f"| {g['mean_length']:.1f} | {g['decisions']} | {g['wall_seconds']:.0f} |"
        )
    fewer = {name: n for name, n in model_episodes.items() if n < episodes}
    if fewer:
        lines += [
            "",
            "The scorer played fewer episodes than random on "
            + ", ".join(f"{ENVS[k]} ({n}, not {episodes})" for k, n in fewer.items())
            + ": a scorer episode is up to 100 (FrozenLake) or 200 (Taxi) model "
            "decisions on a 2-core CPU. Its seeds are the first ones of random's.",
        ]
    if results["rounds"] < 3:
        lines += [
            "",
            f"Only {results['rounds']} timing round(s) of {results['steps_per_round']} vector step(s): "
            "the shared CPU was too loaded for more in this run; treat the rates as rough.",
        ]
    lines += [
        "",
        f"Scorer decisions/s on Taxi-v4 ({results['steps_per_round']} vector steps per measurement, "
        f"{results['rounds']} interleaved rounds after a warm-up; agent time only):",
        "",
        "| method | decisions/s median | min–max | first round |",
        "|---|---|---|---|",
    ]
    for name, r in results["decision_rates"].items():
        lines.append(f"| {name} | {r['median']:.1f} | {r['min']:.1f}–{r['max']:.1f} | {r['first']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument(
        "--model-episodes",
        nargs="*",
        default=[],
        metavar="ENV=N",
        help=f"scorer episodes per env, e.g. taxi=20 (envs: {', '.join(ENVS)}; default: --episodes)",
    )
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output-dir", default="outputs/bench_gym")
    parser.add_argument("--docs", action="store_true", help="also write docs/benchmarks.md (source checkout)")
    args = parser.parse_args(argv)
    from benchmarks.doc import parse_counts

    counts = parse_counts(parser, "--model-episodes", "ENV", args.model_episodes, list(ENVS), 1)
    bench(args.episodes, counts, args.seed, args.num_envs, args.steps, args.rounds, args.output_dir, args.docs)


if __name__ == "__main__":
    main()
