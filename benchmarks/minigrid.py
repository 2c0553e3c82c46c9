"""MiniGrid / BabyAI zero-shot benchmark; writes the `minigrid` section of docs/benchmarks.md (with --docs).

For each ready config (`conf/env/<name>.yaml`), the same seeded episodes (seeds seed..seed+N-1) are played by
`random` and by the `scorer` agent (the episode config's defaults: embedded model, jet, `placement.dtype=auto`,
no worked examples: zero-shot), on a vector env of `--num-envs` sub-envs (one scorer call per vector step; the
same choices as one env at a time). Success: the episode ended with a positive reward (MiniGrid pays
1 - 0.9 * steps / max_steps on success, 0 otherwise). Mean with a 95% bootstrap interval over episodes, and the
scorer's paired success difference to random (same seeds). The scorer plays in rounds of `--num-envs` seeds over
every env, and each round is written at once (JSON, and the docs section with --docs), so a stopped run covers
every env with the seeds it finished.

    nice .venv/bin/python -m benchmarks.minigrid --docs
    nice .venv/bin/python -m benchmarks.minigrid --envs minigrid_empty_5x5 --episodes 10
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time


from benchmarks.gym import interval

ENVS = ("babyai_goto_red_ball_grey", "babyai_goto_obj", "minigrid_empty_5x5")


def play(
    env_name: str, agent_name: str, episodes: int, seed: int, num_envs: int, scorer=None
) -> tuple[str, list[dict]]:
    """(env id, episode rows) of one agent on one env config, seeds seed..seed+episodes-1."""
    from jetgym.agents import rollout
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.build import build_agent, make_env

    overrides = [f"env={env_name}", f"agent={agent_name}", f"env.num_envs={min(num_envs, episodes)}"]
    config = to_config(compose("episode", overrides))
    env = make_env(config)
    try:
        agent, _ = build_agent(config, scorer=scorer, env=env)
        rows = rollout(env, agent, episodes, seed, progress=True)
    finally:
        env.close()
    return config.env.id, rows


def summarize(env_name: str, env_id: str, agent_name: str, rows: list[dict], wall: float) -> dict:
    """Per-episode returns and successes (in seed order) and the agent's decision rate."""
    rows = sorted(rows, key=lambda r: r["seed"])
    thinking = sum(r["decision_seconds"] for r in rows)
    decisions = sum(r["length"] for r in rows)
    return {
        "env": env_name,
        "id": env_id,
        "agent": agent_name,
        "episodes": len(rows),
        "seeds": [r["seed"] for r in rows],
        "returns": [r["return"] for r in rows],
        "successes": [float(r["return"] > 0) for r in rows],
        "lengths": [r["length"] for r in rows],
        "decisions": decisions,
        "decisions_per_second": decisions / thinking if thinking > 0 else None,
        "wall_seconds": round(wall, 1),
    }


def paired(scorer: dict, random: dict, seed: int = 0) -> tuple[float, float, float]:
    """Mean success difference scorer - random over the seeds both played, with a 95% paired bootstrap interval."""
    baseline = dict(zip(random["seeds"], random["successes"]))
    diffs = [won - baseline[s] for s, won in zip(scorer["seeds"], scorer["successes"]) if s in baseline]
    return interval(diffs, seed)


def bench(
    envs=ENVS,
    episodes: int = 100,
    seed: int = 1000,
    num_envs: int = 16,
    output_dir: str = "outputs/bench_minigrid",
    docs: bool = False,
) -> dict:
    import torch

    from jetgym.scorers import make_scorer
    from benchmarks.doc import write_results

    started = time.monotonic()
    scorer = make_scorer("jet", model="smollm2-135m-instruct", placement={"device": "cpu", "dtype": "auto"})
    results = {
        "games": [],
        "episodes": episodes,
        "seed": seed,
        "num_envs": num_envs,
        "envs": list(envs),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "dtype": None,
        "wall_seconds": None,
    }

    def save() -> None:
        results["wall_seconds"] = round(time.monotonic() - started, 1)
        write_results(output_dir, "minigrid", results, render(results), docs=docs)

    for env_name in envs:  # the cheap baselines first
        tick = time.monotonic()
        env_id, rows = play(env_name, "random", episodes, seed, num_envs)
        results["games"].append(summarize(env_name, env_id, "random", rows, time.monotonic() - tick))
    save()
    scored: dict[str, tuple[str, list[dict], float]] = {}
    for first in range(0, episodes, num_envs):  # rounds of num_envs seeds over every env: a stopped run covers all
        for env_name in envs:
            tick = time.monotonic()
            env_id, rows = play(env_name, "scorer", min(num_envs, episodes - first), seed + first, num_envs, scorer)
            _, before, spent = scored.get(env_name, (env_id, [], 0.0))
            scored[env_name] = (env_id, before + rows, spent + time.monotonic() - tick)
            results["dtype"] = scorer.describe().get("dtype_used")
            results["games"] = [g for g in results["games"] if g["agent"] == "random"] + [
                summarize(name, eid, "scorer", played, wall) for name, (eid, played, wall) in scored.items()
            ]
            print(f"scorer {env_name}: {len(scored[env_name][1])} episodes", flush=True)
            save()
    print(render(results))
    return results


def _ci(triple, fmt: str = ".2f") -> str:
    mean, low, high = triple
    return f"{mean:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def render(results: dict) -> str:
    envs = " ".join(results["envs"])
    lines = [
        "## MiniGrid / BabyAI: the scorer zero-shot vs random",
        "",
        f"`nice .venv/bin/python -m benchmarks.minigrid --envs {envs} --episodes {results['episodes']} "
        f"--docs` ({results['machine']}, {results['dtype'] or 'dtype auto'}, embedded SmolLM2-135M-Instruct, jet "
        f"scorer, chat template, no worked examples; run so far {results['wall_seconds']:.0f} s). Ready configs "
        f"`env=<name>`; the observation is the `minigrid` describer's text of the agent's 7x7 view and the mission; "
        f"candidates: MiniGrid's seven actions. Seeds {results['seed']}..; {results['num_envs']} sub-envs at once. "
        "Success: the episode ended with a positive reward. Mean with a 95% bootstrap interval over episodes; "
        "the scorer's success minus random's is paired over the same seeds.",
        "",
        "| env | agent | episodes | success | return | mean length | decisions/s | scorer - random (success) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(g["env"], g["agent"]): g for g in results["games"]}
    for g in sorted(results["games"], key=lambda g: (g["env"], g["agent"])):
        diff = ""
        if g["agent"] == "scorer" and (g["env"], "random") in by_key:
            diff = _ci(paired(g, by_key[(g["env"], "random")]), "+.2f")
        rate = "" if g["agent"] == "random" or g["decisions_per_second"] is None else f"{g['decisions_per_second']:.1f}"
        lines.append(
            f"| {g['id']} | {g['agent']} | {g['episodes']} | {_ci(interval(g['successes']))} | "
            f"{_ci(interval(g['returns']))} | {statistics.fmean(g['lengths']):.1f} | {rate} | {diff} |"
        )
    missing = [e for e in results["envs"] if (e, "scorer") not in by_key]
    short = [
        f"{g['env']} ({g['episodes']} of {results['episodes']})"
        for g in results["games"]
        if g["episodes"] < results["episodes"]
    ]
    if missing or short:
        lines += [
            "",
            "Not finished in this run: "
            + "; ".join([*(f"scorer on {e}: not started" for e in missing), *(f"{s} episodes" for s in short)])
            + ". The scorer "
            "played the first seeds in rounds of " + str(results["num_envs"]) + " per env; the paired difference uses "
            "the seeds both agents played.",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="*", default=list(ENVS), help="env configs (conf/env/<name>.yaml)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--output-dir", default="outputs/bench_minigrid")
    parser.add_argument("--docs", action="store_true", help="also write docs/benchmarks.md (source checkout)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    bench(args.envs, args.episodes, args.seed, args.num_envs, args.output_dir, args.docs)


if __name__ == "__main__":
    main()
