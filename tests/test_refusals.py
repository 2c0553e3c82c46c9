"""Inputs that cannot be right are refused, naming the field and the fix (issue 27, item 5): single-choice
questions in a QA run, unknown or repeated keys in a question file, and the scorer API's type errors (the bad
questions themselves are in the table of `test_bad_inputs.py`)."""

from __future__ import annotations

import json

import pytest

from jetgym.questions.sets import QuestionSetError, load_jsonl
from jetgym.runs import qa as runner
from jetgym.scorers import make_scorer
from jetgym.scorers.base import naming_question
from jetgym.scorers.types import Question
from jetgym.scripts.config import compose


def test_an_assistant_turn_with_tool_calls_may_have_empty_content():
    Question(
        context=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [{"name": "w"}]},
            {"role": "tool", "content": "sunny"},
        ],
        candidates=["a", "b"],
    )


FILES = [
    (
        "unknown-key",
        '{"question": "q", "choices": ["a", "b"], "answer": 0, "idd": "x"}',
        ":1: unknown key 'idd'; did you mean 'id'? a question row has the keys question, choices, answer, id",
    ),
    (
        "unknown-key-no-match",
        '{"question": "q", "choices": ["a", "b"], "answer": 0, "subject": "math"}',
        ":1: unknown key 'subject'; a question row has the keys question, choices, answer, id",
    ),
    (
        "duplicate-key",
        '{"question": "q", "choices": ["a", "b"], "answer": 0, "answer": 1}',
        ":1: the key 'answer' appears twice in one object (JSON readers keep only the last); keep one",
    ),
    (
        "duplicate-nested-key",
        '{"question": "q", "choices": ["a", "b"], "answer": 0, "id": {"x": 1, "x": 2}}',
        ":1: the key 'x' appears twice in one object",
    ),
]


@pytest.mark.parametrize("line,fragment", [case[1:] for case in FILES], ids=[case[0] for case in FILES])
def test_a_question_file_with_an_unknown_or_repeated_key_is_refused(tmp_path, line, fragment):
    path = tmp_path / "set.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(QuestionSetError) as caught:
        load_jsonl(str(path))
    assert f"{path}{fragment}" in str(caught.value)


def single_choice_set(tmp_path):
    path = tmp_path / "set.jsonl"
    rows = [
        {"question": "2+2?", "choices": ["3", "4"], "answer": 1, "id": "sum"},
        {"question": "Pick", "choices": ["x"], "answer": 0, "id": "lone"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_single_choice_question_is_refused_by_run_qa_unless_allowed(tmp_path, fake_scorer):
    questions = load_jsonl(str(single_choice_set(tmp_path)))
    with pytest.raises(
        ValueError,
        match=r"question 'lone' \(.*set.jsonl:2\) has a single choice ' x': it is always "
        r"chosen, so always graded correct; give it at least two different choices, "
        r"or set allow_single_choice=true to score it anyway",
    ):
        runner.run_qa(questions, make_scorer("fake"), tmp_path / "out", quiet=True)
    assert not (tmp_path / "out" / "run.json").exists() and fake_scorer.calls == 0
    same_text = [Question(context="q", candidates=["a", "a"], gold=0, id="twice")]
    with pytest.raises(ValueError) as caught:
        runner.run_qa(same_text, make_scorer("fake"), tmp_path / "out", quiet=True)
    assert str(caught.value) == (
        "question 'twice' has 2 identical choices, each 'a' (the same text repeated): it is "
        "always chosen, so always graded correct; give it at least two different choices, or "
        "set allow_single_choice=true to score it anyway"
    )
    summary = runner.run_qa(questions, make_scorer("fake"), tmp_path / "out", quiet=True, allow_single_choice=True)
    assert summary["graded"] == 2


def test_jetgym_qa_refuses_a_single_choice_question_unless_allowed(tmp_path, fake_scorer):
    from jetgym.scripts.qa import qa_job

    path = single_choice_set(tmp_path)
    overrides = [f"output_dir={tmp_path / 'out'}", "scorer.name=fake", "dataset=jsonl", f"dataset.path={path}"]
    with pytest.raises(ValueError, match="set allow_single_choice=true to score it anyway"):
        qa_job(compose("qa", overrides))
    assert qa_job(compose("qa", [*overrides, "allow_single_choice=true"]))["graded"] == 2


def test_the_api_says_what_to_pass(fake_scorer):
    scorer = make_scorer("fake")
    question = Question(context="q", candidates=["a", "b"], id="q0")
    cases = [
        (
            lambda: scorer.decide({"context": "q", "candidates": ["a", "b"]}),
            "decide takes one jetgym.scorers.Question, got dict {'context': 'q', 'candidates': ['a', 'b']}: write "
            "decide(Question(context=..., candidates=[...]))",
        ),
        (lambda: scorer.decide([question]), "(a list of questions goes to decide_many)"),
        (
            lambda: scorer.decide_many("text"),
            "decide_many takes a list of jetgym.scorers.Question, got str 'text': write "
            "decide_many([Question(context=..., candidates=[...]), ...])",
        ),
        (
            lambda: scorer.decide_many(question),
            "decide_many takes a list of Questions, got one Question: write "
            "decide_many([question]) (or decide(question))",
        ),
        (lambda: scorer.decide_many({"context": "q"}), "decide_many takes a list of jetgym.scorers.Question, got dict"),
        (
            lambda: scorer.decide_many([question, {"context": "q"}]),
            "decide_many: questions[1] must be a jetgym.scorers.Question, got dict {'context': 'q'}: write Question(**row)",
        ),
    ]
    for call, fragment in cases:
        with pytest.raises(TypeError) as caught:
            call()
        assert fragment in str(caught.value)


def test_a_bad_question_in_a_batch_is_named_by_index_and_id():
    question = Question(context="q", candidates=["a", "b"], id="q7")
    with pytest.raises(ValueError, match=r"^questions\[3\] \(id 'q7'\): too long$"):
        with naming_question(3, question, batch=5):
            raise ValueError("too long")
    with pytest.raises(ValueError, match=r"^too long$"):  # alone, it needs no name
        with naming_question(0, question, batch=1):
            raise ValueError("too long")


def test_decide_many_names_the_bad_question_of_a_batch():
    scorer = make_scorer("jet", model="smollm2-135m-instruct", template="none")
    batch = [
        Question(context="a", candidates=["x", "y"], id="fine"),
        Question(context="b", candidates=["x", "y"], id="picture", images=["/x.png"]),
    ]
    with pytest.raises(
        ValueError,
        match=r"questions\[1\] \(id 'picture'\): model 'smollm2-135m-instruct' cannot score "
        r"images",
    ):
        scorer.decide_many(batch)


def taxi_config(out, *overrides):
    return compose(
        "episode",
        [
            "env=taxi",
            "agent=scorer",
            "scorer.name=fake",
            "video=false",
            "episodes=1",
            "+env.kwargs.max_episode_steps=12",
            f"output_dir={out}",
            *overrides,
        ],
    )


def test_a_worked_example_is_checked_against_the_full_action_set_not_one_steps_mask(tmp_path, fake_scorer):
    """Taxi's mask removes `drop off the passenger` at most steps; an example playing it is still valid."""
    from jetgym.scripts.episode import episode_job

    example = "env.examples=[[You are at the start.,drop off the passenger]]"
    summary = episode_job(taxi_config(tmp_path / "out", example), quiet=True)
    steps = (tmp_path / "out" / "steps.jsonl").read_text().splitlines()
    assert summary["episodes"] == 1 and len(steps) == 12
    masked = [line for line in steps if "5" not in json.loads(line)["probs"]]  # label 5: drop off the passenger
    assert masked  # steps where the example's control was not a candidate were played, not refused


def test_a_worked_example_with_a_control_the_env_lacks_is_refused_before_any_step(tmp_path, fake_scorer):
    from jetgym.scripts.episode import episode_job

    with pytest.raises(
        ValueError,
        match=r"env.examples\[0\]: the control 'fly away' \(for 'start'\) is not one of "
        r"Taxi-v4's controls \(move south, move north, move east, move west, pick up "
        r"the passenger, drop off the passenger\); write one of them",
    ):
        episode_job(taxi_config(tmp_path / "out", "env.examples=[[start,fly away]]"), quiet=True)
    assert not (tmp_path / "out" / "steps.jsonl").exists()
