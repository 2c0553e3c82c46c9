"""ViZDoom agents benchmark; writes the `vizdoom` section of docs/benchmarks.md (with --docs).

For each scenario, the same seeded episodes (seeds seed..seed+N-1) are played by the `scorer` agent (the
episode config's defaults: embedded model, jet, `placement.dtype=auto`, the scenario's worked examples,
plus any `--override`), `random`, `scripted` and the `fixed` agent for each of the nine controls. Reported:
mean return with a 95% bootstrap interval over episodes, and the scorer's *paired* difference (same seeds)
to random, to the best fixed control (the one with the highest mean on these seeds) and to scripted.
With `--normalizations`, the scorer plays once per `scorer.normalization` (agents `scorer (none)`, ...), each
paired with the same baselines. A run of some scenarios writes its own section (`vizdoom-basic`,
`vizdoom-defend-the-center-normalization`, ...), never the whole `vizdoom` one.
Seeds used to tune prompts must not be the reported ones: the default seed (1000) is above the tuning seeds
noted in docs/benchmarks.md. The scorer's decisions/s (agent time only, not the engine) is reported too.

    nice .venv/bin/python -m benchmarks.vizdoom --docs --fewer health_gathering=5
    nice .venv/bin/python -m benchmarks.vizdoom --scenarios basic --episodes 5 --override agent.memory=0
    nice .venv/bin/python -m benchmarks.vizdoom --docs --scenarios defend_the_center \
        --normalizations none token
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from jetgym.questions.bootstrap import episode_bootstrap, paired_episode_bootstrap
from jetgym.scorers.priors import NORMALIZATIONS
from benchmarks.doc import parse_counts, write_results
from jetgym.scripts.config import compose
from jetgym.runs.folder import read_jsonl
from jetgym.scripts.episode import EPISODES, episode_job

SCENARIOS = ("defend_the_center", "basic", "health_gathering")


def scorer_agents(overrides: list[str], normalizations=()) -> dict[str, list[str]]:
    """The scorer runs: one `scorer`, or one `scorer (<normalization>)` per normalization."""
    base = ["agent=scorer", *overrides]
    if not normalizations:
        return {"scorer": base}
    return {f"scorer ({n})": [*base, f"scorer.normalization={n}"] for n in normalizations}


def is_scorer(name: str) -> bool:
    return name == "scorer" or name.startswith("scorer (")


def returns_of(out: Path) -> list[float]:
    """Episode returns in episode order, read back from the run's episodes.jsonl."""
    rows = read_jsonl(out / EPISODES, what="episode")
    return [row["return"] for row in sorted(rows, key=lambda row: row["episode"])]


def folder_name(agent: str) -> str:
    """The run folder of an agent: `fixed: turn left` -> fixed-turn_left, `scorer (token)` -> scorer-token."""
    return agent.replace("fixed: ", "fixed-").replace(" (", "-").replace(")", "").replace(" ", "_")


def play(scenario: str, episodes: int, seed: int, out: Path, scorers: dict[str, list[str]]) -> dict:
    """Every agent on the same seeds; returns {"agents": {agent: {"returns": [...], ...}}, "scorers": {...}}."""
    from jetgym.envs.vizdoom.env import CONTROLS

    base = [f"env={scenario}", f"episodes={episodes}", f"seed={seed}", "video=false"]
    agents = {**scorers, "random": ["agent=random"], "scripted": ["agent=scripted"]}
    agents.update({f"fixed: {c.text}": ["agent=fixed", f"agent.control={c.label}"] for c in CONTROLS})
    results, described = {}, {}
    for name, extra in agents.items():
        folder = out / scenario / folder_name(name)
        summary = episode_job(compose("episode", base + extra + [f"output_dir={folder}"]), quiet=True)
        results[name] = {
            "returns": returns_of(folder),
            "mean_length": summary["mean_length"],
            "decisions_per_second": summary.get("decisions_per_second"),
        }
        if is_scorer(name):
            described[name] = {**(summary.get("scorer") or {}), "model": summary.get("model")}
        print(f"{scenario} {name}: mean return {summary['mean_return']:.2f}", flush=True)
    return {"agents": results, "scorers": described}


def compare(agents: dict) -> dict:
    """Means with intervals and each scorer run's paired differences to random, the best fixed control and
    scripted (clusters: one per seed): {"means", "best_fixed", "paired": {scorer: {other: interval}}}."""
    seeds = list(range(len(agents["random"]["returns"])))
    means = {name: episode_bootstrap(r["returns"], seeds).to_dict() for name, r in agents.items()}
    fixed = [name for name in agents if name.startswith("fixed: ")]
    best = max(fixed, key=lambda name: means[name]["estimate"])
    paired = {
        scorer: {
            other: paired_episode_bootstrap(agents[scorer]["returns"], agents[other]["returns"], seeds).to_dict()
            for other in ("random", best, "scripted")
        }
        for scorer in agents
        if is_scorer(scorer)
    }
    return {"means": means, "best_fixed": best, "paired": paired}


def bench(
    scenarios=SCENARIOS,
    episodes: int = 20,
    seed: int = 1000,
    overrides=(),
    output_dir: str = "outputs/bench_episode",
    docs: bool = False,
    fewer: dict[str, int] | None = None,
    normalizations=(),
) -> dict:
    started = time.monotonic()
    out = Path(output_dir)
    counts = {scenario: (fewer or {}).get(scenario, episodes) for scenario in scenarios}
    report = {
        "scenarios": {},
        "episodes": episodes,
        "counts": counts,
        "seed": seed,
        "overrides": list(overrides),
        "normalizations": list(normalizations),
        "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} torch threads",
    }
    scorers = scorer_agents(list(overrides), normalizations)
    for scenario in scenarios:
        played = play(scenario, counts[scenario], seed, out, scorers)
        report["scenarios"][scenario] = {**played, **compare(played["agents"])}
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    body = render(report)
    name = results_name(scenarios, normalizations)
    path = write_results(out, name, report, body, docs=docs)
    print(body)
    print(f"written: {path}")
    return report


def results_name(scenarios, normalizations=()) -> str:
    """`vizdoom` (every scenario), `vizdoom_<scenario>...` for some of them, `_normalization` appended with
    --normalizations: a partial run writes its own section and never replaces the whole one."""
    name = "vizdoom" if set(scenarios) == set(SCENARIOS) else "_".join(["vizdoom", *scenarios])
    return name + "_normalization" if normalizations else name


def _ci(interval: dict, sign: bool = False) -> str:
    fmt = "+.2f" if sign else ".2f"
    return f"{interval['estimate']:{fmt}} [{interval['low']:{fmt}}, {interval['high']:{fmt}}]"


def render(report: dict) -> str:
    seeds = f"{report['seed']}..{report['seed'] + report['episodes'] - 1}"
    flags = "".join(f" --override {o}" for o in report["overrides"])
    fewer = {k: n for k, n in report["counts"].items() if n != report["episodes"]}
    if fewer:
        flags += " --fewer " + " ".join(f"{k}={n}" for k, n in fewer.items())
    if report["normalizations"]:
        flags += " --normalizations " + " ".join(report["normalizations"])
    title = "the scorer with each `normalization`" if report["normalizations"] else "the scorer"
    lines = [
        f"## ViZDoom agents: {title} vs random, every fixed control and scripted",
        "",
        f"Command: `nice .venv/bin/python -m benchmarks.vizdoom --docs --episodes {report['episodes']} "
        f"--seed {report['seed']} --scenarios {' '.join(report['scenarios'])}{flags}` ({report['machine']}; whole run "
        f"{report['wall_seconds']:.0f} s). Each scenario: {report['episodes']} seeded episodes (seeds {seeds}), the "
        "same seeds for every agent, the scenario's own timeout and frame skip of its config. Return = the "
        "scenario's reward (defend the center: kills - 1 on death). Mean with a 95% bootstrap interval over "
        "episodes; the scorer's differences are paired (same seeds, 2,000 resamples of the seeds). The "
        "defend-the-center worked examples (`env.examples`) were chosen on seeds 900-904, never on the reported ones; "
        "basic and health gathering have no examples (zero-shot)."
        + (" The examples were chosen with normalization none." if report["normalizations"] else "")
        + "".join(
            f" {k}: {n} episodes (seeds {report['seed']}..{report['seed'] + n - 1}), its episodes are long."
            for k, n in fewer.items()
        ),
    ]
    for scenario, r in report["scenarios"].items():
        lines += ["", f"### {scenario}", ""]
        for name, scorer in r["scorers"].items():
            lines.append(
                f"{name}: {scorer.get('name', 'jet')} on {scorer.get('model', '?')}, dtype "
                f"{scorer.get('dtype_used', '?')}, template {scorer.get('template', '?')}, normalization "
                f"{scorer.get('normalization', '?')}; {r['agents'][name]['decisions_per_second'] or 0:.2f} "
                "decisions/s (agent time only; one pass, a by-product of the episodes, not a timing "
                "benchmark)."
            )
            lines.append("")
        lines += ["| agent | mean return [95% CI] | mean length (decisions) |", "|---|---|---|"]
        for name, agent in r["agents"].items():
            best = " (best fixed)" if name == r["best_fixed"] else ""
            lines.append(f"| {name}{best} | {_ci(r['means'][name])} | {agent['mean_length']:.1f} |")
        lines += ["", "| difference | paired [95% CI] | interval excludes 0 |", "|---|---|---|"]
        for name, paired in r["paired"].items():
            for other, interval in paired.items():
                excludes = "yes, above" if interval["low"] > 0 else "yes, below" if interval["high"] < 0 else "no"
                lines.append(f"| {name} minus {other} | {_ci(interval, sign=True)} | {excludes} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a jetgym-episode override for the scorer agent's runs (repeatable)",
    )
    parser.add_argument(
        "--fewer",
        nargs="*",
        default=[],
        metavar="SCENARIO=N",
        help="fewer episodes for a scenario, e.g. health_gathering=5 (its episodes last up to 525 decisions)",
    )
    parser.add_argument(
        "--normalizations",
        nargs="+",
        default=[],
        choices=NORMALIZATIONS,
        help="play the scorer once per scorer.normalization (section vizdoom-normalization)",
    )
    parser.add_argument("--output-dir", default="outputs/bench_episode")
    parser.add_argument("--docs", action="store_true", help="also write docs/benchmarks.md (from a checkout)")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error("--episodes must be at least 2 (intervals need more than one episode)")
    fewer = parse_counts(parser, "--fewer", "SCENARIO", args.fewer, SCENARIOS, 2)
    bench(
        args.scenarios, args.episodes, args.seed, args.override, args.output_dir, args.docs, fewer, args.normalizations
    )


if __name__ == "__main__":
    main()
