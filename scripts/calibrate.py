"""`jetgym-calibrate`: rank a model's layers by decision sensitivity on an unlabeled calibration set (FastJEV P).

Writes <model>.json (model id, J_l, ranking, calibration set description) and <model>_J.png (J_l per layer,
log scale, the `highlight_k` pruned layers highlighted) into the run folder, and the JSON into the user's
calibration cache, where `fastjev` finds it (`jetgym.scorers.fastjev.pruning.calibration_path`).
The set is MMLU test questions outside the 285-question evaluation subset; answers are never read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig

from jetgym.scripts.cli import user_errors
from jetgym.scripts.config import CONFIG_PATH, ModelConfig, PlacementConfig, to_config


@dataclass
class CalibrateConfig:
    """size: calibration questions, evenly spaced over MMLU `all` minus the evaluation subset `exclude_subset`.
    output_dir: the run folder (null: Hydra's run dir)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    size: int = 32
    exclude_subset: str = "per_subject_5"
    template: str = "none"
    max_batch_tokens: int = 1024
    highlight_k: int = 6
    output_dir: Optional[str] = None

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        if self.highlight_k < 0:
            raise ValueError(f"highlight_k must be >= 0, got {self.highlight_k}")


ConfigStore.instance().store(name="calibrate_schema", node=CalibrateConfig)


def calibration_questions(size: int, exclude_subset: str = "per_subject_5"):
    """`size` MMLU questions evenly spaced over the items outside `exclude_subset` (deterministic)."""
    from jetgym.questions.sets import load_mmlu

    excluded = {q.id for q in load_mmlu(subset=exclude_subset)}
    pool = [q for q in load_mmlu(subset="all") if q.id not in excluded]
    if size > len(pool):
        raise ValueError(f"size {size} exceeds the {len(pool)} questions available")
    step = len(pool) / size
    chosen = [pool[int(i * step)] for i in range(size)]
    description = (
        f"MMLU test: {size} questions evenly spaced over the {len(pool)} items outside the "
        f"{len(excluded)}-question `{exclude_subset}` evaluation subset; answers not read"
    )
    return chosen, description


def run_calibrate(cfg) -> dict:
    """Calibrate and write the file and plot; returns the record."""
    from jetgym.scorers import make_scorer
    from jetgym.scorers.fastjev.calibration import calibrate, plot_sensitivity, write_calibration
    import shutil

    from jetgym.scorers.fastjev.pruning import slug, user_calibrations

    config: CalibrateConfig = to_config(cfg)
    questions, description = calibration_questions(config.size, config.exclude_subset)
    scorer = make_scorer(
        "fastjev",
        model=config.model.spec,
        components=["T", "S"],
        template=config.template,
        placement={"device": config.placement.device, "dtype": config.placement.dtype},
        max_batch_tokens=config.max_batch_tokens,
    )
    record = calibrate(scorer, questions, description)
    out, name = Path(config.output_dir), slug(config.model.spec)
    path = write_calibration(record, out / f"{name}.json")
    plot_sensitivity(record, out / f"{name}_J.png", config.highlight_k)
    cache = user_calibrations()
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, cache / path.name)
    print(f"ranking (least sensitive first): {record['ranking']}; written {path} and {cache / path.name}")
    return record


@hydra.main(config_path=CONFIG_PATH, config_name="calibrate", version_base=None)
def main(cfg) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with user_errors("jetgym-calibrate"):  # a user error is one line (`jetgym.scripts.cli`)
        config = to_config(cfg)
        config.output_dir = config.output_dir or HydraConfig.get().runtime.output_dir
        run_calibrate(config)


if __name__ == "__main__":
    main()
