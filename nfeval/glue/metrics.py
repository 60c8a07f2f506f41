"""GLUE dev metrics, as the GLUE benchmark defines them, computed with scikit-learn and scipy.

CoLA: Matthews correlation. STS-B: Pearson and Spearman correlation. MRPC, QQP: accuracy and F1 of
the positive class (label 1). MNLI: accuracy on dev-matched (``accuracy_m``) and dev-mismatched
(``accuracy_mm``). QNLI, RTE, SST-2: accuracy.

Edge cases: a correlation with a constant input (or fewer than two points) is undefined; scikit-learn
returns 0 for Matthews correlation then, and we report 0 for Pearson and Spearman too (scipy gives
NaN), so that a collapsed model scores "no correlation" and best-LR selection stays well defined.
F1 with no positive prediction is 0 (scikit-learn's ``zero_division=0``).

The yardstick of every GLUE table is the majority class: the most frequent training label (STS-B: the
mean training score) predicted for every dev row, scored with these metrics (``majority``).
"""

from __future__ import annotations

import collections
import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from .specs import SPECS


def accuracy(labels: Sequence, preds: Sequence) -> float:
    """Returns the fraction of predictions equal to the labels."""
    return float(accuracy_score(labels, preds))


def f1(labels: Sequence, preds: Sequence) -> float:
    """Returns F1 of the positive class (label 1); 0 when nothing is predicted or labelled positive."""
    return float(f1_score(labels, preds, pos_label=1, average="binary", zero_division=0))


def mcc(labels: Sequence, preds: Sequence) -> float:
    """Returns Matthews correlation (scikit-learn: 0 when either side is constant)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(matthews_corrcoef(labels, preds))


def _correlation(fn, labels: Sequence, preds: Sequence) -> float:
    x, y = np.asarray(labels, dtype=float), np.asarray(preds, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    value = float(fn(x, y)[0])
    return 0.0 if math.isnan(value) else value


def pearson(labels: Sequence, preds: Sequence) -> float:
    """Returns Pearson's r (scipy); 0 for a constant input, where it is undefined."""
    return _correlation(stats.pearsonr, labels, preds)


def spearman(labels: Sequence, preds: Sequence) -> float:
    """Returns Spearman's rho (scipy); 0 for a constant input, where it is undefined."""
    return _correlation(stats.spearmanr, labels, preds)


# The scorers a task's record (specs.py) names for its metrics.
SCORERS = {"accuracy": accuracy, "f1": f1, "mcc": mcc, "pearson": pearson, "spearman": spearman}
# task -> dev split -> {metric name: function}, from the task records.
SPLIT_METRICS: dict[str, dict[str, dict]] = {
    s.name: {split: {m: SCORERS[f] for m, f in named.items()} for split, named in s.metrics.items()}
    for s in SPECS.values()
}
# The metric that picks the best epoch and the best learning rate.
MAIN_METRIC = {s.name: s.main_metric for s in SPECS.values()}


def compute(task: str, labels: Mapping[str, Sequence], preds: Mapping[str, Sequence]) -> dict[str, float]:
    """Returns {metric: value} for ``task`` from labels and predictions keyed by dev split."""
    out: dict[str, float] = {}
    for split, fns in SPLIT_METRICS[task].items():
        if len(labels[split]) != len(preds[split]):
            raise ValueError(
                f"{task} {split}: {len(preds[split])} predictions for {len(labels[split])} labels"
            )
        for name, fn in fns.items():
            out[name] = fn(labels[split], preds[split])
    return out


def task_score(task: str, metrics: Mapping[str, float]) -> float:
    """Returns the task's GLUE score: the unweighted mean of its metrics (as the GLUE leaderboard)."""
    names = [n for fns in SPLIT_METRICS[task].values() for n in fns]
    return float(np.mean([metrics[n] for n in names]))


def glue_average(scores: Mapping[str, float]) -> float:
    """Returns the unweighted mean of per-task GLUE scores."""
    if not scores:
        raise ValueError("glue_average: no task scores")
    return float(np.mean(list(scores.values())))


def majority(task: str, train_labels: Sequence, dev_labels: Mapping[str, Sequence]) -> dict[str, Any]:
    """Returns the constant-prediction baseline of ``task``: {"prediction", "metrics", "score", "rows"}
    (``rows``: the dev rows per split it was scored on).

    The prediction is the most frequent training label (the smallest on ties; STS-B: the mean training
    score), predicted for every dev row and scored with the task's metrics (a constant has no correlation:
    MCC, Pearson and Spearman are 0).
    """
    if isinstance(train_labels[0], float):
        prediction: Any = statistics.fmean(train_labels)
    else:
        counts = collections.Counter(train_labels)
        prediction = min(counts, key=lambda y: (-counts[y], y))
    preds = {split: [prediction] * len(labels) for split, labels in dev_labels.items()}
    metrics = compute(task, dev_labels, preds)
    rows = {split: len(labels) for split, labels in dev_labels.items()}
    return {"prediction": prediction, "metrics": metrics, "score": task_score(task, metrics), "rows": rows}
