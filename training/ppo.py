"""PPO over the candidate distribution: rollouts with the scorer agent, GAE, the clipped objective.

The policy is q(c|x), the scorer's distribution over the admissible candidates of each step (masked actions
are never candidates); the value head reads the context's last hidden state. One update:
1. `Rollouts.collect`: `rollout_steps` steps of every env, one `agent.act_many` call (one packed
   `decide_many`) per step, actions sampled from q. A finished episode is reset with the next training seed.
2. values of every visited context (and of the context after the last step or a time-limit truncation) with
   the current weights, then GAE(`gamma`, `gae_lambda`).
3. `epochs` passes over shuffled minibatches of `minibatch` decisions: clipped surrogate, value loss,
   entropy bonus and, with `kl_coef`, KL(q || q of the frozen model), gradients clipped to `max_grad_norm`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from jetgym.agents.rollout import env_reset, env_step
from jetgym.scorers import Question
from jetgym.scorers.memo import distinct

from .data_parallel import Shards
from .options import PPOOptions


@dataclass
class Step:
    """One decision of a rollout; `after`: the context after a time-limit truncation (its value bootstraps; None
    when the env lists no action there: nothing is left to gain, the value is 0)."""

    question: Question
    index: int
    logprob: float
    reward: float
    terminated: bool
    truncated: bool
    after: Question | None = None


@dataclass
class Rollout:
    steps: list[list[Step]]  # per env, in time order
    last: list[Question]  # per env: the context after its last step (bootstrap when the episode goes on)
    episodes: list[dict] = field(default_factory=list)  # episodes that ended: return, length, success
    slots: list[int] = field(default_factory=list)  # the envs' global numbers

    @staticmethod
    def merge(parts: Sequence["Rollout"]) -> "Rollout":
        """One rollout from the ranks' parts, envs in the order of their global numbers."""
        order = sorted((slot, part, k) for part in range(len(parts)) for k, slot in enumerate(parts[part].slots))
        return Rollout(
            [parts[p].steps[k] for _, p, k in order],
            [parts[p].last[k] for _, p, k in order],
            sorted((e for part in parts for e in part.episodes), key=lambda e: (e["slot"], e["number"])),
            [slot for slot, _, _ in order],
        )


class Rollouts:
    """Envs (each with `CandidateActions`) played by one scorer agent with `policy='sample'`.

    `slots`: the envs' global numbers (default 0..n-1; under data parallelism a rank plays its share). Env k's
    j-th episode is reset with seed `seed_of(k, j)`, whichever process plays it; `started[k]` counts env k's
    episodes, so a resumed run continues every env's seed sequence."""

    def __init__(
        self,
        envs: Sequence[Any],
        agent,
        seed_of: Callable[[int, int], int],
        slots: Sequence[int] | None = None,
        started: Sequence[int] | None = None,
    ):
        self.envs, self.agent, self.seed_of = list(envs), agent, seed_of
        self.slots = list(range(len(self.envs))) if slots is None else list(slots)
        if len(self.slots) != len(self.envs):
            raise ValueError(f"Rollouts got {len(self.envs)} envs for {len(self.slots)} slots")
        self.started = {k: (started[k] if started else 0) for k in self.slots}
        self.current: list = [None] * len(self.envs)  # (observation, candidates, return, length) per env
        for k in range(len(self.envs)):
            self._reset(k)

    def _reset(self, k: int) -> None:
        slot = self.slots[k]
        seed = self.seed_of(slot, self.started[slot])
        self.started[slot] += 1
        observation, info = env_reset(self.envs[k], seed)
        self.agent.reset(seed, slot=slot)
        self.current[k] = [observation, info["candidates"], 0.0, 0]

    def collect(self, steps: int) -> Rollout:
        rollout = Rollout([[] for _ in self.envs], [], slots=self.slots)
        for _ in range(steps):
            acts = self.agent.act_many([c[0] for c in self.current], [c[1] for c in self.current], self.slots)
            for k, (env, act) in enumerate(zip(self.envs, acts)):
                candidates = self.current[k][1]
                question = Question(context=act.question, candidates=candidates.texts, labels=candidates.labels)
                nxt, reward, terminated, truncated, info = env_step(env, act.action)
                step = Step(
                    question,
                    act.index,
                    math.log(max(act.probs[act.index], 1e-300)),
                    float(reward),
                    bool(terminated),
                    bool(truncated),
                )
                rollout.steps[k].append(step)
                self.current[k][2] += float(reward)
                self.current[k][3] += 1
                if terminated or truncated:
                    if truncated and not terminated and info["candidates"].texts:
                        step.after = self.agent.question(nxt, info["candidates"], self.slots[k])
                    rollout.episodes.append(
                        {
                            "slot": self.slots[k],
                            "number": self.started[self.slots[k]] - 1,
                            "return": self.current[k][2],
                            "length": self.current[k][3],
                            "success": success_of(info, reward),
                        }
                    )
                    self._reset(k)
                else:
                    self.current[k][0], self.current[k][1] = nxt, info["candidates"]
        rollout.last = [self.agent.question(c[0], c[1], slot) for slot, c in zip(self.slots, self.current)]
        return rollout


def success_of(info: dict, final_reward: float) -> bool:
    """Whether an episode that just ended succeeded: `info["is_success"]` where the env reports it, else a
    positive final reward (FrozenLake's goal, Taxi's delivery, MiniGrid's mission)."""
    if "is_success" in info:
        return bool(np.asarray(info["is_success"]).item())
    return float(final_reward) > 0


def advantages(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    ends: np.ndarray,
    terminal: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over one env's steps in time order. next_values[t]: the value after step t (0 when it terminated);
    ends[t]: the episode stopped after step t (terminated or truncated), so no advantage flows back across it."""
    adv = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        bootstrap = 0.0 if terminal[t] else next_values[t]
        delta = rewards[t] + gamma * bootstrap - values[t]
        running = delta + gamma * lam * (0.0 if ends[t] else running)
        adv[t] = running
    return adv, adv + values


def _values(policy, questions: list[Question], chunk: int, shards: Shards) -> np.ndarray:
    """The value of every question, each distinct question evaluated once."""

    def part(items: list[Question]) -> list[float]:
        with torch.no_grad():
            return [
                float(v)
                for start in range(0, len(items), chunk)
                for v in policy.evaluate(items[start : start + chunk]).values.double()
            ]

    unique, where = distinct(questions)
    return np.array(shards.map(part, unique), dtype=np.float64)[where]


def update(
    policy,
    optimizer,
    rollout: Rollout,
    options: PPOOptions,
    generator: torch.Generator,
    autocast: bool = False,
    shards: Shards = Shards(),
) -> dict:
    """One PPO update from a rollout (under data parallelism: the merged rollout, the same on every rank, each
    rank computing its share of every minibatch); returns the losses, KL and entropy of the update (means)."""
    flat = [step for env_steps in rollout.steps for step in env_steps]
    extra = [s.after for s in flat if s.after is not None]
    with _autocast(autocast):
        values = _values(policy, [s.question for s in flat] + extra + rollout.last, options.minibatch, shards)
    value_of_after = iter(values[len(flat) : len(flat) + len(extra)])
    last_values = values[len(flat) + len(extra) :]
    advantages_, returns = [], []
    offset = 0
    for k, env_steps in enumerate(rollout.steps):
        v = values[offset : offset + len(env_steps)]
        nxt = np.append(v[1:], last_values[k])
        for t, s in enumerate(env_steps):
            if s.after is not None:
                nxt[t] = next(value_of_after)
        adv, ret = advantages(
            np.array([s.reward for s in env_steps]),
            v,
            nxt,
            np.array([s.terminated or s.truncated for s in env_steps]),
            np.array([s.terminated or (s.truncated and s.after is None) for s in env_steps]),
            options.gamma,
            options.gae_lambda,
        )
        advantages_.append(adv)
        returns.append(ret)
        offset += len(env_steps)
    adv = torch.tensor(np.concatenate(advantages_), dtype=torch.float32)
    ret = torch.tensor(np.concatenate(returns), dtype=torch.float32)
    if len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    old = torch.tensor([s.logprob for s in flat], dtype=torch.float32)
    names = ("policy_loss", "value_loss", "entropy", "kl_old", "kl_ref", "clip_fraction")
    totals = dict.fromkeys(names, 0.0)
    batches = 0
    for _ in range(options.epochs):
        order = torch.randperm(len(flat), generator=generator).tolist()
        for start in range(0, len(order), options.minibatch):
            batch = order[start : start + options.minibatch]
            optimizer.zero_grad(set_to_none=True)
            terms = [0.0] * len(names)
            idx = [batch[j] for j in shards.mine(len(batch))]
            if idx:
                parts = _minibatch_terms(policy, flat, idx, adv, ret, old, options, autocast)
                loss = (
                    parts["policy_loss"]
                    + options.value_coef * parts["value_loss"]
                    - options.entropy_coef * parts["entropy"]
                    + options.kl_coef * parts["kl_ref"]
                ) / len(batch)
                loss.backward()
                terms = [float(parts[name].detach()) for name in names]
            shards.sum_gradients(policy.parameters())
            torch.nn.utils.clip_grad_norm_(policy.parameters(), options.max_grad_norm)
            optimizer.step()
            policy.weights_changed()
            for name, value in zip(names, shards.sum(terms)):
                totals[name] += value / len(batch)
            batches += 1
    return {key: value / max(batches, 1) for key, value in totals.items()}


def _minibatch_terms(
    policy,
    flat: list[Step],
    idx: list[int],
    adv: torch.Tensor,
    ret: torch.Tensor,
    old: torch.Tensor,
    options: PPOOptions,
    autocast: bool,
) -> dict[str, torch.Tensor]:
    """The PPO loss terms of the decisions `idx`, each summed over them (the caller divides by the minibatch)."""
    questions = [flat[i].question for i in idx]
    with _autocast(autocast):
        evaluated = policy.evaluate(questions)
        reference = policy.evaluate(questions, reference=True) if options.kl_coef else None
    new = torch.stack([lq[flat[i].index] for lq, i in zip(evaluated.log_q, idx)]).float()
    ratio = torch.exp(new - old[idx])
    a = adv[idx]
    terms = {
        "policy_loss": -torch.min(ratio * a, ratio.clamp(1 - options.clip, 1 + options.clip) * a).sum(),
        "value_loss": 0.5 * ((evaluated.values.float() - ret[idx]) ** 2).sum(),
        "entropy": torch.stack([-(lq.exp() * lq).sum() for lq in evaluated.log_q]).sum(),
        "kl_old": (old[idx] - new).sum().detach(),
        "clip_fraction": ((ratio - 1).abs() > options.clip).float().sum(),
        "kl_ref": torch.zeros(()),
    }
    if reference is not None:
        terms["kl_ref"] = torch.stack(
            [(lq.exp() * (lq - rq)).sum() for lq, rq in zip(evaluated.log_q, reference.log_q)]
        ).sum()
    return terms


def _autocast(enabled: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)
