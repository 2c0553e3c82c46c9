"""Compose every top-level config with every group option; typos fail at composition."""

from __future__ import annotations

import dataclasses
import importlib.resources
import itertools
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from jetgym.scripts.config import EpisodeConfig, QAConfig, ScorerConfig, scorer_options, to_config

CONF = Path(str(importlib.resources.files("jetgym.conf")))
JOBS = {
    "qa": (QAConfig, ("model", "scorer", "placement", "dataset", "pruning")),
    "episode": (EpisodeConfig, ("model", "scorer", "placement")),
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def combinations():
    for job, (_, groups) in JOBS.items():
        for choice in itertools.product(*(options(g) for g in groups)):
            yield job, [f"{g}={o}" for g, o in zip(groups, choice)]


def compose_job(job: str, overrides=(), conf: Path = CONF, hydra_config: bool = False):
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return compose(job, overrides=list(overrides), return_hydra_config=hydra_config)


@pytest.mark.parametrize("job,overrides", list(combinations()), ids=lambda v: v if isinstance(v, str) else ",".join(v))
def test_every_config_composes(job, overrides):
    if "scorer=jet" in overrides and "pruning=budget" in overrides:  # layer pruning is fastjev's
        with pytest.raises(ValueError, match="pruning.k=6 applies to scorers with layer pruning"):
            to_config(compose_job(job, overrides))
        return
    config = to_config(compose_job(job, overrides))
    assert isinstance(config, JOBS[job][0])
    for override in overrides:
        group, option = override.split("=")
        assert getattr(config, group) is not None, (group, option)
    from jetgym.scorers.base import SCORERS

    options = SCORERS.get(config.scorer.name).Options(**scorer_options(config))  # the builder, short of loading a model
    assert options.placement.device == config.placement.device


@pytest.mark.parametrize(
    "job,module",
    [
        ("calibrate", "jetgym.scripts.calibrate"),
        ("bench", "benchmarks.scoring"),
        ("bench_fastjev", "benchmarks.fastjev"),
    ],
)
def test_other_jobs_compose(job, module):
    import importlib

    importlib.import_module(module)
    config = to_config(compose_job(job))
    assert config.model is not None and hasattr(config, "output_dir")
    if job == "calibrate":
        for placement in options("placement"):
            assert to_config(compose_job(job, [f"placement={placement}"])).placement.device


def test_groups_have_options():
    for group in ("model", "scorer", "placement", "dataset"):
        assert options(group), group
    assert options("placement") == ["auto", "cpu", "cuda", "offload_experts"]
    assert {"jsonl", "mmlu"} <= set(options("dataset"))


def test_qa_defaults():
    config = to_config(compose_job("qa"))
    assert config.scorer.template == "none"  # QA is measured with plain concatenation
    assert config.model.spec == "smollm2-135m-instruct"
    assert (config.dataset.name, config.dataset.subset) == ("mmlu", "per_subject_5")
    assert (config.placement.device, config.placement.dtype) == ("cpu", "float32")
    assert to_config(compose_job("qa", ["placement=cuda"])).placement.dtype == "bfloat16"
    assert to_config(compose_job("episode")).scorer.template is None  # null: the scorer's default (chat)


def test_run_dir_follows_output_dir(tmp_path):
    cfg = compose_job("qa", [f"output_dir={tmp_path}"], hydra_config=True)
    assert cfg.hydra.run.dir == str(tmp_path) == cfg.output_dir
    assert compose_job("qa", hydra_config=True).hydra.run.dir.startswith("outputs/")


@pytest.mark.parametrize("job", list(JOBS))
@pytest.mark.parametrize("key", ["scorer.shedule", "model.spek", "placement.devise", "otput_dir"])
def test_misspelt_override_fails(job, key):
    with pytest.raises(ConfigCompositionException, match=key.replace(".", r"\.")):
        compose_job(job, [f"{key}=x"])


def test_misspelt_dataset_key_fails():
    with pytest.raises(ConfigCompositionException, match=r"dataset\.subst"):
        compose_job("qa", ["dataset.subst=all"])


def test_misspelt_key_in_group_yaml_fails(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "scorer" / "typo.yaml").write_text("name: jet\nshedule: auto\n")
    with pytest.raises(Exception, match="shedule"):
        compose_job("qa", ["scorer=typo"], conf=conf)


@pytest.mark.parametrize(
    "override,message",
    [
        ("placement.dtype=float8", "unknown placement.dtype 'float8'"),
        ("placement.device=tpu", "unknown placement.device 'tpu'"),
        ("scorer.template=plain", "unknown template 'plain'"),
        ("scorer.max_batch_tokens=0", "max_batch_tokens must be at least 1"),
        ("scorer.name=jett", "unknown scorer.name 'jett'"),
        ("scorer.components=[T]", r"scorer.components does not apply to scorer=jet \(its options: schedule, template"),
        ("dataset.limit=0", "dataset.limit must be >= 1"),
        ("dataset.subset=half", "unknown dataset.subset 'half'"),
        ("chunk_size=0", "chunk_size must be >= 1"),
    ],
)
def test_bad_values_fail_validation(override, message):
    cfg = compose_job("qa", [override])
    with pytest.raises(ValueError, match=message):
        to_config(cfg)


def test_wrong_type_fails_at_composition():
    with pytest.raises(ConfigCompositionException, match="max_batch_tokens"):
        compose_job("qa", ["scorer.max_batch_tokens=many"])


def test_fastjev_ablation_overrides_compose():
    config = to_config(
        compose_job("qa", ["scorer=fastjev", "scorer.components=[T,S,P]", "pruning=budget", "pruning.k=4"])
    )
    assert (config.scorer.components, config.pruning.k) == (["T", "S", "P"], 4)
    options = scorer_options(config)
    assert (options["components"], options["pruning_k"]) == (["T", "S", "P"], 4)
    assert to_config(compose_job("qa", ["scorer=fastjev", "scorer.components=[S,P]"])).scorer.components == ["S", "P"]
    with pytest.raises(ValueError, match="unknown fastjev component 'X'"):
        to_config(compose_job("qa", ["scorer=fastjev", "scorer.components=[T,X]"]))
    with pytest.raises(ValueError, match="pruning.k must be >= 0"):
        to_config(compose_job("qa", ["pruning=budget", "pruning.k=-1"]))
    with pytest.raises(ValueError, match="pruning.k=6 applies to scorers with layer pruning .*use pruning=none"):
        to_config(compose_job("qa", ["scorer=jet", "pruning=budget"]))


# A value different from each option's default, as a command-line override and as the option value it becomes.
OVERRIDES = {
    "schedule": ("packed", "packed"),
    "template": ("none", "none"),
    "max_batch_tokens": ("77", 77),
    "min_shared_prefix": ("0", 0),
    "reuse_prefix": ("false", False),
    "binary_texts": ("[no,yes]", ("no", "yes")),
    "reasoning": ("true", True),
    "reasoning_tokens": ("9", 9),
    "reasoning_temperature": ("0.5", 0.5),
    "reasoning_seed": ("3", 3),
    "reasoning_suffix": ("'Final answer:'", "Final answer:"),
    "components": ("[S,P]", ("S", "P")),
    "calibration": ("/tmp/c.json", "/tmp/c.json"),
    "call_overhead_tokens": ("5.0", 5.0),
    "normalization": ("pmi", "pmi"),
    "neutral_premise": ("'Question: N/A'", "Question: N/A"),
    "temperature": ("1.7", 1.7),
}


@pytest.mark.parametrize("option", [f.name for f in dataclasses.fields(ScorerConfig) if f.name != "name"])
@pytest.mark.parametrize("job", ["qa", "episode"])
def test_every_scorer_option_reaches_the_scorer(job, option):
    """Set on the command line, each option arrives in the backend's own options object (nothing dropped)."""
    from jetgym.scorers.base import SCORERS

    override, expected = OVERRIDES[option]
    name = "jet" if option in [f.name for f in dataclasses.fields(SCORERS.get("jet").Options)] else "fastjev"
    config = to_config(compose_job(job, [f"scorer={name}", f"scorer.{option}={override}"]))
    options = scorer_options(config)
    built = SCORERS.get(name).Options(**options)
    assert getattr(built, option) == expected
    assert built.model == "smollm2-135m-instruct" and built.placement.device == "cpu"


def test_pruning_budget_reaches_fastjev():
    from jetgym.scorers.fastjev import FastJevOptions

    options = scorer_options(to_config(compose_job("qa", ["scorer=fastjev", "pruning=budget", "pruning.k=3"])))
    assert FastJevOptions(**options).pruning_k == 3
