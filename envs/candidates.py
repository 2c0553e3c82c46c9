"""`CandidateActions`: a Gymnasium wrapper that puts the admissible actions, as texts, in `info["candidates"]`.

It sits on any env with a `Discrete` action space; observations, rewards and actions pass through untouched.
Texts come from, in order: the `texts` argument; the env's own `controls` (objects with `label` and `text`, as
`jetgym.envs.vizdoom.env.CONTROLS`, or plain strings, each its own label; anything else is an error);
MiniGrid's seven actions (`jetgym.envs.minigrid.ACTION_TEXTS`) for a MiniGrid env; its Atari-style
`get_action_meanings()`; else `action 0 … action n-1`, with a warning. At every reset and step the candidate
set holds only the actions allowed now: an action mask in `info["action_mask"]` (as Taxi-v4 gives) or from an
`action_masks()` method (the sb3-contrib convention) drops the masked ones, keeping the action order. The
wrapper publishes the mask it used as `info["action_mask"]` (int8, all ones when the env masks nothing) and
answers `action_masks()` itself, so masking learners work on the wrapped env too. A step where every action is
masked is an error.

Text games: an env whose action space is `spaces.Text` (or any env, with `commands="<info key>"`) lists the
commands admissible now in `info["admissible_commands"]` (TextWorld's convention), a different list at every step;
the candidate set is that list (each command its own text, label and action), and the action sent to the env is
the chosen command string. `jetgym.envs.textworld` is such an env. A terminated or truncated step needs no
action, so its list may be empty (the candidate set is then `NO_CANDIDATES`); an empty list on any other step
is an error naming the episode and the step.

Vector envs: wrap the sub-envs, not the vector env (`make_vector_env(id, num_envs, ...)` does it); the vector
env's `info["candidates"]` is then an object array with one `CandidateSet` per sub-env (mask `info["_candidates"]`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .minigrid import ACTION_LABELS as MINIGRID_ACTION_LABELS, ACTION_TEXTS as MINIGRID_ACTION_TEXTS, is_minigrid

AutoReset = Literal["disabled", "next_step", "same_step"]
AUTORESET_MODES = {
    "disabled": gym.vector.AutoresetMode.DISABLED,
    "next_step": gym.vector.AutoresetMode.NEXT_STEP,
    "same_step": gym.vector.AutoresetMode.SAME_STEP,
}


@dataclass(frozen=True)
class CandidateSet:
    """The admissible actions as texts: candidate i is `texts[i]` (id `labels[i]`) and means env action `actions[i]`
    (an int for Discrete actions; the command string itself for text commands)."""

    texts: tuple[str, ...]
    labels: tuple[str, ...]
    actions: tuple[int | str, ...]

    def __post_init__(self):
        for name in ("texts", "labels", "actions"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.texts:
            raise ValueError("a candidate set needs at least one candidate")
        if not len(self.texts) == len(self.labels) == len(self.actions):
            raise ValueError("candidate texts, labels and actions must match one to one")
        if any(not isinstance(t, str) or not t for t in self.texts):
            raise ValueError(f"every candidate text must be a non-empty string, got {list(self.texts)}")
        if len(set(self.texts)) != len(self.texts) or len(set(self.labels)) != len(self.labels):
            raise ValueError(
                f"candidate texts and labels must be distinct, got {list(self.texts)} / {list(self.labels)}"
            )

    def subset(self, mask: np.ndarray) -> "CandidateSet":
        """The candidates whose entry of `mask` (one per candidate, in order) is nonzero."""
        keep = [i for i, allowed in enumerate(mask) if allowed]
        return CandidateSet(
            tuple(self.texts[i] for i in keep),
            tuple(self.labels[i] for i in keep),
            tuple(self.actions[i] for i in keep),
        )


def _no_candidates() -> CandidateSet:
    empty = object.__new__(CandidateSet)  # past the check: the one candidate set with nothing in it
    for name in ("texts", "labels", "actions"):
        object.__setattr__(empty, name, ())
    return empty


NO_CANDIDATES = _no_candidates()  # a terminated or truncated step of a text game that lists no command


def action_texts(
    env: gym.Env, n: int, texts: Sequence[str] | None = None, labels: Sequence[str] | None = None
) -> tuple[list[str], list[str]]:
    """(texts, labels) of the `n` actions: the argument, the env's `controls`, `get_action_meanings()`, or a fallback."""
    if texts is None and is_minigrid(env):
        texts = list(MINIGRID_ACTION_TEXTS)
        labels = list(MINIGRID_ACTION_LABELS) if labels is None else labels
    if texts is None:
        controls = getattr(env.unwrapped, "controls", None)
        meanings = getattr(env.unwrapped, "get_action_meanings", None)
        if controls is not None:
            texts, own = _control_texts(env, controls, n)
            labels = own if labels is None else labels
        elif callable(meanings):
            names = list(meanings())
            texts = [name.lower().replace("_", " ") for name in names]
            labels = names if labels is None else labels
        else:
            warnings.warn(
                f"{env_name(env)} has no action texts (no `controls`, no get_action_meanings()): the "
                f"candidates are 'action 0' ... 'action {n - 1}', which tell a language model nothing; pass "
                f"texts=[...] (CLI: 'env.action_texts=[...]')",
                stacklevel=3,
            )
            texts = [f"action {i}" for i in range(n)]
    texts = [str(t) for t in texts]
    labels = [str(i) for i in range(n)] if labels is None else [str(label) for label in labels]
    if len(texts) != n:
        raise ValueError(
            f"{len(texts)} candidate texts for {n} actions: {env_name(env)} has {n} actions, so "
            f"env.action_texts (texts= in Python) needs exactly {n} texts, one per action in order"
        )
    if len(labels) != n:
        raise ValueError(f"{len(labels)} candidate labels for {n} actions")
    for what, values in (("texts", texts), ("labels", labels)):
        repeated = sorted({value for value in values if values.count(value) > 1})
        if repeated:
            raise ValueError(
                f"the {n} action {what} of {env_name(env)} must be distinct, but {repeated[0]!r} is given "
                f"{values.count(repeated[0])} times in {values}: give each action its own text "
                f"(env.action_texts, texts= in Python)"
            )
    return texts, labels


def _control_texts(env: gym.Env, controls: Any, n: int) -> tuple[list[str], list[str]]:
    """(texts, labels) of an env's `controls`: objects with `text` and `label`, or plain strings (each its own label)."""
    kinds = "strings, or objects with .text and .label"
    where = f"{env_name(env)}.controls"
    if isinstance(controls, (str, bytes)) or not isinstance(controls, Sequence):
        raise ValueError(f"{where} must be a list of {n} control texts ({kinds}), got {controls!r}")
    controls = list(controls)
    named = [isinstance(getattr(c, "text", None), str) and hasattr(c, "label") for c in controls]
    wrong = [c for c, ok in zip(controls, named) if not ok and not isinstance(c, str)]
    if wrong:
        raise ValueError(
            f"{where} must be a list of control texts ({kinds}), but holds {wrong[0]!r} "
            f"({type(wrong[0]).__name__}) in {controls!r}"
        )
    if any(named) and not all(named):
        raise ValueError(f"{where} mixes strings and objects with .text and .label in {controls!r}: use one kind")
    texts = [c.text for c in controls] if any(named) else controls
    labels = [c.label for c in controls] if any(named) else controls
    empty = [i for i, text in enumerate(texts) if not text.strip()]
    if empty:
        raise ValueError(f"{where} gives control {empty[0]} an empty text in {texts!r}: every action needs a text")
    if len(texts) != n:
        raise ValueError(
            f"{where} lists {len(texts)} controls but the action space {env.action_space} has {n} "
            f"actions: give one control per action, in order (or env.action_texts, texts= in Python)"
        )
    return list(texts), list(labels)


class UnsupportedActionSpace(TypeError, ValueError):
    """An action space CandidateActions cannot list (a user error: the fix is a wrapper or another env)."""

    def __init__(self, message: str, space: spaces.Space):
        super().__init__(message)
        self.space = space


def env_name(env) -> str:
    """The env's registered id, else its class name (for messages)."""
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None and spec.id else type(env.unwrapped).__name__


COMMANDS_KEY = "admissible_commands"  # where text games list the commands admissible now (TextWorld's name)


class CandidateActions(gym.Wrapper):
    """Adds `info["candidates"]` (a `CandidateSet` of the admissible actions) and `info["action_mask"]` (int8)
    on reset and on every step.

    Discrete action spaces: one candidate per action (texts as the module notes say). Text action spaces
    (`spaces.Text`), or any env given `commands=<info key>`: the candidates are the command strings the env lists
    in `info[commands]` (default `admissible_commands`) at that reset or step, each its own text, label and
    action, so the agent answers with the command string. The list is the admissible set, so nothing is masked:
    `action_masks()` is all ones over it and no `info["action_mask"]` is added (its length changes every step,
    which a vector env's info arrays cannot hold). A terminated or truncated step may list nothing (its
    candidates are `NO_CANDIDATES`); a reset or any other step that lists nothing is an error naming `episode`
    (this wrapper's resets before the current episode's: 0 for the first, as steps.jsonl numbers episodes when
    one env plays them all; a vector env counts per sub-env) and `steps` (the env steps since that reset)."""

    def __init__(
        self,
        env: gym.Env,
        texts: Sequence[str] | None = None,
        labels: Sequence[str] | None = None,
        commands: str | None = None,
    ):
        if isinstance(env, gym.vector.VectorEnv) or hasattr(env, "num_envs"):
            raise TypeError(
                "CandidateActions wraps single envs: wrap each sub-env, e.g. "
                "jetgym.envs.candidates.make_vector_env(env_id, num_envs, texts=[...]) or "
                "gymnasium.make_vec(env_id, num_envs, wrappers=[lambda e: CandidateActions(e, texts)])"
            )
        super().__init__(env)
        if commands is None and isinstance(env.action_space, spaces.Text):
            commands = COMMANDS_KEY
        self.commands = commands
        self.episode, self.steps = -1, 0
        if commands is not None:
            if not isinstance(commands, str) or not commands:
                raise ValueError(
                    f"commands must name the info key that lists the admissible commands, got {commands!r}"
                )
            if texts is not None or labels is not None:
                raise ValueError(
                    f"{env_name(env)} takes text commands: its candidates are the commands it lists in "
                    f"info[{commands!r}] at every step, so texts=/labels= do not apply (CLI: leave "
                    "env.action_texts null)"
                )
            self.candidates = None
            self.mask = np.ones(0, np.int8)
            return
        if isinstance(env.action_space, spaces.Box):
            raise UnsupportedActionSpace(
                f"CandidateActions needs a Discrete action space, got {env.action_space}: discretize it "
                f"first, e.g. CandidateActions(gymnasium.wrappers.DiscretizeAction(env, bins=5), "
                f"texts=[...])",
                env.action_space,
            )
        if not isinstance(env.action_space, spaces.Discrete):
            raise UnsupportedActionSpace(
                f"CandidateActions needs a Discrete or Text action space, got {env.action_space} (an env "
                f"that lists string commands in info: CandidateActions(env, commands='admissible_commands'))",
                env.action_space,
            )
        n, start = int(env.action_space.n), int(env.action_space.start)
        texts, labels = action_texts(env, n, texts, labels)
        self.candidates = CandidateSet(tuple(texts), tuple(labels), tuple(range(start, start + n)))
        self.mask = np.ones(n, np.int8)

    def action_masks(self) -> np.ndarray:
        """The current mask, one int8 per action (sb3-contrib's convention)."""
        return self.mask.copy()

    def _env_mask(self, info: dict) -> np.ndarray | None:
        if "action_mask" in info:
            return np.asarray(info["action_mask"])
        try:
            method = self.env.get_wrapper_attr("action_masks")
        except AttributeError:
            return None
        return np.asarray(method()) if callable(method) else None

    def _command_candidates(self, info: dict, done: bool) -> dict:
        listed = info.get(self.commands)
        if listed is None:
            raise ValueError(
                f"{env_name(self.env)} takes text commands but puts no list in info[{self.commands!r}] at "
                "this step: the env must list its admissible commands there on reset and every step "
                "(or pass commands=<the info key it uses>)"
            )
        if isinstance(listed, str) or not all(isinstance(c, str) and c.strip() for c in listed):
            raise ValueError(f"info[{self.commands!r}] must be a list of non-empty command strings, got {listed!r}")
        commands = tuple(dict.fromkeys(c.strip() for c in listed))  # distinct, in the env's order
        self.mask = np.ones(len(commands), np.int8)
        if not commands:
            if done:  # no action follows a terminated or truncated step
                return {**info, "candidates": NO_CANDIDATES}
            raise ValueError(
                f"{env_name(self.env)} lists no admissible command in info[{self.commands!r}] at episode "
                f"{self.episode}, step {self.steps} (an env must list at least one command on every "
                "step that is not terminated or truncated)"
            )
        return {**info, "candidates": CandidateSet(commands, commands, commands)}

    def _with_candidates(self, info: dict, done: bool = False) -> dict:
        if self.commands is not None:
            return self._command_candidates(info, done)
        n = len(self.candidates.actions)
        mask = self._env_mask(info)
        if mask is None:
            mask = np.ones(n, np.int8)
        mask = mask.reshape(-1)
        if mask.shape != (n,):
            raise ValueError(f"the action mask has shape {mask.shape}, the action space has {n} actions")
        self.mask = (mask != 0).astype(np.int8)
        if not self.mask.any():
            raise ValueError(
                f"every action of {env_name(self.env)} is masked at this step: there is no admissible "
                "candidate (check the env's action_mask / action_masks())"
            )
        candidates = self.candidates if self.mask.all() else self.candidates.subset(self.mask)
        return {**info, "candidates": candidates, "action_mask": self.mask.copy()}

    def reset(self, **kwargs):
        where = f"{env_name(self.env)}'s reset() at episode {self.episode + 1}"
        obs, info = call_env(lambda: self.env.reset(**kwargs), where, ("observation", "info"))
        self.episode, self.steps = self.episode + 1, 0
        return obs, self._with_candidates(info)

    def step(self, action):
        shown = repr(action) if isinstance(action, str) else str(action)
        where = f"{env_name(self.env)}'s step({shown}) at episode {self.episode}, step {self.steps}"
        obs, reward, terminated, truncated, info = call_env(lambda: self.env.step(action), where, STEP_VALUES)
        self.steps += 1
        check_reward(reward, f"{env_name(self.env)}'s step() at episode {self.episode}, step {self.steps - 1}")
        return obs, reward, terminated, truncated, self._with_candidates(info, bool(terminated or truncated))


STEP_VALUES = ("observation", "reward", "terminated", "truncated", "info")


class EnvError(ValueError):
    """An error raised inside an env's own reset or step (or a result outside Gymnasium's API), named as the
    env's: its id, the call, the episode and step, and the original exception (its `__cause__`)."""


def call_env(run: Callable[[], Any], where: str, values: tuple[str, ...]) -> tuple:
    """`run()` (an env's reset or step), with its errors and a result of the wrong shape named as the env's."""
    try:
        result = run()
    except EnvError:
        raise
    except Exception as error:
        old = f"; {OLD_STEP}" if "(expected 5, got 4)" in str(error) else ""  # a wrapper unpacked an old 4-tuple
        raise EnvError(
            f"{where} raised {type(error).__name__}: {error} (an error inside the env, not in jetgym; "
            f"HYDRA_FULL_ERROR=1 shows its traceback){old}"
        ) from error
    if not isinstance(result, tuple) or len(result) != len(values):
        got = f"{len(result)} values" if isinstance(result, tuple) else type(result).__name__
        old = f" ({OLD_STEP})" if len(values) == 5 else ""
        raise EnvError(f"{where} returned {got}; Gymnasium's API returns {len(values)}: ({', '.join(values)}){old}")
    return result


OLD_STEP = "the old gym API's 4-tuple: split done into terminated and truncated"


def check_reward(reward: Any, where: str) -> None:
    """Refuse a reward that is not a finite number (NaN would spread into returns, advantages and losses)."""
    try:
        finite = math.isfinite(float(reward))
    except (TypeError, ValueError):
        raise ValueError(f"{where} returned reward = {reward!r}, not a number: fix the env's reward") from None
    if not finite:
        raise ValueError(
            f"{where} returned reward = {float(reward)}: a reward must be a finite number; fix the env's reward"
        )


def make_vector_env(
    env_id: str,
    num_envs: int,
    texts: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    mode: Literal["sync", "async"] = "sync",
    autoreset: AutoReset = "disabled",
    env_wrappers: Sequence[Any] = (),
    commands: str | None = None,
    **kwargs,
) -> gym.vector.VectorEnv:
    """`num_envs` copies of `env_id` (made with `kwargs`), each wrapped with `CandidateActions`, as a Sync or
    Async vector env. autoreset: `disabled` (the default: `jetgym.agents.rollout` resets each finished sub-env
    with the next episode's seed, so episode n always has seed seed+n), `next_step` or `same_step`.
    env_wrappers: applied to each sub-env before `CandidateActions` (e.g. DiscretizeAction); commands: as for
    `CandidateActions` (text-command envs; a Text action space needs nothing)."""
    from functools import partial

    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if mode not in ("sync", "async"):
        raise ValueError(f"unknown vector mode {mode!r}; known: sync, async")
    if autoreset not in AUTORESET_MODES:
        raise ValueError(f"unknown autoreset {autoreset!r}; known: {', '.join(AUTORESET_MODES)}")
    wrappers = [*env_wrappers, partial(CandidateActions, texts=texts, labels=labels, commands=commands)]
    return gym.make_vec(
        env_id,
        num_envs,
        vectorization_mode=mode,
        wrappers=wrappers,
        vector_kwargs={"autoreset_mode": AUTORESET_MODES[autoreset]},
        **kwargs,
    )
