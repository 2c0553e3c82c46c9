"""`jetgym-calibrate-probs`: fit one temperature on held-out questions; report calibration before and after.

The fit set is never the evaluated set: by default `size` MMLU test questions evenly spaced over the items
outside the evaluation subset `exclude_subset` (the same pool as `jetgym-calibrate`), scored here with the
configured scorer (its `normalization` included); or `fit_responses`, a responses.jsonl (or run folder) of
held-out questions already scored. `evaluate` (optional) is the responses.jsonl (or run folder) of the
evaluated run: its ids must not occur in the fit set, and its rows must carry the same normalization.

Writes into the run folder: fit/ (when scored here: a `run_qa` folder, resumed by a rerun), calibration.json (the temperature, and
accuracy / gold NLL / ECE / Brier / reliability bins before (T = 1) and after, on the fit set and on the
evaluated set), reliability_fit.png, reliability_eval.png and report.md. Use the temperature with
`scorer.temperature=<T>` (choices never change; probabilities do).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig

from jetgym.questions import metrics as M
from jetgym.runs.folder import atomic_file, write_json, write_text
from jetgym.runs.qa import read_responses, run_qa
from jetgym.scripts.cli import user_errors
from jetgym.scripts.config import CONFIG_PATH, ModelConfig, PlacementConfig, ScorerConfig, build_scorer, to_config

RESPONSES = "responses.jsonl"
FIT = "fit"  # the run folder of the held-out questions scored here


@dataclass
class CalibrateProbsConfig:
    """size: held-out questions scored for the fit (ignored with fit_responses); bins: ECE / diagram bins;
    output_dir: the run folder (null: Hydra's run dir)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    size: int = 285
    exclude_subset: str = "per_subject_5"
    fit_responses: Optional[str] = None
    evaluate: Optional[str] = None
    bins: int = M.DEFAULT_BINS
    chunk_size: int = 16
    output_dir: Optional[str] = None

    def __post_init__(self):
        for name in ("size", "bins", "chunk_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


ConfigStore.instance().store(name="calibrate_probs_schema", node=CalibrateProbsConfig)


def read_rows(path: str | Path) -> list[dict]:
    """Response rows from a responses.jsonl or a run folder holding one (`jetgym.runs.qa.read_responses`)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESPONSES
    if not path.is_file():
        raise FileNotFoundError(f"no responses file at {path}")
    return list(read_responses(path).values())


def score_held_out(config: CalibrateProbsConfig, out: Path) -> list[dict]:
    """Score the held-out pool with the configured scorer into the run folder `out/fit` (`run_qa`: resumable)."""
    from jetgym.scripts.calibrate import calibration_questions

    questions, _ = calibration_questions(config.size, config.exclude_subset)
    settings = {
        "model": config.model.spec,
        "placement": asdict(config.placement),
        "scorer": asdict(config.scorer),
        "size": config.size,
        "exclude_subset": config.exclude_subset,
    }
    run_qa(
        questions,
        lambda: build_scorer(config),
        out / FIT,
        chunk_size=config.chunk_size,
        pipeline=False,
        settings=settings,
        about={
            "model": config.model.spec,
            "placement": asdict(config.placement),
            "dataset": {"name": "mmlu held-out", "subset": "calibration"},
        },
    )
    return read_rows(out / FIT)


def normalization_of(rows: list[dict]) -> set[str]:
    return {r.get("normalization", "none") for r in rows}


def calibrate_probs(config: CalibrateProbsConfig, out: Path) -> dict:
    """Fit the temperature on the held-out rows and measure before / after; returns calibration.json's content."""
    out.mkdir(parents=True, exist_ok=True)
    fit_rows = read_rows(config.fit_responses) if config.fit_responses else score_held_out(config, out)
    eval_rows = read_rows(config.evaluate) if config.evaluate else None
    if eval_rows is not None:
        shared = sorted({r["id"] for r in fit_rows} & {r["id"] for r in eval_rows})
        if shared:
            raise ValueError(
                f"the fit set and the evaluated set share {len(shared)} questions (e.g. {shared[0]!r}): "
                "a temperature is never fitted on the evaluated questions"
            )
        if normalization_of(fit_rows) != normalization_of(eval_rows):
            raise ValueError(
                f"the fit responses were scored with normalization {sorted(normalization_of(fit_rows))} "
                f"and the evaluated ones with {sorted(normalization_of(eval_rows))}: use the same scorer"
            )
    scores, gold = M.graded(fit_rows)
    temperature = M.fit_temperature(scores, gold)
    result = {
        "temperature": temperature,
        "normalization": sorted(normalization_of(fit_rows)),
        "fit": {
            "before": M.metrics(scores, gold, 1.0, config.bins),
            "after": M.metrics(scores, gold, temperature, config.bins),
        },
    }
    with atomic_file(out / "reliability_fit.png") as partial:
        M.plot_reliability(
            {"uncalibrated": result["fit"]["before"], "temperature-scaled": result["fit"]["after"]},
            partial,
            "Reliability: fit (held-out) set",
        )
    if eval_rows is not None:
        e_scores, e_gold = M.graded(eval_rows)
        result["evaluate"] = {
            "before": M.metrics(e_scores, e_gold, 1.0, config.bins),
            "after": M.metrics(e_scores, e_gold, temperature, config.bins),
        }
        with atomic_file(out / "reliability_eval.png") as partial:
            M.plot_reliability(
                {"uncalibrated": result["evaluate"]["before"], "temperature-scaled": result["evaluate"]["after"]},
                partial,
                "Reliability: evaluated set",
            )
    write_json(out / "calibration.json", result, what="the calibration")
    write_text(out / "report.md", render_report(result))
    return result


def render_report(result: dict) -> str:
    lines = [
        f"# Probability calibration: T = {result['temperature']:.4f}\n",
        "| set | T | questions | accuracy | mean gold NLL | ECE | Brier |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("fit", "evaluate"):
        for when in ("before", "after"):
            m = result.get(name, {}).get(when)
            if m:
                lines.append(
                    f"| {name} | {m['temperature']:.4g} | {m['questions']} | {m['accuracy']:.4f} | "
                    f"{m['mean_gold_nll']:.4f} | {m['ece']:.4f} | {m['brier']:.4f} |"
                )
    return "\n".join(lines) + f"\n\nUse it with `scorer.temperature={result['temperature']:.4f}`.\n"


@hydra.main(config_path=CONFIG_PATH, config_name="calibrate_probs", version_base=None)
def main(cfg) -> None:
    """Console entry: `jetgym-calibrate-probs key=value ...`; a user error is one line (`jetgym.scripts.cli`)."""
    with user_errors("jetgym-calibrate-probs"):
        config = to_config(cfg)
        out = Path(config.output_dir or HydraConfig.get().runtime.output_dir)
        result = calibrate_probs(config, out)
    print(f"temperature {result['temperature']:.4f}; results in {out.resolve()}")


if __name__ == "__main__":
    main()
