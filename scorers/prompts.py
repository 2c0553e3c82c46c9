"""Question -> token ids: the rendered context (prefix) and each candidate's continuation tokens.

Context and candidate are tokenized separately and concatenated, so the boundary is preserved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

Template = Literal["chat", "none"]
TEMPLATES = ("chat", "none")


@dataclass(frozen=True)
class EncodedQuestion:
    """`prefix_inputs`: extra model inputs of the prefix from a vision-language processor (pixel values,
    image grid, per-token type ids, ...); `image_tokens`: how many prefix tokens are visual placeholders."""

    prefix: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    prefix_inputs: dict[str, Any] | None = field(default=None, compare=False)
    image_tokens: int = 0

    @property
    def longest(self) -> int:
        return max(len(c) for c in self.continuations)


def render_context(tokenizer, context, template: Template) -> list[int]:
    """Token ids of the context: with `chat`, the user turn(s) and the assistant prefix."""
    if template == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("this model's tokenizer has no chat template; use template='none'")
        messages = [{"role": "user", "content": context}] if isinstance(context, str) else list(context)
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    if template == "none":
        if not isinstance(context, str):
            raise ValueError("template='none' needs the context as one string, not chat messages")
        return tokenizer(context, add_special_tokens=True)["input_ids"]
    raise ValueError(f"unknown template {template!r}; known: {', '.join(TEMPLATES)}")


def encode(
    tokenizer, context, texts: Sequence[str], template: Template, window: int, trace_ids: Sequence[int] = ()
) -> EncodedQuestion:
    """Encode one question (a reasoning trace's tokens join the prefix); refuses, never truncates,
    a context that does not fit the model window."""
    prefix = render_context(tokenizer, context, template) + list(trace_ids)
    if not prefix:
        raise ValueError("the context encodes to no tokens")
    return check_window(EncodedQuestion(tuple(prefix), encode_continuations(tokenizer, texts)), window)


def encode_continuations(tokenizer, texts: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Each candidate text's tokens, tokenized on its own (no special tokens)."""
    continuations = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"candidate {text!r} encodes to no tokens")
        continuations.append(tuple(ids))
    return tuple(continuations)


def check_window(encoded: EncodedQuestion, window: int) -> EncodedQuestion:
    """Refuse (never truncate) a prefix that, with the longest candidate, does not fit the model window."""
    prefix = encoded.prefix
    if len(prefix) + encoded.longest > window:
        visual = f" ({encoded.image_tokens} of them image tokens)" if encoded.image_tokens else ""
        raise ValueError(
            f"context of {len(prefix)} tokens{visual} plus the longest candidate ({encoded.longest} tokens) exceeds "
            f"the model window of {window} tokens; the context is never truncated: shorten it"
        )
    return encoded
