"""FastJEV: T and S equal the independent reference within 1e-4 (fp32) on tiny attention-only and hybrid
models; trie counts; P with k=0 equals no pruning; calibration is deterministic and never reads labels;
bad options fail with clear messages."""

from __future__ import annotations

import json
import random
import sys

import pytest

from jetgym.scorers import execution
from jetgym.scorers.fastjev.options import FastJevOptions, parse_components
from jetgym.scorers.fastjev.trie import CandidateTrie
from tiny_models import (
    VOCAB,
    frame_questions,
    random_question,
    shared_question,
    tiny_llama,
    tiny_qwen3,
    tiny_qwen35_hybrid,
)

TOLERANCE = 1e-4
ATTENTION = {"llama": tiny_llama, "qwen3": tiny_qwen3}
ALL = {**ATTENTION, "qwen35-hybrid": tiny_qwen35_hybrid}


@pytest.fixture(scope="module", params=sorted(ALL))
def any_model(request):
    return request.param, ALL[request.param]()


def max_delta(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def questions(seed: int, n: int = 5):
    rng = random.Random(seed)
    out = [random_question(rng) for _ in range(n)]
    out += [shared_question(rng, 6, 9, 0.75, levels) for levels in (1, 2)]
    return out


def test_segmented_trie_and_flat_equal_independent(any_model):
    from jetgym.scorers.fastjev.segmented import score_segmented

    _, model = any_model
    for i, question in enumerate(questions(5, 3)):
        max_batch_tokens = (5, 1024)[i % 2]  # several calls per sibling group, and one
        reference = execution.score_independent(model, question).logprobs
        for share_trie in (True, False):  # T on / off
            trie = CandidateTrie.build(len(question.prefix), question.continuations, share=share_trie)
            for share_state in (True, False):  # S on (Share/Drop) / off (Copy/Keep)
                scored = score_segmented(model, question.prefix, trie, max_batch_tokens, share=share_state)
                assert max_delta(scored.logprobs, reference) < TOLERANCE


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_packed_trie_equals_independent(name):
    from jetgym.scorers.fastjev.packed import score_tries_many

    model = ATTENTION[name]()
    qs = questions(3, 8)
    items = [(q.prefix, CandidateTrie.build(len(q.prefix), q.continuations)) for q in qs]
    for max_batch_tokens in (6, 60, 4096):  # oversized questions split by root subtrees; several share a call
        for scored, q in zip(score_tries_many(model, items, max_batch_tokens), qs):
            assert max_delta(scored.logprobs, execution.score_independent(model, q).logprobs) < TOLERANCE


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_packed_trie_shares_a_common_prefix(name):
    """Neighbours with a common prefix run it once (common prefix -> own tail -> trie), in one call, over
    several calls, with the prefix pass first (pruning), or alone when too large: scores as without sharing."""
    from jetgym.scorers.fastjev.packed import score_tries_many

    model = ATTENTION[name]()
    rng = random.Random(17)
    qs = frame_questions(rng, 20, [4, 0, 7, 2]) + [random_question(rng)] + frame_questions(rng, 12, [3, 6], 50)
    items = [(q.prefix, CandidateTrie.build(len(q.prefix), q.continuations)) for q in qs]
    for max_batch_tokens in (6, 60, 4096):
        shared = score_tries_many(model, items, max_batch_tokens, min_shared=8)
        for scored, q in zip(shared, qs):
            assert max_delta(scored.logprobs, execution.score_independent(model, q).logprobs) < TOLERANCE
    assert sum(s.work.prefix_tokens for s in shared) == sum(len(q.prefix) for q in qs) - 3 * 20 - 12
    assert [s.work.forward_calls for s in shared] == [1] * len(qs)
    pruned = score_tries_many(model, items, 4096, skip=(1,), min_shared=8)
    for a, b in zip(pruned, score_tries_many(model, items, 4096, skip=(1,))):
        assert max_delta(a.logprobs, b.logprobs) < TOLERANCE


@pytest.mark.parametrize("block", [1, 3, 32])
def test_tree_attention_equals_dense_mask(block):
    """Each query sees exactly its root path: same output as one dense masked attention over all keys."""
    import torch
    import torch.nn.functional as F

    from jetgym.scorers.fastjev.blocks import padded_pairs
    from jetgym.scorers.fastjev.tree_attention import build_layout, tree_attention_forward

    rng = random.Random(block)
    parents = [-1]
    for k in range(1, 90):  # chains, forks and a second root
        parents.append(rng.choice([k - 1, k - 1, k - 1, rng.randrange(k), -1 if k == 45 else k - 1]))
    first = 20  # keys before this are cached
    ancestor = torch.zeros(len(parents), len(parents), dtype=torch.bool)
    for k, p in enumerate(parents):
        if p >= 0:
            ancestor[k] = ancestor[p]
        ancestor[k, k] = True
    generator = torch.Generator().manual_seed(block)
    query = torch.randn(1, 4, len(parents) - first, 8, generator=generator)
    key, value = (torch.randn(1, 2, len(parents), 8, generator=generator) for _ in range(2))
    layout = build_layout(parents, first, "cpu", block=block)
    out, _ = tree_attention_forward(None, query, key, value, None, scaling=0.3, tree_layout=layout)
    dense = F.scaled_dot_product_attention(
        query, key.repeat_interleave(2, 1), value.repeat_interleave(2, 1), attn_mask=ancestor[first:], scale=0.3
    )
    assert torch.allclose(out, dense.transpose(1, 2), atol=1e-5)
    computed = sum(b.queries.numel() * b.keys.shape[1] for b in layout.buckets)
    assert computed == padded_pairs(parents, first, block) < (len(parents) - first) * len(parents)


def test_grouped_sdpa_equals_transformers_sdpa():
    """Batched rows with padding, 3 query heads per key head: same output as transformers' sdpa (repeat_kv)."""
    import types

    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from jetgym.scorers.attention import grouped_sdpa_forward

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(4, 6, 5, 8, generator=generator)
    key, value = (torch.randn(4, 2, 12, 8, generator=generator) for _ in range(2))
    mask = torch.ones(4, 1, 5, 12, dtype=torch.bool)
    mask[:, :, :, 7:] = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    mask[1, :, :, 10:] = False  # a shorter row (right padding)
    module = types.SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    for attention_mask in (mask, None):
        expected, _ = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=0.4)
        out, _ = grouped_sdpa_forward(module, query, key, value, attention_mask, scaling=0.4)
        assert out.shape == expected.shape == (4, 5, 6, 8)
        assert torch.allclose(out, expected, atol=1e-6)


def test_tree_attention_refuses_missing_layout_and_softcap():
    import torch

    from jetgym.scorers.fastjev.tree_attention import build_layout, tree_attention_forward

    x = torch.zeros(1, 1, 2, 4)
    with pytest.raises(RuntimeError, match="needs a tree_layout"):
        tree_attention_forward(None, x, x, x, None)
    with pytest.raises(NotImplementedError, match="no softcap or sliding window"):
        tree_attention_forward(None, x, x, x, None, tree_layout=build_layout([-1, 0], 0, "cpu"), softcap=30.0)


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_packed_and_segmented_prune_alike(name):
    """P acts the same in every schedule: the prefix runs all layers, candidate paths skip the mask."""
    from jetgym.scorers.fastjev.packed import score_tries_many
    from jetgym.scorers.fastjev.segmented import score_segmented

    model = ATTENTION[name]()
    for q in questions(4, 4):
        trie = CandidateTrie.build(len(q.prefix), q.continuations)
        segmented = score_segmented(model, q.prefix, trie, 64, skip=(1,)).logprobs
        for cap in (8, 4096):
            packed = score_tries_many(model, [(q.prefix, trie)], cap, skip=(1,))[0]
            assert max_delta(packed.logprobs, segmented) < TOLERANCE
            assert packed.work.cache_bytes > 0  # the prefix anchor is kept between calls
        unpruned = score_segmented(model, q.prefix, trie, 64).logprobs
        if any(len(c) > 1 for c in q.continuations):
            assert max_delta(segmented, unpruned) > 1e-6  # the mask really changes candidate paths


def test_pruned_hybrid_keeps_prefix_full():
    """On a hybrid model, skipping a layer in candidate paths only: single-token candidates keep their scores."""
    from jetgym.scorers.fastjev.segmented import score_segmented

    model = tiny_qwen35_hybrid()
    q = random_question(random.Random(9))
    q = type(q)(q.prefix, ((3,), (5, 6, 7), (3, 8), (9,)))
    trie = CandidateTrie.build(len(q.prefix), q.continuations)
    reference = execution.score_independent(model, q).logprobs
    for layer in range(4):
        pruned = score_segmented(model, q.prefix, trie, 64, skip=(layer,)).logprobs
        assert abs(pruned[0] - reference[0]) < TOLERANCE and abs(pruned[3] - reference[3]) < TOLERANCE


def brute_force_count(continuations) -> int:
    return len({tuple(c[:k]) for c in continuations for k in range(1, len(c) + 1)})


def test_trie_logical_tokens_equal_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        q = random_question(rng)
        trie = CandidateTrie.build(len(q.prefix), q.continuations)
        assert trie.logical_tokens == brute_force_count(q.continuations)
        assert trie.unmerged_tokens == sum(len(c) for c in q.continuations)
        assert [tuple(trie.token[n] for n in path) for path in trie.paths] == list(q.continuations)
        assert all(trie.position[n] == len(q.prefix) + d for path in trie.paths for d, n in enumerate(path))
        flat = CandidateTrie.build(len(q.prefix), q.continuations, share=False)
        assert flat.logical_tokens == flat.unmerged_tokens
        fed = set(trie.fed())
        assert sorted(n for s in trie.segments() for n in s.nodes) == sorted(fed)


def test_trie_keys_include_parent_and_segments_end_at_forks():
    # "a b c", "a b d", "x b c", duplicate "a b c": equal tokens after different histories stay apart
    trie = CandidateTrie.build(10, [(1, 2, 3), (1, 2, 4), (9, 2, 3), (1, 2, 3)])
    assert trie.logical_tokens == 7
    assert trie.paths[0] == trie.paths[3]
    segments = trie.segments()
    assert [s.nodes for s in segments] == [(0, 1), (4, 5)]  # fed chains "a b" and "x b"; both end at fed leaves
    assert all(not s.internal and s.parent == -1 for s in segments)
    fork = CandidateTrie.build(0, [(1, 2, 3, 4), (1, 2, 5, 6), (1, 7)])
    # nodes 0:1 1:2 2:3 3:4 4:5 5:6 6:7; node 6 is an unfed leaf, so 0 -> 1 is one chain ending at the fork 1
    assert [(s.nodes, s.parent, s.internal) for s in fork.segments()] == [
        ((0, 1), -1, True),
        ((2,), 0, False),
        ((4,), 0, False),
    ]


def test_s_reduces_peak_live_state_on_hybrid():
    from jetgym.scorers.fastjev.segmented import score_segmented

    model = tiny_qwen35_hybrid()
    q = shared_question(random.Random(1), 8, 10, 0.5, levels=2)
    trie = CandidateTrie.build(len(q.prefix), q.continuations)
    share = score_segmented(model, q.prefix, trie, 1024, share=True)
    copy = score_segmented(model, q.prefix, trie, 1024, share=False)
    assert max_delta(share.logprobs, copy.logprobs) < TOLERANCE
    assert share.peak_recurrent_bytes < copy.peak_recurrent_bytes
    assert share.work.cache_bytes < copy.work.cache_bytes


# ---------------------------------------------------------------- the scorer


def test_tree_attention_unsupported_models_never_run_packed():
    from transformers import Gemma2Config, LlamaConfig, Qwen3Config, Qwen3ForCausalLM

    from jetgym.scorers import Question, make_scorer
    from jetgym.scorers.fastjev.tree_attention import unsupported_reason

    assert unsupported_reason(LlamaConfig()) is None
    assert unsupported_reason(Qwen3Config()) is None  # sliding_window set but unused: every layer full
    assert unsupported_reason(Gemma2Config()) == "attention logit softcapping"
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=0,
    )
    assert unsupported_reason(config) == "sliding-window attention"
    model = Qwen3ForCausalLM(config).eval()
    with pytest.raises(ValueError, match="tree attention.*sliding-window attention; use 'segmented' or 'auto'"):
        make_scorer("fastjev", model=TinyLoaded(model, "attention"), template="none", schedule="packed")
    scorer = make_scorer("fastjev", model=TinyLoaded(model, "attention"), template="none")
    question = Question(context="ab", candidates=["cd", "ce", "cdf"], id="q")
    assert scorer.plan(scorer.encode(question)[1])[0] == "segmented"  # shared stem, but no packed plan here


class TinyLoaded:
    def __init__(self, model, kind):
        self.model, self.kind, self.spec, self.window, self.processor = model, kind, f"tiny-{kind}", 512, None
        self.tokenizer = CharTokenizer()


class CharTokenizer:
    """Maps characters to ids below the tiny vocabulary (enough for `encode` with template='none')."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False):
        ids = ([1] if add_special_tokens else []) + [2 + (ord(ch) % (VOCAB - 2)) for ch in text]
        return {"input_ids": ids}


def tiny_scorer(kind="attention", **options):
    from jetgym.scorers import make_scorer

    model = tiny_llama() if kind == "attention" else tiny_qwen35_hybrid()
    return make_scorer("fastjev", model=TinyLoaded(model, kind), template="none", **options)


def mmlu_like(n=6, seed=0):
    from jetgym.scorers import Question

    rng = random.Random(seed)
    words = ["alpha beta", "alpha gamma", "the quick fox", "the quick dog", "zeta", "the slow fox"]
    return [Question(f"question {i}: pick one", tuple(rng.sample(words, 4)), gold=0, id=f"q{i}") for i in range(n)]


SCORER_CASES = [("attention", c, s) for s in ("auto", "segmented", "packed") for c in (["T", "S"], [])] + [
    ("hybrid", c, s)
    for s, c in (("auto", ["T", "S"]), ("segmented", ["T"]), ("segmented", ["S"]), ("packed", ["T", "S"]))
]


@pytest.mark.parametrize("kind,components,schedule", SCORER_CASES)
def test_scorer_components_equal_jet_independent(kind, components, schedule):
    from jetgym.scorers import make_scorer

    if schedule == "packed" and kind == "hybrid":
        with pytest.raises(ValueError, match="needs an attention-only model"):
            tiny_scorer(kind, components=components, schedule=schedule)
        return
    scorer = tiny_scorer(kind, components=components, schedule=schedule)
    jet = make_scorer("jet", model=scorer.loaded, template="none", schedule="independent")
    qs = mmlu_like()
    for mine, ref in zip(scorer.decide_many(qs), jet.decide_many(qs)):
        assert max_delta(mine.logprobs, ref.logprobs) < TOLERANCE
        assert mine.choice == ref.choice


def test_k0_equals_no_pruning(tmp_path):
    scorer = tiny_scorer(components=["T", "S", "P"], pruning_k=0)
    plain = tiny_scorer(components=["T", "S"])
    assert scorer.skip == ()
    qs = mmlu_like(4, 1)
    assert [d.logprobs for d in scorer.decide_many(qs)] == [d.logprobs for d in plain.decide_many(qs)]


def test_duplicates_stay_separate_entries():
    from jetgym.scorers import Question

    scorer = tiny_scorer()
    d = scorer.decide(Question("pick", ("same", "other", "same")))
    assert d.logprobs[0] == d.logprobs[2] and len(d.probs) == 3


@pytest.mark.parametrize(
    "options,error,message",
    [
        ({"components": ["T", "X"]}, ValueError, "unknown fastjev component 'X'"),
        ({"schedule": "trie"}, ValueError, "unknown schedule 'trie'"),
        ({"pruning_k": -1}, ValueError, "pruning k must be >= 0"),
        ({"pruning_k": 2, "components": ["T", "S"]}, ValueError, "needs component P"),
        ({"max_batch_tokens": 0}, ValueError, "max_batch_tokens must be at least 1"),
    ],
)
def test_bad_options(options, error, message):
    with pytest.raises(error, match=message):
        FastJevOptions(**options)


def test_bad_budget_and_missing_calibration(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `jetgym-calibrate"):
        tiny_scorer(pruning_k=1, calibration=str(tmp_path / "missing.json"))
    record = {"layers": 2, "ranking": [1, 0], "J": [0.5, 0.1]}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"pruning k must be in \[0, 1\] for a 2-layer model, got 2"):
        tiny_scorer(pruning_k=2, calibration=str(path))
    assert tiny_scorer(pruning_k=1, calibration=str(path)).skip == (1,)
    (tmp_path / "bad.json").write_text(json.dumps({**record, "layers": 30}))
    with pytest.raises(ValueError, match="is for a 30-layer model"):
        tiny_scorer(pruning_k=1, calibration=str(tmp_path / "bad.json"))


def test_parse_components_forms():
    assert parse_components("T+S+P") == ("T", "S", "P")
    assert parse_components(["p", "t"]) == ("T", "P")
    assert parse_components("SP") == ("S", "P")


# ---------------------------------------------------------------- calibration


class NoLabels:
    """A question whose gold and labels raise when read."""

    def __init__(self, context, candidates, kind="categorical"):
        self.context, self.candidates, self.kind, self.images, self.id = context, candidates, kind, (), None

    @property
    def gold(self):
        raise AssertionError("calibration read gold")

    @property
    def labels(self):
        raise AssertionError("calibration read labels")


@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_calibration_deterministic_and_label_free(kind):
    from jetgym.scorers.fastjev.calibration import calibrate

    scorer = tiny_scorer(kind)
    qs = [NoLabels(q.context, q.candidates) for q in mmlu_like(4, 2)]
    first = calibrate(scorer, qs, "tiny", progress=False)
    second = calibrate(scorer, qs, "tiny", progress=False)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert first["layers"] == scorer.n_layers == len(first["J"])
    assert sorted(first["ranking"]) == list(range(scorer.n_layers))
    assert all(first["J"][a] <= first["J"][b] for a, b in zip(first["ranking"], first["ranking"][1:]))


def test_sensitivity_formula():
    from jetgym.scorers.fastjev.calibration import sensitivity

    assert sensitivity([1.0, 2.0, 3.0], [2.0, 3.0, 4.0]) == 0.0  # a common shift changes nothing
    assert sensitivity([1.0, 1.0], [1.0, 2.0]) == pytest.approx(0.5 / 1e-8)  # eps guards a flat z
    assert sensitivity([0.0, 2.0], [0.0, 4.0]) == pytest.approx(1.0)


def test_calibration_plot_and_file(tmp_path):
    from jetgym.scorers.fastjev.calibration import plot_sensitivity, write_calibration

    record = {"model": "tiny", "layers": 3, "J": [0.2, 0.05, 1.0], "ranking": [1, 0, 2], "questions": 2}
    assert write_calibration(record, tmp_path / "c.json").exists()
    assert plot_sensitivity(record, tmp_path / "c.png", k=1).stat().st_size > 0


def test_import_scorers_stays_torch_free():
    import subprocess

    code = "import sys, jetgym.scorers as scorers; assert 'fastjev' in scorers.available_scorers(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
