"""Probability calibration of decisions: expected calibration error, Brier score, NLL, reliability diagram,
and a one-temperature fit (Guo et al. 2017).

Everything reads response rows (`Decision.to_dict()`, as in responses.jsonl) or plain score lists:
- scores: `row["scores"]` (the corrected scores) when present, else `row["logprobs"]`;
- probabilities at temperature T: softmax(scores / T) (T = 1 gives the uncalibrated distribution);
- gold: the indices of `row["gold_labels"]` (every label with the gold text) when present, else of `row["gold"]`.
ECE is the top-label ECE (confidence: the chosen candidate's probability) over `bins` equal-width confidence bins, confidence in (k/bins, (k+1)/bins] (0 joins
the first bin): sum over bins of (bin size / n) * |accuracy - mean confidence|. Brier is the multi-class
score, sum over candidates of (p - y)^2 with y = 1 on the gold text (the mass of equivalent labels merged).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from jetgym.scorers.decision import first_argmax, softmax
from jetgym.scorers.types import logsumexp

DEFAULT_BINS = 10


def row_scores(row: dict) -> list[float]:
    return list(row.get("scores") or row["logprobs"])


def row_gold(row: dict) -> list[int] | None:
    """Indices of the gold answer (every label with the gold text); None for ungraded rows."""
    if row.get("gold") is None:
        return None
    labels = row.get("labels") or [str(i) for i in range(len(row["logprobs"]))]
    gold = row.get("gold_labels") or [row["gold"]]
    missing = [g for g in gold if g not in labels]
    if missing:
        raise ValueError(
            f"response {row.get('id')!r}: gold {missing[0]!r} is not one of its labels {labels} "
            "(responses written before labels were recorded: rerun them)"
        )
    return [labels.index(g) for g in gold]


def graded(rows: Sequence[dict]) -> tuple[list[list[float]], list[list[int]]]:
    """(scores, gold indices) of the rows that have a gold answer."""
    pairs = [(row_scores(r), row_gold(r)) for r in rows if r.get("gold") is not None]
    return [s for s, _ in pairs], [g for _, g in pairs]


def expected_calibration_error(
    confidences: Sequence[float], correct: Sequence[bool], bins: int = DEFAULT_BINS
) -> float:
    """Top-label ECE with equal-width bins (see the module notes)."""
    return sum(
        b["count"] * abs(b["accuracy"] - b["confidence"]) for b in reliability(confidences, correct, bins)
    ) / max(len(confidences), 1)


def reliability(confidences: Sequence[float], correct: Sequence[bool], bins: int = DEFAULT_BINS) -> list[dict]:
    """Per non-empty bin: its edges, count, mean confidence and accuracy."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    if len(confidences) != len(correct):
        raise ValueError(f"{len(confidences)} confidences for {len(correct)} outcomes")
    members: list[list[int]] = [[] for _ in range(bins)]
    for i, c in enumerate(confidences):
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"confidence {c} is outside [0, 1]")
        members[min(max(math.ceil(c * bins) - 1, 0), bins - 1)].append(i)
    return [
        {
            "lower": k / bins,
            "upper": (k + 1) / bins,
            "count": len(m),
            "confidence": sum(confidences[i] for i in m) / len(m),
            "accuracy": sum(bool(correct[i]) for i in m) / len(m),
        }
        for k, m in enumerate(members)
        if m
    ]


def brier_score(probs: Sequence[Sequence[float]], gold: Sequence[Sequence[int]]) -> float:
    """Mean multi-class Brier score; equivalent gold labels count as one answer (their mass merged)."""
    total = 0.0
    for p, g in zip(probs, gold, strict=True):
        others = [q for i, q in enumerate(p) if i not in g]
        total += (1.0 - sum(p[i] for i in g)) ** 2 + sum(q * q for q in others)
    return total / max(len(probs), 1)


def mean_nll(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], temperature: float = 1.0) -> float:
    """Mean -log q(gold) under softmax(scores / temperature), by log-sum-exp."""
    total = 0.0
    for s, g in zip(scores, gold, strict=True):
        scaled = [v / temperature for v in s]
        total += logsumexp(scaled) - logsumexp([scaled[i] for i in g])
    return total / max(len(scores), 1)


def metrics(
    scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], temperature: float = 1.0, bins: int = DEFAULT_BINS
) -> dict:
    """Accuracy, mean gold NLL, ECE, Brier and the reliability bins at one temperature."""
    probs = [softmax(s, temperature) for s in scores]
    chosen = [first_argmax(p) for p in probs]
    correct = [c in g for c, g in zip(chosen, gold)]
    confidences = [p[c] for p, c in zip(probs, chosen)]
    return {
        "temperature": temperature,
        "questions": len(scores),
        "accuracy": sum(correct) / len(correct) if correct else None,
        "mean_gold_nll": mean_nll(scores, gold, temperature) if scores else None,
        "ece": expected_calibration_error(confidences, correct, bins) if scores else None,
        "brier": brier_score(probs, gold) if scores else None,
        "bins": reliability(confidences, correct, bins),
    }


def fit_temperature(
    scores: Sequence[Sequence[float]],
    gold: Sequence[Sequence[int]],
    low: float = 1e-3,
    high: float = 1e3,
    iterations: int = 200,
) -> float:
    """The temperature T minimizing the mean gold NLL of softmax(scores / T).

    The NLL is convex in 1/T, so a golden-section search over log T in [low, high] finds the minimum."""
    if not scores:
        raise ValueError("fitting a temperature needs at least one graded question")
    invphi = (math.sqrt(5) - 1) / 2
    a, b = math.log(low), math.log(high)
    loss = lambda log_t: mean_nll(scores, gold, math.exp(log_t))  # noqa: E731
    c, d = b - invphi * (b - a), a + invphi * (b - a)
    fc, fd = loss(c), loss(d)
    for _ in range(iterations):
        if b - a < 1e-9:
            break
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - invphi * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + invphi * (b - a)
            fd = loss(d)
    return math.exp((a + b) / 2)


def plot_reliability(curves: dict[str, dict], path: str | Path, title: str = "Reliability") -> Path:
    """A reliability diagram (accuracy against confidence per bin, one line per curve, the diagonal, bin
    counts as marker sizes) saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 4.4), dpi=110)
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect calibration")
    for name, m in curves.items():
        bins = m["bins"]
        if not bins:
            continue
        ece = "n/a" if m["ece"] is None else f"{m['ece']:.3f}"
        ax.plot(
            [b["confidence"] for b in bins],
            [b["accuracy"] for b in bins],
            marker="o",
            linewidth=1.5,
            label=f"{name} (T={m['temperature']:.3g}, ECE {ece})",
        )
        ax.scatter(
            [b["confidence"] for b in bins],
            [b["accuracy"] for b in bins],
            s=[8 + 120 * b["count"] / max(m["questions"], 1) for b in bins],
            alpha=0.3,
        )
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (top probability)", ylabel="accuracy", title=title)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


RELIABILITY_PNG = "reliability.png"


def calibration_summary(
    responses: Sequence[dict],
    out_dir: str | Path | None = None,
    temperature: float | None = None,
    bins: int = DEFAULT_BINS,
) -> dict | None:
    """The calibration block of a QA summary: metrics of the uncalibrated probabilities (T = 1) and, when a
    temperature other than 1 is given (default: the one the responses were scored with), after it; the
    reliability diagram goes to `<out_dir>/reliability.png`. None when no response is graded."""
    scores, gold = graded(responses)
    if not scores:
        return None
    if temperature is None:
        temperature = float(next((r["temperature"] for r in responses if "temperature" in r), 1.0))
    summary = {"before": metrics(scores, gold, 1.0, bins)}
    if temperature != 1.0:
        summary["after"] = metrics(scores, gold, temperature, bins)
    if out_dir is not None:
        summary["diagram"] = plot_reliability(reliability_curves(summary), Path(out_dir) / RELIABILITY_PNG).name
    return summary


def reliability_curves(calibration: dict) -> dict[str, dict]:
    """The curves of a calibration block's reliability diagram (`plot_reliability`): before and, if any, after."""
    return {
        "uncalibrated": calibration["before"],
        **({"temperature-scaled": calibration["after"]} if "after" in calibration else {}),
    }
