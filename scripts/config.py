"""Hydra structured configs of the jobs, derived from the library's own option dataclasses.

The scorer and placement schemas are generated from `jetgym.scorers` (`ScorerOptions` and its backends,
`Placement`), so an option is declared once, in the library, and reaches the scorer unchanged. The
schemas sit in Hydra's ConfigStore on import: a misspelt key fails at composition; value checks run in
`__post_init__` when a composed config becomes objects (`to_config`), before any model loads.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from jetgym.agents import available_agents, available_describers
from jetgym.envs.vizdoom.expert import AIMS
from jetgym.agents.prompt import check_examples
from jetgym.agents.scoring import check_agent_options
from jetgym.questions.sets import subsets_of
from jetgym.scorers import available_scorers, option_names
from jetgym.scorers.base import SCORERS, check_options
from jetgym.scorers.placement import cpu_has_native_bf16
from jetgym.scorers.placement import Placement
from jetgym.scorers.registry import check_choice

CONFIG_MODULE = "jetgym.conf"
CONFIG_PATH = f"pkg://{CONFIG_MODULE}"  # for @hydra.main: the configs ship inside the package


def _check_positive(what: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")


def _check_seed(seed: int) -> None:
    """Episodes are seeded seed, seed+1, ... and Gymnasium takes only seeds >= 0."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0 (envs take non-negative seeds), got {seed}")


def _hydra_type(hint: Any) -> Any:
    """An OmegaConf-typed version of a library type hint (Literal -> str, tuple -> List, X | None -> Optional)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return type(args[0])
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return Optional[_hydra_type(inner[0])] if len(inner) == 1 else Any
    if origin in (tuple, list):
        return List[_hydra_type(args[0]) if args else Any]
    if origin is dict:
        return Dict[str, Any]
    return hint if hint in (str, int, float, bool) else Any


def schema(
    name: str,
    sources: list[type],
    skip: tuple[str, ...] = (),
    optional: bool = False,
    extra: list | None = None,
    post_init=None,
) -> type:
    """A mutable dataclass with the fields of the `sources` dataclasses (first wins), for the ConfigStore.

    optional: every field defaults to None ("the library's default"), so the config sets only what a user set."""
    fields_, seen = list(extra or []), {f[0] for f in extra or []}
    for source in sources:
        hints = typing.get_type_hints(source)
        for f in dataclasses.fields(source):
            if f.name in skip or f.name in seen:
                continue
            seen.add(f.name)
            kind = _hydra_type(hints[f.name])
            if optional:
                fields_.append((f.name, Optional[kind], field(default=None)))
            elif f.default is not dataclasses.MISSING:
                fields_.append((f.name, kind, field(default=f.default)))
            else:
                fields_.append((f.name, kind, field(default_factory=f.default_factory)))
    namespace = {"__post_init__": post_init} if post_init else {}
    return dataclasses.make_dataclass(name, fields_, namespace=namespace)


@dataclass
class ModelConfig:
    """spec: an embedded model name, a local Hugging Face folder, or a hub id."""

    spec: str = "smollm2-135m-instruct"
    adapter: Optional[str] = None  # a jetgym-train adapter folder merged into the weights

    def __post_init__(self):
        if not self.spec:
            raise ValueError("model.spec is empty: name an embedded model, a local folder or a hub id")


def _check_placement(self) -> None:
    Placement(**dataclasses.asdict(self))


PlacementConfig = schema("PlacementConfig", [Placement], post_init=_check_placement)


def scorer_settings(scorer) -> dict:
    """The options a scorer config sets (None means the scorer's own default)."""
    return {k: v for k, v in dataclasses.asdict(scorer).items() if k != "name" and v is not None}


def _check_scorer(self) -> None:
    check_choice("scorer.name", self.name, available_scorers())
    settings = scorer_settings(self)
    check_options(self.name, settings, prefix="scorer.")
    if option_names(self.name) is not None:
        SCORERS.get(self.name).Options(**settings)  # the library's value checks, before any model loads


# Every option of every registered backend, once; each defaults to null (= that backend's default).
ScorerConfig = schema(
    "ScorerConfig",
    [SCORERS.get(name).Options for name in available_scorers() if SCORERS.get(name).Options is not None],
    skip=("model", "placement", "pruning_k", "adapter"),
    optional=True,
    extra=[("name", str, field(default="jet"))],
    post_init=_check_scorer,
)


@dataclass
class PruningConfig:
    """Decision-guided pruning budget: candidate paths skip the k least sensitive layers (fastjev with P)."""

    k: int = 0

    def __post_init__(self):
        if self.k < 0:
            raise ValueError(f"pruning.k must be >= 0, got {self.k}")


@dataclass
class DatasetConfig:
    """name: a question set (mmlu, jsonl, libero); path: the file (jsonl; optional for mmlu and libero)."""

    name: str = "mmlu"
    subset: str = "all"
    limit: Optional[int] = None
    path: Optional[str] = None

    def __post_init__(self):
        check_choice("dataset.subset", self.subset, subsets_of(self.name))
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
    # a question the scorer refuses (e.g. longer than the model window): `stop` the run naming it, or
    # `skip` it (recorded in responses.jsonl as skipped, counted in the summary)
    on_error: str = "stop"
    # under torchrun: how long a rank that finished waits for the others before failing, naming them
    rank_timeout_s: float = 1800.0
    # score questions with a single distinct choice (always graded correct); refused by default
    allow_single_choice: bool = False

    def __post_init__(self):
        _check_positive("chunk_size", self.chunk_size)
        check_choice("on_error", self.on_error, ("stop", "skip"))
        _check_pruning(self)


def _check_pruning(config) -> None:
    if config.pruning.k and "pruning_k" not in (option_names(config.scorer.name) or ()):
        raise ValueError(
            f"pruning.k={config.pruning.k} applies to scorers with layer pruning (scorer=fastjev), "
            f"not scorer={config.scorer.name}: use pruning=none"
        )


@dataclass
class EnvConfig:
    """id: any registered Gymnasium id with a Discrete or Text action space, as `gymnasium.make` takes it (`EnvId`
    or `module:EnvId`, the module imported first; the jetgym ids register when `jetgym.envs` is imported);
    imports: packages to import first because they register ids on import (e.g. [minigrid]); kwargs: passed to
    `gymnasium.make` (any key: `env.kwargs.x=1` or `env.kwargs={x: 1}`, e.g. max_episode_steps or a Doom
    scenario's frame_skip); action_texts: one text per action (null: the env's own controls / action meanings,
    else `action i` with a warning; Text action spaces take the env's commands at each step instead); task: the
    text the agent is told first (null: the env's `task` attribute, if any); examples: worked
    [observation text, control text] pairs the `scorer` agent is shown before each question (few-shot chat turns,
    written as the env's describer writes observations; `jetgym.agents.prompt`);
    discretize: bins per dimension of a Box action space (gymnasium's DiscretizeAction; null: Box is refused);
    num_envs: sub-envs played at once (> 1: a vector env, one scorer call per step); vectorization:
    `sync` or `async` (sub-envs in processes)."""

    id: str = "jetgym/DoomDefendTheCenter-v0"
    imports: List[str] = field(default_factory=list)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    action_texts: Optional[List[str]] = None
    task: Optional[str] = None
    examples: List[List[str]] = field(default_factory=list)
    discretize: Optional[int] = None
    num_envs: int = 1
    vectorization: str = "sync"

    def __post_init__(self):
        from jetgym.envs import check_env_id

        check_env_id(self.id, self.imports)
        _check_positive("env.num_envs", self.num_envs)
        if self.discretize is not None and (isinstance(self.discretize, bool) or self.discretize < 2):
            raise ValueError(f"env.discretize must be null or a number of bins >= 2, got {self.discretize}")
        check_choice("env.vectorization", self.vectorization, VECTORIZATIONS)
        if self.action_texts is not None and (not self.action_texts or any(not str(t) for t in self.action_texts)):
            raise ValueError(f"env.action_texts must be null or non-empty texts, got {self.action_texts}")
        try:
            check_examples(self.examples)
        except ValueError as error:
            raise ValueError(f"env.{error}") from None


VECTORIZATIONS = ("sync", "async")


AGENT_NAMES = tuple(available_agents())


@dataclass
class AgentConfig:
    """name: `scorer` (asks the configured scorer), `random`, `fixed` (plays `control`, a candidate label or text,
    at every step) or `scripted` (hand-written experts for ViZDoom and Taxi; `aim`: how it steers toward what it sees
    in ViZDoom, `turn` by default or `strafe`, which suits basic). The other fields apply to `scorer`: memory (own last actions quoted), describer (`auto` or a name of
    `jetgym.agents.describers.DESCRIBERS`: how the observation becomes text), perception (`none`|`describe`: image
    observations), policy (`auto`|`argmax`|`untried`|`sample`), temperature (for `sample`), screenshot (attach
    the image; VLMs only)."""

    name: str = "scorer"
    memory: int = 0
    describer: str = "auto"
    perception: str = "describe"
    policy: str = "auto"
    temperature: float = 1.0
    screenshot: bool = False
    control: Optional[str] = None
    aim: Optional[str] = None

    def __post_init__(self):
        check_choice("agent.name", self.name, AGENT_NAMES)
        if (self.name == "fixed") != (self.control is not None):
            raise ValueError(
                "agent.control is the fixed agent's control: set it with agent=fixed "
                "(e.g. agent=fixed agent.control=attack), and only there"
            )
        if self.aim is not None:
            if self.name != "scripted":
                raise ValueError(
                    "agent.aim is the scripted agent's steering: set it with agent=scripted "
                    "(e.g. agent=scripted agent.aim=strafe), and only there"
                )
            check_choice("agent.aim", self.aim, AIMS)
        check_choice("agent.describer", self.describer, available_describers())
        check_agent_options(self.perception, self.policy, self.memory, self.temperature, prefix="agent.")


@dataclass
class EpisodeConfig:
    """The `jetgym-episode` job: `episodes` seeded episodes (seeds seed, seed+1, ...) of `env` played by
    `agent`. video: write an annotated GIF per episode (envs that render `rgb_array`);
    output_dir: results folder (null: Hydra's run dir)."""

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
        _check_seed(self.seed)


def scorer_options(config: Any) -> dict:
    """Keyword options for `make_scorer(config.scorer.name, ...)`: model, placement, every scorer option the
    config sets, and the pruning budget when there is one."""
    options = {
        "model": config.model.spec,
        "placement": dataclasses.asdict(config.placement),
        **scorer_settings(config.scorer),
    }
    if config.model.adapter is not None:
        options["adapter"] = config.model.adapter
    pruning = getattr(config, "pruning", None)
    if pruning is not None and pruning.k:
        options["pruning_k"] = pruning.k
    return options


def build_scorer(config: Any):
    """The scorer a composed job config describes."""
    from jetgym.scorers import make_scorer

    return make_scorer(config.scorer.name, **scorer_options(config))


def to_config(cfg: Any) -> Any:
    """A composed DictConfig -> its dataclass instance (runs the `__post_init__` checks)."""
    return OmegaConf.to_object(cfg) if OmegaConf.is_config(cfg) else cfg


def compose(job: str, overrides=()) -> Any:
    """Compose the job's config from the shipped configs (for tests, benchmarks and notebooks)."""
    from hydra import compose as hydra_compose, initialize_config_module

    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        return hydra_compose(job, overrides=list(overrides))


def register_configs() -> None:
    """Store the job schemas (idempotent)."""
    store = ConfigStore.instance()
    store.store(name="qa_schema", node=QAConfig)
    store.store(name="episode_schema", node=open_kwargs(EpisodeConfig))


def open_kwargs(job: type):
    """The job's schema with `env.kwargs` open to any key (the rest stays strict): `env.kwargs.x=1` and
    `env.kwargs={x: 1}` both work without a `+`, since env options are the env's, not the schema's."""
    node = OmegaConf.structured(job)
    OmegaConf.set_struct(node.env.kwargs, False)
    return node


register_configs()


# ---------------------------------------------------------------- jetgym-train


def _train_schema():
    from jetgym.training.options import LoraOptions, PPOOptions, RFTOptions, SFTOptions

    extra = [
        ("env_steps", Optional[int], field(default=None)),  # null: DEFAULT_ENV_STEPS (ppo, rft)
        ("autocast", bool, field(default=False)),
        ("checkpoint_every", int, field(default=1)),
        ("held_out", Optional[float], field(default=None)),  # null: DEFAULT_HELD_OUT (sft, bc)
        ("demonstrations", Optional[Any], field(default=None)),
        ("min_return", Optional[float], field(default=None)),
        ("relabel", Optional[str], field(default=None)),
        ("unique", bool, field(default=False)),
    ]
    return schema("TrainOptionsConfig", [PPOOptions, SFTOptions, RFTOptions, LoraOptions], optional=True, extra=extra)


TrainOptionsConfig = _train_schema()
ALGORITHMS = ("ppo", "rft", "sft", "bc")
DEFAULT_ENV_STEPS = 4096  # train.env_steps of ppo and rft (why not 2,048: docs/training.md, targets table)
DEFAULT_HELD_OUT = 0.5  # train.held_out of sft and bc
LORA_SETTINGS = ("lora_rank", "lora_alpha", "lora_layers", "lora_targets")
RELABELERS = {"scripted": "turn", "scripted-strafe": "strafe"}  # train.relabel -> the scripted expert's aim


@dataclass
class TrainConfig:
    """The `jetgym-train` job. algorithm: `rft` (the default: reward-filtered self-imitation on `env`, played by the
    scorer agent: rounds of sampled episodes, the best actions cloned; `jetgym.training.rft`), `ppo` (on `env`;
    kept for comparison, it has not learned here: docs/learning.md), `sft` (on the labelled
    questions of `dataset`) or `bc` (behaviour cloning: the episodes of `train.demonstrations`, a steps.jsonl,
    replayed in `env`; `jetgym.training.cloning`; cloned to fit by default, `BCOptions`). sft and bc hold a
    `train.held_out` fraction of the episodes (or questions) out and evaluate it before training and after each
    epoch (`jetgym.training.sft.split_held_out`);
    bc with `train.min_return` clones only the episodes whose return is at least that; `train.demonstrations` may
    be a list of steps.jsonl files (pooled), and `train.relabel=scripted` (`scripted-strafe`: the strafing ViZDoom
    expert) takes each replayed step's gold from the scripted expert instead of the record (DAgger). sft and bc with
    `train.unique=true` train on each distinct question once per epoch and hold out only questions not trained on
    (`jetgym.training.sft.distinct_split`).
    train: the algorithm's options (null: the library default), `env_steps` (rft and PPO budget), `autocast` (bf16
    autocast for the updates), `checkpoint_every` (updates), the LoRA settings. output_dir: results folder."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    train: TrainOptionsConfig = field(default_factory=TrainOptionsConfig)  # type: ignore[valid-type]
    algorithm: str = "rft"
    seed: int = 0
    output_dir: Optional[str] = None
    rank_timeout_s: float = 1800.0  # under torchrun: how long a rank waits for the others before failing

    def __post_init__(self):
        check_choice("algorithm", self.algorithm, ALGORITHMS)
        _check_seed(self.seed)
        trainable = available_scorers("train")
        if self.scorer.name not in trainable:
            raise ValueError(
                f"jetgym-train trains the {'/'.join(trainable)} scorer's model: set scorer={trainable[0]} "
                f"(got scorer={self.scorer.name})"
            )
        if self.agent.name != "scorer":
            raise ValueError(f"jetgym-train trains the scorer agent: set agent=scorer (got agent={self.agent.name})")
        if self.train.autocast and self.placement.device == "cpu" and not cpu_has_native_bf16():
            raise ValueError(
                "train.autocast=true on a CPU without native bf16 (AVX-512 BF16 or AMX): torch emulates "
                "bf16 there, tens of times slower than float32; leave train.autocast=false"
            )
        if self.train.demonstrations is not None:
            self.train.demonstrations = demonstration_paths(self.train.demonstrations)
        if (self.algorithm == "bc") != bool(self.train.demonstrations):
            raise ValueError(
                "algorithm=bc (behaviour cloning) needs train.demonstrations=PATH, the steps.jsonl of a "
                "jetgym-episode run, and no other algorithm reads it"
                + ("" if self.algorithm == "bc" else f" (got algorithm={self.algorithm})")
            )
        if self.train.relabel is not None:
            check_choice("train.relabel", self.train.relabel, tuple(RELABELERS))
        for name in ("min_return", "relabel"):
            if getattr(self.train, name) is not None and self.algorithm != "bc":
                raise ValueError(
                    f"train.{name} is a behaviour-cloning option: set it with algorithm=bc only "
                    f"(got algorithm={self.algorithm})"
                )
        if self.train.unique and self.algorithm in ("ppo", "rft"):
            raise ValueError(
                "train.unique merges repeated labelled questions: set it with algorithm=sft or bc only "
                f"(got algorithm={self.algorithm})"
            )
        _check_algorithm_options(self.algorithm, self.train)
        _check_applies(self.algorithm, self.train)
        _build_options(self.algorithm, self.train)
        _check_positive("train.env_steps", self.env_steps)
        _check_positive("train.checkpoint_every", self.train.checkpoint_every)
        if not 0 <= self.held_out <= 0.5:
            raise ValueError(
                f"train.held_out must be a fraction in [0, 0.5], got {self.held_out}: every k-th episode "
                f"(k = round(1 / held_out) >= 2) is held out, so at most half; set train.held_out=0.5 or less"
            )

    @property
    def env_steps(self) -> int:
        """`train.env_steps`, or its default (ppo and rft read it)."""
        return DEFAULT_ENV_STEPS if self.train.env_steps is None else self.train.env_steps

    @property
    def held_out(self) -> float:
        """`train.held_out`, or its default (sft and bc read it)."""
        return DEFAULT_HELD_OUT if self.train.held_out is None else self.train.held_out

    def train_record(self) -> dict:
        """The `train` settings in effect, defaults filled (what a run records)."""
        return {**dataclasses.asdict(self.train), "env_steps": self.env_steps, "held_out": self.held_out}


def _check_algorithm_options(algorithm: str, train) -> None:
    """Refuse a `train.*` option that only other algorithms read (e.g. train.keep with algorithm=ppo)."""
    from jetgym.training.options import PPOOptions, RFTOptions, SFTOptions

    fields_of = {
        name: {f.name for f in dataclasses.fields(cls)}
        for name, cls in (("ppo", PPOOptions), ("rft", RFTOptions), ("sft or bc", SFTOptions))
    }
    mine = fields_of["sft or bc" if algorithm in ("sft", "bc") else algorithm]
    for name in sorted(set().union(*fields_of.values()) - mine):
        if getattr(train, name) is not None:
            users = " or ".join(a for a, names in fields_of.items() if name in names)
            raise ValueError(
                f"train.{name} is an option of algorithm={users}, not of algorithm={algorithm}: "
                f"remove it or change the algorithm"
            )


def train_options(train, cls) -> Any:
    """The `train.*` settings that `cls` takes (null: its default), as a `cls`."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in dataclasses.asdict(train).items() if k in names and v is not None})


def _build_options(algorithm: str, train) -> None:
    """Build the algorithm's and LoRA's options once, so their checks run before any model is loaded."""
    from jetgym.training.options import OPTIONS, LoraOptions

    for cls in (OPTIONS[algorithm], LoraOptions):
        train_options(train, cls)


def _check_applies(algorithm: str, train) -> None:
    """Refuse a `train.*` setting the chosen algorithm or finetune mode would ignore, naming it."""
    learns_from_reward = algorithm in ("ppo", "rft")
    if train.env_steps is not None and not learns_from_reward:
        raise ValueError(
            f"train.env_steps={train.env_steps} is the env-step budget of algorithm=ppo or rft; algorithm="
            f"{algorithm} trains on questions for train.epochs: remove train.env_steps (or set train.epochs)"
        )
    if train.held_out is not None and learns_from_reward:
        raise ValueError(
            f"train.held_out={train.held_out} holds questions out of algorithm=sft or bc; algorithm={algorithm} "
            f"is evaluated by playing (jetgym eval): remove train.held_out"
        )
    if train.finetune == "full":
        given = [f"train.{name}" for name in LORA_SETTINGS if getattr(train, name) is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} set with train.finetune=full, which trains every weight and no LoRA adapter: "
                f"remove {'them' if len(given) > 1 else 'it'}, or leave train.finetune=lora"
            )


def demonstration_paths(value) -> list[str]:
    """`train.demonstrations` as a list of paths: one path, or a list of them (`train.demonstrations=[A,B]`)."""
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, (list, tuple)) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise ValueError(
            f"train.demonstrations must be a steps.jsonl path or a non-empty list of them "
            f"(train.demonstrations=[A,B]), got {value!r}"
        )
    return list(paths)


ConfigStore.instance().store(name="train_schema", node=open_kwargs(TrainConfig))
