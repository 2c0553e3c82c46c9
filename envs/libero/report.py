"""The LIBERO section of a QA run: per-type accuracy with episode-bootstrap intervals, baselines,
abstention, gold NLL, example frames and a per-type bar chart.

`write_libero_report(questions, responses, out_dir)` writes into `out_dir`:
    libero_summary.json   the numbers below (sorted keys)
    libero_by_type.png    accuracy per type with 95% intervals, majority and random baselines marked
    libero_examples/      both views of a few example frames (PNG)
and appends (or replaces) its section in `report.md`.

Definitions. Accuracy: chosen text equals the gold text; abstention ("cannot tell") counts as an error.
Majority baseline: per type, the share of the most frequent gold label on this set (an oracle prior, it
reads the labels). Random baseline: per type, the mean of 1/(number of candidates) (abstention included).
Intervals: `episode_bootstrap` with 2,000 samples, seed 0, resampling whole episodes.
`compare_runs` gives the paired difference of two runs on the same questions.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Sequence

import numpy as np

from jetgym.questions.bootstrap import SAMPLES, SEED, episode_bootstrap, paired_episode_bootstrap
from .questions import ABSTAIN_LABEL, QUESTION_TYPES, parse_id

SUMMARY = "libero_summary.json"
CHART = "libero_by_type.png"
EXAMPLES = "libero_examples"
REPORT = "report.md"
MARK = "<!-- libero-report -->"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def _by_id(responses: Sequence[dict]) -> dict[str, dict]:
    rows = {r["id"]: r for r in responses}
    if len(rows) != len(responses):
        raise ValueError("responses hold duplicate ids")
    return rows


def libero_summary(questions: Sequence, responses: Sequence[dict], samples: int = SAMPLES, seed: int = SEED) -> dict:
    """Per-type and overall numbers of one run (see the module doc)."""
    rows = _by_id(responses)
    missing = [q.id for q in questions if q.id not in rows]
    if missing:
        raise ValueError(f"{len(missing)} questions have no response (e.g. {missing[0]!r})")
    groups: dict[str, list] = defaultdict(list)
    for q in questions:
        groups[parse_id(q.id)["type"]].append(q)

    def block(items: list) -> dict:
        correct = [float(bool(rows[q.id]["correct"])) for q in items]
        episodes = [parse_id(q.id)["episode"] for q in items]
        golds = Counter(q.labels[q.gold] if isinstance(q.gold, int) else q.gold for q in items)
        nlls = [rows[q.id]["gold_nll"] for q in items if rows[q.id].get("gold_nll") is not None]
        finite = [x for x in nlls if math.isfinite(x)]
        interval = episode_bootstrap(correct, episodes, samples=samples, seed=seed)
        return {
            "questions": len(items),
            "episodes": len(set(episodes)),
            "accuracy": interval.estimate,
            "ci95": [interval.low, interval.high],
            "majority_baseline": golds.most_common(1)[0][1] / len(items),
            "majority_label": golds.most_common(1)[0][0],
            "random_baseline": float(np.mean([1 / len(q.candidates) for q in items])),
            "abstention_rate": sum(rows[q.id]["choice"] == ABSTAIN_LABEL for q in items) / len(items),
            "mean_gold_nll": sum(finite) / len(finite) if finite else None,
        }

    types = [t for t in QUESTION_TYPES if t in groups] + sorted(t for t in groups if t not in QUESTION_TYPES)
    return {
        "overall": block(list(questions)),
        "by_type": {t: block(groups[t]) for t in types},
        "frames": len({parse_id(q.id)["frame"] for q in questions}),
        "bootstrap": {"samples": samples, "seed": seed, "unit": "episode"},
    }


def compare_runs(
    questions: Sequence,
    responses_a: Sequence[dict],
    responses_b: Sequence[dict],
    samples: int = SAMPLES,
    seed: int = SEED,
) -> dict:
    """Paired episode bootstrap of accuracy(a) - accuracy(b), overall and per type (points as fractions)."""
    a, b = _by_id(responses_a), _by_id(responses_b)
    out = {}
    groups: dict[str, list] = defaultdict(list)
    for q in questions:
        groups["overall"].append(q)
        groups[parse_id(q.id)["type"]].append(q)
    for name, items in groups.items():
        interval = paired_episode_bootstrap(
            [float(bool(a[q.id]["correct"])) for q in items],
            [float(bool(b[q.id]["correct"])) for q in items],
            [parse_id(q.id)["episode"] for q in items],
            samples=samples,
            seed=seed,
        )
        out[name] = {"difference": interval.estimate, "ci95": [interval.low, interval.high], "questions": len(items)}
    return out


def plot_by_type(summary: dict, path: Path) -> Path:
    """Bar chart: accuracy per type with its 95% interval; majority (dash) and random (dot) baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = list(summary["by_type"])
    stats = [summary["by_type"][t] for t in types]
    acc = np.array([s["accuracy"] for s in stats]) * 100
    low = acc - np.array([s["ci95"][0] for s in stats]) * 100
    high = np.array([s["ci95"][1] for s in stats]) * 100 - acc
    x = np.arange(len(types))
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    ax.bar(x, acc, yerr=[low, high], capsize=3, color="#4C78A8", label="accuracy (95% episode bootstrap)")
    ax.scatter(
        x,
        [s["majority_baseline"] * 100 for s in stats],
        marker="_",
        s=400,
        color="#E45756",
        label="majority class",
        zorder=3,
    )
    ax.scatter(
        x, [s["random_baseline"] * 100 for s in stats], marker=".", s=80, color="black", label="random", zorder=3
    )
    ax.set_xticks(x, types, rotation=30)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _frame_views(question, path: str | None):
    """(front, wrist) upright images of a question's frame: its own images, else read from the LIBERO file."""
    if question.images:
        return tuple(np.asarray(i) for i in question.images[:2])
    from .questions import DEFAULT_PATH, _episodes

    ids = parse_id(question.id)
    file = path or (str(DEFAULT_PATH) if ids["set"] == "libero10" else None)
    if file is None or not Path(file).exists():
        return None
    demo, step = ids["frame"].split("/")[-2], int(ids["frame"].rsplit("/t", 1)[1])
    for episode in _episodes(str(Path(file).resolve())):
        if episode.task == ids["task"] and episode.name == demo and step in episode.images:
            return episode.views(step)
    return None


@contextlib.contextmanager
def _in_place(path: Path) -> Iterator[Path]:
    yield path


def _example_frames(
    questions: Sequence,
    rows: dict,
    out_dir: Path,
    count: int,
    path: str | None = None,
    atomic: Callable[[Path], ContextManager[Path]] = _in_place,
) -> list[str]:
    """Markdown of `count` example frames (first frame of the first episodes): views + questions + answers."""
    from PIL import Image

    by_frame: dict[str, list] = defaultdict(list)
    for q in questions:
        by_frame[parse_id(q.id)["frame"]].append(q)
    chosen, seen = [], set()
    for frame, items in by_frame.items():
        episode = parse_id(items[0].id)["episode"]
        if episode not in seen:
            seen.add(episode)
            chosen.append((frame, items))
        if len(chosen) >= count:
            break
    folder = out_dir / EXAMPLES
    folder.mkdir(exist_ok=True)
    lines = []
    for frame, items in chosen:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", frame) + ".png"
        instruction = re.search(r"instruction: (.*)", str(items[0].context))
        lines.append(f"#### {frame}\n")
        if instruction:
            lines.append(f"Instruction: {instruction.group(1)}\n")
        views = _frame_views(items[0], path)
        if views is not None:
            with atomic(folder / name) as target:
                Image.fromarray(np.concatenate(views, axis=1)).save(target, format="PNG")
            lines.append(f"![front and wrist views]({EXAMPLES}/{name})\n")
        described = re.findall(r"^(Front camera.*|Wrist camera.*)$", str(items[0].context), re.M)
        lines.extend(f"> {v}\n" for v in described)
        lines.append("| type | question | gold | chosen | p(chosen) |\n|---|---|---|---|---|")
        for q in items:
            row = rows[q.id]
            text = str(q.context).rsplit("Question: ", 1)[-1].split("\n")[0]
            probability = max(row["probs"]) if row.get("probs") else float("nan")
            mark = "" if row["correct"] else " ✗"
            lines.append(
                f"| {parse_id(q.id)['type']} | {text} | {row['gold']} | {row['choice']}{mark} | {probability:.2f} |"
            )
        lines.append("")
    return lines


def render_markdown(summary: dict, example_lines: list[str]) -> str:
    o = summary["overall"]
    head = (
        f"{MARK}\n## LIBERO offline QA\n\n{o['questions']} questions, {summary['frames']} frames, {o['episodes']} episodes. "
        f"Overall accuracy {_pct(o['accuracy'])}% [{_pct(o['ci95'][0])}, {_pct(o['ci95'][1])}] "
        f"(95% episode bootstrap, {summary['bootstrap']['samples']} samples, seed {summary['bootstrap']['seed']}); "
        f"abstention {_pct(o['abstention_rate'])}%; mean gold NLL "
        f"{'n/a' if o['mean_gold_nll'] is None else format(o['mean_gold_nll'], '.4f')}.\n\n"
    )
    table = [
        "| type | n | accuracy % | 95% CI | majority % (label) | random % | abstain % | gold NLL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary["by_type"].items():
        nll = "n/a" if s["mean_gold_nll"] is None else f"{s['mean_gold_nll']:.3f}"
        table.append(
            f"| {name} | {s['questions']} | {_pct(s['accuracy'])} | [{_pct(s['ci95'][0])}, {_pct(s['ci95'][1])}] | "
            f"{_pct(s['majority_baseline'])} ({s['majority_label']}) | {_pct(s['random_baseline'])} | "
            f"{_pct(s['abstention_rate'])} | {nll} |"
        )
    body = (
        head
        + "\n".join(table)
        + f"\n\n![accuracy per type]({CHART})\n\n### Example frames\n\n"
        + "\n".join(example_lines)
    )
    return body.rstrip() + "\n"


def write_libero_report(
    questions: Sequence,
    responses: Sequence[dict],
    out_dir,
    examples: int = 2,
    path: str | None = None,
    atomic: Callable[[Path], ContextManager[Path]] | None = None,
) -> dict:
    """Write the LIBERO summary, chart, example frames and report section into `out_dir`; return the summary.
    path: the LIBERO file the questions came from (default: the shipped set), read for the example views.
    atomic: `path -> context manager giving the path to write` (a run folder's `jetgym.runs.folder.atomic_file`:
    each file is written under a temporary name and renamed; default: written in place)."""
    atomic = atomic or _in_place
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = _by_id(responses)
    summary = libero_summary(questions, responses)
    with atomic(out / SUMMARY) as target:
        target.write_text(json.dumps(summary, sort_keys=True, indent=2) + "\n", encoding="utf-8")
    with atomic(out / CHART) as target:
        plot_by_type(summary, target)
    section = render_markdown(summary, _example_frames(questions, rows, out, examples, path, atomic))
    report = out / REPORT
    text = report.read_text(encoding="utf-8") if report.exists() else ""
    if MARK in text:
        text = text[: text.index(MARK)]
    with atomic(report) as target:
        target.write_text((text.rstrip() + "\n\n" if text.strip() else "") + section, encoding="utf-8")
    return summary
