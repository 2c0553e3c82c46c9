"""`scorer`: the agent that asks a candidate scorer which action to take, on any env with discrete actions."""

from __future__ import annotations

import json
import warnings
from collections import deque
from typing import Any, Callable, Literal, Sequence

import numpy as np

from jetgym.scorers import Question
from jetgym.scorers.decision import draw
from jetgym.scorers.registry import check_choice

from .base import AGENTS, Act, check_batch
from .describers import env_attr, infer_space, is_image, make_describer, representative
from .prompt import check_examples, question_messages, question_text

Perception = Literal["none", "describe"]
# how the agent picks (the trainable model is training.policy.Policy)
PolicyMode = Literal["auto", "argmax", "untried", "sample"]
PERCEPTIONS = ("none", "describe")
POLICIES = ("auto", "argmax", "untried", "sample")
MANY_CANDIDATES = 64  # more in one question: every decision scores them all, a warning says so (once per agent)


def check_agent_options(perception: str, policy: str, memory: int, temperature: float, prefix: str = "") -> None:
    """The scorer agent's option checks (the one copy: `ScorerAgent` and the `agent` config call it); prefix: where
    the options were set (e.g. "agent."), named in the error."""
    check_choice(f"{prefix}perception", perception, PERCEPTIONS)
    check_choice(f"{prefix}policy", policy, POLICIES)
    if memory < 0:
        raise ValueError(f"{prefix}memory must be >= 0, got {memory}")
    if not temperature > 0:
        raise ValueError(f"{prefix}temperature must be > 0, got {temperature}")


def deterministic(env) -> bool:
    """Whether `env`'s steps are deterministic as far as jetgym can tell: one that says so (a true `deterministic`
    attribute through its wrappers), a MiniGrid or BabyAI env, or a table env (Gymnasium's toy text: `P[state][action]`
    lists the outcomes) whose every action has one outcome (Taxi, CliffWalking, the still FrozenLake)."""
    from jetgym.envs.minigrid import is_minigrid

    if env is None:
        return False
    if env_attr(env, "deterministic", False) or is_minigrid(representative(env)):
        return True
    table = env_attr(env, "P")
    return isinstance(table, dict) and all(len(outcomes) == 1 for row in table.values() for outcomes in row.values())


def resolve_policy(policy: str, env=None) -> str:
    """`auto`: `untried` on a deterministic env (where a memoryless argmax that comes back to a view it has seen
    repeats itself to the time limit), else `argmax`; any other policy as it is."""
    if policy != "auto":
        return policy
    return "untried" if deterministic(env) else "argmax"


@AGENTS.register("scorer")
class ScorerAgent:
    """Builds a question from the observation, asks the scorer (`decide_many`), acts on the distribution.

    The question: the task text, the observation as text (a describer), the agent's last `memory` actions and
    the candidate texts; the scorer returns a distribution over the admissible candidates only.

    scorer: any `jetgym.scorers` scorer; task: fixed text (default: the env's `task` attribute when `env` is
    given); memory: how many of its own last actions are quoted; describer: `auto`, a registered name
    (`jetgym.agents.describers.DESCRIBERS`) or a callable `observation -> str`; perception: for image
    observations, `describe` (a sentence from the pixels) or `none`; policy: `argmax` (the scorer's choice),
    `untried` (the argmax among the candidates not yet taken at this question in this episode; every one taken:
    start over; so a memoryless agent does not turn between two look-alike views to the time limit), `auto`
    (`untried` on a deterministic env, else `argmax`: `resolve_policy`) or `sample` (seeded per episode and
    slot, from softmax(scores / temperature), the scores the decision rule uses);
    examples: worked (observation text, control text) pairs shown as earlier chat turns (`agents.prompt`; chat
    template only), the observation texts written as the describer writes them; screenshot: attach the image
    observation as the question's image (vision-language models only); env / observation_space: where the
    describer reads the space (and env-provided describers, names and maps) from; without either, the space
    is inferred from the first observation.

    A question with more than `MANY_CANDIDATES` candidates (a text game admitting hundreds of commands) warns
    once per agent: every decision scores all of them.
    """

    def __init__(
        self,
        scorer,
        task: str | None = None,
        memory: int = 0,
        describer: str | Callable = "auto",
        perception: Perception = "describe",
        policy: PolicyMode = "auto",
        temperature: float = 1.0,
        screenshot: bool = False,
        env=None,
        observation_space=None,
        digits: int = 4,
        examples=(),
    ):
        check_agent_options(perception, policy, memory, temperature)
        if digits < 1:
            raise ValueError(f"digits must be >= 1, got {digits}")
        self.scorer, self.memory = scorer, memory
        self.task = (env_attr(env, "task", "") or "") if task is None else task
        self.perception, self.temperature, self.screenshot = perception, temperature, screenshot
        self.policy = resolve_policy(policy, env)
        self.digits = digits
        self.examples = check_examples(examples)
        self._spec, self._env = describer, env
        if not (callable(describer) or isinstance(describer, str)):
            raise TypeError(
                f"describer must be a name or a callable observation -> str, got {type(describer).__name__}"
            )
        space = observation_space
        if space is None and env is not None:
            space = getattr(env, "single_observation_space", None) or env.observation_space
        self.space = space
        self.describer = None if space is None and not callable(describer) else self._build(space)
        self.recent: dict[int, deque[str]] = {}
        self.rngs: dict[int, np.random.Generator] = {}
        self.taken: dict[int, dict[str, set[int]]] = {}  # slot -> question text -> candidates taken there
        self.warned_many = False

    def _build(self, space):
        return make_describer(self._spec, space, self._env, self.perception, self.digits)

    def describe(self, observation) -> str:
        """The observation as text (the describer is built from the first observation when no space was given)."""
        try:
            if self.describer is None:
                self.space = infer_space(observation)
                self.describer = self._build(self.space)
            return self.describer(observation)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as error:
            space = "no observation space" if self.space is None else f"the observation space {self.space}"
            raise ValueError(
                f"cannot describe an observation of type {type(observation).__name__} as {space} "
                f"({type(error).__name__}: {error}): the env returned an observation its space does not hold; fix the "
                f"env's observations or observation_space, or pass a describer (a callable observation -> str)"
            ) from error

    def reset(self, seed: int | None = None, slot: int = 0) -> None:
        self.recent[slot] = deque(maxlen=self.memory)
        self.rngs[slot] = np.random.default_rng(seed)
        self.taken[slot] = {}

    def question(self, observation, candidates, slot: int = 0) -> Question:
        """The scorer question for this observation: only the observation's text, own actions, the candidates."""
        recent = list(self.recent.get(slot, ()))
        observed = self.describe(observation)
        if self.examples:
            text = question_messages(self.task, observed, recent, candidates.texts, self.examples, self.memory)
        else:
            text = question_text(self.task, observed, recent, candidates.texts, self.memory)
        images = _images(observation) if self.screenshot else ()
        if len(candidates.texts) > MANY_CANDIDATES and not self.warned_many:
            self.warned_many = True
            warnings.warn(
                f"a question with {len(candidates.texts)} candidates (more than {MANY_CANDIDATES}): every "
                f"decision scores all of them (with hundreds, tens of seconds a decision on a CPU); to go "
                f"faster, play an env that admits fewer actions (a text game with fewer rooms and "
                f"objects), place the model on a GPU (placement.device=cuda) or use a smaller model "
                f"(model.spec)",
                stacklevel=2,
            )
        return Question(context=text, candidates=candidates.texts, labels=candidates.labels, images=images)

    def record(self, text: str, slot: int = 0) -> None:
        """Note that `text` was the action taken in `slot` (the memory quotes it in the next questions)."""
        if self.memory:
            self.recent.setdefault(slot, deque(maxlen=self.memory)).append(text)

    def act(self, observation, candidates, slot: int = 0) -> Act:
        return self.act_many([observation], [candidates], [slot])[0]

    def act_many(
        self, observations: Sequence[Any], candidate_sets: Sequence[Any], slots: Sequence[int] | None = None
    ) -> list[Act]:
        """One `scorer.decide_many` call for the whole batch (one question per sub-env)."""
        slots = check_batch(observations, candidate_sets, slots)
        if not slots:
            return []
        questions = [self.question(o, c, s) for o, c, s in zip(observations, candidate_sets, slots)]
        decisions = self.scorer.decide_many(questions)
        return [self._choose(q, d, c, s) for q, d, c, s in zip(questions, decisions, candidate_sets, slots)]

    def _choose(self, question: Question, decision, candidates, slot: int) -> Act:
        if self.policy == "sample":
            index = self._sample(decision.corrected, slot)
        elif self.policy == "untried":
            index = self._untried(question.context, decision, slot)
        else:
            index = decision.choice
        self.record(candidates.texts[index], slot)
        usage = decision.usage.to_dict() if hasattr(decision.usage, "to_dict") else None
        return Act(
            index,
            candidates.actions[index],
            candidates.labels[index],
            candidates.texts[index],
            tuple(decision.probs),
            tuple(decision.logprobs),
            question.context,
            usage,
        )

    def _untried(self, context, decision, slot: int) -> int:
        """The argmax among the candidates not yet taken at this question in this episode (all taken: start over)."""
        key = context if isinstance(context, str) else json.dumps(context, sort_keys=True)
        taken = self.taken.setdefault(slot, {}).setdefault(key, set())
        if len(taken) >= len(decision.probs):
            taken.clear()
        index = decision.choice
        if index in taken:
            scores = decision.corrected
            index = max((k for k in range(len(scores)) if k not in taken), key=lambda k: (scores[k], -k))
        taken.add(index)
        return index

    def _sample(self, scores, slot: int) -> int:
        return draw(scores, self.temperature, self.rngs.setdefault(slot, np.random.default_rng()))


def _images(observation) -> tuple:
    """The image(s) in an observation: the value itself, or `screen`/image entries of a dict."""
    if isinstance(observation, dict):
        if "screen" in observation:
            return (observation["screen"],)
        return tuple(v for v in observation.values() if isinstance(v, np.ndarray) and _looks_like_image(v))
    return (observation,) if isinstance(observation, np.ndarray) and _looks_like_image(observation) else ()


def _looks_like_image(array: np.ndarray) -> bool:
    return is_image(infer_space(array))
