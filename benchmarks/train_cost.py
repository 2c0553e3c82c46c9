"""`python -m benchmarks.train_cost`: the cost of one PPO minibatch update, packed against one sequence per candidate.

The workload: minibatches of scorer-agent questions from random play of FrozenLake-v1 and Taxi-v4 (the
questions the agent asks, its controls as candidates; Taxi's mask removes some). One update = the PPO loss
of `jetgym.training.ppo` on that minibatch (fixed random advantages and returns), backward, no optimizer
step, through:
- `packed`: `jetgym.scorers.gradients` packed rows; neighbouring questions share their common prefix (the
  env's task text) once per row, the output head runs only where a candidate token is predicted;
- `per-candidate`: one full prompt + candidate sequence per candidate, right-padded into batches (how
  per-candidate trainers such as TWOSOME and GLAM compute it), the same gradients;
- `kept-trunk` (with `--lora-layers N`, the adapter on the last N layers): packed rows whose frozen layers'
  states were kept by an earlier pass over the same questions (`gradients.FrozenTrunk`: every epoch after the
  first, and PPO's later passes over a rollout), so only the trained layers run.
Both in fp32 and under bf16 autocast. The methods run in one process, interleaved (the order rotates each
round), after a warm-up; each reports the first pass, the median and the quartiles; gradient agreement with
`per-candidate` is checked in fp32. Peak memory is the process's peak resident set after each method's
rounds (it only grows, so read it in the order printed).

    python -m benchmarks.train_cost --rounds 3 --docs
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time

import numpy as np
import torch

from benchmarks.doc import rotated, spread, write_results
from jetgym.agents.rollout import env_reset, env_step

ENVS = {
    "frozenlake": (
        "FrozenLake-v1",
        {"is_slippery": True},
        ["move left", "move down", "move right", "move up"],
        "Walk from the start S to the goal G across the frozen lake without stepping into a hole H.",
    ),
    "taxi": (
        "Taxi-v4",
        {},
        ["move south", "move north", "move east", "move west", "pick up the passenger", "drop off the passenger"],
        "You drive a taxi on a 5x5 grid. Pick the passenger up and drop them at the destination.",
    ),
}


def questions_of(env_name: str, scorer, n: int, seed: int):
    """`n` questions the scorer agent asks along random play (seeded), with the index of a random action."""
    import gymnasium as gym

    from jetgym.agents import make_agent
    from jetgym.envs.candidates import CandidateActions

    env_id, kwargs, texts, task = ENVS[env_name]
    env = CandidateActions(gym.make(env_id, **kwargs), texts=texts)
    agent = make_agent("scorer", scorer=scorer, task=task, env=env)
    rng = np.random.default_rng(seed)
    out = []
    observation, info = env_reset(env, seed)
    while len(out) < n:
        candidates = info["candidates"]
        out.append((agent.question(observation, candidates), int(rng.integers(len(candidates.texts)))))
        observation, _, terminated, truncated, info = env_step(env, candidates.actions[out[-1][1]])
        if terminated or truncated:
            observation, info = env_reset(env, int(rng.integers(1 << 30)))
    return out


def one_update(policy, batch, advantages, returns, autocast: bool) -> float:
    """Forward + backward of the PPO loss on one minibatch; returns seconds."""
    questions = [q for q, _ in batch]
    policy.model.zero_grad(set_to_none=True)
    begun = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        evaluated = policy.evaluate(questions)
    new = torch.stack([lq[a] for lq, (_, a) in zip(evaluated.log_q, batch)]).float()
    ratio = torch.exp(new - new.detach())
    loss = -(ratio * advantages).mean() + 0.5 * ((evaluated.values.float() - returns) ** 2).mean()
    loss.backward()
    return time.perf_counter() - begun


def gradients(policy) -> dict:
    return {n: p.grad.detach().clone() for n, p in policy.model.named_parameters() if p.grad is not None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--minibatch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=0,
        help="LoRA on the last N layers (0: every layer); N > 0 adds the kept-trunk method",
    )
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=("fp32", "bf16"),
        default=["fp32", "bf16"],
        help="fp32 and/or bf16 autocast (bf16 backward is slow on CPUs whose torch build falls back to "
        "its reference GEMM for it)",
    )
    parser.add_argument("--output-dir", default="outputs/bench-train")
    parser.add_argument(
        "--docs",
        action="store_true",
        help="also write docs/benchmarks.md, section `train-speed` (`train-speed-last-N` with --lora-layers N)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.minibatch < 1:
        parser.error("--rounds and --minibatch must be >= 1")

    from jetgym.scorers import make_scorer
    from jetgym.training.options import LoraOptions
    from jetgym.training.policy import Policy

    scorer = make_scorer("jet", model=args.model, max_batch_tokens=args.max_batch_tokens)
    policy = Policy(scorer, LoraOptions(lora_layers=args.lora_layers), seed=0)
    trunk = policy.trunk
    workloads = {name: questions_of(name, scorer, args.minibatch, seed=100 + k) for k, name in enumerate(ENVS)}
    generator = torch.Generator().manual_seed(0)
    signals = {
        name: (torch.randn(args.minibatch, generator=generator), torch.randn(args.minibatch, generator=generator))
        for name in ENVS
    }
    schedules = ("packed", "per-candidate") + (("kept-trunk",) if trunk else ())
    methods = [f"{schedule}/{dtype}" for dtype in args.dtypes for schedule in schedules]
    schedule_of = {"packed": "packed", "per-candidate": "independent", "kept-trunk": "packed"}
    exact = [f"{schedule}/fp32" for schedule in schedules]

    def run(method: str, workload: str) -> float:
        schedule, dtype = method.split("/")
        policy.grad_schedule = schedule_of[schedule]
        policy.trunk = trunk if schedule == "kept-trunk" else None
        advantages, returns = signals[workload]
        seconds = one_update(policy, workloads[workload], advantages, returns, dtype == "bf16")
        print(f"{workload} {method}: {seconds:.2f} s", flush=True)
        return seconds

    agreement = {}
    for workload in ENVS:  # warm-up, and the fp32 gradient check
        grads = {}
        for method in exact:  # kept-trunk's warm-up keeps the states its timed passes read
            run(method, workload)
            grads[method] = gradients(policy)
        reference = grads["per-candidate/fp32"]
        agreement[workload] = {
            method.split("/")[0]: max(
                float((grads[method][n] - reference[n]).abs().max() / (reference[n].abs().max() + 1e-12))
                for n in reference
            )
            for method in exact
            if method != "per-candidate/fp32"
        }
        for method in [m for m in methods if m.endswith("bf16")]:
            run(method, workload)
    times = {(m, w): [] for m in methods for w in ENVS}
    peak = {}
    for r in range(args.rounds):
        for workload in ENVS:
            for method in rotated(methods, r):
                times[(method, workload)].append(run(method, workload))
                peak[method] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tokens = {
        w: sum(
            len(p.encoded.prefix) + len(c)
            for p in scorer.prepare([q for q, _ in workloads[w]])
            for c in p.encoded.continuations
        )
        for w in ENVS
    }
    results = {
        "model": args.model,
        "minibatch": args.minibatch,
        "rounds": args.rounds,
        "lora_layers": args.lora_layers,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "gradient_max_relative_difference": agreement,
        "timings": {f"{m} {w}": spread(v) for (m, w), v in times.items()},
        "peak_rss_mib": peak,
        "per_candidate_tokens": tokens,
    }
    layers = f"the last {args.lora_layers} layers" if args.lora_layers else "every layer"
    fast = [s for s in schedules if s != "per-candidate"]
    name = "train_speed" + (f"_last_{args.lora_layers}" if args.lora_layers else "")
    lines = [
        f"## {name.replace('_', '-')}",
        "",
        "Command: `python -m benchmarks.train_cost "
        + f"--rounds {args.rounds} --minibatch {args.minibatch}"
        + (f" --lora-layers {args.lora_layers}" if args.lora_layers else "")
        + f" --dtypes {' '.join(args.dtypes)}"
        + (" --docs`" if args.docs else "`"),
        "",
        f"One PPO minibatch update (forward + backward of the clipped loss and the value loss, LoRA r=8 on {layers} "
        f"of the embedded model, {args.minibatch} questions), {torch.get_num_threads()} threads, "
        f"{args.rounds} interleaved rounds after a warm-up. Seconds: median [q1, q3], first pass; speed-up: "
        f"per-candidate seconds over the method's, median over rounds (range).",
        "",
        "| env | dtype | " + " | ".join(schedules) + " | " + " | ".join(f"speed-up {s}" for s in fast) + " |",
        "|---|---|" + "---|" * (len(schedules) + len(fast)),
    ]
    for workload in ENVS:
        for dtype in args.dtypes:
            cells = []
            for schedule in schedules:
                sa = spread(times[(f"{schedule}/{dtype}", workload)])
                cells.append(f"{sa['median']:.2f} [{sa['q1']:.2f}, {sa['q3']:.2f}], {sa['first']:.2f}")
            slow = times[(f"per-candidate/{dtype}", workload)]
            for schedule in fast:
                ratios = [y / x for x, y in zip(times[(f"{schedule}/{dtype}", workload)], slow)]
                cells.append(f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
            lines.append(f"| {workload} | {dtype} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Gradient agreement in fp32 (largest |method - per-candidate| over a tensor, relative to that tensor's "
        "largest per-candidate value): "
        + "; ".join(f"{w} " + ", ".join(f"{m} {v:.1e}" for m, v in found.items()) for w, found in agreement.items())
        + ".",
        "Prompt + candidate tokens the per-candidate path runs per minibatch: "
        + ", ".join(f"{w} {n}" for w, n in tokens.items())
        + ".",
        "Peak resident memory of the process after each method's rounds (MiB, monotonic): "
        + ", ".join(f"{m} {v:.0f}" for m, v in peak.items())
        + ".",
    ]
    path = write_results(args.output_dir, name, results, "\n".join(lines), docs=args.docs)
    print(path.read_text())


if __name__ == "__main__":
    main()
