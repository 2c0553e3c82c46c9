"""run_qa end to end with the fake scorer: outputs, resumption, refusal to mix runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from jetgym.questions.sets import load_mmlu
from jetgym.scripts import qa
from jetgym.scripts.config import to_config

CONF = Path(__file__).resolve().parents[1] / "conf"
LIMIT = 40  # three chunks of 16, 16, 8


def qa_config(output_dir, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("qa", overrides=[f"output_dir={output_dir}", "scorer.name=fake", f"dataset.limit={LIMIT}", *overrides])


def lines(folder) -> list[str]:
    return (folder / "responses.jsonl").read_text().splitlines()


@pytest.fixture
def reference(tmp_path_factory, fake_scorer):
    """An uninterrupted run's folder."""
    folder = tmp_path_factory.mktemp("reference")
    qa.run_qa(qa_config(folder))
    fake_scorer.calls = 0
    return folder


def test_run_writes_responses_summary_and_report(tmp_path, fake_scorer, capsys):
    summary = qa.run_qa(qa_config(tmp_path))
    questions = load_mmlu("per_subject_5", limit=LIMIT)
    rows = [json.loads(line) for line in lines(tmp_path)]
    assert [r["id"] for r in rows] == [q.id for q in questions]
    assert all(line == json.dumps(r, sort_keys=True) for line, r in zip(lines(tmp_path), rows))
    assert fake_scorer.calls == LIMIT
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert summary["requests"] == summary["requests_this_run"] == summary["graded"] == LIMIT
    assert summary["accuracy"] == sum(r["correct"] for r in rows) / LIMIT
    assert summary["mean_gold_nll"] == pytest.approx(sum(r["gold_nll"] for r in rows) / LIMIT)
    assert summary["resumed"] is False and summary["wall_seconds"] >= 0
    assert summary["model"] == "smollm2-135m-instruct"
    assert summary["scorer"]["template"] == "none" and summary["scorer"]["placement"] == {"device": "cpu", "dtype": "float32"}
    assert summary["dataset"] == {"name": "mmlu", "subset": "per_subject_5", "limit": LIMIT, "path": None, "questions": LIMIT}
    assert "# QA: mmlu (per_subject_5)" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "run.json").exists()
    printed = capsys.readouterr().out
    assert f"accuracy {summary['accuracy']:.4f}" in printed and str(tmp_path) in printed


def test_run_accepts_a_dataclass_config(tmp_path, fake_scorer, reference):
    config = to_config(qa_config(tmp_path))
    qa.run_qa(config)
    assert lines(tmp_path) == lines(reference)


def test_resume_after_a_failure(tmp_path, fake_scorer, reference):
    fake_scorer.fail_after = 20  # dies inside the second chunk
    with pytest.raises(RuntimeError, match="stopped on purpose"):
        qa.run_qa(qa_config(tmp_path))
    assert len(lines(tmp_path)) == 16  # the finished chunk survived
    fake_scorer.fail_after, fake_scorer.calls = None, 0
    summary = qa.run_qa(qa_config(tmp_path))
    assert fake_scorer.calls == LIMIT - 16
    assert (tmp_path / "responses.jsonl").read_bytes() == (reference / "responses.jsonl").read_bytes()
    assert summary["resumed"] is True and summary["requests"] == LIMIT and summary["requests_this_run"] == LIMIT - 16
    before = json.loads((reference / "summary.json").read_text())
    for key in ("accuracy", "mean_gold_nll", "correct", "graded", "requests"):
        assert summary[key] == before[key]


@pytest.mark.parametrize("tail", ["partial", "no_newline"])
def test_resume_cuts_a_killed_last_line(tmp_path, fake_scorer, reference, tail):
    data = (reference / "responses.jsonl").read_bytes()
    keep = data.splitlines(keepends=True)[:20]
    if tail == "partial":
        written = b"".join(keep) + data.splitlines(keepends=True)[20][:37]
    else:
        written = b"".join(keep)[:-1]
    (tmp_path / "responses.jsonl").write_bytes(written)
    qa.run_qa(qa_config(tmp_path))
    assert fake_scorer.calls == LIMIT - 20
    assert (tmp_path / "responses.jsonl").read_bytes() == data


def test_rerunning_a_finished_folder_scores_nothing(tmp_path, fake_scorer, reference):
    qa.run_qa(qa_config(tmp_path))
    fake_scorer.calls = 0
    summary = qa.run_qa(qa_config(tmp_path))
    assert fake_scorer.calls == 0 and summary["requests_this_run"] == 0
    assert lines(tmp_path) == lines(reference)


def test_a_larger_limit_extends_the_run(tmp_path, fake_scorer, reference):
    qa.run_qa(qa_config(tmp_path, "dataset.limit=10"))
    qa.run_qa(qa_config(tmp_path))
    assert fake_scorer.calls == LIMIT
    assert lines(tmp_path) == lines(reference)


def test_corrupt_line_before_the_end_is_an_error(tmp_path, fake_scorer, reference):
    rows = lines(reference)[:5]
    rows[2] = rows[2][:10]
    (tmp_path / "responses.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"responses\.jsonl:3: corrupt response line"):
        qa.run_qa(qa_config(tmp_path))


def test_duplicate_responses_are_an_error(tmp_path, fake_scorer, reference):
    rows = lines(reference)[:3]
    (tmp_path / "responses.jsonl").write_text("\n".join(rows + rows[:1]) + "\n")
    with pytest.raises(ValueError, match=r"responses\.jsonl:4: duplicate response for 'mmlu-abstract_algebra-0'"):
        qa.run_qa(qa_config(tmp_path))


def test_responses_from_another_question_set_are_an_error(tmp_path, fake_scorer):
    (tmp_path / "responses.jsonl").write_text(json.dumps({"id": "elsewhere-0"}) + "\n")
    with pytest.raises(ValueError, match="1 responses for questions outside this question set"):
        qa.run_qa(qa_config(tmp_path))


def test_resuming_with_other_settings_is_refused(tmp_path, fake_scorer):
    qa.run_qa(qa_config(tmp_path, "dataset.limit=2"))
    with pytest.raises(ValueError, match=r"other settings \(model\.spec, placement\.device, placement\.dtype\)"):
        qa.run_qa(qa_config(tmp_path, "dataset.limit=2", "model.spec=other", "placement=cuda"))


def test_jsonl_question_set(tmp_path, fake_scorer):
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"question": "2+2?", "choices": ["3", "4"], "answer": "4", "id": "sum"}) + "\n")
    summary = qa.run_qa(qa_config(tmp_path / "out", "dataset=jsonl", f"dataset.path={data}", "dataset.limit=null"))
    assert summary["requests"] == 1 and [json.loads(x)["id"] for x in lines(tmp_path / "out")] == ["sum"]


def test_console_entry(tmp_path, fake_scorer, monkeypatch, capsys):
    out = tmp_path / "cli"
    monkeypatch.setattr(sys, "argv", ["jetgym-qa", f"output_dir={out}", "scorer.name=fake", "dataset.limit=3"])
    qa.main()
    assert len(lines(out)) == 3
    assert (out / ".hydra" / "config.yaml").exists()  # Hydra's run dir follows output_dir
    assert json.loads((out / "summary.json").read_text())["wall_seconds"] > 0
    assert f"results in {out}" in capsys.readouterr().out


@pytest.mark.slow
def test_pipelined_preparation_writes_byte_identical_responses(tmp_path):
    folders = {}
    for pipeline in (True, False):
        folders[pipeline] = tmp_path / f"pipeline-{pipeline}"
        qa.run_qa(qa_config(folders[pipeline], "scorer.name=jet", "dataset.limit=10", "chunk_size=3", f"pipeline={pipeline}"))
    assert (folders[True] / "responses.jsonl").read_bytes() == (folders[False] / "responses.jsonl").read_bytes()
    assert len(lines(folders[True])) == 10
