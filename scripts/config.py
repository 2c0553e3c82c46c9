"""Hydra structured configs for the jobs. Stored in the ConfigStore on import, so a misspelt key in a
group yaml or on the command line fails at composition. Value checks run in `__post_init__`, i.e.
when a composed config becomes objects: `to_config(cfg)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from envs.question_sets import SUBSETS
from scorers.placement import DEVICES, DTYPES

TEMPLATES = ("chat", "none")


def _check_choice(what: str, value: str, known: tuple[str, ...]) -> None:
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")


def _check_positive(what: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")


@dataclass
class ModelConfig:
    """spec: an embedded model name, a local Hugging Face folder, or a hub id."""

    spec: str = "smollm2-135m-instruct"

    def __post_init__(self):
        if not self.spec:
            raise ValueError("model.spec is empty")


@dataclass
class PlacementConfig:
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        _check_choice("placement.device", self.device, DEVICES)
        _check_choice("placement.dtype", self.dtype, DTYPES)


@dataclass
class ScorerConfig:
    """name: a registered scorer; template: `chat` (model's chat template) or `none` (plain concatenation)."""

    name: str = "jet"
    schedule: str = "auto"
    template: str = "chat"
    max_batch_tokens: int = 1024

    def __post_init__(self):
        _check_choice("scorer.template", self.template, TEMPLATES)
        _check_positive("scorer.max_batch_tokens", self.max_batch_tokens)


@dataclass
class DatasetConfig:
    """name: a question set (mmlu, jsonl); path: the file (jsonl; optional for mmlu)."""

    name: str = "mmlu"
    subset: str = "all"
    limit: Optional[int] = None
    path: Optional[str] = None

    def __post_init__(self):
        _check_choice("dataset.subset", self.subset, SUBSETS)
        _check_positive("dataset.limit", self.limit)


@dataclass
class QAConfig:
    """The `jetgym-qa` job. output_dir: results folder (null: Hydra's run dir).
    chunk_size: questions scored and flushed to responses.jsonl at a time."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    output_dir: Optional[str] = None
    chunk_size: int = 16

    def __post_init__(self):
        _check_positive("chunk_size", self.chunk_size)


@dataclass
class EpisodeConfig:
    """The `jetgym-episode` job (stub: the ViZDoom controller lands later)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    episodes: int = 1
    seed: int = 0
    output_dir: Optional[str] = None

    def __post_init__(self):
        _check_positive("episodes", self.episodes)


def to_config(cfg: Any) -> Any:
    """A composed DictConfig -> its dataclass instance (runs the `__post_init__` checks)."""
    return OmegaConf.to_object(cfg) if OmegaConf.is_config(cfg) else cfg


def register_configs() -> None:
    """Store the job schemas (idempotent)."""
    store = ConfigStore.instance()
    store.store(name="qa_schema", node=QAConfig)
    store.store(name="episode_schema", node=EpisodeConfig)


register_configs()
