"""Placement: dtype/device resolution, expert offloading hooks, refusals; GPU paths skip without CUDA."""

import pytest
import torch

from jetgym.scorers import Question, make_scorer
from jetgym.scorers.models import load_model, resolve
from jetgym.scorers.placement import Placement, offload_experts, routed_expert_modules
from tiny_models import tiny_llama

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")


def tiny_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=128,
    )
    return Qwen3MoeForCausalLM(config).eval()


def test_placement_names_resolve_to_device_and_dtype():
    assert Placement.of(None) == Placement("cpu", "float32")
    assert Placement.of("cuda") == Placement("cuda", "bfloat16")
    assert Placement.of({"device": "auto", "dtype": "float16"}).load_kwargs()["device_map"] == "auto"
    with pytest.raises(ValueError, match="unknown placement.dtype 'float8'; known: auto, float32, bfloat16, float16"):
        Placement("cpu", "float8")


def test_expert_offloading_hooks_keep_outputs_unchanged():
    model = tiny_moe()
    names = [name for name, _ in routed_expert_modules(model)]
    assert names == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.inference_mode():
        before = model(ids).logits
        kept = offload_experts(model, "cpu")  # the hooks' CPU round trip, on a CPU-only machine
        after = model(ids).logits
    assert kept == sum(p.numel() * p.element_size() for n, p in model.named_parameters() if ".experts." in n)
    assert torch.equal(before, after)


def test_expert_offloading_refuses_a_dense_model():
    with pytest.raises(ValueError, match="needs a mixture-of-experts model; this one has no routed experts"):
        offload_experts(tiny_llama(), "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when no GPU exists")
def test_cuda_placement_without_a_gpu_is_refused():
    with pytest.raises(ValueError, match="placement 'cuda' needs a CUDA GPU and torch sees none; use placement=cpu"):
        load_model("smollm2-135m-instruct", "cuda")


@pytest.mark.slow
def test_auto_placement_loads_where_it_can(tmp_path):
    loaded = load_model(resolve("smollm2-135m-instruct"), {"device": "auto", "dtype": "float32"})
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert loaded.device.type == expected
    d = make_scorer("jet", model=loaded, template="none").decide(
        Question(context="The capital of France is", candidates=[" Paris", " Banana"])
    )
    assert d.text == " Paris"


@needs_cuda
@pytest.mark.slow
def test_cuda_bf16_packed_agrees_with_independent():
    loaded = load_model("smollm2-135m-instruct", "cuda")
    assert loaded.device.type == "cuda" and loaded.model.dtype == torch.bfloat16
    question = Question(context="The capital of France is", candidates=[" Paris", " the city of Lyon", " Banana"])
    fast = make_scorer("jet", model=loaded, template="none", schedule="packed").decide(question)
    reference = make_scorer("jet", model=loaded, template="none", schedule="independent").decide(question)
    assert fast.choice == reference.choice
    assert max(abs(a - b) for a, b in zip(fast.logprobs, reference.logprobs)) < 0.1  # bf16
