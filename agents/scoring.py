"""`scorer`: the agent that asks a candidate scorer which control to use."""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import numpy as np

from jetgym.scorers import Question
from jetgym.scorers.registry import check_choice

from .base import AGENTS, Act
from .perception import describe
from .prompt import question_text

Perception = Literal["none", "describe"]
Policy = Literal["argmax", "sample"]
PERCEPTIONS = ("none", "describe")
POLICIES = ("argmax", "sample")


@AGENTS.register("scorer")
class ScorerAgent:
    """Builds a question from the observation, asks `scorer.decide_many([question])`, acts on the distribution.

    task: the scenario briefing (fixed text); memory: how many of its own last actions are quoted;
    perception: `none` (status only) or `describe` (adds `jetgym.agents.perception.describe` of the screen);
    policy: `argmax` (the scorer's choice) or `sample` (seeded, from softmax(logprobs / temperature));
    screenshot: attach the screen as the question's image (vision-language models only).
    """

    def __init__(self, scorer, task: str = "", memory: int = 4, perception: Perception = "describe",
                 policy: Policy = "argmax", temperature: float = 1.0, screenshot: bool = False):
        check_choice("perception", perception, PERCEPTIONS)
        check_choice("policy", policy, POLICIES)
        if memory < 0:
            raise ValueError(f"memory must be >= 0, got {memory}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.scorer, self.task, self.memory = scorer, task, memory
        self.perception, self.policy, self.temperature, self.screenshot = perception, policy, temperature, screenshot
        self.recent: deque[str] = deque(maxlen=memory)
        self.rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self.recent = deque(maxlen=self.memory)
        self.rng = np.random.default_rng(seed)

    def question(self, observation, candidates) -> Question:
        """The scorer question for this observation: only the screen, the status, own actions, controls."""
        seen = describe(observation["screen"]) if self.perception == "describe" else None
        text = question_text(self.task, observation["status"], list(self.recent), candidates.texts, seen)
        images = (observation["screen"],) if self.screenshot else ()
        return Question(context=text, candidates=candidates.texts, labels=candidates.labels, images=images)

    def act(self, observation, candidates) -> Act:
        question = self.question(observation, candidates)
        decision = self.scorer.decide_many([question])[0]
        index = decision.choice if self.policy == "argmax" else self._sample(decision.logprobs)
        if self.memory:
            self.recent.append(candidates.texts[index])
        usage = decision.usage.to_dict() if hasattr(decision.usage, "to_dict") else None
        return Act(index, candidates.actions[index], candidates.labels[index], candidates.texts[index],
                   tuple(decision.probs), tuple(decision.logprobs), question.context, usage)

    def _sample(self, logprobs) -> int:
        scaled = [lp / self.temperature for lp in logprobs]
        top = max(scaled)
        weights = np.array([math.exp(s - top) for s in scaled])
        return int(self.rng.choice(len(weights), p=weights / weights.sum()))
