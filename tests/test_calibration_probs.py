"""Probability calibration: ECE / Brier against hand computations, the temperature fit on synthetic logits,
the QA calibration block and `jetgym-calibrate-probs` on response files."""

import json
import random

import pytest

from jetgym.questions import metrics as M
from jetgym.scorers import Question, Usage
from jetgym.scorers.decision import make_decision


def test_ece_against_a_hand_computed_example():
    confidences = [0.05, 0.25, 0.3, 0.35, 0.9, 0.95, 1.0]
    correct = [False, True, False, False, True, True, False]
    # 10 bins: (0,.1] {0.05: wrong}; (.2,.3] {0.25 right, 0.3 wrong}; (.3,.4] {0.35 wrong}; (.8,.9] {0.9 right};
    # (.9,1] {0.95 right, 1.0 wrong}
    expected = (
        1 * abs(0 - 0.05) + 2 * abs(0.5 - 0.275) + 1 * abs(0 - 0.35) + 1 * abs(1 - 0.9) + 2 * abs(0.5 - 0.975)
    ) / 7
    assert M.expected_calibration_error(confidences, correct, bins=10) == pytest.approx(expected)
    bins = M.reliability(confidences, correct, bins=10)
    assert [b["count"] for b in bins] == [1, 2, 1, 1, 2] and bins[1]["lower"] == pytest.approx(0.2)
    assert M.expected_calibration_error([0.0, 1.0], [False, True], bins=4) == 0.0  # 0 joins the first bin
    with pytest.raises(ValueError, match="confidence 1.5 is outside"):
        M.reliability([1.5], [True])
    with pytest.raises(ValueError, match="bins must be >= 1"):
        M.reliability([0.5], [True], bins=0)


def test_brier_against_a_hand_computed_example():
    probs = [[0.7, 0.2, 0.1], [0.5, 0.5]]
    gold = [[0], [1]]
    expected = ((0.3**2 + 0.2**2 + 0.1**2) + (0.5**2 + 0.5**2)) / 2
    assert M.brier_score(probs, gold) == pytest.approx(expected)
    assert M.brier_score([[0.4, 0.2, 0.4]], [[0, 2]]) == pytest.approx(0.2**2 + 0.2**2)  # equivalent labels merged


def test_temperature_fit_recovers_a_known_temperature():
    rng = random.Random(0)
    true_t, scores, gold = 2.5, [], []
    for _ in range(6000):
        logits = [rng.gauss(0, 4) for _ in range(4)]
        p = M.softmax(logits, true_t)
        scores.append(logits)
        gold.append([rng.choices(range(4), weights=p)[0]])
    fitted = M.fit_temperature(scores, gold)
    assert fitted == pytest.approx(true_t, rel=0.06)
    assert M.mean_nll(scores, gold, fitted) <= M.mean_nll(scores, gold, 1.0)
    assert M.mean_nll(scores, gold, fitted) <= M.mean_nll(scores, gold, true_t) + 1e-9
    with pytest.raises(ValueError, match="needs at least one graded question"):
        M.fit_temperature([], [])


def rows_from_decisions(n, seed=0, overconfidence=3.0, prefix="q", **rule):
    """Decisions whose scores are too sharp by `overconfidence` (as response rows)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        logits = [rng.gauss(0, 1.5) for _ in range(4)]
        gold = rng.choices(range(4), weights=M.softmax(logits))[0]
        q = Question(
            context="x", candidates=[" a", " b", " c", " d"], labels=list("ABCD"), gold="ABCD"[gold], id=f"{prefix}{i}"
        )
        rows.append(make_decision(q, q.candidates, [overconfidence * v for v in logits], Usage(), **rule).to_dict())
    return rows


def test_rows_carry_labels_and_the_summary_block(tmp_path):
    rows = rows_from_decisions(400)
    assert rows[0]["labels"] == ["A", "B", "C", "D"]
    assert M.row_gold(rows[0]) == [rows[0]["labels"].index(rows[0]["gold"])]
    summary = M.calibration_summary(rows, tmp_path)
    assert set(summary) == {"before", "diagram"} and (tmp_path / "reliability.png").stat().st_size > 1000
    before = summary["before"]
    assert before["mean_gold_nll"] == pytest.approx(sum(r["gold_nll"] for r in rows) / len(rows))
    assert before["accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / len(rows))
    after = M.calibration_summary(rows, tmp_path, temperature=3.0)["after"]
    assert after["ece"] < before["ece"] and after["brier"] < before["brier"] and after["accuracy"] == before["accuracy"]
    hot = rows_from_decisions(50, temperature=2.0)  # a run scored with a temperature reports after it by default
    assert M.calibration_summary(hot)["after"]["temperature"] == 2.0
    assert M.calibration_summary([{"id": "u", "logprobs": [-1.0], "gold": None}]) is None
    with pytest.raises(ValueError, match="gold 'B' is not one of its labels"):
        M.row_gold({"id": "old", "logprobs": [-1.0, -2.0], "gold": "B"})


def test_equivalent_gold_labels_travel_in_the_row():
    q = Question(context="x", candidates=["p", "q", "p"], labels=["A", "B", "C"], gold="C")
    row = make_decision(q, q.candidates, [-1.0, -2.0, -1.0], Usage()).to_dict()
    assert row["gold_labels"] == ["A", "C"] and M.row_gold(row) == [0, 2]
    scores, gold = M.graded([row])
    assert M.mean_nll(scores, gold) == pytest.approx(row["gold_nll"])


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return str(path)


def test_calibrate_probs_from_response_files(tmp_path):
    from jetgym.scripts.calibrate_probs import CalibrateProbsConfig, calibrate_probs

    fit = write_rows(tmp_path / "fit.jsonl", rows_from_decisions(600, seed=1, prefix="fit"))
    (tmp_path / "eval").mkdir()
    write_rows(tmp_path / "eval" / "responses.jsonl", rows_from_decisions(300, seed=2, prefix="eval"))
    out = tmp_path / "out"
    result = calibrate_probs(CalibrateProbsConfig(fit_responses=fit, evaluate=str(tmp_path / "eval")), out)
    assert result["temperature"] == pytest.approx(3.0, rel=0.25)
    assert result["evaluate"]["after"]["mean_gold_nll"] < result["evaluate"]["before"]["mean_gold_nll"]
    assert result["evaluate"]["after"]["ece"] < result["evaluate"]["before"]["ece"]
    for name in ("calibration.json", "reliability_fit.png", "reliability_eval.png", "report.md"):
        assert (out / name).is_file()
    assert "scorer.temperature=" in (out / "report.md").read_text()
    json.loads((out / "calibration.json").read_text())


def test_calibrate_probs_refuses_the_evaluated_questions_and_mixed_rules(tmp_path):
    from jetgym.scripts.calibrate_probs import CalibrateProbsConfig, calibrate_probs

    fit = write_rows(tmp_path / "fit.jsonl", rows_from_decisions(20, prefix="same"))
    same = write_rows(tmp_path / "eval.jsonl", rows_from_decisions(20, seed=3, prefix="same"))
    with pytest.raises(ValueError, match=r"share 20 questions .* never fitted on the evaluated questions"):
        calibrate_probs(CalibrateProbsConfig(fit_responses=fit, evaluate=same), tmp_path / "out")
    other = write_rows(tmp_path / "byte.jsonl", rows_from_decisions(20, prefix="other", normalization="byte"))
    with pytest.raises(ValueError, match=r"normalization \['none'\] and the evaluated ones with \['byte'\]"):
        calibrate_probs(CalibrateProbsConfig(fit_responses=fit, evaluate=other), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no responses file"):
        calibrate_probs(CalibrateProbsConfig(fit_responses=str(tmp_path / "missing")), tmp_path / "out")
    with pytest.raises(ValueError, match="size must be >= 1"):
        CalibrateProbsConfig(size=0)


def test_calibrate_probs_config_composes():
    from hydra import compose, initialize_config_module

    import jetgym.scripts.calibrate_probs  # noqa: F401  (registers the schema)
    from jetgym.scripts.config import scorer_options, to_config

    with initialize_config_module(config_module="jetgym.conf", version_base=None):
        config = to_config(compose("calibrate_probs", overrides=["scorer.normalization=pmi", "size=7"]))
    assert config.size == 7 and scorer_options(config)["normalization"] == "pmi"
    assert scorer_options(config)["template"] == "none"


def test_held_out_questions_are_scored_into_a_resumable_run_folder(tmp_path, fake_scorer):
    from hydra import compose, initialize_config_module

    from jetgym.runs.folder import read_jsonl
    from jetgym.scripts.calibrate_probs import calibrate_probs
    from jetgym.scripts.config import to_config

    with initialize_config_module(config_module="jetgym.conf", version_base=None):
        config = to_config(compose("calibrate_probs", overrides=["scorer.name=fake", "size=6", "chunk_size=4"]))
    result = calibrate_probs(config, tmp_path)
    rows = read_jsonl(tmp_path / "fit" / "responses.jsonl")
    assert len(rows) == 6 and len({row["id"] for row in rows}) == 6
    assert json.loads((tmp_path / "calibration.json").read_text())["temperature"] == result["temperature"]
    before = (tmp_path / "fit" / "responses.jsonl").read_bytes()
    calibrate_probs(config, tmp_path)  # a rerun resumes the folder: nothing is scored again
    assert (tmp_path / "fit" / "responses.jsonl").read_bytes() == before
    assert json.loads((tmp_path / "fit" / "summary.json").read_text())["requests_this_run"] == 0
