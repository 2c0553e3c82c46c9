"""How often rft's labels name a shortest-route action, on BabyAI GoToLocal (no model; writes `rft-labels`).

rft clones labels it builds from reward alone: the kept episodes' actions (loop-erased, `Pool`) and, with
`train.advantage=plan`, the best played action at every question played with several actions where every candidate
was played or a kept episode passed (`Transitions`, `rft.label_round`). This plays rft's rounds exactly as `jetgym
train algorithm=rft` builds them (`rft.play_round` and `rft.label_round`: the same seeds, groups, keep rule,
optimistic explorer and labels), with a uniform scorer standing in for the model (member 0 of each group then plays
uniformly, as an untrained prior would). At every step an oracle reads the env's full grid: a breadth-first search
over (cell, heading) to the places that face an object the mission names; an action is right when it shortens that
route by one step. A label is scored by the share of its question's visits at which it was right (one question can
stand for several places that look alike). Chance is the share of right actions among the seven. Per round: the
planned labels, the pool's labels (kept episodes alone, what `train.advantage=episode` clones) and what a round
clones by default (planned first, the pool elsewhere). What a round clones is also scored by situation (`situation`:
the describer's line on where the named object is, distances above one step alike): within each situation, how often
each label is right, and how often the most frequent of the situation's other labels is, which is what a clone that
generalised from the situation alone would play.

    .venv/bin/python -m benchmarks.labels --docs
    .venv/bin/python -m benchmarks.labels --env-steps 2000 --keep top:0.25
"""

from __future__ import annotations

import argparse
import platform
import re
from collections import Counter, defaultdict
from types import SimpleNamespace

import numpy as np

from benchmarks.doc import write_results

HEADINGS = ((1, 0), (0, 1), (-1, 0), (0, -1))  # MiniGrid's east, south, west, north
TURN_LEFT, TURN_RIGHT, FORWARD = 0, 1, 2


def right_actions(env) -> frozenset[int]:
    """The actions that shorten the agent's shortest route to facing a named object (empty when it already does,
    or cannot get there)."""
    grid = env.unwrapped.grid
    targets = {tuple(int(v) for v in p) for p in env.unwrapped.instrs.desc.obj_poss}

    def free(x: int, y: int) -> bool:
        if not (0 <= x < grid.width and 0 <= y < grid.height):
            return False
        cell = grid.get(x, y)
        return cell is None or cell.can_overlap()

    def moves(state):
        x, y, d = state
        dx, dy = HEADINGS[d]
        yield TURN_LEFT, (x, y, (d - 1) % 4)
        yield TURN_RIGHT, (x, y, (d + 1) % 4)
        yield FORWARD, ((x + dx, y + dy, d) if free(x + dx, y + dy) else state)

    states = [(x, y, d) for x in range(grid.width) for y in range(grid.height) if free(x, y) for d in range(4)]
    steps = {s: 0 for s in states if (s[0] + HEADINGS[s[2]][0], s[1] + HEADINGS[s[2]][1]) in targets}
    frontier = list(steps)
    while frontier:  # backwards: a state one move before a reached one is one step further
        reached = set(frontier)
        frontier = []
        for s in states:
            if s not in steps and any(n in reached for _, n in moves(s)):
                steps[s] = steps[next(n for _, n in moves(s) if n in reached)] + 1
                frontier.append(s)
    here = (*(int(v) for v in env.unwrapped.agent_pos), int(env.unwrapped.agent_dir))
    if steps.get(here, 0) == 0:
        return frozenset()
    return frozenset(a for a, n in moves(here) if steps.get(n, -1) == steps[here] - 1)


class OracleAgent:
    """Asks the `minigrid` describer's question and notes, per question, the right actions at every visit."""

    def __init__(self, env):
        from jetgym.agents.describers_minigrid import describe_view

        self.env, self.describe = env, describe_view
        self.right: dict[bytes, list[frozenset[int]]] = defaultdict(list)

    def question(self, observation, candidates, slot=0):
        from jetgym.scorers import Question
        from jetgym.training.plan import state_key

        question = Question(context=self.describe(observation), candidates=tuple(candidates.texts))
        self.right[state_key(question)].append(right_actions(self.env))
        return question

    def reset(self, seed, slot=0):
        pass

    def record(self, text, slot=0):
        pass


class UniformScorer:
    """Every candidate alike: what the draws mix the explorer into when no model is trained."""

    def decide_many(self, questions):
        return [SimpleNamespace(corrected=[0.0] * len(q.candidates)) for q in questions]


def accuracy(items, right: dict) -> dict:
    """Mean share of visits at which each label was right, and chance, over the labels with a route."""
    from jetgym.training.plan import state_key

    hits, chance = [], []
    for item in items:
        visits = [r for r in right[state_key(item.decision)] if r]
        if visits:
            hits.append(np.mean([item.decision.gold in r for r in visits]))
            chance.append(np.mean([len(r) / len(item.decision.candidates) for r in visits]))
    return {
        "labels": len(hits),
        "right": round(float(np.mean(hits)), 3) if hits else None,
        "chance": round(float(np.mean(chance)), 3) if chance else None,
    }


def situation(context: str) -> str:
    """Where the first object the mission names is, from the describer's `Named in the mission:` line, with every
    distance above one step written `N` (`N steps ahead and 1 to the left`, `not in view`); '' without it."""
    line = next((ln for ln in context.splitlines() if ln.startswith("Named in the mission:")), "")
    place = re.search(r"\d+ steps? [^;]*|on the [^;]*|not in view|carried", line)
    return re.sub(r"\b([2-9]|\d{2,})\b", "N", place.group(0).rstrip(".")) if place else ""


def by_situation(items, right: dict) -> dict:
    """What `accuracy` says of labels whose named object is in view, and how often the most frequent label of the
    other labels of their situation (ties: the lowest action) is right: left out of the majority it is judged
    by, so no label votes for itself (a label alone in its situation is not judged this way)."""
    from jetgym.training.plan import state_key

    scored = []
    for item in items:
        visits = [r for r in right[state_key(item.decision)] if r]
        place = situation(item.decision.context)
        if visits and "not in view" not in place:
            scored.append((place, item.decision.gold, visits))
    counts: dict[str, Counter] = defaultdict(Counter)
    for place, gold, _ in scored:
        counts[place][gold] += 1

    def others(place: str, gold: int) -> int | None:
        votes = counts[place] - Counter({gold: 1})
        return min(votes, key=lambda a: (-votes[a], a)) if votes else None

    def share(pick) -> float | None:
        hits = [np.mean([pick(p, g) in r for r in v]) for p, g, v in scored if pick(p, g) is not None]
        return round(float(np.mean(hits)), 3) if hits else None

    return {
        "labels": len(scored),
        "situations": len(counts),
        "right": share(lambda place, gold: gold),
        "majority_right": share(others),
    }


def wrong_planned(planned, right: dict, transitions) -> dict:
    """Of the planned labels right at fewer than half their visits: how many stand where some right action was
    played (it was planned lower) and where none ever was."""
    from jetgym.training.plan import state_key

    counts = {"right_action_played": 0, "right_action_never_played": 0}
    for item in planned:
        key = state_key(item.decision)
        visits = [r for r in right[key] if r]
        if visits and np.mean([item.decision.gold in r for r in visits]) < 0.5:
            played = frozenset().union(*visits) & set(transitions.edges.get(key, ()))
            counts["right_action_played" if played else "right_action_never_played"] += 1
    return counts


def measure(env_id: str, env_steps: int, seed: int, keep: str) -> list[dict]:
    """One row per round: success, and the accuracy of the planned, pool and cloned labels so far."""
    import gymnasium as gym

    import jetgym.envs  # noqa: F401  (registers the jetgym ids)
    from jetgym.envs.candidates import CandidateActions
    from jetgym.training import rft
    from jetgym.training.options import RFTOptions
    from jetgym.training.plan import Transitions

    options = RFTOptions(keep=keep)
    env = CandidateActions(gym.make(env_id))
    agent, scorer = OracleAgent(env), UniformScorer()
    pool, transitions = rft.Pool(options.replay), Transitions()
    rows, steps, round_ = [], 0, 0
    while steps < env_steps:
        explorer = transitions.explorer(options.gamma)
        seeds = rft.round_seeds(seed, round_, options)
        played = rft.play_round([env], agent, scorer, seeds, options, 1.0, seed, env_steps - steps, None, explorer)
        round_ += 1
        steps += sum(len(e.rewards) for e in played)
        labelled = rft.label_round(played, pool, transitions, options)
        ended = [e for e in played if e.ended]
        rows.append(
            {
                "round": round_,
                "env_steps": steps,
                "success_rate": round(sum(e.success for e in ended) / len(ended), 3) if ended else None,
                "kept_episodes": len(labelled.kept),
                "planned": accuracy(labelled.planned, agent.right),
                "pool": accuracy(pool.kept(), agent.right),
                "cloned": accuracy(labelled.cloned, agent.right),
                "in_view": by_situation(labelled.cloned, agent.right),
                "planned_wrong": wrong_planned(labelled.planned, agent.right, transitions),
            }
        )
        print(rows[-1], flush=True)
    env.close()
    return rows


def report(rows: list[dict], env_id: str, keep: str, seed: int) -> str:
    def cell(a: dict) -> str:
        return "-" if a["right"] is None else f"{a['right']:.2f} ({a['labels']})"

    lines = [
        f"How often rft's labels name a shortest-route action: `{env_id}`, `train.keep={keep}`, training seed {seed},"
        " no model (member 0 of each group plays uniformly), every other rft setting at its default. A label's score"
        " is the share of its question's visits at which it was right; in brackets, the labels counted. The last"
        " round is cut at the budget. The last two columns take the cloned labels whose named object is in view and"
        " group them by where it is (distances above one step alike: `N steps ahead and 1 to the left`, the"
        " situations in brackets): each label's score, then the score of the most frequent label among the other"
        " labels of its situation (the label itself left out), what a clone that played each situation's majority"
        " would get. One training seed; nothing is timed and no"
        " constant is fitted here.",
        "",
        "| round | env steps | success | kept episodes | planned | pool (kept episodes) | cloned by default | chance"
        " | cloned, in view | its situation's majority |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        view = r["in_view"]
        lines.append(
            f"| {r['round']} | {r['env_steps']} | {r['success_rate']} | {r['kept_episodes']} | {cell(r['planned'])}"
            f" | {cell(r['pool'])} | {cell(r['cloned'])} | {r['cloned']['chance']} | {cell(view)}"
            f" | {'-' if view['majority_right'] is None else view['majority_right']} ({view['situations']}) |"
        )
    wrong = rows[-1]["planned_wrong"]
    lines += [
        "",
        f"Of the last round's planned labels right at fewer than half their visits, {wrong['right_action_never_played']}"
        f" stand where no right action was ever played and {wrong['right_action_played']} where one was played but"
        " planned lower (what followed it was played less).",
    ]
    lines += [
        "",
        f"Command: `python -m benchmarks.labels --env-steps {rows[-1]['env_steps']} --keep {keep} --seed {seed}`",
    ]
    lines.append(f"Machine: {platform.processor() or platform.machine()}; no torch work (seconds, not minutes).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="jetgym/BabyAI-GoToLocalTrain-v0")
    parser.add_argument("--env-steps", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", default="auto")
    parser.add_argument("--output-dir", default="outputs/bench-labels")
    parser.add_argument("--docs", action="store_true", help="replace the rft-labels section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.env_steps < 1:
        parser.error(f"--env-steps must be >= 1, got {args.env_steps}")
    rows = measure(args.env_id, args.env_steps, args.seed, args.keep)
    results = {"env_id": args.env_id, "keep": args.keep, "seed": args.seed, "rounds": rows}
    write_results(args.output_dir, "rft-labels", results, report(rows, args.env_id, args.keep, args.seed), args.docs)


if __name__ == "__main__":
    main()
