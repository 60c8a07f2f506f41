"""A GLUE sweep's summary (``glue.json``'s ``tasks``) and its text table.

Each task's row shows the main metric per learning rate, the best learning rate, the task score, and the
yardstick: the majority class (``metrics.majority``) on the same dev rows. A learning rate where a point
diverged (a non-finite training loss) is shown as such and never chosen as best; the table says when the
best point does not beat the majority class.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..base.escape import text_cell
from ..base.sweep_points import lr_key
from . import metrics as glue_metrics

DIVERGED = "div."


def _per_lr(points: Sequence[Mapping]) -> dict[str, dict[str, Any]]:
    """Returns {lr key: row} of one task's points: each metric's mean over seeds, ``seeds``, ``std`` (with
    several seeds) and ``diverged`` (the number of seeds that diverged, when any)."""
    by_lr: dict[float, list[Mapping]] = {}
    for p in sorted(points, key=lambda p: (p["lr"], p["seed"])):
        by_lr.setdefault(p["lr"], []).append(p)
    per_lr = {}
    for lr, runs in by_lr.items():
        metrics = [run["metrics"] for run in runs]
        row: dict[str, Any] = {m: statistics.fmean(x[m] for x in metrics) for m in metrics[0]}
        row["seeds"] = len(runs)
        if len(runs) > 1:
            row["std"] = {m: statistics.stdev(x[m] for x in metrics) for m in metrics[0]}
        diverged = sum(bool(run.get("diverged")) for run in runs)
        if diverged:
            row["diverged"] = diverged
        per_lr[lr_key(lr)] = row
    return per_lr


def summarize_task(task: str, points: Sequence[Mapping], majority: Mapping[str, Any]) -> dict[str, Any]:
    """Returns a task's summary: {"metric", "best_lr", "best", "score", "per_lr", "majority",
    "beats_majority"}.

    Per-LR values are means over seeds; the best LR is the one with the highest mean main metric on dev
    (the smaller LR on ties) among those where no seed diverged; the score is the mean of the task's
    metrics there (the GLUE benchmark's task score). When every LR diverged, ``best_lr``, ``score`` and
    ``beats_majority`` are None and ``best`` is empty. ``majority`` is the constant-prediction baseline.
    """
    main = glue_metrics.MAIN_METRIC[task]
    per_lr = _per_lr(points)
    finite = [float(k) for k, row in per_lr.items() if not row.get("diverged")]
    best_lr = max(finite, key=lambda lr: (per_lr[lr_key(lr)][main], -lr)) if finite else None
    best = {} if best_lr is None else per_lr[lr_key(best_lr)]
    best = {m: v for m, v in best.items() if m not in ("seeds", "std", "diverged")}
    return {
        "metric": main,
        "best_lr": best_lr,
        "best": best,
        "score": glue_metrics.task_score(task, best) if best else None,
        "per_lr": per_lr,
        "majority": dict(majority),
        "beats_majority": best[main] > majority["metrics"][main] if best else None,
    }


def glue_average(tasks: Mapping[str, Mapping[str, Any]]) -> float | None:
    """Returns the mean task score, None when a task has none (every LR diverged): a mean over fewer
    tasks is not comparable."""
    scores = {t: entry["score"] for t, entry in tasks.items()}
    return None if None in scores.values() else glue_metrics.glue_average(scores)


# What the "*" beside a cell of the table means (the rule of ``summarize_task``)
BEST_MARK_NOTE = (
    "*: the best learning rate, the one whose dev score (the task's metric shown, mean over seeds) is "
    "highest; a tie goes to the smaller learning rate"
)


def _cell(row: Mapping | None, metric: str, best: bool) -> str:
    if row is None:
        return f"{'-':>10}"
    mark = "*" if best else " "
    return f"{DIVERGED:>9}{mark}" if row.get("diverged") else f"{row[metric]:>9.4f}{mark}"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def format_table(summary: Mapping[str, Any]) -> str:
    """Returns the summary as a text table: main metric per LR (best marked *, diverged LRs "div."), best
    LR, score and the majority class's score; notes for diverged LRs, tasks whose best point does not beat
    the majority class, ``--limit`` and the GLUE average. Task and metric names (an earlier glue.json's
    tasks are kept) are put on one line each (``escape.text_cell``): one line per task and note."""
    tasks = summary["tasks"]
    data = summary.get("nfeval", {}).get("data", {})
    lrs = sorted({float(k) for t in tasks.values() for k in t["per_lr"]})
    lr_cells = "".join(f"{lr_key(lr):>10}" for lr in lrs)
    head = f"{'task':<6} {'metric':<11}{lr_cells}{'best_lr':>10}{'score':>8}{'majority':>10}"
    lines, notes = [head, "-" * len(head)], []
    for name, t in tasks.items():
        main, majority = t["metric"], t.get("majority")
        task, metric = text_cell(name), text_cell(main)  # shown
        cells = "".join(_cell(t["per_lr"].get(lr_key(lr)), main, lr == t["best_lr"]) for lr in lrs)
        best_lr = "–" if t["best_lr"] is None else lr_key(t["best_lr"])
        floor = None if majority is None else majority["metrics"][main]
        numbers = f"{best_lr:>10}{_number(t['score']):>8}{_number(floor):>10}"
        lines.append(f"{task:<6} {metric:<11}{cells}{numbers}")
        extra = {m: v for m, v in t["best"].items() if m != main}
        if extra:
            shown = ", ".join(f"{text_cell(m)}={v:.4f}" for m, v in extra.items())
            lines.append(f"{'':<6} at best lr: {shown}")
        if t["best_lr"] is None:
            notes.append(f"{task}: every learning rate diverged; no score")
        elif t.get("beats_majority") is False:
            notes.append(
                f"{task}: the best point ({metric} {t['best'][main]:.4f}) does not beat the majority class "
                f"({floor:.4f})"
            )
        limit = data.get(name, {}).get("limit")
        if limit is not None:
            notes.append(f"{task}: --limit {limit}: the first {limit} train rows and dev rows only")
    if any(row.get("diverged") for t in tasks.values() for row in t["per_lr"].values()):
        notes.insert(0, f"{DIVERGED}: a point's training loss became non-finite there; never chosen as best")
    if any(t["best_lr"] is not None for t in tasks.values()):
        notes.insert(0, BEST_MARK_NOTE)
    notes.append("majority: the most frequent training label (STS-B: the mean score) on every dev row")
    lines += notes
    average = summary["glue_average"]
    lines.append(f"GLUE average over {len(tasks)} task(s): {_number(average)}")
    return "\n".join(lines)
