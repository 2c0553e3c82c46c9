"""ViZDoom control-loop benchmark; writes the `vizdoom` section of docs/benchmarks.md.

1. Decisions/s of the `scorer` agent with the embedded model, prefix reuse on (`packed`: the question's
   prefix and all nine controls in one masked forward call) vs off (`independent`: one full forward per
   control), measured over the same seeded defend-the-center steps.
2. Mean return over seeded defend-the-center episodes for `scorer` (jet, packed), `random`, `scripted`.

    .venv/bin/python -m jetgym.scripts.bench_episode              # 10 episodes of 210 tics, frame skip 7
    .venv/bin/python -m jetgym.scripts.bench_episode --episodes 20 --episode-timeout 2100 --frame-skip 4
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch
from jetgym.scripts.benchmarks_doc import write_results
from jetgym.scripts.config import compose, scorer_options, to_config
from jetgym.scripts.episode import make_env, run_episodes

AGENTS = ("scorer", "random", "scripted")


class CountingAgent:
    """Passes decisions through and counts the scorer's forward calls."""

    def __init__(self, agent):
        self.agent, self.forward_calls = agent, 0

    def reset(self, seed=None):
        self.agent.reset(seed)

    def act(self, observation, candidates):
        act = self.agent.act(observation, candidates)
        self.forward_calls += act.usage["forward_calls"]
        return act


def decision_rate(config, scorer, seed: int) -> dict:
    """Agent decisions/s over one seeded episode (the engine's time is excluded)."""
    from jetgym.agents import make_agent, rollout

    env = make_env(config)
    agent = CountingAgent(make_agent("scorer", scorer=scorer, task=env.unwrapped.task, memory=config.agent.memory,
                                     perception=config.agent.perception))
    try:
        (episode,) = rollout(env, agent, 1, seed, progress=False)
    finally:
        env.close()
    done = episode["length"]
    return {"decisions": done, "seconds": episode["decision_seconds"],
            "decisions_per_second": done / episode["decision_seconds"], "forward_calls_per_decision": agent.forward_calls / done}


def bench(episodes: int = 10, episode_timeout: int = 210, frame_skip: int = 7, seed: int = 0,
          output_dir: str = "outputs/bench_episode", write_doc: bool = False) -> dict:
    from jetgym.scorers import make_scorer

    started = time.monotonic()
    out = Path(output_dir)
    base = [f"env.kwargs.episode_timeout={episode_timeout}", f"env.kwargs.frame_skip={frame_skip}", f"seed={seed}",
            f"episodes={episodes}", "video=false"]
    config = to_config(compose("episode", base + [f"output_dir={out}"]))
    options = {**scorer_options(config), "schedule": "packed"}
    packed = make_scorer("jet", **options)
    independent = make_scorer("jet", **{**options, "model": packed.loaded, "schedule": "independent"})
    rates = {name: decision_rate(config, scorer, seed) for name, scorer in
             (("packed", packed), ("independent", independent))}
    results = {}
    for agent in AGENTS:
        summary = run_episodes(compose("episode", base + [f"agent={agent}", f"output_dir={out / agent}"]),
                               scorer=packed if agent == "scorer" else None, quiet=True)
        results[agent] = summary
        print(f"{agent}: mean return {summary['mean_return']:.2f} +- {summary['std_return']:.2f}", flush=True)
    report = {"rates": rates, "returns": {k: {key: v[key] for key in ("mean_return", "std_return", "mean_kills",
                                                                         "mean_length", "episodes", "ends",
                                                                         "decisions_per_second")}
                                          for k, v in results.items()},
              "episode_timeout": episode_timeout, "frame_skip": frame_skip, "seed": seed,
              "torch_threads": torch.get_num_threads(), "wall_seconds": time.monotonic() - started}
    write_results(out, "vizdoom", report, render(report, episodes), docs=write_doc)
    print(render(report, episodes))
    return report


def render(report: dict, episodes: int) -> str:
    rates, returns = report["rates"], report["returns"]
    speedup = rates["packed"]["decisions_per_second"] / rates["independent"]["decisions_per_second"]
    lines = [
        "## ViZDoom control loop (defend the center)",
        "",
        f"Command: `.venv/bin/python -m jetgym.scripts.bench_episode --docs --episodes {episodes} --episode-timeout "
        f"{report['episode_timeout']} --frame-skip {report['frame_skip']}` "
        f"({platform.machine()} CPU, {report['torch_threads']} torch threads, embedded SmolLM2-135M-Instruct fp32, "
        f"chat template, `perception=describe`, memory 4; whole run {report['wall_seconds']:.0f} s).",
        "",
        "| schedule | prefix reuse | decisions | forward calls / decision | decisions/s |",
        "|---|---|---|---|---|",
    ]
    for name, reuse in (("packed", "on"), ("independent", "off")):
        r = rates[name]
        lines.append(f"| {name} | {reuse} | {r['decisions']} | {r['forward_calls_per_decision']:.1f} | {r['decisions_per_second']:.2f} |")
    lines += [
        "",
        f"Prefix reuse speeds the loop up {speedup:.1f}x. Decisions/s times the agent only (question, perception, "
        "scoring, choice), not the engine.",
        "",
        f"Mean return over {episodes} seeded episodes (seeds {report['seed']}..{report['seed'] + episodes - 1}), "
        f"{report['episode_timeout']} tics each ({report['episode_timeout'] / 35:.1f} s of game time), frame skip "
        f"{report['frame_skip']}. Return = kills - 1 on death.",
        "",
        "| agent | mean return | std | mean kills | mean length (decisions) | ends |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in (("scorer", "scorer (jet, packed)"), ("random", "random"), ("scripted", "scripted")):
        r = returns[name]
        ends = ", ".join(f"{k}: {v}" for k, v in r["ends"].items())
        lines.append(f"| {label} | {r['mean_return']:.2f} | {r['std_return']:.2f} | {r['mean_kills']:.2f} | {r['mean_length']:.1f} | {ends} |")
    lines += ["", "The machine was shared with other jobs while this ran; rates are indicative."]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--episode-timeout", type=int, default=210, help="tics per episode (35 tics = 1 s)")
    parser.add_argument("--frame-skip", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="outputs/bench_episode")
    parser.add_argument("--docs", action="store_true", help="also write docs/benchmarks.md (from a checkout)")
    args = parser.parse_args(argv)
    bench(args.episodes, args.episode_timeout, args.frame_skip, args.seed, args.output_dir, args.docs)


if __name__ == "__main__":
    main()
