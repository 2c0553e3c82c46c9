"""The ViZDoom agents benchmark: every agent on the same seeds, paired intervals (fake scorer; no model)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vizdoom")

from benchmarks.vizdoom import SCENARIOS, compare, main, results_name  # noqa: E402


def test_a_partial_run_never_takes_the_whole_section():
    assert results_name(SCENARIOS) == "vizdoom"
    assert results_name(["basic"]) == "vizdoom_basic"
    assert results_name(["defend_the_center"], ["none", "token"]) == "vizdoom_defend_the_center_normalization"
    assert results_name(list(reversed(SCENARIOS)), ["none"]) == "vizdoom_normalization"


def test_compare_pairs_the_scorer_with_random_best_fixed_and_scripted():
    agents = {
        "scorer": {"returns": [2.0, 3.0, 1.0, 2.0]},
        "random": {"returns": [0.0, 1.0, -1.0, 0.0]},
        "scripted": {"returns": [2.0, 3.0, 1.0, 2.0]},
        "fixed: attack": {"returns": [1.0, 0.0, 0.0, 1.0]},
        "fixed: turn left": {"returns": [-1.0] * 4},
    }
    result = compare(agents)
    assert result["best_fixed"] == "fixed: attack"
    paired = result["paired"]["scorer"]
    assert set(result["paired"]) == {"scorer"} and set(paired) == {"random", "fixed: attack", "scripted"}
    assert paired["random"]["estimate"] == pytest.approx(2.0)
    assert paired["random"]["low"] == pytest.approx(2.0)  # the same +2 on every seed
    assert paired["scripted"] == {**paired["scripted"], "estimate": 0.0, "low": 0.0, "high": 0.0}
    assert paired["fixed: attack"]["estimate"] == pytest.approx(1.5)
    assert result["means"]["fixed: turn left"]["estimate"] == -1.0


def test_bench_runs_every_agent_on_the_same_seeds(tmp_path, fake_scorer):
    main(
        [
            "--scenarios",
            "basic",
            "--episodes",
            "2",
            "--seed",
            "5",
            "--override",
            "scorer.name=fake",
            "--override",
            "env.kwargs.episode_timeout=40",
            "--output-dir",
            str(tmp_path),
        ]
    )
    report = json.loads((tmp_path / "vizdoom_basic.json").read_text())
    basic = report["scenarios"]["basic"]
    assert len(basic["agents"]) == 12 and basic["best_fixed"].startswith("fixed: ")
    for name in ("scorer", "random", "fixed: attack"):
        folder = tmp_path / "basic" / name.replace("fixed: ", "fixed-").replace(" ", "_")
        seeds = [json.loads(line)["seed"] for line in (folder / "episodes.jsonl").read_text().splitlines()]
        assert seeds == [5, 6]
    text = (tmp_path / "vizdoom_basic.md").read_text()
    assert "| scorer minus random |" in text and "--override scorer.name=fake" in text


def test_bench_plays_the_scorer_once_per_normalization(tmp_path, fake_scorer):
    main(
        [
            "--scenarios",
            "basic",
            "--episodes",
            "2",
            "--normalizations",
            "none",
            "token",
            "--override",
            "scorer.name=fake",
            "--override",
            "env.kwargs.episode_timeout=40",
            "--output-dir",
            str(tmp_path),
        ]
    )
    report = json.loads((tmp_path / "vizdoom_basic_normalization.json").read_text())
    basic = report["scenarios"]["basic"]
    assert set(basic["paired"]) == {"scorer (none)", "scorer (token)"}
    assert [basic["scorers"][name]["normalization"] for name in basic["paired"]] == ["none", "token"]
    for folder in ("scorer-none", "scorer-token"):
        rows = (tmp_path / "basic" / folder / "episodes.jsonl").read_text().splitlines()
        assert [json.loads(line)["seed"] for line in rows] == [1000, 1001]
    text = (tmp_path / "vizdoom_basic_normalization.md").read_text()
    assert "| scorer (token) minus random |" in text and "--normalizations none token" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--episodes", "1"], "--episodes must be at least 2"),
        (
            ["--fewer", "basic=1"],
            "--fewer takes SCENARIO=N with SCENARIO one of defend_the_center, basic, health_gathering and N >= 2, got 'basic=1'",
        ),
        (["--fewer", "corridor=3"], "got 'corridor=3'"),
        (["--normalizations", "bytes"], "invalid choice: 'bytes'"),
    ],
)
def test_bench_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
