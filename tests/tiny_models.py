"""Tiny randomly initialised models and random candidate sets for equivalence tests."""

from __future__ import annotations

import random

import torch

from jetgym.scorers.prompts import EncodedQuestion

VOCAB = 101


def tiny_llama(attn_implementation: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(config).eval()


def tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
    )
    return Qwen3ForCausalLM(config).eval()


def random_question(rng: random.Random, n_candidates: int | None = None) -> EncodedQuestion:
    """A prefix and candidates mixing shared leading tokens, single tokens, long ones and duplicates."""
    token = lambda: rng.randrange(VOCAB)  # noqa: E731
    prefix = tuple(token() for _ in range(rng.randint(1, 24)))
    stem = tuple(token() for _ in range(rng.randint(1, 4)))
    candidates = []
    for _ in range(n_candidates or rng.randint(1, 9)):
        shape = rng.random()
        if shape < 0.2:
            candidates.append((token(),))
        elif shape < 0.5:
            candidates.append(stem + tuple(token() for _ in range(rng.randint(0, 5))))
        elif shape < 0.6 and candidates:
            candidates.append(rng.choice(candidates))
        else:
            candidates.append(tuple(token() for _ in range(rng.randint(1, 30))))
    return EncodedQuestion(prefix, tuple(candidates))


def frame_questions(rng, shared: int, tails, first_token: int = 0):
    """Questions whose prefixes are one common part + their own tail (tail lengths `tails`; 0 = the whole
    prefix is the common part). Tails start with distinct tokens, so the common part is exactly `shared`."""
    common = tuple(rng.randrange(VOCAB) for _ in range(shared))
    out = []
    for k, n in enumerate(tails):
        tail = (first_token + k,) + tuple(rng.randrange(VOCAB) for _ in range(n - 1)) if n else ()
        out.append(EncodedQuestion(common + tail, random_question(rng).continuations))
    return out


# ---------------------------------------------------------------- hybrid (recurrent + attention) models


def tiny_qwen3_5(vocab_size: int = VOCAB, layer_types=("linear_attention", "full_attention", "linear_attention")):
    """Qwen3.5 text model: Gated DeltaNet (linear attention) layers mixed with full attention layers."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(2)
    config = Qwen3_5TextConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=len(layer_types),
        layer_types=list(layer_types),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        max_position_embeddings=512,
    )
    return Qwen3_5ForCausalLM(config).eval()


def tiny_qwen3_next():
    """Qwen3-Next: Gated DeltaNet and full attention layers with a small mixture of experts."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(3)
    layer_types = ["full_attention", "linear_attention", "linear_attention", "full_attention"]
    config = Qwen3NextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=len(layer_types),
        layer_types=layer_types,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        max_position_embeddings=512,
    )
    return Qwen3NextForCausalLM(config).eval()


def tiny_mamba2():
    """Mamba2: every layer recurrent (convolution + SSM state), no attention at all."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    torch.manual_seed(4)
    config = Mamba2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_heads=8,
        head_dim=8,
        expand=2,
        state_size=16,
        n_groups=1,
        chunk_size=8,
        conv_kernel=4,
    )
    return Mamba2ForCausalLM(config).eval()


def tiny_lfm2():
    """LFM2: short convolution layers (convolution state only) mixed with full attention layers."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    torch.manual_seed(5)
    layer_types = ["conv", "full_attention", "conv"]
    config = Lfm2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=len(layer_types),
        layer_types=layer_types,
        num_attention_heads=4,
        num_key_value_heads=2,
        conv_L_cache=3,
        max_position_embeddings=512,
    )
    return Lfm2ForCausalLM(config).eval()


def tiny_qwen3_sliding(window: int = 6):
    """Attention-only Qwen3 with a short sliding-window layer (prefixes longer than the window wrap it)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(6)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        use_sliding_window=True,
        sliding_window=window,
        max_window_layers=0,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
    )
    return Qwen3ForCausalLM(config).eval()


class ByteTokenizer:
    """A minimal tokenizer for scorer-level tests of tiny models: one id per UTF-8 byte (mod VOCAB), no chat template."""

    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = False):
        return {"input_ids": [byte % VOCAB for byte in text.encode()]}


def tiny_qwen35_hybrid():
    """A 4-layer Qwen3.5 text model: Gated DeltaNet (linear_attention) and full attention layers."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(2)
    config = Qwen3_5TextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    )
    return Qwen3_5ForCausalLM(config).eval()


def shared_question(
    rng: random.Random, n_candidates: int = 8, length: int = 12, shared: float = 0.5, levels: int = 1
) -> EncodedQuestion:
    """Candidates of equal length whose first `shared` fraction is common (flat) or split over two levels."""
    token = lambda: rng.randrange(VOCAB)  # noqa: E731
    prefix = tuple(token() for _ in range(rng.randint(2, 12)))
    common = round(length * shared)
    if levels == 1:
        stem = tuple(token() for _ in range(common))
        cands = [stem + tuple(token() for _ in range(length - common)) for _ in range(n_candidates)]
    else:
        top = tuple(token() for _ in range(common // 2))
        mids = [tuple(token() for _ in range(common - common // 2)) for _ in range(2)]
        cands = [top + mids[i % 2] + tuple(token() for _ in range(length - common)) for i in range(n_candidates)]
    return EncodedQuestion(prefix, tuple(cands))
