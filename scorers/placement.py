"""Where the model lives: device and dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda", "auto")


@dataclass(frozen=True)
class Placement:
    """`cpu` (fp32 default), `cuda` (one GPU) or `auto` (accelerate's device_map over what exists)."""

    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"

    def __post_init__(self):
        if self.device not in DEVICES:
            raise ValueError(f"unknown placement device {self.device!r}; known: {', '.join(DEVICES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")

    @classmethod
    def of(cls, value: "Placement | str | dict | None") -> "Placement":
        """Accept a Placement, a device name, or a mapping of fields."""
        if value is None:
            return cls()
        if isinstance(value, Placement):
            return value
        if isinstance(value, str):
            return cls(device=value, dtype="float32" if value == "cpu" else "bfloat16")
        return cls(**dict(value))

    def load_kwargs(self) -> dict:
        """Keyword arguments for `from_pretrained`."""
        import torch

        kwargs = {"dtype": getattr(torch, self.dtype)}
        if self.device == "auto":
            kwargs["device_map"] = "auto"
        return kwargs
