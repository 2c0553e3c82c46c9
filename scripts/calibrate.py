"""`jetgym-calibrate`: rank a model's layers by decision sensitivity on an unlabeled calibration set (FastJEV P).

Writes docs/calibration/<model>.json (model id, J_l, ranking, calibration set description) and
docs/calibration/<model>_J.png (J_l per layer, log scale, the `highlight_k` pruned layers highlighted).
The set is MMLU test questions outside the 285-question evaluation subset; answers are never read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore

from scripts.config import ModelConfig, PlacementConfig, to_config


@dataclass
class CalibrateConfig:
    """size: calibration questions, evenly spaced over MMLU `all` minus the evaluation subset `exclude_subset`.
    output_dir: where the file and plot go (null: docs/calibration)."""

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
    from envs.question_sets import load_mmlu

    excluded = {q.id for q in load_mmlu(subset=exclude_subset)}
    pool = [q for q in load_mmlu(subset="all") if q.id not in excluded]
    if size > len(pool):
        raise ValueError(f"size {size} exceeds the {len(pool)} questions available")
    step = len(pool) / size
    chosen = [pool[int(i * step)] for i in range(size)]
    description = (f"MMLU test: {size} questions evenly spaced over the {len(pool)} items outside the "
                   f"{len(excluded)}-question `{exclude_subset}` evaluation subset; answers not read")
    return chosen, description


def run_calibrate(cfg) -> dict:
    """Calibrate and write the file and plot; returns the record."""
    from scorers import make_scorer
    from scorers.fastjev.calibration import calibrate, plot_sensitivity, write_calibration
    from scorers.fastjev.pruning import CALIBRATION_DIR, slug

    config: CalibrateConfig = to_config(cfg)
    questions, description = calibration_questions(config.size, config.exclude_subset)
    scorer = make_scorer("fastjev", model=config.model.spec, components=["T", "S"], template=config.template,
                         placement={"device": config.placement.device, "dtype": config.placement.dtype},
                         max_batch_tokens=config.max_batch_tokens)
    record = calibrate(scorer, questions, description)
    out = Path(config.output_dir) if config.output_dir else CALIBRATION_DIR
    path = write_calibration(record, out / f"{slug(config.model.spec)}.json")
    plot_sensitivity(record, out / f"{slug(config.model.spec)}_J.png", config.highlight_k)
    print(f"ranking (least sensitive first): {record['ranking']}; written {path}")
    return record


@hydra.main(config_path=str(Path(__file__).resolve().parents[1] / "conf"), config_name="calibrate", version_base=None)
def main(cfg) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run_calibrate(cfg)


if __name__ == "__main__":
    main()
