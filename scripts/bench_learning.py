"""`jetgym-bench-learning`: held-out evaluation of a trained scorer against the zero-shot scorer and baselines.

An SFT run: its held-out split (`jetgym.training.sft.split_held_out`, the same one training used) is scored by
the trained and the zero-shot scorer; accuracy overall and per question type (the id's last part) against the
majority answer of the training split, 95% intervals by an episode bootstrap (a LIBERO episode's frames are
correlated), and the paired difference trained - zero-shot.

Given a finished `jetgym-train` PPO, rft or behaviour-cloning run folder, plays its env (the run's own env and
agent settings) on held-out seeds `--seed .. --seed+N-1` (PPO and rft training episodes use seeds >= 1,000,000;
seeds of a cloning run's demonstrations are refused) with: the trained scorer (its adapter, at `--dtype`), the
zero-shot scorer (both `--policy`: argmax, or a draw from q seeded by the episode's seed), `random`, the best
fixed control, picked on separate tuning seeds (`--tuning-seed`, never reported), and with `--sb3`
stable-baselines3 PPO with an MLP trained for the run's env steps with each run's training seed
(`jetgym.scripts.bench_sb3`). Reports mean return and success per agent with 95% bootstrap intervals over
seeds and the paired differences trained - other (same seeds resampled together), the training run's learning
curve, and writes the section `train-<name>` of docs/benchmarks.md with `--docs`. Several runs of one
configuration with different training seeds play the same held-out seeds, each as its own agent and, per
held-out seed, their mean ("trained (mean of N seeds)", the training procedure's result), each paired with
every baseline.

    jetgym-bench-learning runs/fl --name frozenlake-still --episodes 20 --docs
    jetgym-bench-learning runs/fl-s0 runs/fl-s1 runs/fl-s2 --name frozenlake-still --episodes 20 --docs
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from jetgym.questions.bootstrap import episode_bootstrap, paired_episode_bootstrap
from jetgym.runs.folder import read_jsonl
from jetgym.scripts.benchmarks_doc import docs_dir, write_results


SUCCESS_RULES = ("positive-return", "terminated")


def success(episode: dict, rule: str) -> float:
    """The env's `is_success` when it reports one; else `positive-return` (FrozenLake: the goal pays 1) or
    `terminated` (Taxi: the episode terminates only on a delivery)."""
    if episode.get("is_success") is not None:
        return float(episode["is_success"])
    return float(episode["return"] > 0) if rule == "positive-return" else float(bool(episode["terminated"]))


def play(
    overrides: list[str],
    agent: str,
    seeds: tuple[int, int],
    adapter: str | None = None,
    control: str | None = None,
    scorer=None,
    stop_loops: bool = False,
    dtype: str = "float32",
    policy: str = "argmax",
) -> list[dict]:
    from jetgym.agents import rollout
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.build import build_agent, make_env

    extra = (
        [f"agent={agent}"]
        + ([f"agent.policy={policy}"] if agent == "scorer" else [])
        + ([f"agent.control={control}"] if control else [])
        + ([f"model.adapter={adapter}"] if adapter else [])
    )
    config = to_config(compose("episode", overrides + extra + [f"placement.dtype={dtype}"]))
    env = make_env(config)
    try:
        built, _ = build_agent(config, scorer=scorer, env=env)
        return rollout(env, built, seeds[1] - seeds[0], seeds[0], progress=True, stop_loops=stop_loops)
    finally:
        env.close()


DTYPES = {"float32": "fp32", "bfloat16": "bf16", "auto": "placement.dtype=auto (jetgym-episode's default)"}


def sb3_reference(run: dict, summaries: list[dict], held: tuple[int, int], rule: str) -> dict[str, list[dict]]:
    """stable-baselines3 PPO (MLP; MaskablePPO on masked envs) trained for the run's env steps with each training
    seed, greedy on the held-out seeds; several seeds: each held-out seed's episode averaged over them."""
    from jetgym.scripts import bench_sb3

    env = run["env"]
    models = [bench_sb3.train(env["id"], env["kwargs"], s["env_steps"], s["seed"]) for s in summaries]
    plays = [bench_sb3.play(env["id"], env["kwargs"], model, range(*held)) for model in models]
    steps = sorted({model.num_timesteps for model in models})  # SB3 plays whole rollouts of 2,048 steps
    name = f"SB3 PPO, MLP ({'/'.join(map(str, steps))} env steps" + (
        f", mean of {len(plays)} seeds)" if len(plays) > 1 else ")"
    )
    if len(plays) == 1:
        return {name: plays[0]}
    mean = [
        {
            "return": sum(e["return"] for e in column) / len(column),
            "is_success": sum(success(e, rule) for e in column) / len(column),
        }
        for column in zip(*plays)
    ]
    return {name: mean}


def env_overrides(run: dict) -> list[str]:
    """Episode-config overrides that rebuild the training run's env and scorer settings."""
    env, scorer = run["env"], run["scorer"]
    out = [f"model.spec={run['model']['spec']}", f"env.id={env['id']}"]
    out += [f"++env.kwargs.{k}={hydra_value(v)}" for k, v in env["kwargs"].items()]
    if env.get("action_texts"):
        out.append("env.action_texts=[" + ",".join(env["action_texts"]) + "]")
    if env.get("task"):
        out.append(f"env.task={json.dumps(env['task'])}")
    out += [
        f"scorer.{k}={v}"
        for k, v in scorer.items()
        if k != "name" and v is not None and not isinstance(v, (list, dict))
    ]
    agent = run.get("agent") or {}
    out += [f"agent.{k}={agent[k]}" for k in ("memory", "describer", "perception", "screenshot") if k in agent]
    return out


def env_controls(overrides: list[str]) -> list[str]:
    """The candidate texts of the env's first step (for envs whose controls come from the env, e.g. ViZDoom)."""
    from jetgym.scripts.build import make_env
    from jetgym.scripts.config import compose, to_config

    env = make_env(to_config(compose("episode", overrides + ["agent=random"])))
    try:
        return list(env.reset(seed=0)[1]["candidates"].texts)
    finally:
        env.close()


def fixed_returns(overrides: list[str], seeds: tuple[int, int], controls: list[str]) -> dict[str, float | None]:
    """Each fixed control's total return over `seeds`; None for a control the env masks at some step (Taxi's
    moves into walls, its pick-up away from the passenger), which a fixed agent cannot play."""
    totals: dict[str, float | None] = {}
    for control in controls:
        try:
            totals[control] = sum(e["return"] for e in play(overrides, "fixed", seeds, control=control))
        except ValueError as error:
            if "is not an admissible candidate" not in str(error):
                raise
            totals[control] = None
    return totals


def hydra_value(value) -> str:
    """`value` written in Hydra's override grammar (null, true/false, numbers, quoted strings, lists, dicts)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else ("null" if value is None else json.dumps(value))


def demonstration_episodes(run: dict) -> list[tuple[int, int, int]]:
    """(file, episode, seed) of every episode of a behaviour-cloning run's demonstrations (none for PPO)."""
    from jetgym.scripts.config import demonstration_paths

    paths = run["train"].get("demonstrations")
    if run.get("algorithm") != "bc" or not paths:
        return []
    files = demonstration_paths(paths)
    return sorted({(k, row["episode"], row["seed"]) for k, path in enumerate(files) for row in read_jsonl(path)})


def seed_spans(seeds) -> str:
    """Seeds as runs of consecutive ones, e.g. `1000..1149, 3000..3039` (a run of one: the seed alone)."""
    ordered = sorted(seeds)
    spans, start = [], ordered[0]
    for previous, seed in zip(ordered, ordered[1:] + [None]):
        if seed != previous + 1:
            spans.append(str(start) if start == previous else f"{start}..{previous}")
            start = seed
    return ", ".join(spans)


def demonstration_seeds(run: dict) -> set[int]:
    """The episode seeds of a behaviour-cloning run's demonstrations (none for PPO)."""
    return {seed for _, _, seed in demonstration_episodes(run)}


def evaluate_sft(folder: Path, summary: dict, args) -> None:
    from types import SimpleNamespace

    from jetgym.questions.sets import load_question_set
    from jetgym.scorers import make_scorer
    from jetgym.training.sft import split_held_out

    run = summary["config"]
    questions = load_question_set(SimpleNamespace(**run["dataset"]))
    train_set, held = split_held_out(questions, run["train"]["held_out"])
    options = {k: v for k, v in run["scorer"].items() if k != "name" and v is not None}
    kind = lambda q: q.id.rsplit("/", 1)[-1]  # noqa: E731
    episode = lambda q: q.id.rsplit("/", 2)[0]  # noqa: E731
    majority = {t: c.most_common(1)[0][0] for t, c in _gold_counts(train_set, kind).items()}
    correct = {}
    for name, adapter in (("trained", str(folder / "adapter")), ("zero-shot", None)):
        scorer = make_scorer("jet", model=run["model"]["spec"], adapter=adapter, **options)
        correct[name] = [float(bool(d.correct)) for d in scorer.decide_many(held)]
    correct["majority of the training split"] = [float(_gold_text(q) == majority.get(kind(q))) for q in held]
    clusters = [episode(q) for q in held]
    types = sorted({kind(q) for q in held})
    header = "| agent | all | " + " | ".join(types) + " |"
    rows, results = [header, "|---" * (len(types) + 2) + "|"], {"held_out_questions": len(held), "agents": {}}
    for name, values in correct.items():
        overall = episode_bootstrap(values, clusters)
        cells = []
        for t in types:
            picked = [(v, c) for v, c, q in zip(values, clusters, held) if kind(q) == t]
            cells.append(f"{100 * sum(v for v, _ in picked) / len(picked):.1f}")
        results["agents"][name] = {"all": overall.to_dict(), "by_type": dict(zip(types, cells))}
        rows.append(
            f"| {name} | {100 * overall.estimate:.1f} [{100 * overall.low:.1f}, {100 * overall.high:.1f}] | "
            + " | ".join(cells)
            + " |"
        )
    diff = paired_episode_bootstrap(correct["trained"], correct["zero-shot"], clusters)
    results["paired_trained_minus_zero_shot"] = diff.to_dict()
    body = [
        f"## train-{args.name}",
        "",
        f"Command: `jetgym-bench-learning RUN --name {args.name}` on a `jetgym-train algorithm=sft` run: dataset "
        f"`{json.dumps(run['dataset'], sort_keys=True)}`, train settings "
        f"`{json.dumps({k: v for k, v in run['train'].items() if v is not None}, sort_keys=True)}`, scorer "
        f"`{json.dumps(options, sort_keys=True)}`, {summary['updates']} updates on {len(train_set)} questions; "
        f"{len(held)} held-out questions from {len(set(clusters))} episodes never trained on.",
        "",
        "Accuracy % on the held-out split (all: mean [95% episode-bootstrap interval]; then per type):",
        "",
        *rows,
        "",
        f"Paired difference trained - zero-shot: {100 * diff.estimate:+.1f} points [{100 * diff.low:+.1f}, "
        f"{100 * diff.high:+.1f}] (episodes resampled together). Held-out gold NLL before / after training: "
        f"{summary['held_out_before']['held_out_gold_nll']:.3f} / {summary['held_out_after']['held_out_gold_nll']:.3f}.",
    ]
    write_results(args.output_dir, f"train_{args.name}".replace("-", "_"), results, "\n".join(body), docs=args.docs)
    if args.docs and (folder / "learning_curve.png").exists():
        shutil.copy(folder / "learning_curve.png", docs_dir() / "bench" / f"train-{args.name}.png")
    print("\n".join(body))


def _gold_text(question) -> str:
    from jetgym.training.sft import gold_indices

    return question.candidates[gold_indices(question)[0]]


def _gold_counts(questions, kind) -> dict:
    from collections import Counter

    counts: dict = {}
    for q in questions:
        counts.setdefault(kind(q), Counter())[_gold_text(q)] += 1
    return counts


def without_nulls(value):
    """`value` with its null settings left out (a setting added later reads as null in older runs' records)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


def with_option_defaults(config: dict) -> dict:
    """A run's record with the training options it lacks at their defaults (an option added later: the older run
    trained with its default)."""
    import dataclasses

    from jetgym.training.options import OPTIONS, LoraOptions

    if config.get("algorithm") not in OPTIONS:
        return config
    defaults = {
        f.name: f.default
        for c in (OPTIONS[config["algorithm"]], LoraOptions)
        for f in dataclasses.fields(c)
        if f.default is not dataclasses.MISSING
    }
    return {**config, "options": {**defaults, **config.get("options", {})}}


def same_configuration(configs: list[dict]) -> str | None:
    """The first setting (other than the training seed) in which a run differs from the first one; None if none."""
    configs = [without_nulls(with_option_defaults(config)) for config in configs]
    for k, config in enumerate(configs[1:], 1):
        for key in sorted(set(config) | set(configs[0])):
            if key != "seed" and config.get(key) != configs[0].get(key):
                return f"run {k + 1} differs from run 1 in {key!r}"
    return None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="run",
        help="finished jetgym-train run folders (summary.json, adapter/); several runs of one "
        "configuration with different training seeds play the same held-out seeds",
    )
    parser.add_argument("--name", required=True, help="section name: train-<name>")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tuning-seed", type=int, default=500)
    parser.add_argument("--tuning-episodes", type=int, default=10)
    parser.add_argument("--success", choices=SUCCESS_RULES, default="positive-return")
    parser.add_argument(
        "--num-envs",
        type=int,
        default=1,
        help="held-out episodes the scorers play at once (a vector env; each keeps its seed)",
    )
    parser.add_argument(
        "--stop-loops",
        action="store_true",
        help="deterministic envs only: end a scorer's episode at its first repeated observation and "
        "count the loop to the time limit (argmax without memory repeats it exactly)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "auto", "bfloat16"),
        default="float32",
        help="the scorers' placement.dtype (auto: jetgym-episode's default, bf16 on CPUs with native bf16)",
    )
    parser.add_argument(
        "--policy",
        choices=("argmax", "sample"),
        default="argmax",
        help="how the trained and zero-shot scorers pick: argmax, or a draw from q (agent.policy)",
    )
    parser.add_argument(
        "--sb3",
        action="store_true",
        help="also train stable-baselines3 PPO (MLP) for the run's env steps with each training seed",
    )
    parser.add_argument("--output-dir", default="outputs/bench-learning")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args(argv)
    if args.num_envs < 1:
        parser.error(f"--num-envs must be >= 1, got {args.num_envs}")
    if args.stop_loops and args.num_envs > 1:
        parser.error("--stop-loops plays one env at a time: leave --num-envs at 1")
    if args.stop_loops and args.policy == "sample":
        parser.error(
            "--stop-loops needs the argmax scorer (a sampling one need not repeat a loop): drop --policy sample"
        )
    folders, summaries = [Path(run) for run in args.runs], []
    for folder in folders:
        try:
            summaries.append(json.loads((folder / "summary.json").read_text()))
        except FileNotFoundError:
            parser.error(f"{folder} holds no summary.json: pass the folder of a finished jetgym-train run")
    differs = same_configuration([summary["config"] for summary in summaries])
    if differs:
        parser.error(f"{differs}: pass runs that differ only in their training seed")
    run = summaries[0]["config"]
    if run.get("algorithm") == "sft":
        if len(folders) > 1:
            parser.error("an sft run is evaluated on its own held-out split: pass one run")
        return evaluate_sft(folders[0], summaries[0], args)
    if args.stop_loops and run["agent"].get("memory"):
        parser.error(
            f"--stop-loops needs a scorer whose choice depends on the observation only; this run's agent "
            f"quotes its last {run['agent']['memory']} actions (agent.memory)"
        )
    evaluate_play(folders, summaries, args, parser)


def evaluate_play(folders: list[Path], summaries: list[dict], args, parser) -> None:
    run, summary, folder = summaries[0]["config"], summaries[0], folders[0]
    base = ["env=gym", *env_overrides(run)]
    held = (args.seed, args.seed + args.episodes)
    recorded = demonstration_episodes(run)  # read once: the files can hold thousands of steps
    used_seeds = {seed for _, _, seed in recorded}
    overlap = sorted(used_seeds & set(range(*held)))
    if overlap:
        parser.error(f"held-out seeds {overlap[:5]} were demonstration episodes of this run: pass --seed beyond them")
    tuning = (args.tuning_seed, args.tuning_seed + args.tuning_episodes)
    controls = run["env"].get("action_texts") or env_controls(base)
    fixed_scores = fixed_returns(base, tuning, controls)
    playable = {c: total for c, total in fixed_scores.items() if total is not None}
    best = max(playable, key=playable.get) if playable else None
    batched = base + [f"env.num_envs={args.num_envs}"]
    trained = {
        "trained" if len(folders) == 1 else f"trained (seed {s['seed']})": play(
            batched,
            "scorer",
            held,
            adapter=str(f / "adapter"),
            stop_loops=args.stop_loops,
            dtype=args.dtype,
            policy=args.policy,
        )
        for f, s in zip(folders, summaries)
    }
    agents = {
        **trained,
        "zero-shot": play(batched, "scorer", held, stop_loops=args.stop_loops, dtype=args.dtype, policy=args.policy),
        "random": play(base, "random", held),
    }
    if best is not None:
        agents[f"fixed ({best})"] = play(base, "fixed", held, control=best)
    if args.sb3:
        agents.update(sb3_reference(run, summaries, held, args.success))
    seeds = list(range(*held))
    results = {
        "runs": [str(f) for f in folders],
        "held_out_seeds": list(held),
        "tuning_seeds": list(tuning),
        "fixed_tuning_returns": fixed_scores,
        "agents": {},
        "paired": {},
        "training": [
            {k: s.get(k) for k in ("algorithm", "updates", "rounds", "env_steps", "train_questions", "seed")}
            for s in summaries
        ],
    }
    returns = {name: [e["return"] for e in episodes] for name, episodes in agents.items()}
    wins = {name: [success(e, args.success) for e in episodes] for name, episodes in agents.items()}
    if len(trained) > 1:  # the training procedure: each held-out seed's return averaged over the training seeds
        mean = f"trained (mean of {len(trained)} seeds)"
        returns[mean] = [sum(r) / len(r) for r in zip(*(returns[name] for name in trained))]
        wins[mean] = [sum(w) / len(w) for w in zip(*(wins[name] for name in trained))]
    rows = []
    for name in returns:
        r, s = episode_bootstrap(returns[name], seeds), episode_bootstrap(wins[name], seeds)
        results["agents"][name] = {
            "return": r.to_dict(),
            "success": s.to_dict(),
            "returns": returns[name],
            "successes": wins[name],
        }
        rows.append(
            f"| {name} | {r.estimate:.3f} [{r.low:.3f}, {r.high:.3f}] | {s.estimate:.2f} [{s.low:.2f}, {s.high:.2f}] |"
        )
    paired = []
    for mine in [name for name in returns if name.startswith("trained")]:
        for name in agents:
            if name in trained:
                continue
            d = paired_episode_bootstrap(returns[mine], returns[name], seeds)
            results["paired"][f"{mine} - {name}"] = d.to_dict()
            paired.append(f"{mine} - {name} {d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]")
    curve = f"docs/bench/train-{args.name}.png"
    logs = [read_jsonl(f / "train.jsonl") for f in folders]
    log = logs[0]
    seconds = [
        sorted(r.get("rollout_seconds", 0) + r["update_seconds"] for r in run_log if "update_seconds" in r)
        for run_log in logs
    ]
    unit = "round" if run["algorithm"] == "rft" else "update"
    timing = "; ".join(
        ("" if len(folders) == 1 else f"seed {s['seed']}: ") + f"median of {len(t)} "
        f"{t[len(t) // 2]:.1f}, in all {sum(t) / 60:.1f} min"
        for s, t in zip(summaries, seconds)
    )
    seed, caption = f"training seed {summary['seed']}", "learning curve"
    if len(folders) > 1:
        seed += "; the same settings with seeds " + ", ".join(str(s["seed"]) for s in summaries[1:])
        caption += f" of training seed {summary['seed']}"
    if run["algorithm"] == "ppo":
        how = f"a PPO run of {summary['env_steps']} env steps ({summary['updates']} updates, {seed})"
        curve_line = (
            "Learning curve (mean return of the episodes that ended in each update's rollout): "
            + ", ".join(f"{r['env_steps']}: {r['mean_return']:.2f}" for r in log if r.get("mean_return") is not None)
            + "."
        )
    elif run["algorithm"] == "rft":
        how = (
            f"an rft run of {summary['env_steps']} env steps ({summary['rounds']} rounds, {seed}; "
            f"{sum(s['seconds_this_process'] for s in summaries) / len(summaries) / 60:.1f} min per run on average)"
        )
        curve_line = (
            "Learning curve of training seed " + str(summary["seed"]) + " (success rate of each round's "
            "sampled episodes, exploring ones included; env steps: success): "
            + ", ".join(f"{r['env_steps']}: {r['success_rate']:.2f}" for r in log if r.get("success_rate") is not None)
            + "."
        )
    else:
        floor = run["train"].get("min_return")
        merged = run.get("unique")
        decisions = (
            f"{summary['train_questions']} distinct recorded decisions (train.unique: "
            f"{summary['train_questions'] + merged['train_repeats_left_out']} with repeats)"
            if merged
            else f"{summary['train_questions']} recorded decisions"
        )
        how = (
            f"a behaviour-cloning run ({summary['updates']} updates on {decisions} "
            f"of {len(recorded)} recorded episodes"
            + ("" if floor is None else f", the ones with a return of at least {floor:g} cloned")
            + (
                ""
                if not run["train"].get("relabel")
                else f", every step relabelled by the {run['train']['relabel']} expert (DAgger)"
            )
            + f", {summary['held_out_questions']} held out; {seed})"
        )
        after = summary["held_out_after"] or {}
        curve_line = (
            (
                f"Held-out decisions: gold NLL {summary['held_out_before']['held_out_gold_nll']:.3f} -> "
                f"{after.get('held_out_gold_nll', float('nan')):.3f}, agreement with the demonstrator "
                f"{100 * summary['held_out_before']['held_out_accuracy']:.1f}% -> "
                f"{100 * after.get('held_out_accuracy', float('nan')):.1f}%."
            )
            if summary["held_out_before"]
            else ""
        )
    body = [
        f"## train-{args.name}",
        "",
        f"Command: `jetgym-bench-learning RUN --name {args.name} --episodes {args.episodes}"
        + (f" --seed {args.seed}" if args.seed != 0 else "")
        + (f" --success {args.success}" if args.success != SUCCESS_RULES[0] else "")
        + (f" --num-envs {args.num_envs}" if args.num_envs > 1 else "")
        + (" --stop-loops" if args.stop_loops else "")
        + (f" --dtype {args.dtype}" if args.dtype != "float32" else "")
        + (" --sb3" if args.sb3 else "")
        + (f" --policy {args.policy}" if args.policy != "argmax" else "")
        + f"` on {how}; the run's "
        f"settings: `{json.dumps({k: run['train'][k] for k in run['train'] if run['train'][k] is not None}, sort_keys=True)}`"
        + (
            f", in effect (defaults filled in): `{json.dumps(run['options'], sort_keys=True)}`"
            if run.get("options")
            else ""
        )
        + f", env `{run['env']['id']}` `{json.dumps(run['env']['kwargs'], sort_keys=True)}`.",
        "",
        f"Held-out seeds {held[0]}..{held[1] - 1} ("
        + (
            "training seeds are >= 1,000,000"
            if run["algorithm"] in ("ppo", "rft")
            else f"the demonstrations used seeds {seed_spans(used_seeds)}"
        )
        + (
            f"; the fixed control was picked on seeds {tuning[0]}..{tuning[1] - 1}"
            if best
            else "; no fixed control: the env's action mask removes every control at some step, so none can be "
            "played alone"
        )
        + f"). {DTYPES[args.dtype]}, "
        + (
            "argmax for the scorers"
            if args.policy == "argmax"
            else "the scorers draw from q, seeded by the episode's seed"
        )
        + ". Mean [95% bootstrap interval over seeds]."
        + (
            " A scorer's episode that came back to an observation it had seen was stopped there and counted to "
            "the time limit, repeating the loop's rewards (exact for this deterministic env and the memoryless "
            f"argmax scorer; {sum(e.get('end') == 'loop' for a in (*trained, 'zero-shot') for e in agents.get(a, ()))} "
            "episodes)."
            if args.stop_loops
            else ""
        ),
        "",
        "| agent | return | success |",
        "|---|---|---|",
        *rows,
        "",
        "Paired return differences (same seeds resampled together): " + "; ".join(paired) + ".",
        "",
        curve_line,
        f"Training seconds per {unit}: {timing}.",
        "",
        f"![{caption}]({curve.removeprefix('docs/')})",
    ]
    write_results(args.output_dir, f"train_{args.name}".replace("-", "_"), results, "\n".join(body), docs=args.docs)
    if args.docs and (folder / "learning_curve.png").exists():
        shutil.copy(folder / "learning_curve.png", docs_dir() / "bench" / f"train-{args.name}.png")
    print("\n".join(body))


if __name__ == "__main__":
    main()
