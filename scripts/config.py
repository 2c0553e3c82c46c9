"""Hydra structured configs for the jobs. Stored in the ConfigStore on import, so a misspelt key in a
group yaml or on the command line fails at composition. Value checks run in `__post_init__`, i.e.
when a composed config becomes objects: `to_config(cfg)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from agents import available_agents
from agents.scoring import PERCEPTIONS, POLICIES
from envs.question_sets import SUBSETS
from scorers.placement import DEVICES, DTYPES
from scorers.prompts import TEMPLATES
from scorers.registry import check_choice


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
        check_choice("placement.device", self.device, DEVICES)
        check_choice("placement.dtype", self.dtype, DTYPES)


@dataclass
class ScorerConfig:
    """name: a registered scorer; template: `chat` (model's chat template) or `none` (plain concatenation)."""

    name: str = "jet"
    schedule: str = "auto"
    template: str = "chat"
    max_batch_tokens: int = 1024
    # fastjev only: T (trie), S (shared anchoring), P (pruning); calibration file for P (null: docs/calibration/).
    components: Optional[list[str]] = None
    calibration: Optional[str] = None
    # jet: generate a reasoning trace once per question and share it with every candidate.
    reasoning: bool = False
    reasoning_tokens: int = 128
    reasoning_temperature: float = 0.0
    reasoning_seed: int = 0

    def __post_init__(self):
        check_choice("scorer.template", self.template, TEMPLATES)
        _check_positive("scorer.max_batch_tokens", self.max_batch_tokens)
        for component in self.components or ():
            check_choice("scorer.components entry", str(component), ("T", "S", "P"))


@dataclass
class PruningConfig:
    """Decision-guided pruning budget: candidate paths skip the k least sensitive layers (fastjev with P)."""

    k: int = 0

    def __post_init__(self):
        if self.k < 0:
            raise ValueError(f"pruning.k must be >= 0, got {self.k}")


@dataclass
class DatasetConfig:
    """name: a question set (mmlu, jsonl); path: the file (jsonl; optional for mmlu)."""

    name: str = "mmlu"
    subset: str = "all"
    limit: Optional[int] = None
    path: Optional[str] = None

    def __post_init__(self):
        check_choice("dataset.subset", self.subset, SUBSETS)
        _check_positive("dataset.limit", self.limit)


@dataclass
class QAConfig:
    """The `jetgym-qa` job. output_dir: results folder (null: Hydra's run dir).
    chunk_size: questions scored and flushed to responses.jsonl at a time."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    pruning: PruningConfig = field(default_factory=PruningConfig)
    output_dir: Optional[str] = None
    chunk_size: int = 16
    # prepare (render, tokenize, trace) the next chunk in a worker thread while the current one is scored
    pipeline: bool = True
    # also write this run's summary into docs/benchmarks.md, as the section `qa-<record>`
    record: Optional[str] = None

    def __post_init__(self):
        _check_positive("chunk_size", self.chunk_size)


@dataclass
class EnvConfig:
    """A registered jetgym env id (see `envs.DOOM_IDS`); frame_skip: tics per decision;
    episode_timeout: episode length in tics (null: the scenario's own; 35 tics = 1 s)."""

    id: str = "jetgym/DoomDefendTheCenter-v0"
    frame_skip: int = 4
    episode_timeout: Optional[int] = None

    def __post_init__(self):
        from envs import DOOM_IDS

        check_choice("env.id", self.id, tuple(DOOM_IDS))
        _check_positive("env.frame_skip", self.frame_skip)
        _check_positive("env.episode_timeout", self.episode_timeout)


AGENT_NAMES = tuple(available_agents())


@dataclass
class AgentConfig:
    """name: `scorer` (asks the configured scorer), `random` or `scripted`. The other fields apply to
    `scorer`: memory (own last actions quoted), perception (`none`|`describe`), policy
    (`argmax`|`sample`), temperature (for `sample`), screenshot (attach the screen; VLMs only)."""

    name: str = "scorer"
    memory: int = 4
    perception: str = "describe"
    policy: str = "argmax"
    temperature: float = 1.0
    screenshot: bool = False

    def __post_init__(self):
        check_choice("agent.name", self.name, AGENT_NAMES)
        check_choice("agent.perception", self.perception, PERCEPTIONS)
        check_choice("agent.policy", self.policy, POLICIES)
        if self.memory < 0:
            raise ValueError(f"agent.memory must be >= 0, got {self.memory}")
        if not self.temperature > 0:
            raise ValueError(f"agent.temperature must be > 0, got {self.temperature}")


@dataclass
class EpisodeConfig:
    """The `jetgym-episode` job: `episodes` seeded episodes (seeds seed, seed+1, ...) of `env` played by
    `agent`. video: write an annotated GIF per episode; output_dir: results folder (null: Hydra's run dir)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    episodes: int = 1
    seed: int = 0
    video: bool = True
    output_dir: Optional[str] = None

    def __post_init__(self):
        _check_positive("episodes", self.episodes)


def scorer_options(config: Any) -> dict:
    """Keyword options for `make_scorer(config.scorer.name, ...)`; fastjev's extras only when set."""
    scorer = config.scorer
    options = {
        "model": config.model.spec,
        "placement": {"device": config.placement.device, "dtype": config.placement.dtype},
        "schedule": scorer.schedule,
        "template": scorer.template,
        "max_batch_tokens": scorer.max_batch_tokens,
    }
    pruning = getattr(config, "pruning", None)
    extras = {
        "components": list(scorer.components) if scorer.components is not None else None,
        "calibration": scorer.calibration,
        "pruning_k": pruning.k if pruning is not None and pruning.k else None,
    }
    extras = {key: value for key, value in extras.items() if value is not None}
    if scorer.reasoning:
        options.update(reasoning=True, reasoning_tokens=scorer.reasoning_tokens,
                       reasoning_temperature=scorer.reasoning_temperature, reasoning_seed=scorer.reasoning_seed)
    if extras and scorer.name != "fastjev":
        raise ValueError(f"{', '.join(sorted(extras))} apply to scorer=fastjev only, not scorer={scorer.name}")
    return {**options, **extras}


def to_config(cfg: Any) -> Any:
    """A composed DictConfig -> its dataclass instance (runs the `__post_init__` checks)."""
    return OmegaConf.to_object(cfg) if OmegaConf.is_config(cfg) else cfg


def register_configs() -> None:
    """Store the job schemas (idempotent)."""
    store = ConfigStore.instance()
    store.store(name="qa_schema", node=QAConfig)
    store.store(name="episode_schema", node=EpisodeConfig)


register_configs()
