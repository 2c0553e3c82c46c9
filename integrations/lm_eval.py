"""An lm-evaluation-harness model backed by jetgym's `jet` scorer: `--model jetgym` (needs the `lm-eval` extra).

Importing this module registers the model under the name `jetgym` (lm-eval finds models only through
`lm_eval.api.registry`; the `jetgym-lm-eval` console script imports it before handing over to lm-eval's CLI).

- `loglikelihood`: lm-eval's own tokenization (`TemplateLM`: the context and context+continuation encoded whole and
  split, trailing spaces of the context moved to the continuation, an empty context replaced by the prefix token),
  the same left truncation as lm-eval's HF backend, then the requests that share a context become one question
  whose candidates are their continuations, scored by `jet`'s packed schedule (continuations packed under their
  context, neighbouring contexts with a common beginning in one row, the last call's prefix kept for the next).
  Returns (sum of log p over the continuation's tokens, whether every token is the argmax).
- `loglikelihood_rolling`: lm-eval's rolling windows (`utils.get_rolling_token_windows`, context length 1), each
  window scored as above, summed per document.
- `generate_until`: the model's `generate`, one request at a time, with lm-eval's stop sequences.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from lm_eval import utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import (
    _add_special_kwargs,
    handle_stop_sequences,
    has_bos_prefix,
    normalize_gen_kwargs,
    postprocess_generated_text,
    resolve_max_length,
)
from lm_eval.models.utils_hf import stop_sequences_criteria
from tqdm import tqdm

from jetgym.scorers import make_scorer
from jetgym.scorers.prompts import EncodedQuestion

DEFAULT_MAX_LENGTH = 2048  # lm-eval's HF backend default when neither the config nor the tokenizer names one
QUESTIONS_PER_CALL = (
    64  # contexts handed to the packed schedule at once (it fills its own calls up to max_batch_tokens)
)
DEVICES = {"cpu": "cpu", "cuda": "cuda", "auto": "auto", "offload_experts": "offload_experts"}
IGNORED_LM_EVAL_ARGS = ("batch_size", "max_batch_size")  # jetgym fills calls by tokens (max_batch_tokens)


def request_groups(requests: list[tuple[Any, list[int], list[int]]], max_length: int) -> tuple[list, list]:
    """lm-eval token requests -> (encoded questions, for each request its (question, candidate) slot).

    Each request is truncated from the left as lm-eval's HF backend does: of context + continuation, the last
    max_length + 1 tokens are kept and the last one is not fed; what precedes the continuation is the context.
    Requests with the same (truncated) context share a question; identical continuations share a candidate."""
    by_prefix: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}
    slots = []
    for index, (_, context, continuation) in enumerate(requests):
        if not continuation:
            raise ValueError(
                f"request {index}: the continuation encodes to no tokens (lm-eval's HF backend refuses "
                f"it too); check the task's doc_to_choice/target_delimiter"
            )
        if len(continuation) > max_length:
            raise ValueError(
                f"request {index}: a continuation of {len(continuation)} tokens exceeds max_length "
                f"{max_length}; raise max_length in model_args or shorten the continuation"
            )
        if not context:
            raise ValueError(f"request {index}: empty context tokens (lm-eval passes the prefix token instead)")
        whole = (list(context) + list(continuation))[-(max_length + 1) :]
        prefix, cont = tuple(whole[: len(whole) - len(continuation)]), tuple(continuation)
        candidates = by_prefix.setdefault(prefix, {})
        slots.append((prefix, candidates.setdefault(cont, len(candidates))))
    order = sorted(by_prefix)  # contexts beginning alike end up next to each other and share packed rows
    number = {prefix: q for q, prefix in enumerate(order)}
    questions = [EncodedQuestion(prefix, tuple(by_prefix[prefix])) for prefix in order]
    return questions, [(number[prefix], c) for prefix, c in slots]


@register_model("jetgym")
class JetgymLM(TemplateLM):
    """lm-eval model args: model (a jetgym model spec: the embedded `smollm2-135m-instruct`, a local Hugging Face
    folder or a hub id), dtype (float32, bfloat16, float16, auto), placement (cpu, cuda, auto, offload_experts;
    default: lm-eval's `device` when it names a usable cpu/cuda/cuda:N, else cpu),
    max_batch_tokens (tokens per packed call), min_shared_prefix (common leading tokens for contexts to share a
    row; 0: off), adapter (a jetgym-train adapter folder, merged into the weights), max_length (the window lm-eval
    truncates to; default as lm-eval's HF backend), add_bos_token, prefix_token_id, max_gen_toks.
    lm-eval's `batch_size`/`max_batch_size` are accepted and unused (calls are filled by tokens)."""

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        dtype: str = "float32",
        placement: str | None = None,
        max_batch_tokens: int = 1024,
        min_shared_prefix: int = 32,
        adapter: str | None = None,
        max_length: int | None = None,
        add_bos_token: bool | None = None,
        prefix_token_id: int | None = None,
        max_gen_toks: int = 256,
        device: str | None = None,
        scorer: str = "jet",
        **lm_eval_args,
    ):
        super().__init__()
        unknown = sorted(set(lm_eval_args) - set(IGNORED_LM_EVAL_ARGS))
        if unknown:
            hint = " (jetgym names the model spec model=..., not pretrained=...)" if "pretrained" in unknown else ""
            raise ValueError(
                f"jetgym model takes no argument {', '.join(map(repr, unknown))}{hint}; its arguments: "
                f"model, dtype, placement, max_batch_tokens, min_shared_prefix, adapter, max_length, "
                f"add_bos_token, prefix_token_id, max_gen_toks, scorer"
            )
        from jetgym.scorers import available_scorers

        if scorer not in available_scorers("lm-eval"):
            raise ValueError(
                f"jetgym model: scorer={scorer!r} cannot serve lm-eval; backends that can: "
                f"{', '.join(available_scorers('lm-eval'))}"
            )
        if max_length is not None and int(max_length) < 1:
            raise ValueError(
                f"max_length={max_length} in model_args: the window must be >= 1 token; leave max_length out "
                f"to use the model's own window"
            )
        placement = self._device_placement(placement, device)
        self._rank, self._world_size = self._join_ranks(placement)
        options: dict[str, Any] = {
            "placement": {"device": placement, "dtype": dtype},
            "template": "none",
            "schedule": "packed",
            "max_batch_tokens": int(max_batch_tokens),
            "min_shared_prefix": int(min_shared_prefix),
        }
        if adapter is not None:
            options["adapter"] = adapter  # a jetgym-train adapter folder, merged into the weights
        self.scorer = make_scorer(scorer, model=model, **options)
        self.loaded = self.scorer.loaded
        if self.loaded.kind != "attention":
            raise ValueError(
                f"model {model!r} is a {self.loaded.kind} model; jetgym's lm-eval model runs the packed "
                f"schedule, which needs an attention-only model"
            )
        self.tokenizer = self.loaded.tokenizer
        self.model = self.loaded.model
        self.add_bos_token = add_bos_token
        self.custom_prefix_token_id = None if prefix_token_id is None else int(prefix_token_id)
        self._max_length = None if max_length is None else int(max_length)
        self._max_gen_toks = int(max_gen_toks)
        self._device = self.loaded.device

    # ------------------------------------------------------------ set-up

    @staticmethod
    def _device_placement(placement: str | None, device: str | None) -> str:
        """The placement device: `placement` when given; else lm-eval's `device` (cpu, cuda, cuda:N; the CLI passes
        cuda by default, so cuda without a GPU falls back to cpu as lm-eval's HF backend does); else cpu."""
        if placement is not None:
            if placement not in DEVICES:
                raise ValueError(f"placement {placement!r} is unknown; known: {', '.join(DEVICES)}")
            return placement
        if device is None:
            return "cpu"
        name, _, index = str(device).partition(":")
        if name not in ("cpu", "cuda"):
            raise ValueError(
                f"device {device!r} is not supported by the jetgym model: use cpu, cuda or cuda:N "
                f"(or placement=auto|offload_experts in model_args)"
            )
        if name == "cuda" and not torch.cuda.is_available():
            return "cpu"
        if index:
            torch.cuda.set_device(int(index))
        return name

    @staticmethod
    def _join_ranks(placement: str) -> tuple[int, int]:
        """(rank, world size) under `torchrun` (WORLD_SIZE > 1): joins torch.distributed (gloo on the CPU, nccl on
        GPUs, each rank on its LOCAL_RANK GPU); (0, 1) otherwise."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return 0, 1
        import torch.distributed as dist

        if placement == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if not dist.is_initialized():
            dist.init_process_group("nccl" if placement == "cuda" else "gloo")
        return dist.get_rank(), dist.get_world_size()

    # ------------------------------------------------------------ what lm-eval reads

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        if self.custom_prefix_token_id is not None:
            return self.custom_prefix_token_id
        if self.tokenizer.bos_token_id is not None:
            return self.tokenizer.bos_token_id
        return self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        if self._max_length:
            return self._max_length
        return resolve_max_length(self.model.config, self.tokenizer, default=DEFAULT_MAX_LENGTH)

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def device(self):
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(
        self, string: str, add_special_tokens: bool | None = None, left_truncate_len: int | None = None, **kwargs
    ) -> list[int]:
        """As lm-eval's HF backend: the tokenizer's special tokens unless the string starts with the prefix token."""
        special = _add_special_kwargs(add_special_tokens, self.add_bos_token)
        if add_special_tokens is None and has_bos_prefix(string, self.tokenizer.decode(self.prefix_token_id)):
            special["add_special_tokens"] = False
        encoding = self.tokenizer.encode(string, **special)
        return encoding[-left_truncate_len:] if left_truncate_len else encoding

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """`--apply_chat_template`: the tokenizer's chat template, as lm-eval's HF backend renders it."""
        import jinja2

        def render(history):
            return self.tokenizer.apply_chat_template(
                history,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
            )

        try:
            return render(chat_history)
        except jinja2.exceptions.TemplateError:  # templates without a system role: drop it, as the HF backend does
            return render([message for message in chat_history if message["role"] != "system"])

    # ------------------------------------------------------------ data parallel (torchrun)

    def all_gather(self, tensor):
        if self._world_size == 1:
            return tensor
        import torch.distributed as dist

        parts = [torch.zeros_like(tensor) for _ in range(self._world_size)]
        dist.all_gather(parts, tensor)
        return torch.stack(parts) if tensor.ndim == 0 else torch.cat(parts)

    def gather_object(self, obj, dst=0):
        if self._world_size == 1:
            return [obj]
        import torch.distributed as dist

        gathered = [None] * self._world_size if self._rank == dst else None
        dist.gather_object(obj, gathered, dst=dst)
        return gathered

    def barrier(self) -> None:
        if self._world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    # ------------------------------------------------------------ requests

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        from jetgym.scorers import execution

        questions, slots = request_groups(requests, self.max_length)
        if self.scorer.kept_prefix is None and self.scorer.options.reuse_prefix:
            from jetgym.scorers.kernels.kept_prefix import KeptPrefix

            self.scorer.kept_prefix = KeptPrefix()
        scored = []
        bar = tqdm(total=len(questions), disable=disable_tqdm or self._rank != 0, desc="jetgym loglikelihood")
        for start in range(0, len(questions), QUESTIONS_PER_CALL):
            part = questions[start : start + QUESTIONS_PER_CALL]
            scored += execution.score_packed_many(
                self.model,
                part,
                self.scorer.options.max_batch_tokens,
                self.scorer.options.min_shared_prefix,
                self.scorer.kept_prefix,
                greedy=True,
            )
            bar.update(len(part))
        bar.close()
        answers = []
        for (strings, _, _), (q, c) in zip(requests, slots):
            answer = (float(scored[q].logprobs[c]), bool(scored[q].greedy[c]))
            answers.append(answer)
            if strings is not None:
                self.cache_hook.add_partial("loglikelihood", strings, answer)
        return answers

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owners = [], []
        for index, (string,) in enumerate(req.args for req in requests):
            for window in map(
                utils.make_disjoint_window,
                utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, *window))
                owners.append(index)
        totals = [0.0] * len(requests)
        for owner, (logprob, _) in zip(owners, self._loglikelihood_tokens(windows, disable_tqdm)):
            totals[owner] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        eos = self.tokenizer.decode(self.eot_token_id, skip_special_tokens=False)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eot_token_id
        results = []
        for context, gen_kwargs in tqdm(
            [req.args for req in requests], disable=disable_tqdm or self._rank != 0, desc="jetgym generate_until"
        ):
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = kwargs.pop("max_gen_toks")
            room = self.max_length - max_gen_toks
            if room <= 0:
                raise ValueError(
                    f"max_gen_toks {max_gen_toks} leaves no room for a context in max_length "
                    f"{self.max_length}; lower max_gen_toks or raise max_length"
                )
            ids = self._generation_ids(context)[-room:]
            kwargs["temperature"] = kwargs.get("temperature", 0.0)  # greedy unless asked, as lm-eval's HF backend
            if kwargs["temperature"] == 0.0 and kwargs.get("do_sample") is None:
                kwargs["do_sample"] = False
            if kwargs.get("do_sample") is False and kwargs["temperature"] == 0.0:
                kwargs.pop("temperature")
            inputs = torch.tensor([ids], device=self.device)
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=inputs,
                    attention_mask=torch.ones_like(inputs),
                    max_length=kwargs.pop("max_length", len(ids) + max_gen_toks),
                    stopping_criteria=stop_sequences_criteria(self.tokenizer, until, len(ids), 1),
                    pad_token_id=pad,
                    use_cache=True,
                    **kwargs,
                )
            text = postprocess_generated_text(
                self.tokenizer.decode(out[0, len(ids) :].tolist(), skip_special_tokens=True), until, None
            )
            results.append(text)
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
        return results

    def _generation_ids(self, context: str) -> list[int]:
        """A generation context's tokens as lm-eval's HF backend encodes them (its batch encoder's rule)."""
        special = {}
        if has_bos_prefix(context, getattr(self.tokenizer, "bos_token", None)):
            special = {"add_special_tokens": False}
        elif self.add_bos_token is not None:
            special = {"add_special_tokens": self.add_bos_token}
        return self.tokenizer(context, **special)["input_ids"]
