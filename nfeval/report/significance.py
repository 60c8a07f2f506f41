"""Differences with confidence: paired statistics for two models scored on the same items.

Both models answered the same items, so the uncertainty of their difference is far smaller than two
independent standard errors suggest. This module gives:

- ``paired_bootstrap``: a percentile interval for any difference of per-resample statistics, resampling
  *items* (the same rows for both models), seeded, 10,000 resamples by default: scipy's
  ``stats.bootstrap(paired=True, vectorized=True)``, batched so memory stays bounded on large tasks.
  (A hand-written index resample draws the very same indices and measured no faster.)
- ``mcnemar``: the exact McNemar p-value, a two-sided binomial test on the discordant pairs
  (``scipy.stats.binomtest``);
- row-wise (vectorised) accuracy, Matthews correlation, Pearson and Spearman for the bootstrap of
  GLUE correlation metrics over examples;
- ``t_interval``: mean ± std with a Student-t interval over seeds (``scipy.stats.t``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

N_RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 0
MAX_BATCH_ELEMENTS = 4_000_000  # index rows drawn at once: bounds memory at ~32 MB per array


def paired_bootstrap(
    difference: Callable[..., np.ndarray],
    arrays: Sequence[Sequence],
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> dict[str, Any]:
    """Returns {"difference", "low", "high", "p", "confidence", "n", "n_resamples", "seed", "method"}.

    ``arrays`` are per-item arrays of equal length (e.g. model A's and model B's outcomes, or the labels
    and both models' predictions); ``difference(*rows)`` maps arrays of shape (batch, n), one resample
    per row, to the (batch,) differences. The point estimate is ``difference`` on the items themselves;
    the interval holds the central ``confidence`` mass of the resampled differences (percentile method),
    and ``p`` is the two-sided percentile p-value: twice the smaller share of resampled differences on
    either side of 0 (with the +1 of a resampling test), so the interval excludes 0 about when p < 1 −
    confidence.
    """
    data = [np.asarray(a) for a in arrays]
    n = len(data[0])
    if n < 2 or any(len(a) != n for a in data):
        raise ValueError(
            f"paired_bootstrap: expected arrays of one length (2 or more items), got {[len(a) for a in data]}"
        )
    result = stats.bootstrap(
        data,
        lambda *rows, axis=-1: difference(*rows),
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        batch=max(1, MAX_BATCH_ELEMENTS // n),
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    resampled = np.asarray(result.bootstrap_distribution)
    tail = min(np.sum(resampled <= 0), np.sum(resampled >= 0))
    p = min(1.0, 2 * (tail + 1) / (len(resampled) + 1))
    point = float(np.asarray(difference(*(a[None, :] for a in data))).reshape(-1)[0])
    return {
        "difference": point,
        "low": float(low),
        "high": float(high),
        "p": float(p),
        "confidence": confidence,
        "n": n,
        "n_resamples": n_resamples,
        "seed": seed,
        "method": "paired bootstrap over items, percentile interval",
    }


def mcnemar(a_correct: Sequence, b_correct: Sequence) -> dict[str, Any]:
    """Returns {"p", "a_only", "b_only"}: the exact (binomial) McNemar test of two models' 0/1 outcomes
    on the same items; ``a_only``/``b_only`` count the items only A / only B got right. p is 1 when no
    item is discordant."""
    a, b = np.asarray(a_correct, dtype=bool), np.asarray(b_correct, dtype=bool)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    discordant = a_only + b_only
    p = 1.0 if discordant == 0 else float(stats.binomtest(a_only, discordant, 0.5).pvalue)
    return {"p": p, "a_only": a_only, "b_only": b_only}


def is_binary(values: Sequence) -> bool:
    """Returns whether every value is 0 or 1 (a per-item accuracy outcome)."""
    arr = np.asarray(values, dtype=float)
    return bool(np.all((arr == 0) | (arr == 1)))


# ---------------------------------------------------------------- metrics of each resample (row-wise)


def accuracy_rows(labels: np.ndarray, preds: np.ndarray) -> np.ndarray:
    """Returns the accuracy of each row."""
    return np.mean(labels == preds, axis=-1)


def f1_rows(labels: np.ndarray, preds: np.ndarray) -> np.ndarray:
    """Returns F1 of the positive class (1) of each row; 0 where nothing is labelled or predicted positive."""
    y, p = labels.astype(bool), preds.astype(bool)
    tp = np.sum(y & p, -1, dtype=float)
    denom = np.sum(y, -1, dtype=float) + np.sum(p, -1, dtype=float)
    return np.divide(2 * tp, denom, out=np.zeros_like(denom), where=denom > 0)


def mcc_rows(labels: np.ndarray, preds: np.ndarray) -> np.ndarray:
    """Returns Matthews correlation of each row of binary labels/predictions; 0 where undefined (as
    scikit-learn's ``matthews_corrcoef``)."""
    y, p = labels.astype(bool), preds.astype(bool)
    tp, tn = np.sum(y & p, -1, dtype=float), np.sum(~y & ~p, -1, dtype=float)
    fp, fn = np.sum(~y & p, -1, dtype=float), np.sum(y & ~p, -1, dtype=float)
    denom = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return np.divide(tp * tn - fp * fn, denom, out=np.zeros_like(denom), where=denom > 0)


def pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Returns Pearson's r of each row; 0 where a row is constant (as nfeval.glue.metrics)."""
    x = x - x.mean(-1, keepdims=True)
    y = y - y.mean(-1, keepdims=True)
    denom = np.sqrt(np.sum(x * x, -1) * np.sum(y * y, -1))
    return np.divide(np.sum(x * y, -1), denom, out=np.zeros_like(denom), where=denom > 1e-12)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Returns Spearman's rho of each row: Pearson's r of average ranks (ties share a rank, as scipy)."""
    return pearson_rows(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


ROW_METRICS = {
    "accuracy": accuracy_rows,
    "f1": f1_rows,
    "mcc": mcc_rows,
    "pearson": pearson_rows,
    "spearman": spearman_rows,
}


def seed_mean_difference(metric: str, seeds_a: int) -> Callable[..., np.ndarray]:
    """Returns ``difference(labels, *preds)`` = mean over A's seeds of the metric minus the mean over B's,
    per row, where ``preds`` holds A's ``seeds_a`` prediction arrays followed by B's (GLUE with --seeds)."""
    fn = ROW_METRICS[metric]

    def difference(labels: np.ndarray, *preds: np.ndarray) -> np.ndarray:
        a, b = preds[:seeds_a], preds[seeds_a:]
        return sum(fn(labels, p) for p in a) / len(a) - sum(fn(labels, p) for p in b) / len(b)

    return difference


def mean_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Returns mean(A) - mean(B) per row: the difference of two per-item averaged scores."""
    return a.mean(-1) - b.mean(-1)


# ---------------------------------------------------------------- seeds


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Returns {"mean", "std", "n", "low", "high", "confidence"} of ``values`` (e.g. one per seed): the
    sample std (ddof 1) and a Student-t interval for the mean; std and interval are None for n < 2."""
    arr = np.asarray(values, dtype=float)
    n = len(arr)
    if n == 0:
        raise ValueError("t_interval: no values")
    out = {
        "mean": float(arr.mean()),
        "std": None,
        "n": n,
        "low": None,
        "high": None,
        "confidence": confidence,
    }
    if n >= 2:
        std = float(arr.std(ddof=1))
        low, high = (
            stats.t.interval(confidence, n - 1, loc=out["mean"], scale=std / np.sqrt(n))
            if std > 0
            else (out["mean"], out["mean"])  # identical values: scipy would give NaN
        )
        out.update(std=std, low=float(low), high=float(high))
    return out
