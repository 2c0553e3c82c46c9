"""P at inference: candidate paths skip a fixed set of decoder layers (identity blocks).

The mask is the k lowest-J layers of a calibration file (ties by layer index); the prefix always runs
every layer, because skipping is switched on only around candidate calls.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

SHIPPED_CALIBRATIONS = Path(__file__).resolve().parent / "calibrations"  # package data


def user_calibrations() -> Path:
    """Where `jetgym-calibrate` stores a user's calibration files: $XDG_CACHE_HOME/jetgym/calibrations."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jetgym" / "calibrations"


def decoder_layers(model):
    """The decoder block list of a causal LM (model.model.layers, or the decoder's layers)."""
    inner = getattr(model, "model", None)
    for candidate in (getattr(inner, "layers", None), getattr(getattr(inner, "language_model", None), "layers", None)):
        if candidate is not None:
            return candidate
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is not None and hasattr(decoder, "layers"):
        return decoder.layers
    raise TypeError(f"cannot find the decoder layers of {type(model).__name__}")


def _identity(hidden_states, *args, **kwargs):
    return hidden_states


@contextlib.contextmanager
def skipping(model, layers):
    """Within the block, the given decoder layers are identity maps (attention/recurrence and MLP skipped)."""
    blocks = decoder_layers(model)
    layers = sorted(set(layers))
    try:
        for index in layers:
            blocks[index].forward = _identity
        yield
    finally:
        for index in layers:
            blocks[index].__dict__.pop("forward", None)


def slug(spec: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in spec.strip("/"))


def calibration_path(spec: str) -> Path:
    """Default calibration file of a model spec: the user's own (see `user_calibrations`) when there is one,
    else the file shipped with jetgym (which may not exist for this model)."""
    mine = user_calibrations() / f"{slug(spec)}.json"
    return mine if mine.exists() else SHIPPED_CALIBRATIONS / f"{slug(spec)}.json"


def select_layers(ranking, k: int) -> tuple[int, ...]:
    """The k layers ranked least sensitive (the ranking is already sorted by (J, index))."""
    return tuple(sorted(ranking[:k]))


def require_calibration(spec: str, k: int, path: str | Path | None = None) -> Path:
    """The calibration file pruning needs; a clear error when it is missing."""
    file = Path(path) if path else calibration_path(spec)
    if not file.exists():
        raise FileNotFoundError(
            f"pruning k={k} needs the calibration file {file}, which does not exist: "
            f"run `jetgym-calibrate model.spec={spec}` first (or pass calibration=/path/to/file.json)"
        )
    return file


def load_mask(spec: str, k: int, n_layers: int, path: str | Path | None = None) -> tuple[int, ...]:
    """The pruning mask for budget k from the model's calibration file; clear errors when it cannot exist."""
    if k < 0 or k >= n_layers:
        raise ValueError(f"pruning k must be in [0, {n_layers - 1}] for a {n_layers}-layer model, got {k}")
    if k == 0:
        return ()
    file = require_calibration(spec, k, path)
    data = json.loads(file.read_text())
    if data.get("layers") != n_layers or len(data.get("ranking", ())) != n_layers:
        raise ValueError(f"calibration file {file} is for a {data.get('layers')}-layer model, this one has {n_layers}")
    return select_layers(data["ranking"], k)
