"""Image input: a question's images and context -> the prefix a vision-language model reads.

The model's processor renders the context with its chat template, the images entering the last user
message ahead of its text, and expands each image into its visual placeholder tokens. Those tokens are
part of the shared prefix (they count against the window and appear in `usage.image_tokens`); the
processor's other outputs (pixel values, image grid, per-token type ids, ...) ride along as
`EncodedQuestion.prefix_inputs` and go into every call that runs the prefix. Candidate tokens follow
the assistant prefix exactly as for text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .prompts import EncodedQuestion, Template, check_window, encode_continuations

# processor outputs that are not extra model inputs: the token ids themselves and their all-ones mask
NOT_PREFIX_INPUTS = ("input_ids", "attention_mask")


def load_image(image: Any, index: int = 0):
    """A question image as an RGB PIL image: an HxWx3 uint8 array, a PIL image, or a file path."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, (str, Path)):
        try:
            with Image.open(Path(image).expanduser()) as opened:
                return opened.convert("RGB")
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read image {index} from {str(image)!r}: {error}") from error
    shape, dtype = getattr(image, "shape", None), getattr(image, "dtype", None)
    if shape is None:
        raise ValueError(f"image {index} is a {type(image).__name__}; give an HxWx3 uint8 array, a PIL image or a path")
    if len(shape) != 3 or shape[-1] != 3 or str(dtype) != "uint8":
        raise ValueError(f"image {index} must be an HxWx3 uint8 array, got shape {tuple(shape)} and dtype {dtype}")
    import numpy as np

    return Image.fromarray(np.ascontiguousarray(image))


def messages_with_images(context, n_images: int) -> list[dict]:
    """Chat messages in the processor's content-list form, with `n_images` image slots opening the last user turn."""
    messages = [{"role": "user", "content": context}] if isinstance(context, str) else [dict(m) for m in context]
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if n_images and not users:
        raise ValueError("images need a user message to enter; the context has none")
    for i, message in enumerate(messages):
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if users and i == users[-1]:
            content = [{"type": "image"} for _ in range(n_images)] + list(content)
        message["content"] = content
    return messages


def image_token_count(processor, prefix: Sequence[int]) -> int:
    """How many prefix tokens are the processor's image placeholder token."""
    token_id = getattr(processor, "image_token_id", None)
    if token_id is None and getattr(processor, "image_token", None) is not None:
        token_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    return 0 if token_id is None else sum(1 for t in prefix if t == token_id)


def encode_vision(
    processor, context, images: Sequence[Any], texts: Sequence[str], template: Template, window: int
) -> EncodedQuestion:
    """Encode one question for a vision-language model; refuses, never truncates, a prefix (visual tokens
    included) that does not fit the model window."""
    if processor is None:
        raise ValueError("this vision-language model was loaded without a processor; load it with load_model()")
    if template != "chat":
        raise ValueError(
            f"template={template!r} is not supported with image input: images enter through the model's chat "
            f"template; use template='chat'"
        )
    if not getattr(processor, "chat_template", None):
        raise ValueError("this model's processor has no chat template, which image input needs")
    pictures = [load_image(image, i) for i, image in enumerate(images)]
    text = processor.apply_chat_template(
        messages_with_images(context, len(pictures)), add_generation_prompt=True, tokenize=False
    )
    inputs = processor(text=[text], images=pictures or None, return_tensors="pt")
    prefix = tuple(inputs["input_ids"][0].tolist())
    if not prefix:
        raise ValueError("the context encodes to no tokens")
    extra = {name: value for name, value in inputs.items() if name not in NOT_PREFIX_INPUTS}
    encoded = EncodedQuestion(
        prefix, encode_continuations(processor.tokenizer, texts), extra, image_token_count(processor, prefix)
    )
    return check_window(encoded, window)
