"""A training run's held-out evaluation, the part that needs no env: which runs can be compared, what counts as a
success, and the agents' returns turned into intervals, paired differences and a table (`jetgym eval` plays)."""

from __future__ import annotations

import json
from pathlib import Path

from jetgym.questions.bootstrap import episode_bootstrap, paired_episode_bootstrap

SUCCESS_RULES = ("positive-return", "terminated")
QUESTIONS = "questions.json"  # an rft run's record: the digest of every question text it played


def question_digest(context) -> str:
    """A short digest of a question's text (a string, or chat messages), as runs record and evaluations compare."""
    import hashlib

    text = context if isinstance(context, str) else json.dumps(context, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def seen_share(folder: Path, contexts: list) -> dict | None:
    """How many of the distinct question texts in `contexts` (a held-out play's) the run at `folder` played in
    training; None when the run recorded no questions (`questions.json`: rft runs)."""
    try:
        trained = set(json.loads((folder / QUESTIONS).read_text()))
    except FileNotFoundError:
        return None
    asked = {question_digest(c) for c in contexts}
    seen = len(asked & trained)
    return {"questions": len(asked), "seen_in_training": seen, "share": seen / len(asked) if asked else None}


def success(episode: dict, rule: str) -> float:
    """The env's `is_success` when it reports one; else `positive-return` (FrozenLake: the goal pays 1) or
    `terminated` (Taxi: the episode terminates only on a delivery)."""
    if episode.get("is_success") is not None:
        return float(episode["is_success"])
    return float(episode["return"] > 0) if rule == "positive-return" else float(bool(episode["terminated"]))


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


def read_summaries(folders: list[Path]) -> list[dict]:
    """Each finished training run's summary.json; a folder without one, or with another job's, is refused, naming it."""
    summaries = []
    for folder in folders:
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except FileNotFoundError:
            raise ValueError(
                f"{folder} holds no summary.json: pass the folder of a finished jetgym-train run"
            ) from None
        if not isinstance(summary, dict) or "algorithm" not in (summary.get("config") or {}):
            raise ValueError(
                f"{folder}/summary.json is not a training run's (no training config in it; a QA or episode run?): "
                "pass the folder of a finished jetgym-train run"
            )
        summaries.append(summary)
    return summaries


def check_runs(summaries: list[dict], stop_loops: bool) -> None:
    """Refuses runs that cannot be played together: different settings, or a memory that defeats stop_loops."""
    differs = same_configuration([summary["config"] for summary in summaries])
    if differs:
        raise ValueError(f"{differs}: pass runs that differ only in their training seed")
    run = summaries[0]["config"]
    if stop_loops and (run.get("agent") or {}).get("memory"):
        raise ValueError(
            f"stop_loops needs a scorer whose choice depends on the observation only; this run's agent "
            f"quotes its last {run['agent']['memory']} actions (agent.memory)"
        )


def table(results: dict) -> list[str]:
    """The agents' table (return, success) and the paired differences, as markdown lines."""
    rows = ["| agent | return | success |", "|---|---|---|"]
    for name, agent in results["agents"].items():
        r, s = agent["return"], agent["success"]
        rows.append(
            f"| {name} | {r['estimate']:.3f} [{r['low']:.3f}, {r['high']:.3f}] | "
            f"{s['estimate']:.2f} [{s['low']:.2f}, {s['high']:.2f}] |"
        )
    paired = [
        f"{name} {d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" for name, d in results["paired"].items()
    ]
    lines = [*rows, "", "Paired return differences (same seeds resampled together): " + "; ".join(paired) + "."]
    seen = {name: s for name, s in results.get("held_out_questions_seen", {}).items() if s and s["questions"]}
    if seen:
        shares = [f"{name} {s['seen_in_training']} of {s['questions']} ({s['share']:.0%})" for name, s in seen.items()]
        lines += ["", "Distinct held-out question texts that training played: " + "; ".join(shares) + "."]
    return lines


def summarize(folders, summaries, agents: dict, trained: list[str], held, tuning, fixed_scores, rule: str) -> dict:
    """Each agent's mean return and success on the held-out seeds with 95% bootstrap intervals, and the paired
    differences trained - other (several training seeds: also their per-seed mean)."""
    seeds = list(range(*held))
    results = {
        "runs": [str(f) for f in folders],
        "held_out_seeds": list(held),
        "tuning_seeds": list(tuning),
        "fixed_tuning_returns": fixed_scores,
        "agents": {},
        "paired": {},
        "training": [
            {k: s.get(k) for k in ("algorithm", "updates", "rounds", "env_steps", "train_questions", "seed", "warning")}
            for s in summaries
        ],
    }
    returns = {name: [e["return"] for e in episodes] for name, episodes in agents.items()}
    wins = {name: [success(e, rule) for e in episodes] for name, episodes in agents.items()}
    if len(trained) > 1:  # the training procedure: each held-out seed's return averaged over the training seeds
        mean = f"trained (mean of {len(trained)} seeds)"
        returns[mean] = [sum(r) / len(r) for r in zip(*(returns[name] for name in trained))]
        wins[mean] = [sum(w) / len(w) for w in zip(*(wins[name] for name in trained))]
    for name in returns:
        results["agents"][name] = {
            "return": episode_bootstrap(returns[name], seeds).to_dict(),
            "success": episode_bootstrap(wins[name], seeds).to_dict(),
            "returns": returns[name],
            "successes": wins[name],
        }
    for mine in [name for name in returns if name.startswith("trained")]:
        for name in agents:
            if name not in trained:
                d = paired_episode_bootstrap(returns[mine], returns[name], seeds)
                results["paired"][f"{mine} - {name}"] = d.to_dict()
    results["loops_stopped"] = sum(e.get("end") == "loop" for a in (*trained, "zero-shot") for e in agents[a])
    return results
