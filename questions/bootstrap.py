"""Bootstrap intervals: the one implementation every report and benchmark uses.

- `bootstrap(values, statistic=None)`: plain: each value its own unit (independent questions, episodes or
  workloads); the statistic defaults to the mean, and may be any function of the resampled values.
- `episode_bootstrap(values, clusters)`: cluster: whole clusters (episodes) are resampled.
- `paired_episode_bootstrap(a, b, clusters)`: the difference of two runs over the same questions, both resampled
  with the same clusters.

Frames of one episode are correlated, so the resampling unit is the episode: each bootstrap sample
draws as many episodes as there are, with replacement, and keeps every question of a drawn episode.
The statistic is the mean over the questions of the sample (episodes weigh by their question count).
Percentile intervals (`numpy.quantile`, linear); `samples` (default 2,000) draws of unit indices from
`numpy.random.default_rng(seed).integers` (`draw_clusters`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np

SAMPLES = 2000
SEED = 0


@dataclass(frozen=True)
class Interval:
    estimate: float  # the statistic on the full data
    low: float
    high: float
    samples: int
    clusters: int
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return asdict(self)


def _cluster_sums(values: Sequence[float], clusters: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray, list]:
    values = np.asarray(values, dtype=float)
    if values.ndim not in (1, 2) or len(values) != len(clusters):
        raise ValueError(f"values and clusters must have the same length, got {len(values)} and {len(clusters)}")
    if len(values) == 0:
        raise ValueError("the bootstrap needs at least one value")
    names = sorted(set(clusters), key=str)
    index = {name: i for i, name in enumerate(names)}
    ids = np.array([index[c] for c in clusters])
    sums = np.zeros((len(names),) + values.shape[1:])
    np.add.at(sums, ids, values)
    counts = np.bincount(ids, minlength=len(names)).astype(float)
    return sums, counts, names


def draw_clusters(n_clusters: int, samples: int = SAMPLES, seed: int = SEED) -> np.ndarray:
    """(samples, n_clusters) cluster indices drawn with replacement."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    return np.random.default_rng(seed).integers(0, n_clusters, size=(samples, n_clusters))


def _interval(estimate: float, stats: np.ndarray, confidence: float, clusters: int) -> Interval:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1 - confidence) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    return Interval(float(estimate), float(low), float(high), len(stats), clusters, confidence)


def bootstrap(
    values: Sequence[Any],
    statistic: Callable[[list], float] | None = None,
    samples: int = SAMPLES,
    seed: int = SEED,
    confidence: float = 0.95,
) -> Interval:
    """Percentile interval of `statistic` (default: the mean) over `values` resampled with replacement, each
    value its own unit. `statistic` receives a list of resampled values (pass indices as the values to
    resample several columns together)."""
    values = list(values)
    if not values:
        raise ValueError("the bootstrap needs at least one value")
    draws = draw_clusters(len(values), samples, seed)
    if statistic is None:
        array = np.asarray(values, dtype=float)
        stats, estimate = array[draws].mean(axis=1), array.mean()
    else:
        stats = np.array([statistic([values[i] for i in row]) for row in draws], dtype=float)
        estimate = statistic(values)
    return _interval(float(estimate), stats, confidence, len(values))


def episode_bootstrap(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    samples: int = SAMPLES,
    seed: int = SEED,
    confidence: float = 0.95,
) -> Interval:
    """Percentile interval of the mean of `values` (e.g. 0/1 correctness), resampling whole clusters."""
    sums, counts, names = _cluster_sums(values, clusters)
    draws = draw_clusters(len(names), samples, seed)
    stats = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    estimate = sums.sum() / counts.sum()
    return _interval(estimate, stats, confidence, len(names))


def paired_episode_bootstrap(
    values_a: Sequence[float],
    values_b: Sequence[float],
    clusters: Sequence[Hashable],
    samples: int = SAMPLES,
    seed: int = SEED,
    confidence: float = 0.95,
) -> Interval:
    """Interval of mean(a) - mean(b) over the same questions, both runs resampled with the SAME clusters."""
    if len(values_a) != len(values_b):
        raise ValueError(f"paired runs need the same questions, got {len(values_a)} and {len(values_b)} values")
    both = np.stack([np.asarray(values_a, dtype=float), np.asarray(values_b, dtype=float)], axis=1)
    sums, counts, names = _cluster_sums(both, clusters)
    draws = draw_clusters(len(names), samples, seed)
    total = counts[draws].sum(axis=1)
    stats = (sums[draws, 0].sum(axis=1) - sums[draws, 1].sum(axis=1)) / total
    estimate = (sums[:, 0].sum() - sums[:, 1].sum()) / counts.sum()
    return _interval(estimate, stats, confidence, len(names))
