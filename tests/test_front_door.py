"""`jetgym`: one command, a job per subcommand, `--help` listing every job with its line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jetgym.scripts.main import JOBS, main


def test_help_lists_every_job(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    for job, (_, about) in JOBS.items():
        assert f"  {job}" in out and about in out
    assert set(JOBS) == {"episode", "qa", "train", "eval", "lm-eval", "calibrate", "calibrate-probs", "render-libero"}


def test_an_unknown_job_is_refused_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["trian", "seed=1"])
    assert exit_.value.code == 2
    assert "jetgym: unknown job 'trian' (did you mean 'train'?)" in capsys.readouterr().err


def test_a_job_runs_under_its_alias_name():
    """`jetgym eval` checks its options before anything loads; the error carries the job's name."""
    out = subprocess.run(
        [sys.executable, "-c", "from jetgym.scripts.main import main; main()", "eval", "episodes=0", "runs=[x]"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "jetgym-eval: episodes must be >= 1, got 0" in out.stderr


def test_eval_refuses_a_folder_without_a_summary(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from jetgym.scripts.main import main; main()",
            "eval",
            f"runs=[{tmp_path}]",
            f"output_dir={tmp_path / 'out'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert f"{tmp_path} holds no summary.json: pass the folder of a finished jetgym-train run" in out.stderr


def test_eval_composes_the_runs_env_inside_the_job(tmp_path):
    """The job composes each run's episode config while its own Hydra app runs (was: 'GlobalHydra is already
    initialized'); here it gets as far as loading the run's model, which is missing."""
    run = tmp_path / "run"
    run.mkdir()
    config = {
        "algorithm": "rft",
        "seed": 0,
        "env": {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False}, "action_texts": ["l", "d", "r", "u"]},
        "scorer": {"name": "jet"},
        "model": {"spec": str(tmp_path / "no-model")},
        "train": {},
    }
    (run / "summary.json").write_text(json.dumps({"config": config, "seed": 0}))
    out = subprocess.run(
        [sys.executable, "-c", "from jetgym.scripts.main import main; main()", "eval", f"runs=[{run}]"]
        + ["episodes=1", "tuning_episodes=1", f"output_dir={tmp_path / 'out'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "GlobalHydra" not in out.stderr and out.returncode != 0
    assert str(tmp_path / "no-model") in out.stderr, out.stderr[-2000:]


def test_eval_refuses_another_jobs_folder(tmp_path):
    """A QA run's folder (a summary.json without a training config) was a KeyError: 'config'."""
    from jetgym.training.evaluation import read_summaries

    (tmp_path / "summary.json").write_text('{"accuracy": 0.5, "graded": 2}')
    with pytest.raises(ValueError, match=r"summary.json is not a training run's \(no training config in it; a QA"):
        read_summaries([tmp_path])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["runs=[]"], "runs is empty: name the finished training run folders"),
        (["num_envs=0"], "num_envs must be >= 1, got 0"),
        (["success=won"], "success='won' is not one of positive-return, terminated"),
        (["dtype=half"], "dtype='half' is not one of float32, auto, bfloat16"),
        (["policy=greedy"], "policy='greedy' is not one of auto, argmax, untried, sample"),
        (["stop_loops=true", "num_envs=2"], "stop_loops plays one env at a time: leave num_envs at 1"),
        (["stop_loops=true", "policy=sample"], "stop_loops needs the argmax scorer"),
        (["stop_loops=true", "policy=untried"], "with policy=untried a repeated observation need not start a loop"),
        (["env_id=FrozenLake-v9"], "env_id: unknown env.id 'FrozenLake-v9': not a registered Gymnasium id"),
    ],
)
def test_eval_options_are_checked_before_anything_loads(overrides, message):
    import jetgym.scripts.evaluate  # noqa: F401  (stores the job's schema)
    from jetgym.scripts.config import compose, to_config

    with pytest.raises(ValueError, match=message):
        to_config(compose("eval", ["runs=[x]", *overrides]))
