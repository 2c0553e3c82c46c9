"""Training: PPO learns a rewarded action, SFT lowers the gold NLL, runs resume, adapters round-trip."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from jetgym.agents import make_agent
from jetgym.envs.candidates import CandidateActions
from jetgym.scorers import Question, make_scorer
from jetgym.scorers.models import LoadedModel
from jetgym.training.options import BCOptions, LoraOptions, PPOOptions, SFTOptions
from jetgym.training.policy import Policy
from jetgym.training.ppo import advantages
from jetgym.training.run import run_ppo, run_sft

from tiny_models import ByteTokenizer, tiny_llama


class Bandit(gym.Env):
    """One step per episode; action 1 pays 1, action 0 pays 0."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, float(action == 1), True, False, {"is_success": bool(action == 1)}


def tiny_scorer():
    loaded = LoadedModel("tiny-llama", tiny_llama(), ByteTokenizer(), None, "attention", 512)
    return make_scorer("jet", model=loaded, template="none", min_shared_prefix=0)


def bandit_setup(num_envs=2):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    envs = [CandidateActions(Bandit(), texts=["go west", "go east"]) for _ in range(num_envs)]
    agent = make_agent("scorer", scorer=policy.scorer, task="Choose.", describer=lambda o: "here", policy="sample")
    return policy, envs, agent


def p_east(policy) -> float:
    decision = policy.scorer.decide(Question(context="Choose.", candidates=["go west", "go east"]))
    return decision.probs[1]


def test_gae_matches_hand_computation():
    adv, ret = advantages(
        np.array([1.0, 0.0, 2.0]),
        np.array([0.5, 0.2, 0.1]),
        np.array([0.2, 0.1, 9.0]),
        np.array([False, False, True]),
        np.array([False, False, True]),
        0.9,
        0.5,
    )
    d2 = 2.0 - 0.1
    d1 = 0.0 + 0.9 * 0.1 - 0.2
    d0 = 1.0 + 0.9 * 0.2 - 0.5
    assert adv.tolist() == pytest.approx([d0 + 0.45 * (d1 + 0.45 * d2), d1 + 0.45 * d2, d2])
    assert ret.tolist() == pytest.approx((adv + np.array([0.5, 0.2, 0.1])).tolist())


def test_ppo_learns_the_rewarded_action(tmp_path):
    policy, envs, agent = bandit_setup()
    before = p_east(policy)
    options = PPOOptions(num_envs=2, rollout_steps=8, epochs=2, minibatch=8, learning_rate=0.01, entropy_coef=0.0)
    summary = run_ppo(policy, envs, agent, options, tmp_path, env_steps=16 * 8, progress=False)
    after = p_east(policy)
    assert after > 0.9 > before + 0.2, (before, after)
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == list(range(1, 9)) and summary["updates"] == 8
    assert rows[-1]["success_rate"] > rows[0]["success_rate"]
    assert (tmp_path / "adapter" / "adapter_config.json").exists() and (tmp_path / "summary.json").exists()
    with pytest.raises(FileExistsError, match="already holds a finished training run"):
        run_ppo(policy, envs, agent, options, tmp_path, env_steps=16, progress=False)


def test_same_seed_same_adapter(tmp_path):
    states = []
    for name in ("a", "b"):
        policy, envs, agent = bandit_setup()
        run_ppo(
            policy,
            envs,
            agent,
            PPOOptions(num_envs=2, rollout_steps=4, minibatch=4),
            tmp_path / name,
            env_steps=16,
            seed=3,
            progress=False,
        )
        states.append(policy.state())
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_lora_on_the_last_layers_trains_on_kept_trunk_states(tmp_path):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8, lora_layers=1), seed=0)
    assert policy.trunk is not None and policy.trunk.depth == 1
    assert Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8)).trunk is None  # every layer trained
    questions = [
        Question(context=f"item {k}: the colour is", candidates=["red", "tan", "sky"], gold=2, id=str(k))
        for k in range(6)
    ]
    summary = run_sft(
        policy,
        questions,
        SFTOptions(epochs=3, minibatch=3, learning_rate=0.02, lr_schedule="linear"),
        tmp_path,
        held_out=questions[:2],
        progress=False,
    )
    rates = [
        row["learning_rate"]
        for row in map(json.loads, (tmp_path / "train.jsonl").read_text().splitlines())
        if "loss" in row
    ]
    assert rates == pytest.approx([0.02 * (1 - k / 6) for k in range(6)])  # linear decay over the 6 updates
    assert len(policy.trunk.kept) == len(questions)
    kept = policy.evaluate(questions)
    policy.trunk = None
    full = policy.evaluate(questions)
    for a, b in zip(kept.log_q, full.log_q):
        assert torch.allclose(a, b, atol=1e-6)
    assert summary["held_out_after"]["held_out_gold_nll"] < summary["held_out_before"]["held_out_gold_nll"]


def test_sft_lowers_held_out_gold_nll(tmp_path):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    words = ["red", "tan", "sky", "ink"]

    def question(k):  # the answer is always "sky": learnable from the training items, checked on unseen ones
        return Question(context=f"item {k}: the colour is", candidates=words, gold=2, id=str(k))

    train, held = [question(k) for k in range(20)], [question(k) for k in range(40, 50)]
    assert policy.scorer.decide(held[0]).choice != 2
    summary = run_sft(
        policy, train, SFTOptions(epochs=4, minibatch=5, learning_rate=0.02), tmp_path, held_out=held, progress=False
    )
    assert summary["held_out_after"]["held_out_gold_nll"] < summary["held_out_before"]["held_out_gold_nll"] - 0.5
    assert summary["held_out_after"]["held_out_accuracy"] == 1.0


def test_sft_with_fit_stops_once_every_training_question_agrees(tmp_path):
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)
    words = ["red", "tan", "sky", "ink"]
    train = [Question(context=f"item {k}: the colour is", candidates=words, gold=2, id=str(k)) for k in range(20)]
    held = [Question(context=f"item {k}: the colour is", candidates=words, gold=2, id=str(k)) for k in range(40, 44)]
    options = SFTOptions(epochs=50, minibatch=5, learning_rate=0.02, fit=1.0)
    summary = run_sft(policy, train, options, tmp_path / "fit", held_out=held, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "fit" / "train.jsonl").read_text().splitlines()][1:]
    assert summary["stopped"] == "fitted" and summary["train_agreement"] == 1.0
    assert 4 <= summary["updates"] == len(rows) < 50 * 4  # at least one pass measures every question
    assert [r["fitted"] for r in rows] == [False] * (len(rows) - 1) + [True]
    assert rows[-1]["train_agreement"] == 1.0 and "held_out_accuracy" in rows[-1]  # the adapter written is judged
    assert summary["held_out_after"]["held_out_accuracy"] == rows[-1]["held_out_accuracy"]
    unfitted = run_sft(
        Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0),
        train,
        dataclasses.replace(options, epochs=2, fit=None),
        tmp_path / "epochs",
        progress=False,
    )
    assert unfitted["stopped"] == "epochs" and unfitted["updates"] == 2 * 4


def test_sft_with_fit_resumed_after_a_crash_stops_where_the_uninterrupted_run_did(tmp_path, monkeypatch):
    """The checkpoint keeps each question's latest agreement: a resumed run does not start measuring afresh."""
    import jetgym.training.run as run

    words = ["red", "tan", "sky", "ink"]
    train = [Question(context=f"item {k}: the colour is", candidates=words, gold=2, id=str(k)) for k in range(20)]
    options = SFTOptions(epochs=50, minibatch=5, learning_rate=0.02, fit=1.0)

    def policy():
        return Policy(tiny_scorer(), LoraOptions(lora_rank=4, lora_alpha=8), seed=0)

    whole = run_sft(policy(), train, options, tmp_path / "whole", progress=False)
    original, calls = run.fit_step, []

    def crashing(*args, **kwargs):
        calls.append(1)
        if len(calls) == whole["updates"]:  # the last step: every earlier one is checkpointed
            raise RuntimeError("killed")
        return original(*args, **kwargs)

    monkeypatch.setattr(run, "fit_step", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        run_sft(policy(), train, options, tmp_path / "resumed", checkpoint_every=1, progress=False)
    monkeypatch.setattr(run, "fit_step", original)
    resumed = run_sft(policy(), train, options, tmp_path / "resumed", checkpoint_every=1, progress=False)
    assert resumed["updates"] == whole["updates"] and resumed["stopped"] == "fitted"
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / name / "adapter" / "adapter_model.safetensors")) for name in ("whole", "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_training_inputs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="train.minibatch must be >= 1, got 0"):
        PPOOptions(minibatch=0)
    with pytest.raises(ValueError, match=r"train.gamma must be in \[0, 1\], got 1.5"):
        PPOOptions(gamma=1.5)
    with pytest.raises(ValueError, match="train.lr_schedule must be one of constant, linear, got 'cosine'"):
        SFTOptions(lr_schedule="cosine")
    with pytest.raises(ValueError, match=r"train.fit must be in \(0, 1\], got 0"):
        SFTOptions(fit=0)
    with pytest.raises(ValueError, match="train.finetune must be 'lora' or 'full', got 'half'"):
        LoraOptions(finetune="half")
    loaded = LoadedModel("tiny-llama", tiny_llama(), ByteTokenizer(), None, "attention", 512)
    pmi = make_scorer("jet", model=loaded, template="none", normalization="pmi")
    with pytest.raises(ValueError, match="scorer.normalization='pmi' cannot be trained"):
        Policy(pmi)
    policy = Policy(tiny_scorer(), LoraOptions(lora_rank=2))
    unlabelled = [Question(context="x", candidates=["a", "b"], id="q7")]
    with pytest.raises(ValueError, match="question 'q7' has no gold answer: SFT needs labelled questions"):
        run_sft(policy, unlabelled, SFTOptions(), tmp_path / "sft", progress=False)
    with pytest.raises(ValueError, match="the training set holds no questions"):
        run_sft(policy, [], SFTOptions(), tmp_path / "sft", progress=False)
    envs = [CandidateActions(Bandit(), texts=["a", "b"])]
    with pytest.raises(ValueError, match="run_ppo got 1 envs where this process plays 4 of train.num_envs=4"):
        run_ppo(policy, envs, None, PPOOptions(), tmp_path / "ppo", env_steps=8, progress=False)


RESUMED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_training import bandit_setup
    from jetgym.training.options import PPOOptions
    from jetgym.training.run import run_ppo
    import jetgym.training.ppo as ppo
    policy, envs, agent = bandit_setup()
    if sys.argv[1] == "slow":  # stop after the second update's checkpoint: the parent kills it there
        original = ppo.update
        calls = []
        def update(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                print("checkpointed", flush=True)
                time.sleep(600)
            return original(*args, **kwargs)
        import jetgym.training.run as run
        run.update = update
    run_ppo(policy, envs, agent, PPOOptions(num_envs=2, rollout_steps=4, minibatch=4), sys.argv[2], env_steps=40,
            seed=1, progress=False)
    print("done", flush=True)
""")


def test_resume_after_kill_continues_from_the_checkpoint(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(RESUMED.format(tests=os.path.dirname(__file__)))
    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, str(script), "slow", str(out)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "checkpointed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    pointer = json.loads((out / "checkpoint.json").read_text())
    assert pointer["update"] == 2 and pointer["env_steps"] == 16
    finished = subprocess.run(
        [sys.executable, str(script), "fast", str(out)], capture_output=True, text=True, timeout=600
    )
    assert finished.returncode == 0, finished.stderr
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4, 5]  # updates 1-2 kept, 3-5 run after the restart
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] == 5 and summary["env_steps"] == 40
    assert not (out / "checkpoint.json").exists()


def checkpointed_folder(out):
    """A training folder holding two log rows and a checkpoint at update 2 (as a killed run leaves it)."""
    from jetgym.runs.folder import append_jsonl
    from jetgym.training.run import TrainingFolder

    policy, _, _ = bandit_setup()
    folder = TrainingFolder(out, {"algorithm": "ppo", "train": {"env_steps": 40}})
    optimizer = torch.optim.AdamW(policy.parameters(), lr=0.01)
    policy.parameters()[0].sum().backward()
    optimizer.step()
    append_jsonl(folder.log, [{"update": 1, "env_steps": 8}, {"update": 2, "env_steps": 16}])
    folder.save_checkpoint(policy, optimizer, {"update": 2, "env_steps": 16, "generator": [0]})
    return folder


def damage(out, case):
    """Damage the checkpoint in `out` as a user or a failing disk would."""
    pointer = out / "checkpoint.json"
    files = out / json.loads(pointer.read_text())["folder"]
    if case == "edited pointer":
        pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "env_steps": 999999, "update": 7}))
    elif case == "flipped bytes":
        data = bytearray((files / "policy.safetensors").read_bytes())
        data[-10] ^= 0xFF
        (files / "policy.safetensors").write_bytes(bytes(data))
    elif case in ("truncated optimizer", "truncated policy"):
        name = "optimizer.pt" if case == "truncated optimizer" else "policy.safetensors"
        (files / name).write_bytes((files / name).read_bytes()[:50])
    elif case == "deleted log":
        (out / "train.jsonl").unlink()
    else:
        (out / "train.jsonl").write_text((out / "train.jsonl").read_text().splitlines()[0] + "\n")
    return files


@pytest.mark.parametrize(
    "case, message",
    [
        (
            "edited pointer",
            "{out}/checkpoint.json was edited or damaged (its contents differ from what jetgym wrote): "
            "the checkpoint cannot be trusted; ",
        ),
        (
            "flipped bytes",
            "{files}/policy.safetensors is damaged (N bytes; its contents differ from what jetgym "
            "wrote); the checkpoint cannot be resumed; ",
        ),
        (
            "truncated optimizer",
            "{files}/optimizer.pt is damaged (50 bytes; its contents differ from what jetgym "
            "wrote); the checkpoint cannot be resumed; ",
        ),
        (
            "truncated policy",
            "{files}/policy.safetensors is damaged (50 bytes; its contents differ from what jetgym "
            "wrote); the checkpoint cannot be resumed; ",
        ),
        (
            "deleted log",
            "{out}/train.jsonl is missing beside checkpoint.json: the learning curve's first 2 rows are lost; ",
        ),
        (
            "cut log",
            "{out}/train.jsonl holds 1 rows up to update 2, but 2 when checkpoint.json was written: the "
            "learning curve lost rows; ",
        ),
    ],
)
def test_a_damaged_or_edited_checkpoint_is_refused_naming_the_file_and_the_fix(tmp_path, case, message):
    """Issue 48, item 4: an edited checkpoint.json "finished" in 0 s; flipped tensor bytes and a deleted
    train.jsonl resumed silently; truncated files gave raw tracebacks."""
    from jetgym.training.run import TrainingFolder

    out = tmp_path / "out"
    folder = checkpointed_folder(out)
    assert TrainingFolder(out, folder.config).check()["update"] == 2  # intact: resumes
    files = damage(out, case)
    size = (files / "policy.safetensors").stat().st_size
    with pytest.raises((ValueError, FileNotFoundError)) as caught:  # both one line in jetgym-train
        TrainingFolder(out, folder.config).check()
    fix = "restore it, or choose a new output_dir (the run cannot resume from this folder)"
    assert str(caught.value) == message.format(out=out, files=files).replace("N bytes", f"{size:,} bytes") + fix


def tiny_model_folder(folder) -> str:
    """A tiny random llama with the embedded model's tokenizer, saved as a model folder (loads by path)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from jetgym.scorers.models import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve("smollm2-135m-instruct"))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("tiny-model"))


def trained_adapter(spec, folder, finetune="lora"):
    """A policy whose trained weights are perturbed (as training would), saved to `folder`."""
    policy = Policy(
        make_scorer("jet", model=spec, min_shared_prefix=0), LoraOptions(finetune=finetune, lora_rank=4), seed=1
    )
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    policy.weights_changed()
    policy.save(folder)
    return policy


QUESTIONS = [
    Question(context="Which way to the goal?", candidates=["move left", "move down", "move right", "move up"]),
    Question(context="Pick a colour", candidates=[" red", " blue", " red"]),
]


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_adapter_round_trip_every_schedule(tiny_folder, tmp_path, finetune):
    policy = trained_adapter(tiny_folder, tmp_path / "adapter", finetune)
    trained = [list(d.logprobs) for d in policy.scorer.decide_many(QUESTIONS)]
    base = [lp for d in make_scorer("jet", model=tiny_folder).decide_many(QUESTIONS) for lp in d.logprobs]
    assert sum(trained, []) != pytest.approx(base, abs=1e-3)  # the adapter changes the scores
    for schedule in ("packed", "independent", "batched"):
        merged = make_scorer("jet", model=tiny_folder, adapter=str(tmp_path / "adapter"), schedule=schedule)
        for got, want in zip(merged.decide_many(QUESTIONS), trained):
            assert list(got.logprobs) == pytest.approx(want, abs=1e-4)
    merged = make_scorer("fastjev", model=tiny_folder, adapter=str(tmp_path / "adapter"))
    assert list(merged.decide(QUESTIONS[0]).logprobs) == pytest.approx(trained[0], abs=1e-4)
    if finetune == "lora":  # plain transformers + peft read it too
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_folder), str(tmp_path / "adapter"))
        assert sum(p.numel() for n, p in plain.named_parameters() if "lora_" in n) > 0


def test_bad_adapters_are_refused(tiny_folder, tmp_path):
    from jetgym.scorers.adapters import AdapterError

    with pytest.raises(AdapterError, match="adapter folder '/nowhere/adapter' does not exist"):
        make_scorer("jet", model=tiny_folder, adapter="/nowhere/adapter")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AdapterError, match="is not a jetgym adapter: jetgym_adapter.json is missing"):
        make_scorer("jet", model=tiny_folder, adapter=str(tmp_path / "empty"))
    trained_adapter(tiny_folder, tmp_path / "good")
    weights = tmp_path / "good" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(
        AdapterError,
        match=r"good/adapter_model.safetensors is damaged \(100 bytes; its contents differ from what jetgym "
        r"wrote\); train again or restore the adapter folder",
    ):
        make_scorer("jet", model=tiny_folder, adapter=str(tmp_path / "good"))
    with pytest.raises(AdapterError, match="adapter folder '.*adapter_model.safetensors' is a file, not a folder"):
        make_scorer("jet", model=tiny_folder, adapter=str(weights))
    trained_adapter(tiny_folder, tmp_path / "other")
    meta = tmp_path / "other" / "jetgym_adapter.json"
    data = json.loads(meta.read_text())
    meta.write_text(json.dumps({**data, "base_fingerprint": "0" * 16}))
    with pytest.raises(
        AdapterError,
        match=r"same architecture, but other base weights \(fingerprint 0{16} recorded, "
        r"[0-9a-f]{16} here\): .* load that model, or train again on this one",
    ):
        make_scorer("jet", model=tiny_folder, adapter=str(tmp_path / "other"))
    shape = {**data["base_shape"], "hidden_size": 4096}
    meta.write_text(json.dumps({**data, "base_fingerprint": "0" * 16, "base_shape": shape}))
    with pytest.raises(
        AdapterError, match=r"whose architecture differs \(hidden_size 4096 vs \d+\): load it with model="
    ):
        make_scorer("jet", model=tiny_folder, adapter=str(tmp_path / "other"))
    with pytest.raises(ValueError, match="adapter must be the path of an adapter folder, got ''"):
        make_scorer("jet", model=tiny_folder, adapter="")


def test_damaged_or_non_finite_adapter_tensors_are_refused_by_name(tiny_folder, tmp_path):
    """Issue 48, item 3: 64 bytes of tensor data set to 0x7f loaded and scored as a uniform model."""
    from safetensors.torch import load_file, save_file

    from jetgym.scorers.adapters import AdapterError, file_digests

    folder = tmp_path / "adapter"
    trained_adapter(tiny_folder, folder)
    weights = folder / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-200:-136] = b"\x7f" * 64  # inside the tensor data: the header still parses
    weights.write_bytes(bytes(data))
    with pytest.raises(AdapterError) as caught:
        make_scorer("jet", model=tiny_folder, adapter=str(folder))
    assert str(caught.value) == (
        f"{weights} is damaged ({len(data):,} bytes; its contents differ from what jetgym wrote); "
        f"train again or restore the adapter folder"
    )
    trained_adapter(tiny_folder, folder)  # intact again, then a NaN written with a matching digest
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(weights))
    meta = folder / "jetgym_adapter.json"
    recorded = json.loads(meta.read_text())
    meta.write_text(json.dumps({**recorded, "tensors": file_digests(folder, sorted(recorded["tensors"]))}))
    with pytest.raises(
        AdapterError,
        match=rf"adapter {folder}: weight \S+ holds non-finite values \([\d,]+ of [\d,]+\); train again or restore "
        r"the adapter folder",
    ):
        make_scorer("jet", model=tiny_folder, adapter=str(folder))
    trained_adapter(tiny_folder, folder)  # an adapter of an older version (no digests) still loads
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "tensors"}))
    make_scorer("jet", model=tiny_folder, adapter=str(folder))


def test_an_fp32_trained_adapter_loads_in_bf16(tiny_folder, tmp_path):
    """The base fingerprint does not depend on the dtype the job loads the model in (bf16 runs on any CPU)."""
    from jetgym.scorers.adapters import base_fingerprint

    policy = trained_adapter(tiny_folder, tmp_path / "adapter")
    bf16 = make_scorer("jet", model=tiny_folder, adapter=str(tmp_path / "adapter"), placement={"dtype": "bfloat16"})
    assert next(bf16.loaded.model.parameters()).dtype == torch.bfloat16
    assert (
        base_fingerprint(make_scorer("jet", model=tiny_folder, placement={"dtype": "bfloat16"}).loaded.model)
        == policy.fingerprint
    )
    want = [list(d.logprobs) for d in policy.scorer.decide_many(QUESTIONS)]
    for got, trained in zip(bf16.decide_many(QUESTIONS), want):
        assert list(got.logprobs) == pytest.approx(trained, abs=0.1)  # bf16 rounding of the merged weights


def test_train_cli_adapter_loads_in_jetgym_episode(tiny_folder, tmp_path):
    """jetgym-train (PPO on FrozenLake) writes an adapter that jetgym-episode plays with the same choices."""
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job
    from jetgym.scripts.train import train

    common = [
        f"model.spec={tiny_folder}",
        "env=frozenlake",
        "env.kwargs.is_slippery=false",
        "+env.kwargs.max_episode_steps=6",
    ]
    summary = train(
        compose(
            "train",
            common
            + [
                "algorithm=ppo",
                "train.env_steps=8",
                "train.num_envs=2",
                "train.rollout_steps=4",
                "train.minibatch=4",
                f"output_dir={tmp_path / 'train'}",
            ],
        ),
        progress=False,
    )
    assert summary["updates"] == 1 and (tmp_path / "train" / "learning_curve.png").stat().st_size > 0
    adapter = tmp_path / "train" / "adapter"
    episode_job(
        compose(
            "episode",
            common
            + [f"model.adapter={adapter}", "placement.dtype=float32", "video=false", f"output_dir={tmp_path / 'play'}"],
        ),
        quiet=True,
    )
    steps = [json.loads(line) for line in (tmp_path / "play" / "steps.jsonl").read_text().splitlines()]
    in_memory = make_scorer("jet", model=tiny_folder, adapter=str(adapter))
    texts = ["move left", "move down", "move right", "move up"]  # conf/env/frozenlake.yaml, in action order
    for row in steps:
        decision = in_memory.decide(Question(context=row["question"], candidates=texts))
        assert list(row["probs"].values()) == pytest.approx(list(decision.probs), abs=1e-5)
    with pytest.raises(ValueError, match="jetgym-train trains the scorer agent: set agent=scorer"):
        compose_train = compose("train", common + ["agent=random", f"output_dir={tmp_path / 'x'}"])
        from jetgym.scripts.config import to_config

        to_config(compose_train)


def test_held_out_split_keeps_episodes_whole():
    from jetgym.training.sft import split_held_out

    ids = [f"set/task{t}/demo_{d}/t{f:03d}/r2_dir" for t in range(3) for d in range(2) for f in range(4)]
    questions = [Question(context="c", candidates=["a", "b"], gold=0, id=i) for i in ids]
    train_set, held = split_held_out(questions, 0.5)
    assert {q.id.split("/")[2] for q in held} == {"demo_1"} and {q.id.split("/")[2] for q in train_set} == {"demo_0"}
    assert len(held) == len(train_set) == 12
    flat = [Question(context="c", candidates=["a", "b"], gold=0, id=str(k)) for k in range(10)]
    assert [q.id for q in split_held_out(flat, 0.25)[1]] == ["1", "5", "9"]
    assert split_held_out(flat, 0.0) == (flat, [])


FROZEN_STILL = ("env=frozenlake", "env.kwargs.is_slippery=false")


def recorded_steps(tiny_folder, out, *extra, env=FROZEN_STILL) -> list[dict]:
    """Episodes of the random agent (on non-slippery FrozenLake by default), recorded by jetgym-episode."""
    from jetgym.scripts.config import compose
    from jetgym.scripts.episode import episode_job

    episode_job(
        compose(
            "episode",
            [
                f"model.spec={tiny_folder}",
                *env,
                "agent=random",
                "episodes=3",
                "seed=5",
                "video=false",
                f"output_dir={out}",
                *extra,
            ],
        ),
        quiet=True,
    )
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


def test_behaviour_cloning_replays_the_recorded_episodes(tiny_folder, tmp_path):
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.train import train
    from jetgym.training.cloning import cloning_questions

    rows = recorded_steps(tiny_folder, tmp_path / "play")
    texts = ["move left", "move down", "move right", "move up"]
    env = CandidateActions(gym.make("FrozenLake-v1", is_slippery=False), texts=texts)
    agent = make_agent("scorer", scorer=tiny_scorer(), task="Reach G.", describer=lambda o: f"on cell {o}", memory=2)
    questions = cloning_questions(tmp_path / "play" / "steps.jsonl", env, agent)
    assert len(questions) == len(rows) > 3
    cell, prev = 0, []
    for row, question in zip(rows, questions):  # the observation replayed, the recorded action as gold and memory
        if row["step"] == 0:
            cell, prev = 0, []
        assert question.candidates[question.gold] == row["text"] and f"on cell {cell}" in question.context
        assert all(text in question.context for text in prev[-2:])
        assert question.id == f"steps/episode-{row['episode']}/step-{row['step']}/action"
        prev.append(row["text"])
        (down, right), (row_, col) = [(0, -1), (1, 0), (0, 1), (-1, 0)][texts.index(row["text"])], divmod(cell, 4)
        cell = 4 * min(max(row_ + down, 0), 3) + min(max(col + right, 0), 3)
    summary = train(
        compose(
            "train",
            [
                f"model.spec={tiny_folder}",
                "env=frozenlake",
                "env.kwargs.is_slippery=false",
                "algorithm=bc",
                f"train.demonstrations={tmp_path / 'play' / 'steps.jsonl'}",
                "train.minibatch=4",
                "train.held_out=0.34",
                f"output_dir={tmp_path / 'bc'}",
            ],
        ),
        progress=False,
    )
    assert summary["train_questions"] + summary["held_out_questions"] == len(rows) and summary["held_out_questions"]
    assert (tmp_path / "bc" / "adapter" / "jetgym_adapter.json").exists()
    assert summary["config"]["train"]["learning_rate"] is None  # unset: the options in effect say what ran
    in_effect = {**dataclasses.asdict(BCOptions(minibatch=4)), **dataclasses.asdict(LoraOptions())}
    assert json.loads((tmp_path / "bc" / "summary.json").read_text())["config"]["options"] == json.loads(
        json.dumps(in_effect)
    )
    with pytest.raises(ValueError, match="algorithm=bc .* needs train.demonstrations=PATH"):
        to_config(compose("train", ["algorithm=bc", f"output_dir={tmp_path / 'x'}"]))


def test_behaviour_cloning_refuses_a_record_it_cannot_replay(tiny_folder, tmp_path):
    from jetgym.training.cloning import cloning_questions

    rows = recorded_steps(tiny_folder, tmp_path / "play")
    env = CandidateActions(gym.make("FrozenLake-v1", is_slippery=False), texts=["a", "b", "c", "d"])
    agent = make_agent("scorer", scorer=tiny_scorer(), task="Reach G.", describer=lambda o: f"on cell {o}")

    def refused(changed: list[dict], match: str) -> None:
        path = tmp_path / "bad.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in changed))
        with pytest.raises(ValueError, match=match):
            cloning_questions(path, env, agent)

    refused(
        [{**rows[0], "reward": 5.0}] + rows[1:],
        r"episode 0 step 0: the replay gave reward 0.0, .* where the "
        r"file has 5.0, .* does not replay this episode from its seed",
    )
    refused(
        [{**rows[0], "action": "jump"}] + rows[1:], "episode 0 step 0: the recorded action 'jump' is not admissible"
    )
    refused([{**rows[0], "seed": None}] + rows[1:], "episode 0 has no seed, so it cannot be replayed")
    refused([{k: v for k, v in rows[0].items() if k != "reward"}], "bad.jsonl:1 lacks reward")
    refused(rows[:1] + rows[2:], "episode 0 skips from step 0 to 2: the file is incomplete")
    with pytest.raises(FileNotFoundError, match="train.demonstrations='/nowhere.jsonl' is not a file"):
        cloning_questions("/nowhere.jsonl", env, agent)


def test_behaviour_cloning_leaves_out_an_episode_a_stopped_run_cut_off(tiny_folder, tmp_path):
    """Issue 48, item 9: bc trained on the cut-off last episode of a killed episode run without a word."""
    from jetgym.training.cloning import cloning_questions

    rows = recorded_steps(tiny_folder, tmp_path / "play")
    last = rows[-1]["episode"]
    cut = [r for r in rows if r["episode"] != last] + [r for r in rows if r["episode"] == last][:1]
    assert not (cut[-1]["terminated"] or cut[-1]["truncated"])
    path = tmp_path / "killed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in cut))
    env = CandidateActions(gym.make("FrozenLake-v1", is_slippery=False), texts=["a", "b", "c", "d"])
    agent = make_agent("scorer", scorer=tiny_scorer(), task="Reach G.", describer=lambda o: f"on cell {o}")
    with pytest.warns(UserWarning) as caught:
        questions = cloning_questions(path, env, agent)
    assert str(caught[0].message) == (
        f"{path}: episode {last} (stops at step 0) never ended (the recording run was stopped mid-episode): left "
        f"out of the cloned episodes"
    )
    assert {q.id.split("/")[1] for q in questions} == {f"episode-{n}" for n in range(last)}
    path.write_text(json.dumps(cut[-1]) + "\n")
    with pytest.raises(ValueError, match=r"killed.jsonl holds no finished episode \(episode \d+ \(stops at step 0\)\)"):
        cloning_questions(path, env, agent)


def test_behaviour_cloning_keeps_the_episodes_above_min_return(tiny_folder, tmp_path):
    from jetgym.scripts.config import compose, to_config
    from jetgym.training.cloning import cloning_questions

    rows = recorded_steps(tiny_folder, tmp_path / "play")
    returns = {e: sum(r["reward"] for r in rows if r["episode"] == e) for e in {r["episode"] for r in rows}}
    env = CandidateActions(gym.make("FrozenLake-v1", is_slippery=False), texts=["a", "b", "c", "d"])
    agent = make_agent("scorer", scorer=tiny_scorer(), task="Reach G.", describer=lambda o: f"on cell {o}")
    path = tmp_path / "play" / "steps.jsonl"
    for floor in (0.0, 0.5):
        kept = {e for e, total in returns.items() if total >= floor}
        if kept:
            questions = cloning_questions(path, env, agent, min_return=floor)
            assert {int(q.id.split("/")[1].split("-")[1]) for q in questions} == kept
            assert len(questions) == sum(r["episode"] in kept for r in rows)
    with pytest.raises(
        ValueError,
        match=r"no episode of .*steps.jsonl has a return of at least "
        r"train.min_return=100.0 \(the best has [01]\): lower train.min_return",
    ):
        cloning_questions(path, env, agent, min_return=100.0)
    with pytest.raises(
        ValueError, match="train.min_return is a behaviour-cloning option: set it with algorithm=bc only"
    ):
        to_config(compose("train", ["train.min_return=0", f"output_dir={tmp_path / 'x'}"]))


def test_dagger_relabels_the_replayed_steps_with_the_expert(tiny_folder, tmp_path):
    """Random Taxi episodes cut at 12 steps, pooled from two files and replayed without the cut: the env follows
    the record, the gold is the shortest-route driver's action on each replayed state."""
    from jetgym.agents.baselines import TaxiRoutes
    from jetgym.scripts.build import make_env
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.train import train
    from jetgym.training.cloning import cloning_questions

    paths = []
    for k in range(2):
        recorded_steps(
            tiny_folder, tmp_path / f"play{k}", f"seed={10 * k}", env=("env=taxi", "env.kwargs.max_episode_steps=12")
        )
        paths.append(tmp_path / f"play{k}" / "steps.jsonl")
    rows = [[json.loads(line) for line in path.read_text().splitlines()] for path in paths]
    env = make_env(to_config(compose("episode", ["env=taxi"])))
    agent = make_agent("scorer", scorer=tiny_scorer(), task="Drive.", describer=lambda o: f"state {o}")
    questions = cloning_questions(paths, env, agent, expert=make_agent("scripted", env=env))
    assert len(questions) == sum(map(len, rows)) and rows[0][-1]["truncated"]
    routes = TaxiRoutes(env)
    for (k, row), question in zip([(k, r) for k, file in enumerate(rows) for r in file], questions):
        assert question.id == f"steps-{k}/episode-{row['episode']}/step-{row['step']}/action"
        if row["step"] == 0:
            state, info = env.reset(seed=row["seed"])
        candidates = info["candidates"]
        expert = candidates.texts[list(candidates.actions).index(routes.action(int(state)))]
        assert question.candidates[question.gold] == expert
        state, _, _, _, info = env.step(candidates.actions[candidates.labels.index(row["action"])])
    assert sum(q.candidates[q.gold] != r["text"] for q, r in zip(questions, rows[0] + rows[1])) > 0
    summary = train(
        compose(
            "train",
            [
                f"model.spec={tiny_folder}",
                "env=taxi",
                "algorithm=bc",
                "train.relabel=scripted",
                f"train.demonstrations=[{paths[0]},{paths[1]}]",
                "train.unique=true",
                "train.minibatch=8",
                "train.held_out=0.5",
                f"output_dir={tmp_path / 'bc'}",
            ],
        ),
        progress=False,
    )
    merged = summary["config"]["unique"]
    assert summary["train_questions"] + summary["held_out_questions"] + merged["train_repeats_left_out"] + merged[
        "held_out_repeats_left_out"
    ] == len(questions)
    bad = {
        "train.relabel=bogus": "unknown train.relabel 'bogus'; known: scripted, scripted-strafe",
        "train.relabel=scripted": "train.relabel is a behaviour-cloning option: set it with algorithm=bc only",
        "train.demonstrations=[]": r"train.demonstrations must be a steps.jsonl path or a non-empty list of them",
    }
    for override, message in bad.items():
        extra = ["algorithm=bc"] if "demonstrations" in override else []
        with pytest.raises(ValueError, match=message):
            to_config(compose("train", [override, *extra, f"output_dir={tmp_path / 'x'}"]))


def test_relabel_on_an_env_without_an_expert_names_train_relabel(tiny_folder, tmp_path):
    from jetgym.scripts.config import compose, to_config
    from jetgym.scripts.train import train

    grid = ("env=minigrid_empty_5x5", "+env.kwargs.max_episode_steps=4")  # MiniGrid: no scripted expert
    recorded_steps(tiny_folder, tmp_path / "play", "episodes=1", env=grid)
    config = compose(
        "train",
        [
            f"model.spec={tiny_folder}",
            *grid,
            "algorithm=bc",
            "train.relabel=scripted",
            f"train.demonstrations={tmp_path / 'play' / 'steps.jsonl'}",
            f"output_dir={tmp_path / 'bc'}",
        ],
    )
    with pytest.raises(ValueError) as caught:
        train(config, progress=False)
    assert str(caught.value) == (
        "train.relabel=scripted relabels with the scripted expert, which plays ViZDoom, Taxi, "
        "FrozenLake and BabyAI envs only, not minigrid:MiniGrid-Empty-5x5-v0: leave "
        "train.relabel unset to clone the recorded actions"
    )
    from jetgym.agents.baselines import ScriptedAgent
    from jetgym.scripts.build import make_env

    for env, plays in (("taxi", True), ("frozenlake", True), ("babyai_goto_obj", True), ("minigrid_empty_5x5", False)):
        made = make_env(to_config(compose("episode", [f"env={env}"])))
        assert ScriptedAgent.plays(made) is plays, env
        made.close()


def test_scripted_taxi_driver_takes_a_shortest_route():
    """Its episode lengths equal a breadth-first search over the env's own transition table (`P`)."""
    from collections import deque

    from jetgym.agents import rollout

    env = CandidateActions(gym.make("Taxi-v4"), texts=[f"action {i}" for i in range(6)])
    transitions = env.unwrapped.P

    def shortest(start: int) -> int:
        steps, frontier = {start: 0}, deque([start])
        while frontier:
            state = frontier.popleft()
            for outcomes in transitions[state].values():
                _, after, reward, done = outcomes[0]
                if done and reward > 0:
                    return steps[state] + 1
                if after not in steps:
                    steps[after] = steps[state] + 1
                    frontier.append(after)
        raise AssertionError("no delivery reachable")

    episodes = rollout(env, make_agent("scripted", env=env), 12, 40)
    starts = [int(env.reset(seed=40 + i)[0]) for i in range(12)]
    assert [e["length"] for e in episodes] == [shortest(s) for s in starts]
    assert all(e["terminated"] and e["return"] > 0 for e in episodes)
    with pytest.raises(ValueError, match="scripted agent plays ViZDoom, Taxi, FrozenLake and BabyAI only"):
        make_agent("scripted").act(0, env.reset(seed=0)[1]["candidates"])


def test_scripted_frozenlake_walker_plays_the_best_moves():
    """Not slippery: every episode reaches the goal in the fewest steps (breadth-first search over the env's `P`).
    Slippery: it reaches the goal far more often than random on the same seeds."""
    from collections import deque

    from jetgym.agents import rollout

    def play(slippery: bool, agent: str, episodes: int):
        env = CandidateActions(gym.make("FrozenLake-v1", is_slippery=slippery), texts=[f"move {i}" for i in range(4)])
        return env, rollout(env, make_agent(agent, env=env) if agent == "scripted" else make_agent(agent), episodes, 7)

    env, episodes = play(False, "scripted", 3)
    steps, frontier = {0: 0}, deque([0])
    while frontier:
        state = frontier.popleft()
        for outcomes in env.unwrapped.P[state].values():
            _, after, reward, done = outcomes[0]
            if after not in steps and (not done or reward > 0):  # holes end the walk
                steps[after] = steps[state] + 1
                frontier.append(after)
    assert [e["length"] for e in episodes] == [steps[15]] * 3 and all(e["return"] == 1 for e in episodes)
    slippery = [sum(e["return"] for e in play(True, agent, 300)[1]) / 300 for agent in ("scripted", "random")]
    assert slippery[0] > 0.6 and slippery[1] < 0.05


def test_unique_trains_each_distinct_question_once_and_holds_out_only_unseen_ones(tmp_path):
    from jetgym.scripts.config import compose, to_config
    from jetgym.training.sft import distinct_split

    def q(context, gold, id_):
        return Question(context=context, candidates=["left", "right"], gold=gold, id=id_)

    train = [q("at 1", 0, "a"), q("at 2", 1, "b"), q("at 1", 0, "c"), q("at 1", 1, "d")]  # d: same text, other gold
    held = [q("at 2", 1, "e"), q("at 3", 0, "f"), q("at 3", 0, "g")]
    kept, unseen, counts = distinct_split(train, held)
    assert [x.id for x in kept] == ["a", "b", "d"] and [x.id for x in unseen] == ["f"]
    assert counts == {"train_repeats_left_out": 1, "held_out_repeats_left_out": 2}
    with pytest.raises(ValueError, match="train.unique compares question texts, and question 'i' has images"):
        distinct_split(
            [Question(context="x", candidates=["a", "b"], images=[np.zeros((2, 2, 3), np.uint8)], id="i")], []
        )
    with pytest.raises(
        ValueError, match="train.unique merges repeated labelled questions: set it with algorithm=sft or bc only"
    ):
        to_config(compose("train", ["train.unique=true", f"output_dir={tmp_path}"]))


def test_learning_benchmark_rebuilds_the_run_env():
    """The env settings a run recorded (null, booleans, strings, lists) come back unchanged through Hydra."""
    from jetgym.scripts.evaluate import env_controls, env_overrides
    from jetgym.scripts.config import compose, to_config

    kwargs = {
        "map_name": "4x4",
        "is_slippery": False,
        "max_episode_steps": None,
        "desc": ["SFFF", "FHFH", "FFFH", "HFFG"],
    }
    run = {
        "model": {"spec": "smollm2-135m-instruct"},
        "scorer": {"name": "jet", "template": "none"},
        "env": {"id": "FrozenLake-v1", "kwargs": kwargs, "action_texts": ["a", "b", "c", "d"], "task": "Go."},
        "agent": {"memory": 2, "describer": "auto"},
    }
    config = to_config(compose("episode", ["env=gym", *env_overrides(run)]))
    assert dict(config.env.kwargs) == kwargs and config.env.task == "Go." and config.agent.memory == 2
    assert config.scorer.template == "none" and list(config.env.action_texts) == ["a", "b", "c", "d"]
    assert len(set(env_controls(["env=gym", "env.id=FrozenLake-v1"]))) == 4  # the env's own controls, no texts given
    other = to_config(compose("episode", ["env=gym", *env_overrides(run, "jetgym/BabyAI-GoToLocalTest-v0")]))
    assert other.env.id == "jetgym/BabyAI-GoToLocalTest-v0" and dict(other.env.kwargs) == kwargs  # a test split
    games = to_config(compose("episode", ["env=gym", *env_overrides(run, None, {"map_name": "8x8", "games": 3})]))
    assert dict(games.env.kwargs) == {**kwargs, "map_name": "8x8", "games": 3} and games.env.id == "FrozenLake-v1"


def test_learning_benchmark_scorers_pick_by_the_policy_asked(tiny_folder, monkeypatch):
    import jetgym.agents
    from jetgym.scripts.evaluate import play

    picked = []
    monkeypatch.setattr(jetgym.agents, "rollout", lambda env, agent, *args, **kwargs: picked.append(agent.policy) or [])
    for policy in ("argmax", "sample", "untried", "auto"):
        play([f"model.spec={tiny_folder}", *FROZEN_STILL], "scorer", (0, 1), policy=policy)
    assert picked == ["argmax", "sample", "untried", "untried"]  # auto: the still lake is deterministic


def test_eval_refuses_stop_loops_where_auto_plays_untried(tiny_folder):
    from jetgym.scripts.evaluate import play

    with pytest.raises(ValueError, match=re.escape("policy=auto plays untried on this env") + ".*set policy=argmax"):
        play([f"model.spec={tiny_folder}", *FROZEN_STILL], "scorer", (0, 1), stop_loops=True)
    assert play([f"model.spec={tiny_folder}", *FROZEN_STILL], "scorer", (0, 1), stop_loops=True, policy="argmax")


def test_eval_counts_the_held_out_questions_training_played(tiny_folder, tmp_path):
    from jetgym.scripts.evaluate import play
    from jetgym.training.evaluation import QUESTIONS, question_digest, seen_share, table

    asked: list = []
    play([f"model.spec={tiny_folder}", *FROZEN_STILL], "scorer", (0, 1), asked=asked)
    distinct = list(dict.fromkeys(asked))
    assert len(distinct) >= 2 and all(isinstance(q, str) and "row" in q for q in distinct)
    (tmp_path / QUESTIONS).write_text(json.dumps([question_digest(distinct[0]), "0" * 32]))
    share = seen_share(tmp_path, asked)
    assert share == {"questions": len(distinct), "seen_in_training": 1, "share": 1 / len(distinct)}
    assert seen_share(tmp_path / "no-record", asked) is None  # a run that recorded no questions: nothing to say
    line = table({"agents": {}, "paired": {}, "held_out_questions_seen": {"trained": share}})[-1]
    assert line == (
        f"Distinct held-out question texts that training played: trained 1 of {len(distinct)} "
        f"({1 / len(distinct):.0%})."
    )


def test_learning_benchmark_leaves_out_fixed_controls_the_env_masks():
    """Taxi masks every control at some step (walls, pick-ups away from the passenger): no fixed baseline there."""
    from jetgym.scripts.evaluate import fixed_returns

    taxi = fixed_returns(["env=taxi"], (0, 2), ["move south", "pick up the passenger"])
    assert taxi == {"move south": None, "pick up the passenger": None}
    still = fixed_returns(["env=frozenlake", "env.kwargs.is_slippery=false"], (0, 2), ["move down"])
    assert still == {"move down": 0.0}  # straight down from the start falls into the hole at row 1


def test_learning_benchmark_reads_every_demonstration_file_and_refuses_bad_counts(tmp_path, capsys):
    from benchmarks.learning import main, seed_spans
    from jetgym.scripts.evaluate import demonstration_episodes, demonstration_seeds

    for k, seeds in enumerate(((1, 2, 2), (1,))):  # file 0: episode 1 has two steps
        rows = [{"episode": e, "seed": s} for e, s in zip((0, 1, 1), seeds)]
        (tmp_path / f"{k}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    files = [str(tmp_path / "0.jsonl"), str(tmp_path / "1.jsonl")]
    assert demonstration_episodes({"algorithm": "bc", "train": {"demonstrations": files}}) == [
        (0, 0, 1),
        (0, 1, 2),
        (1, 0, 1),
    ]
    assert demonstration_seeds({"algorithm": "bc", "train": {"demonstrations": files}}) == {1, 2}
    assert demonstration_seeds({"algorithm": "bc", "train": {"demonstrations": files[1]}}) == {1}
    assert demonstration_seeds({"algorithm": "ppo", "train": {"demonstrations": None}}) == set()
    assert seed_spans({3001, 1000, 1001, 1002, 3000, 7}) == "7, 1000..1002, 3000..3001"
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--name", "x", "--num-envs", "0"])
    assert "--num-envs must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--name", "x", "--num-envs", "2", "--stop-loops"])
    assert "--stop-loops plays one env at a time: leave --num-envs at 1" in capsys.readouterr().err
    (tmp_path / "summary.json").write_text(json.dumps({"config": {"algorithm": "ppo", "agent": {"memory": 2}}}))
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--name", "x", "--stop-loops"])
    assert "this run's agent quotes its last 2 actions (agent.memory)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--name", "x", "--stop-loops", "--policy", "sample"])
    assert (
        "--stop-loops needs the argmax scorer (with --policy sample a repeated observation need not start a loop): "
        "drop --policy" in capsys.readouterr().err
    )


def test_training_speed_benchmark_checks_every_method_against_per_candidate(tiny_folder, tmp_path):
    from benchmarks.train_cost import main

    main(
        [
            "--model",
            tiny_folder,
            "--rounds",
            "1",
            "--minibatch",
            "3",
            "--lora-layers",
            "1",
            "--dtypes",
            "fp32",
            "--output-dir",
            str(tmp_path),
        ]
    )
    results = json.loads((tmp_path / "train_speed_last_1.json").read_text())
    methods = ("packed", "per-candidate", "kept-trunk")
    assert set(results["timings"]) == {f"{m}/fp32 {w}" for m in methods for w in ("frozenlake", "taxi")}
    for found in results["gradient_max_relative_difference"].values():
        assert set(found) == {"packed", "kept-trunk"} and max(found.values()) < 1e-4
    table = (tmp_path / "train_speed_last_1.md").read_text()
    assert table.startswith("## train-speed-last-1\n")
    assert "| env | dtype | packed | per-candidate | kept-trunk | speed-up packed | speed-up kept-trunk |" in table


def test_learning_benchmark_plays_several_training_seeds_on_the_same_held_out_seeds(tiny_folder, tmp_path, capsys):
    """Each run plays the held-out seeds; the mean over training seeds is paired with every baseline; runs of
    different settings, and several sft runs, are refused."""
    from benchmarks.learning import main
    from jetgym.scripts.config import compose
    from jetgym.scripts.train import train

    recorded_steps(tiny_folder, tmp_path / "play")
    runs = [tmp_path / f"bc{seed}" for seed in (0, 1)]
    for seed, out in enumerate(runs):
        train(
            compose(
                "train",
                [
                    f"model.spec={tiny_folder}",
                    *FROZEN_STILL,
                    "algorithm=bc",
                    "train.minibatch=4",
                    f"train.demonstrations={tmp_path / 'play' / 'steps.jsonl'}",
                    "train.held_out=0.34",
                    f"seed={seed}",
                    f"output_dir={out}",
                ],
            ),
            progress=False,
        )
    main(
        [
            *map(str, runs),
            "--name",
            "two-seeds",
            "--episodes",
            "3",
            "--tuning-episodes",
            "1",
            "--output-dir",
            str(tmp_path / "bench"),
        ]
    )
    results = json.loads((tmp_path / "bench" / "train_two_seeds.json").read_text())
    agents, mean = results["agents"], "trained (mean of 2 seeds)"
    assert {"trained (seed 0)", "trained (seed 1)", mean, "zero-shot", "random"} <= set(agents)
    assert agents[mean]["returns"] == [
        (a + b) / 2 for a, b in zip(agents["trained (seed 0)"]["returns"], agents["trained (seed 1)"]["returns"])
    ]
    assert {f"{mine} - random" for mine in ("trained (seed 0)", "trained (seed 1)", mean)} <= set(results["paired"])
    assert [t["seed"] for t in results["training"]] == [0, 1] and "seeds 1" in capsys.readouterr().out
    from jetgym.scripts.evaluate import EvalConfig, run_eval

    # the product job plays the agent's default policy: untried on the still lake (a deterministic env)
    summary = json.loads((runs[0] / "summary.json").read_text())
    (runs[0] / "summary.json").write_text(json.dumps({**summary, "warning": "nothing was learnt"}))
    product = run_eval(EvalConfig(runs=[str(r) for r in runs], episodes=3, tuning_episodes=1), str(tmp_path / "eval"))
    assert results["policy"] == "argmax" and product["policy"] == "untried"
    report = (tmp_path / "eval" / "evaluation.md").read_text()
    assert "the scorers' policy untried (auto)." in report
    assert f"Training of {runs[0]} warned: nothing was learnt\n" in report and f"Training of {runs[1]}" not in report
    assert [t["warning"] for t in product["training"]] == ["nothing was learnt", None]
    assert set(product["agents"]) == set(agents) and product["held_out_seeds"] == results["held_out_seeds"]
    summary = json.loads((runs[1] / "summary.json").read_text())
    summary["config"]["train"]["learning_rate"] = 0.5
    (runs[1] / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit):
        main([*map(str, runs), "--name", "x"])
    assert (
        "run 2 differs from run 1 in 'train': pass runs that differ only in their training seed"
        in capsys.readouterr().err
    )
    for run in runs:
        (run / "summary.json").write_text(json.dumps({"config": {"algorithm": "sft"}}))
    with pytest.raises(SystemExit):
        main([*map(str, runs), "--name", "x"])
    assert "an sft run is evaluated on its own held-out split: pass one run" in capsys.readouterr().err


def test_bf16_autocast_is_refused_on_a_cpu_without_native_bf16(monkeypatch, tmp_path):
    import jetgym.scripts.config as config
    from jetgym.scripts.config import compose, to_config

    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(
        ValueError, match="train.autocast=true on a CPU without native bf16 .* leave train.autocast=false"
    ):
        to_config(compose("train", ["train.autocast=true", f"output_dir={tmp_path}"]))
    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: True)
    assert to_config(compose("train", ["train.autocast=true", f"output_dir={tmp_path}"])).train.autocast


def test_learning_benchmark_reports_an_rft_run_beside_sb3_on_the_same_held_out_seeds(tiny_folder, tmp_path, capsys):
    from benchmarks import sb3 as bench_sb3
    from benchmarks.learning import main
    from jetgym.scripts.config import compose
    from jetgym.scripts.train import train

    out = tmp_path / "rft"  # a 1x2 lake, 2 moves: the goal is one move right, so a group's returns differ
    train(
        compose(
            "train",
            [
                f"model.spec={tiny_folder}",
                *FROZEN_STILL,
                "+env.kwargs.desc=[SG]",
                "+env.kwargs.max_episode_steps=2",
                "algorithm=rft",
                "train.env_steps=40",
                "train.group=4",
                "train.seeds_per_round=2",
                "train.num_envs=2",
                "train.updates=1",
                "train.minibatch=2",
                "train.keep=top:0.5",
                f"output_dir={out}",
            ],
        ),
        progress=False,
    )
    main(
        [
            str(out),
            "--name",
            "rft-tiny",
            "--episodes",
            "3",
            "--tuning-episodes",
            "1",
            "--sb3",
            "--output-dir",
            str(tmp_path / "bench"),
        ]
    )
    results = json.loads((tmp_path / "bench" / "train_rft_tiny.json").read_text())
    (sb3,) = [name for name in results["agents"] if name.startswith("SB3 PPO, MLP (")]
    assert sb3 == "SB3 PPO, MLP (2048 env steps)"  # one whole SB3 rollout: it cannot stop at 40
    direct = bench_sb3.play(
        "FrozenLake-v1", results_env(out), bench_sb3.train("FrozenLake-v1", results_env(out), 40, 0), range(3)
    )
    assert results["agents"][sb3]["returns"] == [e["return"] for e in direct]
    assert f"trained - {sb3}" in results["paired"] and results["training"][0]["rounds"] >= 1
    text = capsys.readouterr().out
    assert "on an rft run of 40 env steps" in text and "training seeds are >= 1,000,000" in text
    assert "Training seconds per round" in text and " --sb3`" in text
    sampled = []
    for k in range(2):  # the scorers draw from q, seeded by each episode's seed: the same draws again
        main(
            [
                str(out),
                "--name",
                "rft-tiny",
                "--episodes",
                "3",
                "--tuning-episodes",
                "1",
                "--policy",
                "sample",
                "--output-dir",
                str(tmp_path / f"sampled{k}"),
            ]
        )
        agents = json.loads((tmp_path / f"sampled{k}" / "train_rft_tiny.json").read_text())["agents"]
        sampled.append([agents[a]["returns"] for a in ("trained", "zero-shot")])
    assert sampled[0] == sampled[1]
    assert " --policy sample`" in capsys.readouterr().out
    main(
        [
            str(out),
            "--name",
            "rft-tiny",
            "--episodes",
            "1",
            "--tuning-episodes",
            "1",
            "--seed",
            "100",
            "--output-dir",
            str(tmp_path / "later"),
        ]
    )
    assert (
        "--episodes 1 --seed 100`" in capsys.readouterr().out
        and "Held-out seeds 100..100" in (tmp_path / "later" / "train_rft_tiny.md").read_text()
    )


def results_env(run) -> dict:
    return json.loads((run / "summary.json").read_text())["config"]["env"]["kwargs"]


def test_learning_benchmark_reads_a_setting_missing_from_an_older_run_as_null():
    from jetgym.training.evaluation import same_configuration

    older, newer = (
        {"env": {"id": "FrozenLake-v1"}, "seed": 0},
        {"env": {"id": "FrozenLake-v1", "discretize": None}, "seed": 1},
    )
    assert same_configuration([older, newer]) is None
    assert (
        same_configuration([older, {"env": {"id": "FrozenLake-v1", "discretize": 3}}])
        == "run 2 differs from run 1 in 'env'"
    )


def test_learning_benchmark_reads_an_option_missing_from_an_older_run_at_its_default():
    from jetgym.training.evaluation import same_configuration

    older = {"algorithm": "rft", "options": {"group": 4}, "seed": 0}
    newer = {"algorithm": "rft", "options": {"group": 4, "advantage": "plan"}, "seed": 1}
    assert same_configuration([older, newer]) is None
    stepped = {"algorithm": "rft", "options": {"group": 4, "advantage": "step-group"}, "seed": 2}
    assert same_configuration([older, stepped]) == "run 2 differs from run 1 in 'options'"


def test_making_a_policy_shows_no_deprecation_warning_of_peft():
    """peft reads transformers' deprecated `is_gradient_checkpointing`; that FutureWarning is not the user's."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Policy(tiny_scorer(), LoraOptions(lora_rank=2), seed=0)
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["algorithm=sft", "train.env_steps=100"],
            "train.env_steps=100 is the env-step budget of algorithm=ppo or rft; algorithm=sft trains on questions "
            "for train.epochs: remove train.env_steps (or set train.epochs)",
        ),
        (
            ["algorithm=rft", "train.held_out=0.3"],
            "train.held_out=0.3 holds questions out of algorithm=sft or bc; algorithm=rft is evaluated by playing "
            "(jetgym eval): remove train.held_out",
        ),
        (
            ["train.finetune=full", "train.lora_rank=4", "train.lora_layers=2"],
            "train.lora_rank, train.lora_layers set with train.finetune=full, which trains every weight and no LoRA "
            "adapter: remove them, or leave train.finetune=lora",
        ),
        (
            ["algorithm=sft", "train.held_out=0.99"],
            "train.held_out must be a fraction in [0, 0.5], got 0.99: every k-th episode (k = round(1 / held_out) "
            ">= 2) is held out, so at most half; set train.held_out=0.5 or less",
        ),
    ],
)
def test_train_options_that_would_be_ignored_are_refused_naming_them(overrides, message):
    """Issue 48, item 5: each of these was accepted and ignored (or did something else than it said)."""
    from jetgym.scripts.config import compose, to_config

    with pytest.raises(ValueError) as caught:
        to_config(compose("train", overrides))
    assert str(caught.value) == message
    default, sft = to_config(compose("train", [])), to_config(compose("train", ["algorithm=sft"]))
    assert (default.algorithm, default.env_steps, sft.held_out) == ("rft", 4096, 0.5)  # defaults still apply


def test_settings_that_failed_late_are_refused_before_training(tmp_path):
    """Issue 48, item 7: learning_rate=inf failed at a row `policy_loss = nan`, seed=-2 in a gymnasium traceback,
    NaN rewards gave `mean_return = nan`, and a changed setting was named only by its group (`changed: train`)."""
    from jetgym.scripts.config import compose, to_config
    from jetgym.training.run import TrainingFolder

    with pytest.raises(ValueError) as caught:
        to_config(compose("train", ["algorithm=rft", "train.learning_rate=inf"]))
    assert str(caught.value) == "train.learning_rate must be a finite number, got inf"
    with pytest.raises(ValueError) as caught:
        to_config(compose("train", ["algorithm=rft", "seed=-2"]))
    assert str(caught.value) == "seed must be >= 0 (envs take non-negative seeds), got -2"

    import broken_envs  # noqa: F401  (registers the broken envs)

    policy, _, agent = bandit_setup()
    envs = [CandidateActions(gym.make("BrokenNanReward-v0"), texts=["go west", "go east"]) for _ in range(2)]
    with pytest.raises(ValueError) as caught:
        run_ppo(policy, envs, agent, PPOOptions(num_envs=2, rollout_steps=4, minibatch=4), tmp_path / "nan", 8)
    assert str(caught.value) == (
        "BrokenNanReward-v0's step() at episode 0, step 2 returned reward = nan: a reward must be a finite number; "
        "fix the env's reward"
    )

    out = tmp_path / "resume"
    checkpointed_folder(out)
    with pytest.raises(ValueError) as caught:
        TrainingFolder(out, {"algorithm": "ppo", "train": {"env_steps": 80}}).check()
    assert "(changed: train.env_steps 40 -> 80); rerun with the same settings to resume" in str(caught.value)


def test_tensor_files_get_the_mode_of_every_other_file(tiny_folder, tmp_path):
    """Issue 48, item 9: safetensors wrote 0600 files beside 0644 ones."""
    umask = os.umask(0)
    os.umask(umask)
    trained_adapter(tiny_folder, tmp_path / "adapter")
    checkpointed_folder(tmp_path / "out")
    files = [*(tmp_path / "adapter").iterdir(), *(tmp_path / "out").glob("checkpoint-*/*")]
    assert {path.name for path in files} >= {"adapter_model.safetensors", "policy.safetensors", "optimizer.pt"}
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in files} == {
        path.name: oct(0o666 & ~umask) for path in files
    }
