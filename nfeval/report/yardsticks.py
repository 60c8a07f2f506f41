"""What a leaderboard score is read against: how uncertain it is, and what a model that learned nothing
scores.

Zero-shot cells carry a 95% interval (1.96 standard errors: lm-eval's, else the binomial √(p(1−p)/n)
over the n items scored), and the table ends in a chance row (one over the answer choices per item).
GLUE accuracy cells carry the binomial interval over the dev rows, and the table ends in the
majority-class row that ``nfeval glue`` records (the most frequent training label on every dev row).
"""

from __future__ import annotations

import math
from statistics import mean
from typing import Any

from ..glue.metrics import SPLIT_METRICS
from .leaderboard_read import CHANCE, GLUE_SCORE_METRICS, YARDSTICK, Z95, ZEROSHOT_TASKS


def half_width(value: float, stderr: float | None, n: int | None) -> float | None:
    """Returns the 95% interval's half-width of an accuracy: 1.96 × ``stderr`` when given, else 1.96 ×
    the binomial standard error over ``n`` items; None when neither is known."""
    if stderr is not None and math.isfinite(stderr):
        return Z95 * stderr
    if n:
        return Z95 * math.sqrt(max(0.0, value * (1 - value)) / n)
    return None


def dev_rows(task: str, metric: str, rows: dict | None) -> int | None:
    """Returns the rows of the dev split ``metric`` of ``task`` is computed on, from a GLUE summary's
    ``rows`` per split; None when they were not recorded."""
    if not rows:
        return None
    return rows.get(next(s for s, fns in SPLIT_METRICS[task].items() if metric in fns))


def glue_half_width(task: str, metric: str, value: float, rows: dict | None) -> float | None:
    """Returns the binomial 95% half-width of a GLUE accuracy over its dev split's rows; None for other
    metrics (F1, MCC, correlations) and when the rows were not recorded."""
    if not metric.startswith("accuracy"):
        return None
    return half_width(value, None, dev_rows(task, metric, rows))


def _yardstick_row(name: str, scores: dict[str, float | None]) -> dict[str, Any]:
    """Returns a leaderboard row named ``name`` holding ``scores`` (raw fractions; None: unknown)."""
    cells = {
        t: None if v is None else {"value": v, "stderr": None, "subset": False} for t, v in scores.items()
    }
    return {
        "name": name,
        "fingerprint": None,
        "path": None,
        "parameters": None,
        "architecture": None,
        "tokens": None,
        "flops": None,
        "device_hours": None,
        "lr": None,
        "group": None,
        "reference": YARDSTICK,
        "sources": [],
        "scores": cells,
    }


def chance_row(table: dict[str, Any]) -> dict[str, Any]:
    """Returns the zero-shot table's chance row: one over the answer choices of each column's task."""
    row = _yardstick_row("chance", {c["task"]: CHANCE.get(c["task"]) for c in table["columns"]})
    values = [row["scores"].get(t) for t in ZEROSHOT_TASKS]
    row["average"] = mean(c["value"] for c in values) if all(values) else None
    return row


def majority_row(table: dict[str, Any], models: list[dict], warnings: list[str]) -> dict[str, Any] | None:
    """Returns the GLUE table's majority-class row from the models' summaries (None when none recorded
    it); a summary whose majority class differs (other dev data or ``--limit``) is named in ``warnings``."""
    found: dict[str, dict] = {}
    for model in models:
        for task, entry in model["glue"].items():
            majority = entry.get("majority")
            if majority is None:
                continue
            if task in found and found[task]["metrics"] != majority:
                warnings.append(
                    f"{entry['source']}: the {task} majority class differs from {found[task]['source']}'s "
                    "(other dev data or --limit); the row shows the latter's"
                )
            found.setdefault(task, {"metrics": majority, "source": entry["source"]})
    if not found:
        return None
    columns = table["columns"]
    scores = {c["task"]: found.get(c["task"], {}).get("metrics", {}).get(c["metric"]) for c in columns}
    row = _yardstick_row("majority class", scores)
    task_scores = [
        mean(found[t]["metrics"][m] for m in GLUE_SCORE_METRICS[t]) if t in found else None
        for t in (c["task"] for c in columns)
    ]
    row["average"] = mean(task_scores) if None not in task_scores else None
    return row


def at_or_below_majority(table: dict[str, Any], majority: dict[str, Any] | None) -> list[str]:
    """Returns "MODEL on TASK" for each model cell that does not beat the majority-class row."""
    if majority is None:
        return []
    out = []
    for row in table["rows"]:
        for c in table["columns"]:
            cell, floor = row["scores"].get(c["task"]), majority["scores"].get(c["task"])
            if row["reference"] is None and cell and floor and cell["value"] <= floor["value"]:
                out.append(f"{row['name']} on {c['title']}")
    return out
