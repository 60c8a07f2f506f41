"""Table 3's selection without its bias: the learning rate is chosen on one half of each dev set and the
score reported on the other half.

Every sweep point (task, LR, fine-tuning seed) runs the recipe's epochs and keeps its last epoch's
per-example dev predictions (``select=last_epoch``: the epoch is fixed, not chosen). The dev rows are
split by position, even rows selecting and odd rows reporting; the chosen LR is the one with the best
mean selection-half score over seeds (the smaller LR on ties), and each seed's report-half score at that
LR is what the claims compare, so the reported number never saw the data that picked it.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from ...base.sweep_points import point_dir
from ...glue import data as glue_data
from ...glue import metrics as glue_metrics
from ...glue import predictions as glue_predictions
from ...glue.points import SWEEP

HALVES = ("select", "report")


def present_tasks(glue_dir: str) -> tuple[str, ...]:
    """Returns the GLUE tasks whose train and dev files are in ``glue_dir``, in GLUE's order."""
    found = []
    for task in glue_data.TASKS:
        s = glue_data.spec(task)
        folder = os.path.join(glue_dir, s.folder)
        files = ["train.tsv", *s.dev_files.values()]
        if all(os.path.isfile(os.path.join(folder, f)) for f in files):
            found.append(task)
    return tuple(found)


def half_scores(task: str, splits: dict[str, dict[str, list]]) -> dict[str, float]:
    """Returns {select, report}: the task score on the even and the odd rows of every dev split."""
    out = {}
    for half, start in zip(HALVES, (0, 1)):
        labels = {name: s["labels"][start::2] for name, s in splits.items()}
        preds = {name: s["preds"][start::2] for name, s in splits.items()}
        out[half] = glue_metrics.task_score(task, glue_metrics.compute(task, labels, preds))
    return out


def point_scores(out_dir: str, task: str, lrs: list[float], seeds: list[int]) -> dict[float, list[dict]]:
    """Returns {lr: [half scores of each seed]} from the sweep's stored predictions."""
    return {
        lr: [
            half_scores(task, glue_predictions.read(point_dir(out_dir, SWEEP, task, lr, seed))["splits"])
            for seed in seeds
        ]
        for lr in lrs
    }


def choose(scores: dict[float, list[dict]]) -> dict[str, Any]:
    """Returns {lr, select (mean), report (per seed)}: the LR best on the selection half, and its
    report-half scores."""
    mean = {lr: statistics.fmean(s["select"] for s in per_seed) for lr, per_seed in scores.items()}
    lr = max(mean, key=lambda x: (mean[x], -x))
    return {"lr": lr, "select": mean[lr], "report": [s["report"] for s in scores[lr]]}


def report_size(splits: dict[str, dict[str, list]]) -> int:
    """Returns the number of report-half rows of the smallest dev split (for a binomial SE)."""
    return min(len(s["labels"][1::2]) for s in splits.values())
