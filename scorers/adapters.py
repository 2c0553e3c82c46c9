"""Trained adapters on disk: written by `jetgym.training`, merged into the weights for inference.

An adapter folder holds either a LoRA adapter in peft's own format (`adapter_config.json`,
`adapter_model.safetensors`: loadable by plain `transformers` + `peft`) or full fine-tuned weights
(`model.safetensors`), plus `jetgym_adapter.json`: the base model spec and a fingerprint of the base weights
it was trained on, so an adapter is never applied to another model, and `tensors`: the SHA-256 of every tensor
file beside it (`file_digests`), checked before loading, so a damaged or edited tensor file is refused naming it.
Weights that load but are not finite are refused by name. `value_head.safetensors` (PPO) is ignored at inference.
Training checkpoints use the same `file_digests` / `check_digests` (`jetgym.training.run`).

`apply_adapter(loaded, path)` merges the adapter into `loaded.model` (LoRA: `merge_and_unload`), so every
schedule, dtype and FastJEV run on plain weights and stay exact against `independent` on the merged model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

METADATA = "jetgym_adapter.json"
FULL_WEIGHTS = "model.safetensors"


class AdapterError(ValueError):
    """An adapter folder that cannot be applied to this model (missing, corrupt, another base model)."""


def base_shape(model) -> dict:
    """The architecture numbers the fingerprint hashes (recorded beside it, so a mismatch can say what differs)."""
    config = model.config
    text = getattr(config, "text_config", None) or config
    return {
        k: getattr(text, k, None)
        for k in (
            "model_type",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
        )
    }


def base_fingerprint(model) -> str:
    """A short hash of the architecture and of sample base weights (embedding rows), stable across saves and
    across the dtype the model was loaded in: the rows are rounded to bfloat16 first, so fp32 and bf16 loads of
    one checkpoint agree."""
    import torch

    weight = model.get_input_embeddings().weight
    rows = weight[: min(64, weight.shape[0]), : min(64, weight.shape[1])].detach().to("cpu", torch.float32)
    digest = hashlib.sha256(json.dumps(base_shape(model), sort_keys=True).encode())
    digest.update(rows.to(torch.bfloat16).to(torch.float32).numpy().tobytes())
    return digest.hexdigest()[:16]


def file_digests(folder: Path, names: list[str]) -> dict[str, str]:
    """The SHA-256 of each named file in `folder` (tensor files: adapters, checkpoints), by name."""
    digests = {}
    for name in names:
        digest = hashlib.sha256()
        with open(Path(folder) / name, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        digests[name] = digest.hexdigest()
    return digests


def plain_mode(paths: list[Path]) -> None:
    """Give files the mode every other file gets (0666 less the umask): safetensors writes its files 0600."""
    umask = os.umask(0)
    os.umask(umask)
    for path in paths:
        os.chmod(path, 0o666 & ~umask)


def check_digests(folder: Path, recorded: dict[str, str], fix: str) -> None:
    """Raise AdapterError naming the first file of `recorded` that is missing or whose bytes changed."""
    for name, digest in sorted(recorded.items()):
        path = Path(folder) / name
        if not path.is_file():
            raise AdapterError(f"{path} is missing; {fix}")
        if file_digests(folder, [name])[name] != digest:
            raise AdapterError(
                f"{path} is damaged ({path.stat().st_size:,} bytes; its contents differ from what jetgym wrote); {fix}"
            )


def check_finite(named: Any, where: str, fix: str) -> None:
    """Raise AdapterError naming the first tensor of `named` ((name, tensor) pairs) holding NaN or infinity."""
    import torch

    for name, tensor in named:
        bad = ~torch.isfinite(tensor.detach())
        if bad.any():
            raise AdapterError(
                f"{where}: weight {name} holds non-finite values ({int(bad.sum()):,} of {tensor.numel():,}); {fix}"
            )


def write_metadata(folder: Path, spec: str, model, fingerprint: str, kind: str) -> None:
    """`fingerprint`: `base_fingerprint` of the base `model`, taken before any training step. Written last: it
    records the digests of the tensor files already in `folder`."""
    names = sorted(path.name for path in Path(folder).glob("*.safetensors"))
    plain_mode([Path(folder) / name for name in names])
    tensors = file_digests(folder, names)
    text = json.dumps(
        {
            "base_model": spec,
            "base_fingerprint": fingerprint,
            "base_shape": base_shape(model),
            "kind": kind,
            "tensors": tensors,
        },
        sort_keys=True,
        indent=2,
    )
    (folder / METADATA).write_text(text + "\n")


def read_metadata(path: str | Path) -> dict:
    """The adapter folder's metadata; refuses a missing folder or metadata file, naming the path."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise AdapterError(
            f"adapter folder {str(path)!r} {what}: pass the `adapter/` folder a "
            f"jetgym-train run wrote (output_dir/adapter)"
        )
    meta = folder / METADATA
    try:
        data = json.loads(meta.read_text())
    except FileNotFoundError:
        raise AdapterError(
            f"{folder} is not a jetgym adapter: {METADATA} is missing (pass the `adapter/` folder "
            f"a jetgym-train run wrote)"
        ) from None
    except (OSError, ValueError) as error:
        raise AdapterError(f"{meta} is corrupt ({error}); train again or restore the file") from None
    if not isinstance(data, dict) or not {"base_model", "base_fingerprint", "kind"} <= data.keys():
        raise AdapterError(f"{meta} lacks base_model/base_fingerprint/kind; train again or restore the file")
    return data


def _difference(data: dict, model, found: str) -> str:
    """What differs between the adapter's base model and `model`, with the fix."""
    recorded, shape = data.get("base_shape"), base_shape(model)
    if recorded is None:
        return (
            f"its metadata has no base_shape (written by an older jetgym, fingerprint {data['base_fingerprint']}); "
            f"train it again"
        )
    changed = [f"{k} {recorded.get(k)} vs {shape.get(k)}" for k in shape if recorded.get(k) != shape.get(k)]
    if changed:
        return (
            f"it was trained on {data['base_model']!r}, whose architecture differs ({', '.join(changed)}): "
            f"load it with model={data['base_model']}"
        )
    return (
        f"same architecture, but other base weights (fingerprint {data['base_fingerprint']} recorded, {found} "
        f"here): it was trained on {data['base_model']!r} as it was then; load that model, or train again on this one"
    )


def apply_adapter(loaded, path: str | Path) -> None:
    """Merge the adapter at `path` into `loaded.model` in place (refusing one trained on another base)."""
    data = read_metadata(path)
    folder = Path(path).expanduser()
    found = base_fingerprint(loaded.model)
    if data["base_fingerprint"] != found:
        raise AdapterError(f"adapter {folder} does not fit {loaded.spec!r}: {_difference(data, loaded.model, found)}")
    fix = "train again or restore the adapter folder"
    check_digests(folder, data.get("tensors") or {}, fix)  # adapters of older versions carry none
    try:
        if data["kind"] == "full":
            from safetensors.torch import load_model

            load_model(loaded.model, str(folder / FULL_WEIGHTS), strict=True, device=str(loaded.device))
        else:
            from peft import PeftModel

            with quiet_peft():
                loaded.model = PeftModel.from_pretrained(loaded.model, str(folder)).merge_and_unload()
    except AdapterError:
        raise
    except Exception as error:  # peft/safetensors raise many types for a truncated or foreign file
        raise AdapterError(
            f"cannot load the adapter in {folder} ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else 'no message'}); the files may be "
            f"truncated: train again or restore them"
        ) from None
    check_finite(loaded.model.named_parameters(), f"adapter {folder}", fix)
    loaded.model.eval()


@contextlib.contextmanager
def quiet_peft():
    """Wrap peft's model wrapping: peft reads transformers' deprecated `is_gradient_checkpointing`, whose
    FutureWarning would otherwise reach the user on every training run and adapter load (it is not theirs to fix)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield
