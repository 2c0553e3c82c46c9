"""The options of the training algorithms (validated on construction; no torch import, so configs stay cheap)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal

Finetune = Literal["lora", "full"]
LR_SCHEDULES = ("constant", "linear")
DEFAULT_LORA_LAYERS = 4


@dataclass(frozen=True)
class LoraOptions:
    """finetune: `lora` (peft LoRA on the attention and MLP projections) or `full` (every weight);
    lora_rank / lora_alpha: LoRA's r and alpha; lora_layers: LoRA on the last `lora_layers` decoder layers only
    (0: all; default 4, every layer of a model with fewer): gradients then stop below them, which makes backward
    cheaper, and the frozen layers' output is kept per question (`jetgym.scorers.gradients.FrozenTrunk`);
    lora_targets: the module names."""

    finetune: Finetune = "lora"
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_layers: int | None = None
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def __post_init__(self):
        if self.finetune not in ("lora", "full"):
            raise ValueError(f"train.finetune must be 'lora' or 'full', got {self.finetune!r}")
        if self.lora_rank < 1 or self.lora_alpha < 1:
            raise ValueError(
                f"train.lora_rank and train.lora_alpha must be >= 1, got {self.lora_rank} and {self.lora_alpha}"
            )
        if self.lora_layers is not None and self.lora_layers < 0:
            raise ValueError(f"train.lora_layers must be >= 0 (0: every layer), got {self.lora_layers}")
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))

    def layers_of(self, n_layers: int) -> int:
        """How many of a model's `n_layers` last layers get the adapter."""
        if self.lora_layers is None:
            return min(DEFAULT_LORA_LAYERS, n_layers)
        if self.lora_layers > n_layers:
            raise ValueError(f"train.lora_layers={self.lora_layers} exceeds the model's {n_layers} layers")
        return self.lora_layers or n_layers


@dataclass(frozen=True)
class PPOOptions:
    num_envs: int = 4
    rollout_steps: int = 32
    epochs: int = 2
    minibatch: int = 16
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    lr_schedule: str = "constant"

    def __post_init__(self):
        _check_schedule(self)
        _check(self, ("num_envs", "rollout_steps", "epochs", "minibatch"), lambda v: v >= 1, ">= 1")
        _check(self, ("gamma", "gae_lambda"), lambda v: 0 <= v <= 1, "in [0, 1]")
        _check(self, ("learning_rate", "clip", "max_grad_norm"), lambda v: v > 0, "> 0")
        _check(self, ("value_coef", "entropy_coef", "kl_coef"), lambda v: v >= 0, ">= 0")


@dataclass(frozen=True)
class SFTOptions:
    """Supervised training on labelled questions (`jetgym.training.sft`): `epochs` shuffled passes of `minibatch`
    questions; with `fit` set, training stops as soon as a share `fit` of the training questions has its argmax
    on the gold at its latest measure (each step measures its minibatch in its forward pass, before the step), so
    `epochs` is then a cap."""

    epochs: int = 1
    minibatch: int = 8
    learning_rate: float = 1e-4
    max_grad_norm: float = 1.0
    lr_schedule: str = "constant"
    fit: float | None = None

    def __post_init__(self):
        _check_schedule(self)
        _check(self, ("epochs", "minibatch"), lambda v: v >= 1, ">= 1")
        _check(self, ("learning_rate", "max_grad_norm"), lambda v: v > 0, "> 0")
        if self.fit is not None:
            _check(self, ("fit",), lambda v: 0 < v <= 1, "in (0, 1]")


@dataclass(frozen=True)
class BCOptions(SFTOptions):
    """Behaviour cloning clones to fit: up to `epochs` passes at rft's rate, decaying to 0 so the last passes
    settle, stopping once every training decision's argmax is the demonstrator's action (`fit`). One pass at
    SFT's rate leaves the prior in place (docs/training.md, "Behaviour cloning")."""

    epochs: int = 8
    learning_rate: float = 1e-3
    lr_schedule: str = "linear"
    fit: float | None = 1.0


@dataclass(frozen=True)
class RFTOptions:
    """Reward-filtered self-imitation (`jetgym.training.rft`): rounds of `group` episodes from each of
    `seeds_per_round` seeds on `num_envs` envs at a time; `keep` (`auto`, `success` or `top:F`); `explore`: the
    largest uniform mixture of a group's episodes; `advantage`: what is cloned besides the kept episodes: `plan`
    (the default: at each question played with several actions in any round, the best one by value iteration on
    every transition played, `jetgym.training.plan`), `episode` (nothing) or `step-group` (at each question the
    round visited with several actions, the action of best mean return to go when it beats the question's mean,
    weighted by that advantage); `gamma`: the discount of values and returns to go (each episode is still kept by
    its whole return); `replay`: the most kept episode decisions pooled. Each round clones to fit: the decisions
    whose label the clone has not yet matched (new questions, changed labels, earlier misses cloned so in fewer than
    `tries` rounds: a label that does not fit, such as an exploring step of a kept episode, joins the rest) and
    `replay_ratio` times as many (at least `minibatch`) drawn from the rest, in shuffled passes of `minibatch`
    decisions, until a share `fit` of them (not counting those missed in all their tries) has its argmax on the
    label, at most `updates` optimizer steps (in proportion to the episodes played to their end, when the budget
    cuts a round), or one per `env_steps_per_update` env steps the round played, or one pass over the fresh ones,
    whichever is most (so a round's cloning costs what its play did); none when they already agree before any
    step. `refit`: after the last round, fit a fresh adapter to every label of that round in up to `refit` shuffled
    passes, at a rate decaying linearly from `learning_rate` to 0, stopping once a share `fit` agrees (0: keep
    the rounds' adapter)."""

    group: int = 4
    seeds_per_round: int = 8
    num_envs: int = 8
    keep: str = "auto"
    explore: float = 1.0
    advantage: str = "plan"
    gamma: float = 0.95
    replay: int = 512
    updates: int = 32
    env_steps_per_update: int = 32
    fit: float = 1.0
    tries: int = 2
    refit: int = 0
    replay_ratio: float = 1.0
    minibatch: int = 8
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    lr_schedule: str = "constant"

    def __post_init__(self):
        _check_schedule(self)
        _check(
            self,
            ("group", "seeds_per_round", "num_envs", "replay", "updates", "env_steps_per_update", "tries", "minibatch"),
            lambda v: v >= 1,
            ">= 1",
        )
        _check(self, ("explore", "gamma"), lambda v: 0 <= v <= 1, "in [0, 1]")
        _check(self, ("fit",), lambda v: 0 < v <= 1, "in (0, 1]")
        _check(self, ("replay_ratio", "refit"), lambda v: v >= 0, ">= 0")
        _check(self, ("learning_rate", "max_grad_norm"), lambda v: v > 0, "> 0")
        check_keep(self.keep)
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"train.advantage must be one of {', '.join(ADVANTAGES)}, got {self.advantage!r}")


ADVANTAGES = ("episode", "step-group", "plan")  # RFTOptions.advantage


OPTIONS = {"ppo": PPOOptions, "rft": RFTOptions, "sft": SFTOptions, "bc": BCOptions}  # algorithm -> its options


def check_keep(keep: str) -> None:
    """`train.keep`: auto, success, or top:F with 0 < F <= 1."""
    if keep in ("auto", "success"):
        return
    name, _, fraction = str(keep).partition(":")
    try:
        valid = name == "top" and 0 < float(fraction) <= 1
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(
            f"train.keep must be auto, success or top:F with a fraction 0 < F <= 1 (e.g. top:0.25), got {keep!r}"
        )


def learning_rate_at(options: PPOOptions | SFTOptions | RFTOptions, done: float, total: float) -> float:
    """The learning rate once `done` of `total` (updates, or PPO's env steps) are behind (`lr_schedule`:
    `constant`, or `linear` decay from `learning_rate` to 0 at the end)."""
    if options.lr_schedule == "linear":
        return options.learning_rate * (1 - done / max(total, 1))
    return options.learning_rate


def _check_schedule(options) -> None:
    if options.lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"train.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {options.lr_schedule!r}")


def _check(options, names: tuple[str, ...], valid: Callable[[float], bool], rule: str) -> None:
    """Refuse the first of `names` whose value is not `valid`, naming the `train.` option and the rule."""
    for name in names:
        if not math.isfinite(getattr(options, name)):
            raise ValueError(f"train.{name} must be a finite number, got {getattr(options, name)}")
        if not valid(getattr(options, name)):
            raise ValueError(f"train.{name} must be {rule}, got {getattr(options, name)}")
