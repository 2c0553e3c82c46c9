"""Data-parallel training on torchrun (gloo, 2 ranks on this CPU): PPO and SFT on 2 ranks write the adapter one
process writes with the same global batch (fp32 tolerance), through the library and through `jetgym-train`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from jetgym.training.data_parallel import Shards

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import gymnasium as gym
    from jetgym.agents import make_agent
    from jetgym.envs.candidates import CandidateActions
    from jetgym.runs import ranks as ranks_
    from jetgym.scorers import Question
    from jetgym.training.data_parallel import Shards
    from jetgym.training.options import LoraOptions, PPOOptions, SFTOptions
    from jetgym.training.policy import Policy
    from jetgym.training.run import run_ppo, run_sft
    from test_training import tiny_scorer

    ranks = ranks_.current()
    ranks_.init(ranks, 300, gpu=False)
    shards, out = Shards(ranks), sys.argv[1]
    # PPO: 3 envs over 2 ranks (2 + 1), episodes of up to 4 steps (time-limit truncations bootstrap), minibatch 5
    # of 18 decisions (shares of 3 + 2 and a last minibatch of 3)
    options = PPOOptions(num_envs=3, rollout_steps=6, epochs=2, minibatch=5, learning_rate=0.01)
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    envs = [CandidateActions(gym.make("FrozenLake-v1", is_slippery=False, max_episode_steps=4),
                             texts=["move left", "move down", "move right", "move up"]) for _ in shards.mine(3)]
    agent = make_agent("scorer", scorer=policy.scorer, task="Reach the goal.", describer=lambda o: f"cell {{o}}",
                       policy="sample")
    run_ppo(policy, envs, agent, options, out + "/ppo", env_steps=36, seed=2, progress=False, shards=shards)
    # SFT: 11 questions, minibatch 5: the last minibatch has 1 question, so rank 1's share of it is empty
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    words = ["red", "tan", "sky", "ink"]
    questions = [Question(context=f"item {{k}}: the colour is", candidates=words, gold=k % 3, id=str(k)) for k in range(11)]
    run_sft(policy, questions, SFTOptions(epochs=2, minibatch=5, learning_rate=0.02), out + "/sft",
            held_out=questions[:3], progress=False, shards=shards)
    ranks_.finish(ranks)
""")


def test_one_process_shards_are_everything():
    shards = Shards()
    assert shards.writer and shards.mine(3) == [0, 1, 2]
    assert shards.map(lambda part: [x * 2 for x in part], [1, 2, 3]) == [2, 4, 6]
    assert shards.sum([1, 2.5]) == [1.0, 2.5] and shards.gather("x") == ["x"]


def torchrun(command: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={nproc}", "--no-python", *command],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {f"{path.name}:{k}": v for path in sorted(folder.glob("*.safetensors")) for k, v in load_file(path).items()}


def assert_same_adapter(a: Path, b: Path) -> None:
    left, right = tensors(a), tensors(b)
    assert left.keys() == right.keys() and len(left) > 2
    worst = max(float((left[k] - right[k]).abs().max()) for k in left)
    # fp32 rounding only: each rank batches and aggregates its own share of the questions, so sums are grouped
    # differently (seen: 1.6e-5 after 2 PPO epochs at learning rate 0.01)
    assert worst < 5e-5, worst
    assert any(float(v.abs().max()) > 0 for k, v in left.items() if "lora_B" in k)  # it trained (peft starts B at 0)


@pytest.mark.slow
def test_two_ranks_train_the_one_process_adapter(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(__file__)))
    one = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "one")], env=ENV, capture_output=True, text=True, timeout=900
    )
    assert one.returncode == 0, one.stderr[-3000:]
    two = torchrun([sys.executable, str(script), str(tmp_path / "two")])
    assert two.returncode == 0, two.stderr[-3000:]
    for algorithm in ("ppo", "sft"):
        assert_same_adapter(tmp_path / "one" / algorithm / "adapter", tmp_path / "two" / algorithm / "adapter")
        rows = [
            [json.loads(line) for line in (tmp_path / run / algorithm / "train.jsonl").read_text().splitlines()]
            for run in ("one", "two")
        ]
        assert len(rows[0]) == len(rows[1]) > 1
        for a, b in zip(*rows):  # the same rollouts (returns, episodes) and the same losses
            for key in ("episodes", "mean_return", "policy_loss", "value_loss", "entropy", "loss", "held_out_gold_nll"):
                assert a.get(key) == pytest.approx(b.get(key), abs=1e-4), (algorithm, key, a, b)
        assert json.loads((tmp_path / "two" / algorithm / "summary.json").read_text())["ranks"] == 2
        assert not list((tmp_path / "two" / algorithm).glob("*rank*"))  # rank 0 alone writes the folder


@pytest.mark.slow
def test_jetgym_train_under_torchrun(tmp_path):
    from test_training import tiny_model_folder

    folder = tiny_model_folder(tmp_path / "model")
    args = [
        f"model.spec={folder}",
        "env=frozenlake",
        "env.kwargs.is_slippery=false",
        "+env.kwargs.max_episode_steps=5",
        "algorithm=ppo",
        "train.env_steps=16",
        "train.num_envs=2",
        "train.rollout_steps=4",
        "train.minibatch=3",
    ]
    one = subprocess.run(
        [str(BIN / "jetgym-train"), *args, f"output_dir={tmp_path / 'one'}"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    two = torchrun([str(BIN / "jetgym-train"), *args, f"output_dir={tmp_path / 'two'}"])
    assert two.returncode == 0, two.stderr[-3000:]
    assert_same_adapter(tmp_path / "one" / "adapter", tmp_path / "two" / "adapter")
    few = torchrun([str(BIN / "jetgym-train"), *args[:-3], "train.num_envs=1", f"output_dir={tmp_path / 'few'}"])
    assert few.returncode != 0
    assert "train.num_envs=1 is smaller than the 2 ranks" in few.stderr
