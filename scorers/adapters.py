"""Trained adapters on disk: written by `jetgym.training`, merged into the weights for inference.

An adapter folder holds either a LoRA adapter in peft's own format (`adapter_config.json`,
`adapter_model.safetensors`: loadable by plain `transformers` + `peft`) or full fine-tuned weights
(`model.safetensors`), plus `jetgym_adapter.json`: the base model spec and a fingerprint of the base weights
it was trained on, so an adapter is never applied to another model. `value_head.safetensors` (PPO) is
ignored at inference.

`apply_adapter(loaded, path)` merges the adapter into `loaded.model` (LoRA: `merge_and_unload`), so every
schedule, dtype and FastJEV run on plain weights and stay exact against `independent` on the merged model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

METADATA = "jetgym_adapter.json"
FULL_WEIGHTS = "model.safetensors"


class AdapterError(ValueError):
    """An adapter folder that cannot be applied to this model (missing, corrupt, another base model)."""


def base_fingerprint(model) -> str:
    """A short hash of the architecture and of sample base weights (embedding rows), stable across saves."""
    import torch

    config = model.config
    text = getattr(config, "text_config", None) or config
    shape = {k: getattr(text, k, None) for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                                 "num_attention_heads", "num_key_value_heads")}
    weight = model.get_input_embeddings().weight
    rows = weight[: min(64, weight.shape[0]), : min(64, weight.shape[1])].detach().to("cpu", torch.float32)
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode())
    digest.update(rows.numpy().round(4).tobytes())
    return digest.hexdigest()[:16]


def write_metadata(folder: Path, spec: str, fingerprint: str, kind: str) -> None:
    """`fingerprint`: `base_fingerprint` of the base model, taken before any training step."""
    text = json.dumps({"base_model": spec, "base_fingerprint": fingerprint, "kind": kind},
                      sort_keys=True, indent=2)
    (folder / METADATA).write_text(text + "\n")


def read_metadata(path: str | Path) -> dict:
    """The adapter folder's metadata; refuses a missing folder or metadata file, naming the path."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise AdapterError(f"adapter folder {str(path)!r} does not exist: pass the `adapter/` folder a "
                           f"jetgym-train run wrote (output_dir/adapter)")
    meta = folder / METADATA
    try:
        data = json.loads(meta.read_text())
    except FileNotFoundError:
        raise AdapterError(f"{folder} is not a jetgym adapter: {METADATA} is missing (pass the `adapter/` folder "
                           f"a jetgym-train run wrote)") from None
    except (OSError, ValueError) as error:
        raise AdapterError(f"{meta} is corrupt ({error}); train again or restore the file") from None
    if not isinstance(data, dict) or not {"base_model", "base_fingerprint", "kind"} <= data.keys():
        raise AdapterError(f"{meta} lacks base_model/base_fingerprint/kind; train again or restore the file")
    return data


def apply_adapter(loaded, path: str | Path) -> None:
    """Merge the adapter at `path` into `loaded.model` in place (refusing one trained on another base)."""
    data = read_metadata(path)
    folder = Path(path).expanduser()
    found = base_fingerprint(loaded.model)
    if data["base_fingerprint"] != found:
        raise AdapterError(f"adapter {folder} was trained on base model {data['base_model']!r} (fingerprint "
                           f"{data['base_fingerprint']}), not on {loaded.spec!r} (fingerprint {found}): load it with "
                           f"model={data['base_model']}")
    try:
        if data["kind"] == "full":
            from safetensors.torch import load_model

            load_model(loaded.model, str(folder / FULL_WEIGHTS), strict=True, device=str(loaded.device))
        else:
            from peft import PeftModel

            loaded.model = PeftModel.from_pretrained(loaded.model, str(folder)).merge_and_unload()
    except AdapterError:
        raise
    except Exception as error:  # peft/safetensors raise many types for a truncated or foreign file
        raise AdapterError(f"cannot load the adapter in {folder} ({type(error).__name__}: "
                           f"{str(error).splitlines()[0] if str(error) else 'no message'}); the files may be "
                           f"truncated: train again or restore them") from None
    loaded.model.eval()
