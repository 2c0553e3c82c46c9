"""run_qa end to end with the fake scorer: outputs, resumption, refusal to mix runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from jetgym.questions.sets import load_mmlu
from jetgym.runs import qa as runner
from jetgym.scripts import qa
from jetgym.scripts.config import to_config

CONF = Path(__file__).resolve().parents[1] / "conf"
LIMIT = 40  # three chunks of 16, 16, 8


def qa_config(output_dir, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(
            "qa", overrides=[f"output_dir={output_dir}", "scorer.name=fake", f"dataset.limit={LIMIT}", *overrides]
        )


def lines(folder) -> list[str]:
    return (folder / "responses.jsonl").read_text().splitlines()


@pytest.fixture
def reference(tmp_path_factory, fake_scorer):
    """An uninterrupted run's folder."""
    folder = tmp_path_factory.mktemp("reference")
    qa.qa_job(qa_config(folder))
    fake_scorer.calls = 0
    return folder


def test_run_writes_responses_summary_and_report(tmp_path, fake_scorer, capsys):
    summary = qa.qa_job(qa_config(tmp_path))
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
    assert summary["scorer"]["template"] == "none" and summary["scorer"]["placement"] == {
        "device": "cpu",
        "dtype": "float32",
    }
    assert summary["dataset"] == {
        "name": "mmlu",
        "subset": "per_subject_5",
        "limit": LIMIT,
        "path": None,
        "questions": LIMIT,
    }
    assert "# QA: mmlu (per_subject_5)" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "run.json").exists()
    printed = capsys.readouterr().out
    assert f"accuracy {summary['accuracy']:.4f}" in printed and str(tmp_path) in printed


def test_run_accepts_a_dataclass_config(tmp_path, fake_scorer, reference):
    config = to_config(qa_config(tmp_path))
    qa.qa_job(config)
    assert lines(tmp_path) == lines(reference)


def test_resume_after_a_failure(tmp_path, fake_scorer, reference):
    fake_scorer.fail_after = 20  # dies inside the second chunk
    with pytest.raises(RuntimeError, match="stopped on purpose"):
        qa.qa_job(qa_config(tmp_path))
    assert len(lines(tmp_path)) == 16  # the finished chunk survived
    fake_scorer.fail_after, fake_scorer.calls = None, 0
    summary = qa.qa_job(qa_config(tmp_path))
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
    (tmp_path / "run.json").write_bytes((reference / "run.json").read_bytes())  # a killed run had written it
    qa.qa_job(qa_config(tmp_path))
    assert fake_scorer.calls == LIMIT - 16  # the torn chunk (questions 16..31) is scored whole again
    assert (tmp_path / "responses.jsonl").read_bytes() == data


def test_rerunning_a_finished_folder_scores_nothing(tmp_path, fake_scorer, reference):
    qa.qa_job(qa_config(tmp_path))
    fake_scorer.calls = 0
    summary = qa.qa_job(qa_config(tmp_path))
    assert fake_scorer.calls == 0 and summary["requests_this_run"] == 0
    assert lines(tmp_path) == lines(reference)


def test_a_larger_limit_extends_the_run(tmp_path, fake_scorer, reference):
    qa.qa_job(qa_config(tmp_path, "dataset.limit=10"))
    qa.qa_job(qa_config(tmp_path))
    assert fake_scorer.calls == LIMIT + 10  # the first chunk (0..15) is scored whole again
    assert lines(tmp_path) == lines(reference)


def test_corrupt_line_before_the_end_is_an_error(tmp_path, fake_scorer, reference):
    rows = lines(reference)[:5]
    rows[2] = rows[2][:10]
    (tmp_path / "responses.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"responses\.jsonl:3: corrupt response line"):
        qa.qa_job(qa_config(tmp_path))


def test_duplicate_responses_are_an_error(tmp_path, fake_scorer, reference):
    rows = lines(reference)[:3]
    (tmp_path / "responses.jsonl").write_text("\n".join(rows + rows[:1]) + "\n")
    with pytest.raises(ValueError, match=r"responses\.jsonl:4: duplicate response for 'mmlu-abstract_algebra-0'"):
        qa.qa_job(qa_config(tmp_path))


def test_responses_from_another_question_set_are_an_error(tmp_path, fake_scorer, reference):
    row = {**json.loads(lines(reference)[0]), "id": "elsewhere-0"}
    (tmp_path / "responses.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "run.json").write_bytes((reference / "run.json").read_bytes())
    with pytest.raises(ValueError, match="1 responses for questions outside this question set"):
        qa.qa_job(qa_config(tmp_path))


def test_resuming_with_other_settings_is_refused(tmp_path, fake_scorer):
    qa.qa_job(qa_config(tmp_path, "dataset.limit=2"))
    with pytest.raises(ValueError, match=r"other settings \(model\.spec, placement\.device, placement\.dtype\)"):
        qa.qa_job(qa_config(tmp_path, "dataset.limit=2", "model.spec=other", "placement=cuda"))


def test_jsonl_question_set(tmp_path, fake_scorer):
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"question": "2+2?", "choices": ["3", "4"], "answer": "4", "id": "sum"}) + "\n")
    summary = qa.qa_job(qa_config(tmp_path / "out", "dataset=jsonl", f"dataset.path={data}", "dataset.limit=null"))
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
        qa.qa_job(
            qa_config(folders[pipeline], "scorer.name=jet", "dataset.limit=10", "chunk_size=3", f"pipeline={pipeline}")
        )
    assert (folders[True] / "responses.jsonl").read_bytes() == (folders[False] / "responses.jsonl").read_bytes()
    assert len(lines(folders[True])) == 10


# --- reliability (issue 12) ------------------------------------------------------------------------------
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import zlib  # noqa: E402

from jetgym.scorers import available_scorers, register_scorer  # noqa: E402
from jetgym.scorers.decision import make_decision  # noqa: E402
from jetgym.scorers.types import Usage  # noqa: E402
from jetgym.runs.folder import LOCK, FolderInUseError, folder_lock  # noqa: E402


def strict_loads(text: str):
    """json.loads that refuses NaN/Infinity (what a strict JSON reader does)."""

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


class CompositionScorer:
    """Like a packed scorer: every value depends (by ~1e-5) on which questions share the call. Refuses
    (ValueError, as the window check does) any question whose context contains 'OVERSIZED'."""

    name = "composition"
    calls = 0

    def __init__(self, **options):
        self.options = options

    def prepare(self, questions):
        for q in questions:
            if "OVERSIZED" in str(q.context):
                raise ValueError(
                    "context of 5000 tokens plus the longest candidate (3 tokens) exceeds the model window"
                )
        return list(questions)

    def score(self, questions):
        noise = (zlib.crc32("|".join(q.id for q in questions).encode()) % 97) * 1e-6
        CompositionScorer.calls += len(questions)
        return [
            make_decision(
                q,
                q.candidates,
                [-(zlib.crc32(f"{q.context}|{c}".encode()) % 1000) / 100 + noise for c in q.candidates],
                Usage(forward_calls=1),
            )
            for q in questions
        ]

    def decide_many(self, questions):
        return self.score(self.prepare(questions))

    def describe(self):
        return {"name": self.name}


if "composition" not in available_scorers():
    register_scorer("composition")(CompositionScorer)


def test_a_second_run_into_a_locked_folder_is_refused(tmp_path, fake_scorer):
    with folder_lock(tmp_path, "jetgym-qa"):
        with pytest.raises(
            FolderInUseError,
            match=r"is in use by jetgym-qa \(pid \d+\): two runs must not write "
            r"into one folder. Wait for it to finish, or choose another output_dir",
        ):
            qa.qa_job(qa_config(tmp_path))
    assert not (tmp_path / "responses.jsonl").exists() and fake_scorer.calls == 0
    qa.qa_job(qa_config(tmp_path))  # released: the folder works again
    assert len(lines(tmp_path)) == LIMIT


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_run_leaves_no_stuck_lock(tmp_path, fake_scorer, stop):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from jetgym.runs.folder import folder_lock\n"
            f"with folder_lock(Path({str(tmp_path)!r}), 'jetgym-qa'):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUseError):
            qa.qa_job(qa_config(tmp_path))
        os.kill(holder.pid, stop)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (tmp_path / LOCK).exists()
    qa.qa_job(qa_config(tmp_path))
    assert len(lines(tmp_path)) == LIMIT


def test_two_concurrent_runs_never_duplicate_responses(tmp_path):
    command = [
        sys.executable,
        "-m",
        "jetgym.scripts.qa",
        f"output_dir={tmp_path}",
        "scorer.name=jet",
        "model.spec=/nonexistent-model",
        "dataset.limit=3",
    ]
    with folder_lock(tmp_path, "jetgym-qa"):  # stands for a first run in progress
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert second.returncode != 0 and "is in use by jetgym-qa" in second.stderr
    assert not (tmp_path / "responses.jsonl").exists() and not (tmp_path / "run.json").exists()


def test_extreme_gold_nll_writes_strict_json_with_robust_means(tmp_path, fake_scorer, monkeypatch):
    conftest = sys.modules[fake_scorer.__module__]
    real = conftest.fake_logprob
    # the gold answer of the first question gets logprob -6290: its probability underflows to 0.0
    first = load_mmlu("per_subject_5", limit=1)[0]
    gold_text = first.candidates[first.labels.index(first.gold)]
    monkeypatch.setattr(
        conftest,
        "fake_logprob",
        lambda context, candidate: (
            -6290.0 if context == str(first.context) and candidate == gold_text else real(context, candidate)
        ),
    )
    summary = qa.qa_job(qa_config(tmp_path))
    rows = [strict_loads(line) for line in lines(tmp_path)]
    assert rows[0]["probs"][first.labels.index(first.gold)] == 0.0
    assert 6280 < rows[0]["gold_nll"] < 6300  # finite: computed from the logprobs
    on_disk = strict_loads((tmp_path / "summary.json").read_text())
    assert on_disk["mean_gold_nll"] > 100  # one question dominates the mean ...
    assert on_disk["median_gold_nll"] < 10 and on_disk["clipped_mean_gold_nll"] < 10  # ... not these
    assert on_disk["max_gold_nll"] == rows[0]["gold_nll"] and on_disk["gold_nll_clip"] == pytest.approx(
        34.5388, abs=1e-3
    )
    assert summary["clipped_mean_gold_nll"] == pytest.approx(
        sum(min(r["gold_nll"], runner.GOLD_NLL_CLIP) for r in rows) / LIMIT
    )
    assert "clipped mean" in (tmp_path / "report.md").read_text()


def test_a_non_finite_value_is_refused_not_written(tmp_path, fake_scorer, monkeypatch):
    conftest = sys.modules[fake_scorer.__module__]
    monkeypatch.setattr(conftest, "fake_logprob", lambda context, candidate: float("nan"))
    with pytest.raises(
        ValueError,
        match=r"the response to question 'mmlu-abstract_algebra-0' holds a non-finite "
        r"number \(NaN or Infinity\)",
    ):
        qa.qa_job(qa_config(tmp_path))
    assert lines(tmp_path) == []


def test_run_json_is_written_only_once_the_run_can_start(tmp_path, fake_scorer):
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"question": "2+2?", "choices": ["3", "4"], "answer": "4"}) + "\n")
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match="question file .*typo.jsonl does not exist"):
        qa.qa_job(qa_config(out, "dataset=jsonl", f"dataset.path={tmp_path / 'typo.jsonl'}", "dataset.limit=null"))
    assert not (out / "run.json").exists()
    summary = qa.qa_job(
        qa_config(out, "dataset=jsonl", f"dataset.path={data}", "dataset.limit=null")
    )  # fixed: same folder
    assert summary["requests"] == 1 and (out / "run.json").exists()


def test_rerunning_a_finished_folder_keeps_the_first_runs_timing(tmp_path, fake_scorer):
    first = qa.qa_job(qa_config(tmp_path))
    again = qa.qa_job(qa_config(tmp_path))
    runs = [strict_loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["requests"] for r in runs] == [LIMIT, 0]
    assert again["requests_this_run"] == 0 and again["runs"] == 2
    assert (
        again["wall_seconds"] == first["wall_seconds"] and again["requests_per_second"] == first["requests_per_second"]
    )
    assert again["requests_timed"] == LIMIT


def test_a_failed_runs_work_is_counted(tmp_path, fake_scorer):
    fake_scorer.fail_after = 20
    with pytest.raises(RuntimeError):
        qa.qa_job(qa_config(tmp_path))
    fake_scorer.fail_after = None
    summary = qa.qa_job(qa_config(tmp_path))
    runs = [strict_loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["requests"] for r in runs] == [16, LIMIT - 16] and "stopped on purpose" in runs[0]["error"]
    assert summary["requests_timed"] == LIMIT and summary["resumed"] is True


def oversized_set(tmp_path) -> Path:
    rows = [
        {"question": f"q{i}" + (" OVERSIZED" if i == 5 else ""), "choices": ["a", "b"], "answer": 0, "id": f"q{i}"}
        for i in range(8)
    ]
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("pipeline", [True, False])
def test_an_oversized_question_stops_the_run_naming_it(tmp_path, pipeline):
    data = oversized_set(tmp_path)
    config = qa_config(
        tmp_path / "out",
        "scorer.name=composition",
        "dataset=jsonl",
        f"dataset.path={data}",
        "dataset.limit=null",
        "chunk_size=4",
        f"pipeline={pipeline}",
    )
    with pytest.raises(
        runner.QuestionError,
        match=rf"question 'q5' \({data}:6\): context of 5000 tokens .* exceeds the model "
        r"window; fix or remove the question \(or set on_error=skip",
    ):
        qa.qa_job(config)
    assert [json.loads(x)["id"] for x in lines(tmp_path / "out")] == ["q0", "q1", "q2", "q3"]


@pytest.mark.parametrize("pipeline", [True, False])
def test_on_error_skip_records_and_counts_skipped_questions(tmp_path, pipeline):
    data = oversized_set(tmp_path)
    overrides = [
        "scorer.name=composition",
        "dataset=jsonl",
        f"dataset.path={data}",
        "dataset.limit=null",
        "chunk_size=4",
        f"pipeline={pipeline}",
        "on_error=skip",
    ]
    summary = qa.qa_job(qa_config(tmp_path / "out", *overrides))
    rows = [strict_loads(x) for x in lines(tmp_path / "out")]
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(8)]
    assert {k: v for k, v in rows[5].items() if k != "fingerprint"} == {
        "id": "q5",
        "skipped": "ValueError: context of 5000 tokens plus the longest candidate (3 tokens) exceeds the model window",
        "source": f"{data}:6",
    }
    assert summary["skipped"] == 1 and summary["graded"] == 7 and summary["requests"] == 8
    assert "(1 skipped)" in (tmp_path / "out" / "report.md").read_text()
    before = (tmp_path / "out" / "responses.jsonl").read_bytes()
    # a cut before the skipped row (q5 is tried again and skipped again) or after it: the chunk's other
    # questions are scored together as before, so nothing differs
    for keep in (5, 7):
        (tmp_path / "out" / "responses.jsonl").write_bytes(b"".join(before.splitlines(keepends=True)[:keep]))
        qa.qa_job(qa_config(tmp_path / "out", *overrides))
        assert (tmp_path / "out" / "responses.jsonl").read_bytes() == before
    assert runner.read_runs(tmp_path / "out" / "runs.jsonl")[-1]["skipped"] == 0  # a recorded skip is not retried


def test_on_error_must_be_stop_or_skip(tmp_path):
    with pytest.raises(ValueError, match="unknown on_error 'ignore'; known: stop, skip"):
        to_config(qa_config(tmp_path, "on_error=ignore"))


@pytest.mark.parametrize("pipeline", [True, False])
def test_resume_from_every_cut_point_is_byte_identical(tmp_path, pipeline):
    """Responses that depend on which questions share a call (as packed scoring does, ~1e-5) still come out
    byte-identical after a cut anywhere: chunks are fixed slices of the set, a torn one is scored whole."""
    data = tmp_path / "set.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"q{i}?", "choices": ["a", "b", "c"], "answer": i % 3}) + "\n" for i in range(10)
        )
    )
    overrides = [
        "scorer.name=composition",
        "dataset=jsonl",
        f"dataset.path={data}",
        "dataset.limit=null",
        "chunk_size=4",
        f"pipeline={pipeline}",
    ]
    qa.qa_job(qa_config(tmp_path / "reference", *overrides))
    reference = (tmp_path / "reference" / "responses.jsonl").read_bytes()
    config = to_config(qa_config(tmp_path / "unused", *overrides))
    ends = [i + 1 for i, byte in enumerate(reference) if byte == ord("\n")]
    cuts = sorted({0, *ends, *(end - 1 for end in ends), *(end - 40 for end in ends)})
    for cut in cuts:
        folder = tmp_path / f"cut-{cut}"
        folder.mkdir()
        (folder / "responses.jsonl").write_bytes(reference[:cut])
        (folder / "run.json").write_bytes((tmp_path / "reference" / "run.json").read_bytes())
        qa.qa_job(config, output_dir=folder)
        assert (folder / "responses.jsonl").read_bytes() == reference, f"cut at byte {cut}"


def test_another_chunk_size_is_refused_on_resume(tmp_path, fake_scorer):
    qa.qa_job(qa_config(tmp_path, "dataset.limit=5", "chunk_size=4"))
    with pytest.raises(ValueError, match=r"other settings \(chunk_size\)"):
        qa.qa_job(qa_config(tmp_path, "dataset.limit=5", "chunk_size=2"))


def test_tied_decisions_earn_no_credit_and_a_mostly_tied_run_says_so(tmp_path, fake_scorer, monkeypatch, capsys):
    """Issue 48, item 3: a uniform (damaged) model tied every candidate, ties went to the first candidate and the
    run reported accuracy 1.0000 (3/3)."""
    from jetgym.scorers.types import Question

    questions = [Question(context=f"Q{k}?", candidates=["yes", "no"], gold=0, id=f"q{k}") for k in range(3)]

    def uniform(self, prepared):
        return [make_decision(q, q.candidates, [-10.8027] * len(q.candidates), Usage()) for q in prepared]

    monkeypatch.setattr(fake_scorer, "score", uniform)
    summary = runner.run_qa(questions, fake_scorer(), tmp_path / "out", quiet=True)
    assert (summary["accuracy"], summary["correct"], summary["graded"], summary["ties"]) == (0.0, 0, 3, 3)
    assert summary["warning"] == (
        "3 of 3 decisions tie (every candidate equally likely), so the model tells the answers apart in few "
        "questions: check the model and adapter (a damaged or untrained model scores every candidate alike)"
    )
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"**Warning:** {summary['warning']}." in report and "(0/3, 3 tied)" in report
    rows = [{"correct": True, "probs": [0.7, 0.3]}, {"correct": True, "probs": [0.5, 0.5]}]
    assert runner.summarize(rows, {}, {})["accuracy"] == 0.5  # one tie of two: no warning
    assert runner.summarize(rows, {}, {})["warning"] is None
