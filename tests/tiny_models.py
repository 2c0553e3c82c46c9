"""Tiny randomly initialised models and random candidate sets for equivalence tests."""

from __future__ import annotations

import random

import torch

from scorers.prompts import EncodedQuestion

VOCAB = 101


def tiny_llama(attn_implementation: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         attn_implementation=attn_implementation)
    return LlamaForCausalLM(config).eval()


def tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512)
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
