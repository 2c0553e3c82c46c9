"""P offline: decision sensitivity of each layer on an unlabeled calibration set.

For every calibration question x (only its context and candidates are read, never gold or labels):
z = the candidate logits with every layer, z_l = the logits when layer l alone is skipped in candidate
paths (the prefix always runs every layer), and
    d_l(x) = rms(ctr(z_l - z)) / max(eps, rms(ctr(z))),   ctr(v) = v - mean(v),  eps = 1e-8;
J_l = mean over the set. Layers are ranked by (J_l, l); a budget k skips the first k.
On attention-only models the prefix runs once per question group and only candidate calls repeat.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

EPS = 1e-8


def _ctr_rms(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def sensitivity(z: Sequence[float], z_skipped: Sequence[float], eps: float = EPS) -> float:
    """d_l(x) of one question."""
    delta = [b - a for a, b in zip(z, z_skipped, strict=True)]
    return _ctr_rms(delta) / max(eps, _ctr_rms(z))


def layer_scores(scorer, questions, progress: bool = True) -> list[list[float]]:
    """d_l(x) per question (rows) and layer (columns)."""
    from tqdm import tqdm

    from .packed import PackedGroup
    from .segmented import score_segmented
    from .trie import CandidateTrie
    from jetgym.scorers.kernels.packing import greedy_groups

    n_layers = scorer.n_layers
    encoded = [scorer.encode(q)[1] for q in questions]
    rows: list[list[float]] = [[] for _ in encoded]
    model = scorer.loaded.model
    capacity = scorer.options.max_batch_tokens
    tries = [CandidateTrie.build(len(e.prefix), e.continuations) for e in encoded]
    bar = tqdm(total=len(encoded) * (n_layers + 1), desc="calibration", unit="pass", disable=not progress)
    if scorer.loaded.kind == "attention":
        costs = [(i, len(e.prefix) + len(t.fed())) for i, (e, t) in enumerate(zip(encoded, tries))]
        for group in greedy_groups(costs, capacity):
            packed = PackedGroup([(encoded[i].prefix, tries[i]) for i in group], capacity)
            packed.run_prefix(model)
            base, _ = packed.run_nodes(model, ())
            bar.update(len(group))
            for layer in range(n_layers):
                skipped, _ = packed.run_nodes(model, (layer,))
                for q, i in enumerate(group):
                    rows[i].append(sensitivity(base[q], skipped[q]))
                bar.update(len(group))
    else:
        for i, (e, trie) in enumerate(zip(encoded, tries)):
            base = score_segmented(model, e.prefix, trie, capacity).logprobs
            bar.update(1)
            for layer in range(n_layers):
                rows[i].append(sensitivity(base, score_segmented(model, e.prefix, trie, capacity, (layer,)).logprobs))
                bar.update(1)
    bar.close()
    return rows


def calibrate(scorer, questions, description: str, progress: bool = True) -> dict:
    """The calibration record: model id, J_l, ranking, and what the set was."""
    if not questions:
        raise ValueError("the calibration set is empty")
    rows = layer_scores(scorer, questions, progress)
    n_layers = scorer.n_layers
    J = [sum(row[layer] for row in rows) / len(rows) for layer in range(n_layers)]
    return {
        "model": scorer.loaded.spec,
        "layers": n_layers,
        "J": J,
        "ranking": sorted(range(n_layers), key=lambda layer: (J[layer], layer)),
        "eps": EPS,
        "questions": len(questions),
        "calibration_set": description,
        "template": scorer.options.template,
        "layer_index_base": 0,
    }


def write_calibration(record: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def plot_sensitivity(record: dict, path: Path, k: int = 6) -> Path:
    """J_l per layer (1-based on the axis, log scale), the k lowest-J layers highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    J = record["J"]
    selected = set(record["ranking"][:k])
    xs = list(range(1, len(J) + 1))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(xs, J, color="0.6", lw=1, zorder=1)
    ax.scatter(xs, J, c=["tab:orange" if i in selected else "tab:blue" for i in range(len(J))], zorder=2, s=22)
    ax.set_yscale("log")
    ax.set_xlabel("layer (1-based)")
    ax.set_ylabel("J_l (mean relative score change)")
    ax.set_title(f"{record['model']}: decision sensitivity, {record['questions']} questions; orange = k={k} pruned")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
