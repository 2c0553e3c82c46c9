"""Image input on tiny random vision-language models (Qwen2-VL, Qwen3-VL, hybrid Qwen3.5) with a processor
built here (offline): the prefix-reuse schedule equals `independent`, visual tokens count and reach the
model, and bad image input fails clearly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jetgym.scorers import Question, make_scorer
from jetgym.scorers.models import LoadedModel, architecture_kind
from tiny_models import ByteTokenizer, tiny_llama

TOLERANCE = 1e-4
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# Qwen2-VL's chat template reduced to what the scorer sends: string or content-list messages with image slots
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


pytestmark = pytest.mark.usefixtures("one_thread")


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges (one token per byte) plus Qwen-VL's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS})
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def qwen2_vl_processor(tokenizer, patch_size: int = 14):
    """Qwen2-VL's processor without its video processor (that one needs torchvision, absent here).
    Qwen3-VL and Qwen3.5 read images the same way with 16-pixel patches."""
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, chat_template=chat_template, **kwargs)

    # patches merged 2x2, sides rounded to whole merged patches: 56x56 -> 4 visual tokens, 84x84 -> 9, 56x84 -> 6
    images = Qwen2VLImageProcessorPil(
        size={"shortest_edge": 28 * 28, "longest_edge": 96 * 96},
        patch_size=patch_size,
        merge_size=2,
        temporal_patch_size=2,
    )
    return ImageOnlyQwen2VLProcessor(image_processor=images, tokenizer=tokenizer, chat_template=TEMPLATE)


def tiny_qwen2_vl(tokenizer):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(7)
    ids = tokenizer.convert_tokens_to_ids
    # large initial weights and a short rope period make scores sensitive to positions: 3D rope positions
    # that went wrong after the cached prefix (a stale offset from another question) fail the equivalence
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 100.0},
            initializer_range=0.2,
            bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(
            depth=1,
            embed_dim=32,
            hidden_size=32,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            in_channels=3,
            initializer_range=0.2,
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        initializer_range=0.2,
    )
    return Qwen2VLForConditionalGeneration(config).eval()


def _qwen3_configs(tokenizer) -> tuple[dict, dict, dict]:
    """Text, vision and token settings shared by the tiny Qwen3-VL and Qwen3.5 models (see tiny_qwen2_vl)."""
    ids = tokenizer.convert_tokens_to_ids
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        rope_parameters={
            "rope_type": "default",
            "mrope_section": [1, 1, 2],
            "rope_theta": 100.0,
            "mrope_interleaved": True,
        },
    )
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=32,
        num_position_embeddings=16,
        initializer_range=0.2,
    )
    tokens = dict(
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    return text, vision, tokens


def tiny_qwen3_vl(tokenizer):
    """Qwen3-VL: interleaved 3D rope, deepstack visual features injected into a text layer."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(8)
    text, vision, tokens = _qwen3_configs(tokenizer)
    config = Qwen3VLConfig(
        text_config=dict(text, num_hidden_layers=2), vision_config=dict(vision, deepstack_visual_indexes=[0]), **tokens
    )
    return Qwen3VLForConditionalGeneration(config).eval()


def tiny_qwen3_5_vl(tokenizer):
    """Qwen3.5 with its vision tower: hybrid Gated DeltaNet + full attention text layers."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(9)
    text, vision, tokens = _qwen3_configs(tokenizer)
    layer_types = ["linear_attention", "full_attention", "linear_attention"]
    config = Qwen3_5Config(
        text_config=dict(
            text,
            num_hidden_layers=3,
            layer_types=layer_types,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            partial_rotary_factor=1.0,
        ),
        vision_config=vision,
        **tokens,
    )
    return Qwen3_5ForConditionalGeneration(config).eval()


FAMILIES = {"qwen2_vl": (tiny_qwen2_vl, 14), "qwen3_vl": (tiny_qwen3_vl, 16), "qwen3_5": (tiny_qwen3_5_vl, 16)}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def loaded(request):
    build, patch_size = FAMILIES[request.param]
    tokenizer = byte_tokenizer()
    model = build(tokenizer)
    return LoadedModel(
        f"tiny-{request.param}",
        model,
        tokenizer,
        qwen2_vl_processor(tokenizer, patch_size),
        architecture_kind(model.config),
        512,
    )


def picture(seed: int, size=(56, 56)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


CANDIDATES = ("move left", "fire", "a", "move left", "turn right now", "b")


def questions() -> list[Question]:
    """Image questions whose 3D rope positions differ from 1D ones (2+ visual rows), then text-only ones:
    a stale position offset from an image question would shift the text question after it."""
    return [
        Question("What should the player do?", CANDIDATES, images=(picture(0, (84, 84)),)),
        Question("Same scene, two views.", ("left", "right", "x"), images=(picture(1), picture(2, (56, 84)))),
        Question("No picture this time: pick one.", ("yes", "no", "maybe so")),
        Question(
            (dict(role="system", content="You play Doom."), dict(role="user", content="Act.")),
            CANDIDATES[:3],
            images=(picture(3),),
        ),
        Question("Binary?", kind="binary", images=(picture(4),)),
    ]


def test_architecture_kind_is_vision(loaded):
    assert loaded.kind == "vision"
    assert make_scorer("jet", model=loaded).schedule == "sequential"


def test_prefix_reuse_equals_independent(loaded):
    reference = make_scorer("jet", model=loaded, schedule="independent").decide_many(questions())
    fast = make_scorer("jet", model=loaded).decide_many(questions())
    for ref, got in zip(reference, fast):
        assert max(abs(a - b) for a, b in zip(ref.logprobs, got.logprobs)) < TOLERANCE
        assert got.usage.image_tokens == ref.usage.image_tokens
        assert got.usage.prefix_tokens * len(set(got.candidates)) == ref.usage.prefix_tokens  # images ran once
    assert fast[0].logprobs[0] == fast[0].logprobs[3]  # identical texts score identically


def test_visual_tokens_in_usage_and_window(loaded):
    scorer = make_scorer("jet", model=loaded)
    small, large, two, text = scorer.decide_many(
        [
            Question("Look.", ("ok",), images=(picture(0),)),
            Question("Look.", ("ok",), images=(picture(0, (84, 84)),)),
            Question("Look.", ("ok",), images=(picture(0), picture(1, (84, 84)))),
            Question("Look.", ("ok",)),
        ]
    )
    assert (small.usage.image_tokens, large.usage.image_tokens, two.usage.image_tokens, text.usage.image_tokens) == (
        4,
        9,
        13,
        0,
    )
    assert large.usage.prefix_tokens - small.usage.prefix_tokens == 5  # the visual tokens are prefix tokens
    assert small.usage.prefix_tokens - text.usage.prefix_tokens == 4 + 2  # + vision start/end markers
    # a window that holds the text question but not its image
    window = text.usage.prefix_tokens + 3
    narrow = make_scorer(
        "jet", model=LoadedModel("narrow", loaded.model, loaded.tokenizer, loaded.processor, "vision", window)
    )
    narrow.decide(Question("Look.", ("ok",)))
    with pytest.raises(ValueError, match=r"\(9 of them image tokens\).*exceeds the model window"):
        narrow.decide(Question("Look.", ("ok",), images=(picture(0, (84, 84)),)))


def test_the_image_reaches_the_model(loaded):
    scorer = make_scorer("jet", model=loaded)
    a, b = (scorer.decide(Question("What is shown?", ("a cat", "a dog"), images=(picture(seed),))) for seed in (10, 11))
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) > 1e-3


def test_array_pil_and_path_give_the_same_scores(loaded, tmp_path):
    from PIL import Image

    pixels = picture(5)
    path = tmp_path / "frame.png"
    Image.fromarray(pixels).save(path)
    scorer = make_scorer("jet", model=loaded)
    scores = [
        scorer.decide(Question("What now?", ("go", "stop"), images=(image,))).logprobs
        for image in (pixels, Image.fromarray(pixels), str(path), path)
    ]
    assert all(s == scores[0] for s in scores)


def test_refusals(loaded, tmp_path):
    image = (picture(0),)
    text_only = LoadedModel("tiny-llama", tiny_llama(), ByteTokenizer(), None, "attention", 512)
    with pytest.raises(ValueError, match="cannot score images: it is a text-only"):
        make_scorer("jet", model=text_only, template="none").decide(Question("x", ("a", "b"), images=image))
    with pytest.raises(ValueError, match="reasoning is not supported with image input"):
        make_scorer("jet", model=loaded, reasoning=True).decide(Question("x", ("a", "b"), images=image))
    with pytest.raises(ValueError, match="template='none' is not supported with image input"):
        make_scorer("jet", model=loaded, template="none").decide(Question("x", ("a", "b"), images=image))
    with pytest.raises(ValueError, match="cannot read image 0 from .*missing.png"):
        make_scorer("jet", model=loaded).decide(Question("x", ("a", "b"), images=(str(tmp_path / "missing.png"),)))
    (tmp_path / "junk.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match="cannot read image 1 from .*junk.png"):
        make_scorer("jet", model=loaded).decide(Question("x", ("a", "b"), images=(picture(0), tmp_path / "junk.png")))
    with pytest.raises(ValueError, match=r"HxWx3 uint8 array, got shape \(8, 8\)"):
        make_scorer("jet", model=loaded).decide(Question("x", ("a", "b"), images=(np.zeros((8, 8), np.uint8),)))
    for schedule in ("packed", "batched"):
        with pytest.raises(ValueError, match=f"schedule '{schedule}' needs an attention-only model.*is vision"):
            make_scorer("jet", model=loaded, schedule=schedule).decide(Question("x", ("a", "b"), images=image))
