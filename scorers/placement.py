"""Where the model lives: device and dtype."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import check_choice

DTYPES = ("auto", "float32", "bfloat16", "float16")
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs with bf16 matrix instructions


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU multiplies bf16 matrices natively (AMX-BF16 or AVX512-BF16, read from the `flags` line of
    /proc/cpuinfo). Elsewhere (no /proc, other OS) False: bf16 emulated on a CPU without them runs slower than fp32."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
                cpuinfo = file.read()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


DEVICES = ("cpu", "cuda", "auto", "offload_experts")


@dataclass(frozen=True)
class Placement:
    """`cpu` (fp32 default), `cuda` (one GPU), `auto` (accelerate's device_map over what exists) or
    `offload_experts` (mixture-of-experts models: routed experts run on the CPU, everything else on
    the GPU; all weights stay resident, nothing is streamed from disk).

    dtype `auto`: on the CPU, bfloat16 where the CPU has native bf16 matrix instructions
    (`cpu_has_native_bf16`), float32 elsewhere; on a GPU bfloat16 (float16 where the GPU lacks bf16).
    float32 is the reference every equivalence test uses."""

    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        check_choice("placement.device", self.device, DEVICES)
        check_choice("placement.dtype", self.dtype, DTYPES)

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

    def resolved_dtype(self) -> str:
        """The dtype the weights load in: `dtype`, with `auto` decided for this machine."""
        if self.dtype != "auto":
            return self.dtype
        if self.device == "cpu":
            return "bfloat16" if cpu_has_native_bf16() else "float32"
        import torch

        return "float16" if torch.cuda.is_available() and not torch.cuda.is_bf16_supported() else "bfloat16"

    def load_kwargs(self) -> dict:
        """Keyword arguments for `from_pretrained`."""
        import torch

        kwargs = {"dtype": getattr(torch, self.resolved_dtype())}
        if self.device == "auto":
            kwargs["device_map"] = "auto"
        return kwargs


def routed_expert_modules(model) -> list[tuple[str, object]]:
    """The routed-expert containers of a mixture-of-experts model (`...experts`, not shared experts)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if name.rsplit(".", 1)[-1] == "experts" and "shared" not in name
    ]


def offload_experts(model, device: str = "cuda") -> int:
    """Put the model on `device` except its routed experts, which stay and run on the CPU.

    Hooks move each expert call's tensor inputs to the CPU and its outputs back to `device`.
    Returns the bytes of expert weights kept on the CPU; a model without routed experts is refused."""
    import torch

    experts = routed_expert_modules(model)
    if not experts:
        raise ValueError("placement 'offload_experts' needs a mixture-of-experts model; this one has no routed experts")
    model.to(device)
    cpu = torch.device("cpu")
    to = lambda value, target: value.to(target) if isinstance(value, torch.Tensor) else value  # noqa: E731

    def inputs_to_cpu(module, args, kwargs):
        return tuple(to(a, cpu) for a in args), {k: to(v, cpu) for k, v in kwargs.items()}

    def outputs_back(module, args, kwargs, output):
        if isinstance(output, tuple):
            return tuple(to(o, device) for o in output)
        return to(output, device)

    kept = 0
    for _, module in experts:
        module.to(cpu)
        module.register_forward_pre_hook(inputs_to_cpu, with_kwargs=True)
        module.register_forward_hook(outputs_back, with_kwargs=True)
        kept += sum(p.numel() * p.element_size() for p in module.parameters())
    return kept
