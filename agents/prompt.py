"""The text a text-only model sees: the task, the observation as text, recent actions, the candidates.

Two layouts: one user message holding all of it (`question_text`), or, with worked examples, a chat
(`question_messages`): a system message with the task and the controls, one user/assistant turn pair per
example (an observation text and the control played), then the current observation as the last user turn.
Small models follow the examples' pattern where they ignore a one-message question (docs/benchmarks.md).

Everything here is a function of the observation (through a describer, `jetgym.agents.describers`), the
agent's own past choices and the candidate texts; nothing else is read from the env.
"""

from __future__ import annotations

from typing import Sequence

QUESTION = "What should you do now? Answer with one control."


def recent_text(recent: Sequence[str]) -> str:
    return "Your last actions: " + (", ".join(recent) if recent else "none yet") + "."


def question_text(
    task: str, observation: str, recent: Sequence[str], candidates: Sequence[str], memory: int = 1
) -> str:
    """The user message of one decision: task, observation text (one or more lines), recent actions (when
    `memory` > 0), controls."""
    lines = [
        task.strip(),
        observation.strip(),
        recent_text(recent) if memory else "",
        "Controls: " + ", ".join(candidates) + ".",
        QUESTION,
    ]
    return "\n".join(line for line in lines if line)


def check_examples(examples) -> tuple[tuple[str, str], ...]:
    """Worked examples as (observation text, control text) pairs; a clear error for anything else."""
    pairs = []
    for i, example in enumerate(examples or ()):
        if isinstance(example, str) or len(example) != 2 or not all(isinstance(t, str) and t.strip() for t in example):
            raise ValueError(
                f"examples[{i}] must be an [observation text, control text] pair of non-empty texts, got {example!r}"
            )
        pairs.append((example[0].strip(), example[1].strip()))
    return tuple(pairs)


def check_example_controls(examples: Sequence[tuple[str, str]], controls: Sequence[str], env_name: str) -> None:
    """Refuse a worked example whose control is none of the env's controls (its full action set, never one step's
    masked candidates), naming the example and the controls."""
    for i, (observed, control) in enumerate(examples):
        if control not in controls:
            raise ValueError(
                f"env.examples[{i}]: the control {control!r} (for {observed!r}) is not one of {env_name}'s "
                f"controls ({', '.join(controls)}); write one of them"
            )


def question_messages(
    task: str,
    observation: str,
    recent: Sequence[str],
    candidates: Sequence[str],
    examples: Sequence[tuple[str, str]],
    memory: int,
) -> list[dict]:
    """The chat of one decision with worked examples (see the module notes); recent actions join the last
    user turn when `memory` > 0. An example's control need not be admissible at this step (a mask may remove it
    here): it is checked once against the env's full action set (`check_example_controls`)."""
    system = "\n".join(line for line in (task.strip(), "Controls: " + ", ".join(candidates) + ".", QUESTION) if line)
    messages = [{"role": "system", "content": system}]
    for observed, control in examples:
        messages += [{"role": "user", "content": observed}, {"role": "assistant", "content": control}]
    last = observation.strip() + ("\n" + recent_text(recent) if memory else "")
    return messages + [{"role": "user", "content": last}]
