"""`python -m benchmarks.learning`: held-out evaluation of a trained scorer against the zero-shot scorer and baselines.

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
(`benchmarks.sb3`). Reports mean return and success per agent with 95% bootstrap intervals over
seeds and the paired differences trained - other (same seeds resampled together), the training run's learning
curve, and writes the section `train-<name>` of docs/benchmarks.md with `--docs`. Several runs of one
configuration with different training seeds play the same held-out seeds, each as its own agent and, per
held-out seed, their mean ("trained (mean of N seeds)", the training procedure's result), each paired with
every baseline.

    python -m benchmarks.learning runs/fl --name frozenlake-still --episodes 20 --docs
    python -m benchmarks.learning runs/fl-s0 runs/fl-s1 runs/fl-s2 --name frozenlake-still --episodes 20 --docs
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from jetgym.questions.bootstrap import episode_bootstrap, paired_episode_bootstrap
from jetgym.runs.folder import read_jsonl
from benchmarks.doc import docs_dir, write_results
from jetgym.scripts import evaluate
from jetgym.training import evaluation
from jetgym.agents.scoring import POLICIES


DTYPES = {"float32": "fp32", "bfloat16": "bf16", "auto": "placement.dtype=auto (jetgym-episode's default)"}


def sb3_reference(run: dict, summaries: list[dict], held: tuple[int, int], rule: str) -> dict[str, list[dict]]:
    """stable-baselines3 PPO (MLP; MaskablePPO on masked envs) trained for the run's env steps with each training
    seed, greedy on the held-out seeds; several seeds: each held-out seed's episode averaged over them."""
    from benchmarks import sb3 as bench_sb3

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
            "is_success": sum(evaluation.success(e, rule) for e in column) / len(column),
        }
        for column in zip(*plays)
    ]
    return {name: mean}


def seed_spans(seeds) -> str:
    """Seeds as runs of consecutive ones, e.g. `1000..1149, 3000..3039` (a run of one: the seed alone)."""
    ordered = sorted(seeds)
    spans, start = [], ordered[0]
    for previous, seed in zip(ordered, ordered[1:] + [None]):
        if seed != previous + 1:
            spans.append(str(start) if start == previous else f"{start}..{previous}")
            start = seed
    return ", ".join(spans)


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
        f"Command: `python -m benchmarks.learning RUN --name {args.name}` on a `jetgym-train algorithm=sft` run: dataset "
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
    parser.add_argument("--success", choices=evaluation.SUCCESS_RULES, default="positive-return")
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
        choices=[p for p in POLICIES if p != "auto"],
        default="argmax",
        help="how the trained and zero-shot scorers pick (agent.policy): argmax, untried, or a draw from q",
    )
    parser.add_argument(
        "--sb3",
        action="store_true",
        help="also train stable-baselines3 PPO (MLP) for the run's env steps with each training seed",
    )
    parser.add_argument("--output-dir", default="outputs/bench-learning")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args(argv)
    PLAY_OPTIONS = (
        "episodes",
        "seed",
        "tuning_seed",
        "tuning_episodes",
        "success",
        "num_envs",
        "stop_loops",
        "dtype",
        "policy",
    )
    if args.num_envs < 1:
        parser.error(f"--num-envs must be >= 1, got {args.num_envs}")
    if args.stop_loops and args.num_envs > 1:
        parser.error("--stop-loops plays one env at a time: leave --num-envs at 1")
    if args.stop_loops and args.policy != "argmax":
        parser.error(
            f"--stop-loops needs the argmax scorer (with --policy {args.policy} a repeated observation need not start "
            f"a loop): drop --policy"
        )
    folders = [Path(run) for run in args.runs]
    try:
        summaries = evaluation.read_summaries(folders)
        if summaries[0]["config"].get("algorithm") == "sft":
            if len(folders) > 1:
                raise ValueError("an sft run is evaluated on its own held-out split: pass one run")
            return evaluate_sft(folders[0], summaries[0], args)
        evaluation.check_runs(summaries, args.stop_loops)
        options = evaluate.EvalConfig(**{k: getattr(args, k) for k in PLAY_OPTIONS}, runs=args.runs)
        others = (
            sb3_reference(summaries[0]["config"], summaries, (args.seed, args.seed + args.episodes), args.success)
            if args.sb3
            else {}
        )
        results = evaluate.evaluate(folders, summaries, options, others)
    except ValueError as error:
        parser.error(str(error))
    write_play_report(folders, summaries, results, args)


def write_play_report(folders: list[Path], summaries: list[dict], results: dict, args) -> None:
    """The section `train-<name>`: the evaluation's table, the run's settings, its learning curve and timing."""
    run, summary, folder = summaries[0]["config"], summaries[0], folders[0]
    held, tuning = results["held_out_seeds"], results["tuning_seeds"]
    recorded = evaluate.demonstration_episodes(run)
    used_seeds = {seed for _, _, seed in recorded}
    best = next((name[len("fixed (") : -1] for name in results["agents"] if name.startswith("fixed (")), None)
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
        f"Command: `python -m benchmarks.learning RUN --name {args.name} --episodes {args.episodes}"
        + (f" --seed {args.seed}" if args.seed != 0 else "")
        + (f" --success {args.success}" if args.success != evaluation.SUCCESS_RULES[0] else "")
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
        + {
            "argmax": "argmax for the scorers",
            "untried": "the scorers' argmax among the controls not yet taken at a repeated observation",
            "sample": "the scorers draw from q, seeded by the episode's seed",
        }[args.policy]
        + ". Mean [95% bootstrap interval over seeds]."
        + (
            " A scorer's episode that came back to an observation it had seen was stopped there and counted to "
            "the time limit, repeating the loop's rewards (exact for this deterministic env and the memoryless "
            f"argmax scorer; {results['loops_stopped']} "
            "episodes)."
            if args.stop_loops
            else ""
        ),
        "",
        *evaluation.table(results),
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
