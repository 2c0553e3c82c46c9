"""A resumed QA run knows what it resumes (issue 27, item 1): every response row carries its question's
fingerprint; a question set that changed under the same ids, ids taken from row order that now mean other rows,
responses without their run.json, and incomplete rows are refused or rescored, never mixed in."""

from __future__ import annotations

import json

import pytest

from jetgym.questions.sets import load_jsonl
from jetgym.runs import identity
from jetgym.runs import qa as runner
from jetgym.scorers import make_scorer
from jetgym.scorers.types import Question


def write_set(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def rows(n=6, with_ids=True, shift=0):
    made = [
        {"question": f"What is {k} + {k}?", "choices": [str(2 * k), str(k + 1), "none"], "answer": 0}
        for k in range(1 + shift, n + 1 + shift)
    ]
    return [{**row, "id": f"q{k}"} for k, row in enumerate(made)] if with_ids else made


def run(questions, out, **options):
    return runner.run_qa(questions, make_scorer("fake"), out, chunk_size=2, quiet=True, **options)


def test_an_edited_question_file_is_refused_naming_what_changed(tmp_path, fake_scorer):
    path = write_set(tmp_path / "set.jsonl", rows())
    out = tmp_path / "out"
    run(load_jsonl(path)[:4], out)  # a first run over part of the set
    before = (out / "responses.jsonl").read_bytes()
    edited = rows()
    edited[0]["answer"] = 1
    edited[1]["choices"] = ["4", "5", "none"]
    edited[3]["question"] = "What is 4 + 4, really?"
    write_set(tmp_path / "set.jsonl", edited)
    with pytest.raises(ValueError) as caught:
        run(load_jsonl(path), out)
    assert str(caught.value) == (
        f"{out / 'responses.jsonl'} answers another version of these questions ('q0' ({path}:1): its gold answer; "
        f"'q1' ({path}:2): its choices; 'q3' ({path}:4): its context): resuming would mix answers "
        f"to both; restore the questions or use a fresh output_dir."
    )
    assert (out / "responses.jsonl").read_bytes() == before
    write_set(tmp_path / "set.jsonl", rows())  # restored: the run resumes and finishes
    assert run(load_jsonl(path), out)["requests"] == 6


def test_ids_from_row_order_are_refused_when_a_row_is_inserted(tmp_path, fake_scorer):
    path = write_set(tmp_path / "set.jsonl", rows(with_ids=False))
    out = tmp_path / "out"
    run(load_jsonl(path)[:4], out)
    run(load_jsonl(path), out)  # same content, same derived ids: resumes
    assert len((out / "responses.jsonl").read_text().splitlines()) == 6
    write_set(
        tmp_path / "set.jsonl",
        [{"question": "A new first question?", "choices": ["a", "b"], "answer": 0}, *rows(with_ids=False)],
    )
    with pytest.raises(ValueError) as caught:
        run(load_jsonl(path), out)
    message = str(caught.value)
    assert f"answers another version of these questions ('set-0' ({path}:1): its context, its choices" in message
    assert message.endswith(
        "The ids come from row order (the file gives no 'id'), so a row inserted or removed "
        "renumbers every later question: give each question an 'id'."
    )


def test_responses_without_their_run_json_are_refused(tmp_path, fake_scorer):
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    out = tmp_path / "out"
    run(questions[:3], out)
    (out / "run.json").unlink()
    with pytest.raises(
        ValueError,
        match=rf"^{out} holds responses.jsonl but no run.json: the settings its responses "
        rf"were scored with are unknown, so the run cannot resume; restore run.json "
        rf"or use a fresh output_dir$",
    ):
        run(questions, out, settings={"scorer": {"schedule": "independent"}})
    assert not (out / "run.json").exists()


def test_a_hand_cut_last_row_is_rescored_not_counted(tmp_path, fake_scorer):
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    reference = tmp_path / "reference"
    run(questions, reference)
    expected = (reference / "responses.jsonl").read_bytes()
    out = tmp_path / "out"
    run(questions, out)
    kept = expected.splitlines(keepends=True)[:5]
    (out / "responses.jsonl").write_bytes(b"".join(kept) + b'{"id": "q5"}\n')
    fake_scorer.calls = 0
    summary = run(questions, out)
    assert fake_scorer.calls == 2  # q5's chunk (q4, q5) is scored again; only q5 is written
    assert (out / "responses.jsonl").read_bytes() == expected
    assert summary["requests_this_run"] == 1


def test_an_incomplete_row_before_the_end_is_an_error(tmp_path, fake_scorer):
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    out = tmp_path / "out"
    run(questions[:4], out)
    lines = (out / "responses.jsonl").read_text().splitlines()
    lines[1] = json.dumps({"id": "q1", "choice": "A"})
    (out / "responses.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError,
        match=r"responses.jsonl:2: the response to 'q1' is incomplete \(it lacks correct, gold, gold_nll, labels, "
        r"logprobs, probs, usage\); delete that line to score the question again, or "
        r"use a fresh output_dir",
    ):
        run(questions, out)


def test_a_damaged_key_in_a_middle_row_is_an_error_naming_the_line(tmp_path, fake_scorer):
    """Issue 48, item 1: one byte turning "correct" into "corr}ct" (still valid JSON) was trusted."""
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    out = tmp_path / "out"
    run(questions, out)
    path = out / "responses.jsonl"
    data = path.read_bytes().splitlines(keepends=True)
    data[2] = data[2].replace(b'"correct"', b'"corr}ct"', 1)
    path.write_bytes(b"".join(data))
    with pytest.raises(ValueError) as caught:
        run(questions, out)
    assert str(caught.value) == (
        f"{path}:3: the response to 'q2' is incomplete (it lacks correct); delete that line to score the "
        f"question again, or use a fresh output_dir"
    )


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("correct", "flip", "its correct {value!r} does not follow from choice 'B' and gold 'A'"),
        ("gold", "B", "its gold 'B' is not the question's 'A'"),
        ("gold_nll", 0.5, "its gold_nll 0.5 is not the {expected} its scores give"),
        ("choice", "E", "its choice 'E' is none of its labels"),
        ("labels", ["A", "B", "D"], "its labels ['A', 'B', 'D'] are not the question's ['A', 'B', 'C']"),
    ],
)
def test_a_hand_edited_row_that_disagrees_with_its_question_is_an_error(tmp_path, fake_scorer, field, value, problem):
    """Hand-edited correct/gold/gold_nll values were trusted although the fingerprint holds the real answer."""
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    out = tmp_path / "out"
    run(questions, out)
    path = out / "responses.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    row = lines[2]
    assert row["choice"] == "B" and row["gold"] == "A"
    expected = f"{row['gold_nll']:.6g}"
    row[field] = (not row["correct"]) if value == "flip" else value
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    with pytest.raises(ValueError) as caught:
        run(questions, out)
    shown = problem.format(value=row[field], expected=expected)
    assert str(caught.value) == (
        f"{path}:3: the response to 'q2' does not agree with its question ({shown}): the line was damaged or "
        f"edited; delete that line to score the question again, or use a fresh output_dir"
    )
    del lines[2]  # the fix the message gives: the question is scored again
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    assert run(questions, out)["requests"] == 6


def test_rows_without_a_fingerprint_are_refused(tmp_path, fake_scorer):
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    out = tmp_path / "out"
    run(questions[:2], out)
    old = [
        {k: v for k, v in json.loads(line).items() if k != "fingerprint"}
        for line in (out / "responses.jsonl").read_text().splitlines()
    ]
    (out / "responses.jsonl").write_text("".join(json.dumps(row) + "\n" for row in old))
    with pytest.raises(
        ValueError,
        match=r"holds 2 responses without a question fingerprint \(e.g. 'q0'; written by an "
        r"older jetgym\): what they answer cannot be checked",
    ):
        run(questions, out)


def test_the_fingerprint_reads_content_not_id_or_source():
    base = Question(context="q", candidates=["a", "b"], gold=0, id="x", source="f:1")
    same = Question(context="q", candidates=["a", "b"], gold=0, id="y", source="g:2")
    assert identity.fingerprint(base) == identity.fingerprint(same)
    for other, part in [
        (Question(context="q2", candidates=["a", "b"], gold=0), "context"),
        (Question(context="q", candidates=["a", "c"], gold=0), "choices"),
        (Question(context="q", candidates=["a", "b"], labels=["A", "B"], gold=0), "choices"),
        (Question(context="q", candidates=["a", "b"], gold=1), "gold"),
    ]:
        changed = [key for key in identity.PARTS if identity.fingerprint(other)[key] != identity.fingerprint(base)[key]]
        assert changed == [part]
    import numpy as np

    image = np.zeros((2, 2, 3), np.uint8)
    pictured = identity.fingerprint(Question(context="q", candidates=["a", "b"], images=[image]))
    image[0, 0, 0] = 1
    assert (
        identity.fingerprint(Question(context="q", candidates=["a", "b"], images=[image]))["context"]
        != pictured["context"]
    )


def test_an_interrupted_runs_record_counts_every_row_it_wrote(tmp_path, fake_scorer, monkeypatch):
    questions = load_jsonl(write_set(tmp_path / "set.jsonl", rows()))
    real, appended = runner.append_jsonl, []

    def interrupted_after_the_second_chunk(path, batch, **options):
        real(path, batch, **options)
        appended.append(path)
        if sum(p.name == "responses.jsonl" for p in appended) == 2:
            raise KeyboardInterrupt  # after the write, before the run counts it (SIGINT lands anywhere)

    monkeypatch.setattr(runner, "append_jsonl", interrupted_after_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        run(questions, tmp_path / "out")
    record = runner.read_runs(tmp_path / "out" / "runs.jsonl")[-1]
    assert record["requests"] == 4 == len((tmp_path / "out" / "responses.jsonl").read_text().splitlines())
    assert record["error"] == "KeyboardInterrupt: "
