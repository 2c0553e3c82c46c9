"""`python -m benchmarks.sb3`: the sample-efficiency reference for `jetgym-train` PPO: stable-baselines3 PPO with an MLP
(sb3-contrib MaskablePPO on Taxi, whose action mask the scorer agent also uses) on the same envs, trained for a
ladder of env-step budgets with several training seeds, each evaluated greedily on held-out seeds 0..N-1.

It answers: how many env steps does a well-kept RL library need on these envs, and how does that compare with
the env steps `jetgym-train` gets through in its time budget on this CPU (see the `train-*` sections)?

    python -m benchmarks.sb3 --docs
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from benchmarks.doc import write_results
from jetgym.agents.rollout import env_reset, env_step

ENVS = {
    "frozenlake-still": ("FrozenLake-v1", {"is_slippery": False}),
    "frozenlake": ("FrozenLake-v1", {}),
    "taxi": ("Taxi-v4", {}),
}


MASKS = {"Taxi-v4": lambda e: e.unwrapped.action_mask(e.unwrapped.s)}  # envs whose candidates are masked


def make(env_id: str, kwargs: dict):
    """The env as SB3 sees it (no jetgym wrapper); an env in MASKS gets its action mask (MaskablePPO), a MiniGrid
    env only its image observation."""
    import gymnasium as gym

    env = gym.make(env_id, **kwargs)
    if "MiniGrid-" in env_id or "BabyAI-" in env_id:  # the MLP sees the 7x7 view (the mission is text)
        from minigrid.wrappers import ImgObsWrapper

        env = ImgObsWrapper(env)
    if env_id in MASKS:
        from sb3_contrib.common.wrappers import ActionMasker

        env = ActionMasker(env, MASKS[env_id])
    return env


def train(env_id: str, kwargs: dict, steps: int, seed: int):
    """PPO with an MLP (MaskablePPO for an env in MASKS) trained for `steps` env steps."""
    if env_id in MASKS:
        from sb3_contrib import MaskablePPO as Algorithm
    else:
        from stable_baselines3 import PPO as Algorithm
    model = Algorithm("MlpPolicy", make(env_id, kwargs), seed=seed, verbose=0, device="cpu")
    return model.learn(total_timesteps=steps)


def play(env_id: str, kwargs: dict, model, seeds) -> list[dict]:
    """One greedy episode per seed: its return, whether it terminated, the final reward and info's is_success."""
    env, episodes = make(env_id, kwargs), []
    for seed in seeds:
        observation, _ = env_reset(env, seed)
        done, total, info = False, 0.0, {}
        while not done:
            masks = {"action_masks": env.action_masks()} if env_id in MASKS else {}
            action, _ = model.predict(observation, deterministic=True, **masks)
            observation, reward, terminated, truncated, info = env_step(env, int(action))
            total += float(reward)
            done = terminated or truncated
        episodes.append(
            {
                "seed": seed,
                "return": total,
                "terminated": bool(terminated),
                "final_reward": float(reward),
                "is_success": info.get("is_success"),
            }
        )
    env.close()
    return episodes


def evaluate(name: str, model, episodes: int) -> list[float]:
    """Success per held-out seed 0..episodes-1 (FrozenLake: the goal; Taxi: a delivery)."""
    env_id, kwargs = ENVS[name]
    return [
        float(e["terminated"] if name == "taxi" else e["final_reward"] > 0)
        for e in play(env_id, kwargs, model, range(episodes))
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per budget")
    parser.add_argument("--episodes", type=int, default=20, help="held-out evaluation seeds 0..N-1")
    parser.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=sorted(ENVS))
    parser.add_argument("--output-dir", default="outputs/bench-sb3")
    parser.add_argument("--docs", action="store_true", help="also write the section train-sb3 of docs/benchmarks.md")
    parser.add_argument(
        "--from-results", metavar="JSON", help="train nothing: rewrite the report of an earlier run's train_sb3.json"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1 or min(args.budgets) < 1:
        parser.error("--seeds, --episodes and every --budgets value must be >= 1")
    if args.from_results:
        import json
        from pathlib import Path

        results = json.loads(Path(args.from_results).read_text())
    else:
        results = run(args)
    body = report(results)
    write_results(args.output_dir, "train_sb3", results, body, docs=args.docs)
    print(body)


def run(args) -> dict:
    import torch

    results = {
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "command": f"python -m benchmarks.sb3 --budgets {' '.join(map(str, args.budgets))} --seeds {args.seeds} "
        f"--episodes {args.episodes}",
        "runs": [],
    }
    for name in args.envs:
        for steps in args.budgets:
            for seed in range(args.seeds):
                begun = time.perf_counter()
                model = train(*ENVS[name], steps, seed)
                seconds = time.perf_counter() - begun
                wins = evaluate(name, model, args.episodes)
                results["runs"].append(
                    {"env": name, "env_steps": steps, "seed": seed, "success": wins, "train_seconds": round(seconds, 2)}
                )
                print(f"{name} {steps} seed {seed}: success {np.mean(wins):.2f} in {seconds:.1f} s", flush=True)
    return results


def report(results: dict) -> str:
    """The markdown section: per (env, budget) each training seed's held-out success and the mean over seeds
    and held-out episodes, with a 95% bootstrap interval resampling held-out seeds (training seeds kept)."""
    from jetgym.questions.bootstrap import episode_bootstrap

    runs = results["runs"]
    seeds = sorted({r["seed"] for r in runs})
    episodes = len(runs[0]["success"])
    rows = []
    for name, steps in dict.fromkeys((r["env"], r["env_steps"]) for r in runs):
        group = [r for r in runs if (r["env"], r["env_steps"]) == (name, steps)]
        values = [win for r in group for win in r["success"]]
        mean = episode_bootstrap(values, [i for r in group for i in range(len(r["success"]))])
        env_id, kwargs = ENVS[name]
        rows.append(
            f"| {env_id} {kwargs or ''} | {steps} | "
            + ", ".join(f"{np.mean(r['success']):.2f}" for r in group)
            + f" | {mean.estimate:.2f} [{mean.low:.2f}, {mean.high:.2f}] | "
            + f"{np.median([r['train_seconds'] for r in group]):.1f} |"
        )
    budgets = " ".join(str(b) for b in sorted({r["env_steps"] for r in runs}))
    command = results.get(
        "command", f"python -m benchmarks.sb3 --budgets {budgets} --seeds {len(seeds)} --episodes {episodes}"
    )
    return "\n".join(
        [
            "## train-sb3",
            "",
            f"Command: `{command}`. stable-baselines3 PPO, MLP policy, its default hyperparameters (sb3-contrib "
            f"MaskablePPO on Taxi with the env's action mask, as the scorer agent's candidates use it); "
            f"{results['threads']} threads. Each budget trains {len(seeds)} seeds from scratch; each trained policy "
            f"plays held-out seeds 0..{episodes - 1} greedily. Success: FrozenLake goal, Taxi delivery. The mean is "
            f"over training seeds and held-out seeds, its 95% interval a bootstrap over held-out seeds (2,000 "
            f"resamples; it leaves out the spread between training seeds, which {len(seeds)} seeds cannot measure).",
            "",
            "| env | env steps | held-out success per training seed | mean [95% interval] | train seconds (median) |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )


if __name__ == "__main__":
    main()
